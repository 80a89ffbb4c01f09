"""Positional encodings, by name: how the model learns where each token stands.

The registry, the interface and the encodings besides the sinusoidal one of the paper
(`minitx.model.SinusoidalPositionalEncoding`): none, learned, rotary. Two hooks exist, and
an encoding uses one or both:
- `forward(x, offset)` adds position information to the embeddings (B, T, D)
  (sinusoidal, learned);
- `rotate(x, offset)` turns queries and keys of every self-attention (B, H, T, Dh) by a
  position-dependent angle (rotary, Su et al., 2021); `MultiHeadAttention` calls it when the
  model hands the encoding to its layers (`uses_qk_hook`).

Register a new one with `@POSITIONAL_ENCODINGS.register("name")` on a `PositionalEncoding`
subclass; `TransformerConfig(positional="name")` then accepts it (docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from minitx.registry import Registry


class PositionalEncoding(nn.Module):
    """Base class: no position information at all (the `none` encoding).

    Args:
        d_model: model width D.
        n_heads: attention heads H (rotary encodings work per head, Dh = D / H).
        max_len: longest sequence covered.
    """

    uses_qk_hook: bool = False
    """True when `rotate` must be applied to the queries and keys of self-attention."""

    def __init__(self, *, d_model: int, n_heads: int, max_len: int) -> None:
        super().__init__()
        self.max_len = max_len

    @classmethod
    def check_config(cls, *, d_model: int, n_heads: int) -> None:
        """Raise a `ValueError` when this encoding cannot serve these sizes (default: any)."""

    def _check_length(self, end: int) -> None:
        if end > self.max_len:
            raise ValueError(
                f"sequence of length {end} exceeds max_len={self.max_len}; "
                "raise max_positions in the model config"
            )

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Embeddings x (B, T, D) of positions offset .. offset+T-1, with positions added."""
        self._check_length(offset + x.size(1))
        return x

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        """Queries or keys x (B, H, T, Dh) of positions offset .. offset+T-1 (identity here)."""
        return x


POSITIONAL_ENCODINGS: Registry[type[PositionalEncoding]] = Registry(
    "positional encoding", base=PositionalEncoding, functions=False
)
"""Positional encodings by name; built as `cls(d_model=..., n_heads=..., max_len=...)`."""

POSITIONAL_ENCODINGS.register("none")(PositionalEncoding)


@POSITIONAL_ENCODINGS.register("learned")
class LearnedPositionalEncoding(PositionalEncoding):
    """A learned embedding per absolute position (Gehring et al., 2017)."""

    def __init__(self, *, d_model: int, n_heads: int = 1, max_len: int = 1024) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, max_len=max_len)
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=d_model**-0.5)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(1)
        self._check_length(end)
        positions = torch.arange(offset, end, device=x.device)
        return x + self.embedding(positions).to(x.dtype)


@POSITIONAL_ENCODINGS.register("rotary")
class RotaryPositionalEncoding(PositionalEncoding):
    """Rotary position embedding, RoPE (Su et al., 2021, "RoFormer").

    Each pair of channels (i, i + Dh/2) of a query or key at position p is rotated by the
    angle p · θ_i with θ_i = 10000^(-2i/Dh). A query at position m and a key at position n
    then score (R_m q)·(R_n k) = q·R_(n-m) k: attention sees only relative positions.
    Nothing is added to the embeddings.
    """

    uses_qk_hook = True

    def __init__(self, *, d_model: int, n_heads: int, max_len: int = 1024) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, max_len=max_len)
        self.check_config(d_model=d_model, n_heads=n_heads)
        d_head = d_model // n_heads
        inv_freq = 10000.0 ** (-torch.arange(0, d_head, 2, dtype=torch.float32) / d_head)  # (Dh/2,)
        angles = torch.arange(max_len, dtype=torch.float32)[:, None] * inv_freq  # (L, Dh/2)
        angles = torch.cat([angles, angles], dim=-1)  # (L, Dh): channel i and i + Dh/2 share θ_i
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    @classmethod
    def check_config(cls, *, d_model: int, n_heads: int) -> None:
        if (d_model // n_heads) % 2:
            raise ValueError(
                f"rotary positions need an even head width d_model / n_heads, "
                f"got {d_model} / {n_heads} = {d_model // n_heads}"
            )

    def rotate(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(-2)
        self._check_length(end)
        cos = self.cos[offset:end].to(x.dtype)  # (T, Dh)
        sin = self.sin[offset:end].to(x.dtype)
        half = x.size(-1) // 2
        rotated_half = torch.cat([-x[..., half:], x[..., :half]], dim=-1)  # (B, H, T, Dh)
        return x * cos + rotated_half * sin


def make_positional_encoding(
    kind: str, d_model: int, max_len: int, *, n_heads: int = 1
) -> PositionalEncoding:
    """Build the positional encoding registered as `kind`."""
    return POSITIONAL_ENCODINGS[kind](d_model=d_model, n_heads=n_heads, max_len=max_len)
