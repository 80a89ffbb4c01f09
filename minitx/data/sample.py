"""The tokenizer's training sentences: both sides of a training split, or a bounded, seeded
sample of them when the split has more (sentencepiece's ``input_sentence_size`` with
shuffling, done here so that it is reproducible and its memory bounded). A split within the
limit gives exactly its sentences, in the order it had before sampling existed, and draws no
random number, so its tokenizer does not change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
from datasets.utils.tqdm import tqdm as progress_bar

from minitx.data.cleaning import usable_pairs
from minitx.data.streams import CHUNK_PAIRS, PairStream
from minitx.errors import DataError

logger = logging.getLogger(__name__)

_SIDE_SHIFT = 40
"""A sentence's sort key: ``side << 40 | row`` (side 0: source, 1: target)."""


def sample_sentences(
    stream: PairStream, limit: int | None, seed: int, *, chunk_size: int = CHUNK_PAIRS
) -> Iterator[str]:
    """The sentences that train the tokenizer: at most `limit` of both sides of the stream.

    Pairs with an empty side are left out (they are dropped from training too). With no more
    than `limit` sentences (or `limit` None), all of them: the source side in corpus order,
    then the target side. Otherwise a uniform sample of `limit` sentences drawn with
    `numpy.random.default_rng(seed)`, in that same order; the stream is read once and at
    most `limit` sentences are held. Nothing is read until the result is iterated (a cached
    tokenizer never reads the stream).

    Args:
        limit: the most sentences to return (sentencepiece's ``input_sentence_size``); None:
            no limit.

    Raises:
        DataError: when iterated, if no pair has two non-blank sides (the stream named).
    """
    texts: list[str] = []
    keys: list[int] = []
    rng = np.random.default_rng(seed)
    seen = 0
    bar = progress_bar(desc=f"Reading {stream.split} for the tokenizer", unit=" pairs")
    for chunk in stream.chunks(chunk_size):
        bar.update(len(chunk.src))
        sentences, chunk_keys = _interleaved(chunk.start, chunk.src, chunk.tgt)
        room = len(sentences) if limit is None else max(0, min(len(sentences), limit - seen))
        texts += sentences[:room]
        keys += chunk_keys[:room]
        seen += room
        if room == len(sentences):
            continue
        assert limit is not None
        # Algorithm R: the t-th sentence (0-based) replaces a random held one with
        # probability limit / (t + 1).
        positions = np.arange(seen, seen + len(sentences) - room, dtype=np.int64)
        slots = rng.integers(0, positions + 1)
        for offset in np.flatnonzero(slots < limit):
            texts[slots[offset]] = sentences[room + offset]
            keys[slots[offset]] = chunk_keys[room + offset]
        seen += len(positions)
    bar.close()
    if not texts:  # else sentencepiece's "no sentences" error, naming neither file nor fix
        raise DataError(
            f"the {stream.split!r} split ({stream.location}) has no pair to train the tokenizer "
            "on: its files are empty, or every pair has an empty or blank side; it needs line "
            "pairs with both sides non-empty"
        )
    if limit is not None and seen > limit:
        logger.info(
            "The tokenizer trains on %d of the %d training sentences (data.tokenizer_sample, "
            "a uniform sample seeded by data.seed).",
            limit,
            seen,
        )
    order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
    yield from (texts[i] for i in order)


def _interleaved(start: int, src: list[str], tgt: list[str]) -> tuple[list[str], list[int]]:
    """The usable pairs' sentences as ``src_0, tgt_0, src_1, tgt_1, ...`` with their keys."""
    sentences: list[str] = []
    keys: list[int] = []
    target = 1 << _SIDE_SHIFT
    for i in usable_pairs(src, tgt):
        sentences += (src[i], tgt[i])
        keys += (start + i, target | (start + i))
    return sentences, keys
