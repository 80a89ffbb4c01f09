"""Preparing a split for training in bounded memory: a stream of sentence pairs in, one
memory-mapped, tokenized Arrow file out (`minitx.data.cache`), which every DDP rank and every
later run maps instead of tokenizing again. Skips are counted and logged with their line
numbers, as `clean_pairs` does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets.utils.tqdm import tqdm as progress_bar

from minitx.data.cache import FORMAT, open_tokenized, write_split
from minitx.data.cleaning import log_skips, usable_pairs
from minitx.data.streams import PairChunk, PairStream
from minitx.errors import DataError
from minitx.textio import QUOTED_LINES, quote_characters, quote_lines
from minitx.tokenizer import Tokenizer
from minitx.vocab import UNK_ID, UNK_PIECE

logger = logging.getLogger(__name__)


def prepare_split(
    stream: PairStream,
    tokenizer: Tokenizer,
    cache_dir: Path,
    *,
    max_len: int,
    filter_long: bool,
    max_positions: int | None = None,
) -> tuple[datasets.Dataset, dict[str, int]]:
    """One split, tokenized and memory-mapped from the cache (built first when absent).

    The rows keep their order; each has ``line`` (1-based row in the split), ``src_text``,
    ``tgt_text``, ``src_ids`` and ``tgt_ids`` (no bos/eos), ``src_len`` and ``tgt_len``.

    Args:
        cache_dir: where the split's Arrow file and record live.
        max_len: longest sequence in tokens, bos/eos included (``data.max_len``).
        filter_long: drop pairs longer than `max_len` (the training split); otherwise they
            are kept and only counted in an INFO line.
        max_positions: cut the ids of longer pairs to this many positions, eos/bos included,
            keeping their texts whole (evaluation splits; None: no cut).

    Returns:
        The split and its skip counts: ``{"empty": n, "too_long": m}``, plus ``"truncated"``
        when `max_positions` is given.
    """
    settings = {
        "format": FORMAT,
        "stream": stream.fingerprint,
        "split": stream.split,
        "tokenizer": hashlib.sha256(tokenizer.model_bytes).hexdigest(),
        "max_len": max_len if filter_long else None,
        "max_positions": max_positions,
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"tokenized-{key}-{stream.split}.arrow"
    opened = open_tokenized(path, tokenizer.vocab_size)
    if opened is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        tally = _Tally()
        batches = _tokenized_batches(stream, tokenizer, tally, max_len, filter_long, max_positions)
        write_split(path, tokenizer.vocab_size, batches, lambda: dataclasses.asdict(tally))
        elapsed = time.perf_counter() - start
        logger.info(
            "%s: tokenized %d pairs in %.1f s (%.0f pairs/s) into %s.",
            stream.split,
            tally.read,
            elapsed,
            tally.read / max(elapsed, 1e-9),
            path,
        )
        opened = open_tokenized(path, tokenizer.vocab_size)
        if opened is None:  # a file just written failed its own checks: not the disk's doing
            raise DataError(
                f"{path}: the tokenized data just written does not pass its checks (see the "
                f"warning above); delete {path.parent} and run again."
            )
    else:
        logger.info("%s: loading tokenized data from %s.", stream.split, path)
    dataset, record = opened
    _log_record(stream.split, record, max_len, max_positions, filter_long)
    counts = {"empty": record["empty"]["count"], "too_long": record["too_long"]["count"]}
    if max_positions is not None:
        counts["truncated"] = record["truncated"]["count"]
    return dataset, counts


UNKNOWN_CHARACTERS_KEPT = 20
"""How many of a split's characters the vocabulary lacks its cache record names."""


def _skips() -> dict[str, Any]:
    return {"count": 0, "lines": []}


@dataclasses.dataclass
class _Tally:
    """What one pass read and skipped, field for field the cache record's: the pairs read,
    those with both sides (`usable`), and per reason a count and the first line numbers."""

    read: int = 0
    usable: int = 0
    too_long_kept: int = 0  # evaluation splits: over max_len, kept
    empty: dict[str, Any] = dataclasses.field(default_factory=_skips)
    too_long: dict[str, Any] = dataclasses.field(default_factory=_skips)
    truncated: dict[str, Any] = dataclasses.field(default_factory=_skips)
    unknown: dict[str, Any] = dataclasses.field(default_factory=_skips)  # kept, with <unk>
    unknown_characters: list[str] = dataclasses.field(default_factory=list)  # the first few

    def add(self, reason: str, lines: np.ndarray) -> None:
        skips = getattr(self, reason)
        skips["count"] += len(lines)
        room = QUOTED_LINES + 1 - len(skips["lines"])  # enough to write "..."
        skips["lines"] += [int(n) for n in lines[: max(room, 0)]]


def _tokenized_batches(
    stream: PairStream,
    tokenizer: Tokenizer,
    tally: _Tally,
    max_len: int,
    filter_long: bool,
    max_positions: int | None,
) -> Iterator[dict[str, list[Any]]]:
    """The split's rows, chunk by chunk: cleaned, tokenized, length-filtered or cut."""
    with progress_bar(desc=f"Tokenizing {stream.split}", unit=" pairs") as bar:
        for chunk in stream.chunks():
            bar.update(len(chunk.src))
            yield _tokenized_chunk(chunk, tokenizer, tally, max_len, filter_long, max_positions)


