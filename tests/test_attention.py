"""Tests for minitx.attention (masks, the attention core, heads, MHA), minitx.scores and the
KV cache (minitx.kv_cache).

Equivalence with PyTorch's own implementations (`F.scaled_dot_product_attention`,
`nn.MultiheadAttention`) and properties (masked keys get weight 0, rows sum to 1, no NaN,
no mixing of positions across heads) rather than golden numbers.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minitx.attention import (
    SCORES,
    MultiHeadAttention,
    ScaledDotScore,
    causal_mask,
    combine_masks,
    merge_heads,
    padding_mask,
    scaled_dot_product_attention,
    split_heads,
)
from minitx.kv_cache import KVCache
from minitx.scores import AdditiveScore, BilinearScore, DotScore

FP32 = {"atol": 1e-5, "rtol": 1e-5}
MASK_KINDS = ("none", "causal", "padding", "causal+padding", "float")


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_mask(
    kind: str, lead: tuple[int, ...], tq: int, tk: int, seed: int = 0
) -> tuple[Tensor | None, Tensor]:
    """A mask of `kind` broadcastable to lead + (tq, tk), and the full bool 'may attend' tensor.

    Padding: sentence i of the first batch axis has max(1, tk - 2i - 1) real keys, so every
    sentence has some padding and at least one real key; causal masks are right-aligned, so
    query 0 always sees key 0: no row is fully masked.
    """
    b = lead[0]
    full = lead + (tq, tk)
    lengths = torch.tensor([max(1, tk - 2 * i - 1) for i in range(b)])
    ids = torch.randint(1, 9, (b, tk), generator=gen(seed))
    ids[torch.arange(tk)[None, :] >= lengths[:, None]] = 0
    pad = padding_mask(ids)  # (B, 1, 1, Tk)
    pad = pad.view((b,) + (1,) * (len(lead) - 1) + (1, tk))  # broadcast over the other lead axes
    causal = causal_mask(tq, tk)
    if kind == "none":
        mask = None
    elif kind == "causal":
        mask = causal
    elif kind == "padding":
        mask = pad
    elif kind == "causal+padding":
        mask = combine_masks(causal, pad)
    elif kind == "float":
        mask = 2.0 * torch.randn(tq, tk, generator=gen(seed + 1))
        blocked = (torch.arange(tq)[:, None] + torch.arange(tk)[None, :]) % 3 == 1
        mask = mask.masked_fill(blocked, float("-inf"))
    else:  # pragma: no cover
        raise AssertionError(kind)
    if mask is None:
        allowed = torch.ones(full, dtype=torch.bool)
    elif mask.dtype == torch.bool:
        allowed = mask.expand(full)
    else:
        allowed = torch.isfinite(mask).expand(full)
    assert allowed.any(-1).all(), "test setup: no row may be fully masked here"
    return mask, allowed


def qkv(
    lead: tuple[int, ...],
    tq: int,
    tk: int,
    dk: int,
    dv: int,
    seed: int = 0,
    requires_grad: bool = False,
):
    g = gen(seed)
    q = torch.randn(lead + (tq, dk), generator=g)
    k = torch.randn(lead + (tk, dk), generator=g)
    v = torch.randn(lead + (tk, dv), generator=g)
    return tuple(t.requires_grad_(requires_grad) for t in (q, k, v))


# (lead dims, Tq, Tk, Dk, Dv): one and two leading axes, Tq != Tk, Dv != Dk.
SHAPES = [
    ((3,), 4, 4, 8, 8),
    ((2,), 3, 5, 4, 6),
    ((2, 3), 5, 5, 8, 8),
    ((2, 2), 2, 6, 4, 10),
]


# --------------------------------------------------------------------------------------------
# The attention core against F.scaled_dot_product_attention
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize(
    "shape", SHAPES, ids=lambda s: f"lead{len(s[0])}-tq{s[1]}-tk{s[2]}-dk{s[3]}-dv{s[4]}"
)
def test_sdpa_equals_torch_fp32(shape, kind):
    lead, tq, tk, dk, dv = shape
    q, k, v = qkv(lead, tq, tk, dk, dv, seed=1)
    mask, allowed = make_mask(kind, lead, tq, tk)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.shape == lead + (tq, dv)
    assert weights.shape == lead + (tq, tk)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, **FP32)
    # Weights: softmax over keys, exactly zero where masked.
    torch.testing.assert_close(weights.sum(-1), torch.ones(lead + (tq,)), **FP32)
    assert (weights[~allowed] == 0).all()
    assert (weights[allowed] > 0).all()
    # And the weights themselves are what produced the output.
    torch.testing.assert_close(weights @ v, out, **FP32)


@pytest.mark.parametrize("kind", ["none", "causal+padding", "float"])
def test_sdpa_equals_torch_bf16(kind):
    lead, tq, tk, dk, dv = (2, 2), 3, 5, 8, 6
    q, k, v = (t.bfloat16() for t in qkv(lead, tq, tk, dk, dv, seed=2))
    mask, allowed = make_mask(kind, lead, tq, tk)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == torch.bfloat16
    assert weights.dtype == torch.float32  # softmax is done in fp32
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask)
    torch.testing.assert_close(out.float(), expected, atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(weights.sum(-1), torch.ones(lead + (tq,)), **FP32)
    assert (weights[~allowed] == 0).all()


@pytest.mark.parametrize("kind", ["none", "causal+padding"])
def test_sdpa_keeps_float64(kind):
    """Was: the scores went to float32 whatever came in (to lift bf16), so float64 lost its
    precision (1e-7 off torch's) and `gradcheck` failed."""
    lead, tq, tk, dk, dv = (2, 2), 3, 5, 8, 6
    q, k, v = (t.double().requires_grad_() for t in qkv(lead, tq, tk, dk, dv, seed=5))
    mask, _ = make_mask(kind, lead, tq, tk)
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == weights.dtype == torch.float64
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)
    assert torch.autograd.gradcheck(lambda *t: scaled_dot_product_attention(*t, mask)[0], (q, k, v))


