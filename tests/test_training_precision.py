"""The training precision: bf16 only where the CPU computes it natively."""

from __future__ import annotations

import pytest
import torch

from minitx.training import precision
from minitx.training.precision import resolve_precision


@pytest.fixture
def cpu_without_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(precision.KEEP_BF16_ENV, raising=False)
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)


@pytest.mark.parametrize("setting", ["bf16-mixed", "bf16-true", "bf16"])
def test_bf16_on_a_cpu_without_bf16_becomes_fp32(cpu_without_bf16: None, setting: str) -> None:
    chosen, note = resolve_precision(setting, "cpu")
    assert chosen == "32-true"
    assert setting in note and "MINITX_KEEP_BF16=1" in note


@pytest.mark.parametrize("setting", ["32-true", None, 32])
def test_other_precisions_are_kept(cpu_without_bf16: None, setting: object) -> None:
    assert resolve_precision(setting, "cpu") == (setting, None)


@pytest.mark.parametrize("setting", ["16-mixed", "16", 16])
def test_fp16_autocast_on_a_cpu_becomes_bf16_where_the_cpu_has_it(
    monkeypatch: pytest.MonkeyPatch, setting: object
) -> None:
    """Lightning made it bf16-mixed with two warnings of its own, and on a CPU without bf16
    instructions an emulated bf16, many times slower than fp32."""
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)
    chosen, note = resolve_precision(setting, "cpu")
    assert chosen == "bf16-mixed"
    assert f"trainer.precision {setting}: fp16 autocast does not run on a CPU" in note
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    monkeypatch.delenv(precision.KEEP_BF16_ENV, raising=False)
    chosen, note = resolve_precision(setting, "cpu")
    assert chosen == "32-true" and "has no bf16 instructions" in note
    assert resolve_precision(setting, "gpu") == (setting, None)  # fp16 autocast runs there


def test_bf16_is_kept_where_the_cpu_has_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: True)
    assert resolve_precision("bf16-mixed", "cpu") == ("bf16-mixed", None)


def test_bf16_is_kept_on_request_or_on_a_gpu(
    cpu_without_bf16: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert resolve_precision("bf16-mixed", "gpu") == ("bf16-mixed", None)
    monkeypatch.setenv(precision.KEEP_BF16_ENV, "1")
    assert resolve_precision("bf16-mixed", "cpu") == ("bf16-mixed", None)


def test_auto_accelerator_is_the_cpu_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert precision.trains_on_cpu("auto") and precision.trains_on_cpu(None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert not precision.trains_on_cpu("auto")
