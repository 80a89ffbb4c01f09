"""Attention, written out: masks, the scaled dot-product score, attention itself, heads and
multi-head attention (Vaswani et al., 2017, §3.2). Read `minitx.model` next.

Conventions (docs/ARCHITECTURE.md, "Contracts"): boolean masks mean **True = may attend** (as
in `F.scaled_dot_product_attention`), float masks are additive (0 = attend, -inf = blocked),
and masks broadcast against (B, H, Tq, Tk). A query row whose keys are all masked gets
all-zero weights and a zero output, never NaN. Shapes: B batch, H heads, Tq / Tk query / key
lengths, D model width, Dh = D / H. Beside this file: the other score functions
(`minitx.scores`), hard attention (`minitx.hard_attention`), the cache (`minitx.kv_cache`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from minitx.kv_cache import KVCache, fold_rows, memory_group, unfold_rows
from minitx.registry import Registry

SCORES: Registry[Callable[..., nn.Module]] = Registry(
    "attention score", base=nn.Module, functions=False, built_with=("d_head",)
)
"""Score functions by name. An entry is a module class built as `cls(d_head=...)` whose
`forward(q (..., Tq, Dk), k (..., Tk, Dk))` returns scores (..., Tq, Tk). "scaled_dot" is
below; "dot", "additive" and "bilinear" are in `minitx.scores`."""

# ------------------------------------------------------------------------------------------- Masks

MASK_DTYPES = (torch.bool, torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""Mask dtypes: bool (True = may attend) or additive float (0 = attend, -inf = blocked)."""


def check_mask_dtype(mask: Tensor) -> None:
    """Refuse a mask of any dtype but `MASK_DTYPES`: 0/1 integers added to the scores would
    mask nothing.

    Raises:
        TypeError: `mask` is neither bool nor floating point.
    """
    if mask.dtype not in MASK_DTYPES:
        raise TypeError(f"mask is {mask.dtype}: give a bool mask or an additive float one")


def check_mask_fits(mask: Tensor, scores: tuple[int, ...]) -> None:
    """Refuse a mask that does not broadcast to the `scores` shape (..., Tq, Tk), or that
    broadcasts them to a larger one: its extra dimensions would come back in the output.

    Raises:
        ValueError: naming both shapes.
    """
    try:
        fits = torch.broadcast_shapes(mask.shape, scores) == scores
    except RuntimeError:  # sizes that do not broadcast
        fits = False
    if not fits:
        raise ValueError(
            f"mask {tuple(mask.shape)} does not broadcast to the scores {scores}: give "
            "(..., Tq or 1, Tk or 1) with no more dimensions than the scores"
        )


def check_dropout(p: float) -> None:
    """Refuse an attention dropout probability outside [0, 1).

    Raises:
        ValueError: `p` below 0, or 1 and above (every weight dropped).
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"attention dropout must be in [0, 1), got {p}")


def causal_mask(tq: int, tk: int | None = None, *, device: torch.device | None = None) -> Tensor:
    """Boolean causal mask, right-aligned: query i may attend key j iff j <= i + (Tk - Tq).

    Right alignment means the queries are taken to be the *last* Tq positions of the Tk keys,
    which is what cached (incremental) decoding needs: one new query sees every cached key.
    With Tq == Tk it is the usual lower-triangular mask.

    Returns:
        (Tq, Tk) bool tensor, True = may attend.
    """
    tk = tq if tk is None else tk
    if not 0 <= tq <= tk:
        raise ValueError(
            f"causal_mask: Tk ({tk}) must be >= Tq ({tq}) >= 0; queries are a suffix of keys"
        )
    return torch.ones(tq, tk, dtype=torch.bool, device=device).tril(diagonal=tk - tq)


def padding_mask(ids: Tensor, pad_id: int = 0) -> Tensor:
    """Key padding mask from token ids (B, T): True at real tokens, (B, 1, 1, T) so that it
    broadcasts over heads and queries.

    Raises:
        ValueError: `ids` is not (B, T) (one sentence goes in as ids[None]).
    """
    if ids.dim() != 2:
        raise ValueError(f"padding_mask: ids {tuple(ids.shape)}: give (B, T), e.g. ids[None]")
    return (ids != pad_id)[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Combine masks so that a key is allowed only if every mask allows it.

    Boolean masks are AND-ed; if any mask is a float (additive) mask the result is additive
    (booleans are turned into 0 / -inf first). `None` entries are ignored.

    Raises:
        TypeError: a mask neither bool nor floating point (`check_mask_dtype`).
    """
    present = [m for m in masks if m is not None]
    if not present:
        return None
    for m in present:  # 0/1 integers would become an additive mask that masks nothing
        check_mask_dtype(m)
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    out = None
    for m in present:
        if m.dtype == torch.bool:  # True -> 0, False -> -inf (float32)
            m = torch.where(m, 0.0, float("-inf"))
        out = m if out is None else out + m
    return out


