"""Exception types that mean "the user's settings or environment", not "a bug in minitx".

Every command turns these into one line, ``error: <what, where, how to fix>``, and exit
status 2; set ``MINITX_DEBUG=1`` to see the traceback instead. Anything else that escapes a
command is a bug and keeps its traceback.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from types import ModuleType

DEBUG_ENV = "MINITX_DEBUG"
"""Set it (to anything but "" or "0") to see tracebacks behind one-line errors."""


class MinitxError(Exception):
    """Base of the errors that mean "the user's input, files, settings or environment".

    Raised where the problem is found, with a message that says what, where and how to fix;
    every command reports it as one ``error:`` line with exit status 2.
    """

    user_error = True


class OutputError(MinitxError):
    """An output cannot be written as asked: it would replace files minitx did not write, an
    input, or the current directory; or the disk has no room for it."""


class ConfigError(ValueError):
    """A setting has a value minitx cannot use; the message names it and what to choose.

    A `ValueError`, so code that catches invalid values in general keeps working.
    """


def debug_requested() -> bool:
    """Whether ``MINITX_DEBUG`` asks for tracebacks behind one-line errors."""
    return os.environ.get(DEBUG_ENV, "") not in ("", "0")


def check_known_keys(where: str, values: Iterable[str], known: Iterable[str]) -> None:
    """Raise a `ConfigError` when `values` names keys outside `known` (e.g. a misspelt setting
    in a checkpoint or a config dict); `where` names the settings class."""
    known = set(known)
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"{where}: unknown keys {unknown}; known keys are {sorted(known)}")


class MissingExtraError(ImportError):
    """An optional library that a feature needs is not installed; the message names the
    ``minitx[extra]`` to install. Reported by every command as a one-line ``error:``."""

    user_error = True


def require_extra(module: str, extra: str, feature: str) -> ModuleType:
    """Import the optional library `module`, or raise `MissingExtraError` saying
    ``pip install 'minitx[extra]'`` (for `feature`, e.g. "CTranslate2 export")."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"{feature} needs the {module} package, which is not installed ({exc}); "
            f"install minitx[{extra}]: pip install 'minitx[{extra}]'"
        ) from None
