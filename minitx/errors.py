"""The errors that mean "the user's input, files, settings or environment", not "a bug".

Raised where the problem is found and told from a bug by their type alone: the commands turn a
`MinitxError` into one line, ``error: <what, where, how to fix>``, and exit status 2
(`minitx.cli.common.report_user_error`); set ``MINITX_DEBUG=1`` to see the traceback instead.
Each type also derives from the builtin exception it resembles (`ValueError`,
`FileNotFoundError`, ...), so code that catches those keeps working; the errors guide
(docs/guides/errors.md) tabulates them. Anything else that escapes a command is a bug and keeps
its traceback.
"""

from __future__ import annotations

import importlib
import operator
import os
from collections.abc import Callable, Iterable
from numbers import Real
from types import ModuleType
from typing import Any

DEBUG_ENV = "MINITX_DEBUG"
"""Set it (to anything but "" or "0") to see tracebacks behind one-line errors."""


class MinitxError(Exception):
    """Base of the errors that mean "the user's input, files, settings or environment": a
    message that says what, where and how to fix, reported as one ``error:`` line."""


class UsageError(MinitxError):
    """A command-line argument the command cannot use (the message names the flag)."""


class ConfigError(MinitxError, ValueError):
    """A setting has a value minitx cannot use; the message names it and what to choose."""


class UnregisteredError(ConfigError):
    """A name no registry holds (`minitx.registry.Registry.check`): a typo in a setting, or a
    model built with a name the user's own module registers, loaded where it is not imported."""


class VocabularyTooLargeError(ConfigError):
    """The tokenizer's training sentences cannot give ``data.vocab_size`` pieces.

    Attributes:
        sentences: how many sentences the tokenizer trained on (``None``: not known), so that
            a caller that drew them as a sample can say that a larger sample allows more pieces.
    """

    def __init__(self, message: str, sentences: int | None = None) -> None:
        super().__init__(message)
        self.sentences = sentences


class DataError(MinitxError, ValueError):
    """A corpus or text file minitx cannot use (bad UTF-8, unequal line counts, bad JSON, a
    missing split or language); the message names the file and, where it helps, the line."""


class CorpusError(DataError):
    """A corpus split cannot be scored: it cannot be read, it is not there, or it has no
    usable pair. The message names the corpus and the split; the commands report it as one
    ``error:`` line."""


class MissingFileError(MinitxError, FileNotFoundError):
    """A file or directory the user named (corpus, tokenizer, checkpoint) does not exist."""


class SourceUnreachableError(MinitxError, ConnectionError):
    """A hub dataset or model cannot be reached; the message says how to use local files."""


class CheckpointError(MinitxError, ValueError):
    """A file that is not a usable minitx checkpoint or release (truncated, foreign, damaged)."""


class ResumeError(MinitxError):
    """Training cannot resume from the checkpoint as asked (another model or tokenizer, a
    weights-only file, a setting the checkpoint overrides)."""


class ResumeMismatchError(ResumeError):
    """The checkpoint to resume from was trained with another model config or tokenizer."""


class TrainingError(MinitxError):
    """Training cannot go on (a non-finite loss or weights: the settings' doing)."""


class DivergenceError(TrainingError):
    """Training produced a non-finite loss or non-finite weights (the settings' doing: the
    learning rate, the warm-up; not a bug)."""


class OutputError(MinitxError):
    """An output cannot be written as asked: it would replace files minitx did not write, an
    input, or the current directory; or the disk has no room for it."""


class EmptyInputError(MinitxError, ValueError):
    """A sentence with nothing to read: empty, or only characters the tokenizer drops (spaces,
    zero-width ones)."""


class InputTooLongError(MinitxError, ValueError):
    """An input over a size limit (characters or sentencepiece pieces); the message says which
    limit, how long the input is and how to raise the limit."""


class MissingExtraError(MinitxError, ImportError):
    """An optional library that a feature needs is not installed; the message names the
    ``minitx[extra]`` to install."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is, as a Ctrl-C is: the temporary files of what it
    was writing are removed on the way out (the signal's default ends the process at once and
    leaves them). A stop, not an error: a `KeyboardInterrupt`, exit status 143."""


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


def is_whole_number(value: object) -> bool:
    """An int, a numpy integer or a 0-d integer tensor (anything with ``__index__``), not a
    bool: what a count, an index or a seed may be."""
    if isinstance(value, bool):
        return False
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def check_whole_number(name: str, value: object, minimum: int | None = None) -> None:
    """Raise a `ConfigError` unless `value` is a whole number (`is_whole_number`) of at least
    `minimum`: a count or a seed given as 1.5 or "3" failed later, deep inside torch or numpy."""
    if not is_whole_number(value) or (minimum is not None and operator.index(value) < minimum):
        at_least = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{name} must be a whole number{at_least}, got {value!r}")


VALUE_KINDS: dict[str, tuple[Callable[[Any], bool], Callable[[Any], Any], str]] = {
    "int": (is_whole_number, operator.index, "a whole number"),
    "float": (lambda v: isinstance(v, Real) and not isinstance(v, bool), float, "a number"),
    "str": (lambda v: isinstance(v, str), str, "a name"),
    "bool": (lambda v: isinstance(v, bool), bool, "true or false"),
}
"""What a config field annotated with each type name asks of its value (numpy's numbers, and
for whole numbers anything with ``__index__``, included), how it is stored as Python's type,
and the message's words for it."""


def plain_value(owner: str, name: str, value: Any, kind: str) -> Any:
    """`value` as the plain Python type of `kind` (a `VALUE_KINDS` key), or a `ConfigError`
    naming `owner.name`. A numpy number is accepted but not kept: configs go into checkpoints,
    and torch's ``weights_only`` load refuses numpy scalars."""
    accepts, plain, what = VALUE_KINDS[kind]
    if not accepts(value):
        raise ConfigError(f"{owner}.{name} must be {what}, got {value!r}")
    return plain(value)


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
