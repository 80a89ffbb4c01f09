"""Pieces shared by the commands: one-line user errors, logging, loading a checkpoint.

Exit statuses of every minitx command: 0 success; 2 a problem with the user's input, files,
settings or environment, reported as one line ``error: <what, where, how to fix>`` on standard
error (``MINITX_DEBUG=1`` shows the traceback); 130 Ctrl-C; 143 SIGTERM (training only, after
saving ``last.ckpt``); 1 with a traceback: a bug in minitx.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minitx.errors import DEBUG_ENV, ConfigError, MinitxError, debug_requested

if TYPE_CHECKING:
    from minitx.translator import Translator

EXIT_USER_ERROR = 2
"""Exit status for a problem with the user's input, files, settings or environment."""
EXIT_SIGINT = 130
"""Exit status after Ctrl-C, as shells report a SIGINT death."""


class UsageError(Exception):
    """A problem with the user's input; reported as ``error: ...`` with exit status 2."""


_DATA_ERRORS = (OSError, ConnectionError, UnicodeError, ValueError)
"""Exception types that the data layer raises, with its own message, for the user's files."""


def _raised_by_data_layer(exc: BaseException) -> bool:
    """Whether `exc` comes from minitx/data/, tokenizer.py or textio.py (the innermost minitx
    frame), i.e. the data layer reporting a problem with the user's corpus or paths."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if f"{os.sep}minitx{os.sep}" in f.filename]
    if not ours:
        return False
    origin = Path(ours[-1].filename)
    return origin.parent.name == "data" or origin.name in ("tokenizer.py", "textio.py")


def user_error_message(exc: BaseException) -> str | None:
    """The one-line message for an error caused by the user's input, files, settings or
    environment; None for anything else (a bug, which keeps its traceback).

    User errors: `UsageError`; `ConfigError` (an impossible setting); errors with a
    ``user_error = True`` class attribute (training's divergence and resume checks); errors
    the data layer raises for a corpus or path; operating-system errors naming a file (no
    permission, disk full, missing directory).
    """
    if isinstance(exc, (UsageError, ConfigError)) or getattr(exc, "user_error", False):
        return str(exc)
    if isinstance(exc, _DATA_ERRORS) and _raised_by_data_layer(exc):
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
    typed = isinstance(exc, (UsageError, MinitxError))  # raised on purpose, message complete
    hint = "" if typed else f"  (set {DEBUG_ENV}=1 for the traceback)"
    print(f"error: {one_line}{hint}", file=sys.stderr)
    return EXIT_USER_ERROR


class _CurrentStderr(logging.StreamHandler):
    """A handler that writes to whatever `sys.stderr` is when a record is emitted."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:  # StreamHandler.__init__ sets it; always stderr
        pass


def show_library_warnings() -> None:
    """Print minitx's warnings (e.g. skipped lines) on standard error, once per process."""
    log = logging.getLogger("minitx")
    if not log.handlers:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)


