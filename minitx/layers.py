"""Transformer building blocks: positional encodings, feed-forward, encoder and decoder layers.

Pre-LN (default) normalises the input of each sub-layer, x + f(LN(x)), and needs a final
LayerNorm after the stack; post-LN is the original paper's LN(x + f(x)).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from minitx.attention import KVCache, MultiHeadAttention


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids (Vaswani et al., 2017, §3.5): PE[p, 2i] = sin(p / 10000^(2i/D)), cos for 2i+1."""

    def __init__(self, d_model: int, max_len: int = 1024) -> None:
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
        inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * inv_freq)
        pe[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
        self.register_buffer("pe", pe, persistent=False)  # derived, so not saved in checkpoints

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Add encodings for positions offset .. offset+T-1 to x (B, T, D)."""
        end = offset + x.size(1)
        if end > self.pe.size(0):
            raise ValueError(f"sequence of length {end} exceeds max_len={self.pe.size(0)}; raise max_positions in the model config")
        return x + self.pe[offset:end].to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    """A learned embedding per absolute position (Gehring et al., 2017)."""

    def __init__(self, d_model: int, max_len: int = 1024) -> None:
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Add encodings for positions offset .. offset+T-1 to x (B, T, D)."""
        end = offset + x.size(1)
        if end > self.embedding.num_embeddings:
            raise ValueError(f"sequence of length {end} exceeds max_len={self.embedding.num_embeddings}; raise max_positions in the model config")
        positions = torch.arange(offset, end, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


def make_positional_encoding(kind: str, d_model: int, max_len: int) -> nn.Module:
    """"sinusoidal" or "learned"."""
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_len)
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_len)
    raise ValueError(f"unknown positional encoding {kind!r}; choose 'sinusoidal' or 'learned'")


class FeedForward(nn.Module):
    """Position-wise feed-forward: W2 · dropout(act(W1 x)), D -> d_ff -> D."""

    def __init__(self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0) -> None:
        super().__init__()
        if activation not in ("relu", "gelu"):
            raise ValueError(f"unknown activation {activation!r}; choose 'relu' or 'gelu'")
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.activation = nn.ReLU() if activation == "relu" else nn.GELU()
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


class EncoderLayer(nn.Module):
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
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=attention_dropout, score=score)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=activation_dropout)
        self.attn_block = _SubLayer(d_model, dropout, norm_first)
        self.ff_block = _SubLayer(d_model, dropout, norm_first)

    def forward(self, x: Tensor, src_mask: Tensor | None, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D) and weights (B, H, S, S) or None."""
        y, weights = self.self_attn(self.attn_block.pre(x), mask=src_mask, need_weights=need_weights)
        x = self.attn_block.post(x, y)
        x = self.ff_block.post(x, self.feed_forward(self.ff_block.pre(x)))
        return x, weights


class DecoderLayer(nn.Module):
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
    ) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=attention_dropout, score=score)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=attention_dropout, score=score)
        self.feed_forward = FeedForward(d_model, d_ff, activation=activation, dropout=activation_dropout)
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
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Decode one layer.

        Args:
            x: (B, T, D) target states (with a cache: only the new positions).
            memory: (B, S, D) encoder output.
            src_mask: (B, 1, 1, S) source padding mask.
            need_weights: return the self- and cross-attention weights.
            cache: (self-attention cache, cross-attention cache) for incremental decoding.

        Returns:
            (B, T, D) states, self weights (B, H, T, Tcache+T) or None, cross weights
            (B, H, T, S) or None.
        """
        self_cache, cross_cache = cache if cache is not None else (None, None)
        y, self_w = self.self_attn(self.self_block.pre(x), is_causal=True, need_weights=need_weights, cache=self_cache)
        x = self.self_block.post(x, y)
        y, cross_w = self.cross_attn(self.cross_block.pre(x), memory, mask=src_mask, need_weights=need_weights, cache=cross_cache)
        x = self.cross_block.post(x, y)
        x = self.ff_block.post(x, self.feed_forward(self.ff_block.pre(x)))
        return x, self_w, cross_w
