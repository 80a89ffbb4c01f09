"""How training writes and reads its checkpoints: whole or not at all, and never running code.

Lightning's own `TorchCheckpointIO` serialises into memory and lets fsspec write the bytes
through a temporary file in the system's temporary directory, then *moves* it over the
checkpoint. When the runs directory is on another filesystem (a mounted disk, a network
share) that move is a copy: a kill during it leaves a truncated ``last.ckpt`` (the previous
good one lost) and an orphan in ``$TMPDIR``; a full disk leaves a truncated file under the
real name. `AtomicCheckpointIO` writes through `minitx.checkpoint.write_checkpoint` instead:
a temporary file in the checkpoint's own directory, flushed, then renamed (atomic on every
local filesystem).

Reading goes through `minitx.checkpoint.read_checkpoint` too: Lightning's own loader calls
`torch.load` with torch's default, which unpickled arbitrary objects before torch 2.6, so a
crafted `--ckpt_path` file could run code on resume. Here it is refused in one line.

`MovedRunCheckpoints` keeps the record of the best checkpoints when a run is resumed from
another path to its directory (moved, or named relative once and absolute the next time), and
`RandomState` carries torch's random generators, so that a resumed run draws what the run
that never stopped would have drawn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.types import _PATH

from minitx.checkpoint import read_checkpoint, write_checkpoint

logger = logging.getLogger(__name__)


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that writes atomically and reads weights-only (see module doc)."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        """Write `checkpoint` to `path` (a local file) whole, or leave `path` unchanged."""
        if storage_options is not None:  # as Lightning's TorchCheckpointIO
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options")
        write_checkpoint(checkpoint, path)

    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Callable | None = None,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        """Read `path` weights-only onto the CPU (`minitx.checkpoint.read_checkpoint`).

        `map_location` and `weights_only` are ignored: Lightning moves the restored state to
        the model's device itself, and a checkpoint is never read with pickle's full powers.
        """
        return read_checkpoint(path)


class MovedRunCheckpoints(L.Callback):
    """Re-roots a resumed checkpoint's `ModelCheckpoint` records (the best and k-th best
    checkpoints, last.ckpt) in the run's checkpoint directory as this run names it, when that
    directory holds every file they name.

    Why: Lightning compares the directory's path as text; when it differs (the run moved,
    or `--runs_dir` was given as an absolute path this time) it forgets the scores of the
    checkpoints it kept, so the next validation, however much worse, became the "best" and
    was tested. A resume from another run's checkpoint goes on in a new directory, which
    holds none of those files: it is left to Lightning.
    """

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Rewrite the paths in `checkpoint["callbacks"]` before the callbacks read them."""
        states = checkpoint.get("callbacks") or {}
        for callback in trainer.checkpoint_callbacks:
            state = states.get(callback.state_key)
            if not isinstance(state, dict) or not callback.dirpath:
                continue
            stored = state.get("dirpath")
            if isinstance(stored, str) and stored != callback.dirpath:
                moved = _rerooted(state, Path(stored), Path(callback.dirpath))
                if moved is not None:
                    states[callback.state_key] = moved


def _rerooted(state: dict[str, Any], old: Path, new: Path) -> dict[str, Any] | None:
    """`ModelCheckpoint.state_dict()` `state` with its paths in `old` moved into `new`, or
    None when one of them lies elsewhere or its file is not in `new`."""

    def moved(path: Any) -> str | None:
        if not path:  # "" before the first save
            return path
        if not isinstance(path, str) or Path(path).parent != old:
            return None
        there = new / Path(path).name
        return str(there) if there.is_file() else None

    paths = ("best_model_path", "kth_best_model_path", "last_model_path")
    best_k = state.get("best_k_models") or {}
    new_paths = {key: moved(state.get(key)) for key in paths if key in state}
    new_best_k = {moved(path): score for path, score in best_k.items()}
    if None in new_paths.values() or None in new_best_k:
        return None
    return {**state, **new_paths, "best_k_models": new_best_k, "dirpath": str(new)}


class RandomState(L.Callback):
    """Saves torch's random generators (the CPU's, and each GPU's once CUDA is in use) in
    every checkpoint and restores them on resume.

    Why: Lightning restores the weights, the optimizer, the schedule and the loops, but not
    the generators, which `seed_everything` then seeded afresh: a resumed run with dropout
    drew other masks than the run that never stopped, and its losses left that run's at the
    first update after the stop. (The data order has its own state: `ResumableDataLoader`.)
    """

    def state_dict(self) -> dict[str, Any]:
        """The generators' states: tensors, which a weights-only load reads."""
        state: dict[str, Any] = {"cpu": torch.get_rng_state()}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved generators; a damaged state is left out with a warning (the run
        goes on with freshly seeded ones), not a traceback from torch."""
        cpu, cuda = state_dict.get("cpu"), state_dict.get("cuda")
        expected = torch.get_rng_state()
        if not _same_kind(cpu, expected):
            logger.warning(
                "the checkpoint's random generator state is damaged: left out, so this run "
                "draws other dropout masks than the run it resumes would have"
            )
            return
        torch.set_rng_state(cpu)
        if cuda is not None and torch.cuda.is_available():
            states = torch.cuda.get_rng_state_all()
            if isinstance(cuda, list) and len(cuda) == len(states):
                if all(_same_kind(a, b) for a, b in zip(cuda, states, strict=True)):
                    torch.cuda.set_rng_state_all(cuda)


def _same_kind(saved: Any, expected: torch.Tensor) -> bool:
    """Whether `saved` is a generator state of the kind and size of `expected`."""
    return (
        isinstance(saved, torch.Tensor)
        and saved.dtype == expected.dtype
        and saved.shape == expected.shape
    )
