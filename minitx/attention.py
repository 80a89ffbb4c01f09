"""The attention core: masks, score functions, scaled dot-product attention, heads, MHA.

Everything here is explicit and readable on purpose; it is what minitx is about. The one
concession to speed: when the caller does not need the attention weights, the score is the
standard scaled dot product and attention is soft, `MultiHeadAttention` hands the work to
PyTorch's fused kernel (`torch.nn.functional.scaled_dot_product_attention`), which the tests
prove equal to ours.

Conventions (docs/ARCHITECTURE.md, "Contracts"):
- Boolean masks mean **True = may attend** (as in `F.scaled_dot_product_attention`). Float masks
  are additive (0 = attend, -inf = blocked). Masks broadcast against (B, H, Tq, Tk).
- A query row whose keys are all masked gets all-zero weights and a zero output, never NaN.
- Hard attention (inference only): with `attention_mode` "hard-argmax" or "hard-sample" each
  row of weights is replaced, after the softmax and the mask, by a one-hot row at one allowed
  key (its most probable one, or one drawn from the row); see `hard_weights`.
- Shapes: B batch, H heads, Tq / Tk query / key lengths, D model width, Dh = D / H.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minitx.errors import ConfigError
from minitx.registry import Registry

ATTENTION_MODES = ("soft", "hard-argmax", "hard-sample")
"""How attention uses its weights: "soft" the softmax itself (training, and the default);
"hard-argmax" a one-hot row at each query's most probable key; "hard-sample" a one-hot row at a
key drawn from the query's weights. Hard modes are for inference: no gradient reaches the choice."""

SCORES: Registry[Callable[..., nn.Module]] = Registry("attention score")
"""Score functions by name. An entry is a module class built as `cls(d_head=...)` whose
`forward(q (..., Tq, Dk), k (..., Tk, Dk))` returns scores (..., Tq, Tk)."""

# ------------------------------------------------------------------------------------------- Masks


def causal_mask(tq: int, tk: int | None = None, *, device: torch.device | None = None) -> Tensor:
    """Boolean causal mask, right-aligned: query i may attend key j iff j <= i + (Tk - Tq).

    Right alignment means the queries are taken to be the *last* Tq positions of the Tk keys,
    which is what cached (incremental) decoding needs: one new query sees every cached key.
    With Tq == Tk it is the usual lower-triangular mask.

    Returns:
        (Tq, Tk) bool tensor, True = may attend.
    """
    tk = tq if tk is None else tk
    if tk < tq:
        raise ValueError(
            f"causal_mask: Tk ({tk}) must be >= Tq ({tq}); queries are a suffix of keys"
        )
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


def padding_mask(ids: Tensor, pad_id: int = 0) -> Tensor:
    """Key padding mask from token ids: True at real tokens.

    Args:
        ids: (B, T) token ids.

    Returns:
        (B, 1, 1, T) bool mask that broadcasts over heads and queries.
    """
    return (ids != pad_id)[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Combine masks so that a key is allowed only if every mask allows it.

    Boolean masks are AND-ed; if any mask is a float (additive) mask the result is additive
    (booleans are turned into 0 / -inf first). `None` entries are ignored.
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    out = None
    for m in present:
        m = _to_additive(m)
        out = m if out is None else out + m
    return out


def _to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    if mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(
        ~mask, float("-inf")
    )


# --------------------- Score functions: (q (..., Tq, Dk), k (..., Tk, Dk)) -> scores (..., Tq, Tk)


@SCORES.register("scaled_dot")
class ScaledDotScore(nn.Module):
    """Vaswani et al. (2017): (q / sqrt(Dk)) kᵀ. q is scaled *before* the matmul.

    `MultiHeadAttention` hands this score to PyTorch's fused kernel when no weights are asked for.
    """

    def __init__(self, *, d_head: int | None = None) -> None:
        super().__init__()

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)


@SCORES.register("dot")
class DotScore(nn.Module):
    """Luong et al. (2015) "dot": q kᵀ, unscaled."""

    def __init__(self, *, d_head: int | None = None) -> None:
        super().__init__()

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return q @ k.transpose(-2, -1)


@SCORES.register("additive")
class AdditiveScore(nn.Module):
    """Bahdanau et al. (2015): vᵀ tanh(W_q q + W_k k).

    Memory grows as B·H·Tq·Tk·d_attn, so it suits study, not long sequences. The parameters
    are shared by all heads of a layer.
    """

    def __init__(self, *, d_head: int, d_attn: int | None = None) -> None:
        super().__init__()
        d_attn = d_attn or d_head
        self.w_q = nn.Linear(d_head, d_attn, bias=False)
        self.w_k = nn.Linear(d_head, d_attn, bias=True)
        self.v = nn.Linear(d_attn, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        hidden = torch.tanh(
            self.w_q(q).unsqueeze(-2) + self.w_k(k).unsqueeze(-3)
        )  # (..., Tq, Tk, A)
        return self.v(hidden).squeeze(-1)  # (..., Tq, Tk)


@SCORES.register("bilinear")
class BilinearScore(nn.Module):
    """Luong et al. (2015) "general": q W kᵀ with a learned (Dk, Dk) matrix W.

    W starts as I / sqrt(Dk), so an untrained bilinear score equals the scaled dot product.
    """

    def __init__(self, *, d_head: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.eye(d_head) * d_head**-0.5)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ self.weight.to(q.dtype)) @ k.transpose(-2, -1)


