"""Tokenizing a corpus with the sentencepiece `Tokenizer` (ids and lengths, cached on disk)
and dropping over-long *training* pairs (counted and logged)."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from minitx.data.cleaning import _column, log_skips, side_texts
from minitx.errors import ConfigError
from minitx.textio import quote_lines
from minitx.tokenizer import Tokenizer, hash_texts

logger = logging.getLogger(__name__)

_TOKENIZED_FORMAT = "1"  # bump when the tokenized columns change, to invalidate caches


class _TokenizeBatch:
    """``Dataset.map`` function: text pair -> src/tgt ids and lengths (picklable)."""

    def __init__(self, tokenizer: Tokenizer, src_lang: str, tgt_lang: str) -> None:
        self.tokenizer = tokenizer
        self.src_lang = src_lang
        self.tgt_lang = tgt_lang

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        src = [pair[self.src_lang] for pair in batch["translation"]]
        tgt = [pair[self.tgt_lang] for pair in batch["translation"]]
        src_ids, tgt_ids = self.tokenizer.encode(src), self.tokenizer.encode(tgt)
        return {
            "src_text": src,
            "tgt_text": tgt,
            "src_ids": src_ids,
            "tgt_ids": tgt_ids,
            "src_len": [len(ids) for ids in src_ids],
            "tgt_len": [len(ids) for ids in tgt_ids],
        }


def tokenize_corpus(
    corpus: datasets.DatasetDict,
    tokenizer: Tokenizer,
    src_lang: str,
    tgt_lang: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> datasets.DatasetDict:
    """Tokenize every split with ``Dataset.map(batched=True)``.

    The ``translation`` column is replaced by ``src_text``, ``tgt_text``, ``src_ids``,
    ``tgt_ids`` (no bos/eos), ``src_len`` and ``tgt_len``; other columns (``line``) stay.

    Args:
        corpus: the corpus, usually after :func:`clean_pairs`.
        tokenizer: the (joint) tokenizer.
        src_lang: source language key.
        tgt_lang: target language key.
        cache_dir: when given, each split is stored as an Arrow file named by a hash of the
            tokenizer and the split's contents, and reloaded on the next call.

    Returns:
        The tokenized corpus.
    """
    function = _TokenizeBatch(tokenizer, src_lang, tgt_lang)
    model_hash = hashlib.sha256(tokenizer.model_bytes).hexdigest()
    result = {}
    for split, dataset in corpus.items():
        cache_file = None
        key = None
        if cache_dir is not None:
            parts = [
                _TOKENIZED_FORMAT,
                model_hash,
                src_lang,
                tgt_lang,
                split,
                str(dataset.column_names),
            ]
            parts += [hash_texts(side_texts(dataset, lang)) for lang in (src_lang, tgt_lang)]
            if "line" in dataset.column_names:
                parts.append(hashlib.sha256(_column(dataset, "line").tobytes()).hexdigest())
            key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            cache_file = str(Path(cache_dir) / f"tokenized-{key}-{split}.arrow")
            if os.path.exists(cache_file):
                logger.info("%s: loading tokenized data from %s.", split, cache_file)
        result[split] = dataset.map(
            function,
            batched=True,
            batch_size=1000,
            remove_columns=["translation"],
            cache_file_name=cache_file,
            new_fingerprint=key,
            desc=f"Tokenizing {split}",
        )
    return datasets.DatasetDict(result)


def filter_long_pairs(
    tokenized: datasets.DatasetDict,
    max_len: int,
    *,
    splits: Collection[str] = ("train",),
) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """Drop pairs whose model-side length exceeds ``max_len``, in ``splits`` only.

    A pair fits when ``src_len + 1 <= max_len`` and ``tgt_len + 1 <= max_len``: the lengths
    the model sees once eos (source, target output) or bos (target input) is added. Other
    splits keep every pair; over-long ones there are only counted in an INFO log line.

    Args:
        tokenized: output of :func:`tokenize_corpus`.
        max_len: maximum sequence length in tokens, bos/eos included.
        splits: splits to filter (by default only ``train``).

    Returns:
        The filtered corpus and, per split in ``splits``, the number of pairs dropped.
    """
    if max_len < 2:
        raise ConfigError(f"max_len must be at least 2 (one token plus bos/eos), got {max_len}.")
    result = {}
    dropped: dict[str, int] = {}
    for split, dataset in tokenized.items():
        longest = example_lengths(dataset)
        too_long = np.flatnonzero(longest > max_len)
        if split not in splits:
            if len(too_long):
                logger.info(
                    "%s: %d pairs are longer than max_len=%d; evaluation splits keep them.",
                    split,
                    len(too_long),
                    max_len,
                )
            result[split] = dataset
            continue
        lines = (
            _column(dataset, "line")[too_long] if "line" in dataset.column_names else too_long + 1
        )
        log_skips(split, f"longer than max_len={max_len} tokens", lines.tolist(), len(dataset))
        if len(too_long):
            dataset = dataset.select(np.flatnonzero(longest <= max_len))
        result[split] = dataset
        dropped[split] = len(too_long)
    return datasets.DatasetDict(result), dropped


def truncate_long_pairs(
    tokenized: datasets.DatasetDict,
    max_positions: int,
    *,
    splits: Collection[str],
) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """Cut pairs that the model cannot read whole to ``max_positions`` (eos / bos included),
    in ``splits`` only; the cut pairs are counted and logged with their line numbers.

    Evaluation splits keep every pair so that BLEU covers the whole set; this makes them
    fit the model instead of failing the first validation after an epoch of training. Only
    the ids are cut (the loss covers the first ``max_positions - 1`` pieces of each side); the
    texts stay whole, so BLEU still compares with the full reference.

    Returns:
        The corpus and, per split in ``splits``, the number of pairs cut.
    """
    limit = max_positions - 1
    result = dict(tokenized)
    cut: dict[str, int] = {}
    for split in splits:
        if split not in tokenized:
            continue
        dataset = tokenized[split]
        rows = np.flatnonzero(example_lengths(dataset) > max_positions)
        cut[split] = len(rows)
        if not len(rows):
            continue
        lines = _column(dataset, "line")[rows] if "line" in dataset.column_names else rows + 1
        logger.warning(
            "%s: %d of %d pairs are longer than the model's max_positions=%d; their ids are cut "
            "to fit for the loss, their texts stay whole for BLEU (lines %s).",
            split,
            len(rows),
            len(dataset),
            max_positions,
            quote_lines(lines),
        )

        def cut_batch(batch: dict[str, list]) -> dict[str, list]:
            for side in ("src", "tgt"):
                batch[f"{side}_ids"] = [ids[:limit] for ids in batch[f"{side}_ids"]]
                batch[f"{side}_len"] = [len(ids) for ids in batch[f"{side}_ids"]]
            return batch

        result[split] = dataset.map(cut_batch, batched=True, desc=f"Cutting long {split} pairs")
    return datasets.DatasetDict(result), cut


def example_lengths(dataset: datasets.Dataset) -> np.ndarray:
    """Per-example batching length: ``max(src_len + 1, tgt_len + 1)`` (eos / bos included)."""
    if len(dataset) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.maximum(_column(dataset, "src_len"), _column(dataset, "tgt_len")) + 1
