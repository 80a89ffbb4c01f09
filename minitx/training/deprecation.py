"""Renamed training settings: the old name keeps working, with a note printed once.

A renamed setting keeps its old key in the YAML configs and on the command line for a while,
so that users' scripts and configs still run; reading the old key prints one
``note: ... is deprecated`` line to standard error per process (jsonargparse may build a
setting's class more than once while it parses).
"""

from __future__ import annotations

import sys
from typing import TypeVar

from minitx.errors import ConfigError

T = TypeVar("T")

_NOTED: set[str] = set()
"""The deprecated keys already reported in this process."""


def deprecated_setting(old: str, new: str) -> None:
    """Print, once per process, that the setting `old` is deprecated in favour of `new`.

    Args:
        old: the deprecated key as users write it, e.g. ``model.optim.sdpa_backend``.
        new: the key to write instead, e.g. ``model.sdpa_backend``.
    """
    if old in _NOTED:
        return
    _NOTED.add(old)
    print(
        f"note: {old} is deprecated and will be removed; use {new} (same values)",
        file=sys.stderr,
        flush=True,
    )


def renamed_value(old: str, old_value: T | None, new: str, new_value: T, default: T) -> T:
    """The value of a renamed setting, given its old and its new key.

    The old key wins when only it is set (then its note is printed); the new key's value is
    returned when the old one is not set (None).

    Args:
        old: the deprecated key, for the note and the error.
        old_value: the deprecated key's value; None = not set.
        new: the key that replaces it.
        new_value: the new key's value.
        default: the new key's default, which means "not set" when the old key is given.

    Returns:
        The value to use.

    Raises:
        ConfigError: both keys are set, to different values.
    """
    if old_value is None:
        return new_value
    deprecated_setting(old, new)
    if new_value != default and new_value != old_value:
        raise ConfigError(
            f"{old}={old_value!r} and {new}={new_value!r} set one setting twice; "
            f"{old} is deprecated: keep only {new}"
        )
    return old_value
