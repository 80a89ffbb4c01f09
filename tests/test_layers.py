"""Tests for the layers of minitx.model: feed-forward (and its activation registry), encoder and
decoder layers.

The layers are checked against PyTorch's `nn.TransformerEncoderLayer` /
`nn.TransformerDecoderLayer` after copying weights (pre-LN and post-LN, relu and gelu).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from minitx.attention import MultiHeadAttention, causal_mask
from minitx.kv_cache import KVCache
from minitx.model import DecoderLayer, EncoderLayer, FeedForward, TransformerConfig

FP32 = {"atol": 1e-5, "rtol": 1e-5}


def settings(d_model: int, n_heads: int, d_ff: int, **overrides) -> TransformerConfig:
    """The settings a layer is built from: these widths, the rest the defaults."""
    return TransformerConfig(d_model=d_model, n_heads=n_heads, d_ff=d_ff, **overrides)


# --------------------------------------------------------------------------------------------
# Feed-forward
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("activation", "fn"), [("relu", F.relu), ("gelu", F.gelu)])
def test_feed_forward_shapes_and_activation(activation, fn):
    torch.manual_seed(2)
    ff = FeedForward(8, 20, activation=activation)
    assert ff.w1.weight.shape == (20, 8) and ff.w2.weight.shape == (8, 20)
    x = torch.randn(2, 5, 8)
    out = ff(x)
    assert out.shape == (2, 5, 8)
    torch.testing.assert_close(out, ff.w2(fn(ff.w1(x))), **FP32)
    other = F.gelu if activation == "relu" else F.relu
    assert not torch.allclose(out, ff.w2(other(ff.w1(x))), atol=1e-4)


def test_feed_forward_dropout_only_in_training():
    torch.manual_seed(3)
    ff = FeedForward(8, 32, dropout=0.5)
    x = torch.randn(2, 5, 8)
    ff.eval()
    torch.testing.assert_close(ff(x), ff.w2(F.relu(ff.w1(x))), **FP32)
    ff.train()
    assert not torch.allclose(ff(x), ff.w2(F.relu(ff.w1(x))))


def test_bad_activation_raises():
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        FeedForward(8, 16, activation="tanh")
    with pytest.raises(ValueError, match="unknown activation"):
        EncoderLayer(settings(8, 2, 16, activation="swish"))
    with pytest.raises(ValueError, match="unknown activation"):
        DecoderLayer(settings(8, 2, 16, activation="swish"))


# --------------------------------------------------------------------------------------------
# Encoder / decoder layers against PyTorch's
# --------------------------------------------------------------------------------------------


def _copy_mha(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    ref.in_proj_weight.copy_(
        torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
    )
    ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    ref.out_proj.weight.copy_(ours.out_proj.weight)
    ref.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_norm(ours: nn.LayerNorm, ref: nn.LayerNorm) -> None:
    ref.weight.copy_(ours.weight)
    ref.bias.copy_(ours.bias)


def _randomize_norms(module: nn.Module, seed: int) -> None:
    """LayerNorms start as identity affine maps; make them distinct so copying them is tested."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.3 * torch.randn(m.weight.shape, generator=g))
                m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))


D, H, FF = 16, 4, 24
LAYER_VARIANTS = [(True, "relu"), (False, "relu"), (True, "gelu"), (False, "gelu")]


def _variant_id(v):
    return f"{'pre' if v[0] else 'post'}LN-{v[1]}"


@pytest.mark.parametrize("variant", LAYER_VARIANTS, ids=_variant_id)
def test_encoder_layer_equals_torch(variant):
    norm_first, activation = variant
    torch.manual_seed(4)
    ours = EncoderLayer(
        settings(D, H, FF, dropout=0.0, activation=activation, norm_first=norm_first)
    )
    _randomize_norms(ours, 5)
    ref = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    with torch.no_grad():
        _copy_mha(ours.self_attn, ref.self_attn)
        ref.linear1.load_state_dict(ours.feed_forward.w1.state_dict())
        ref.linear2.load_state_dict(ours.feed_forward.w2.state_dict())
        _copy_norm(ours.attn_block.norm, ref.norm1)
        _copy_norm(ours.ff_block.norm, ref.norm2)
    ours.train(), ref.train()  # dropout is 0; train mode keeps torch off its fused fast path
    x = torch.randn(2, 6, D)
    keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    out, weights = ours(x, keep[:, None, None, :], need_weights=True)
    out_fused, none = ours(x, keep[:, None, None, :])
    assert none is None and weights.shape == (2, H, 6, 6)
    assert (weights[1, :, :, 4:] == 0).all()
    expected = ref(x, src_key_padding_mask=~keep)
    torch.testing.assert_close(out, expected, **FP32)
    torch.testing.assert_close(out_fused, expected, **FP32)


