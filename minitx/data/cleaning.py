"""Cleaning a loaded corpus: pairs with an empty side are dropped from every split, counted
and logged with their line numbers (nothing is lost silently)."""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Sequence

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


INVISIBLE = ("Cc", "Cf")
"""Unicode categories of characters that show nothing: control and format characters. A side
of only those holds no word: sentencepiece's normalization drops most (a zero-width space, a
byte order mark, direction marks), and reads the others (a word joiner, a soft hyphen) as
<unk>."""


def _visible(text: str) -> bool:
    """Whether `text` holds a character other than white space and `INVISIBLE` ones: a side
    of only those has no piece (or only <unk>), and its pair would teach the model to translate
    into nothing."""
    return any(not c.isspace() and unicodedata.category(c) not in INVISIBLE for c in text)


def usable_pairs(src: Sequence[str], tgt: Sequence[str]) -> list[int]:
    """Indices of the pairs whose sides both hold more than white space and invisible
    characters (`_visible`)."""
    return [i for i, (s, t) in enumerate(zip(src, tgt, strict=True)) if _visible(s) and _visible(t)]


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
        "%s: skipped %d of %d pairs %s (%s).",
        split,
        count,
        total,
        reason,
        quote_lines(lines),
    )


def clean_pairs(
    corpus: datasets.DatasetDict, src_lang: str, tgt_lang: str
) -> tuple[datasets.DatasetDict, Counts]:
    """Drop the pairs with an empty side, counting and logging every skip.

    A ``line`` column (1-based row number, i.e. the file line for raw files) is added so that
    later steps can still name the lines they drop.

    Returns:
        The cleaned corpus, and per split ``{"empty": n, "too_long": 0}`` skip counts (the
        keys of training's counts; over-long pairs are dropped when tokenized).
    """
    cleaned = {}
    counts: Counts = {}
    for split, dataset in corpus.items():
        src, tgt = side_texts(dataset, src_lang), side_texts(dataset, tgt_lang)
        keep = usable_pairs(src, tgt)
        empty = sorted(set(range(len(dataset))) - set(keep))
        log_skips(split, "with an empty side", [i + 1 for i in empty], len(dataset))
        dataset = dataset.add_column("line", np.arange(1, len(dataset) + 1, dtype=np.int64))
        if empty:
            dataset = dataset.select(keep)
        cleaned[split] = dataset
        counts[split] = {"empty": len(empty), "too_long": 0}
    return datasets.DatasetDict(cleaned), counts
