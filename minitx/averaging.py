"""Checkpoint averaging: the element-wise mean of the weights of several checkpoints.

Averaging the weights of the last few epochs of one run usually translates a little better
than any one of them (Vaswani et al. 2017 average the last 5 or 20 checkpoints):
`average_state_dicts` for state dicts (the training callback
`minitx.training.averaging.CheckpointAveraging`), `average_checkpoints` for `.ckpt` files
(``minitx-average``). This module imports torch and the checkpoint reader; never Lightning.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from minitx.checkpoint import (
    CHECKPOINT_KEY,
    MODEL_PREFIX,
    CheckpointError,
    check_finite,
    load_checkpoint,
    model_config_differences,
    seed_of,
    weights_digest,
)
from minitx.errors import ConfigError
from minitx.model import TransformerConfig

logger = logging.getLogger(__name__)

AVERAGED_KEY = "averaged_from"
"""Key, in the minitx payload, of the list of what an averaged checkpoint was averaged from:
one dict per input with its `epoch` and `global_step` (and its `file` when read from one)."""

TRAINING_STATE_KEYS = ("optimizer_states", "lr_schedulers", "loops", "callbacks")
"""Lightning entries that describe one file's training state; an averaged file leaves them
out (they belong to other weights), so it is a weights-only checkpoint."""


def _storage_key(tensor: Tensor) -> tuple | None:
    """What identifies the memory a tensor views (None for an empty tensor)."""
    if tensor.numel() == 0:
        return None
    storage = tensor.untyped_storage()
    return (storage.data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())


def _ties(state: Mapping[str, Tensor]) -> dict[str, str]:
    """Key -> the first key viewing the same memory (tied weights, e.g. the output projection
    and the target embedding); keys viewing memory of their own map to themselves."""
    first: dict[tuple, str] = {}
    ties = {}
    for key, value in state.items():
        memory = _storage_key(value)
        ties[key] = key if memory is None else first.setdefault(memory, key)
    return ties


def detached_copy(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A CPU copy of a state dict (e.g. a snapshot of the weights during training) in which
    tied tensors stay one tensor."""
    ties = _ties(state)
    copy: dict[str, Tensor] = {}
    for key, value in state.items():
        tied = ties[key]
        copy[key] = copy[tied] if tied != key else value.detach().to("cpu", copy=True)
    return copy


class _Mean:
    """Running float64 sums of state dicts, checked against the first one added."""

    def __init__(self) -> None:
        self.count = 0
        self.reference: dict[str, Tensor] = {}  # the first state (its non-float tensors kept)
        self.ties: dict[str, str] = {}
        self.sums: dict[str, Tensor] = {}
        self.first_name = ""

    def add(self, state: Mapping[str, Tensor], name: str) -> None:
        """Add one state dict; `name` (a file, an epoch) goes into error messages."""
        check_finite(state, name)
        if self.count == 0:
            self.reference, self.ties, self.first_name = dict(state), _ties(state), name
            self.sums = {
                key: value.detach().to("cpu", torch.float64, copy=True)
                for key, value in state.items()
                if value.is_floating_point() and self.ties[key] == key
            }
        else:
            self._check(state, name)
            for key, total in self.sums.items():
                total += state[key].detach().to("cpu", torch.float64)
        self.count += 1

    def _check(self, state: Mapping[str, Tensor], name: str) -> None:
        against = f"those of {self.first_name}"
        missing, extra = self.reference.keys() - state.keys(), state.keys() - self.reference
        if missing or extra:
            which = f"lacks {sorted(missing)[0]}" if missing else f"has {sorted(extra)[0]}"
            raise CheckpointError(
                f"{name}: its weights do not match {against}: it {which} "
                f"({len(missing)} missing, {len(extra)} extra tensors)"
            )
        for key, first in self.reference.items():
            value = state[key]
            if value.shape != first.shape or value.dtype != first.dtype:
                raise CheckpointError(
                    f"{name}: {key} is {value.dtype} {tuple(value.shape)} but "
                    f"{first.dtype} {tuple(first.shape)} in {self.first_name}"
                )
            if not value.is_floating_point() and not torch.equal(value, first):
                raise CheckpointError(
                    f"{name}: the integer/bool buffer {key} differs from {self.first_name}'s; "
                    "such buffers cannot be averaged"
                )
        if _ties(state) != self.ties:
            raise CheckpointError(f"{name}: its weights are tied differently from {against}")

    def result(self) -> dict[str, Tensor]:
        """The mean of everything added, each tensor in its original dtype."""
        mean: dict[str, Tensor] = {}
        for key, first in self.reference.items():
            tied = self.ties[key]
            if tied != key:
                mean[key] = mean[tied]
            elif first.is_floating_point():
                mean[key] = (self.sums[key] / self.count).to(first.dtype)
            else:
                mean[key] = first.detach().to("cpu", copy=True)
        return mean


