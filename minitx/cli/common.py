"""Pieces shared by the commands: one-line user errors, logging, the decoding and device
options.

Exit statuses of every minitx command: 0 success; 2 a problem with the user's input, files,
settings or environment, reported as one line ``error: <what, where, how to fix>`` on standard
error (``MINITX_DEBUG=1`` shows the traceback); 130 Ctrl-C; 141, quietly, when the reader of
standard output has gone (``minitx-translate ... | head -1``: what a shell reports for a
SIGPIPE death, as ``yes | head -1`` gives); 143 SIGTERM (training saves ``last.ckpt`` first,
the other commands remove their unfinished outputs' temporary files); 1 with a traceback: a
bug in minitx. A full disk under standard output (``> /dev/full``) is a user error: one line,
status 2.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import io
import logging
import math
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from minitx.errors import (  # UsageError: re-exported, the commands import it from here
    DEBUG_ENV,
    ConfigError,
    MinitxError,
    OutputError,
    Terminated,
    UsageError,  # noqa: F401
    debug_requested,
)
from minitx.outputs import dangling_link, make_dirs
from minitx.textio import NO_ROOM, print_stop

if TYPE_CHECKING:
    from minitx.decoding import DecodingConfig
    from minitx.translator import Translator

EXIT_USER_ERROR = 2
"""Exit status for a problem with the user's input, files, settings or environment."""
EXIT_SIGINT = 130
"""Exit status after Ctrl-C, as shells report a SIGINT death."""
EXIT_SIGTERM = 143
"""Exit status after SIGTERM, as shells report a SIGTERM death."""
EXIT_SIGPIPE = 141
"""Exit status when the reader of standard output has gone, as shells report a SIGPIPE death;
nothing is printed (the Unix way: ``yes | head -1`` is quiet too)."""


def user_error_message(exc: BaseException) -> str | None:
    """The one-line message for an error caused by the user's input, files, settings or
    environment; None for anything else (a bug, which keeps its traceback).

    Told by type alone (`minitx.errors`): a `MinitxError`, wherever it was raised; or an
    operating-system error that names a file (no permission, a missing directory).
    """
    if isinstance(exc, MinitxError):
        return str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return None


def report_user_error(exc: BaseException) -> int | None:
    """Print ``error: ...`` for a user error and return exit status 2; None for a bug (or
    when ``MINITX_DEBUG`` asks for tracebacks): re-raise it then."""
    message = user_error_message(exc)
    if message is None or debug_requested():
        return None
    one_line = " ".join(message.split())
    typed = isinstance(exc, MinitxError)  # raised on purpose, its message complete
    hint = "" if typed else f"  (set {DEBUG_ENV}=1 for the traceback)"
    print(f"error: {one_line}{hint}", file=sys.stderr)
    return EXIT_USER_ERROR


def with_negative_value_hint(message: str) -> str:
    """argparse's "argument --X: expected one argument", with how to give a value that starts
    with '-' (``--lr -1e-3`` reads -1e-3 as a flag: argparse takes only plain negative numbers
    such as -2 or -0.5 as values)."""
    missing = re.fullmatch(r"argument (--[\w.-]+)(?:/[^:]*)?: expected one argument", message)
    if missing is None:
        return message
    flag = missing[1]
    return f"{message}; give it one (a value starting with '-' reads as a flag: {flag}=VALUE)"


class OneLineArgumentParser(argparse.ArgumentParser):
    """The argparse parser of every command: a command-line error is one line, ``error:
    <message>  (PROG --help shows the usage)``, exit status 2, without argparse's usage block
    (``--help`` shows it; ``MINITX_DEBUG=1`` keeps argparse's own report). minitx-train's
    jsonargparse parser (`minitx.cli.train_config.OneLineErrorParser`) reports the same way."""

    one_positional: str | None = None
    """The name of a command's one positional argument (minitx-visualize: "SENTENCE"): extra
    words are then an unquoted sentence, and the error says to quote it."""

    def error(self, message: str) -> NoReturn:
        """Print ``error: <message>`` on one line and exit with status 2."""
        if debug_requested():
            super().error(message)
        one_line = with_negative_value_hint(" ".join(message.split()))
        extra = one_line.removeprefix("unrecognized arguments: ")
        if self.one_positional and extra != one_line and not extra.startswith("-"):
            one_line += f"; give one {self.one_positional}: quote it if it has spaces"
        print(f"error: {one_line}  ({self.prog} --help shows the usage)", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)


