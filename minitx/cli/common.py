"""Pieces shared by the commands: the user-error exception, logging, loading a checkpoint."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


def add_decoding_arguments(
    parser: argparse.ArgumentParser,
    *,
    several_beams: bool = False,
    what: str = "",
    batch_size: bool = True,
) -> None:
    """The decoding and device options every inference command shares.

    Adds ``--beam`` (default `DEFAULT_BEAM_SIZE`; 1 = greedy; several values when
    `several_beams`), ``--alpha``, ``--batch-size`` (unless `batch_size` is False),
    ``--device`` and ``--bf16``. Build the
    `DecodingConfig` with `decoding_from_args`; check the values with `check_decoding_args`.
    """
    from minitx.decoding import DEFAULT_BEAM_SIZE

    suffix = f" {what}" if what else ""
    parser.add_argument(
        "--beam",
        type=int,
        nargs="+" if several_beams else None,
        default=[DEFAULT_BEAM_SIZE] if several_beams else DEFAULT_BEAM_SIZE,
        metavar="N",
        help=f"beam size{suffix}; 1 = greedy decoding"
        + ("; several values are scored one after another" if several_beams else "")
        + f" (default: {DEFAULT_BEAM_SIZE})",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=1.0,
        help="beam-search length-penalty exponent; 0 disables it (default: 1.0)",
    )
    if batch_size:
        parser.add_argument(
            "--batch-size",
            type=int,
            default=64,
            metavar="N",
            help="sentences per batch (default: 64)",
        )
    parser.add_argument(
        "--device", default="cpu", help="torch device, e.g. cpu, cuda, cuda:1 (default: cpu)"
    )
    parser.add_argument("--bf16", action="store_true", help="run the model under bfloat16 autocast")


def check_decoding_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject impossible decoding options (argparse exits with status 2)."""
    beams = args.beam if isinstance(args.beam, list) else [args.beam]
    if any(beam < 1 for beam in beams):
        parser.error(f"--beam must be >= 1, got {args.beam}")
    if getattr(args, "batch_size", 1) < 1:
        parser.error(f"--batch-size must be >= 1, got {args.batch_size}")


def decoding_from_args(args: argparse.Namespace, beam: int | None = None, **changes: Any):
    """The `DecodingConfig` the options ask for (`beam` picks one of several ``--beam``)."""
    from minitx.decoding import DecodingConfig

    beam = args.beam if beam is None else beam
    return DecodingConfig.for_beam(beam, alpha=args.alpha, **changes)