@pytest.mark.parametrize("variant", LAYER_VARIANTS, ids=_variant_id)
def test_decoder_layer_equals_torch(variant):
    norm_first, activation = variant
    torch.manual_seed(6)
    ours = DecoderLayer(
        settings(D, H, FF, dropout=0.0, activation=activation, norm_first=norm_first)
    )
    _randomize_norms(ours, 7)
    ref = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    with torch.no_grad():
        _copy_mha(ours.self_attn, ref.self_attn)
        _copy_mha(ours.cross_attn, ref.multihead_attn)
        ref.linear1.load_state_dict(ours.feed_forward.w1.state_dict())
        ref.linear2.load_state_dict(ours.feed_forward.w2.state_dict())
        _copy_norm(ours.self_block.norm, ref.norm1)
        _copy_norm(ours.cross_block.norm, ref.norm2)
        _copy_norm(ours.ff_block.norm, ref.norm3)
    ours.train(), ref.train()
    x, memory = torch.randn(2, 5, D), torch.randn(2, 7, D)
    keep = torch.tensor([[True] * 7, [True] * 3 + [False] * 4])
    out, self_w, cross_w = ours(x, memory, keep[:, None, None, :], need_weights=True)
    out_fused, none1, none2 = ours(x, memory, keep[:, None, None, :])
    assert none1 is None and none2 is None
    assert self_w.shape == (2, H, 5, 5) and cross_w.shape == (2, H, 5, 7)
    assert (self_w.triu(1) == 0).all()
    assert (cross_w[1, :, :, 3:] == 0).all()
    expected = ref(x, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~keep)
    torch.testing.assert_close(out, expected, **FP32)
    torch.testing.assert_close(out_fused, expected, **FP32)


@pytest.mark.parametrize("layer_cls", [EncoderLayer, DecoderLayer])
def test_pre_and_post_ln_differ_and_post_ln_output_is_normalised(layer_cls):
    torch.manual_seed(8)
    pre = layer_cls(settings(D, H, FF, dropout=0.0, norm_first=True))
    post = layer_cls(settings(D, H, FF, dropout=0.0, norm_first=False))
    post.load_state_dict(pre.state_dict())  # same weights, only the LN placement differs
    x, memory = 3.0 * torch.randn(2, 5, D) + 1.0, torch.randn(2, 4, D)
    mask = torch.ones(2, 1, 1, 4 if layer_cls is DecoderLayer else 5, dtype=torch.bool)
    args = (x, memory, mask) if layer_cls is DecoderLayer else (x, mask)
    out_pre, out_post = pre(*args)[0], post(*args)[0]
    assert out_pre.shape == out_post.shape == (2, 5, D)
    assert not torch.allclose(out_pre, out_post, atol=1e-2)
    # Post-LN ends in a LayerNorm (identity affine at init): each position has mean 0, var 1.
    torch.testing.assert_close(out_post.mean(-1), torch.zeros(2, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(
        out_post.var(-1, unbiased=False), torch.ones(2, 5), atol=1e-3, rtol=0
    )
    # Pre-LN keeps the residual stream un-normalised.
    assert out_pre.mean(-1).abs().max() > 0.1


@pytest.mark.parametrize("norm_first", [True, False])
def test_decoder_layer_cache_step_by_step_equals_full(norm_first):
    torch.manual_seed(9)
    layer = DecoderLayer(settings(D, H, FF, dropout=0.0, norm_first=norm_first)).eval()
    x, memory = torch.randn(2, 5, D), torch.randn(2, 6, D)
    mask = torch.tensor([[True] * 6, [True] * 2 + [False] * 4])[:, None, None, :]
    full, full_self, full_cross = layer(x, memory, mask, need_weights=True)
    cache = (KVCache(), KVCache())
    for t in range(5):
        out, self_w, cross_w = layer(x[:, t : t + 1], memory, mask, need_weights=True, cache=cache)
        torch.testing.assert_close(out, full[:, t : t + 1], **FP32)
        torch.testing.assert_close(self_w[:, :, 0], full_self[:, :, t, : t + 1], **FP32)
        torch.testing.assert_close(cross_w, full_cross[:, :, t : t + 1], **FP32)
    assert cache[0].length == 5 and cache[1].length == 6


def test_layer_dropout_is_active_only_in_training():
    torch.manual_seed(10)
    layer = EncoderLayer(settings(D, H, FF, dropout=0.5))
    x = torch.randn(2, 5, D)
    layer.eval()
    a, b = layer(x, None)[0], layer(x, None)[0]
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    layer.train()
    assert not torch.allclose(layer(x, None)[0], a)