def finite_float(text: str) -> float:
    """argparse ``type=`` of every number option: a float, neither NaN nor infinite (``--alpha
    nan`` would make every score NaN).

    Raises:
        argparse.ArgumentTypeError: not a number, or not a finite one (argparse reports it,
            naming the option).
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def positive_int(text: str) -> int:
    """argparse ``type=``: a whole number of at least 1 (a count, a size)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse ``type=``: a finite float (`finite_float`) above 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


class _CurrentStderr(logging.StreamHandler):
    """A handler that writes to whatever `sys.stderr` is when a record is emitted."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ sets it; always stderr
        pass


def nonempty_path(text: str, *, expected: str = "a file or directory name") -> Path:
    """argparse ``type=`` of a file or directory argument: never an empty value, which
    ``Path("")`` reads as the current directory (a shell variable such as $OUT unset).
    `expected` says what to give instead (`checkpoint_path` passes its own). A leading ``~``
    the shell left (quoted) is the home directory, as every path of minitx reads it: kept,
    ``--out '~/rel'`` made a folder named ``~`` here.

    Raises:
        argparse.ArgumentTypeError: for an empty or blank value.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"is empty; give {expected} (a shell variable may be unset, or a pattern matched "
            "nothing)"
        )
    return Path(os.path.expanduser(text))  # a ~name of no user stays as it is


def file_path(text: str) -> Path:
    """argparse ``type=`` of a file argument (not a directory): `nonempty_path`, and never a
    value that ends in ``/``, a directory's name: as a `Path` it loses the ``/``, and
    ``--output out.en/`` wrote a file out.en.

    Raises:
        argparse.ArgumentTypeError: for an empty or blank value, or one that ends in ``/``.
    """
    if text.endswith(os.sep):
        raise argparse.ArgumentTypeError(f"{text} ends with {os.sep}: give a file name")
    return nonempty_path(text, expected="a file name")


def path_or_stream(text: str) -> Path | None:
    """A file argument: a path (`file_path`), or None (standard input or output) for ``-``,
    as Unix commands read it; ``./-`` names a file called so. The ``type=`` of
    minitx-translate's ``--input`` and ``--output``; minitx-evaluate checks its ``--json``
    with it.

    Raises:
        argparse.ArgumentTypeError: as `file_path`.
    """
    return None if text == "-" else file_path(text)


class _EachOnce(logging.Filter):
    """Let a message through once (`each_warning_once`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[tuple[str, str]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.getMessage())
        new = key not in self.seen
        self.seen.add(key)
        return new


@contextlib.contextmanager
def each_warning_once() -> Iterator[None]:
    """Within the block, minitx's warnings on standard error say each message once:
    ``minitx-evaluate --beam 1 5`` reads its sources once per beam size, and said the same cut
    or unknown characters each time. (Not for a whole command: a server's or a training's
    warning that comes again is news.)"""
    once = _EachOnce()
    handlers = logging.getLogger("minitx").handlers
    for handler in handlers:
        handler.addFilter(once)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(once)


def show_library_warnings() -> None:
    """Print minitx's warnings (e.g. skipped lines) on standard error, once per process."""
    log = logging.getLogger("minitx")
    if not log.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)


HUB_RETRY_LOGGER = "huggingface_hub.utils._http"
"""The logger of huggingface_hub's HTTP retries (its name is the module's, as logging's are)."""


class FirstRetryNotice(logging.Filter):
    """Drop huggingface_hub's retry lines, but tell the first one in a line of minitx's own,
    so that a user offline knows why nothing happens for half a minute."""

    def __init__(self) -> None:
        super().__init__()
        self.told = False

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.told and record.getMessage().startswith("Retrying in"):
            self.told = True
            logging.getLogger("minitx").warning(
                "the Hugging Face hub does not answer; huggingface_hub tries again, waiting "
                "longer each time, before it gives up (-v shows each try)"
            )
        return False


def datasets_progress_bars(verbose: bool = False) -> None:
    """The datasets progress bars where someone watches them: on a terminal, or when asked
    (`verbose`); in a log file they are carriage-return frames."""
    import datasets

    if verbose or sys.stderr.isatty():
        datasets.enable_progress_bars()
    else:
        datasets.disable_progress_bars()


