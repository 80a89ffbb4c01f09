"""Validation at fixed fractions of the run's budget (`model.validation.validations_per_run`,
the `ValidationCadence` callback): led by the step plan, led by the clock, and Lightning's
own cadence where the run asks for it."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import torch
from helpers import train_tiny


def validation_steps(run_dir: Path) -> list[int]:
    """The updates after which the run validated (the rows of metrics.csv with val/loss).

    Lightning logs a validation at the logger step of the update that triggered it, which
    counts from 0 (it counts that update only after the validation): update N logs at N - 1.
    """
    rows = csv.DictReader((run_dir / "csv" / "metrics.csv").open())
    return [int(r["step"]) + 1 for r in rows if r.get("val/loss")]


def test_a_step_led_run_validates_at_each_quarter_and_keeps_the_best_of_them(
    tmp_path: Path,
) -> None:
    run = train_tiny(
        tmp_path, max_epochs=4, test=False, extra=("--model.validation.validations_per_run", "4")
    )
    planned = run.global_step  # no max_time in the tiny config: the plan is the run
    steps = validation_steps(run.run_dir)
    # The first update at which the run has passed k/4 of its plan, k = 1..4.
    assert steps == [math.ceil(k * planned / 4) for k in range(1, 5)]
    # The best checkpoint was saved right after a validation, not at an epoch's end.
    best = torch.load(run.best_checkpoint, map_location="cpu", weights_only=True)
    assert best["global_step"] in steps


def test_a_clock_led_run_spreads_its_validations_over_the_budget(tmp_path: Path) -> None:
    """A plan far beyond an 8-second budget: the clock leads; the validations fall at
    increasing steps, the last one where the clock stops the run. (Where they fall in steps
    depends on the machine's pace, so only their number and order are checked.)"""
    run = train_tiny(
        tmp_path,
        max_epochs=-1,
        test=False,
        extra=(
            "--trainer.max_steps", "100000", "--trainer.max_time", "00:00:00:08",
            "--model.optim.schedule", "budget", "--model.optim.warmup_steps", "5",
            "--model.validation.validations_per_run", "4",
        ),
    )  # fmt: skip
    steps = validation_steps(run.run_dir)
    assert 3 <= len(steps) <= 4, steps  # a slow validation may pass a quarter by itself
    assert steps == sorted(set(steps)) and steps[-1] == run.global_step


def test_without_it_lightning_validates_every_epoch_or_as_the_run_says(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "lightning").mkdir()
    off = train_tiny(
        tmp_path / "off",
        max_epochs=3,
        test=False,
        extra=("--model.validation.validations_per_run", "0"),
    )
    per_epoch = off.global_step // 3
    assert validation_steps(off.run_dir) == [per_epoch, 2 * per_epoch, 3 * per_epoch]
    lightning = train_tiny(
        tmp_path / "lightning",
        max_epochs=4,
        test=False,
        extra=("--trainer.check_val_every_n_epoch", "2"),  # the run's own cadence wins
    )
    per_epoch = lightning.global_step // 4
    assert validation_steps(lightning.run_dir) == [2 * per_epoch, 4 * per_epoch]


def test_a_resumed_run_goes_on_from_the_next_fraction_of_its_new_plan(tmp_path: Path) -> None:
    """Two epochs, then resumed to four: the resumed run starts half-way through its new plan
    and validates at its third quarter and at its end, no earlier boundary again."""
    cadence = ("--model.validation.validations_per_run", "4")
    first = train_tiny(tmp_path, max_epochs=2, test=False, extra=cadence)
    resumed = train_tiny(
        tmp_path, max_epochs=4, test=False, extra=(*cadence, "--ckpt_path", "last")
    )
    assert resumed.run_dir == first.run_dir and resumed.global_step == 2 * first.global_step
    plan = resumed.global_step
    later = [s for s in validation_steps(resumed.run_dir) if s > first.global_step]
    assert later == [math.ceil(3 * plan / 4), plan]


def test_a_run_without_validation_still_saves_its_checkpoints(tmp_path: Path) -> None:
    """limit_val_batches 0: no budget fractions to validate at, so Lightning's saving at each
    epoch's end applies (the cadence used to switch it off and leave no checkpoint)."""
    run = train_tiny(
        tmp_path,
        max_epochs=2,
        test=False,
        extra=(
            "--model.validation.validations_per_run", "4", "--trainer.limit_val_batches", "0",
        ),
    )  # fmt: skip
    assert validation_steps(run.run_dir) == []
    saved = torch.load(run.checkpoint, map_location="cpu", weights_only=True)
    assert saved["global_step"] == run.global_step
