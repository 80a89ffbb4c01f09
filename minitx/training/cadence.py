"""When a run validates: `model.validation.validations_per_run` as Lightning's own settings.

Spreading N validations over a run needs no loop of its own: Lightning validates every
``val_check_interval`` (a number of batches, or a duration), or every
``check_val_every_n_epoch`` epochs. `validation_cadence` picks the one that divides the
run's budget into N parts, from the trainer settings alone (before the data is read).
`minitx.training.callbacks.ValidateAtEnd` adds the validation of the final weights where
the cadence does not end on them.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any


def duration(value: str | dict[str, int] | timedelta) -> timedelta:
    """``trainer.max_time`` as a timedelta: "DD:HH:MM:SS", a dict of timedelta arguments, or a
    timedelta, as Lightning accepts it."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, dict):
        return timedelta(**value)
    days, hours, minutes, seconds = (int(part) for part in value.strip().split(":"))
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def validation_cadence(
    per_run: int,
    max_steps: int,
    max_epochs: int | None,
    max_time: str | dict[str, int] | timedelta | None,
    accumulate_grad_batches: int = 1,
    one_process: bool = True,
) -> dict[str, Any]:
    """The trainer arguments that validate `per_run` times over the run's budget.

    - ``max_time`` set, in a run of `one_process` (the default recipe: 20 minutes or 15,000
      updates): every
      ``max_time / per_run`` of wall-clock training time, counted by Lightning from the end
      of the previous validation (so the validations themselves stretch the intervals a
      little); the run's last validation is where it ends.
      (Under DDP each process would read its own clock, and processes that disagree on
      validating would wait on each other: there the next rule applies.)
    - else ``max_steps`` set: every ``ceil(max_steps / per_run)`` updates, across epochs
      (Lightning counts batches: that many times `accumulate_grad_batches`), the last
      validation where ``max_steps`` ends the run.
    - else ``max_epochs`` set: every k epochs, k the largest divisor of ``max_epochs`` not
      above ``max_epochs / per_run`` (so the last epoch validates); a run of fewer epochs
      than `per_run` validates ``per_run // max_epochs`` times per epoch, at even fractions
      of it.
    - else (nothing bounds the run, or `per_run` is 0): no arguments, Lightning's cadence.
    """
    if per_run <= 0:
        return {}
    if max_time is not None and one_process:
        interval = duration(max_time) / per_run
        return {"val_check_interval": interval, "check_val_every_n_epoch": None}
    if max_steps > 0:
        batches = math.ceil(max_steps / per_run) * accumulate_grad_batches
        return {"val_check_interval": batches, "check_val_every_n_epoch": None}
    if max_epochs is not None and 0 < max_epochs < per_run:
        return {"val_check_interval": 1 / (per_run // max_epochs)}
    if max_epochs is not None and max_epochs > 0:
        most = max_epochs // per_run
        every = max(k for k in range(1, most + 1) if max_epochs % k == 0)
        return {"check_val_every_n_epoch": every}
    return {}
