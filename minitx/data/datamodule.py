"""`TranslationDataModule`: corpus -> tokenizer -> token-bucketed batches, for Lightning."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import tempfile
import time
import weakref
from pathlib import Path

import datasets
import lightning as L
import torch
from torch.utils.data import DataLoader

from minitx.data.batching import (
    ResumableDataLoader,
    TokenBucketBatchSampler,
    collate,
    example_lengths,
    round_up,
)
from minitx.data.cleaning import Counts
from minitx.data.prepare import prepare_split
from minitx.data.sample import sample_sentences
from minitx.data.sources import (
    DEFAULT_SOURCE,
    WITHOUT_TEST,
    check_data_source,
    check_languages,
    open_parallel_corpus,
    resolve_data_source,
)
from minitx.data.streams import PairStream
from minitx.errors import ConfigError, DataError, VocabularyTooLargeError
from minitx.outputs import check_dir_takes_files, check_takes_files, dangling_link
from minitx.tokenizer import ModelType, Tokenizer

SEED_MAX = 2**64 - 1
"""The largest `data.seed`: torch's generators take 64 bits (numpy's any size, none below 0)."""

TOKENIZER_SAMPLE = 500_000
"""Default `data.tokenizer_sample`: sentences (both sides together) that train the tokenizer.

sentencepiece holds them all while it trains, about 2.7 kB per 25-word sentence (measured:
1.4 GB for 500,000), so this bounds the peak memory of preparing any corpus. Multi30k (58,000
sentences), IWSLT'14 (about 340,000) and smaller corpora train on every sentence."""

logger = logging.getLogger(__name__)


