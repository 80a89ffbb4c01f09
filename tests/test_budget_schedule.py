"""The budget schedule: linear warm-up, then a linear decay whose end is the run's last planned
step or `trainer.max_time`, whichever comes first (minitx/training/schedules.py, the
`BudgetClock` callback). Progress from steps, from a fake clock, across a resume, and a real
run cut by the clock with its rate at zero."""

from __future__ import annotations

import csv
import io
import os
import warnings
from pathlib import Path

import pytest
import torch
from helpers import NO_MAPS, TINY_CONFIG, train_tiny

from minitx.training.callbacks import AttentionMapLogger
from minitx.training.schedules import SCHEDULES, BudgetSchedule, LinearDecaySchedule

WARMUP, TOTAL = 10, 200


def run(schedule: BudgetSchedule, seconds_per_step: float, budget: float | None, steps: int):
    """Factors of steps 1..steps, the clock told after each update as `BudgetClock` does."""
    factors = []
    for step in range(1, steps + 1):
        factors.append(schedule(step))
        schedule.tell(step, step * seconds_per_step, budget)
    return factors


def train_in(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    config: list[str] | None = None,
):
    """`minitx-train --config tiny --test false ARGS` in `tmp_path`, in this process (`config`:
    other config flags than the tiny config's, [] for the default config); the environment
    (Lightning sets PL_GLOBAL_SEED & co.) is restored afterwards."""
    from minitx.cli.train import main

    monkeypatch.chdir(tmp_path)
    env = dict(os.environ)
    config = ["--config", str(TINY_CONFIG)] if config is None else config
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
            return main([*config, "--test", "false", *NO_MAPS, *args])
    finally:
        os.environ.clear()
        os.environ.update(env)


def test_it_is_registered_and_without_a_clock_it_is_linear() -> None:
    assert SCHEDULES["budget"] is BudgetSchedule
    budget, linear = BudgetSchedule(WARMUP, TOTAL), LinearDecaySchedule(WARMUP, TOTAL)
    assert run(budget, 1.0, None, TOTAL + 5) == [linear(s) for s in range(1, TOTAL + 6)]
    assert budget.clock_led_steps == 0


def test_a_step_bound_run_is_the_same_whatever_the_pace() -> None:
    """When the plan ends inside the budget, the steps lead throughout: the rates do not
    depend on the clock, so the run is deterministic for a seed."""
    linear = [LinearDecaySchedule(WARMUP, TOTAL)(s) for s in range(1, TOTAL + 1)]
    for pace in (0.01, 0.1, 0.4):  # the plan takes 2, 20 and 80 seconds of a 100-second budget
        schedule = BudgetSchedule(WARMUP, TOTAL)
        assert run(schedule, pace, 100.0, TOTAL) == linear
        assert schedule.clock_led_steps == 0


def test_a_clock_bound_run_reaches_zero_at_the_budget() -> None:
    """A slow machine: 1 s a step, a 100-second budget, a 200-step plan. The rate falls to
    zero at the budget (about step 100), not at step 200, and never rises."""
    schedule = BudgetSchedule(WARMUP, TOTAL)
    factors = run(schedule, 1.0, 100.0, 100)
    assert factors[WARMUP - 1] == pytest.approx(1.0, abs=0.02)  # the peak, after the warm-up
    assert factors[-1] <= 0.02  # within 2% of zero on the last update the budget allows
    after = factors[WARMUP:]
    assert all(b <= a + 1e-12 for a, b in zip(after, after[1:], strict=False))
    assert schedule.clock_led_steps > 80
    linear = LinearDecaySchedule(WARMUP, TOTAL)
    assert linear(100) > 0.5  # the step plan alone would still be at half the peak rate


def test_the_warm_up_counts_steps_and_the_clock_starts_after_it() -> None:
    """Time spent before the warm-up ends (a slow first batch, a validation at the start) does
    not eat into the decay: the clock's fraction starts at the end of the warm-up."""
    schedule = BudgetSchedule(WARMUP, TOTAL)
    for step in range(1, WARMUP):
        assert schedule(step) == step / WARMUP
        schedule.tell(step, 30.0 + step, 100.0)  # 30 s lost before the first update
    schedule.tell(WARMUP, 30.0 + WARMUP, 100.0)
    assert schedule.warmup_end_s == 30.0 + WARMUP
    assert schedule.clock_progress() == 0.0
    schedule.tell(WARMUP + 1, 30.0 + WARMUP + 30.0, 100.0)
    assert schedule.clock_progress() == pytest.approx(0.5)


def test_a_resumed_run_continues_the_clock_and_the_plan() -> None:
    """The schedule's state travels in the LambdaLR state of a checkpoint (plain floats and
    ints, loadable with weights_only=True); the resumed run's rates equal the unbroken run's."""

    def scheduler() -> torch.optim.lr_scheduler.LambdaLR:
        optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        return torch.optim.lr_scheduler.LambdaLR(optimizer, BudgetSchedule(WARMUP, TOTAL))

    def advance(sched: torch.optim.lr_scheduler.LambdaLR, first: int, last: int) -> list[float]:
        rates = []
        for step in range(first, last + 1):
            sched.optimizer.step()
            sched.lr_lambdas[0].tell(step, step * 0.8, 100.0)  # clock-bound: 0.8 s a step
            sched.step()
            rates.append(sched.get_last_lr()[0])
        return rates

    unbroken = advance(scheduler(), 1, 120)
    first = scheduler()
    head = advance(first, 1, 60)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    resumed = scheduler()
    resumed.load_state_dict(torch.load(buffer, weights_only=True))
    assert resumed.lr_lambdas[0].warmup_end_s == first.lr_lambdas[0].warmup_end_s
    assert head + advance(resumed, 61, 120) == unbroken


