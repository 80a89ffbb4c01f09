"""Reading and writing user text: UTF-8 with errors that name the file and the line; output
files that appear whole or not at all."""

from __future__ import annotations

import contextlib
import errno
import gzip
import os
import re
import shutil
import socket
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, TextIO

from minitx.errors import DataError, MissingFileError, OutputError, UsageError
from minitx.outputs import temporary_stem

GZIP_MAGIC = b"\x1f\x8b"
"""The first bytes of a gzip file (RFC 1952); 0x8b cannot follow 0x1f in UTF-8 text."""

ZIP_MAGIC = b"PK\x03\x04"
"""The first bytes of a zip archive, such as a checkpoint (torch.save's format since 1.6)."""


def decode_utf8(raw: bytes, name: str, *, first_line: int = 1, utf8_before: bool = False) -> str:
    """Decode UTF-8 bytes of file `name` whose first line is line `first_line` (a later part
    of a stream, whose earlier parts held non-ASCII UTF-8 when `utf8_before`); a byte-order
    mark opening the file (at `first_line` 1) is dropped.

    Raises:
        DataError: invalid UTF-8, or a NUL byte; the message names `name`, the line and the
            byte within it, and how to fix it: that line, where the file's other lines are
            UTF-8 with accents (a re-encoding of the whole file would garble them), else the
            file, re-encoded. Compressed text is said as such.
    """
    if first_line == 1:
        _check_not_packed(raw, name)
    bom = first_line == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff"))  # UTF-16's
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        start, what = exc.start, f"is not valid UTF-8 ({exc.reason}"
        utf16 = bom or b"\x00" in raw[:start]
    else:
        start = raw.find(b"\x00")
        if start < 0:
            return text.removeprefix("\ufeff") if first_line == 1 else text
        # UTF-8 allows NUL, text never holds one: UTF-16 of ASCII text decodes without an error
        # (every other byte NUL) and would translate or train as garbage.
        what, utf16 = "is not UTF-8 text (a NUL byte, as in UTF-16 or binary files,", True
    line = raw.count(b"\n", 0, start) + first_line
    line_start = raw.rfind(b"\n", 0, start) + 1
    line_end = raw.find(b"\n", start) % (len(raw) + 1)  # -1 (the last line): the end
    others = raw[:line_start] + raw[line_end:]  # the file's other lines at hand
    fix = (
        f"Re-encode the file as UTF-8, e.g. `iconv -f {'utf-16' if utf16 else 'latin1'} -t utf-8`."
    )
    if not bom and b"\x00" not in others:  # UTF-16 holds a NUL in every other byte
        if not utf16 and (utf8_before or _utf8_with_accents(others)):
            fix = (
                "The file's other lines are UTF-8, accents and all: fix or delete that line (a "
                "re-encoding of the whole file, as with iconv, would garble them)."
            )
        elif utf16 and (others or first_line > 1) and b"\x00" not in raw[start + 1 : start + 3]:
            fix = "The file's other lines hold none: remove it, e.g. `tr -d '\\000'`."
    raise DataError(
        f"{name}: line {line} {what} at byte {start - line_start + 1} of the line). {fix}"
    )


