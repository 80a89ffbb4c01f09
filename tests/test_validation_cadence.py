"""Validations spread over the run's budget (`model.validation.validations_per_run`, set as
Lightning's own cadence by `validation_cadence`): by epochs, by the step plan, by the clock,
and Lightning's own cadence where the run asks for it."""

from __future__ import annotations

import csv
import functools
import math
from datetime import timedelta
from pathlib import Path

import pytest
import torch
from helpers import train_tiny

from minitx.training.cadence import validation_cadence

train_tiny_without_maps = functools.partial(train_tiny, maps=False)  # the maps: test_cli_train


@pytest.mark.parametrize(
    ("per_run", "max_steps", "max_epochs", "max_time", "accumulate", "expected"),
    [
        (10, 15000, -1, "00:00:20:00", 1, (timedelta(minutes=2), None)),  # the default
        (4, -1, -1, {"seconds": 8}, 1, (timedelta(seconds=2), None)),
        (10, 600, -1, None, 1, (60, None)),  # the step-bound default: every 60 updates
        (4, 46, 5, None, 1, (12, None)),  # rounded up: the fourth is where the run ends
        (10, 600, -1, None, 2, (120, None)),  # Lightning counts batches
        (10, -1, 50, None, 1, (None, 5)),  # epochs alone
        (4, -1, 10, None, 1, (None, 2)),  # 2.5 epochs apart: every 2, a divisor of 10
        (10, -1, 3, None, 1, (1 / 3, 1)),  # fewer epochs than validations: thirds of each
        (0, 600, -1, None, 1, ()),  # 0: Lightning's cadence
        (10, -1, -1, None, 1, ()),  # nothing bounds the run
    ],
)
def test_the_cadence_divides_the_budget_that_bounds_the_run(
    per_run, max_steps, max_epochs, max_time, accumulate, expected
) -> None:
    settings = validation_cadence(per_run, max_steps, max_epochs, max_time, accumulate)
    if not expected:
        assert settings == {}
        return
    interval, every = expected
    if interval is None:
        assert settings == {"check_val_every_n_epoch": every}
    elif every == 1:
        assert settings == {"val_check_interval": interval}
    else:
        assert settings == {"val_check_interval": interval, "check_val_every_n_epoch": None}


def validation_steps(run_dir: Path) -> list[int]:
    """The updates after which the run validated (the rows of metrics.csv with val/loss).

    Lightning logs a validation at the logger step of the update that triggered it, which
    counts from 0 (it counts that update only after the validation): update N logs at N - 1.
    """
    rows = csv.DictReader((run_dir / "csv" / "metrics.csv").open())
    return [int(r["step"]) + 1 for r in rows if r.get("val/loss")]


def test_under_ddp_the_clock_does_not_decide() -> None:
    """Each DDP process would read its own clock: a max_time run of several processes
    validates by its step plan (or its epochs) instead."""
    settings = validation_cadence(10, 15000, -1, "00:00:20:00", one_process=False)
    assert settings == {"val_check_interval": 1500, "check_val_every_n_epoch": None}
    assert validation_cadence(3, -1, 1, "00:00:10:00", one_process=False) == {
        "val_check_interval": 1 / 3
    }