def test_sdpa_scales_q_before_matmul_and_matches_manual_formula():
    q, k, v = qkv((2, 2), 3, 4, 16, 5, seed=3)
    out, weights = scaled_dot_product_attention(q, k, v)
    manual_w = torch.softmax((q / math.sqrt(16)) @ k.transpose(-2, -1), dim=-1)
    torch.testing.assert_close(weights, manual_w, **FP32)
    torch.testing.assert_close(out, manual_w @ v, **FP32)
    # Score module on its own: (q / sqrt(d)) k^T, not q k^T and not / d.
    torch.testing.assert_close(ScaledDotScore()(q, k), (q @ k.transpose(-2, -1)) / 4.0, **FP32)


def test_sdpa_fp16_large_inputs_do_not_overflow():
    """In fp16, q kᵀ of large vectors overflows (> 65504); scaling q first keeps it finite."""
    d = 16
    g = gen(4)
    q = (100.0 + torch.randn(1, 3, d, generator=g)).half()
    k = (100.0 + torch.randn(1, 4, d, generator=g)).half()
    v = torch.randn(1, 4, 2, generator=g).half()
    assert torch.isinf(q @ k.transpose(-2, -1)).any(), (
        "test setup: the unscaled product must overflow"
    )
    out, weights = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 3), **FP32)
    # Scaling after the matmul instead would give inf - inf = NaN in the softmax.
    late = torch.softmax((q @ k.transpose(-2, -1)).float() / math.sqrt(d), dim=-1)
    assert torch.isnan(late).any()


@pytest.mark.parametrize("mask_dtype", ["bool", "float"])
def test_fully_masked_row_gives_zeros_and_finite_gradients(mask_dtype):
    q, k, v = qkv((2,), 3, 4, 4, 5, seed=5, requires_grad=True)
    allowed = torch.ones(2, 3, 4, dtype=torch.bool)
    allowed[0, 1] = False  # query 1 of sentence 0 sees nothing
    allowed[1, :, 2] = False
    mask = (
        allowed
        if mask_dtype == "bool"
        else torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
    )
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert (out[0, 1] == 0).all() and (weights[0, 1] == 0).all()
    # Other rows are untouched by the dead row.
    torch.testing.assert_close(weights[0, [0, 2]].sum(-1), torch.ones(2), **FP32)
    (out.square().sum() + weights.square().sum()).backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[0, 1] == 0).all()  # a dead query gets no gradient
    assert q.grad[0, 0].abs().sum() > 0


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_mha_fully_masked_row_is_zero_and_finite_grads(need_weights):
    torch.manual_seed(6)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8, requires_grad=True)
    memory = torch.randn(2, 4, 8, requires_grad=True)
    keep = torch.tensor([[False] * 4, [True, True, False, False]])[
        :, None, None, :
    ]  # sentence 0: all padding
    out, _ = mha(x, memory, mask=keep, need_weights=need_weights)
    assert torch.isfinite(out).all()
    # Attention output is zero, so the block output is the out_proj bias.
    torch.testing.assert_close(out[0], mha.out_proj.bias.expand(3, 8), **FP32)
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(memory.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in mha.parameters())


def test_sdpa_dropout_changes_output_not_returned_weights():
    q, k, v = qkv((2,), 4, 4, 8, 8, seed=7)
    torch.manual_seed(0)
    out_d, w_d = scaled_dot_product_attention(q, k, v, dropout_p=0.5)
    out, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w_d, w, **FP32)  # weights are reported before dropout
    assert not torch.allclose(out_d, out)


# --------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("tq", "tk"), [(1, 1), (4, 4), (1, 5), (3, 7), (2, 3)])
def test_causal_mask_is_right_aligned(tq, tk):
    mask = causal_mask(tq, tk)
    assert mask.dtype == torch.bool and mask.shape == (tq, tk)
    expected = torch.tensor([[j <= i + (tk - tq) for j in range(tk)] for i in range(tq)])
    assert torch.equal(mask, expected)
    # Queries are the last tq of tk positions: each is the matching row of the square mask.
    assert torch.equal(mask, causal_mask(tk)[tk - tq :])
    assert mask[-1].all()  # the last query sees every key


def test_causal_mask_square_default_and_errors():
    assert torch.equal(causal_mask(4), torch.ones(4, 4, dtype=torch.bool).tril())
    for tq, tk in ((5, 3), (-1, None), (-2, -1)):  # negative lengths: torch's shape errors
        with pytest.raises(ValueError, match="Tk .* must be >= Tq .* >= 0"):
            causal_mask(tq, tk)