def average_state_dicts(
    states: Iterable[Mapping[str, Tensor]], names: Sequence[str] | None = None
) -> dict[str, Tensor]:
    """The element-wise mean of state dicts with the same keys, shapes and dtypes.

    Floating tensors are summed in float64 and cast back to their dtype (so the mean of N
    copies of one state is that state, bit for bit); integer and bool tensors must be equal
    in all states and are kept; tensors tied in the states (one memory under two keys) are
    one tensor in the result too.

    Args:
        states: the state dicts (e.g. `Transformer.state_dict()` of several epochs).
        names: what to call each state in error messages (default: "state 1", ...).

    Raises:
        ConfigError: no states.
        CheckpointError: the states differ in keys, shapes, dtypes, ties or integer buffers,
            or a floating tensor holds NaN or inf.
    """
    mean = _Mean()
    for i, state in enumerate(states):
        name = names[i] if names is not None else f"state {i + 1}"
        mean.add(state, name)
    if mean.count == 0:
        raise ConfigError("nothing to average: give at least one state dict or checkpoint")
    return mean.result()


def _model_config(checkpoint: Mapping[str, Any], name: str) -> TransformerConfig:
    """The checkpoint's model config with every field (older files may lack new ones)."""
    try:
        return TransformerConfig.from_dict(checkpoint[CHECKPOINT_KEY]["model_config"])
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{name}: damaged model config: {exc}") from exc


def _compatible(first: Mapping[str, Any], other: Mapping[str, Any], names: tuple[str, str]):
    """Refuse to average checkpoints of different models, tokenizers or language pairs."""
    ours, theirs = first[CHECKPOINT_KEY], other[CHECKPOINT_KEY]
    a, b = _model_config(first, names[0]), _model_config(other, names[1])
    differ = model_config_differences(b, a, between="vs")  # in the order the message names
    hint = "average checkpoints of one training run"
    if differ:
        raise CheckpointError(
            f"{names[1]}: cannot be averaged with {names[0]}: the model configs differ "
            f"({differ}); {hint}"
        )
    if ours["tokenizer"] != theirs["tokenizer"]:
        raise CheckpointError(
            f"{names[1]}: cannot be averaged with {names[0]}: the tokenizers differ (their "
            f"token ids mean other pieces); {hint}"
        )
    if ours.get("data") != theirs.get("data"):
        raise CheckpointError(
            f"{names[1]}: cannot be averaged with {names[0]}: the language pairs differ "
            f"({theirs.get('data')} vs {ours.get('data')}); {hint}"
        )


def _check_distinct(paths: Sequence[str | Path]) -> None:
    """Refuse a file given twice, under any name (another spelling, a link): it would weigh
    twice in the mean without a word."""
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        try:
            stat = os.stat(path)
        except OSError:
            continue  # missing: load_checkpoint names it
        key = (stat.st_dev, stat.st_ino)
        if key in seen:
            raise ConfigError(
                f"{path} is the same file as {seen[key]}: each checkpoint counts once in the "
                "mean; give each file once"
            )
        seen[key] = str(path)


