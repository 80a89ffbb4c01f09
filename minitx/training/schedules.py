"""Learning-rate schedules: factors of the peak rate, one per optimizer step, by name in the
`SCHEDULES` registry (`model.optim.schedule NAME`).

Each schedule is a small `Schedule` class, not a lambda, so `LambdaLR` stores its state
(plain ints) in checkpoints, which load with `torch.load(weights_only=True)`. A resumed run
keeps the checkpoint's peak rate and warm-up; a decaying schedule's end follows the resumed
run's plan (`TranslationModule.on_load_checkpoint`).

Add one in any file imported before the model is built::

    @SCHEDULES.register("constant")
    class Constant(Schedule):
        def __init__(self, warmup_steps: int) -> None:
            self.warmup_steps = max(1, warmup_steps)

        def __call__(self, step: int) -> float:
            return min(1.0, max(1, step) / self.warmup_steps)

A schedule that decays to zero at the run's last planned step sets
``needs_total_steps = True`` and is built as ``cls(warmup_steps, total_steps)``.

- `InverseSqrtSchedule` is the paper's: it never reaches zero, so it suits runs of unknown
  length (`--config long`, the 45-minute recipe).
- `LinearDecaySchedule` and `CosineDecaySchedule` reach zero at a known last step, which is
  what a fixed budget wants (Li, Yumer and Ramanan, "Budgeted Training", ICLR 2020, found
  linear decay to zero the best schedule when the budget is set in advance): the default
  config's.
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
        return 1.0 - self.progress(step)


@SCHEDULES.register("cosine")
class CosineDecaySchedule(LinearDecaySchedule):
    """Linear warm-up, then half a cosine from 1.0 down to 0.0 at `total_steps`.

    The cosine of Loshchilov and Hutter (SGDR, 2017), without restarts.
    """

    def __call__(self, step: int) -> float:
        step = max(1, step)
        if step < self.warmup_steps:
            return step / self.warmup_steps
        return 0.5 * (1.0 + math.cos(math.pi * self.progress(step)))


def decaying_schedules() -> tuple[str, ...]:
    """The registered schedules that end at a known step (`Schedule.needs_total_steps`)."""
    return tuple(name for name in SCHEDULES if SCHEDULES[name].needs_total_steps)


def make_schedule(name: str, warmup_steps: int, total_steps: int | None) -> Schedule:
    """The schedule `name` of `SCHEDULES`; one that `needs_total_steps` gets `total_steps`.

    Raises:
        ConfigError: `name` is not registered (the message lists the choices).
        ValueError: the schedule needs `total_steps` and it is None.
    """
    schedule = SCHEDULES[name]
    if not schedule.needs_total_steps:
        return schedule(warmup_steps)
    if total_steps is None:
        raise ValueError(f"schedule {name!r} needs total_steps")
    return schedule(warmup_steps, total_steps)
