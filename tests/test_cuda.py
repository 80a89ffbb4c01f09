"""minitx on a CUDA GPU: the attention core against PyTorch's fused kernels, a bf16-mixed
training run, cached decoding, and a checkpoint trained on the GPU read back on the CPU.

Every test is marked `cuda` and skips where torch sees no CUDA device (`pytest -m cuda`
selects them; scripts/gpu_check.sh runs them on a lent GPU).

Tolerances: fp32 compares against fp32 kernels with TF32 switched off (the default; the
fixture below makes sure), so only summation order differs: 1e-5. bf16 has 8 significant
bits (a relative step of 2**-8 = 0.4%); the fused kernels keep their softmax and sums in
fp32 as the explicit path does, so each output differs by a few bf16 steps at most: 3e-2,
as the CPU's bf16 test in test_attention.py allows.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers import TOY_TEST_SOURCES, train_tiny
from torch.nn.attention import SDPBackend, sdpa_kernel

from minitx.attention import (
    MultiHeadAttention,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from minitx.decoding import DecodingConfig, beam_search, greedy_decode
from minitx.model import Transformer, TransformerConfig

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

CUDA = torch.device("cuda")
TOLERANCE = {
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.bfloat16: {"atol": 3e-2, "rtol": 3e-2},
}
DTYPES = [torch.float32, torch.bfloat16]
DTYPE_IDS = ["fp32", "bf16"]
MASKS = ["none", "padding", "causal+padding", "float"]


@pytest.fixture(autouse=True)
def exact_fp32_matmuls():
    """fp32 products in full fp32 (not TF32) for the length of a test, whatever came before."""
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous


def make_mask(kind: str, batch: int, tq: int, tk: int) -> torch.Tensor | None:
    """A mask broadcastable to (B, H, Tq, Tk) on the GPU: bool (True = may attend) or float."""
    if kind == "none":
        return None
    if kind == "float":
        generator = torch.Generator(device=CUDA).manual_seed(5)
        return torch.randn(tq, tk, device=CUDA, generator=generator)
    ids = torch.ones(batch, tk, dtype=torch.long, device=CUDA)
    ids[0, tk - 3 :] = 0  # the first row's last three keys are padding
    mask = padding_mask(ids)  # (B, 1, 1, Tk)
    if kind == "causal+padding":
        mask = combine_masks(mask, causal_mask(tq, tk, device=CUDA))
    return mask


def qkv(dtype: torch.dtype, b: int = 3, h: int = 4, tq: int = 9, tk: int = 11, d: int = 32):
    generator = torch.Generator(device=CUDA).manual_seed(0)
    return tuple(
        torch.randn(b, h, t, d, device=CUDA, generator=generator).to(dtype) for t in (tq, tk, tk)
    )


# --------------------------------------------------------------------------------------------
# The attention core against F.scaled_dot_product_attention on the GPU
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MASKS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_explicit_attention_equals_fused_kernel(dtype, kind):
    q, k, v = qkv(dtype)
    mask = make_mask(kind, q.size(0), q.size(-2), k.size(-2))
    if mask is not None and mask.is_floating_point():
        mask = mask.to(dtype)  # the fused kernel takes a float mask in the queries' dtype
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    fused = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert out.device.type == "cuda" and out.dtype == dtype
    torch.testing.assert_close(out.float(), fused.float(), **TOLERANCE[dtype])
    # The weights are a softmax over the keys (kept in fp32), exactly zero where masked.
    torch.testing.assert_close(
        weights.sum(-1), torch.ones(weights.shape[:-1], device=CUDA), atol=1e-5, rtol=1e-5
    )
    if mask is not None and mask.dtype == torch.bool:
        assert (weights[~mask.expand_as(weights)] == 0).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize(
    "backend",
    [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH],
    ids=["flash", "efficient", "math"],
)
def test_explicit_causal_attention_equals_each_kernel(backend, dtype):
    """The training step's self-attention call (is_causal, no mask) on each CUDA kernel."""
    if backend == SDPBackend.FLASH_ATTENTION and dtype == torch.float32:
        pytest.skip("the flash kernel takes fp16/bf16 only")
    q, k, v = qkv(dtype, tq=16, tk=16)
    explicit, _ = scaled_dot_product_attention(q, k, v, causal_mask(16, device=CUDA))
    with sdpa_kernel(backend):
        fused = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(explicit.float(), fused.float(), **TOLERANCE[dtype])


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("case", ["self", "causal+padding", "cross+padding"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_multi_head_attention_on_cuda_equals_cpu_fp32(dtype, case, need_weights):
    """MultiHeadAttention on the GPU (fused path, or explicit with need_weights) gives the
    output of the same weights on the CPU in fp32 (the CPU path test_attention.py checks)."""
    torch.manual_seed(3)
    cpu = MultiHeadAttention(64, 4).eval()
    gpu = MultiHeadAttention(64, 4).eval()
    gpu.load_state_dict(cpu.state_dict())
    gpu = gpu.to(CUDA, dtype)
    x = torch.randn(2, 7, 64)
    memory = torch.randn(2, 9, 64) if case.startswith("cross") else None
    tk = 7 if memory is None else 9
    ids = torch.ones(2, tk, dtype=torch.long)
    ids[1, tk - 2 :] = 0
    mask = padding_mask(ids) if "padding" in case else None
    causal = "causal" in case

    with torch.no_grad():
        expected, expected_weights = cpu(x, memory, mask=mask, is_causal=causal, need_weights=True)
        out, weights = gpu(
            x.to(CUDA, dtype),
            None if memory is None else memory.to(CUDA, dtype),
            mask=None if mask is None else mask.to(CUDA),
            is_causal=causal,
            need_weights=need_weights,
        )
    assert out.dtype == dtype
    # Through four projections bf16's rounding adds up: twice the core's tolerance.
    close = TOLERANCE[dtype] if dtype == torch.float32 else {"atol": 6e-2, "rtol": 6e-2}
    torch.testing.assert_close(out.float().cpu(), expected, **close)
    if need_weights:
        torch.testing.assert_close(weights.float().cpu(), expected_weights, **close)
    else:
        assert weights is None


# --------------------------------------------------------------------------------------------
# Cached decoding on the GPU
# --------------------------------------------------------------------------------------------


@pytest.fixture
def model_and_sources() -> tuple[Transformer, torch.Tensor]:
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=40,
        tgt_vocab_size=40,
        d_model=32,
        n_heads=4,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=64,
        dropout=0.0,
        max_positions=64,
    )
    model = Transformer(config).eval().to(CUDA)
    generator = torch.Generator().manual_seed(1)
    sources = torch.randint(4, 40, (6, 9), generator=generator)
    sources[2, 5:] = 0  # two padded rows
    sources[4, 3:] = 0
    return model, sources.to(CUDA)


def test_greedy_cached_equals_uncached_on_cuda(model_and_sources):
    model, sources = model_and_sources
    cached = greedy_decode(
        model, sources, DecodingConfig(max_len_a=1.0, max_len_b=5, use_cache=True)
    )
    full = greedy_decode(
        model, sources, DecodingConfig(max_len_a=1.0, max_len_b=5, use_cache=False)
    )
    assert cached.device.type == "cuda"
    assert torch.equal(cached, full)


def test_beam_cached_equals_uncached_on_cuda(model_and_sources):
    model, sources = model_and_sources
    kwargs = dict(beam_size=5, n_best=5, alpha=0.6, max_len_a=1.0, max_len_b=5)
    cached = beam_search(model, sources, DecodingConfig(use_cache=True, **kwargs))
    full = beam_search(model, sources, DecodingConfig(use_cache=False, **kwargs))
    for hyps_a, hyps_b in zip(cached, full, strict=True):
        assert [h.tokens for h in hyps_a] == [h.tokens for h in hyps_b]
        for a, b in zip(hyps_a, hyps_b, strict=True):
            assert a.score == pytest.approx(b.score, abs=1e-4)


def test_cached_step_logits_equal_full_recomputation_on_cuda(model_and_sources):
    model, sources = model_and_sources
    tokens = torch.full((sources.size(0), 1), 2, device=CUDA)  # BOS
    with torch.no_grad():
        enc = model.encode(sources)
        cache = model.new_cache()
        for _ in range(5):
            step = model.decode(tokens[:, -1:], enc.memory, enc.src_mask, cache=cache)
            full = model.decode(tokens, enc.memory, enc.src_mask)
            step, full = step.logits[:, -1], full.logits[:, -1]
            torch.testing.assert_close(step, full, atol=1e-4, rtol=1e-4)
            tokens = torch.cat([tokens, full.argmax(-1, keepdim=True)], dim=1)


# --------------------------------------------------------------------------------------------
# Training on the GPU (bf16-mixed), and its checkpoint on the CPU
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_run(tmp_path_factory: pytest.TempPathFactory):
    """The tiny config trained for two epochs on the GPU in bf16-mixed, test split scored."""
    extra = ("--trainer.accelerator", "gpu", "--trainer.precision", "bf16-mixed")
    return train_tiny(tmp_path_factory.mktemp("gpu_run"), max_epochs=2, extra=extra)


def test_bf16_mixed_training_on_cuda(gpu_run):
    from minitx.checkpoint import read_checkpoint

    assert gpu_run.global_step > 0
    checkpoint = read_checkpoint(gpu_run.checkpoint)
    weights = checkpoint["state_dict"]
    # bf16-mixed keeps fp32 master weights: the checkpoint holds them, all finite.
    assert all(t.dtype == torch.float32 for t in weights.values() if t.is_floating_point())
    assert all(torch.isfinite(t).all() for t in weights.values() if t.is_floating_point())
    metrics = (gpu_run.run_dir / "csv" / "metrics.csv").read_text(encoding="utf-8")
    assert "test/bleu_greedy" in metrics and "val/bleu" in metrics


def test_checkpoint_trained_on_cuda_translates_on_cpu(gpu_run):
    from minitx.translator import Translator

    on_cpu = Translator.from_pretrained(gpu_run.checkpoint, device="cpu")
    assert all(p.device.type == "cpu" for p in on_cpu.model.parameters())
    translations = on_cpu.translate(TOY_TEST_SOURCES, beam_size=1)
    assert len(translations) == len(TOY_TEST_SOURCES)
    assert all(isinstance(t, str) for t in translations)
    # The same weights on the GPU in fp32 give the CPU's scores: the file carries the model.
    on_gpu = Translator.from_pretrained(gpu_run.checkpoint, device="cuda")
    src = torch.tensor([[5, 6, 7, 8, 3]])
    tgt = torch.tensor([[2, 9, 10, 11]])
    with torch.no_grad():
        expected = on_cpu.model(src, tgt)
        logits = on_gpu.model(src.to(CUDA), tgt.to(CUDA)).cpu()
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=1e-4)


def test_attention_maps_of_gpu_run_written(gpu_run):
    """The attention-map callback ran on the GPU too (it moves maps to the CPU to draw)."""
    assert any(Path(gpu_run.run_dir, "attention").rglob("*"))
