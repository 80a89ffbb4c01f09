"""The training precision for the machine at hand: bf16 autocast only where the CPU has it
(the training guide, "Precision"). A CPU without bf16 instructions emulates every bf16 matrix
product: on an AVX2 machine (torch 2.13, 1 thread) a 2048x256 by 256x1024 matmul ran at
0.6 GFLOP/s in bf16 against 32 GFLOP/s in fp32, so a default run would take days.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

BF16_PRECISIONS: tuple[str, ...] = ("bf16-mixed", "bf16-true", "bf16")
"""Lightning precision settings that compute in bf16."""

KEEP_BF16_ENV = "MINITX_KEEP_BF16"
"""Set to 1 to keep a bf16 precision on a CPU without bf16 instructions (slow, but it
reproduces a bf16 run's numbers exactly)."""


def cpu_has_fast_bf16() -> bool:
    """True where PyTorch's CPU kernels (oneDNN) run bf16 matrix products natively.

    torch has no public bf16 check, so this asks what oneDNN's own check asks. On x86: the
    AVX-512 core instructions, which ATen reports as its "AVX512" kernel level
    (AVX512-BF16 and AMX come on top of them). On Arm: the BF16 extension, which Linux lists
    as "bf16" among the CPU's features. Where neither can be read, assume yes (keep the
    setting).
    """
    if platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86"):
        return torch.backends.cpu.get_cpu_capability() == "AVX512"
    try:
        features = Path("/proc/cpuinfo").read_text(encoding="utf-8").split()
    except OSError:
        return True
    return "bf16" in features


def trains_on_cpu(accelerator: Any) -> bool:
    """Whether Lightning's `accelerator` setting ends up on the CPU ("auto": no GPU here)."""
    if accelerator in (None, "auto"):
        return not torch.cuda.is_available() and not torch.backends.mps.is_available()
    return accelerator == "cpu"


def resolve_precision(precision: Any, accelerator: Any) -> tuple[Any, str | None]:
    """The precision to train with ("32-true" for bf16 on a CPU without bf16 instructions,
    unless `MINITX_KEEP_BF16` is 1), and a note to print when it differs from `precision`."""
    if (
        str(precision) not in BF16_PRECISIONS
        or not trains_on_cpu(accelerator)
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
