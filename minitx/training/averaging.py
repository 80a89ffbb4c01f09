"""`CheckpointAveraging`: at the end of training, a checkpoint with the mean weights of the
last N epochs (``checkpoints/averaged.ckpt``)."""

from __future__ import annotations

import logging
from collections import deque
from pathlib import Path
from typing import Any

import lightning as L
from torch import Tensor

from minitx.averaging import AVERAGED_KEY, average_state_dicts, detached_copy
from minitx.checkpoint import CHECKPOINT_KEY, read_checkpoint
from minitx.errors import ConfigError

logger = logging.getLogger(__name__)


class CheckpointAveraging(L.Callback):
    """Keep the weights of the last `last_n` epochs and write their mean as a checkpoint.

    The copies are kept in CPU memory (`last_n` times the model's size). When training ends
    normally (not after an error or Ctrl-C) their mean (`minitx.averaging.average_state_dicts`)
    is written as `filename` beside ``last.ckpt``: a checkpoint like it, the epochs averaged
    listed under ``averaged_from`` in its payload; the live model keeps its own weights. A
    resumed run averages the epochs trained since the resume only.

    Args:
        last_n: how many of the last epochs to average; 0 = off.
        filename: the file written in the checkpoint directory.
    """

    def __init__(self, last_n: int = 0, filename: str = "averaged.ckpt") -> None:
        super().__init__()
        if last_n < 0:
            raise ConfigError(f"CheckpointAveraging: last_n must be >= 0 (0 = off), got {last_n}")
        if not filename or Path(filename).name != filename:
            raise ConfigError(
                f"CheckpointAveraging: filename must be a plain file name, got {filename!r}"
            )
        self.last_n, self.filename = last_n, filename
        self._kept: deque[tuple[int, int, dict[str, Tensor]]] = deque(maxlen=max(last_n, 1))
        self._record: list[dict[str, Any]] | None = None  # set while writing the average
        self.written: Path | None = None
        """The averaged checkpoint written at the end of training, if any."""

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.last_n:
            weights = detached_copy(pl_module.model.state_dict())
            self._kept.append((trainer.current_epoch, trainer.global_step, weights))

    def _path(self, trainer: L.Trainer) -> Path:
        """Where the average goes: beside ``last.ckpt``."""
        directory = trainer.checkpoint_callback.dirpath if trainer.checkpoint_callback else None
        return Path(directory or Path(trainer.default_root_dir) / "checkpoints") / self.filename

    def written_at_the_end(self, trainer: L.Trainer) -> Path | None:
        """The average this run wrote when its training ended (at the step the trainer is at),
        for a resume with nothing left to train, which Lightning ends before any training hook
        (the run stopped in its test, say); None when there is none.

        Raises:
            CheckpointError: the file there is damaged.
        """
        path = self._path(trainer)
        if not self.last_n or not path.is_file():
            return None
        checkpoint = read_checkpoint(path, mmap=True)
        record = checkpoint.get(CHECKPOINT_KEY, {}).get(AVERAGED_KEY)
        at_the_end = checkpoint.get("global_step") == trainer.global_step
        return path if record and at_the_end else None

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.last_n or not self._kept:
            return
        epochs = [epoch for epoch, _, _ in self._kept]
        names = [f"the weights after epoch {epoch + 1}" for epoch in epochs]
        mean = average_state_dicts([weights for _, _, weights in self._kept], names)
        model = pl_module.model
        own = detached_copy(model.state_dict())
        self._record = [{"epoch": epoch, "global_step": step} for epoch, step, _ in self._kept]
        path = self._path(trainer)
        try:
            model.load_state_dict(mean)
            trainer.save_checkpoint(path, weights_only=False)  # every rank: collective under DDP
        finally:
            self._record = None
            model.load_state_dict(own)
        self.written = path
        if len(epochs) < self.last_n:
            logger.warning(
                "averaged only %d epochs (averaging.last_n: %d): training ran fewer "
                "since it started or resumed",
                len(epochs),
                self.last_n,
            )
        if trainer.is_global_zero:
            span = f"{epochs[0] + 1}-{epochs[-1] + 1}" if len(epochs) > 1 else f"{epochs[0] + 1}"
            print(f"averaged the weights of epochs {span} into {path}", flush=True)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._record is not None:
            checkpoint.setdefault(CHECKPOINT_KEY, {})[AVERAGED_KEY] = self._record