def hub_verbosity(verbose: bool) -> None:
    """Keep huggingface_hub's warnings off standard error, or (`verbose`) let them through;
    ``HF_HUB_VERBOSITY``, when set, decides instead.

    Offline, loading a hub dataset logs two lines for each of its six tries and waits about
    25 s between the first and the last. Quiet, that is one line at the first retry
    (`FirstRetryNotice`), then the ``error:`` line that says what matters: the hub cannot be
    reached, and how to use local files.
    """
    if os.environ.get("HF_HUB_VERBOSITY"):
        return
    from huggingface_hub.utils import logging as hub_logging

    retries = logging.getLogger(HUB_RETRY_LOGGER)
    for old in [f for f in retries.filters if isinstance(f, FirstRetryNotice)]:
        retries.removeFilter(old)
    if verbose:
        hub_logging.set_verbosity_warning()
        retries.setLevel(logging.NOTSET)
    else:
        hub_logging.set_verbosity_error()
        retries.setLevel(logging.WARNING)  # below the library's ERROR: the filter sees them
        retries.addFilter(FirstRetryNotice())


def _detach_stdout() -> None:
    """Flush standard output what it can take, then point its file descriptor at /dev/null, so
    that Python's flush at exit of what is left does not fail a second time (a traceback)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        sys.stdout.flush()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass  # not a real file (a test's capture): nothing is flushed at exit


def stop_said(sigterm: bool) -> tuple[str, int]:
    """How a stop is said in its line, and the exit status it ends with: a SIGTERM's
    ("terminated (SIGTERM)", 143), else a Ctrl-C's ("interrupted (Ctrl-C)", 130)."""
    if sigterm:
        return "terminated (SIGTERM)", EXIT_SIGTERM
    return "interrupted (Ctrl-C)", EXIT_SIGINT


def stop_while_starting(signum: int, frame: object) -> NoReturn:
    """The SIGINT and SIGTERM handler while a command starts (`minitx.cli.launch`): one line
    and status 130 / 143, at once (SIGTERM's default ended the process unsaid).

    Not a KeyboardInterrupt: raised inside a library's half-done import, it can leave that
    library broken, and what surfaces is another error (numpy's, as a RecursionError). Only
    imports and argument parsing have run, so there is nothing to save or remove.
    """
    what, status = stop_said(signum == signal.SIGTERM)
    print_stop(f"{what} while starting: nothing was done")
    os._exit(status)


def check_stdout() -> None:
    """Refuse to start with standard output closed (``>&-``): Python's `sys.stdout` is then
    None, what is printed vanishes, and the first flush fails.

    Raises:
        OutputError: saying how to run the command instead.
    """
    if sys.stdout is None:
        raise OutputError(
            "standard output is closed (>&-); redirect it to a file or to /dev/null instead"
        )


def check_writable_dir(directory: Path, what: str, setting: str) -> None:
    """Fail before any work (not after an epoch, or a training) when `directory` cannot be
    created or written.

    Raises:
        UsageError: naming the directory, the reason and the setting to change.
    """
    try:
        make_dirs(directory)  # removed again at exit if nothing is written in it
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        reason = (
            dangling_link(directory)
            or f"{exc.strerror or exc}; point {setting} at a writable directory"
        )
        raise UsageError(f"cannot write {what} {directory}: {reason}") from None


def escape_what_stdout_cannot_encode() -> None:
    """Let standard output write a character its encoding lacks (``PYTHONIOENCODING=ascii``, a
    Latin-1 locale, ``LC_ALL=C``, a Windows code page) as a backslash escape (``\\xe4``),
    saying so once on standard error, instead of ending the command, or a training after its
    first validation, in a UnicodeEncodeError. Standard error does the same by Python's
    default. Under a C or POSIX locale Python's own handler, ``surrogateescape``, writes the
    bytes it read undecoded (lone surrogates) as they came; it still does."""
    stream = sys.stdout
    if not isinstance(stream, io.TextIOWrapper) or stream.errors not in _ESCAPED_ERRORS:
        return  # a handler the user chose (PYTHONIOENCODING=ascii:replace) stays
    keeps_bytes = stream.errors == "surrogateescape"
    warned = False

    def escape(exc: UnicodeError) -> tuple[bytes, int]:
        nonlocal warned
        if not isinstance(exc, UnicodeEncodeError):
            raise exc
        out = bytearray()
        for char in exc.object[exc.start : exc.end]:
            if keeps_bytes and 0xDC80 <= ord(char) <= 0xDCFF:  # an undecoded byte, put back
                out.append(ord(char) - 0xDC00)
                continue
            if not warned:
                warned = True
                print(
                    f"warning: standard output's encoding ({stream.encoding}) cannot write "
                    f"{char!r}: such characters are written as backslash escapes; set "
                    "PYTHONIOENCODING=utf-8 (or write to a file where the command has an option)",
                    file=sys.stderr,
                )
            out += char.encode("ascii", "backslashreplace")
        return bytes(out), exc.end

    codecs.register_error(STDOUT_ERRORS, escape)
    stream.reconfigure(errors=STDOUT_ERRORS)