def run_cli(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Call `run(args)`; a user error becomes ``error: ...`` and exit status 2 (see
    `user_error_message`), Ctrl-C exit status 130; bugs keep their traceback."""
    show_library_warnings()
    try:
        return run(args)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return EXIT_SIGINT
    except Exception as exc:
        status = report_user_error(exc)
        if status is None:
            raise
        return status


def check_arguments_utf8(arguments: dict[str, str]) -> None:
    """Reject command-line arguments (name -> value) that were not valid UTF-8, with a
    `UsageError` naming the argument and the byte."""
    from minitx.textio import check_utf8_argument

    for name, value in arguments.items():
        try:
            check_utf8_argument(value, name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None


CHECKPOINT_HELP = (
    "self-contained minitx .ckpt file, a release directory written by minitx-export, or the "
    "hub repo id (owner/name) of one"
)
"""Help of every inference command's ``--checkpoint``: what `load_translator` accepts."""


def load_translator(path: Path, *, device: str, bf16: bool) -> Translator:
    """`Translator.from_checkpoint` for a local `.ckpt` or release directory,
    `Translator.from_pretrained` for anything else (a hub repo id), with every loading problem
    turned into a `UsageError`."""
    import torch

    from minitx.translator import CheckpointError, Translator

    try:
        torch_device = torch.device(device)
    except RuntimeError as exc:
        raise UsageError(f"--device {device!r}: {exc}") from None
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    try:
        if Path(path).exists():  # a .ckpt file or a release directory
            return Translator.from_checkpoint(path, device=torch_device, bf16=bf16)
        return Translator.from_pretrained(path, device=torch_device, bf16=bf16)  # a hub repo id
    except (FileNotFoundError, CheckpointError) as exc:
        raise UsageError(str(exc)) from None


class _StoreGiven(argparse.Action):
    """Store the value and note that the option was given on the command line (a default
    leaves no note), so that `check_decoding_args` can tell ``--beam 5`` from no ``--beam``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


SAMPLING_OPTIONS = {
    "temperature": "--temperature",
    "top_k": "--top-k",
    "top_p": "--top-p",
    "seed": "--seed",
}
"""`DecodingConfig` sampling field -> its command-line option (given only with ``--sample``)."""


def add_decoding_arguments(
    parser: argparse.ArgumentParser,
    *,
    several_beams: bool = False,
    what: str = "",
    batch_size: bool = True,
) -> None:
    """The decoding and device options every inference command shares.

    Adds ``--beam`` (default `DEFAULT_BEAM_SIZE`; 1 = greedy; several values when
    `several_beams`), ``--alpha``, sampling (``--sample`` with ``--temperature``,
    ``--top-k``, ``--top-p``, ``--seed``), hard attention (``--attention``,
    ``--hard-attention-scope``), ``--batch-size`` (unless `batch_size` is False),
    ``--device`` and ``--bf16``. Build the `DecodingConfig` with `decoding_from_args` and the
    attention settings with `attention_from_args`; check the values with `check_decoding_args`.
    """
    from minitx.attention import ATTENTION_MODES
    from minitx.decoding import DEFAULT_BEAM_SIZE, DecodingConfig
    from minitx.model import HARD_ATTENTION_SCOPES

    suffix = f" {what}" if what else ""
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
        "--alpha",
        type=float,
        default=1.0,
        help="length-penalty exponent ranking beam hypotheses (and samples); 0 disables it "
        "(default: 1.0)",
    )
    sampling = parser.add_argument_group(
        "sampling",
        "--sample draws from the model's distribution instead of searching (not with --beam); "
        "applied in this order: --temperature, --top-k, --top-p",
    )
    sampling.add_argument(
        "--sample", action="store_true", help=f"sampling decoding{suffix} instead of beam search"
    )
    defaults = DecodingConfig()
    sampling.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        help=f"divide the logits by T; 0 = argmax (default: {defaults.temperature:g})",
    )
    sampling.add_argument(
        "--top-k",
        type=int,
        metavar="K",
        help="draw among the K most probable tokens only; 0 = no limit (default: 0)",
    )
    sampling.add_argument(
        "--top-p",
        type=float,
        metavar="P",
        help="nucleus: then among the fewest most probable tokens holding probability P; "
        "1 = no limit (default: 1)",
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
            type=int,
            default=64,
            metavar="N",
            help="sentences per batch (default: 64)",
        )
    parser.add_argument(
        "--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default: cpu)"
    )
    parser.add_argument("--bf16", action="store_true", help="run the model under bfloat16 autocast")


def check_decoding_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject impossible decoding options (argparse exits with status 2)."""
    beams = args.beam if isinstance(args.beam, list) else [args.beam]
    if any(beam < 1 for beam in beams):
        parser.error(f"--beam must be >= 1, got {args.beam}")
    if getattr(args, "batch_size", 1) < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.sample and getattr(args, "beam_given", False):
        parser.error("--sample and --beam exclude each other: sampling does not search")
    given = [
        option for field, option in SAMPLING_OPTIONS.items() if getattr(args, field) is not None
    ]
    if args.attention == "hard-sample":  # its seed is --seed
        given = [option for option in given if option != "--seed"]
    if given and not args.sample:
        verb = "applies" if len(given) == 1 else "apply"
        parser.error(f"{', '.join(given)} {verb} only with --sample")
    if args.hard_attention_scope is not None and args.attention == "soft":
        parser.error("--hard-attention-scope applies only with a hard --attention")
    try:
        decoding_from_args(args, beams[0])
    except ConfigError as exc:
        parser.error(str(exc))


def decoding_from_args(args: argparse.Namespace, beam: int | None = None, **changes: Any):
    """The `DecodingConfig` the options ask for (`beam` picks one of several ``--beam``;
    ignored under ``--sample``)."""
    from minitx.decoding import DecodingConfig

    if getattr(args, "sample", False):
        sampling = {f: getattr(args, f) for f in SAMPLING_OPTIONS if getattr(args, f) is not None}
        return DecodingConfig(strategy="sample", alpha=args.alpha, **sampling, **changes)
    beam = args.beam if beam is None else beam
    return DecodingConfig.for_beam(beam, alpha=args.alpha, **changes)


def attention_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The `Translator.set_attention` keywords (mode, scope, seed) the ``--attention`` options
    ask for."""
    return {
        "mode": args.attention,
        "scope": args.hard_attention_scope or "cross",
        "seed": 0 if args.seed is None else args.seed,
    }


def describe_attention(args: argparse.Namespace) -> str:
    """Short label of a hard ``--attention`` for printed results, e.g. "hard-argmax
    cross-attention" or "hard-sample attention everywhere (seed 0)"; "" for soft attention."""
    settings = attention_from_args(args)
    if settings["mode"] == "soft":
        return ""
    where = "cross-attention" if settings["scope"] == "cross" else "attention everywhere"
    seed = f" (seed {settings['seed']})" if settings["mode"] == "hard-sample" else ""
    return f"{settings['mode']} {where}{seed}"


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
    done = 0

    def count(n: int) -> None:
        nonlocal done
        done += n

    yield count
    seconds = time.perf_counter() - start
    print(
        f"{prefix}translated {done} sentences in {seconds:.1f} s "
        f"({done / max(seconds, 1e-9):.1f} sentences/s)",
        file=sys.stderr,
        flush=True,
    )
