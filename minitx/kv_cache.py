"""Key/value caches for incremental decoding.

Decoding one token at a time would recompute every earlier position's keys and values at
each step. A cache keeps them instead: decoder self-attention appends the new step's keys
and values; cross-attention projects the encoder output once and reuses it. Tensors are
(B, H, T, Dh). `MultiHeadAttention` reads and fills a `KVCache`; `Transformer.new_cache`
returns a `DecoderCache`, one pair per decoder layer.

Beam search decodes g beams per sentence but keeps one row of encoder output (and of the
cross-attention cache) per sentence: `fold_rows` turns the g beams' queries into g queries
of that one row, so the keys and values are neither copied g times nor read g times.
"""

from __future__ import annotations

import torch
from torch import Tensor


class KVCache:
    """Keys and values of one attention layer kept across decoding steps, (B, H, T, Dh).

    `reorder` is lazy: it only records which rows to keep, and the next `append` copies the
    kept rows straight into the grown tensors. Beam search reorders every step, so this copies
    the cache once per step instead of twice (an `index_select`, then a `cat`). Reading `k` or
    `v` applies a pending reorder.
    """

    def __init__(self, k: Tensor | None = None, v: Tensor | None = None) -> None:
        self._k, self._v = k, v
        self._rows: Tensor | None = None  # (B',) rows still to select, or None

    def _settle(self) -> None:
        if self._rows is not None and self._k is not None:
            self._k = self._k.index_select(0, self._rows)
            self._v = self._v.index_select(0, self._rows)
        self._rows = None

    @property
    def k(self) -> Tensor | None:
        """Cached keys (B, H, T, Dh), or None before the first step."""
        self._settle()
        return self._k

    @k.setter
    def k(self, k: Tensor | None) -> None:
        self._settle()
        self._k = k

    @property
    def v(self) -> Tensor | None:
        """Cached values (B, H, T, Dv), or None before the first step."""
        self._settle()
        return self._v

    @v.setter
    def v(self, v: Tensor | None) -> None:
        self._settle()
        self._v = v

    @property
    def length(self) -> int:
        """Number of cached positions."""
        return 0 if self._k is None else self._k.size(-2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add this step's keys and values (B, H, T, Dh) after the cached ones; return all of
        them, (B, H, Tcache + T, Dh)."""
        if self._k is None:  # no reorder is ever pending on an empty cache
            self._k, self._v = k, v
        else:
            self._k = _extend(self._k, self._rows, k)
            self._v = _extend(self._v, self._rows, v)
            self._rows = None
        return self._k, self._v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (e.g. surviving beams): `index` is (B',) into the batch axis."""
        if self._k is not None:
            self._rows = index if self._rows is None else self._rows.index_select(0, index)


def _extend(cached: Tensor, rows: Tensor | None, new: Tensor) -> Tensor:
    """cat([cached[rows], new], dim=-2), the kept rows written once: (B, H, T, Dh), (B',) or
    None for every row, (B', H, T', Dh)."""
    if rows is None:
        return torch.cat([cached, new], dim=-2)
    grad = torch.is_grad_enabled() and (cached.requires_grad or new.requires_grad)
    if grad or cached.dtype != new.dtype:  # out= has no gradient, and cat promotes dtypes
        return torch.cat([cached.index_select(0, rows), new], dim=-2)
    _, h, t, d = cached.shape
    out = cached.new_empty(rows.size(0), h, t + new.size(-2), d)
    torch.index_select(cached, 0, rows, out=out[:, :, :t])
    out[:, :, t:] = new
    return out


class DecoderCache:
    """Per-layer KV caches for incremental decoding: (self-attention, cross-attention) pairs."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [(KVCache(), KVCache()) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Target positions decoded so far (the position offset of the next step)."""
        return self.layers[0][0].length

    def reorder(self, index: Tensor, memory_index: Tensor | None) -> None:
        """Keep batch rows `index` (B',) in the self-attention caches and rows `memory_index`
        (N',) in the cross-attention ones, e.g. after a beam-search step. `memory_index` None
        leaves the cross-attention caches as they are (no sentence left the batch)."""
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            if memory_index is not None:
                cross_cache.reorder(memory_index)


def check_one_row_each(src: Tensor, tgt_in: Tensor) -> None:
    """Refuse a teacher-forced pass whose `tgt_in` (B, T) has not one row per row of `src`
    (B, S): `memory_group` would let its rows share source rows, as beams do, silently."""
    if src.dim() == tgt_in.dim() == 2 and src.size(0) != tgt_in.size(0):
        shapes = f"src {tuple(src.shape)}, tgt_in {tuple(tgt_in.shape)}"
        raise ValueError(f"{shapes}: give one row of tgt_in per row of src")


def memory_group(queries: int, memory: int, mask: Tensor | None = None) -> int:
    """How many consecutive query rows share one memory row: g where beam search keeps one
    memory row for a sentence's g beams, else 1 (as many rows, or an empty batch).

    Raises:
        ValueError: when `queries` is not a multiple of `memory`, or when `mask` has neither
            one row nor one per memory row (it would broadcast the rows into a wrong batch).
    """
    if mask is not None and mask.size(0) not in (1, memory):
        raise ValueError(
            f"mask batch {mask.size(0)} does not match the batch of the keys, {memory}: give "
            "a mask with one row per key row (padding_mask of the ids the keys come from)"
        )
    if queries == memory or not queries or not memory:
        return 1
    if queries % memory:
        raise ValueError(
            f"{queries} query rows cannot share {memory} memory rows: give one memory row per "
            "query row, or one per run of g query rows (the beams of a sentence)"
        )
    return queries // memory


def fold_rows(x: Tensor, group: int) -> Tensor:
    """(B, H, T, Dh) -> (B/g, H, g*T, Dh): each run of `group` consecutive rows becomes the
    queries of one row (the beams of a sentence); `group` 1 returns `x` itself."""
    if group == 1:
        return x
    b, h, t, d = x.shape
    return x.view(b // group, group, h, t, d).transpose(1, 2).reshape(b // group, h, group * t, d)


def unfold_rows(x: Tensor, group: int) -> Tensor:
    """(B/g, H, g*T, Dh) -> (B, H, T, Dh): the exact inverse of `fold_rows`."""
    if group == 1:
        return x
    n, h, gt, d = x.shape
    return x.view(n, h, group, gt // group, d).transpose(1, 2).reshape(n * group, h, -1, d)
