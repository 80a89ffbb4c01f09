"""Reading and writing user text: UTF-8 with errors that name the file and the line; output
files that appear whole or not at all."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO


def decode_utf8(raw: bytes, name: str, *, first_line: int = 1) -> str:
    """Decode UTF-8 bytes (a leading byte-order mark is dropped).

    Args:
        raw: the bytes.
        name: the file, for messages.
        first_line: the line number of the first line of `raw` (a later part of a stream).

    Raises:
        ValueError: invalid UTF-8; the message names `name`, the line and the byte
            within it, and how to re-encode the file.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + first_line
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(
            f"{name}: line {line} is not valid UTF-8 ({exc.reason} at byte {column} of the line). "
            "Re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`."
        ) from None
    return text.removeprefix("\ufeff")


QUOTED_LINES = 5
"""How many line numbers a warning quotes before "..."."""


def quote_lines(lines: Sequence[int]) -> str:
    """The first `QUOTED_LINES` line numbers for a message: ``"3, 8, 12, 20, 31, ..."``."""
    shown = ", ".join(str(int(n)) for n in lines[:QUOTED_LINES])
    return shown + (", ..." if len(lines) > QUOTED_LINES else "")


def check_utf8_argument(text: str, what: str) -> None:
    """Reject a command-line argument that was not valid UTF-8.

    Python decodes such bytes to lone surrogates ("surrogateescape"); no tokenizer can read them.

    Raises:
        ValueError: naming `what` and the offending byte.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        byte = text[exc.start].encode("utf-8", "surrogateescape")
        raise ValueError(
            f"{what} is not valid UTF-8 (byte 0x{byte.hex()} at character {exc.start + 1}); "
            "set a UTF-8 locale or pass the text in a UTF-8 file with --input"
        ) from None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary file name beside `path` that replaces `path` when the block succeeds.

    Write the file under the yielded name (any writer: text, ``torch.save``, safetensors);
    when the block ends without an exception the file gets the usual mode (0666 less the
    umask) and is renamed onto `path` (atomic); otherwise it is deleted and an existing
    `path` is left untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp creates 0600; give the usual mode
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[TextIO]:
    """Open `path` for writing UTF-8 text so that it changes only when the block succeeds
    (`atomic_path`). Lines end in ``\\n`` on every platform."""
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as out:
        yield out
        out.flush()
        os.fsync(out.fileno())


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` as UTF-8 through `atomic_output` (whole file or no change)."""
    with atomic_output(path) as out:
        out.write(text)
