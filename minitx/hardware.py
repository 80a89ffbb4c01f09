"""What this machine's CPU computes natively: asked by training (its precision), the inference
commands (a note for ``--bf16``) and the benchmark. Torch only, so that a command which never
trains asks it without importing Lightning.

A CPU without bf16 instructions emulates every bf16 matrix product: on an AVX2 machine (torch
2.13, 1 thread) a 2048x256 by 256x1024 matmul ran at 0.6 GFLOP/s in bf16 against 32 GFLOP/s in
fp32.
"""

from __future__ import annotations

import platform
from pathlib import Path

import torch


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
