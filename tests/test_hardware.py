"""What the CPU computes natively (the inference commands ask it without Lightning: the
`inference-commands-without-lightning` import contract)."""

from __future__ import annotations

import pytest
import torch

from minitx.hardware import cpu_has_fast_bf16


def test_the_capability_check_answers() -> None:
    assert isinstance(cpu_has_fast_bf16(), bool)


@pytest.mark.skipif(
    not hasattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported"), reason="no oneDNN check here"
)
def test_the_capability_check_agrees_with_onednn() -> None:
    # minitx asks public sources (ATen's kernel level, the CPU's features); oneDNN's own,
    # private check is the reference it must agree with on this machine.
    assert cpu_has_fast_bf16() == torch.ops.mkldnn._is_mkldnn_bf16_supported()