def test_padding_mask_shape_and_values():
    ids = torch.tensor([[5, 6, 7, 0, 0], [4, 0, 0, 0, 0], [9, 9, 9, 9, 9]])
    mask = padding_mask(ids)
    assert mask.shape == (3, 1, 1, 5) and mask.dtype == torch.bool
    assert torch.equal(mask[:, 0, 0], ids != 0)
    other = padding_mask(ids, pad_id=9)
    assert torch.equal(other[:, 0, 0], ids != 9)


def test_combine_masks():
    a = torch.tensor([[True, True, False], [True, False, True]])
    b = torch.tensor([[True, False, False], [True, True, True]])
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    assert torch.equal(combine_masks(None, a, None), a)
    both = combine_masks(a, b)
    assert both.dtype == torch.bool and torch.equal(both, a & b)
    # Broadcasting: a (B,1,1,Tk) padding mask with a (Tq,Tk) causal mask.
    pad = padding_mask(torch.tensor([[1, 2, 0], [3, 0, 0]]))
    combined = combine_masks(pad, causal_mask(3))
    assert combined.shape == (2, 1, 3, 3)
    assert torch.equal(combined, pad & causal_mask(3))
    # bool + float -> additive float.
    f = torch.tensor([[0.5, -1.0, 2.0], [0.0, 3.0, -0.25]])
    mixed = combine_masks(a, f)
    assert mixed.is_floating_point()
    assert torch.equal(mixed, f.masked_fill(~a, float("-inf")))
    # 0/1 integers: refused, as scaled_dot_product_attention refuses them (they were turned
    # into an additive mask of 0s and 1s that masked nothing)
    with pytest.raises(TypeError, match="mask is torch.int64: give a bool mask"):
        combine_masks(torch.tensor([[1, 0], [0, 1]]), torch.ones(2, 2, dtype=torch.bool))
    # And it is used the same way as the pieces applied one after the other.
    q, k, v = qkv((2,), 2, 3, 4, 4, seed=8)
    out, w = scaled_dot_product_attention(q, k, v, mixed)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=f.masked_fill(~a, float("-inf")))
    torch.testing.assert_close(out, ref, **FP32)
    assert (w[:, ~a] == 0).all()


# --------------------------------------------------------------------------------------------
# Score functions
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", MASK_KINDS)
@pytest.mark.parametrize("name", SCORES)
def test_score_functions_with_every_mask(name, kind):
    lead, tq, tk, d = (2, 2), 3, 5, 4
    torch.manual_seed(9)
    score = SCORES[name](d_head=d)
    q, k, v = qkv(lead, tq, tk, d, d, seed=9, requires_grad=True)
    mask, allowed = make_mask(kind, lead, tq, tk)
    out, weights = scaled_dot_product_attention(q, k, v, mask, score=score)
    assert out.shape == lead + (tq, d) and weights.shape == lead + (tq, tk)
    assert (weights[~allowed] == 0).all()
    torch.testing.assert_close(weights.sum(-1), torch.ones(lead + (tq,)), **FP32)
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0
    for pname, p in score.named_parameters():
        assert p.grad is not None, pname
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0, pname


def test_scores_registry_builds_each_score_and_refuses_unknown_names():
    assert isinstance(SCORES["scaled_dot"](d_head=4), ScaledDotScore)
    assert isinstance(SCORES["dot"](d_head=4), DotScore)
    assert isinstance(SCORES["additive"](d_head=4), AdditiveScore)
    assert isinstance(SCORES["bilinear"](d_head=4), BilinearScore)
    with pytest.raises(ValueError) as info:
        SCORES["cosine"]
    message = str(info.value)
    assert "cosine" in message
    for name in SCORES:
        assert name in message


def test_bilinear_at_init_equals_scaled_dot():
    q, k, v = qkv((2, 2), 3, 4, 8, 8, seed=10)
    mask, _ = make_mask("causal+padding", (2, 2), 3, 4)
    out_b, w_b = scaled_dot_product_attention(q, k, v, mask, score=SCORES["bilinear"](d_head=8))
    out_s, w_s = scaled_dot_product_attention(q, k, v, mask, score=SCORES["scaled_dot"](d_head=8))
    torch.testing.assert_close(out_b, out_s, **FP32)
    torch.testing.assert_close(w_b, w_s, **FP32)
    # ... and it is a real bilinear form: changing W changes the scores as q W kᵀ.
    bilinear = BilinearScore(d_head=8)
    with torch.no_grad():
        bilinear.weight.copy_(torch.randn(8, 8, generator=gen(11)))
    torch.testing.assert_close(bilinear(q, k), q @ bilinear.weight @ k.transpose(-2, -1), **FP32)


def test_dot_equals_scaled_dot_on_rescaled_queries():
    d = 16
    q, k, v = qkv((2, 2), 3, 4, d, 5, seed=12)
    out_dot, w_dot = scaled_dot_product_attention(q, k, v, score=DotScore())
    out_ref, w_ref = scaled_dot_product_attention(q * math.sqrt(d), k, v, score=ScaledDotScore())
    torch.testing.assert_close(out_dot, out_ref, **FP32)
    torch.testing.assert_close(w_dot, w_ref, **FP32)
    assert not torch.allclose(w_dot, scaled_dot_product_attention(q, k, v)[1])


def test_additive_score_matches_formula():
    torch.manual_seed(13)
    score = AdditiveScore(d_head=4)
    q, k, _ = qkv((2, 2), 3, 5, 4, 4, seed=13)
    scores = score(q, k)
    assert scores.shape == (2, 2, 3, 5)
    expected = torch.empty(2, 2, 3, 5)
    for i in range(3):
        for j in range(5):
            hidden = torch.tanh(
                q[..., i, :] @ score.w_q.weight.T
                + k[..., j, :] @ score.w_k.weight.T
                + score.w_k.bias
            )
            expected[..., i, j] = (hidden @ score.v.weight.T).squeeze(-1)
    torch.testing.assert_close(scores, expected, **FP32)


@pytest.mark.parametrize("name", SCORES)
def test_mha_with_each_score_trains(name):
    """50 Adam steps learn 'output the previous token' (needs query-dependent attention)."""
    vocab, t, d = 8, 6, 16
    torch.manual_seed(14)
    tokens = torch.randint(0, vocab, (64, t))
    x = torch.cat(
        [
            F.one_hot(tokens, vocab).float(),
            torch.eye(t).expand(64, t, t),
            torch.zeros(64, t, d - vocab - t),
        ],
        -1,
    )
    target = tokens.roll(1, dims=1)  # target at t is the token at t - 1 (cyclically)
    mha = MultiHeadAttention(d, 2, score=name)
    opt = torch.optim.Adam(mha.parameters(), lr=0.03)
    losses = []
    for _ in range(50):
        logits = mha(x)[0][..., :vocab]
        loss = F.cross_entropy(logits.reshape(-1, vocab), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > 1.5
    assert losses[-1] < 0.1 * losses[0], losses[::10]


# --------------------------------------------------------------------------------------------
# split_heads / merge_heads
# --------------------------------------------------------------------------------------------


def test_split_merge_round_trip_is_exact():
    x = torch.randn(3, 5, 12, generator=gen(15))
    for h in (1, 2, 3, 4, 6, 12):
        heads = split_heads(x, h)
        assert heads.shape == (3, h, 5, 12 // h)
        assert torch.equal(merge_heads(heads), x)
    y = torch.randn(2, 4, 5, 3, generator=gen(16))  # (B, H, T, Dh)
    assert torch.equal(split_heads(merge_heads(y), 4), y)


def test_split_heads_layout_and_the_buggy_view():
    b, t, h, dh = 2, 5, 3, 4
    x = torch.randn(b, t, h * dh, generator=gen(17))
    heads = split_heads(x, h)
    assert torch.equal(heads, x.view(b, t, h, dh).transpose(1, 2))
    for head in range(h):  # head `head` at position s is the slice of token s's features
        assert torch.equal(heads[:, head], x[:, :, head * dh : (head + 1) * dh])
    buggy = x.view(b, h, t, dh)
    assert not torch.equal(heads, buggy)
    # Perturb token 1 only: ours changes position 1 only; the buggy view changes others too.
    x2 = x.clone()
    x2[:, 1] += 1.0
    changed = (split_heads(x2, h) != heads).any(-1).any(1).any(0)  # (T,)
    assert changed.tolist() == [s == 1 for s in range(t)]
    buggy_changed = (x2.view(b, h, t, dh) != buggy).any(-1).any(1).any(0)
    assert buggy_changed.sum() > 1 and buggy_changed[[0, 2, 3, 4]].any()


def test_split_heads_rejects_indivisible_width():
    for h in (3, 0, -2):  # 0 and -2 failed in torch (a modulo by zero, a negative shape)
        with pytest.raises(ValueError, match=f"n_heads={h} must be >= 1 and divide the width 10"):
            split_heads(torch.zeros(1, 2, 10), h)


@pytest.mark.parametrize("t", [0, 2, 4])
def test_head_projections_at_position_depend_only_on_that_token(t):
    torch.manual_seed(18)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    x2 = x.clone()
    x2[:, t] = torch.randn(2, 12)
    others = [s for s in range(5) if s != t]
    for proj in (mha.q_proj, mha.k_proj, mha.v_proj):
        before, after = split_heads(proj(x), 3), split_heads(proj(x2), 3)
        assert torch.equal(before[:, :, others], after[:, :, others])
        assert not torch.allclose(before[:, :, t], after[:, :, t])


def _buggy_mha_forward(mha: MultiHeadAttention, x: Tensor, mask: Tensor) -> Tensor:
    """MHA with the tutorial bug: view (B, T, D) straight to (B, H, T, Dh)."""
    b, t, d = x.shape
    q, k, v = (
        p(x).view(b, mha.n_heads, t, d // mha.n_heads) for p in (mha.q_proj, mha.k_proj, mha.v_proj)
    )
    out, _ = scaled_dot_product_attention(q, k, v, mask)
    return mha.out_proj(out.reshape(b, t, d))


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_mha_head_output_at_t_depends_only_on_token_t(need_weights):
    """With a diagonal mask each query sees only its own key: MHA(x)[t] = out_proj(v_proj(x[t]))."""
    torch.manual_seed(19)
    mha = MultiHeadAttention(12, 3)
    x = torch.randn(2, 5, 12)
    diag = torch.eye(5, dtype=torch.bool)[None, None]  # (1, 1, Tq, Tk)
    out, _ = mha(x, mask=diag, need_weights=need_weights)
    torch.testing.assert_close(out, mha.out_proj(mha.v_proj(x)), **FP32)
    x2 = x.clone()
    x2[:, 2] += 1.0
    out2, _ = mha(x2, mask=diag, need_weights=need_weights)
    torch.testing.assert_close(out2[:, [0, 1, 3, 4]], out[:, [0, 1, 3, 4]], **FP32)
    # Every query sees only key 0: the output is token 0's value everywhere, and perturbing
    # token 3 changes nothing. The same check catches the buggy head split, whose "position 0"
    # is a different token in each head.
    first = torch.zeros(1, 1, 5, 5, dtype=torch.bool)
    first[..., 0] = True
    out, _ = mha(x, mask=first, need_weights=need_weights)
    torch.testing.assert_close(out, mha.out_proj(mha.v_proj(x[:, :1])).expand(2, 5, 12), **FP32)
    x3 = x.clone()
    x3[:, 3] += 1.0
    out3, _ = mha(x3, mask=first, need_weights=need_weights)
    torch.testing.assert_close(out3, out, **FP32)
    bug, bug3 = _buggy_mha_forward(mha, x, first), _buggy_mha_forward(mha, x3, first)
    assert not torch.allclose(bug3, bug, atol=1e-3)


# --------------------------------------------------------------------------------------------
# MultiHeadAttention against nn.MultiheadAttention
# --------------------------------------------------------------------------------------------


def torch_mha_from(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, batch_first=True)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref.eval()


MHA_CASES = ["self", "cross", "self+padding", "cross+padding", "causal", "causal+padding"]


@pytest.mark.parametrize("case", MHA_CASES)
def test_mha_equals_torch_multihead_attention(case):
    torch.manual_seed(20)
    b, tq, d, h = 2, 4, 16, 4
    cross = case.startswith("cross")
    tk = 6 if cross else tq
    ours = MultiHeadAttention(d, h).eval()
    ref = torch_mha_from(ours)
    x = torch.randn(b, tq, d)
    memory = torch.randn(b, tk, d) if cross else None
    lengths = torch.tensor([tk, tk - 2])
    keep = torch.arange(tk)[None, :] < lengths[:, None]  # (B, Tk) True at real keys
    mask = keep[:, None, None, :] if "padding" in case else None
    causal = "causal" in case
    kv = memory if cross else x
    ref_out, ref_w = ref(
        x,
        kv,
        kv,
        key_padding_mask=~keep if mask is not None else None,  # nn.MHA: True = ignore
        attn_mask=~causal_mask(tq) if causal else None,  # nn.MHA: True = not allowed
        need_weights=True,
        average_attn_weights=False,
    )
    out_w, weights = ours(x, memory, mask=mask, is_causal=causal, need_weights=True)
    out_fused, none = ours(x, memory, mask=mask, is_causal=causal, need_weights=False)
    assert none is None
    assert weights.shape == (b, h, tq, tk)
    torch.testing.assert_close(weights, ref_w, **FP32)
    torch.testing.assert_close(out_w, ref_out, **FP32)
    torch.testing.assert_close(out_fused, ref_out, **FP32)


@pytest.mark.parametrize("bias", [True, False])
def test_mha_projections_match_manual_computation(bias):
    torch.manual_seed(21)
    mha = MultiHeadAttention(8, 2, bias=bias)
    assert (mha.q_proj.bias is None) == (not bias)
    x, mem = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    out, w = mha(x, mem, need_weights=True)
    q, k, v = (
        split_heads(mha.q_proj(x), 2),
        split_heads(mha.k_proj(mem), 2),
        split_heads(mha.v_proj(mem), 2),
    )
    manual = mha.out_proj(merge_heads(torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v))
    torch.testing.assert_close(out, manual, **FP32)


def test_mha_constructor_errors():
    for n_heads in (3, 0, -2):
        with pytest.raises(
            ValueError, match=rf"d_model \(10\) must be divisible by n_heads \({n_heads}\)"
        ):
            MultiHeadAttention(10, n_heads)
    with pytest.raises(ValueError, match="unknown attention score"):
        MultiHeadAttention(8, 2, score="nope")
    # were built: a zero-width module, a float head count failing later in view(), a dropout
    # that only the fused kernel refused, in training, as "dropout > 0"
    for d_model, n_heads in ((0, 2), (8, 2.0)):
        with pytest.raises(ValueError, match="both whole numbers of at least 1"):
            MultiHeadAttention(d_model, n_heads)
    for p in (-1.0, 1.0, 2.0):
        with pytest.raises(ValueError, match=rf"attention dropout must be in \[0, 1\), got {p}"):
            MultiHeadAttention(8, 2, dropout=p)
        with pytest.raises(ValueError, match="attention dropout must be in"):
            scaled_dot_product_attention(*qkv((1,), 2, 2, 4, 4, seed=0), dropout_p=p)


def test_mha_eval_mode_ignores_attention_dropout():
    torch.manual_seed(22)
    mha = MultiHeadAttention(8, 2, dropout=0.5)
    x = torch.randn(2, 4, 8)
    mha.eval()
    a, _ = mha(x)
    b, _ = mha(x, need_weights=True)
    torch.testing.assert_close(a, b, **FP32)
    mha.train()
    torch.manual_seed(0)
    c, _ = mha(x)
    assert not torch.allclose(a, c)


# --------------------------------------------------------------------------------------------
# Fused path vs explicit path, and the KV cache
# --------------------------------------------------------------------------------------------


def _paths(mha, *args, **kwargs):
    """Run the same call on the fused and the explicit path (each with its own cache copy)."""
    results = []
    for need_weights in (False, True):
        kw = dict(kwargs)
        if "cache" in kw:
            kw["cache"] = KVCache(kw["cache"].k, kw["cache"].v)
        results.append(mha(*args, need_weights=need_weights, **kw)[0])
    return results


@pytest.mark.parametrize(
    "case",
    [
        "self",
        "causal",
        "cross+padding",
        "self+float",
        "causal+padding",
        "self+float16",
        "causal+float64",
    ],
)
def test_fused_and_explicit_paths_agree(case):
    """Every mask dtype of `MASK_DTYPES` on both paths: a float16 mask with float32 queries
    failed in PyTorch's fused kernel, which takes only the query's dtype."""
    torch.manual_seed(23)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    memory = torch.randn(2, 7, 16) if case.startswith("cross") else None
    tk = 7 if memory is not None else 5
    mask = None
    if "padding" in case:
        mask = padding_mask(torch.tensor([[1] * tk, [1] * (tk - 3) + [0] * 3]))
    if "float" in case:
        dtype = getattr(torch, case.split("+")[-1])  # "float": float32
        mask = torch.randn(1, 1, 5, tk, generator=gen(24)).to(dtype)
    fused, explicit = _paths(mha, x, memory, mask=mask, is_causal="causal" in case)
    torch.testing.assert_close(fused, explicit, **FP32)


def test_fused_and_explicit_paths_agree_with_cache():
    """Causal self-attention with Tq < Tk (cached prefix); cross-attention with a filled cache."""
    torch.manual_seed(25)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    memory = torch.randn(2, 5, 16)
    cache = KVCache()
    mha(x[:, :4], is_causal=True, cache=cache)
    assert cache.length == 4
    fused, explicit = _paths(mha, x[:, 4:], is_causal=True, cache=cache)  # Tq=2, Tk=6
    torch.testing.assert_close(fused, explicit, **FP32)
    full, _ = mha(x, is_causal=True)
    torch.testing.assert_close(fused, full[:, 4:], **FP32)  # right-aligned causal mask
    cross = KVCache()
    mha(x[:, :1], memory, cache=cross)
    fused, explicit = _paths(
        mha,
        x[:, 1:3],
        memory,
        cache=cross,
        mask=padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1] * 5])),
    )
    torch.testing.assert_close(fused, explicit, **FP32)


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_self_attention_cache_one_step_at_a_time_equals_full_causal(score, need_weights):
    torch.manual_seed(26)
    mha = MultiHeadAttention(16, 4, score=score).eval()
    x = torch.randn(2, 5, 16)
    full, full_w = mha(x, is_causal=True, need_weights=True)
    cache = KVCache()
    steps = []
    for t in range(5):
        out, w = mha(x[:, t : t + 1], is_causal=True, need_weights=need_weights, cache=cache)
        assert cache.length == t + 1
        assert cache.k.shape == (2, 4, t + 1, 4)
        if need_weights:
            torch.testing.assert_close(w[:, :, 0], full_w[:, :, t, : t + 1], **FP32)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, **FP32)


