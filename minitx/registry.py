"""Name -> class registries: the one-file extension points of minitx.

Score functions, positional encodings, activations, learning-rate schedules and decoding
strategies are each looked up by name in a `Registry`. Adding one is a decorated class in any
file that is imported before the model is built; config validation reads the registry, so the
new name is accepted everywhere at once (docs/guides/extending.md shows one of each kind).

This module imports only the standard library.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from minitx.errors import UnregisteredError

T = TypeVar("T")


UNREGISTERED_WHEN_LOADING = (
    "a model built with a name that code of its own registers loads where that module is "
    "imported first (for a command, a script that imports it, then runs the command: "
    "docs/guides/extending.md)"
)
"""What a loader adds to an `UnregisteredError`: the file is not damaged."""


class Registry(Generic[T]):
    """A named collection of classes (or factories) of one kind.

    Args:
        kind: what the entries are, used in error messages (e.g. "attention score").
        base: the class every entry that is a class must subclass, checked at `register`:
            a wrong entry would otherwise fail far from its cause, or break the lookups of
            the others (decoding configs check every strategy).
        functions: whether an entry may be a plain function instead of a class.
        built_with: the keyword arguments the model builds an entry with (e.g. ``d_head``),
            checked against its signature at `register`; None: not checked.
    """

    def __init__(
        self,
        kind: str,
        *,
        base: type | None = None,
        functions: bool = True,
        built_with: tuple[str, ...] | None = None,
    ) -> None:
        self.kind, self.base, self.functions = kind, base, functions
        self.built_with = built_with
        self._entries: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Class decorator: make the class available under `name`.

        Raises:
            ValueError: `name` is taken already (unregister the old entry first).
            TypeError: the entry is not what this registry holds (see `base`, `functions`).
        """

        def add(entry: T) -> T:
            if name in self._entries:
                raise ValueError(
                    f"{self.kind} {name!r} is registered already, as {self._entries[name]!r}: "
                    f"unregister({name!r}) first, or use temporarily() (a module imported "
                    "again, or reloaded, registers its names again)"
                )
            self._check_entry(name, entry)
            self._entries[name] = entry
            return entry

        return add

    def _check_entry(self, name: str, entry: object) -> None:
        is_class = isinstance(entry, type)
        if (is_class and (self.base is None or issubclass(entry, self.base))) or (
            not is_class and self.functions and callable(entry)
        ):
            self._check_signature(name, entry)
            return
        wanted = (
            f"a subclass of {self.base.__module__}.{self.base.__name__}" if self.base else "a class"
        )
        wanted += " or a plain function" if self.functions else ""
        raise TypeError(f"{self.kind} {name!r} is {entry!r}: register {wanted}")

    def _check_signature(self, name: str, entry: object) -> None:
        """Refuse an entry the model cannot build with `built_with` (else a TypeError when a
        model is built, far from the registration)."""
        if self.built_with is None:
            return
        try:
            inspect.signature(entry).bind(**dict.fromkeys(self.built_with))
        except TypeError as exc:
            given = ", ".join(f"{key}=..." for key in self.built_with)
            raise TypeError(
                f"{self.kind} {name!r} is {entry!r}, which cannot be built as entry({given}): {exc}"
            ) from None
        except ValueError:  # no signature to read (some builtins): built as it is
            return

    def unregister(self, name: str) -> None:
        """Remove an entry (tests and interactive sessions)."""
        del self._entries[name]

    @contextmanager
    def temporarily(self, name: str, entry: T) -> Iterator[T]:
        """Register `entry` under `name` for the duration of a `with` block, in place of the
        entry already there, if any, which comes back after it (tests, notebooks)."""
        self._check_entry(name, entry)
        previous = self._entries.get(name)
        self._entries[name] = entry  # a name already there keeps its place in `names()`
        try:
            yield entry
        finally:
            if previous is None:
                del self._entries[name]
            else:
                self._entries[name] = previous

    def names(self) -> tuple[str, ...]:
        """Registered names, in registration order."""
        return tuple(self._entries)

    def check(self, name: str, *, where: str = "") -> None:
        """Raise an `UnregisteredError` (a `ConfigError`) naming the choices when `name` is
        unknown."""
        if name not in self._entries:
            prefix = f"{where}: " if where else ""
            raise UnregisteredError(
                f"{prefix}unknown {self.kind} {name!r}; choose one of {self.names()}"
            )

    def __getitem__(self, name: str) -> T:
        self.check(name)
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries
