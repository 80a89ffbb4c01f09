"""When a run validates: `model.validation.validations_per_run` as Lightning's own settings
(``val_check_interval``, ``check_val_every_n_epoch``), so that no loop of minitx's decides it.
The rules are the training guide's "When validation runs"."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

from lightning.pytorch.callbacks import Timer
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from minitx.errors import ConfigError


def duration(value: str | dict[str, int] | timedelta) -> timedelta:
    """``trainer.max_time`` as a timedelta, read by Lightning's own `Timer` so that minitx
    accepts exactly the forms the Trainer does ("DD:HH:MM:SS" with two-digit hours, minutes and
    seconds, a dict of timedelta arguments, or a timedelta).

    Raises:
        ConfigError: for a value the Timer refuses or a timedelta cannot hold, naming the forms
            it takes.
    """
    if isinstance(value, timedelta):
        return value
    try:
        return timedelta(seconds=Timer(duration=value).time_remaining())  # unstarted: all remains
    except (MisconfigurationException, TypeError, AttributeError, ValueError, OverflowError):
        raise ConfigError(
            f"trainer.max_time={value!r}: not a duration; give DD:HH:MM:SS (e.g. 00:00:20:00 "
            "for 20 minutes), a dict of whole numbers such as {minutes: 20}, or null for none"
        ) from None


def validation_cadence(
    per_run: int,
    max_steps: int,
    max_epochs: int | None,
    max_time: str | dict[str, int] | timedelta | None,
    accumulate_grad_batches: int = 1,
    one_process: bool = True,
) -> dict[str, Any]:
    """The trainer arguments that validate `per_run` times over the run's budget: by
    ``max_time`` (in `one_process` only: under DDP each process would read its own clock and
    wait on the others), else ``max_steps``, else ``max_epochs``; none when nothing bounds the
    run or `per_run` is 0 (Lightning's cadence)."""
    if per_run <= 0:
        return {}
    if max_time is not None and one_process:
        interval = duration(max_time) / per_run
        return {"val_check_interval": interval, "check_val_every_n_epoch": None}
    if max_steps > 0:
        # Lightning counts batches, not updates.
        batches = math.ceil(max_steps / per_run) * accumulate_grad_batches
        return {"val_check_interval": batches, "check_val_every_n_epoch": None}
    if max_epochs is not None and 0 < max_epochs < per_run:
        return {"val_check_interval": 1 / (per_run // max_epochs)}
    if max_epochs is not None and max_epochs > 0:  # a divisor of max_epochs: the last validates
        most = max_epochs // per_run
        every = max(k for k in range(1, most + 1) if max_epochs % k == 0)
        return {"check_val_every_n_epoch": every}
    return {}