def make_score(name: str, d_head: int) -> nn.Module:
    """Build the score function registered as `name` in `SCORES` for heads of width `d_head`."""
    return SCORES[name](d_head=d_head)


# --------------------------------------------------------------------------------------- Attention


def check_attention_mode(mode: str) -> None:
    """Raise `ConfigError` unless `mode` is one of `ATTENTION_MODES`."""
    if mode not in ATTENTION_MODES:
        raise ConfigError(
            f"unknown attention mode {mode!r}; choose one of {', '.join(ATTENTION_MODES)}"
        )


def hard_weights(weights: Tensor, mode: str, generator: torch.Generator | None = None) -> Tensor:
    """Hard attention: each row of `weights` becomes a one-hot row at one of its keys.

    "hard-argmax" picks the most probable key of each row, "hard-sample" draws a key with the
    row's weights as probabilities (from `generator`, so a seeded generator repeats its draws);
    "soft" returns `weights` unchanged. Masked keys have weight 0, so they are never picked,
    and a row that is all zeros (every key masked) stays all zeros.

    Args:
        weights: (..., Tq, Tk) attention weights: rows summing to 1, or all zeros.
        mode: one of `ATTENTION_MODES`.
        generator: random source of "hard-sample", on the device of `weights`.

    Returns:
        (..., Tq, Tk) one-hot (or all-zero) rows, in the dtype of `weights`.
    """
    check_attention_mode(mode)
    if mode == "soft":
        return weights
    alive = weights.sum(dim=-1, keepdim=True) > 0  # (..., Tq, 1); False: every key masked
    if mode == "hard-argmax":
        choice = weights.argmax(dim=-1, keepdim=True)  # (..., Tq, 1)
    else:  # "hard-sample": one draw per row; a dead row draws from dummy ones, zeroed below
        rows = weights.masked_fill(~alive, 1.0).reshape(-1, weights.size(-1))  # (N, Tk)
        choice = torch.multinomial(rows, 1, generator=generator)  # (N, 1)
        choice = choice.view(*weights.shape[:-1], 1)  # (..., Tq, 1)
    one_hot = torch.zeros_like(weights).scatter_(-1, choice, 1.0)  # (..., Tq, Tk)
    return one_hot.masked_fill(~alive, 0.0)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    score: nn.Module | None = None,
    *,
    mode: str = "soft",
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention, written out: softmax(score(q, k) + mask) v.

    Args:
        q: (..., Tq, Dk) queries.
        k: (..., Tk, Dk) keys.
        v: (..., Tk, Dv) values; Dv may differ from Dk.
        mask: bool (True = may attend) or additive float mask broadcastable to (..., Tq, Tk).
        dropout_p: dropout on the attention weights (pass 0.0 in eval mode).
        score: a score module (see `make_score`); default `ScaledDotScore`.
        mode: one of `ATTENTION_MODES`; a hard mode replaces each row of the softmax by a
            one-hot row (`hard_weights`), after the mask, so only allowed keys are chosen.
        generator: random source of mode "hard-sample" (None: torch's global one).

    Returns:
        output (..., Tq, Dv) and weights (..., Tq, Tk). The weights are the ones applied to
        `v`, *before* dropout: the softmax over the key axis ("soft") or its one-hot rows (a
        hard mode); rows whose keys are all masked are all zeros.
    """
    scores = ScaledDotScore()(q, k) if score is None else score(q, k)  # (..., Tq, Tk)
    scores = scores.float()  # softmax in fp32, also under autocast
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask
    # A row with no visible key would give softmax(-inf, ..., -inf) = NaN: give it zeros instead.
    dead = torch.isneginf(scores).all(dim=-1, keepdim=True)  # (..., Tq, 1)
    weights = torch.softmax(scores.masked_fill(dead, 0.0), dim=-1).masked_fill(dead, 0.0)
    if mode != "soft":
        weights = hard_weights(weights, mode, generator)  # (..., Tq, Tk) one-hot rows
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return attn.to(v.dtype) @ v, weights


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, D) -> (B, H, T, D/H): view as (B, T, H, D/H), then transpose.

    Viewing straight to (B, H, T, D/H) would mix positions across heads.
    """
    b, t, d = x.shape
    if d % n_heads:
        raise ValueError(f"split_heads: width {d} is not divisible by n_heads={n_heads}")
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, Dh) -> (B, T, H*Dh): the exact inverse of `split_heads`."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