class TranslationDataModule(L.LightningDataModule):
    """Corpus -> tokenizer -> token-bucketed batches, for Lightning (or plain loops).

    ``setup()`` opens the corpus (through :func:`resolve_data_source`), trains or loads the
    cached joint tokenizer, and in one streaming pass per split drops empty pairs (every
    split) and over-long training pairs and tokenizes, into a memory-mapped Arrow file (cached
    too; `minitx.data.prepare`). It works without a Trainer: ``dm.setup("fit")`` then
    ``dm.train_dataloader()``. After setup: ``dm.tokenizer``, ``dm.dataset`` (the tokenized
    ``DatasetDict``) and ``dm.skipped`` (per split ``{"empty": n, "too_long": m}``, plus
    ``"truncated"`` for evaluation splits cut to the model's ``max_positions``).

    Batches are dicts from :func:`collate`. Training batches are reshuffled every epoch
    (Lightning calls ``set_epoch`` through the sampler); evaluation batches come in a fixed
    order. For multi-device training pass ``Trainer(use_distributed_sampler=False)``: the
    batch sampler shards itself (Lightning raises a ``TypeError`` saying so if you forget).

    The defaults are the default recipe's data settings (`minitx-train` without a `--config`).

    Args:
        source: hub id, directory of ``{split}.{lang}[.gz]`` / ``{split}.jsonl`` files, or a
            ``{split}`` jsonl pattern; ``MINITX_DATA_DIR`` replaces a hub id.
        src_lang: source language code.
        tgt_lang: target language code.
        splits: split name -> file stem / hub split (None: Multi30k raw names for local
            files, train/validation/test for the hub).
        vocab_size: joint sentencepiece vocabulary size (a hard limit; too large errors).
        tokenizer_type: sentencepiece model type, ``unigram`` or ``bpe``.
        max_tokens: training batch budget in tokens, batch_size x padded length (padding
            included).
        max_len: longest training sequence in tokens (bos/eos included); longer training
            pairs are skipped and counted, evaluation splits keep everything.
        pad_multiple: pad lengths up to a multiple of this (keeps batch shapes few).
        num_workers: DataLoader worker processes.
        cache_dir: directory for the tokenizer and tokenized data caches (None: no cache; the
            tokenized splits then live in a temporary directory removed at exit).
        seed: shuffling seed, and the seed of the tokenizer's sample.
        eval_max_tokens: batch budget in tokens for validation/test (None: same as
            max_tokens).
        max_positions: the model's position limit (``minitx-train`` links it from
            ``model.transformer.max_positions``). Evaluation pairs longer than that are cut to
            fit when the data is loaded (counted and logged), instead of failing the first
            validation; ``max_len`` must not exceed it. None: no check.
        tokenizer_sample: at most this many sentences (source and target together) train
            the tokenizer: all of them when the training split has no more, else a uniform
            sample seeded by ``seed`` (sentencepiece's ``input_sentence_size`` with
            shuffling; `minitx.data.sample`). None: every sentence, whatever the memory.
        hub_options: more ``datasets.load_dataset`` arguments for a hub ``source``:
            ``name`` (the configuration, e.g. ``de-en``), ``revision``, ``data_dir``.
        prepare_data_per_node: prepare the data once per node (Lightning's default). Set it
            to False when every node shares ``cache_dir`` (a shared filesystem): global rank
            0 prepares and every other process maps its files.
    """

    def __init__(
        self,
        source: str = DEFAULT_SOURCE,
        src_lang: str = "de",
        tgt_lang: str = "en",
        splits: dict[str, str] | None = None,
        vocab_size: int = 8000,
        tokenizer_type: ModelType = "unigram",
        max_tokens: int = 1024,
        max_len: int = 128,
        pad_multiple: int = 8,
        num_workers: int = 0,
        cache_dir: str | None = ".cache/minitx",
        seed: int = 0,
        eval_max_tokens: int | None = 8192,
        max_positions: int | None = None,
        tokenizer_sample: int | None = TOKENIZER_SAMPLE,
        hub_options: dict[str, str] | None = None,
        prepare_data_per_node: bool = True,
    ) -> None:
        super().__init__()
        check_data_source(source)
        check_languages(src_lang, tgt_lang)
        for name, value in (("max_tokens", max_tokens), ("pad_multiple", pad_multiple)):
            if value < 1:
                raise ConfigError(f"data.{name} must be >= 1, got {value}.")
        if eval_max_tokens is not None and eval_max_tokens < 1:
            raise ConfigError(f"data.eval_max_tokens must be >= 1 or null, got {eval_max_tokens}.")
        if max_len < 2:
            raise ConfigError(f"data.max_len must be >= 2, got {max_len}.")
        if num_workers < 0:
            raise ConfigError(f"data.num_workers must be >= 0, got {num_workers}.")
        if not 0 <= seed <= SEED_MAX:  # else a traceback from numpy or torch, after the run began
            raise ConfigError(f"data.seed={seed}: a seed lies in 0..{SEED_MAX}; give one there")
        if tokenizer_sample is not None and tokenizer_sample < 1:
            raise ConfigError(
                f"data.tokenizer_sample must be >= 1 or null (every sentence), got "
                f"{tokenizer_sample}."
            )
        if cache_dir is not None and not str(cache_dir).strip():  # Path("") is the cwd
            raise ConfigError(
                f"data.cache_dir is empty ({str(cache_dir)!r}): give a directory, or null for no "
                "cache (a variable holding it may be unset)"
            )
        if cache_dir is not None:  # a file where a directory must go fails only at the first write
            # a ~ left by the shell (quoted, or from a config file) is the home directory, as
            # for data.source: kept, it made a folder named ~ in the working directory
            cache_dir = os.path.expanduser(cache_dir)  # a ~name of no user stays as it is
            cache = Path(cache_dir)
            if (dangling := dangling_link(cache)) is not None:  # else "File exists", later
                raise ConfigError(f"data.cache_dir {cache_dir}: {dangling}")
            blocking = next((p for p in (cache, *cache.parents) if p.is_file()), None)
            if blocking is not None:
                raise ConfigError(
                    f"data.cache_dir {cache_dir}: {blocking} is a file; give a directory (it is "
                    "created when missing), or null for no cache"
                )
            if cache.is_dir():  # a read-only place or /proc: named now, not at the first write
                check_takes_files(cache, cache_dir, "data.cache_dir")
            else:
                check_dir_takes_files(cache, "data.cache_dir")
        if max_positions is not None and max_len > max_positions:
            raise ConfigError(
                f"data.max_len ({max_len}) exceeds the model's max_positions ({max_positions}); "
                "lower data.max_len or raise model.transformer.max_positions"
            )
        if max_positions is not None and max_positions % pad_multiple:
            # a sentence near the limit (evaluation pairs are cut to it) would be padded past it
            # and stop the training at its first such batch
            raise ConfigError(
                f"the model's max_positions ({max_positions}) is not a multiple of "
                f"data.pad_multiple ({pad_multiple}): a sentence of {max_positions} pieces would "
                f"be padded to {round_up(max_positions, pad_multiple)}, past it; make "
                "model.transformer.max_positions a "
                "multiple of data.pad_multiple"
            )
        self.save_hyperparameters()
        # as expanded above: LightningCLI hands save_hyperparameters the values as given
        self.hparams.cache_dir = cache_dir
        self.prepare_data_per_node = prepare_data_per_node
        self._scratch: Path | None = None
        self.tokenizer: Tokenizer | None = None
        self.dataset: datasets.DatasetDict | None = None
        self.skipped: Counts = {}
        self._prepared: tuple[Tokenizer, datasets.DatasetDict, Counts] | None = None

    # -------------------------------------------------------------------------- setup
    def prepare_data(self) -> None:
        """Fill the caches (hub download, tokenizer, tokenized data); once per node.

        The result is also kept for :meth:`setup` in this process; other processes build from
        the caches in their own ``setup``. Nothing to do once :meth:`setup` has run (e.g.
        ``minitx-train`` checking a resume before it fits).
        """
        if self.dataset is None:
            self._prepared = self._build()

    def setup(self, stage: str | None = None) -> None:
        """Load everything (from the caches when :meth:`prepare_data` ran). Idempotent.

        Under DDP every rank checks that all built the same tokenizer.

        Raises:
            DataError: ranks hold different tokenizers (nodes that prepared apart with
                unequal results).
        """
        if self.dataset is None:
            built, self._prepared = self._prepared or self._build(), None
            self.tokenizer, self.dataset, self.skipped = built
            _check_same_tokenizer(self.tokenizer, self.hparams.cache_dir)

    def _work_dir(self) -> Path:
        """Where the tokenized splits go: ``cache_dir``, or a temporary directory (removed
        when this object is, or at exit) when there is no cache."""
        if self.hparams.cache_dir is not None:
            return Path(self.hparams.cache_dir)
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="minitx-data-"))
            weakref.finalize(self, shutil.rmtree, self._scratch, ignore_errors=True)
        return self._scratch

    def _build(self) -> tuple[Tokenizer, datasets.DatasetDict, Counts]:
        start = time.perf_counter()
        config = self.hparams  # the constructor's arguments
        source = resolve_data_source(config.source)  # says when MINITX_DATA_DIR replaces it
        streams = open_parallel_corpus(
            source,
            config.src_lang,
            config.tgt_lang,
            splits=config.splits,
            hub_options=config.hub_options,
        )
        if "train" not in streams:
            raise DataError(
                f"the corpus has no 'train' split (found {sorted(streams)}); "
                "it trains the tokenizer."
            )
        train = streams["train"]
        sample_key = f"sample={config.tokenizer_sample} seed={config.seed}"
        try:
            tokenizer = Tokenizer.train(  # on both sides of (a seeded sample of) the train split
                sample_sentences(train, config.tokenizer_sample, config.seed),
                vocab_size=config.vocab_size,
                model_type=config.tokenizer_type,
                cache_dir=config.cache_dir,
                # found by the split's content without reading it again
                cache_key=f"{train.fingerprint} {sample_key}",
            )
        except VocabularyTooLargeError as exc:
            if exc.sentences != config.tokenizer_sample:  # the whole split: no larger sample
                raise
            raise VocabularyTooLargeError(  # the sample, not the corpus, set the limit
                f"{exc} Or raise data.tokenizer_sample ({config.tokenizer_sample}, the sentences "
                "the tokenizer trains on; null for all of them).",
                sentences=exc.sentences,
            ) from exc
        tokenized: dict[str, datasets.Dataset] = {}
        skipped: Counts = {}
        for split, stream in streams.items():
            train = split == "train"
            tokenized[split], skipped[split] = prepare_split(
                stream,
                tokenizer,
                self._work_dir(),
                max_len=config.max_len,
                filter_long=train,
                max_positions=None if train else config.max_positions,
            )
        for split, dataset in tokenized.items():  # before any loader (and its notices)
            if len(dataset) == 0:
                raise empty_split_error(split, streams[split], skipped[split], config.max_len)
        logger.info(
            "Data ready in %.1f s: %s pairs (skipped: %s).",
            time.perf_counter() - start,
            {split: len(ds) for split, ds in tokenized.items()},
            skipped,
        )
        return tokenizer, datasets.DatasetDict(tokenized), skipped

    # -------------------------------------------------------------------- dataloaders
    def train_dataloader(self) -> DataLoader:
        """Shuffled token-bucket batches of the training split."""
        loader = self._loader("train")
        if self.trainer is not None:
            loader.batch_sampler.set_epoch(self.trainer.current_epoch)
        return loader

    def val_dataloader(self) -> DataLoader:
        """Validation batches in a fixed order (every pair, none dropped)."""
        return self._loader("validation")

    def test_dataloader(self) -> DataLoader:
        """Test batches in a fixed order (every pair, none dropped)."""
        return self._loader("test")

    def _loader(self, split: str) -> DataLoader:
        """Batches of a split: shuffled for training, in a fixed order for evaluation."""
        config = self.hparams
        dataset = self._split(split)
        train = split == "train"
        key = "max_tokens" if train or not config.eval_max_tokens else "eval_max_tokens"
        sampler = TokenBucketBatchSampler(
            example_lengths(dataset),
            max_tokens=config[key],
            pad_multiple=config.pad_multiple,
            shuffle=train,
            seed=config.seed,
            setting=f"the {split} split's data.{key}",
        )
        return (ResumableDataLoader if train else DataLoader)(
            dataset,
            batch_sampler=sampler,
            collate_fn=functools.partial(collate, pad_multiple=config.pad_multiple),
            num_workers=config.num_workers,
            persistent_workers=config.num_workers > 0,
            # Its own generator: each iterator draws a seed for its workers, which came from
            # torch's global one and so moved the dropout masks a resumed run draws after it
            # (`minitx.training.resume.RandomState`).
            generator=torch.Generator().manual_seed(config.seed),
        )

    def _split(self, split: str) -> datasets.Dataset:
        self.setup()
        assert self.dataset is not None
        if split not in self.dataset:
            raise DataError(
                f"No {split!r} split; this DataModule has {sorted(self.dataset)} (see data.splits)."
            )
        return self.dataset[split]

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        """All source sentences and references of a split, in file order.

        These are exactly the pairs the split's dataloader serves (for evaluation splits:
        every non-empty pair), so BLEU over them covers the full set.
        """
        dataset = self._split(split)
        data = dataset.select_columns(["src_text", "tgt_text"]).with_format("arrow")[:]
        return data.column("src_text").to_pylist(), data.column("tgt_text").to_pylist()


