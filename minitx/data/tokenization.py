"""Tokenizing an in-memory corpus with the sentencepiece `Tokenizer` (ids and lengths, cached
on disk), and the batching length of a tokenized example."""

from __future__ import annotations

import functools
import logging
import os
from pathlib import Path
from typing import Any

import datasets
import numpy as np
from datasets.fingerprint import Hasher

from minitx.tokenizer import Tokenizer

logger = logging.getLogger(__name__)

_TOKENIZED_FORMAT = "1"  # bump when the tokenized columns change, to invalidate caches


def _tokenize_batch(
    batch: dict[str, list[Any]], *, tokenizer: Tokenizer, src_lang: str, tgt_lang: str
) -> dict[str, list[Any]]:
    """``Dataset.map`` function: text pairs -> src/tgt texts, ids and lengths."""
    src = [pair[src_lang] for pair in batch["translation"]]
    tgt = [pair[tgt_lang] for pair in batch["translation"]]
    src_ids, tgt_ids = tokenizer.encode(src), tokenizer.encode(tgt)
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
        cache_dir: when given, each split is stored as an Arrow file named by a hash of the
            tokenizer and the split's contents, and reloaded on the next call.
    """
    function = functools.partial(
        _tokenize_batch, tokenizer=tokenizer, src_lang=src_lang, tgt_lang=tgt_lang
    )
    result = {}
    for split, dataset in corpus.items():
        cache_file = key = None
        if cache_dir is not None:
            # datasets' own hash of the rows (content, not identity) and of the function (the
            # tokenizer's bytes, the languages)
            key = Hasher.hash([_TOKENIZED_FORMAT, split, dataset, function])
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
    lengths = dataset.select_columns(["src_len", "tgt_len"]).with_format("numpy")[:]
    return np.maximum(lengths["src_len"], lengths["tgt_len"]) + 1
