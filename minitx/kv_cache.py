"""Key/value caches for incremental decoding.

Decoding one token at a time would recompute every earlier position's keys and values at
each step. A cache keeps them instead: decoder self-attention appends the new step's keys
and values; cross-attention projects the encoder output once and reuses it. Tensors are
(B, H, T, Dh). `MultiHeadAttention` reads and fills a `KVCache`; `Transformer.new_cache`
returns a `DecoderCache`, one pair per decoder layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class KVCache:
    """Keys and values of one attention layer kept across decoding steps, (B, H, T, Dh)."""

    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self.k is None else self.k.size(-2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's keys and values (B, H, T, Dh) after the cached ones; return all of
        them, (B, H, Tcache + T, Dh)."""
        if self.k is not None:
            k = torch.cat([self.k, k], dim=-2)
            v = torch.cat([self.v, v], dim=-2)
        self.k, self.v = k, v
        return k, v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (e.g. surviving beams): `index` is (B',) into the batch axis."""
        if self.k is not None:
            self.k = self.k.index_select(0, index)
            self.v = self.v.index_select(0, index)


class DecoderCache:
    """Per-layer KV caches for incremental decoding: (self-attention, cross-attention) pairs."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [(KVCache(), KVCache()) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Target positions decoded so far (the position offset of the next step)."""
        return self.layers[0][0].length

    def reorder(self, index: Tensor, *, cross: bool = True) -> None:
        """Keep batch rows `index` (B',) in every cache, e.g. after a beam-search step.

        `cross=False` leaves the cross-attention caches as they are: right when `index` only
        permutes rows whose encoder outputs are equal (the beams of one sentence).
        """
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            if cross:
                cross_cache.reorder(index)
