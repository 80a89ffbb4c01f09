"""Cleaning a loaded corpus: pairs with an empty side are dropped from every split, counted
and logged with their line numbers (nothing is lost silently)."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

import datasets
import numpy as np

from minitx.textio import quote_lines

logger = logging.getLogger(__name__)

Counts = dict[str, dict[str, int]]
"""Skipped pairs per split and reason."""


def side_texts(dataset: datasets.Dataset, lang: str) -> list[str]:
    """The ``lang`` side of a dataset's ``translation`` column, in row order (read via Arrow)."""
    flat = dataset.select_columns(["translation"]).flatten().with_format("arrow")[:]
    return flat.column(f"translation.{lang}").to_pylist()


def _column(dataset: datasets.Dataset, name: str) -> np.ndarray:
    """A numeric column as a numpy array (honours ``select`` index mappings)."""
    return dataset.select_columns([name]).with_format("arrow")[:].column(name).to_numpy()


def log_skips(
    split: str, reason: str, lines: Sequence[int], total: int, *, count: int | None = None
) -> None:
    """Warn that `count` (default: ``len(lines)``) of `total` pairs of `split` were skipped for
    `reason`, quoting the first `lines` (with "..." when there were more); nothing when none.
    """
    count = len(lines) if count is None else count
    if count == 0:
        return
    logger.warning(
        "%s: skipped %d of %d pairs %s (lines %s).",
        split,
        count,
        total,
        reason,
        quote_lines(lines),
    )


def clean_pairs(
    corpus: datasets.DatasetDict,
    src_lang: str,
    tgt_lang: str,
    *,
    max_chars: int | None = None,
    length_filter_splits: Collection[str] = ("train",),
) -> tuple[datasets.DatasetDict, Counts]:
    """Drop unusable sentence pairs, counting and logging every skip.

    A ``line`` column (1-based row number, i.e. the file line for raw files) is added so that
    later steps can still name the lines they drop.

    Args:
        corpus: output of :func:`load_parallel_corpus`.
        src_lang: source language key.
        tgt_lang: target language key.
        max_chars: drop pairs with a side longer than this many characters, only in
            ``length_filter_splits``; ``None`` disables the check.
        length_filter_splits: splits where over-long pairs may be dropped. Evaluation splits
            keep every non-empty pair, so BLEU is computed over the full test set.

    Returns:
        The cleaned corpus, and per split ``{"empty": n, "too_long": m}`` skip counts.
    """
    cleaned = {}
    counts: Counts = {}
    for split, dataset in corpus.items():
        src, tgt = side_texts(dataset, src_lang), side_texts(dataset, tgt_lang)
        empty = [
            i
            for i, (s, t) in enumerate(zip(src, tgt, strict=True))
            if not s.strip() or not t.strip()
        ]
        too_long: list[int] = []
        if max_chars is not None and split in length_filter_splits:
            empty_set = set(empty)
            too_long = [
                i
                for i, (s, t) in enumerate(zip(src, tgt, strict=True))
                if i not in empty_set and max(len(s), len(t)) > max_chars
            ]
        log_skips(split, "with an empty side", [i + 1 for i in empty], len(dataset))
        log_skips(
            split, f"longer than max_chars={max_chars}", [i + 1 for i in too_long], len(dataset)
        )
        dataset = dataset.add_column("line", np.arange(1, len(dataset) + 1, dtype=np.int64))
        if empty or too_long:
            dropped = set(empty) | set(too_long)
            dataset = dataset.select([i for i in range(len(dataset)) if i not in dropped])
        cleaned[split] = dataset
        counts[split] = {"empty": len(empty), "too_long": len(too_long)}
    return datasets.DatasetDict(cleaned), counts
