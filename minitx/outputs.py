"""Output paths the commands may replace, and the rules that keep the user's files safe.

A command that replaces an existing output must never take anything else with it. For every
command:

- An output **directory** is replaced (``--force``; minitx-experiment's results folders at
  each call) only when the same command wrote it: it
  holds the marker file `MARKER`, which minitx puts into every directory it writes whole,
  naming what it holds, or it is empty. A directory of the user's own is refused, whatever
  the flags, and so is one minitx wrote that now holds files it did not write (the marker
  lists the files it wrote) or another command's output.
- Never the current directory or one of its ancestors (``.``, ``..``, ``/``), never a
  directory that holds an input, never an input itself.
- An output **file** is never one of the command's inputs, nor a file of another command's
  output (a directory minitx wrote whole; a release, by its files' names), and a text output
  (translations, hypotheses, a report) never replaces a file of binary data: a checkpoint,
  model weights.
- A directory is replaced by writing the new one under a temporary name beside it and then
  swapping the two by renames (`written_whole`, `replace_dir`): a failure at any point leaves
  the old one whole.
- A training run gets a directory of its own, never one another run has (`claim_run_dir`),
  and no second process trains in it while it runs (`hold_run_dir`).

Standard library only (plus `minitx.errors`), so any layer can use it.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import io
import itertools
import json
import logging
import os
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from minitx.errors import OutputError

try:
    import fcntl
except ImportError:  # Windows: no advisory locks, so a run directory is not guarded there
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

MARKER = ".minitx-output"
"""The file that marks a directory as written by minitx (JSON: what kind, and the files written:
`--force` replaces the directory only while it holds no others)."""


def check_output_dir(
    out: str | os.PathLike[str],
    *,
    inputs: Sequence[str | os.PathLike[str]] = (),
    force: bool = False,
    flag: str = "--out",
    kind: str | None = None,
    replacer: str = "--force",
) -> None:
    """Refuse an output directory that writing (or replacing) would make unsafe.

    Args:
        out: the directory the command will create, or replace.
        inputs: the files and directories the command reads (a checkpoint, say).
        force: whether the user asked to replace an existing `out`.
        flag: the option that named `out`, for messages.
        kind: what the command writes (`written_whole`'s `kind`); `--force` replaces only a
            directory of the same kind.
        replacer: what would replace `out`, for messages: the flag, or a command that always
            rewrites its own output directory (and passes `force=True`).

    Raises:
        OutputError: `out` is the current directory or one of its ancestors; it is, holds or
            lies inside an input; it is a file; it exists and `force` is False; it exists,
            is not empty and holds no `MARKER` (minitx did not write it), another `kind` of
            output, or files the marker does not list (the user's, added since); or the
            directory it would be written in takes no new file (`check_dir_takes_files`).
    """
    out = Path(out)
    where = out.resolve()
    check_not_the_working_dir(out, flag)
    for item in inputs:
        source = Path(item).resolve()
        if source.is_relative_to(where) or where.is_relative_to(source):
            raise OutputError(
                f"{flag} {out} holds (or is) the input {item}; write to a directory of its own"
            )
    if not out.exists():
        if blocked := file_in_the_way(out.parent):
            raise OutputError(f"{flag} {out}: {blocked}")
        check_dir_takes_files(out, flag)
        return
    if not out.is_dir():
        raise OutputError(f"{flag} {out} is a file; give a directory")
    # asked before --force is suggested: it would lead nowhere for such a directory
    if refused := _why_force_refuses(out, flag, kind, replacer):
        raise OutputError(f"{flag} {out} {refused}")
    if not force:
        raise OutputError(f"{flag} {out} exists already; pass --force to replace it")
    check_dir_takes_files(out, flag)


def check_not_the_working_dir(out: str | os.PathLike[str], flag: str) -> None:
    """Refuse an output directory that is the current directory or holds it: replaced whole,
    it would take the working directory with it (a rename onto it fails with EBUSY).

    Raises:
        OutputError: naming `flag` and a directory to give instead.
    """
    out = Path(out)
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise OutputError(
            f"{flag} {out} is the current directory or one of its parents; minitx never writes "
            f"over it: give a new directory, e.g. {flag} {out / 'model'}"
        )


def _why_force_refuses(out: Path, flag: str, kind: str | None, replacer: str) -> str | None:
    """Why `replacer` (``--force``) would not replace the existing directory `out`, for the
    message after its name; None when it would (minitx wrote it, or it is empty)."""
    if not (out / MARKER).is_file():
        if any(out.iterdir()):  # a minitx-export release has none either: it is not this kind
            return (
                f"has no {MARKER} file, which marks what this command wrote, so {replacer} "
                f"does not replace it; move it away yourself or choose another {flag}"
            )
        return None
    found = _marker(out).get("kind")
    if kind is not None and found is not None and found != kind:
        return (
            f"holds minitx output of another kind ({found}, not {kind}), so {replacer} does "
            f"not replace it; choose another {flag}"
        )
    written = _files_written(out)
    if written is None:
        return (
            f"was written by an older minitx, whose {MARKER} file lists no files, so {replacer} "
            f"cannot tell yours from its own; delete it yourself or choose another {flag}"
        )
    added = sorted(set(_files_below(out)) - set(written))
    if added:
        shown = ", ".join(added[:3]) + (", ..." if len(added) > 3 else "")
        return (
            f"holds files minitx did not write ({shown}), so {replacer} does not replace it; "
            f"move them away first or choose another {flag}"
        )
    return None


def _files_below(directory: Path) -> list[str]:
    """Every file (or link) below `directory`, as POSIX paths relative to it, but `MARKER`."""
    found = (p for p in directory.rglob("*") if not p.is_dir() or p.is_symlink())
    return sorted(p.relative_to(directory).as_posix() for p in found if p.name != MARKER)


def _files_written(directory: Path) -> list[str] | None:
    """The files `MARKER` says minitx wrote into `directory`; None when it lists none (an older
    minitx wrote it, or it was damaged): then no file can be told to be minitx's."""
    files = _marker(directory).get("files")
    return [name for name in files if isinstance(name, str)] if isinstance(files, list) else None


def _marker(directory: Path) -> dict:
    """The JSON record of `directory`'s `MARKER`; empty when it is missing or damaged."""
    try:
        record = json.loads((directory / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def is_standard_output(
    path: str | Path, stream: TextIO | None = None, *, pipe: bool = False
) -> bool:
    """Whether `path` is the regular file this process's standard output (or `stream`)
    already writes to (``/dev/stdout``, where the shell redirected it to a file): a command
    writes there through the stream, as for ``-``; replaced by a rename, a ``>> log`` would
    lose the log. A terminal or a pipe is no such file (it is written in place anyway).
    With `pipe`, the other way round: whether `path` is the pipe, socket or terminal the
    stream is, where a file written in place mixes its lines with the stream's."""
    stream = stream or sys.stdout
    try:
        ours = os.fstat(stream.fileno())
        theirs = os.stat(path)
        if pipe:
            kind = stat.S_ISFIFO(ours.st_mode) or stat.S_ISSOCK(ours.st_mode) or stream.isatty()
        else:
            kind = stat.S_ISREG(ours.st_mode)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False  # no such file, or a stream without a file (captured)
    return kind and _one_file(ours, theirs)


def _one_file(one: os.stat_result, other: os.stat_result) -> bool:
    """Whether two `os.stat` results are of one file (st_ino 0: no inode numbers, Windows'
    consoles and NUL, so nothing to compare)."""
    return one.st_ino != 0 and (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def same_regular_file(first: TextIO | None, second: TextIO | None) -> bool:
    """Whether two streams (standard input and output, say) read and write one regular file."""
    try:
        one, other = os.fstat(first.fileno()), os.fstat(second.fileno())
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False  # a stream without a file (captured, closed, None)
    return stat.S_ISREG(one.st_mode) and _one_file(one, other)


def check_output_file(
    out: str | os.PathLike[str],
    *,
    inputs: Sequence[str | os.PathLike[str]] = (),
    flag: str = "--output",
    text: bool = True,
) -> None:
    """Refuse, before any work, an output file that cannot be created, that is one of the
    inputs (it would be replaced before it is read whole), or, when the command writes `text`,
    that holds binary data (a mistyped ``--output model.ckpt`` replaced the checkpoint).

    Raises:
        OutputError: `out` is a directory, its directory does not exist, it is the same file
            as an input, `text` and it exists with a NUL byte in its first 4 KiB (text
            never has one; checkpoints, safetensors and sentencepiece models do), it is one of
            the files of a directory minitx wrote whole (`MARKER`), or no file can be created
            in its directory.
    """
    out = Path(out)
    if out.is_dir():
        raise OutputError(f"{flag} {out} is a directory; give a file name inside it")
    if not out.parent.is_dir():
        missing = f"directory {out.parent} does not exist; create it first"
        raise OutputError(f"{flag} {out}: {file_in_the_way(out.parent) or missing}")
    for item in inputs:
        source = Path(item)
        if out.resolve() == source.resolve() or (
            out.exists() and source.exists() and os.path.samefile(out, source)
        ):
            raise OutputError(f"{flag} {out} is also an input; write to another file")
    for name, stream in (("standard output", sys.stdout), ("standard error", sys.stderr)):
        if is_standard_output(out, stream):  # the rename would replace the shell's file whole
            raise OutputError(
                f"{flag} {out} is the file this command's {name} goes to; write to a file of "
                "its own"
            )
    if text and out.is_file() and _holds_binary(out):
        raise OutputError(
            f"{flag} {out} holds binary (or UTF-16) data, a checkpoint or model weights, say, "
            "which a text output never replaces; choose another name or move the file away"
        )
    if out.is_file() and (written_by := _written_into(out)):
        raise OutputError(
            f"{flag} {out} is a file of {written_by}, another command's output, which this "
            "command never replaces; choose another name"
        )
    if out.is_file() or not out.exists():  # a device or a pipe is written in place
        # the file is written beside its target and renamed: try that directory now, not
        # after an evaluation of hours (a read-only directory, /proc)
        check_takes_files(out.resolve().parent, out, flag)


def _written_into(out: Path) -> str | None:
    """The directory minitx wrote whole (it holds `MARKER`) that `out` is one of the files of,
    named with its kind; None when there is none. Its files are then all minitx's where the
    marker lists none (an older minitx wrote it)."""
    out = out.resolve()
    for directory in out.parents:
        if (directory / MARKER).is_file():
            files = _files_written(directory)
            name = out.relative_to(directory).as_posix()
            if files is None or name in files or name == MARKER:
                kind = _marker(directory).get("kind")
                return f"the {kind} output {directory}" if kind else f"the output {directory}"
            return None
    return None


def check_takes_files(where: Path, out: str | os.PathLike[str], flag: str) -> None:
    """Refuse the output `out` (given as `flag`) when the directory `where`, in which it
    would be written, takes no new file: a read-only place, /proc, a missing directory.

    Raises:
        OutputError: naming `flag`, `out`, `where` and the system's reason.
    """
    try:
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as exc:
        raise OutputError(
            f"{flag} {out}: cannot write in {where} ({exc.strerror or exc}); choose a "
            "directory you can write in"
        ) from None


def check_dir_takes_files(out: str | os.PathLike[str], flag: str) -> None:
    """`check_takes_files` for the output directory `out`: it is written beside itself
    (`written_whole`), in its nearest existing parent when its parents are still to create."""
    where = next(p for p in Path(out).resolve().parents if p.exists())
    check_takes_files(where, out, flag)


def _holds_binary(path: Path) -> bool:
    """Whether the file's first 4 KiB hold a NUL byte; False when it cannot be read (writing
    it then fails with its own message)."""
    try:
        with path.open("rb") as f:
            return b"\0" in f.read(4096)
    except OSError:
        return False


def file_in_the_way(directory: Path) -> str | None:
    """For an error message: the file that stands where `directory` or one above it would be
    (``mkdir -p`` fails there), and what to do; None when there is none."""
    parents = (directory, *directory.parents)
    blocking = next((p for p in parents if p.exists() and not p.is_dir()), None)
    return None if blocking is None else f"{blocking} is a file, not a directory; give another path"


def dangling_link(directory: Path) -> str | None:
    """For an error message: the link at `directory` or above it whose target does not exist
    (``mkdir -p`` there fails with "File exists"), and what to do; None when there is none."""
    for path in (directory, *directory.parents):
        if path.is_symlink() and not path.exists():
            return (
                f"{path} is a link to {os.readlink(path)}, which does not exist; create that "
                "directory or give another path"
            )
    return None


def files_read_from(source: str | os.PathLike[str]) -> list[Path]:
    """The local files a command reads from `source`, for `check_output_file`'s `inputs`: the
    file itself, or the files of a directory (a release, a corpus); none for a hub id."""
    path = Path(source)
    if path.is_file():
        return [path]
    if path.is_dir():
        return [item for item in path.iterdir() if item.is_file()]
    return []


def _through_link(out: str | os.PathLike[str]) -> Path:
    """`out`, or the directory it links to: the link stays and its target is replaced (renaming
    the link aside would put a real directory in its place and leave the target as it was)."""
    out = Path(out)
    return out.resolve() if out.is_symlink() else out


TEMPORARY_NAME_BYTES = 100
"""The most of a file's name its temporary files repeat: with the writer's host, process and
a random part they stay within a file system's 255 bytes (a name of 229 bytes was refused
as too long, though the file itself could be made)."""


def temporary_stem(name: str) -> str:
    """A file or directory name as the names of its temporary files and directories repeat
    it: whole, or a long one cut to `TEMPORARY_NAME_BYTES` and told apart by a hash of it."""
    if len(name.encode()) <= TEMPORARY_NAME_BYTES:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name.encode()[:TEMPORARY_NAME_BYTES].decode(errors="ignore") + f"~{digest}"


def replace_dir(new: str | os.PathLike[str], out: str | os.PathLike[str]) -> None:
    """Move the finished directory `new` to `out`, replacing an existing `out` by renames.

    `new` must lie in `out`'s parent directory (same filesystem). The old `out` is renamed
    aside first, `new` takes its name, and only then is the old one deleted: a failure before
    the second rename puts the old one back. Call `check_output_dir` before writing `new`.
    """
    new, out = Path(new), Path(out)
    if not out.exists():
        os.replace(new, out)
        return
    old = out.parent / f".{temporary_stem(out.name)}.old-{os.getpid()}"
    shutil.rmtree(old, ignore_errors=True)
    os.replace(out, old)
    try:
        os.replace(new, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def written_whole(out: str | os.PathLike[str], kind: str | None) -> Iterator[Path]:
    """Yield an empty directory beside `out` to write into; when the block ends without an
    exception it gets `MARKER` (saying what it holds, `kind`, e.g. ``"ctranslate2"``, and the
    files written; none when `kind` is None, for a release directory, whose files are told by
    name) and takes the place of `out` (`replace_dir`). Either way it is gone afterwards, so a
    failure leaves `out` as it was. Call `check_output_dir` (or the release's own check) first.
    """
    out = _through_link(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{temporary_stem(out.name)}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)  # left by a killed writer of the same pid
    tmp.mkdir()
    try:
        yield tmp
        if kind is not None:
            record = {"written_by": "minitx", "kind": kind, "files": _files_below(tmp)}
            (tmp / MARKER).write_text(json.dumps(record) + "\n", encoding="utf-8")
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


RUN_STAMP = "%Y-%m-%d_%H-%M-%S"
"""A run directory's name: the second it started."""


def claim_run_dir(run_root: Path) -> Path:
    """Create and return a new run directory ``{run_root}/{timestamp}[_{n}]``.

    The directory is created with `os.mkdir`, which fails when the name exists: of two runs
    that start in the same second, on any machine sharing the directory, each gets its own
    (``..._2`` for the second), never the same one.
    """
    make_dirs(run_root)
    stamp = time.strftime(RUN_STAMP)
    for n in itertools.count(1):
        candidate = run_root / (stamp if n == 1 else f"{stamp}_{n}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        atexit.register(_remove_if_empty, candidate)  # a run that wrote nothing leaves nothing
        _CLAIMED.append(candidate)  # and at `release_run_dirs`, when this process goes on
        return candidate
    raise AssertionError("unreachable")


def make_dirs(directory: Path) -> None:
    """``directory.mkdir(parents=True, exist_ok=True)``, and the directories it creates are
    removed at exit while still empty: a run refused before it wrote anything leaves none."""
    created = [path for path in (directory, *directory.parents) if not path.exists()]
    directory.mkdir(parents=True, exist_ok=True)
    for path in reversed(created):  # outermost first: the exit handlers run innermost first
        atexit.register(_remove_if_empty, path)


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):
        directory.rmdir()  # fails, harmlessly, once the run has written anything


_CLAIMED: list[Path] = []
"""The run directories this process claimed (`claim_run_dir`), until `release_run_dirs`."""

_HELD: dict[Path, int] = {}
"""The run directories this process holds (`hold_run_dir`) and their descriptors, open until it
ends."""


def hold_run_dir(run_dir: Path) -> None:
    """Hold `run_dir` until `release_run_dirs` or the end of this process: an advisory lock on
    the directory itself, so that a second process (the same resume started twice) cannot
    train into it too. The operating system releases it however the process ends; nothing
    is written. A directory this process holds already is held on.

    Raises:
        OutputError: another process holds it.
    """
    run_dir = run_dir.resolve()
    if fcntl is None or run_dir in _HELD:
        return
    fd = os.open(run_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise OutputError(
                f"{run_dir} is in use by another training process (both would write its "
                "checkpoints and metrics); wait until that one ends, then resume"
            ) from None
        # Some network filesystems lock no directory (NFS: EBADF): train unguarded.
        logger.warning(
            "%s cannot be locked (%s): another process could train in it too", run_dir, exc.strerror
        )
        return
    _HELD[run_dir] = fd


def release_run_dirs() -> None:
    """Release the run directories this process holds (its training is over), and remove
    those it claimed that are still empty (a run refused before it wrote anything), as its
    exit would: a process that goes on (a notebook, the tests) keeps none."""
    while _HELD:
        os.close(_HELD.popitem()[1])  # closing the descriptor releases its lock
    while _CLAIMED:
        _remove_if_empty(_CLAIMED.pop())