def test_cross_attention_cache_projects_memory_once():
    torch.manual_seed(27)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 3, 16)
    memory = torch.randn(2, 5, 16)
    cache = KVCache()
    first, _ = mha(x[:, :1], memory, cache=cache)
    k_first, v_first = cache.k, cache.v
    torch.testing.assert_close(k_first, split_heads(mha.k_proj(memory), 4), **FP32)
    torch.testing.assert_close(first, mha(x[:, :1], memory)[0], **FP32)
    # Later steps reuse the cached projections: a different memory has no effect.
    other_memory = torch.randn(2, 4, 16)
    for t in (1, 2):
        out, _ = mha(x[:, t : t + 1], other_memory, cache=cache)
        torch.testing.assert_close(out, mha(x[:, t : t + 1], memory)[0], **FP32)
        assert not torch.allclose(out, mha(x[:, t : t + 1], other_memory)[0])
        assert cache.k is k_first and cache.v is v_first
        assert cache.length == 5


def test_kv_cache_reorder():
    empty = KVCache()
    empty.reorder(torch.tensor([0, 0]))
    assert empty.k is None and empty.length == 0
    k, v = torch.randn(3, 2, 4, 5, generator=gen(28)), torch.randn(3, 2, 4, 6, generator=gen(29))
    cache = KVCache(k, v)
    index = torch.tensor([2, 0, 2])
    cache.reorder(index)
    assert torch.equal(cache.k, k[index]) and torch.equal(cache.v, v[index])
    assert cache.length == 4