def test_a_run_cut_by_max_time_ends_with_its_rate_near_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The tiny config with a plan far beyond its budget: the clock ends the run, the rate is
    near zero on the last update, train/budget is logged, and the closing line says how to
    repeat the run step for step."""
    cli = train_in(
        tmp_path,
        monkeypatch,
        [
            "--trainer.enable_progress_bar", "false",
            "--trainer.max_epochs", "-1", "--trainer.max_steps", "100000",
            "--trainer.max_time", "00:00:00:08",
            "--trainer.log_every_n_steps", "1",
            "--trainer.check_val_every_n_epoch", "1000",
            "--checkpoint.every_n_epochs", "1000",
            "--model.optim.schedule", "budget", "--model.optim.warmup_steps", "5",
        ],
    )  # fmt: skip
    steps = cli.trainer.global_step
    assert 5 < steps < 100000
    # The rate of the last update was set after the update before it; between the last
    # update and the stop lie the tiny epochs' end-of-epoch work, a large share of this 8-second
    # budget (a real run's last update is within 0.1% of its decay from the end).
    peak = cli.model.optim.lr
    last_lr = cli.trainer.optimizers[0].param_groups[0]["lr"]
    assert last_lr <= 0.1 * peak
    rows = list(csv.DictReader(next(tmp_path.glob("runs/tiny/*/csv/metrics.csv")).open()))
    budget = [float(r["train/budget"]) for r in rows if r.get("train/budget")]
    assert budget and budget[-1] >= 0.9 and budget == sorted(budget)
    out = capsys.readouterr().out
    assert f"--trainer.max_steps {steps} --trainer.max_time null" in out


def test_fast_dev_run_works_with_a_decaying_schedule_and_a_long_warm_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """fast_dev_run plans one update, fewer than any warm-up: a smoke run, not refused. It
    writes no run directory, and the closing line says so."""
    cli = train_in(
        tmp_path,
        monkeypatch,
        [
            "--trainer.enable_progress_bar", "false", "--trainer.fast_dev_run", "true",
            "--model.optim.schedule", "budget", "--model.optim.warmup_steps", "100",
        ],
    )  # fmt: skip
    assert cli.trainer.global_step == 1
    assert "best checkpoint: (none); run dir: (none)" in capsys.readouterr().out


def test_fast_dev_run_works_with_the_default_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, multi30k_dir: Path
) -> None:
    """The default config (budget schedule, a 15,000-update plan, validations at each tenth)
    on Multi30k: `--trainer.fast_dev_run true` makes its one update and one validation, and
    draws no attention maps (Lightning's smoke run logs nothing)."""
    monkeypatch.setenv("MINITX_DATA_DIR", str(multi30k_dir))
    cli = train_in(
        tmp_path,
        monkeypatch,
        ["--trainer.enable_progress_bar", "false", "--trainer.fast_dev_run", "true"],
        config=[],
    )
    assert cli.model.optim.schedule == "budget" and cli.trainer.max_steps == 1
    assert cli.trainer.global_step == 1
    assert "val/loss" in cli.trainer.logged_metrics
    assert any(isinstance(cb, AttentionMapLogger) for cb in cli.trainer.callbacks)
    assert not list(tmp_path.rglob("*.png"))


def test_a_step_bound_run_with_a_clock_repeats_exactly(tmp_path: Path) -> None:
    """Two real runs with the budget schedule, the clock on (a one-hour max_time) but the
    step plan ending first: the same losses at every update and the same final weights."""
    runs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        run = train_tiny(
            tmp_path / name,
            max_epochs=2,
            test=False,
            maps=False,
            extra=(
                "--model.optim.schedule", "budget", "--model.optim.warmup_steps", "5",
                "--trainer.max_time", "00:01:00:00",
            ),
        )  # fmt: skip
        rows = csv.DictReader((run.run_dir / "csv" / "metrics.csv").open())
        losses = [(r["step"], r["train/loss"]) for r in rows if r.get("train/loss")]
        weights = torch.load(run.checkpoint, map_location="cpu", weights_only=True)["state_dict"]
        runs.append((losses, weights))
    (losses, weights), (losses_again, weights_again) = runs
    assert len(losses) > 20 and losses == losses_again
    assert weights.keys() == weights_again.keys()
    assert all(torch.equal(weights[k], weights_again[k]) for k in weights)


def test_a_run_resumed_with_a_longer_budget_takes_its_rate_from_the_new_one() -> None:
    """A run that its 5-second budget ended, resumed with 8 seconds: before the first update
    `BudgetClock` tells the schedule the new budget, from which the update's rate is set.
    Without it the update took the old plan's rate, 0 (the budget spent)."""
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import Timer

    from minitx.training.callbacks import BudgetClock

    schedule = BudgetSchedule(WARMUP, TOTAL)
    run(schedule, 0.05, 5.0, 100)  # the first run: 100 updates in its 5 seconds
    assert schedule(100) == 0.0
    timer = Timer(duration={"seconds": 8})  # the resumed run's, its clock at 5 seconds
    timer.load_state_dict({"time_elapsed": {"train": 5.0}})
    scheduler = SimpleNamespace(lr_lambdas=[schedule])
    trainer = SimpleNamespace(
        global_step=100,
        callbacks=[timer],
        lr_scheduler_configs=[SimpleNamespace(scheduler=scheduler)],
        strategy=SimpleNamespace(broadcast=lambda value: value),
    )
    BudgetClock().on_train_start(trainer, None)
    assert schedule(100) == pytest.approx(1 - (5.0 - 0.5) / (8.0 - 0.5))  # the new line's
    assert schedule.clock_led_steps == 90  # the first run's count: nothing new was trained
