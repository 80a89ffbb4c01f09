"""The training precision for the machine at hand: bf16 autocast only where the CPU has it
(the training guide, "Precision"). A CPU without bf16 instructions emulates bf16 many times
slower than fp32 (`minitx.hardware`), so a default run would take days.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from minitx.errors import ConfigError
from minitx.hardware import cpu_has_fast_bf16

BF16_PRECISIONS: tuple[str, ...] = ("bf16-mixed", "bf16-true", "bf16")
"""Lightning precision settings that compute in bf16."""

KEEP_BF16_ENV = "MINITX_KEEP_BF16"
"""Set to 1 to keep a bf16 precision on a CPU without bf16 instructions (slow, but it
reproduces a bf16 run's numbers exactly)."""


def trains_on_cpu(accelerator: Any) -> bool:
    """Whether Lightning's `accelerator` setting ends up on the CPU ("auto": no GPU here)."""
    if accelerator in (None, "auto"):
        return not torch.cuda.is_available() and not torch.backends.mps.is_available()
    return accelerator == "cpu"


FP16_MIXED_PRECISIONS: tuple[str, ...] = ("16-mixed", "16")
"""Lightning precision settings of fp16 autocast, which has no CPU kernels: Lightning runs
them as bf16-mixed there, with warnings of its own."""


def resolve_precision(precision: Any, accelerator: Any) -> tuple[Any, str | None]:
    """The precision to train with, and a note to print when it differs from `precision`:
    on a CPU, fp16 autocast becomes bf16 autocast (as Lightning would make it, with warnings
    of its own), and bf16 on a CPU without bf16 instructions "32-true" (unless
    `MINITX_KEEP_BF16` is 1).

    Raises:
        ConfigError: ``16-true`` on a CPU, which diverges.
    """
    if not trains_on_cpu(accelerator):
        return precision, None
    if str(precision) == "16-true":  # fp16 weights and optimizer state, no fp32 copy
        raise ConfigError(
            "trainer.precision 16-true: fp16 weights and optimizer state on a CPU (the tiny "
            "config's loss was NaN at update 4 with them); use bf16-mixed (bf16 autocast over "
            "fp32 weights), or 32-true"
        )
    if str(precision) in FP16_MIXED_PRECISIONS:
        chosen, note = resolve_precision("bf16-mixed", accelerator)
        fp16 = f"trainer.precision {precision}: fp16 autocast does not run on a CPU"
        if note is None:
            return chosen, f"{fp16}; training in bf16 (bf16-mixed) instead."
        return chosen, f"{fp16}; and {note}"  # and then fp32: no bf16 instructions
    if (
        str(precision) not in BF16_PRECISIONS
        or os.environ.get(KEEP_BF16_ENV) == "1"
        or cpu_has_fast_bf16()
    ):
        return precision, None
    capability = torch.backends.cpu.get_cpu_capability()
    return "32-true", (
        f"trainer.precision {precision}: this CPU ({capability}) has no bf16 instructions, so "
        "bf16 would be emulated and run many times slower than fp32; training in fp32 "
        f"(32-true) instead. Set {KEEP_BF16_ENV}=1 to keep bf16 anyway."
    )