def test_kv_cache_reorders_twice_then_appends_in_one_copy():
    """A reorder waits for the next append, which writes the kept rows and the new step once;
    two reorders in a row compose."""
    k, v = torch.randn(3, 2, 4, 5, generator=gen(31)), torch.randn(3, 2, 4, 6, generator=gen(32))
    cache = KVCache(k, v)
    first, second = torch.tensor([2, 0, 2]), torch.tensor([1, 1])
    cache.reorder(first)
    cache.reorder(second)
    new_k, new_v = torch.randn(2, 2, 1, 5), torch.randn(2, 2, 1, 6)
    all_k, all_v = cache.append(new_k, new_v)
    assert torch.equal(all_k, torch.cat([k[first][second], new_k], dim=-2))
    assert torch.equal(all_v, torch.cat([v[first][second], new_v], dim=-2))
    assert cache.k is all_k and cache.length == 5


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_cross_attention_rows_shared_by_a_group_of_queries(need_weights):
    """Memory with B/g rows (beam search: one per sentence) gives what the same memory repeated
    for each of the g query rows gives, cached or not, weights included."""
    torch.manual_seed(33)
    mha = MultiHeadAttention(16, 4).eval()
    memory = torch.randn(2, 5, 16)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1] * 5]))
    x = torch.randn(6, 2, 16)  # 3 beams for each of the 2 sentences, 2 steps
    repeated = dict(mask=mask.repeat_interleave(3, dim=0), need_weights=need_weights)
    want, want_w = mha(x, memory.repeat_interleave(3, dim=0), **repeated)
    got, got_w = mha(x, memory, mask=mask, need_weights=need_weights)
    torch.testing.assert_close(got, want, **FP32)
    if need_weights:
        torch.testing.assert_close(got_w, want_w, **FP32)
    cache = KVCache()
    steps = [mha(x[:, t : t + 1], memory, mask=mask, cache=cache)[0] for t in range(2)]
    assert cache.k.size(0) == 2  # one row per sentence, not per beam
    torch.testing.assert_close(torch.cat(steps, dim=1), want, **FP32)
    with pytest.raises(ValueError, match="5 query rows cannot share 2 memory rows"):
        mha(x[:5], memory, mask=mask)
    empty, _ = mha(x[:0], memory[:0], mask=mask[:0], need_weights=need_weights)
    assert empty.shape == (0, 2, 16)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_a_mask_of_another_batch_than_the_keys_is_refused(need_weights):
    """A padding mask of 2 sentences with the memory of 1 broadcast the rows into a batch of 4
    on the explicit path (and failed deep in PyTorch on the fused one): both now say which
    batches differ. A mask of one row still broadcasts over every row."""
    torch.manual_seed(34)
    mha = MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(2, 4, 16), torch.randn(1, 5, 16)
    two = padding_mask(torch.tensor([[5, 6, 7, 0, 0], [5, 6, 7, 8, 9]]))
    with pytest.raises(ValueError, match="mask batch 2 does not match the batch of the keys, 1"):
        mha(x, memory, mask=two, need_weights=need_weights)
    with pytest.raises(ValueError, match="mask batch 2 does not match the batch of the keys, 3"):
        mha(torch.randn(3, 4, 16), mask=two[:, :, :, :4], need_weights=need_weights)
    out, _ = mha(x, memory, mask=two[:1], need_weights=need_weights)
    assert out.shape == (2, 4, 16)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_a_mask_per_query_step_on_shared_memory_rows_is_refused(need_weights):
    """Memory rows that serve g query rows each (a sentence's beams) fold the g rows' queries
    into one row: a causal mask, or one per query step, was laid over the folded queries, a
    wrong mask for every row but the first, without an error. A padding mask of one row per
    key row stays right: equal to giving one memory row per query row."""
    torch.manual_seed(35)
    mha = MultiHeadAttention(8, 2).eval()
    x, memory = torch.randn(4, 2, 8), torch.randn(2, 4, 8)
    per_step = torch.ones(2, 1, 2, 4, dtype=torch.bool)
    for given in ({"is_causal": True}, {"mask": per_step}):
        with pytest.raises(ValueError, match="memory rows shared by 2 query rows take a mask"):
            mha(x, memory, need_weights=need_weights, **given)
    keys = padding_mask(torch.tensor([[5, 6, 0, 0], [5, 6, 7, 8]]))
    shared, _ = mha(x, memory, mask=keys, need_weights=need_weights)
    copied, _ = mha(x, memory.repeat_interleave(2, 0), mask=keys.repeat_interleave(2, 0))
    torch.testing.assert_close(shared, copied, **FP32)