_ESCAPED_ERRORS = ("strict", "surrogateescape")
"""Standard output's error handlers that end in a UnicodeEncodeError on a character its
encoding lacks: Python's defaults, ``surrogateescape`` under a C or POSIX locale."""


STDOUT_ERRORS = "minitx-stdout"
"""The name of standard output's error handler (`escape_what_stdout_cannot_encode`)."""


def work_begins() -> None:
    """From here on a Ctrl-C is a `KeyboardInterrupt` that the command handles (saving what it
    must), no longer the launcher's `stop_while_starting`; and standard output writes what its
    encoding lacks as escapes (`escape_what_stdout_cannot_encode`)."""
    escape_what_stdout_cannot_encode()
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is stop_while_starting:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        if signal.getsignal(signal.SIGTERM) is stop_while_starting:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _terminate(signum: int, frame: object) -> NoReturn:
    raise Terminated


def _terminate_unless_replaced(signum: int, frame: object) -> None:
    if signal.getsignal(signal.SIGTERM) is _terminate_unless_replaced:
        raise Terminated
    # else called by the handler a library put in front of it, which handles the signal


@contextlib.contextmanager
def sigterm_raises(*, until_replaced: bool = False) -> Iterator[None]:
    """Inside the block a SIGTERM raises `Terminated` (in the main thread; elsewhere no signal
    handler can be set), so that the command can say what it stopped and exit clean; after
    it, the handlers from before are back (`signal_handlers_kept`).

    `until_replaced`: only while no other handler has taken its place; a library's own
    (Lightning's under DDP, which calls the one it found too) then handles the signal alone.
    """
    with signal_handlers_kept():
        if threading.current_thread() is threading.main_thread():
            signal.signal(
                signal.SIGTERM, _terminate_unless_replaced if until_replaced else _terminate
            )
        yield


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """After the block, the Ctrl-C and SIGTERM handlers are those from before it, however the
    block ended. Why: a Lightning fit ended by an interrupt leaves its own choice in place (it
    ignores Ctrl-C from then on, or puts back the handlers it found when it started, which
    are `CheckpointOnInterrupt`'s): in a notebook, or any process that goes on, the next
    Ctrl-C would be lost."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing to put back
                signal.signal(signum, handler)


def run_cli(
    run: Callable[[argparse.Namespace], int],
    args: argparse.Namespace,
    *,
    handle_sigterm: bool = True,
    resumes: str = "",
) -> int:
    """Call `run(args)`; a user error becomes ``error: ...`` and exit status 2 (see
    `user_error_message`; a full disk under standard output too), Ctrl-C exit status 130,
    SIGTERM 143 (both after removing the temporary files of unfinished outputs), a reader of
    standard output that has gone a quiet exit status 141; bugs keep their traceback.

    `handle_sigterm` False leaves SIGTERM to its default or to a library (the demo's server).
    `resumes` ends the Ctrl-C and SIGTERM lines of a command that goes on from there when run
    again (``"; run it again to go on"``).
    """
    work_begins()
    show_library_warnings()
    with sigterm_raises() if handle_sigterm else contextlib.nullcontext():
        try:
            check_stdout()
            status = run(args)
            sys.stdout.flush()  # a gone reader or a full disk shows here, not at exit
            return status
        except KeyboardInterrupt as exc:  # what was written stays: say the rest was not done
            what, status = stop_said(isinstance(exc, Terminated))
            print_stop(f"{what}: stopped before the end{resumes}")
            return status
        except BrokenPipeError:  # e.g. `... | head -1`: the reader has gone, nothing left to do
            return reader_gone()
        except Exception as exc:
            status = report_user_error(no_room_for_output(exc))
            if status is None:
                raise
            return status


def reader_gone() -> int:
    """After a `BrokenPipeError` on standard output (``... | head -1``): detach standard output,
    so that the flush at exit stays quiet, and return the exit status, `EXIT_SIGPIPE`."""
    _detach_stdout()
    return EXIT_SIGPIPE


def no_room_for_output(exc: BaseException) -> BaseException:
    """`exc`, or, for a full disk under an output without a name, an `OutputError` saying so
    (standard output detached first): the one ``error:`` line `report_user_error` prints."""
    if isinstance(exc, OSError) and exc.errno in NO_ROOM and exc.filename is None:
        # Files go through textio.atomic_path, whose error names them; this is most
        # likely standard output (`> /dev/full`), which has no name.
        _detach_stdout()
        return OutputError(
            f"cannot write the output (standard output, or a file the command writes): "
            f"{exc.strerror or exc}; free some space there or write somewhere else"
        )
    return exc


def checkpoint_path(text: str) -> Path:
    """argparse ``type=`` of ``--checkpoint``: a path, never an empty one (``Path("")`` is the
    current directory, which the commands then read as a damaged release). A missing path
    written as one (``./``, ``../``, ``/``, ``~``) is refused here: as a `Path` it loses its
    ``./``, and ``./owner/name`` was then tried as a hub repo id."""
    path = nonempty_path(text, expected="a .ckpt file, a release directory or a hub repo id")
    path = path.expanduser()
    if text.startswith(("./", "../", "/", "~")) and not path.exists():
        raise argparse.ArgumentTypeError(
            f"checkpoint not found: {text} (pass a .ckpt file or a release directory; a path "
            "that starts with ./, ../, / or ~ is never read as a hub repo id)"
        )
    return path


def add_checkpoint_argument(parser: argparse.ArgumentParser) -> None:
    """The required ``--checkpoint`` of every inference command (a `Path`): what
    `Translator.from_pretrained` (the one loading path, `minitx.release.load`) accepts."""
    parser.add_argument(
        "--checkpoint",
        required=True,
        type=checkpoint_path,
        help="self-contained minitx .ckpt file, a release directory written by minitx-export, "
        "or the hub repo id (owner/name) of one",
    )


def check_device(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject a ``--device`` torch does not know or minitx does not run on (meta), or CUDA (a
    CUDA device number, MPS) asked for on a machine without (`translator.usable_device`):
    argparse exits with status 2, before anything is loaded."""
    from minitx.translator import usable_device

    try:
        usable_device(args.device)
    except ConfigError as exc:
        parser.error(f"--device {args.device!r}: {exc}")


class _StoreGiven(argparse.Action):
    """Store the value and note that the option was given on the command line (a default
    leaves no note), so that `check_decoding_args` can tell ``--beam 5`` from no ``--beam``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


class StoreOnce(_StoreGiven):
    """`_StoreGiven`, refusing the option a second time: argparse keeps the last one, and
    ``--input a.de --input b.de`` translated b.de alone without a word."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        if getattr(namespace, f"{self.dest}_given", False):
            parser.error(f"{option_string} is given twice: give it once")
        super().__call__(parser, namespace, values, option_string)


SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed")
"""The `DecodingConfig` sampling fields, each set by its option (`option_for`): given only with
``--sample``, or a ``--strategy`` that reads the field."""


def option_for(field: str) -> str:
    """The command-line option that sets a `DecodingConfig` field: ``--beam`` for
    ``beam_size``, else the field's name as an option (``top_p``: ``--top-p``)."""
    return "--beam" if field == "beam_size" else "--" + field.replace("_", "-")


SAMPLE = "sample"
"""The strategy ``--sample`` names (``--sample`` is ``--strategy sample``)."""


def add_decoding_arguments(
    parser: argparse.ArgumentParser,
    *,
    several_beams: bool = False,
    what: str = "",
    batch_size: bool = True,
) -> None:
    """The decoding and device options every inference command shares (``--beam`` takes
    several values when `several_beams`; ``--batch-size`` only when `batch_size`).
    ``--strategy`` offers the strategies registered when the parser is built.
    `check_decoding_args` checks the values and builds the `DecodingConfig`;
    `attention_from_args` gives the attention settings.
    """
    from minitx.decoding import DEFAULT_BATCH_SIZE, DEFAULT_BEAM_SIZE, STRATEGIES, DecodingConfig
    from minitx.decoding.config import MAX_ALPHA
    from minitx.hard_attention import ATTENTION_MODES, HARD_ATTENTION_SCOPES

    suffix = f" {what}" if what else ""
    defaults = DecodingConfig()
    parser.add_argument(
        "--beam",
        type=int,
        nargs="+" if several_beams else None,
        default=[DEFAULT_BEAM_SIZE] if several_beams else DEFAULT_BEAM_SIZE,
        action=_StoreGiven,
        metavar="N",
        help=f"beam size{suffix}; 1 = greedy decoding"
        + ("; several values are scored one after another" if several_beams else "")
        + f" (default: {DEFAULT_BEAM_SIZE})",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES.names(),
        help=f"decoding strategy{suffix}, by its name in minitx.decoding.STRATEGIES: beam "
        "search reads --beam, sampling the sampling options below (default: --beam decides: "
        "greedy for 1, else beam search; --sample is --strategy sample)",
    )
    parser.add_argument(
        "--alpha",
        type=finite_float,
        default=defaults.alpha,
        action=_StoreGiven,
        help="length-penalty exponent ranking beam hypotheses (and samples), 0 to "
        f"{MAX_ALPHA:g}; 0 disables it "
        f"(default: {defaults.alpha})",
    )
    sampling = parser.add_argument_group(
        "sampling",
        "--sample draws from the model's distribution instead of searching (not with --beam); "
        "applied in this order: --temperature, --top-k, --top-p",
    )
    sampling.add_argument(
        "--sample", action="store_true", help=f"sampling decoding{suffix} instead of beam search"
    )
    sampling.add_argument(
        "--temperature",
        type=finite_float,
        metavar="T",
        help=f"divide the logits by T; 0 = argmax (default: {defaults.temperature:g})",
    )
    sampling.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="draw among the K most probable tokens only; 0 = no limit "
        f"(default: {defaults.top_k})",
    )
    sampling.add_argument(
        "--top-p",
        type=finite_float,
        metavar="P",
        help="nucleus: then among the fewest most probable tokens holding probability P; "
        f"1 = no limit (default: {defaults.top_p:g})",
    )
    sampling.add_argument(
        "--seed",
        type=int,
        metavar="S",
        help="random seed; the same seed gives the same samples, in any batch; also seeds "
        f"--attention hard-sample (default: {defaults.seed})",
    )
    hard = parser.add_argument_group(
        "hard attention",
        "replace each row of attention weights by a one-hot row at one allowed key, at "
        "inference only (the model was trained with soft attention)",
    )
    hard.add_argument(
        "--attention",
        choices=ATTENTION_MODES,
        default="soft",
        help="soft: the weights as trained; hard-argmax: all weight on each query's most "
        "probable key; hard-sample: on a key drawn from the weights (seeded by --seed) "
        "(default: soft)",
    )
    hard.add_argument(
        "--hard-attention-scope",
        choices=HARD_ATTENTION_SCOPES,
        help="where a hard --attention applies: cross (the decoder's cross-attention) or all "
        "(every attention) (default: cross)",
    )
    if batch_size:
        parser.add_argument(
            "--batch-size",
            type=positive_int,
            default=DEFAULT_BATCH_SIZE,
            metavar="N",
            help=f"sentences per batch (default: {DEFAULT_BATCH_SIZE})",
        )
    parser.add_argument(
        "--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default: cpu)"
    )
    parser.add_argument(
        "--bf16",
        action="store_true",
        help="run the model under bfloat16 autocast, decoding with a bf16 copy of it (faster on "
        "CPUs with bf16 instructions and GPUs)",
    )


