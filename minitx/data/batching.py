"""Length-bucketed batching: `TokenBucketBatchSampler` groups examples of equal padded
length into batches of at most ``max_tokens`` padded tokens (sharded per rank under DDP);
`ResumableDataLoader` serves them so that a run resumed inside an epoch goes on with that
epoch's other batches; `collate` pads them into tensors, framed by
`minitx.vocab.frame_source` / `frame_target`."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import datasets
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from minitx.vocab import frame_source, frame_target, pad

logger = logging.getLogger(__name__)


def round_up(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``."""
    return -(-length // multiple) * multiple


def example_lengths(dataset: datasets.Dataset) -> np.ndarray:
    """Per-example batching length: ``max(src_len + 1, tgt_len + 1)`` (eos / bos included)."""
    lengths = dataset.select_columns(["src_len", "tgt_len"]).with_format("numpy")[:]
    return np.maximum(lengths["src_len"], lengths["tgt_len"]) + 1


class TokenBucketBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples with at most ``max_tokens`` padded tokens each.

    Every length is rounded up to a multiple of ``pad_multiple``; examples with the same
    rounded length form a bucket and are cut into batches of ``max_tokens // length``
    examples, so ``batch_size * padded_length <= max_tokens``. Batch shapes therefore come
    from a small fixed set (one full size and one remainder per bucket), which matters on CPU
    bf16 where oneDNN builds a kernel per new shape. An example longer than ``max_tokens``
    gets a batch of its own; nothing is dropped.

    With ``shuffle=True`` the examples within each bucket and the order of the batches are
    shuffled from ``(seed, epoch)``: call :meth:`set_epoch` every epoch (Lightning does it,
    through the ``sampler`` attribute). With ``shuffle=False`` the order is fixed: buckets
    from short to long, file order inside a bucket.

    Distributed: with ``num_replicas > 1`` each rank yields a disjoint share of the batches,
    the same number on every rank (when the batch count does not divide evenly, the largest
    batches are halved until it does; see :func:`_even_out`). Construct the sampler after the
    process group is initialised (Lightning's ``*_dataloader`` hooks are) and train with
    ``Trainer(use_distributed_sampler=False)``.

    Args:
        lengths: per-example lengths, e.g. :func:`example_lengths`.
        seed: base seed for shuffling (the same on every rank).
        num_replicas: number of ranks; default: the ``torch.distributed`` world size, else 1.
        rank: this rank; default: the ``torch.distributed`` rank, else 0.
        setting: what the warning of over-long examples calls ``max_tokens`` (the setting
            a user raises, e.g. ``data.eval_max_tokens``), and the split they belong to.
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        *,
        max_tokens: int,
        pad_multiple: int = 8,
        shuffle: bool = False,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
        setting: str = "max_tokens",
    ) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.ndim != 1 or len(lengths) == 0:
            raise ValueError("lengths must be a non-empty 1-D sequence of example lengths.")
        if lengths.min() < 1:
            raise ValueError(f"lengths must be >= 1, got a minimum of {lengths.min()}.")
        if max_tokens < 1 or pad_multiple < 1:
            raise ValueError(
                f"max_tokens and pad_multiple must be >= 1, got {max_tokens} and {pad_multiple}."
            )
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}.")
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if num_replicas is None:
            num_replicas = torch.distributed.get_world_size() if distributed else 1
        if rank is None:
            rank = torch.distributed.get_rank() if distributed else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}.")

        self.max_tokens = max_tokens
        self.pad_multiple = pad_multiple
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.skip = 0  # batches of the next iteration to leave out (`ResumableDataLoader`)
        # Lightning's fit loop calls set_epoch on dataloader.batch_sampler.sampler, never on the
        # batch sampler itself (lightning.fabric.utilities.data._set_sampler_epoch), so the
        # batch sampler is its own sampler.
        self.sampler = self
        self._padded = -(-lengths // pad_multiple) * pad_multiple

        over = int((self._padded > max_tokens).sum())
        if over:
            logger.warning(
                "%d examples are longer than %s=%d (padded); each gets a batch of its own.",
                over,
                setting,
                max_tokens,
            )
        total = len(self._all_batches(None))
        self._num_batches = total // num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the shuffle (same value on every rank)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self._num_batches

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch]) if self.shuffle else None
        batches = self._all_batches(rng)
        skip, self.skip = self.skip, 0
        for batch in batches[self.rank :: self.num_replicas][skip:]:
            yield batch.tolist()

    def _all_batches(self, rng: np.random.Generator | None) -> list[np.ndarray]:
        """All batches of one epoch (every rank), evened out to a multiple of num_replicas."""
        batches: list[np.ndarray] = []
        for padded_length in np.unique(self._padded):
            indices = np.flatnonzero(self._padded == padded_length)
            if rng is not None:
                indices = rng.permutation(indices)
            size = max(1, self.max_tokens // int(padded_length))
            batches.extend(indices[start : start + size] for start in range(0, len(indices), size))
        batches = _even_out(batches, self.num_replicas)
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def _even_out(batches: list[np.ndarray], num_replicas: int) -> list[np.ndarray]:
    """Halve the largest batches until the batch count is a multiple of ``num_replicas``.

    Halving keeps every example exactly once and each batch within ``max_tokens``. Only when
    every batch holds a single example is that impossible; then the first batches are
    repeated (as ``DistributedSampler`` does) so the ranks stay in step, with a warning.
    """
    batches = list(batches)
    while len(batches) % num_replicas:
        largest = max(range(len(batches)), key=lambda i: len(batches[i]))
        if len(batches[largest]) < 2:
            extra = num_replicas - len(batches) % num_replicas
            logger.warning(
                "Cannot split %d single-example batches evenly over %d ranks; repeating %d "
                "of them this epoch.",
                len(batches),
                num_replicas,
                extra,
            )
            return batches + batches[:extra]
        half = len(batches[largest]) // 2
        batch = batches[largest]
        batches[largest : largest + 1] = [batch[:half], batch[half:]]
    return batches


class ResumableDataLoader(DataLoader):
    """A `DataLoader` of a `TokenBucketBatchSampler` that a run stopped inside an epoch
    resumes where it stopped: the epoch's batches it had not served yet, in the same order.

    Lightning saves `state_dict` in each checkpoint and hands it back to `load_state_dict`
    before the resumed epoch's iteration (its protocol for resumable loaders). Without it a
    resumed epoch would start from its first batch again, training those twice and the rest
    never. Batches are counted as this loader hands them to the loop (worker processes fetch
    ahead of that), so a checkpoint written after an update counts the update's batch.
    """

    batch_sampler: TokenBucketBatchSampler

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.served = 0  # batches of the current epoch handed out so far
        self.resume: dict[str, int] | None = None  # from a checkpoint, for the next iteration

    def __iter__(self) -> Iterator[Any]:
        # A generator: this runs at the first batch, after Lightning has set the epoch.
        resume, self.resume = self.resume, None
        sampler = self.batch_sampler
        same_epoch = resume is not None and resume["epoch"] == sampler.epoch
        layout = self._layout()
        if same_epoch and any(resume.get(key) != value for key, value in layout.items()):
            # Lightning's loop restores its own count of the epoch's batches and ends the
            # epoch when it reaches the new number: the new batches are served from their
            # start, as many as it allows (all of them where the count is past that number).
            batches, served = layout["batches"], resume["served"]
            logger.warning(
                "the epoch's batches are not the checkpoint's (%s then, %s now): the epoch goes "
                "on with the first %d of its new batches (Lightning counts the %d served "
                "before the stop), then the next epoch begins whole",
                resume,
                layout,
                batches - served if served <= batches else batches,
                served,
            )
            same_epoch = False
        self.served = sampler.skip = resume["served"] if same_epoch else 0
        for batch in super().__iter__():
            self.served += 1
            yield batch

    def _layout(self) -> dict[str, int]:
        """What makes the epoch's batches (a resume with other data.max_tokens or devices
        cuts them otherwise)."""
        sampler = self.batch_sampler
        return {"batches": len(sampler), "replicas": sampler.num_replicas}

    def state_dict(self) -> dict[str, int]:
        """Where the training stands in its epoch: the epoch, the batches served, and the
        epoch's batches (their number and the processes they are shared among)."""
        return {"epoch": self.batch_sampler.epoch, "served": self.served, **self._layout()}

    def keep_untrained(self, trained: int) -> None:
        """Count only the epoch's first `trained` batches as served, so that a checkpoint
        saved after a step failed serves that step's batch again when the run resumes."""
        self.served = min(self.served, trained)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume from `state_dict`'s position at the next iteration, if it is that epoch's
        and its batches are the same."""
        self.resume = {key: int(value) for key, value in state.items()}


def collate(examples: Sequence[Mapping[str, Any]], pad_multiple: int = 8) -> dict[str, Any]:
    """Pad a list of tokenized examples into model-ready tensors.

    Args:
        examples: rows with ``src_ids``, ``tgt_ids``, ``src_text`` and ``tgt_text``.
        pad_multiple: padded lengths are rounded up to a multiple of this.

    Returns:
        ``src`` (B, S) = src_ids + [eos] (`minitx.vocab.frame_source`); ``tgt_in`` (B, T) =
        [bos] + tgt_ids and ``tgt_out`` (B, T) = tgt_ids + [eos] (`minitx.vocab.frame_target`);
        all ``torch.long``, padded with ``PAD_ID`` (0) to lengths rounded up to
        ``pad_multiple`` (`minitx.vocab.pad`); plus ``src_text`` and ``tgt_text``, the raw
        strings (for BLEU).
    """
    if not examples:
        raise ValueError("collate got an empty batch.")
    sources = [frame_source(ex["src_ids"]) for ex in examples]
    tgt_in, tgt_out = zip(*(frame_target(ex["tgt_ids"]) for ex in examples), strict=True)
    return {
        "src": pad(sources, multiple=pad_multiple),  # (B, S)
        "tgt_in": pad(tgt_in, multiple=pad_multiple),  # (B, T)
        "tgt_out": pad(tgt_out, multiple=pad_multiple),  # (B, T)
        "src_text": [ex["src_text"] for ex in examples],
        "tgt_text": [ex["tgt_text"] for ex in examples],
    }
