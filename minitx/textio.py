"""Reading user text: UTF-8 with errors that name the file and the line."""

from __future__ import annotations


def decode_utf8(raw: bytes, name: str) -> str:
    """Decode UTF-8 bytes (a leading byte-order mark is dropped).

    Raises:
        ValueError: invalid UTF-8; the message names `name`, the 1-based line and the byte
            within it, and how to re-encode the file.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(
            f"{name}: line {line} is not valid UTF-8 ({exc.reason} at byte {column} of the line). "
            "Re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8`."
        ) from None
    return text.removeprefix("\ufeff")