def test_a_mask_that_fits_neither_queries_nor_keys_is_refused():
    """A (B, 1, 1, 3) mask for 5 keys failed deep in torch, naming tensor sizes a and b."""
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=r"mask \(2, 1, 1, 3\) does not fit 5 queries and 5 keys"):
        mha(torch.randn(2, 5, 8), mask=torch.ones(2, 1, 1, 3, dtype=torch.bool))


def test_a_mask_that_would_enlarge_the_scores_is_refused():
    """A (7, ...) mask on (2, 2, 3, 3) scores came back as a 5-D output and weights, and a
    mask of another head count failed in torch, naming tensor sizes a and b."""
    q = k = v = torch.randn(2, 2, 3, 4)
    with pytest.raises(ValueError, match=r"mask \(7, 2, 2, 3, 3\) does not broadcast to the"):
        scaled_dot_product_attention(q, k, v, torch.ones(7, 2, 2, 3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"mask \(3, 1, 1\) does not broadcast to the scores"):
        scaled_dot_product_attention(q, k, v, torch.ones(3, 1, 1, dtype=torch.bool))
    out, _ = scaled_dot_product_attention(q, k, v, torch.ones(3, 3, dtype=torch.bool))
    assert out.shape == (2, 2, 3, 4)  # a (Tq, Tk) mask still broadcasts
    mha = MultiHeadAttention(8, 2)
    for need_weights in (False, True):
        with pytest.raises(ValueError, match=r"mask \(2, 3, 3, 3\): its second size is the"):
            mha(torch.randn(2, 3, 8), mask=torch.ones(2, 3, 3, 3, dtype=torch.bool),
                need_weights=need_weights)  # fmt: skip
    out, _ = mha(torch.randn(2, 3, 8), mask=torch.ones(2, 2, 3, 3, dtype=torch.bool))
    assert out.shape == (2, 3, 8)  # one mask per head


def test_the_shape_helpers_name_a_wrong_rank() -> None:
    """1-D ids in padding_mask, a 2-D x in split_heads and a 3-D one in merge_heads failed as
    IndexError or "not enough values to unpack"; a bool head count built one head."""
    with pytest.raises(ValueError, match=r"padding_mask: ids \(3,\): give \(B, T\)"):
        padding_mask(torch.tensor([1, 2, 0]))
    with pytest.raises(ValueError, match=r"split_heads: x \(5, 8\): give \(B, T, D\)"):
        split_heads(torch.randn(5, 8), 2)
    with pytest.raises(ValueError, match=r"merge_heads: x \(2, 5, 8\): give \(B, H, T, Dh\)"):
        merge_heads(torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match="must be divisible by n_heads"):
        MultiHeadAttention(8, True)


def test_kv_cache_reorder_then_continue_equals_reordered_full_pass():
    """Beam-search style: decode 2 steps, reorder rows, decode a third: equal to a full pass
    over the reordered rows."""
    torch.manual_seed(30)
    mha = MultiHeadAttention(8, 2).eval()
    x = torch.randn(3, 3, 8)
    cache = KVCache()
    for t in range(2):
        mha(x[:, t : t + 1], is_causal=True, cache=cache)
    index = torch.tensor([2, 0, 2])
    cache.reorder(index)
    out, _ = mha(x[index, 2:3], is_causal=True, cache=cache)
    full, _ = mha(x[index], is_causal=True)
    torch.testing.assert_close(out, full[:, 2:3], **FP32)


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
def test_a_key_mask_without_head_and_query_axes_is_refused(need_weights):
    """(B, Tk) = (3, 4) with B == Tq would broadcast as a (Tq, Tk) mask: each query would get
    another sentence's padding. MultiHeadAttention takes 4-D masks only."""
    mha = MultiHeadAttention(8, 2)
    x, memory = torch.randn(3, 3, 8), torch.randn(3, 4, 8)
    ids = torch.tensor([[5, 6, 7, 8], [5, 6, 0, 0], [5, 0, 0, 0]])
    with pytest.raises(ValueError, match=r"mask torch.bool \(3, 4\): give a 4-D bool or float"):
        mha(x, memory, mask=ids != 0, need_weights=need_weights)
    out, weights = mha(x, memory, mask=padding_mask(ids), need_weights=True)
    assert (weights[1, :, :, 2:] == 0).all() and (weights[0] > 0).all()


def test_an_integer_mask_is_refused_not_added_to_the_scores():
    """0/1 integers added to the scores would mask nothing; bool and float masks work."""
    q = k = v = torch.randn(1, 3, 4)
    keep = torch.tensor([[1, 1, 0]] * 3)  # (Tq, Tk): the last key is padding
    with pytest.raises(TypeError, match="mask is torch.int64: give a bool mask or an additive"):
        scaled_dot_product_attention(q, k, v, keep)
    _, weights = scaled_dot_product_attention(q, k, v, keep.bool())
    assert (weights[..., 2] == 0).all()
    mha = MultiHeadAttention(8, 2)
    ids = torch.tensor([[5, 6, 0]])
    for is_causal in (False, True):  # causal: combined with the causal mask before it is used
        for need_weights in (False, True):
            with pytest.raises(ValueError, match=r"mask torch.int64 \(1, 1, 1, 3\): give a 4-D"):
                mha(torch.randn(1, 3, 8), mask=padding_mask(ids).long(), is_causal=is_causal,
                    need_weights=need_weights)  # fmt: skip


@pytest.mark.parametrize(
    "shape", [(3, 8), (2, 3, 4), (1, 2, 3, 8)], ids=["unbatched", "width", "4-D"]
)
def test_inputs_of_another_shape_are_named_not_a_matmul_error(shape):
    """A learner's (T, D) sentence, or inputs of another width, fail where the shape is read,
    naming what MultiHeadAttention takes (it said "not enough values to unpack" or "mat1 and
    mat2 shapes cannot be multiplied")."""
    mha = MultiHeadAttention(8, 2)
    with pytest.raises(ValueError, match=rf"x \({', '.join(map(str, shape))}\): give \(B, T, 8\)"):
        mha(torch.randn(shape))
    assert mha(torch.randn(2, 3, 8))[0].shape == (2, 3, 8)
    # The memory of cross-attention too ("mat1 and mat2 shapes", "not enough values to unpack")
    with pytest.raises(ValueError, match=rf"memory \({', '.join(map(str, shape))}\): give"):
        mha(torch.randn(2, 3, 8), torch.randn(shape))
    assert mha(torch.randn(2, 3, 8), torch.randn(2, 5, 8))[0].shape == (2, 3, 8)
