"""`ContinuingCSVLogger`: ``metrics.csv`` that continues a run's history when training
resumes (`--ckpt_path last`).

Lightning's `CSVLogger` deletes an existing ``metrics.csv`` when its directory is reused, so
a resumed run would lose every earlier row. This logger writes the same file through
Lightning's public `Logger` interface, keeps the rows up to the checkpoint's step (later ones
are logged again by the resumed run; TensorBoard's `purge_step` does the same) and appends
from there. Every rewrite of the file replaces it whole, never leaving it half-written.
"""

from __future__ import annotations

import csv
import os
from argparse import Namespace
from pathlib import Path
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor

from minitx.textio import atomic_path

METRICS_FILE = "metrics.csv"
FLUSH_EVERY_N_STEPS = 100
"""How often the rows logged so far are written (`CSVLogger`'s default)."""

TEST_PREFIX = "test/"
"""What the names of the test's scores after training begin with (``test/bleu_greedy``)."""
TRAIN_LOSS = "train/loss"
"""The training loss, logged with each update's other per-update figures."""
LEARNING_RATE_PREFIX = "lr-"
"""What Lightning's `LearningRateMonitor` names its columns with (``lr-AdamW/pg1``)."""


class ContinuingCSVLogger(Logger):
    """Log metrics to ``{save_dir}/{name}/{version}/metrics.csv``, continuing it on resume.

    Args:
        resume_step: the global step of the checkpoint training resumes from; None for a new
            run (an existing file is then replaced, as `CSVLogger` does).
        prefix, flush_logs_every_n_steps: as `CSVLogger`'s (it stands in for the user's own
            on a resume: `continuing_loggers`).
    """

    def __init__(
        self,
        save_dir: str,
        name: str = "",
        version: str = "csv",
        resume_step: int | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = FLUSH_EVERY_N_STEPS,
    ) -> None:
        super().__init__()
        self.resume_step = resume_step
        self.prefix, self.flush_every = prefix, flush_logs_every_n_steps
        self.path = Path(save_dir) / name / version / METRICS_FILE
        self.keys: list[str] = []  # the file's columns
        self.rows: list[dict[str, Any]] = []  # logged, not written yet
        self.hparams: dict[str, Any] = {}
        self.prepared = False  # the file trimmed (resume) or removed (new run)
        self._save_dir, self._name, self._version = save_dir, name, version

    @property
    def name(self) -> str:
        return self._name

    @property
    def version(self) -> str:
        return self._version

    @property
    def save_dir(self) -> str:
        return self._save_dir

    @property
    def log_dir(self) -> str:
        return str(self.path.parent)

    @rank_zero_only
    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kw: Any) -> None:
        """The module's hyperparameters as ``hparams.yaml`` beside the metrics, as
        `CSVLogger` writes them."""
        self.hparams.update(vars(params) if isinstance(params, Namespace) else params)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        save_hparams_to_yaml(self.path.parent / "hparams.yaml", self.hparams)

    @rank_zero_only
    def log_metrics(self, metrics: dict[str, float | Tensor], step: int | None = None) -> None:
        row = {
            f"{self.prefix}{CSVLogger.LOGGER_JOIN_CHAR}{k}" if self.prefix else k: (
                v.item() if isinstance(v, Tensor) else v
            )
            for k, v in metrics.items()
        }
        row["step"] = len(self.rows) if step is None else step
        self.rows.append(row)
        if (row["step"] + 1) % self.flush_every == 0:
            self.save()

    @rank_zero_only
    def save(self) -> None:
        """Write the rows logged so far: appended, or the file rewritten whole when a new
        metric adds a column. Nothing logged and no file yet: nothing is created (a run that
        fails before its first step leaves no directory)."""
        if self.rows or self.path.is_file():
            self._prepare()
        if not self.rows:
            return
        new_keys = set().union(*self.rows) - set(self.keys)
        exists = self.path.is_file()
        self.keys = [*self.keys, *sorted(new_keys)]  # the file's order: rows are appended to it
        if new_keys and exists:
            with self.path.open(newline="", encoding="utf-8") as file:
                _write_rows(self.path, self.keys, list(csv.DictReader(file)))
        with self.path.open("a" if exists else "w", newline="", encoding="utf-8") as file:
            writer = csv.DictWriter(file, fieldnames=self.keys)
            if not exists:
                writer.writeheader()
            writer.writerows(self.rows)
        self.rows = []

    @rank_zero_only
    def finalize(self, status: str) -> None:
        self.save()

    def _prepare(self) -> None:
        """Once: keep the rows up to `resume_step` of an existing file, or remove it."""
        if self.prepared:
            return
        self.prepared = True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.is_file():
            return
        if self.resume_step is None:
            os.remove(self.path)
            return
        with self.path.open(newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") and self._before(r)]
        _write_rows(self.path, header, rows)
        self.keys = header

    def _before(self, row: dict[str, str]) -> bool:
        """Whether a resume from `resume_step` keeps `row`: logged up to the checkpoint's
        step, but not, at that step, the next update's (its loss and its learning rate:
        Lightning logs an update's rows at the step before it, so they are there when the
        checkpoint is older than the history) nor the test's scores, which a resume with
        nothing left to train (a finished run, or one stopped in its test) logs again."""
        step = int(row["step"])
        if step != self.resume_step:
            return step < self.resume_step
        join = CSVLogger.LOGGER_JOIN_CHAR if self.prefix else ""
        names = [key.removeprefix(f"{self.prefix}{join}") for key, value in row.items() if value]
        later = (TEST_PREFIX, TRAIN_LOSS, LEARNING_RATE_PREFIX)
        return not any(name.startswith(later) for name in names)


def run_directory(trainer: Trainer) -> str | None:
    """The run's directory, `Trainer.log_dir`, but where the first logger is a
    `ContinuingCSVLogger` (the user's own `CSVLogger` on a resume): Lightning takes the
    ``save_dir`` of a logger not its own (``mylogs``), where the run is its ``log_dir``
    (``mylogs/lightning_logs/<version>``). A collective under DDP: every rank must ask."""
    log_dir = trainer.log_dir
    first = trainer.loggers[0] if trainer.loggers else None
    return first.log_dir if isinstance(first, ContinuingCSVLogger) else log_dir


def _write_rows(path: Path, header: list[str], rows: list[dict[str, Any]]) -> None:
    """Replace the CSV file `path` by `header` and `rows`, whole or not at all."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


def purge_step(resume_step: int) -> int:
    """TensorBoard's ``purge_step`` for a run resumed from a checkpoint at `resume_step`: the
    events logged after the checkpoint are dropped, since the resumed run logs them again."""
    return resume_step + 1


def continuing_loggers(
    loggers: list[Logger], init_args: list[dict[str, Any]], resume_step: int
) -> list[Logger]:
    """The user's own loggers for a run resumed in its directory: a Lightning `CSVLogger`
    would delete the run's ``metrics.csv`` (with a warning) and a `TensorBoardLogger` would
    keep the events after the checkpoint beside those logged again, so the first becomes a
    `ContinuingCSVLogger` of the same file and the second gets ``purge_step``, as the default
    loggers do. Other loggers, and subclasses, which may resume in their own way, are kept.

    Args:
        loggers: the loggers built from ``trainer.logger``.
        init_args: each one's ``init_args`` as configured, in the same order.
        resume_step: the checkpoint's global step.
    """
    kept: list[Logger] = []
    for logger, args in zip(loggers, init_args, strict=True):
        if type(logger) is CSVLogger:
            logger = ContinuingCSVLogger(
                save_dir=str(args["save_dir"]),
                name=args.get("name") or "",
                version=str(logger.version),
                resume_step=resume_step,
                prefix=args.get("prefix", ""),
                flush_logs_every_n_steps=args.get("flush_logs_every_n_steps", FLUSH_EVERY_N_STEPS),
            )
        elif type(logger) is TensorBoardLogger and args.get("purge_step") is None:
            logger = TensorBoardLogger(**{**args, "purge_step": purge_step(resume_step)})
        kept.append(logger)
    return kept
