"""What a resumed run restores beyond Lightning's own state, so that it goes on as the run that
never stopped: the record of its best checkpoints when its directory is reached by another
path (`MovedRunCheckpoints`), and torch's random generators (`RandomState`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning as L
import torch

logger = logging.getLogger(__name__)


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
        """Rewrite the paths in `checkpoint["callbacks"]` before the callbacks read them (every
        callback's `on_load_checkpoint` runs before any `load_state_dict`)."""
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


class _Elsewhere(Exception):
    """A recorded checkpoint that is not in the run's checkpoint directory as named now."""


def _rerooted(state: dict[str, Any], old: Path, new: Path) -> dict[str, Any] | None:
    """`ModelCheckpoint.state_dict()` `state` with its paths in `old` moved into `new`, or
    None when one of them lies elsewhere or its file is not in `new`."""

    def moved(path: Any) -> Any:
        if not path:  # "" (or None) before the first save: nothing to move
            return path
        if not isinstance(path, str) or Path(path).parent != old:
            raise _Elsewhere
        there = new / Path(path).name
        if not there.is_file():
            raise _Elsewhere
        return str(there)

    keys = ("best_model_path", "kth_best_model_path", "last_model_path")
    try:
        paths = {key: moved(state[key]) for key in keys if key in state}
        best_k = {moved(path): score for path, score in (state.get("best_k_models") or {}).items()}
    except _Elsewhere:
        return None
    return {**state, **paths, "best_k_models": best_k, "dirpath": str(new)}


class RandomState(L.Callback):
    """Saves torch's random generators (the CPU's, and the current GPU's once CUDA is in use)
    in every checkpoint and restores them on resume.

    Why: Lightning restores the weights, the optimizer, the schedule and the loops, but not
    the generators, which `seed_everything` then seeded afresh: a resumed run with dropout
    drew other masks than the run that never stopped, and its losses left that run's at the
    first update after the stop. (The data order has its own state: `ResumableDataLoader`.)
    Under DDP the checkpoint holds the first process's generators, and every process takes
    them, as every process takes one seed at the start.

    A checkpoint written while a batch is under way (a second Ctrl-C stops inside one, or an
    error does; the resume trains that batch again) holds the generators from that batch's
    start: it had drawn some of its masks already, and the resume drew others.
    """

    def __init__(self) -> None:
        self._step_start: dict[str, Any] | None = None  # the generators before the current step

    def on_train_batch_start(self, *args: Any, **kwargs: Any) -> None:
        self._step_start = _generators()

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self._step_start = None

    def state_dict(self) -> dict[str, Any]:
        """The generators' states: tensors, which a weights-only load reads."""
        return self._step_start if self._step_start is not None else _generators()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the saved generators; one that is damaged, or a GPU's where none is in use,
        is left out with a warning (the run goes on with freshly seeded ones), not a
        traceback from torch."""
        cpu, cuda = state_dict.get("cpu"), state_dict.get("cuda")
        if _same_kind(cpu, torch.get_rng_state()):
            torch.set_rng_state(cpu)
        else:
            _left_out("the CPU's random generator state is damaged")
        if cuda is None:
            return
        if not torch.cuda.is_available():
            _left_out("the checkpoint holds a GPU's random generator state, and no GPU is in use")
        elif _same_kind(cuda, torch.cuda.get_rng_state()):
            torch.cuda.set_rng_state(cuda)
        else:
            _left_out("the GPU's random generator state is damaged")


def _generators() -> dict[str, Any]:
    """torch's generator states: the CPU's, and the current GPU's once CUDA is in use."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()  # this process's device
    return state


def _left_out(why: str) -> None:
    logger.warning(
        "%s: left out, so this run draws other dropout masks than the run it resumes would "
        "have drawn",
        why,
    )


def _same_kind(saved: Any, expected: torch.Tensor) -> bool:
    """Whether `saved` is a generator state of the kind and size of `expected`."""
    return (
        isinstance(saved, torch.Tensor)
        and saved.dtype == expected.dtype
        and saved.shape == expected.shape
    )
