"""Learning-rate schedules: factors of the peak rate, one per optimizer step, by name in the
`SCHEDULES` registry (`model.optim.schedule NAME`).

Each schedule is a small `Schedule` class, not a lambda, so `LambdaLR` stores its state
(plain ints) in checkpoints, which load with `torch.load(weights_only=True)`. A resumed run
keeps the checkpoint's peak rate and warm-up; a decaying schedule's end follows the resumed
run's plan (`TranslationModule.on_load_checkpoint`).

How to add one: docs/ARCHITECTURE.md, "A learning-rate schedule"; which to choose: the
training guide, "Learning-rate schedule". Decay to zero at a known last step is what a fixed
budget wants (Li, Yumer and Ramanan, "Budgeted Training", ICLR 2020).
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

    def __init__(self, warmup_steps: int, total_steps: int | None = None) -> None:
        """Keep the plan as given, so that a schedule needing nothing more implements
        `__call__` alone and reads ``self.warmup_steps`` (and ``self.total_steps``)."""
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        """The factor of the peak rate at optimizer step `step` (0-based, as `LambdaLR`)."""
        raise NotImplementedError(f"{type(self).__name__} must implement __call__")


SCHEDULES: Registry[type[Schedule]] = Registry(
    "learning-rate schedule", base=Schedule, functions=False
)
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
    """`linear` whose progress after the warm-up is the larger of the steps' fraction and the
    clock's, ``(t - t_w) / (budget - t_w)`` on `trainer.max_time`'s clock from the warm-up's
    end ``t_w``, so the rate reaches zero when either bound ends the run (Izsak et al., "How to
    Train BERT with an Academic Budget", 2021, and Geiping and Goldstein, "Cramming", 2022,
    drive the schedule by elapsed time; the training guide, "The budget schedule's clock").

    The `BudgetClock` callback tells it the time (`tell`); without it (or without `max_time`)
    this is exactly `linear`. The state is plain floats and ints, saved in checkpoints.
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
