"""Pieces shared by the commands: the user-error exception, logging, loading a checkpoint."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse

    from minitx.translator import Translator


class UsageError(Exception):
    """A problem with the user's input; reported as ``error: ...`` with exit status 2."""


def show_library_warnings() -> None:
    """Print minitx's warnings (e.g. skipped lines) on standard error, once per process."""
    log = logging.getLogger("minitx")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
    if log.level == logging.NOTSET:
        log.setLevel(logging.WARNING)


def run_cli(run: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Call `run(args)`; a `UsageError` becomes ``error: ...`` and exit status 2, Ctrl-C 130."""
    show_library_warnings()
    try:
        return run(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


def load_translator(path: Path, *, device: str, bf16: bool) -> Translator:
    """`Translator.from_checkpoint`, with every loading problem turned into a `UsageError`."""
    import torch

    from minitx.translator import CheckpointError, Translator

    try:
        torch_device = torch.device(device)
    except RuntimeError as exc:
        raise UsageError(f"--device {device!r}: {exc}") from None
    if torch_device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    try:
        return Translator.from_checkpoint(path, device=torch_device, bf16=bf16)
    except (FileNotFoundError, CheckpointError) as exc:
        raise UsageError(str(exc)) from None