def refuse_repeats(
    parser: argparse.ArgumentParser, flag: str, values: Sequence[object], what: str
) -> None:
    """Refuse a value given twice to a flag of several values (``--beam 1 1``, ``--kinds cross
    cross``): the work would be done twice, or once with the second silently dropped."""
    if twice := list(dict.fromkeys(str(v) for v in values if values.count(v) > 1)):
        parser.error(
            f"{flag} {' '.join(map(str, values))}: {', '.join(twice)} given more than once; "
            f"give each {what} once"
        )


def check_decoding_args(
    parser: argparse.ArgumentParser, args: argparse.Namespace, *, n_best: int | None = None
) -> None:
    """Reject impossible decoding and device options (argparse exits with status 2), then
    build the `DecodingConfig` the options ask for, once: ``args.decoding`` (a single
    ``--beam``) or ``args.decodings`` (``--beam`` value -> its config, in the order given,
    when several are allowed; a value given twice is refused). The commands decode with these.

    Args:
        parser: the command's parser (its `error` reports).
        args: the parsed options of `add_decoding_arguments`.
        n_best: hypotheses per sentence (minitx-translate's ``--n-best``), when given; the
            strategy checks it (`DecodingStrategy.check`), as `DecodingConfig` checks
            ``--beam`` and the sampling options: their errors name the options.
    """
    beams = args.beam if isinstance(args.beam, list) else [args.beam]
    refuse_repeats(parser, "--beam", beams, "beam size")
    named = args.strategy
    if args.sample and named not in (None, SAMPLE):
        parser.error(
            f"--sample and --strategy {named} exclude each other: --sample is --strategy {SAMPLE}"
        )
    if args.sample and getattr(args, "beam_given", False):
        parser.error("--sample and --beam exclude each other: sampling does not search")
    if args.sample:
        args.strategy = SAMPLE
    reads = _options_read(args)
    if named is not None and getattr(args, "beam_given", False) and "beam_size" not in reads:
        parser.error(f"--beam does not apply to --strategy {named}: it reads no beam size")
    given = [
        option_for(field)
        for field in SAMPLING_FIELDS
        if getattr(args, field) is not None and field not in reads
    ]
    if args.attention == "hard-sample":  # its seed is --seed
        given = [option for option in given if option != "--seed"]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        other = f", not with --strategy {named}" if named is not None else ""
        parser.error(f"{', '.join(given)} {verb} only with --sample{other}")
    if args.hard_attention_scope is not None and args.attention == "soft":
        parser.error("--hard-attention-scope applies only with a hard --attention")
    check_device(parser, args)
    changes = {} if n_best is None else {"n_best": n_best}
    try:
        configs = {beam: decoding_from_args(args, beam, **changes) for beam in beams}
    except ConfigError as exc:  # "DecodingConfig.top_p must be ...": "--top-p must be ..."
        parser.error(re.sub(r"DecodingConfig\.(\w+)", lambda m: option_for(m[1]), str(exc)))
    if getattr(args, "alpha_given", False) and all(
        c.strategy == "greedy" for c in configs.values()
    ):
        parser.error(
            "--alpha applies only to beam search (--beam 2 or more) and sampling: greedy "
            "decoding ranks no hypotheses"
        )
    if isinstance(args.beam, list):
        args.decodings = configs
    else:
        args.decoding = configs[args.beam]


def _options_read(args: argparse.Namespace) -> tuple[str, ...]:
    """The `DecodingConfig` fields the chosen strategy reads besides the shared ones
    (`DecodingStrategy.options`); ``("beam_size",)`` when ``--beam`` decides."""
    from minitx.decoding import strategy_for

    return ("beam_size",) if args.strategy is None else strategy_for(args.strategy).options


def beam_of(args: argparse.Namespace, beam: int) -> int | None:
    """The ``--beam`` value a result was decoded with; None when its strategy searches no
    beam (``--sample``, or a ``--strategy`` that reads no beam size)."""
    return beam if "beam_size" in _options_read(args) else None


def decoding_from_args(
    args: argparse.Namespace, beam: int | None = None, **changes: Any
) -> DecodingConfig:
    """The `DecodingConfig` the options ask for (`beam` picks one of several ``--beam``),
    built once per command by `check_decoding_args`: ``--beam`` alone decides between greedy
    (1) and beam search; a ``--strategy`` (which `check_decoding_args` sets for ``--sample``)
    gets the options it reads (`DecodingStrategy.options`).
    """
    from minitx.decoding import DecodingConfig

    beam = args.beam if beam is None else beam
    if args.strategy is None:
        return DecodingConfig.for_beam(beam, alpha=args.alpha, **changes)
    reads = _options_read(args)
    settings = {f: getattr(args, f) for f in SAMPLING_FIELDS if getattr(args, f) is not None}
    settings = {field: value for field, value in settings.items() if field in reads}
    if "beam_size" in reads:
        settings["beam_size"] = beam
    return DecodingConfig(strategy=args.strategy, alpha=args.alpha, **settings, **changes)


