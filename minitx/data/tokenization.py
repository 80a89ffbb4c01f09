"""Tokenizing an in-memory corpus with the sentencepiece `Tokenizer` (ids and lengths, cached
on disk), and the batching length of a tokenized example."""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import datasets
import numpy as np

from minitx.data.cleaning import _column, side_texts
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


def example_lengths(dataset: datasets.Dataset) -> np.ndarray:
    """Per-example batching length: ``max(src_len + 1, tgt_len + 1)`` (eos / bos included)."""
    if len(dataset) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.maximum(_column(dataset, "src_len"), _column(dataset, "tgt_len")) + 1