# ------------------------------------------------------------------------------------- Attention


@SCORES.register("scaled_dot")
class ScaledDotScore(nn.Module):
    """Vaswani et al. (2017): (q / sqrt(Dk)) kᵀ, (..., Tq, Dk), (..., Tk, Dk) -> (..., Tq, Tk).
    q is scaled *before* the matmul. `MultiHeadAttention` hands this score to PyTorch's fused
    kernel when no weights are asked for."""

    def __init__(self, *, d_head: int | None = None) -> None:
        super().__init__()

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q * q.size(-1) ** -0.5) @ k.transpose(-2, -1)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout_p: float = 0.0,
    score: nn.Module | None = None,
    *,
    reweight: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention, written out: softmax(score(q, k) + mask) v.

    Args:
        q: (..., Tq, Dk) queries.
        k: (..., Tk, Dk) keys.
        v: (..., Tk, Dv) values; Dv may differ from Dk.
        mask: bool (True = may attend) or additive float mask broadcastable to (..., Tq, Tk).
        dropout_p: dropout on the weights, at every call (`MultiHeadAttention` gives 0 in eval).
        score: a score module (an entry of `SCORES`, built); default `ScaledDotScore`.
        reweight: a map of the weights (..., Tq, Tk) applied after the softmax and the mask,
            e.g. hard attention at inference (`minitx.hard_attention.HardAttention`).

    Returns:
        output (..., Tq, Dv) and the weights (..., Tq, Tk): the softmax over the key axis (or
        its `reweight`), all zeros where every key is masked; `v` gets them after dropout.

    Raises:
        TypeError, ValueError: a mask of another dtype, or one that does not broadcast to
            the scores (`check_mask_dtype`, `check_mask_fits`).
    """
    scores = ScaledDotScore()(q, k) if score is None else score(q, k)  # (..., Tq, Tk)
    want = (*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.size(-2), k.size(-2))
    if scores.shape != want:  # a new score's slip would broadcast, or fail far from its cause
        raise ValueError(f"score {type(score).__name__} gave {tuple(scores.shape)}, not {want}")
    # softmax in fp32 at least, also under autocast; float64 stays float64
    scores = scores.to(torch.promote_types(scores.dtype, torch.float32))
    dead = None  # (..., Tq or 1, 1): True where a query may attend to no key
    if mask is not None:
        check_mask_dtype(mask)
        check_mask_fits(mask, want)
        if mask.dtype == torch.bool:  # True = may attend -> 0, False -> -inf
            mask = torch.zeros(mask.shape, device=mask.device).masked_fill(~mask, float("-inf"))
        # Such a row would give softmax(-inf, ...) = NaN: zeros instead, read off the small mask.
        dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
        scores = scores + mask.masked_fill(dead, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if dead is not None:
        weights = weights.masked_fill(dead, 0.0)
    if reweight is not None:
        weights = reweight(weights)  # (..., Tq, Tk)
    check_dropout(dropout_p)  # a negative p was read as none
    attn = F.dropout(weights, p=dropout_p) if dropout_p > 0.0 else weights
    return attn.to(v.dtype) @ v, weights


# ----------------------------------------------------------------------------------------- Heads


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, D) -> (B, H, T, D/H): view as (B, T, H, D/H), then transpose.

    Viewing straight to (B, H, T, D/H) would mix positions across heads.

    Raises:
        ValueError: `x` is not 3-D, or `n_heads` does not divide its width.
    """
    if x.dim() != 3:
        raise ValueError(f"split_heads: x {tuple(x.shape)}: give (B, T, D)")
    b, t, d = x.shape
    if n_heads < 1 or d % n_heads:  # n_heads=0 failed as a ZeroDivisionError
        raise ValueError(f"split_heads: n_heads={n_heads} must be >= 1 and divide the width {d}")
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, Dh) -> (B, T, H*Dh): the exact inverse of `split_heads`.

    Raises:
        ValueError: `x` is not 4-D.
    """
    if x.dim() != 4:
        raise ValueError(f"merge_heads: x {tuple(x.shape)}: give (B, H, T, Dh)")
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)


def check_mask_steps(
    mask: Tensor | None, tq: int, tk: int, is_causal: bool = False, group: int = 1
) -> None:
    """Refuse a mask whose last two sizes are neither 1 nor (Tq, Tk) (else a shape error deep
    in torch), and, where `group` query rows share one memory row (g > 1: the g rows' queries
    are folded into one row), a mask per query step or `is_causal`: they would be laid over
    the folded queries, a wrong mask for every row but the first.

    Raises:
        ValueError: naming the shapes and what to give instead.
    """
    if mask is not None and (mask.size(-2) not in (1, tq) or mask.size(-1) not in (1, tk)):
        raise ValueError(
            f"mask {tuple(mask.shape)} does not fit {tq} queries and {tk} keys: give (..., "
            f"{tq} or 1, {tk} or 1)"
        )
    if group > 1 and ((is_causal and tq > 1) or (mask is not None and mask.size(-2) > 1)):
        raise ValueError(
            f"memory rows shared by {group} query rows take a mask of one row per key row, "
            "(B/g, 1, 1, Tk), and no is_causal; give one memory row per query row for a mask "
            "per query step"
        )


class MultiHeadAttention(nn.Module):
    """Multi-head attention with named q/k/v/out projections (Vaswani et al., 2017, §3.2.2).

    Args:
        d_model: model width D.
        n_heads: number of heads H; D must be divisible by H.
        dropout: dropout on the attention weights during training.
        bias: whether the projections have biases.
        score: score function name (see `SCORES`).
        positions: a hook on queries and keys of *self*-attention (rotary encodings):
            `rotate(x (B, H, T, Dh), offset)`, offset = the position of x's first step. Not
            for cross-attention: source and target positions do not share a frame.

    Attributes:
        reweight: None, or the `reweight` of `scaled_dot_product_attention`: hard attention
            at inference (`minitx.hard_attention.attention_mode`). Not in any checkpoint.
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
        whole = all(  # a bool is an int: MultiHeadAttention(8, True) had one head
            isinstance(n, int) and not isinstance(n, bool) and n >= 1 for n in (d_model, n_heads)
        )
        if not whole or d_model % n_heads:  # n_heads 0: a ZeroDivisionError; -2: d_head -4
            raise ValueError(
                f"d_model ({d_model}) must be divisible by n_heads ({n_heads}), both whole "
                "numbers of at least 1"
            )
        check_dropout(dropout)  # else refused in training only, by the fused kernel, as "> 0"
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.score = SCORES[score](d_head=self.d_head)
        self.positions = positions
        self.reweight: Callable[[Tensor], Tensor] | None = None

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
            memory: (B, Tk, D) keys/values source for cross-attention, None for self-attention;
                or (B/g, Tk, D): each row serves g consecutive rows of `x` (a sentence's beams),
                with a mask of one row per key row, (B/g, 1, 1, Tk), and no `is_causal`.
            mask: bool/additive 4-D mask broadcastable to (B, H, Tq, Tk), with a batch of 1 or
                the keys' rows: `padding_mask(src)` is (B, 1, 1, Tk), a (Tq, Tk) mask goes in
                as mask[None, None].
            is_causal: add a right-aligned causal mask (self-attention in the decoder).
            need_weights: also return the (B, H, Tq, Tk) weights (uses the explicit path);
                under a `reweight` these are the reweighted rows that were applied.
            cache: incremental decoding state. Self-attention appends this step's keys and
                values; cross-attention projects `memory` once and reuses it afterwards.

        Returns:
            output (B, Tq, D) and weights (B, H, Tq, Tk) or None.
        """
        for name, t in (("x", x), ("memory", memory)):  # else a shape error deep in a matmul
            if t is not None and (t.dim() != 3 or t.size(-1) != self.d_model):
                raise ValueError(f"{name} {tuple(t.shape)}: give (B, T, {self.d_model}) rows")
        if mask is not None and (mask.dim() != 4 or mask.dtype not in MASK_DTYPES):
            # (B, Tk) would pass as (Tq, Tk) where B == Tq; 0/1 integers would mask nothing
            raise ValueError(
                f"mask {mask.dtype} {tuple(mask.shape)}: give a 4-D bool or float mask"
            )
        if mask is not None and mask.size(1) not in (1, self.n_heads):
            raise ValueError(  # else torch's size error, naming no mask
                f"mask {tuple(mask.shape)}: its second size is the heads': give 1 or {self.n_heads}"
            )
        if memory is None:  # self-attention: one fused projection for q, k, v
            q, k, v = self._project(x, self.q_proj, self.k_proj, self.v_proj)
            q, k, v = (split_heads(t, self.n_heads) for t in (q, k, v))  # (B, H, T, Dh)
            if self.positions is not None:  # new steps start after the cached ones
                offset = cache.length if cache is not None else 0
                q, k = self.positions.rotate(q, offset), self.positions.rotate(k, offset)
            if cache is not None:
                k, v = cache.append(k, v)  # (B, H, Tcache + Tq, Dh)
        else:
            q = split_heads(self.q_proj(x), self.n_heads)
            if cache is not None and cache.k is not None:  # memory projected at the first step
                k, v = cache.k, cache.v
            else:
                k, v = self._project(memory, self.k_proj, self.v_proj)
                k, v = split_heads(k, self.n_heads), split_heads(v, self.n_heads)
                if cache is not None:
                    cache.k, cache.v = k, v

        group = memory_group(q.size(0), k.size(0), mask)  # g beams, 1 memory row; checks mask
        check_mask_steps(mask, q.size(-2), k.size(-2), is_causal, group)
        q = fold_rows(q, group)  # (B, H, Tq, Dh) -> (B/g, H, g*Tq, Dh); g = 1: unchanged
        tq, tk = q.size(-2), k.size(-2)
        dropout_p = self.dropout if self.training else 0.0
        fused = self.reweight is None and isinstance(self.score, ScaledDotScore)
        if fused and not need_weights:
            # Speed: PyTorch's fused kernel computes the same (tests/test_attention.py) without
            # materialising the weights. Its is_causal is top-left aligned: only for Tq == Tk.
            if is_causal and mask is None and tq == tk:
                out = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
            else:
                if is_causal and tq > 1:
                    mask = combine_masks(mask, causal_mask(tq, tk, device=q.device))
                if mask is not None and mask.is_floating_point():  # the kernel takes q's dtype
                    mask = mask.to(q.dtype)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
            return self.out_proj(merge_heads(unfold_rows(out, group))), None

        if is_causal and tq > 1:
            mask = combine_masks(mask, causal_mask(tq, tk, device=q.device))
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, dropout_p, self.score, reweight=self.reweight
        )  # (B, H, Tq, Dh), (B, H, Tq, Tk)
        out, weights = unfold_rows(out, group), unfold_rows(weights, group)
        return self.out_proj(merge_heads(out)), weights  # (B, Tq, D)
