"""Transformer building blocks: feed-forward (and its activation registry), encoder and
decoder layers.

Pre-LN (default) normalises the input of each sub-layer, x + f(LN(x)), and needs a final
LayerNorm after the stack; post-LN is the original paper's LN(x + f(x)).

The feed-forward sub-layer treats every position alone, so a layer given `rows` (the real,
non-pad positions of the batch, `real_rows`) runs it on those rows only: padded positions
cost nothing there and keep their input unchanged. Nothing downstream depends on them:
encoder self- and cross-attention mask padded source positions as keys, and target padding
is on the right, behind the causal mask, where the loss skips it (the logits `decode`
returns at padded positions are meaningless, with or without packing).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from minitx.attention import KVCache, MultiHeadAttention
from minitx.registry import Registry

ACTIVATIONS: Registry[Callable[[], nn.Module]] = Registry("activation")
"""Feed-forward activations by name; an entry is built with no arguments."""
ACTIVATIONS.register("relu")(nn.ReLU)
ACTIVATIONS.register("gelu")(nn.GELU)
ACTIVATIONS.register("silu")(nn.SiLU)


def real_rows(ids: Tensor, pad_id: int, multiple: int = 64) -> Tensor | None:
    """Indices of the non-pad positions of `ids` (B, T) in its flattened (B*T) order, topped
    up with padded positions to a multiple of `multiple` rows (few distinct shapes: bf16
    kernels are built per shape), or None when that would leave out no position.

    Raises:
        ValueError: `multiple` < 1.
    """
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    real = (ids != pad_id).flatten()  # (B*T,)
    n_real = int(real.sum())  # the only host sync
    n_rows = min(real.numel(), -(-n_real // multiple) * multiple)
    if n_rows == real.numel():
        return None
    # Real positions first, then padded ones, each group in order; each position once.
    order = torch.argsort((~real).to(torch.uint8), stable=True)  # (B*T,)
    return order[:n_rows]  # (N,)


def on_rows(fn: Callable[[Tensor], Tensor], x: Tensor, rows: Tensor | None) -> Tensor:
    """`fn` applied to the positions `rows` of x only (all of them where rows is None).

    Args:
        fn: a position-wise map, (N, D) -> (N, D): each row's output depends on that row alone.
        x: (B, T, D) states.
        rows: (N,) indices into the flattened (B*T) positions, from `real_rows`.

    Returns:
        (B, T, D): fn's output at `rows`, x unchanged elsewhere.
    """
    if rows is None:
        return fn(x)
    flat = x.flatten(0, 1)  # (B*T, D)
    packed = fn(flat.index_select(0, rows))  # (N, D)
    return flat.index_copy(0, rows, packed.to(flat.dtype)).view_as(x)


class FeedForward(nn.Module):
    """Position-wise feed-forward: W2 · dropout(act(W1 x)), D -> d_ff -> D."""

    def __init__(
        self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0
    ) -> None:
        super().__init__()
        ACTIVATIONS.check(activation)
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.activation(self.w1(x))))  # (B, T, D)


class _SubLayer(nn.Module):
    """Residual connection around one sub-layer, with pre- or post-LayerNorm and dropout."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def pre(self, x: Tensor) -> Tensor:
        """What the sub-layer sees: LN(x) for pre-LN, x for post-LN."""
        return self.norm(x) if self.norm_first else x

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        """Add the sub-layer output y to the residual stream x."""
        out = x + self.dropout(y)
        return out if self.norm_first else self.norm(out)

    def around(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """The whole residual sub-layer: post(x, sublayer(pre(x))), (..., D) -> (..., D)."""
        return self.post(x, sublayer(self.pre(x)))


class _FeedForwardSubLayer:
    """Mixin: the residual feed-forward sub-layer of a layer with `ff_block` and
    `feed_forward`, a position-wise map (..., D) -> (..., D) for `on_rows`."""

    ff_block: _SubLayer
    feed_forward: FeedForward

    def _feed_forward_sublayer(self, x: Tensor) -> Tensor:
        return self.ff_block.around(x, self.feed_forward)


class EncoderLayer(_FeedForwardSubLayer, nn.Module):
    """Self-attention then feed-forward, each wrapped in a residual sub-layer."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = True,
        score: str = "scaled_dot",
        positions: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, n_heads, dropout=attention_dropout, score=score, positions=positions
        )
        self.feed_forward = FeedForward(
            d_model, d_ff, activation=activation, dropout=activation_dropout
        )
        self.attn_block = _SubLayer(d_model, dropout, norm_first)
        self.ff_block = _SubLayer(d_model, dropout, norm_first)

    def forward(
        self,
        x: Tensor,
        src_mask: Tensor | None,
        need_weights: bool = False,
        *,
        rows: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D) and weights (B, H, S, S) or None;
        `rows` (N,): the real positions, the only ones the feed-forward sub-layer computes."""
        y, weights = self.self_attn(
            self.attn_block.pre(x), mask=src_mask, need_weights=need_weights
        )
        x = self.attn_block.post(x, y)
        return on_rows(self._feed_forward_sublayer, x, rows), weights


class DecoderLayer(_FeedForwardSubLayer, nn.Module):
    """Causal self-attention, cross-attention to the encoder output, then feed-forward."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = True,
        score: str = "scaled_dot",
        positions: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            d_model, n_heads, dropout=attention_dropout, score=score, positions=positions
        )
        self.cross_attn = MultiHeadAttention(
            d_model, n_heads, dropout=attention_dropout, score=score
        )
        self.feed_forward = FeedForward(
            d_model, d_ff, activation=activation, dropout=activation_dropout
        )
        self.self_block = _SubLayer(d_model, dropout, norm_first)
        self.cross_block = _SubLayer(d_model, dropout, norm_first)
        self.ff_block = _SubLayer(d_model, dropout, norm_first)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        *,
        need_weights: bool = False,
        cache: tuple[KVCache, KVCache] | None = None,
        rows: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode one layer.

        Args:
            x: (B, T, D) target states (with a cache: only the new positions).
            memory: (B, S, D) encoder output.
            src_mask: (B, 1, 1, S) source padding mask.
            need_weights: return the self- and cross-attention weights.
            cache: (self-attention cache, cross-attention cache) for incremental decoding.
            rows: (N,) the real positions of x (`real_rows`), the only ones the feed-forward
                sub-layer computes; None = all.

        Returns:
            (B, T, D) states, self weights (B, H, T, Tcache+T) or None, cross weights
            (B, H, T, S) or None.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)
        y, self_w = self.self_attn(
            self.self_block.pre(x), is_causal=True, need_weights=need_weights, cache=self_cache
        )
        x = self.self_block.post(x, y)
        y, cross_w = self.cross_attn(
            self.cross_block.pre(x),
            memory,
            mask=src_mask,
            need_weights=need_weights,
            cache=cross_cache,
        )
        x = self.cross_block.post(x, y)
        return on_rows(self._feed_forward_sublayer, x, rows), self_w, cross_w