def _utf8_with_accents(raw: bytes) -> bool:
    """Whether `raw` is UTF-8 holding more than ASCII: text a Latin-1 re-encoding garbles."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not raw.isascii()


def _check_not_packed(start: bytes, name: str) -> None:
    """Refuse bytes that open a gzip file or a zip archive, said as such: read as text, they
    were "not valid UTF-8, iconv -f latin1", or, holding a carriage return, "old Mac line
    ends".

    Raises:
        DataError: naming `name` and what to give instead.
    """
    if start.startswith(GZIP_MAGIC):
        raise DataError(f"{name} is gzip-compressed, not text: decompress it, e.g. `gzip -dc`")
    if start.startswith(ZIP_MAGIC):
        raise DataError(
            f"{name} is a zip archive (a checkpoint, say), not text: give a text file, one "
            "sentence per line"
        )


def check_line_ends(first_line: bytes, name: str, fix: str) -> None:
    """Refuse text whose start `first_line` (its bytes up to and with the first newline, or
    all of them) holds no newline but a carriage return before its end: line ends that are
    carriage returns only (an old Mac format) would make the whole text one sentence. `fix`
    is the command that converts it (``tr '\\r' '\\n' < FILE``). Compressed bytes are said
    as such first (`_check_not_packed`).

    Raises:
        DataError: naming `name` and the fix, or what the bytes are.
    """
    _check_not_packed(first_line, name)
    if b"\n" not in first_line and b"\r" in first_line.rstrip(b"\r"):
        raise DataError(
            f"{name}: no \\n in the text, but carriage returns (\\r): its line ends are \\r "
            f"only (an old Mac format); convert them to \\n, e.g. {fix}"
        )


READ_BYTES = 1 << 20
"""The size of the blocks files are read in (`iter_lines`, the corpus checksums); at most
`MAX_LINE_BYTES`, which `iter_lines` checks on lines that span blocks."""

MAX_LINE_BYTES = 1 << 24
"""The longest line `iter_lines` reads, 16 MiB: far beyond any sentence, and a bound on the
memory that a file without newlines (a device such as /dev/zero, binary data) can take."""


def iter_lines(path: Path) -> Iterator[str]:
    """The lines of the UTF-8 text file `path`, one at a time, decompressed when its first
    bytes are gzip's (`GZIP_MAGIC`), whatever its name: split on ``\\n`` only, a final
    newline ends the last line, ``\\r`` ending a line is dropped, and so is a byte-order mark
    opening the file. Read in blocks of `READ_BYTES`: never whole, so a pipe or a file of any
    size is read in bounded memory.

    Raises:
        MissingFileError: `path` does not exist.
        DataError: `path` cannot be read, is a damaged gzip file, is not UTF-8, or has a line
            longer than `MAX_LINE_BYTES`; the message names the file and, where it helps, the
            1-based line.
    """
    try:
        raw = open(path, "rb")  # noqa: SIM115 (a with block below closes it)
    except FileNotFoundError:
        raise MissingFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise DataError(f"{path} is a directory; give a text file, one sentence per line") from None
    except OSError as exc:
        raise DataError(f"{path}: cannot read the file ({exc.strerror or exc}).") from None
    with raw:
        compressed = raw.peek(len(GZIP_MAGIC))[: len(GZIP_MAGIC)] == GZIP_MAGIC
        what = "the gzip file" if compressed else "the file"
        fix = f"gzip -dc {path} | " if compressed else ""
        fix += f"tr '\\r' '\\n' {'' if compressed else f'< {path} '}> fixed"
        try:
            file = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
            yield from _lines_in_blocks(file, str(path), fix)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise DataError(f"{path}: cannot read {what} ({exc}).") from None


def _lines_in_blocks(file: BinaryIO, name: str, fix: str) -> Iterator[str]:
    """`iter_lines` of an open binary `file` called `name`; `fix` converts \\r line ends."""
    line_number, partial, utf8_before = 1, b"", False
    while block := file.read(READ_BYTES):
        if line_number == 1 and not partial:  # a whole file in one "line", \r inside
            check_line_ends(block.split(b"\n", 1)[0] + b"\n" * (b"\n" in block), name, fix)
        data = partial + block
        # only the line begun in an earlier block can be longer than a block (READ_BYTES)
        first_end = data.find(b"\n")
        if (first_end if first_end >= 0 else len(data)) > MAX_LINE_BYTES:
            raise DataError(
                f"{name}: line {line_number} runs past {MAX_LINE_BYTES:,} bytes without a "
                "newline: give a text file of sentences, one per line"
            )
        end = data.rfind(b"\n")
        if end < 0:
            partial = data
            continue
        text = decode_utf8(data[:end], name, first_line=line_number, utf8_before=utf8_before)
        lines = text.split("\n")
        yield from (line.removesuffix("\r") for line in lines)
        utf8_before = utf8_before or not text.isascii()  # for a bad byte's advice (O(1))
        line_number += len(lines)
        partial = data[end + 1 :]
    if partial:  # the last line, without a newline
        last = decode_utf8(partial, name, first_line=line_number, utf8_before=utf8_before)
        yield last.removesuffix("\r")


def sentence_list(sentences: Iterable[str], what: str = "sentence") -> list[str]:
    """`sentences` (any iterable: a generator is read whole) as a list of strings.

    Raises:
        TypeError: when `sentences` is one string (its characters would be the sentences) or
            bytes, is no iterable (None), or holds something other than strings; `what` names
            them in the message.
    """
    if isinstance(sentences, str):  # iterating it would read each character as a sentence
        raise TypeError(f"give a list of {what}s, e.g. [{what}], not one string")
    if isinstance(sentences, bytes | bytearray):  # each byte would be "int 101, not a string"
        raise TypeError(f"give a list of {what}s, not bytes: decode them, e.g. .decode('utf-8')")
    try:
        items = list(sentences)
    except TypeError:  # None, a number: "'NoneType' object is not iterable" named nothing
        raise TypeError(f"give a list of {what}s, not {type(sentences).__name__}") from None
    wrong = next((i for i, s in enumerate(items) if not isinstance(s, str)), None)
    if wrong is not None:
        item = items[wrong]
        raise TypeError(
            f"{what} {wrong} is {type(item).__name__} {item!r}, not a string; give a list of "
            "strings (str(...) each, or '' for a line without text)"
        )
    return items


QUOTED_LINES = 5
"""How many line numbers a warning quotes before "..."."""


def quote_lines(lines: Sequence[int]) -> str:
    """The first `QUOTED_LINES` line numbers for a message: ``"line 3"`` or
    ``"lines 3, 8, 12, 20, 31, ..."``."""
    shown = ", ".join(str(int(n)) for n in lines[:QUOTED_LINES])
    word = "line" if len(lines) == 1 else "lines"
    return f"{word} {shown}" + (", ..." if len(lines) > QUOTED_LINES else "")


QUOTED_CHARACTERS = 10
"""How many characters a warning quotes before "..."."""


def quote_characters(characters: Sequence[str]) -> str:
    """The first `QUOTED_CHARACTERS` characters for a message, each quoted, or as its code point
    where it would not show (``'ж' '中' U+200B ...``)."""
    shown = [repr(ch) if ch.isprintable() else f"U+{ord(ch):04X}" for ch in characters]
    return " ".join(shown[:QUOTED_CHARACTERS]) + (" ..." if len(shown) > QUOTED_CHARACTERS else "")


def utf8_arguments(
    arguments: dict[str, str],
    fix: str = "set a UTF-8 locale or pass the text in a UTF-8 file with --input",
) -> list[str]:
    """The command-line arguments (name -> value) as text, in order, or an error for bytes that
    are not UTF-8.

    Python decodes arguments with the locale's encoding and keeps the bytes it cannot read as
    lone surrogates ("surrogateescape"). Under an ASCII locale (``LC_ALL=C`` with UTF-8 mode
    off) valid UTF-8 arrives so, and is recovered from those bytes; any other such bytes are
    no text a tokenizer can read. `fix` ends the message: what the user can do instead.

    Raises:
        UsageError: naming the argument and the offending byte.
    """
    texts = []
    for what, text in arguments.items():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raw = os.fsencode(text)  # the bytes as typed: surrogates back to bytes
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                at = len(raw[: exc.start].decode("utf-8", "replace")) + 1
                raise UsageError(
                    f"{what} is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at character "
                    f"{at}); {fix}"
                ) from None
        texts.append(text)
    return texts


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
"""Errors that mean "the destination has no room": disk full, quota, file-size limit."""


def _temporary_prefix(path: Path) -> str:
    """The name every temporary file for `path` starts with: ``.{name}.tmp-``."""
    return f".{temporary_stem(path.name)}.tmp-"


def _remove_orphans(path: Path) -> None:
    """Delete temporary files for `path` left by a writer on this host that no longer runs
    (a process killed while it wrote); a live writer's file is left alone."""
    prefix, host = _temporary_prefix(path), socket.gethostname()
    with contextlib.suppress(OSError):
        for entry in os.scandir(path.parent):
            if not entry.name.startswith(prefix):
                continue
            writer = entry.name[len(prefix) :].rsplit(".", 1)[0]  # {host}-{pid}-{random}
            parts = writer.rsplit("-", 2)
            if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
                continue
            if not _process_alive(int(parts[1])):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def _megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def no_room_error(path: Path, exc: OSError, size_hint: int | None = None) -> OutputError:
    """The one-line error for a write to `path` that found no room: the destination, the space
    needed (when known) and the space free there."""
    try:
        free = shutil.disk_usage(path.parent).free
        room = f"{_megabytes(free)} free in {path.parent}"
    except OSError:
        room = f"in {path.parent}"
    need = f"about {_megabytes(size_hint)} needed, " if size_hint else ""
    return OutputError(
        f"cannot write {path}: {exc.strerror or exc} ({need}{room}); the previous file, if any, "
        "is unchanged: free some space there or write somewhere else"
    )