def average_checkpoints(paths: Sequence[str | Path]) -> dict[str, Any]:
    """The checkpoint whose model weights are the mean of those of the checkpoints at `paths`.

    The files are read one at a time (`load_checkpoint`: no code in them runs), so memory
    holds one checkpoint and the float64 sums. The result keeps the first file's entries
    (minitx payload, state-dict entries outside the model, epoch, step, hyper-parameters)
    but not its training state (optimizer, schedulers, loops, callbacks), which belongs to
    other weights; the payload gets `averaged_from`: per file its path, epoch and step (and
    its own `averaged_from` when it is an average itself, which is averaged with a warning).
    Checkpoints of runs with other seeds (other initial weights) are averaged with a warning.

    Args:
        paths: minitx `.ckpt` files of one model (same model config, tokenizer, languages).

    Returns:
        The checkpoint dict; `write_checkpoint` saves it.

    Raises:
        ConfigError: `paths` is empty, names one file twice (a link or another spelling
            too), or two files hold the same weights.
        FileNotFoundError: a file is missing.
        CheckpointError: a file is not a minitx checkpoint, or the files differ in model
            config, tokenizer, languages, weight names, shapes or integer buffers, or hold
            NaN / inf.
    """
    if not paths:
        raise ConfigError("nothing to average: give at least one checkpoint file")
    _check_distinct(paths)
    first: dict[str, Any] | None = None
    first_name = str(paths[0])
    mean = _Mean()
    record = []
    seeds: dict[str, str] = {}  # seed -> the first file trained with it
    digests: dict[str, str] = {}  # weights_digest -> the file that holds those weights
    nested: list[str] = []  # inputs that are averages themselves, with how many they average
    for path in paths:
        checkpoint = load_checkpoint(path)
        if first is None:  # kept without its training state (memory: the weights)
            first = {k: v for k, v in checkpoint.items() if k not in TRAINING_STATE_KEYS}
        else:
            _compatible(first, checkpoint, (first_name, str(path)))
        if (seed := seed_of(checkpoint)) is not None:
            seeds.setdefault(seed, str(path))
        weights = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith(MODEL_PREFIX)}
        digest = weights_digest(weights)
        if digest in digests:  # e.g. a best checkpoint and last.ckpt saved at one update
            raise ConfigError(
                f"{path} holds the same weights as {digests[digest]}: they would count twice "
                "in the mean; give one of them"
            )
        digests[digest] = str(path)
        mean.add(weights, str(path))
        entry = {
            "file": str(path),
            "epoch": checkpoint.get("epoch"),
            "global_step": checkpoint.get("global_step"),
        }
        if (inner := checkpoint[CHECKPOINT_KEY].get(AVERAGED_KEY)) is not None:
            nested.append(f"{path} ({len(inner) if isinstance(inner, list) else '?'})")
            entry[AVERAGED_KEY] = inner  # what it is the mean of
        record.append(entry)
    assert first is not None
    if len(seeds) > 1:  # each run began from its own random weights: their mean is neither's
        logger.warning(
            "the checkpoints come from runs with other seeds (%s): runs that began from other "
            "weights do not average into a working model; average checkpoints of one run",
            ", ".join(f"{seed} in {name}" for seed, name in seeds.items()),
        )
    if nested:  # each counts once, so the checkpoints inside it weigh less than the others
        logger.warning(
            "%s %s itself the mean of checkpoints (how many in brackets); each file counts "
            "once, so the checkpoints inside weigh less than the others: average the original "
            "checkpoints for equal weights",
            ", ".join(nested),
            "is" if len(nested) == 1 else "are",
        )
    averaged = dict(first)
    averaged["state_dict"] = {**first["state_dict"], **mean.result()}
    averaged[CHECKPOINT_KEY] = {**first[CHECKPOINT_KEY], AVERAGED_KEY: record}
    return averaged