@dataclass
class KVCache:
    """Keys and values of one attention layer kept across decoding steps.

    Self-attention appends the new step's keys/values; cross-attention fills it once with the
    projected encoder output. Tensors are (B, H, T, Dh).
    """

    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.k is None else self.k.size(-2)

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (e.g. surviving beams): `index` is (B',) into the batch axis."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with named q/k/v/out projections (Vaswani et al., 2017, §3.2.2).

    Args:
        d_model: model width D.
        n_heads: number of heads H; D must be divisible by H.
        dropout: dropout on the attention weights during training.
        bias: whether the projections have biases.
        score: score function name (see `SCORES`).
        positions: an optional position hook applied to queries and keys of
            *self*-attention after the heads are split, e.g. rotary encodings: any module with
            `rotate(x (B, H, T, Dh), offset: int) -> (B, H, T, Dh)`, where `offset` is the
            position of x's first step. Not used by cross-attention (source and target
            positions do not share a frame).

    Attributes:
        attention_mode: one of `ATTENTION_MODES`, "soft" unless switched for inference (see
            `minitx.model.Transformer.attention_mode`); a hard mode always runs the explicit
            path. A plain attribute: it is no parameter or buffer, so no checkpoint holds it.
        generator: the random source of "hard-sample" (None: torch's global one).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        dropout: float = 0.0,
        bias: bool = True,
        score: str = "scaled_dot",
        positions: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.score = make_score(score, self.d_head)
        self.positions = positions
        self.attention_mode = "soft"
        self.generator: torch.Generator | None = None

    def _project(self, x: Tensor, *projections: nn.Linear) -> tuple[Tensor, ...]:
        """Several projections of one input in one matmul: (B, T, D) -> n x (B, T, D)."""
        if len(projections) == 1:
            return (projections[0](x),)
        weight = torch.cat([p.weight for p in projections])
        bias = None if projections[0].bias is None else torch.cat([p.bias for p in projections])
        return F.linear(x, weight, bias).chunk(len(projections), dim=-1)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from `x` to itself (self-attention) or to `memory` (cross-attention).

        Args:
            x: (B, Tq, D) queries (and keys/values for self-attention).
            memory: (B, Tk, D) keys/values source for cross-attention; None for self-attention.
            mask: bool/additive mask broadcastable to (B, H, Tq, Tk), e.g. `padding_mask(src)`.
            is_causal: add a right-aligned causal mask (self-attention in the decoder).
            need_weights: also return the (B, H, Tq, Tk) weights (uses the explicit path);
                in a hard mode these are the one-hot rows that were applied.
            cache: incremental decoding state. Self-attention appends this step's keys and
                values; cross-attention projects `memory` once and reuses it afterwards.

        Returns:
            output (B, Tq, D) and weights (B, H, Tq, Tk) or None.
        """
        if memory is None:  # self-attention: one fused projection for q, k, v
            q, k, v = self._project(x, self.q_proj, self.k_proj, self.v_proj)
            q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, T, Dh)
            if self.positions is not None:  # new steps start after the cached ones
                offset = cache.length if cache is not None else 0
                q, k = self.positions.rotate(q, offset), self.positions.rotate(k, offset)
            if cache is not None:
                if cache.k is not None:
                    k = torch.cat([cache.k, k], dim=-2)  # (B, H, Tcache + Tq, Dh)
                    v = torch.cat([cache.v, v], dim=-2)
                cache.k, cache.v = k, v
        else:
            q = split_heads(self.q_proj(x), self.n_heads)
            if cache is not None and cache.k is not None:
                k, v = cache.k, cache.v
            else:
                k, v = self._project(memory, self.k_proj, self.v_proj)
                k, v = split_heads(k, self.n_heads), split_heads(v, self.n_heads)
                if cache is not None:
                    cache.k, cache.v = k, v

        tq, tk = q.size(-2), k.size(-2)
        dropout_p = self.dropout if self.training else 0.0
        fused = self.attention_mode == "soft" and isinstance(self.score, ScaledDotScore)
        if fused and not need_weights:
            # Fused kernel. Its is_causal is top-left aligned, so use it only when Tq == Tk.
            if is_causal and mask is None and tq == tk:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:
                if is_causal and tq > 1:
                    mask = combine_masks(mask, causal_mask(tq, tk, device=q.device))
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            weights = None
        else:
            if is_causal and tq > 1:
                mask = combine_masks(mask, causal_mask(tq, tk, device=q.device))
            out, weights = scaled_dot_product_attention(
                q,
                k,
                v,
                mask,
                dropout_p,
                self.score,
                mode=self.attention_mode,
                generator=self.generator,
            )
        return self.out_proj(merge_heads(out)), weights  # (B, Tq, D)


__all__ = [
    "ATTENTION_MODES",
    "SCORES",
    "AdditiveScore",
    "BilinearScore",
    "DotScore",
    "KVCache",
    "MultiHeadAttention",
    "ScaledDotScore",
    "causal_mask",
    "check_attention_mode",
    "combine_masks",
    "hard_weights",
    "make_score",
    "merge_heads",
    "padding_mask",
    "scaled_dot_product_attention",
    "split_heads",
]
