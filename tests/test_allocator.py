"""Tests for minitx.cli.allocator: the commands keep the memory a step frees."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import PYTHON, subprocess_env

# A step's pattern: three 30 MB tensors alive at once, then freed. glibc's own thresholds
# (at most 32 MB for mmap, twice that for trimming the heap) hand them back to the kernel.
STEPS = """
import resource, sys, torch
from minitx.cli.allocator import keep_freed_memory
took = keep_freed_memory() if sys.argv[1] == "kept" else None

def step():
    a = torch.ones(7_500_000)
    b = a + 1
    return float((b * 2)[0])

def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

for _ in range(10):  # the heap grows to the step's size
    step()
per_step = []
for _ in range(20):
    before = faults()
    step()
    per_step.append(faults() - before)
print(took, *per_step)
"""


def page_faults(mode: str) -> tuple[str, list[int]]:
    # By default glibc keeps the blocks or returns them by where its heap's top lands
    # (14,616 to 438,820 faults here, 0 on a busy machine): both children start with its
    # mmap threshold at 128 KB, every block mmapped, which `keep_freed_memory` overrides.
    out = subprocess.run(
        [PYTHON, "-c", STEPS, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**subprocess_env(), "MALLOC_MMAP_THRESHOLD_": "131072"},
    ).stdout.split()
    return out[0], [int(n) for n in out[1:]]  # page faults of each of 20 steps


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's: Linux only")
def test_kept_freed_memory_serves_the_next_step_without_page_faults():
    """Blocks handed back to the kernel fault their pages in again at each step (about
    22,000 a step: three 30 MB blocks); with the settings the heap keeps them, and a step
    faults in a block's pages at most once, when the heap grows (7,325 pages in one of 20
    steps under CI's load, 0 in every other run)."""
    took, kept = page_faults("kept")
    _, returned = page_faults("default")
    assert took == "True"
    assert all(n > 10_000 for n in returned), f"steps mmapped faulted {returned}: no test"
    faulting = [n for n in kept if n > 1_000]
    assert len(faulting) <= 1, f"page faults of 20 steps with the memory kept: {kept}"


def test_every_command_starts_with_the_freed_memory_kept(monkeypatch):
    from minitx.cli import launch

    calls = []
    monkeypatch.setattr(launch, "keep_freed_memory", lambda: calls.append(1) or True)
    monkeypatch.setitem(launch.COMMANDS, "probe", ("os", "getpid"))  # a command: any function
    assert launch.launch("probe") > 0
    assert calls == [1]
