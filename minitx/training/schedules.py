"""Learning-rate schedules: factors of the peak rate, one per optimizer step, by name in the
`SCHEDULES` registry (`model.optim.schedule NAME`).

Each schedule is a small `Schedule` class, not a lambda, so `LambdaLR` stores its state
(plain ints) in checkpoints, which load with `torch.load(weights_only=True)`. A resumed run
keeps the checkpoint's peak rate and warm-up; a decaying schedule's end follows the resumed
run's plan (`TranslationModule.on_load_checkpoint`).

How to add one: docs/ARCHITECTURE.md, "A learning-rate schedule".

- `InverseSqrtSchedule` is the paper's: it never reaches zero, so it suits runs of unknown
  length (`--config long`, the 45-minute recipe).
- `LinearDecaySchedule` and `CosineDecaySchedule` reach zero at a known last step, which is
  what a fixed budget wants (Li, Yumer and Ramanan, "Budgeted Training", ICLR 2020, found
  linear decay to zero the best schedule when the budget is set in advance).
- `BudgetSchedule` (the default) is `linear` whose end is also set by the clock, so a slower
  machine is not cut off with its rate still high and a faster one uses its whole budget.
"""

from __future__ import annotations

import math
from typing import ClassVar

from minitx.registry import Registry


class Schedule:
    """A learning-rate schedule: `schedule(step)` is the factor of the peak rate at an
    optimizer step (1.0 = the peak, `OptimConfig.lr`).

    Built as ``cls(warmup_steps)``, or ``cls(warmup_steps, total_steps)`` when
    `needs_total_steps`. Keep the state in plain attributes (ints, floats): `LambdaLR` saves
    an object's ``__dict__`` in checkpoints.
    """

    needs_total_steps: ClassVar[bool] = False
    """Whether it ends at a known step (`OptimConfig.total_steps`, else the run's plan)."""

    def __call__(self, step: int) -> float:
        """The factor of the peak rate at optimizer step `step` (0-based, as `LambdaLR`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")


SCHEDULES: Registry[type[Schedule]] = Registry("learning-rate schedule")
"""Learning-rate schedules by name: the choices of `OptimConfig.schedule`."""


@SCHEDULES.register("inverse_sqrt")
class InverseSqrtSchedule(Schedule):
    """Learning-rate factor of Vaswani et al. (2017, §5.3), normalised to peak at 1.0.

    factor(step) = min(step / warmup, sqrt(warmup / step)): linear warm-up, then 1/sqrt decay.
    """

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = max(1, warmup_steps)

    def __call__(self, step: int) -> float:
        step = max(1, step)
        return min(step / self.warmup_steps, math.sqrt(self.warmup_steps / step))


@SCHEDULES.register("linear")
class LinearDecaySchedule(Schedule):
    """Linear warm-up to 1.0 at `warmup_steps`, then a straight line to 0.0 at `total_steps`.

    Steps past `total_steps` (a run extended beyond its plan) keep the factor at 0.
    """

    needs_total_steps: ClassVar[bool] = True

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup_steps = max(1, warmup_steps)
        self.total_steps = max(self.warmup_steps + 1, total_steps)

    def progress(self, step: int) -> float:
        """Fraction of the decay phase done at `step`: 0.0 at the peak, 1.0 at the end."""
        span = self.total_steps - self.warmup_steps
        return min(1.0, max(0.0, (step - self.warmup_steps) / span))

    def __call__(self, step: int) -> float:
        step = max(1, step)
        if step < self.warmup_steps:
            return step / self.warmup_steps
        return self.decay(step)

    def decay(self, step: int) -> float:
        """The factor at `step` after the warm-up."""
        return 1.0 - self.progress(step)


@SCHEDULES.register("cosine")
class CosineDecaySchedule(LinearDecaySchedule):
    """Linear warm-up, then half a cosine from 1.0 down to 0.0 at `total_steps`.

    The cosine of Loshchilov and Hutter (SGDR, 2017), without restarts.
    """

    def decay(self, step: int) -> float:
        return 0.5 * (1.0 + math.cos(math.pi * self.progress(step)))


@SCHEDULES.register("budget")
class BudgetSchedule(LinearDecaySchedule):
    """Linear warm-up, then a straight line to 0.0 at the end of the run's budget: its last
    planned step or `trainer.max_time`, whichever comes first.

    After the warm-up, progress is the larger of two fractions, so the rate reaches zero when
    either bound ends the run (Izsak et al., "How to Train BERT with an Academic Budget", 2021,
    and Geiping and Goldstein, "Cramming", 2022, drive the schedule by elapsed time):

    - by steps: ``(step - warmup_steps) / (total_steps - warmup_steps)``, as `linear`;
    - by the clock: ``(t - t_w) / (budget - t_w)``, where ``t`` is the training time on
      `trainer.max_time`'s clock (validation included: the budget a user sets is wall time;
      data preparation before the first update and the final test are not), ``budget`` is
      `max_time` in seconds and ``t_w`` the time at which the warm-up ended.

    The warm-up is counted in steps, and the clock starts counting from its end, so a run that
    finishes its step plan inside the budget is led by the steps throughout and is
    deterministic for a seed. The `BudgetClock` callback tells the schedule the time
    (`tell`); without it (or without `max_time`) this is exactly `linear`. All state is plain
    floats and ints, saved in checkpoints: a resumed run continues the clock (Lightning's
    `Timer` restores its elapsed time) and the plan.
    """

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        super().__init__(warmup_steps, total_steps)
        self.budget_s: float | None = None
        self.elapsed_s = 0.0
        self.warmup_end_s: float | None = None
        self.clock_led_steps = 0  # updates whose rate the clock set (not bit-reproducible)
        self.told_step = -1

    def clock_progress(self) -> float:
        """Fraction of the budget's decay phase used by the clock (0.0 before the warm-up ends
        and without a budget)."""
        if self.budget_s is None or self.warmup_end_s is None:
            return 0.0
        span = self.budget_s - self.warmup_end_s
        if span <= 0:
            return 1.0
        return min(1.0, max(0.0, (self.elapsed_s - self.warmup_end_s) / span))

    def budget_progress(self, step: int) -> float:
        """The run's progress at `step`: the larger of the step and clock fractions."""
        return max(self.progress(step), self.clock_progress())

    def tell(self, step: int, elapsed_s: float, budget_s: float | None) -> None:
        """Record the training time `elapsed_s` (of `budget_s`) after optimizer step `step`;
        the factor of the next step reads it."""
        new_step = step > self.told_step  # told once per update (accumulation repeats a step)
        self.elapsed_s, self.budget_s, self.told_step = float(elapsed_s), budget_s, step
        if step >= self.warmup_steps and self.warmup_end_s is None:
            self.warmup_end_s = self.elapsed_s
        led = step + 1 >= self.warmup_steps and self.clock_progress() > self.progress(step + 1)
        if led and new_step:
            self.clock_led_steps += 1

    def decay(self, step: int) -> float:
        return 1.0 - self.budget_progress(step)


def make_schedule(name: str, warmup_steps: int, total_steps: int | None) -> Schedule:
    """The schedule `name` of `SCHEDULES`; one that `needs_total_steps` gets `total_steps`.

    Raises:
        ConfigError: `name` is not registered (the message lists the choices).
    """
    schedule = SCHEDULES[name]
    if not schedule.needs_total_steps:
        return schedule(warmup_steps)
    return schedule(warmup_steps, total_steps)