@contextlib.contextmanager
def atomic_path(path: str | Path, *, size_hint: int | None = None) -> Iterator[Path]:
    """A temporary file name beside `path` that replaces `path` when the block succeeds.

    Write the file under the yielded name (any writer: text, ``torch.save``, safetensors).
    The temporary file lives in `path`'s own directory (never the system's temporary
    directory), so the final rename is atomic: at every instant `path` is either the old file,
    whole, or the new one, whole. When the block ends without an exception the file is
    flushed to disk, gets the mode of the file it replaces (a new file: 0666 less the umask)
    and is renamed onto `path`;
    otherwise it is deleted and an existing `path` is left untouched. Temporary files of
    `path` left by a killed writer are removed first. A symbolic link keeps pointing where it
    did: the file it points to is replaced. A `path` that is no regular file (``/dev/stdout``,
    a named pipe) cannot be replaced: it is yielded itself and written in place.

    Args:
        size_hint: about how many bytes will be written, for the disk-full message.

    Raises:
        OutputError: the disk (or quota, or file-size limit, or a device written in place) has
            no room, naming `path`, the space needed and the space free; or the finished file
            cannot take `path`'s place (an immutable file), naming `path`, which is unchanged.
    """
    path = Path(path)
    try:  # os.stat follows links: /dev/stdout is the terminal or pipe it points to
        in_place = not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        in_place = False  # not there yet: created below
    if in_place:  # a device or a FIFO: nothing to rename onto, written as a shell's > would
        try:
            yield path
        except Exception as exc:
            no_room = _no_room(exc)
            if no_room is None:
                raise
            raise OutputError(
                f"cannot write {path}: {no_room.strerror or no_room}; write somewhere else"
            ) from None
        return
    target = Path(os.path.realpath(path))  # a link to a file: the file is replaced, the link stays
    _remove_orphans(target)
    try:
        writer = f"{socket.gethostname()}-{os.getpid()}"  # to tell a dead writer's files
        fd, tmp = tempfile.mkstemp(
            dir=target.parent, prefix=f"{_temporary_prefix(target)}{writer}-", suffix=".tmp"
        )
    except OSError as exc:
        if exc.errno in NO_ROOM:
            raise no_room_error(path, exc, size_hint) from None
        raise
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as written:  # on disk before the rename makes it the file
            os.fsync(written.fileno())
        try:  # a file replaced keeps its mode, as under a shell's > (a private file stays so)
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:  # a new file: the usual mode (mkstemp creates 0600)
            mode = 0o666 & ~_umask()
        os.chmod(tmp, mode)
        try:
            os.replace(tmp, target)
        except OSError as exc:  # the error would name the temporary file, not the user's
            raise OutputError(
                f"cannot replace {path}: {exc.strerror or exc}; it is unchanged (an immutable "
                "file, or a directory's permissions, can forbid it): write to another file"
            ) from None
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        no_room = _no_room(exc)
        if no_room is not None:
            raise no_room_error(path, no_room, size_hint) from None
        raise


