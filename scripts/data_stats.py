"""Batching statistics for a parallel corpus: token buckets vs plain shuffled batches.

Run by hand (not a test), e.g. on the offline Multi30k copy::

    python scripts/data_stats.py --source ../shared/data/multi30k --max-tokens 4096 8192

It reports tokenizer training and tokenization times (the training split prepared as
minitx-train prepares it: over-long pairs skipped, an Arrow cache), tokens per sentence, and
for each ``max_tokens``: batches per epoch, distinct batch shapes and the padding fraction
(pad tokens / all tokens of the src and tgt tensors) of one training epoch, with token buckets
and with plain shuffled batches of the same average batch size.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from minitx.cli.common import (
    OneLineArgumentParser,
    datasets_progress_bars,
    hub_verbosity,
    run_cli,
)
from minitx.data import (
    TokenBucketBatchSampler,
    clean_pairs,
    collate,
    example_lengths,
    load_parallel_corpus,
    open_parallel_corpus,
    prepare_split,
    resolve_data_source,
    round_up,
    side_texts,
)
from minitx.data.datamodule import empty_split_error
from minitx.tokenizer import Tokenizer

logger = logging.getLogger("data_stats")


def batch_stats(
    batches: list[np.ndarray], src_len: np.ndarray, tgt_len: np.ndarray, pad_multiple: int
) -> dict[str, float]:
    """Padding fraction, shape count and budget use of a list of index batches."""
    real = padded = 0
    shapes = set()
    largest = 0
    for batch in batches:
        src = src_len[batch] + 1  # + eos
        tgt = tgt_len[batch] + 1  # + bos (tgt_in) / + eos (tgt_out): same count
        s, t = round_up(int(src.max()), pad_multiple), round_up(int(tgt.max()), pad_multiple)
        real += int(src.sum() + tgt.sum())
        padded += len(batch) * (s + t)
        shapes.add((len(batch), s, t))
        largest = max(largest, len(batch) * max(s, t))
    return {
        "batches": len(batches),
        "avg_batch_size": float(np.mean([len(b) for b in batches])),
        "shapes": len(shapes),
        "pad_fraction": 1 - real / padded,
        "largest_padded": largest,
    }


def main() -> int:
    """Parse the command line and report; a bad corpus is one ``error:`` line (status 2)."""
    parser = OneLineArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--source", default="bentrevett/multi30k", help="corpus (MINITX_DATA_DIR applies)"
    )
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, nargs="+", default=[4096, 8192])
    parser.add_argument(
        "--max-len",
        type=int,
        default=128,
        help="pieces a side at most, as minitx-train's data.max_len (default 128)",
    )
    parser.add_argument("--pad-multiple", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sizes = {
        "--vocab-size": [args.vocab_size],
        "--max-tokens": args.max_tokens,
        "--max-len": [args.max_len],
        "--pad-multiple": [args.pad_multiple],
    }
    for flag, values in sizes.items():
        if min(values) < 1:
            parser.error(f"{flag} must be >= 1, got {min(values)}")
    if args.seed < 0:  # numpy's default_rng refused it with a traceback
        parser.error(f"--seed must be >= 0, got {args.seed}")
    datasets_progress_bars()  # a log file gets the figures, not the bars' frames
    # The figures on standard output (a report to keep; warnings and errors stay on standard
    # error); not the root logger's INFO, which let every library's lines by (each of the
    # hub's retries offline) and printed minitx's warnings twice.
    figures = logging.StreamHandler(sys.stdout)
    figures.setFormatter(logging.Formatter("%(message)s"))
    logger.addHandler(figures)
    logger.setLevel(logging.INFO)
    hub_verbosity(False)
    return run_cli(report, args)


def report(args: argparse.Namespace) -> int:
    """Load, tokenize and batch the corpus, logging each figure."""
    source = resolve_data_source(args.source)
    start = time.perf_counter()
    corpus = load_parallel_corpus(source, args.src_lang, args.tgt_lang)
    cleaned, skipped = clean_pairs(corpus, args.src_lang, args.tgt_lang)
    logger.info(
        "load + clean: %.1f s; pairs %s; skipped %s",
        time.perf_counter() - start,
        {k: len(v) for k, v in cleaned.items()},
        skipped,
    )

    train = cleaned["train"]
    sentences = side_texts(train, args.src_lang) + side_texts(train, args.tgt_lang)
    start = time.perf_counter()
    tokenizer = Tokenizer.train(  # no cache: always trains
        sentences, vocab_size=args.vocab_size, vocab_setting="--vocab-size"
    )
    logger.info(
        "tokenizer training (%d sentences, unigram %d): %.1f s",
        len(sentences),
        tokenizer.vocab_size,
        time.perf_counter() - start,
    )

    stream = open_parallel_corpus(source, args.src_lang, args.tgt_lang)["train"]
    with tempfile.TemporaryDirectory() as cache:
        for what in ("tokenization (train split, into an Arrow cache)", "again (cache hit)"):
            start = time.perf_counter()
            data, skipped = prepare_split(
                stream, tokenizer, Path(cache), max_len=args.max_len, filter_long=True
            )
            logger.info("%s: %.2f s", what, time.perf_counter() - start)
            if len(data) == 0:  # no lengths to describe: said as minitx-train says it, once
                raise empty_split_error("train", stream, skipped, args.max_len, "--max-len")
        src_len = np.asarray(data["src_len"][:])
        tgt_len = np.asarray(data["tgt_len"][:])
        logger.info(
            "train tokens/sentence: src %.2f (max %d), tgt %.2f (max %d)",
            src_len.mean(),
            src_len.max(),
            tgt_len.mean(),
            tgt_len.max(),
        )
        lengths = example_lengths(data)

        rng = np.random.default_rng(args.seed)
        for max_tokens in args.max_tokens:
            sampler = TokenBucketBatchSampler(
                lengths,
                max_tokens=max_tokens,
                pad_multiple=args.pad_multiple,
                shuffle=True,
                seed=args.seed,
            )
            buckets = [np.asarray(b) for b in sampler]
            bucket_stats = batch_stats(buckets, src_len, tgt_len, args.pad_multiple)
            size = round(len(data) / len(buckets))
            order = rng.permutation(len(data))
            plain = [order[i : i + size] for i in range(0, len(data), size)]
            plain_stats = batch_stats(plain, src_len, tgt_len, args.pad_multiple)
            plain_exact = batch_stats(plain, src_len, tgt_len, 1)
            start = time.perf_counter()
            for batch in buckets:
                collate(data.__getitems__(batch.tolist()), args.pad_multiple)
            epoch_s = time.perf_counter() - start
            logger.info("max_tokens=%d:", max_tokens)
            logger.info("  token buckets : %s", _fmt(bucket_stats))
            logger.info(
                "  plain shuffled: %s (lengths rounded to %d)", _fmt(plain_stats), args.pad_multiple
            )
            logger.info("  plain shuffled: %s (exact lengths)", _fmt(plain_exact))
            logger.info("  fetch + collate one bucketed epoch: %.2f s", epoch_s)
    return 0


def _fmt(stats: dict[str, float]) -> str:
    return (
        f"{stats['batches']} batches, avg batch {stats['avg_batch_size']:.1f}, "
        f"{stats['shapes']} distinct (B, S, T) shapes, pad fraction {stats['pad_fraction']:.1%}, "
        f"largest padded B x len {stats['largest_padded']}"
    )


if __name__ == "__main__":
    sys.exit(main())