def test_an_epoch_bound_run_validates_at_each_quarter_and_keeps_the_best_of_them(
    tmp_path: Path,
) -> None:
    run = train_tiny_without_maps(
        tmp_path, max_epochs=4, test=False, extra=("--model.validation.validations_per_run", "4")
    )
    planned = run.global_step  # no max_time in the tiny config: the plan is the run
    steps = validation_steps(run.run_dir)
    assert steps == [k * planned // 4 for k in range(1, 5)]  # at each epoch's end
    # The best checkpoint was saved right after a validation.
    best = torch.load(run.best_checkpoint, map_location="cpu", weights_only=True)
    assert best["global_step"] in steps


def test_a_step_bound_run_validates_every_nth_of_its_plan_across_epochs(tmp_path: Path) -> None:
    """40 updates (an epoch of the tiny config is 23), validations_per_run 4: every 10
    updates, inside epochs and across their ends, the last where max_steps ends the run."""
    run = train_tiny_without_maps(
        tmp_path,
        max_epochs=-1,
        test=False,
        extra=("--trainer.max_steps", "40", "--model.validation.validations_per_run", "4"),
    )
    assert run.global_step == 40
    assert validation_steps(run.run_dir) == [10, 20, 30, 40]
    best = torch.load(run.best_checkpoint, map_location="cpu", weights_only=True)
    assert best["global_step"] in [10, 20, 30, 40]


def test_more_validations_than_updates_validate_after_each_and_say_so(
    tmp_path: Path, capsys
) -> None:
    """Was: three validations where five were asked, without a word."""
    run = train_tiny_without_maps(
        tmp_path,
        max_epochs=-1,
        test=False,
        extra=("--trainer.max_steps", "3", "--model.validation.validations_per_run", "5"),
    )
    assert validation_steps(run.run_dir) == [1, 2, 3]
    assert (
        "note: model.validation.validations_per_run (5) is above trainer.max_steps (3): the run "
        "validates after each of its 3 updates"
    ) in capsys.readouterr().err


def test_a_clock_led_run_spreads_its_validations_over_the_budget(tmp_path: Path) -> None:
    """A plan far beyond a 10-second budget: the clock leads, a validation about every 2.5
    seconds of training (counted from the end of the previous one); they fall at
    increasing steps, the last one where the clock stops the run. (Where they fall in steps
    depends on the machine's pace, so only their number and order are checked.)"""
    run = train_tiny_without_maps(
        tmp_path,
        max_epochs=-1,
        test=False,
        extra=(
            "--trainer.max_steps", "100000", "--trainer.max_time", "00:00:00:10",
            "--model.optim.schedule", "budget", "--model.optim.warmup_steps", "5",
            "--model.validation.validations_per_run", "4",
        ),
    )  # fmt: skip
    steps = validation_steps(run.run_dir)
    # 3: slow validations stretch the intervals. 5: Lightning's validation clock starts before
    # the maps drawn at the start, the run's clock after them, so the fourth can come just
    # before the end, and the final weights are then validated too.
    assert 3 <= len(steps) <= 5, steps
    assert steps == sorted(set(steps)) and steps[-1] == run.global_step


def test_without_it_lightning_validates_every_epoch_or_as_the_run_says(tmp_path: Path) -> None:
    (tmp_path / "off").mkdir()
    (tmp_path / "lightning").mkdir()
    off = train_tiny_without_maps(
        tmp_path / "off",
        max_epochs=3,
        test=False,
        extra=("--model.validation.validations_per_run", "0"),
    )
    per_epoch = off.global_step // 3
    assert validation_steps(off.run_dir) == [per_epoch, 2 * per_epoch, 3 * per_epoch]
    lightning = train_tiny_without_maps(
        tmp_path / "lightning",
        max_epochs=4,
        test=False,
        extra=("--trainer.check_val_every_n_epoch", "2"),  # the run's own cadence wins
    )
    per_epoch = lightning.global_step // 4
    assert validation_steps(lightning.run_dir) == [2 * per_epoch, 4 * per_epoch]


def test_a_resumed_run_goes_on_from_the_next_fraction_of_its_new_plan(tmp_path: Path) -> None:
    """Two epochs, then resumed to four: the resumed run starts half-way through its new plan
    and validates at its third quarter and at its end, no earlier point again."""
    cadence = ("--model.validation.validations_per_run", "4")
    first = train_tiny_without_maps(tmp_path, max_epochs=2, test=False, extra=cadence)
    resumed = train_tiny_without_maps(
        tmp_path, max_epochs=4, test=False, extra=(*cadence, "--ckpt_path", "last")
    )
    assert resumed.run_dir == first.run_dir and resumed.global_step == 2 * first.global_step
    plan = resumed.global_step
    later = [s for s in validation_steps(resumed.run_dir) if s > first.global_step]
    assert later == [math.ceil(3 * plan / 4), plan]


def test_a_run_without_validation_still_saves_its_checkpoints(tmp_path: Path) -> None:
    """limit_val_batches 0: no validations to spread, so Lightning's saving at each epoch's
    end applies (a cadence across epochs would leave no checkpoint)."""
    run = train_tiny_without_maps(
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