def _no_room(exc: BaseException) -> OSError | None:
    """The full-disk error behind `exc`: `exc` itself, one it was raised from or during
    (torch.save's zip writer raises a RuntimeError while handling the OSError), or one a
    library wrote into its message (safetensors); None when the disk is not the cause."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in NO_ROOM:
            return seen
        seen = seen.__cause__ or seen.__context__
    text = str(exc).lower()
    if any(words in text for words in ("no space left", "file too large", "quota exceeded")):
        return OSError(errno.ENOSPC, "No space left on device")
    return None


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[TextIO]:
    """Open `path` for writing UTF-8 text so that it changes only when the block succeeds
    (`atomic_path`). Lines end in ``\\n`` on every platform."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as out:
        yield out


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Write `data` to `path` through `atomic_path` (whole file or no change)."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def without_surrogates(text: str) -> str:
    """`text` with each lone surrogate (the bytes of a file name that is no UTF-8, as Python
    holds them) as U+FFFD, which UTF-8 can encode."""
    return re.sub("[\ud800-\udfff]", "\ufffd", text)


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` as UTF-8 through `atomic_output` (whole file or no change)."""
    with atomic_output(path) as out:
        out.write(text)


def print_stop(message: str) -> None:
    """The line that says why a command stops (Ctrl-C, SIGTERM), on standard error: on a
    terminal after a line break, since the terminal echoed ``^C`` (or a progress bar was
    drawn) on the current line; in a log file, the line alone."""
    try:
        fresh_line = "\n" if sys.stderr.isatty() else ""
    except (AttributeError, ValueError):  # replaced or closed: as a log file
        fresh_line = ""
    print(f"{fresh_line}{message}", file=sys.stderr, flush=True)