def _check_same_tokenizer(tokenizer: Tokenizer, cache_dir: str | None) -> None:
    """Under DDP: every rank must hold the same tokenizer (else the same ids mean different
    pieces on different ranks). A no-op in a single process.

    Raises:
        DataError: the ranks' tokenizers differ; the message says how to share one.
    """
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    mine = hashlib.sha256(tokenizer.model_bytes).hexdigest()
    every: list[str | None] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(every, mine)
    if len(set(every)) > 1:
        raise DataError(
            f"the training processes built {len(set(every))} different tokenizers (sha256 "
            f"{sorted(set(every))}); give every node the same data.cache_dir on a shared "
            "filesystem with --data.prepare_data_per_node false, or copy the cache directory "
            f"({cache_dir}) of node 0 to the others before training"
        )


def empty_split_error(
    split: str,
    stream: PairStream,
    skipped: dict[str, int],
    max_len: int,
    max_len_setting: str = "data.max_len",
) -> DataError:
    """The error for a split with no pair left to use: where it was read, what was skipped
    (`prepare_split`'s counts). `max_len_setting` names the limit as the caller's user sets it
    (a script's flag rather than minitx-train's key)."""
    reasons = ", ".join(f"{n} {reason}" for reason, n in skipped.items() if n)
    reasons = reasons or "none, the files are empty"
    limit = f" and at most {max_len_setting} ({max_len}) pieces a side" if split == "train" else ""
    without = WITHOUT_TEST if split == "test" else ""
    return DataError(
        f"the {split!r} split ({stream.location}) has no pair to use (skipped: {reasons}); it "
        f"needs line pairs with both sides non-empty{limit}{without}"
    )