def _tokenized_chunk(
    chunk: PairChunk,
    tokenizer: Tokenizer,
    tally: _Tally,
    max_len: int,
    filter_long: bool,
    max_positions: int | None,
) -> dict[str, list[Any]]:
    """One chunk's rows: pairs with an empty side dropped, tokenized, over-long pairs
    dropped (`filter_long`) or their ids cut to `max_positions`; skips go to `tally`."""
    tally.read += len(chunk.src)
    keep = usable_pairs(chunk.src, chunk.tgt)
    tally.add("empty", np.setdiff1d(np.arange(len(chunk.src)), keep) + chunk.start + 1)
    src = [chunk.src[i] for i in keep]
    tgt = [chunk.tgt[i] for i in keep]
    line = [chunk.start + i + 1 for i in keep]
    tally.usable += len(keep)
    src_ids, tgt_ids = tokenizer.encode(src), tokenizer.encode(tgt)
    src_len = np.fromiter(map(len, src_ids), dtype=np.int64, count=len(src_ids))
    tgt_len = np.fromiter(map(len, tgt_ids), dtype=np.int64, count=len(tgt_ids))
    longest = np.maximum(src_len, tgt_len) + 1  # (n,) with eos / bos
    over = np.flatnonzero(longest > max_len)
    if filter_long and len(over):
        tally.add("too_long", np.asarray(line)[over])
        fits = np.flatnonzero(longest <= max_len)
        src, tgt, line = ([column[i] for i in fits] for column in (src, tgt, line))
        src_ids, tgt_ids = [src_ids[i] for i in fits], [tgt_ids[i] for i in fits]
        src_len, tgt_len = src_len[fits], tgt_len[fits]
    elif len(over):
        tally.too_long_kept += len(over)
    if max_positions is not None:
        cut = np.flatnonzero(np.maximum(src_len, tgt_len) + 1 > max_positions)
        tally.add("truncated", np.asarray(line, dtype=np.int64)[cut])
        for i in cut:
            src_ids[i] = src_ids[i][: max_positions - 1]
            tgt_ids[i] = tgt_ids[i][: max_positions - 1]
        src_len = np.minimum(src_len, max_positions - 1)
        tgt_len = np.minimum(tgt_len, max_positions - 1)
    # Characters the tokenizer never saw (its sample missed them): kept, read as <unk>
    pairs = enumerate(zip(src_ids, tgt_ids, strict=True))
    unknown = [i for i, (s, t) in pairs if UNK_ID in s or UNK_ID in t]
    if unknown:
        tally.add("unknown", np.asarray(line, dtype=np.int64)[unknown])
        kept = tally.unknown_characters
        if len(kept) < UNKNOWN_CHARACTERS_KEPT:
            text = "".join(src[i] + tgt[i] for i in unknown[:UNKNOWN_CHARACTERS_KEPT])
            new = [c for c in tokenizer.unknown_characters(text) if c not in kept]
            kept += new[: UNKNOWN_CHARACTERS_KEPT - len(kept)]
    return {
        "line": line,
        "src_text": src,
        "tgt_text": tgt,
        "src_ids": src_ids,
        "tgt_ids": tgt_ids,
        "src_len": src_len.tolist(),
        "tgt_len": tgt_len.tolist(),
    }


def _log_record(
    split: str,
    record: dict[str, Any],
    max_len: int,
    max_positions: int | None,
    filter_long: bool,
) -> None:
    """The skip warnings of a prepared split."""
    empty, too_long, cut = record["empty"], record["too_long"], record["truncated"]
    log_skips(split, "with an empty side", empty["lines"], record["read"], count=empty["count"])
    if filter_long:
        log_skips(
            split,
            f"longer than max_len={max_len} tokens",
            too_long["lines"],
            record["usable"],
            count=too_long["count"],
        )
    elif record.get("too_long_kept"):
        logger.info(
            "%s: %d %s longer than max_len=%d; evaluation splits keep them.",
            split,
            record["too_long_kept"],
            "pair is" if record["too_long_kept"] == 1 else "pairs are",
            max_len,
        )
    unknown = record.get("unknown")  # absent from the record of an earlier minitx's cache
    if unknown and unknown["count"]:
        logger.warning(
            "%s: %d of %d pairs hold characters the vocabulary lacks, read as %s: %s (%s); the "
            "tokenizer learns its characters from data.tokenizer_sample sentences of the train "
            "split (null: all of them)",
            split,
            unknown["count"],
            record["rows"],
            UNK_PIECE,
            quote_characters(record.get("unknown_characters") or []),
            quote_lines(unknown["lines"]),
        )
    if max_positions is not None and cut["count"]:
        logger.warning(
            "%s: %d of %d pairs are longer than the model's max_positions=%d; their ids are cut "
            "to fit for the loss, their texts stay whole for BLEU (%s).",
            split,
            cut["count"],
            record["rows"],
            max_positions,
            quote_lines(cut["lines"]),  # the first lines, "..." when there were more
        )
