"""The tokenized-data cache: one memory-mapped Arrow file per split, with a record beside it.

``tokenized-{key}-{split}.arrow`` holds the split's rows (texts, token ids, lengths, line
numbers); ``tokenized-{key}-{split}.json`` its record: the file's size and sha256, its row
count, the vocabulary it was written for, and what preparing it skipped. A damaged file (cut
short, overwritten, a flipped byte, ids out of range) never reaches training: it is rebuilt.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import datasets
from datasets.arrow_writer import ArrowWriter

from minitx.data.streams import sha256_file
from minitx.textio import atomic_path, write_text_atomic

logger = logging.getLogger(__name__)

FORMAT = 2
"""Bump when the cached columns or the record change (2: streamed, with a record)."""


def split_features(vocab_size: int) -> datasets.Features:
    """The cached columns: ids as uint16 when the vocabulary fits (half the bytes of int32)."""
    id_type = "uint16" if vocab_size <= 1 << 16 else "int32"
    return datasets.Features(
        {
            "line": datasets.Value("int64"),  # 1-based row of the pair in its split
            "src_text": datasets.Value("string"),
            "tgt_text": datasets.Value("string"),
            "src_ids": datasets.List(datasets.Value(id_type)),  # no bos/eos
            "tgt_ids": datasets.List(datasets.Value(id_type)),
            "src_len": datasets.Value("int32"),
            "tgt_len": datasets.Value("int32"),
        }
    )


def write_split(
    path: Path,
    vocab_size: int,
    batches: Iterable[dict[str, list[Any]]],
    extras: Callable[[], dict[str, Any]],
) -> None:
    """Write one cached split from batches of rows, then its record.

    The rows go to a temporary file beside `path` (`atomic_path`), which becomes `path` only
    when every batch is written and the record (written first) is in place; an error on the
    way (an unreadable corpus line, a full disk) leaves no file behind.

    Args:
        vocab_size: the tokenizer's vocabulary size (decides the id type; in the record).
        batches: rows, as columns of lists (the columns of `split_features`).
        extras: called after the last batch: more fields for the record (skip counts).
    """
    rows = 0
    with atomic_path(path) as tmp:
        writer = ArrowWriter(features=split_features(vocab_size), path=str(tmp))
        try:
            for batch in batches:
                writer.write_batch(batch)
                rows += len(batch["line"])
            writer.finalize()
        finally:
            writer.close()
        record = {
            "format": FORMAT,
            "rows": rows,
            "bytes": os.path.getsize(tmp),
            "sha256": sha256_file(tmp).hexdigest(),
            "vocab_size": vocab_size,
            **extras(),
        }
        write_text_atomic(path.with_suffix(".json"), json.dumps(record, indent=1) + "\n")


def open_tokenized(path: Path, vocab_size: int) -> tuple[datasets.Dataset, dict[str, Any]] | None:
    """A cached split, memory-mapped, with its record; None when there is none or it is damaged.

    Checked, in this order: the record (present, this format), the file's size and sha256,
    its row count, and every token id against ``[0, vocab_size)``. A failed check logs one
    warning naming the file and what is wrong; the caller then rebuilds it.
    """
    if not path.is_file():
        return None
    try:
        record = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        problem = _problem(path, record, vocab_size)
        dataset = None
        if problem is None:
            dataset = datasets.Dataset.from_file(str(path))
            problem = check_dataset(dataset, record["rows"], vocab_size)
    except (OSError, ValueError, KeyError, TypeError) as exc:  # incl. json and Arrow errors
        problem, dataset = f"unreadable ({type(exc).__name__}: {exc})", None
    if problem is not None or dataset is None:
        logger.warning("%s: cached tokenized data %s; rebuilding it.", path, problem)
        return None
    return dataset, record


def _problem(path: Path, record: Any, vocab_size: int) -> str | None:
    """What is wrong with the file by its record (no Arrow read), or None."""
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        return f"has no usable record ({path.with_suffix('.json').name} is not of format {FORMAT})"
    size = path.stat().st_size
    if size != record["bytes"]:
        return f"is {size} bytes but its record says {record['bytes']} (cut short or overwritten)"
    if record["vocab_size"] != vocab_size:
        return f"was written for a vocabulary of {record['vocab_size']}, not {vocab_size}"
    if sha256_file(path).hexdigest() != record["sha256"]:
        return "does not match the sha256 in its record (the file is damaged)"
    return None


def check_dataset(dataset: datasets.Dataset, rows: int, vocab_size: int) -> str | None:
    """What is wrong with a cached split's rows (count, token id range), or None."""
    if len(dataset) != rows:
        return f"has {len(dataset)} rows but its record says {rows}"
    table = dataset.with_format("arrow")[:]
    for column in ("src_ids", "tgt_ids"):
        low, high = 0, -1  # over every chunk, one chunk in memory at a time
        for chunk in table.column(column).chunks:
            ids = chunk.flatten().to_numpy(zero_copy_only=False)  # (n_tokens,)
            if len(ids):
                low, high = min(low, int(ids.min())), max(high, int(ids.max()))
        if low < 0 or high >= vocab_size:
            return (
                f"holds {column} from {low} to {high}, outside the tokenizer's vocabulary "
                f"[0, {vocab_size})"
            )
    return None