def attention_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The `Translator.set_attention` keywords (mode, scope, seed) the ``--attention`` options
    ask for."""
    return {
        "mode": args.attention,
        "scope": args.hard_attention_scope or "cross",
        "seed": 0 if args.seed is None else args.seed,
    }


def load_translator(args: argparse.Namespace) -> Translator:
    """The `Translator` the options ask for: ``--checkpoint`` loaded on ``--device`` (under
    ``--bf16``), with the ``--attention`` settings (`attention_from_args`)."""
    import torch

    from minitx import hardware
    from minitx.translator import Translator

    translator = Translator.from_pretrained(args.checkpoint, device=args.device, bf16=args.bf16)
    translator.set_attention(**attention_from_args(args))
    decodings = getattr(args, "decodings", None) or {0: getattr(args, "decoding", None)}
    for decoding in decodings.values():  # before any input is read, or a warning printed
        if decoding is not None and decoding.strategy == "beam":
            decoding.check_beam_fits(translator.model.config.tgt_vocab_size)
    if args.bf16 and translator.device.type == "cpu" and not hardware.cpu_has_fast_bf16():
        # Training falls back to fp32 here; the user asked for bf16, so keep it and say why
        # it is slow.
        capability = torch.backends.cpu.get_cpu_capability()
        print(
            f"note: --bf16: this CPU ({capability}) has no bf16 instructions, so bf16 is "
            "emulated and decodes several times slower than fp32; leave out --bf16 here",
            file=sys.stderr,
            flush=True,
        )
    return translator


def describe_attention(args: argparse.Namespace) -> str:
    """Short label of a hard ``--attention`` for printed results, e.g. "hard-argmax
    cross-attention" or "hard-sample attention everywhere (seed 0)"; "" for soft attention."""
    settings = attention_from_args(args)
    if settings["mode"] == "soft":
        return ""
    where = "cross-attention" if settings["scope"] == "cross" else "attention everywhere"
    seed = f" (seed {settings['seed']})" if settings["mode"] == "hard-sample" else ""
    return f"{settings['mode']} {where}{seed}"


