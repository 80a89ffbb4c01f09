"""Loggers that continue a run's history when training resumes (`--ckpt_path last`).

Lightning's `CSVLogger` deletes an existing ``metrics.csv`` when its directory is reused, so
a resumed run would lose every earlier row. `ContinuingCSVLogger` keeps the rows up to the
step the checkpoint was saved at (later rows were logged after it and are logged again by
the resumed run) and appends from there. TensorBoard does the same with `purge_step`.
"""

from __future__ import annotations

import csv
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from minitx.textio import atomic_path


class _ContinuingWriter(ExperimentWriter):
    """`ExperimentWriter` that keeps ``metrics.csv`` rows with ``step <= resume_step``."""

    def __init__(self, log_dir: str, resume_step: int | None) -> None:
        self.resume_step = resume_step
        super().__init__(log_dir=log_dir)

    def _check_log_dir_exists(self) -> None:
        if self.resume_step is None or not self._fs.isfile(self.metrics_file_path):
            super()._check_log_dir_exists()
            return
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            reader = csv.DictReader(file)
            header = list(reader.fieldnames or [])
            rows = [r for r in reader if r.get("step") and int(r["step"]) <= self.resume_step]
        _write_rows(self.metrics_file_path, header, rows)
        self.metrics_keys = header

    def _rewrite_with_new_header(self, fieldnames: list[str]) -> None:
        """A new metric's column: the file is rewritten whole (atomically), then appended to."""
        with self._fs.open(self.metrics_file_path, "r", newline="") as file:
            rows = list(csv.DictReader(file))
        _write_rows(self.metrics_file_path, fieldnames, rows)


def _write_rows(path: str, header: list[str], rows: list[dict[str, Any]]) -> None:
    """Replace the CSV file `path` by `header` and `rows`, whole or not at all."""
    with atomic_path(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)


class ContinuingCSVLogger(CSVLogger):
    """`CSVLogger` that, given `resume_step`, continues ``metrics.csv`` instead of deleting it.

    Args:
        resume_step: the global step of the checkpoint training resumes from; None for a new
            run (then it behaves exactly like `CSVLogger`).
        **kwargs: `CSVLogger` arguments.
    """

    def __init__(self, *args: Any, resume_step: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resume_step = resume_step

    @property
    @rank_zero_experiment  # as CSVLogger's: other ranks write nothing, create no directory
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _ContinuingWriter(self.log_dir, self.resume_step)
        return self._experiment
