"""Learning-rate schedules: factors of the peak rate, one per optimizer step.

Each schedule is a small class, not a lambda, so `LambdaLR` stores its state (plain ints)
in checkpoints, which load with `torch.load(weights_only=True)`. A resumed run keeps the
checkpoint's peak rate and warm-up; a decaying schedule's end follows the resumed run's
plan (`TranslationModule.on_load_checkpoint`).

- `InverseSqrtSchedule` is the paper's: it never reaches zero, so it suits runs of unknown
  length (`--config long`, the 45-minute recipe).
- `LinearDecaySchedule` and `CosineDecaySchedule` reach zero at a known last step, which is
  what a fixed budget wants (Li, Yumer and Ramanan, "Budgeted Training", ICLR 2020, found
  linear decay to zero the best schedule when the budget is set in advance): the default
  config's.
"""

from __future__ import annotations

import math

SCHEDULES: tuple[str, ...] = ("inverse_sqrt", "linear", "cosine")
"""Choices of `OptimConfig.schedule`."""


class InverseSqrtSchedule:
    """Learning-rate factor of Vaswani et al. (2017, §5.3), normalised to peak at 1.0.

    factor(step) = min(step / warmup, sqrt(warmup / step)): linear warm-up, then 1/sqrt decay.
    """

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = max(1, warmup_steps)

    def __call__(self, step: int) -> float:
        step = max(1, step)
        return min(step / self.warmup_steps, math.sqrt(self.warmup_steps / step))


class LinearDecaySchedule:
    """Linear warm-up to 1.0 at `warmup_steps`, then a straight line to 0.0 at `total_steps`.

    Steps past `total_steps` (a run extended beyond its plan) keep the factor at 0.
    """

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


class CosineDecaySchedule(LinearDecaySchedule):
    """Linear warm-up, then half a cosine from 1.0 down to 0.0 at `total_steps`.

    The cosine of Loshchilov and Hutter (SGDR, 2017), without restarts.
    """

    def __call__(self, step: int) -> float:
        step = max(1, step)
        if step < self.warmup_steps:
            return step / self.warmup_steps
        return 0.5 * (1.0 + math.cos(math.pi * self.progress(step)))


def make_schedule(
    name: str, warmup_steps: int, total_steps: int | None
) -> InverseSqrtSchedule | LinearDecaySchedule:
    """The schedule `name` (one of `SCHEDULES`); the decaying ones need `total_steps`."""
    if name == "inverse_sqrt":
        return InverseSqrtSchedule(warmup_steps)
    if total_steps is None:
        raise ValueError(f"schedule {name!r} needs total_steps")
    if name == "linear":
        return LinearDecaySchedule(warmup_steps, total_steps)
    if name == "cosine":
        return CosineDecaySchedule(warmup_steps, total_steps)
    raise ValueError(f"unknown schedule {name!r}; choose one of {SCHEDULES}")