def decoding_label(decoding: DecodingConfig, args: argparse.Namespace) -> str:
    """How printed results name a decoding: "greedy", or with a hard ``--attention`` e.g.
    "greedy, hard-argmax cross-attention" (`describe_attention`)."""
    return ", ".join(filter(None, [decoding.describe(), describe_attention(args)]))


@contextlib.contextmanager
def sentence_progress(total: int | None, decoding: str = "") -> Iterator[Callable[[int], None]]:
    """Show translation progress on standard error; yields the callback for `Translator`.

    On a terminal: a rich progress bar with sentences done / total and sentences/s. Otherwise
    (a log file, a pipe): no bar frames, only one line at the end, e.g.
    ``greedy: translated 200 sentences in 19.1 s (10.5 sentences/s)``, where `decoding` names
    the decoding (no prefix when empty). Translations themselves never go through here.
    """
    prefix = f"{decoding}: " if decoding else ""
    start = time.perf_counter()
    if sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[rate]} sentences/s"),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=Console(stderr=True)) as bar:
            task = bar.add_task(f"{prefix}translating", total=total, rate="-")

            def advance(done: int) -> None:
                bar.advance(task, done)
                seconds = time.perf_counter() - start
                rate = bar.tasks[task].completed / max(seconds, 1e-9)
                bar.update(task, rate=f"{rate:.1f}")

            yield advance
        return
    done, translated = 0, start

    def count(n: int) -> None:
        nonlocal done, translated
        done += n
        translated = time.perf_counter()  # what follows the last batch (scoring) is not translating

    yield count
    seconds = (translated if done else time.perf_counter()) - start
    print(
        f"{prefix}translated {done} sentence{'' if done == 1 else 's'} in {seconds:.1f} s "
        f"({done / max(seconds, 1e-9):.1f} sentences/s)",
        file=sys.stderr,
        flush=True,
    )
