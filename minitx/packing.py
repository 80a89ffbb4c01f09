"""Row packing, a speed switch: the feed-forward sub-layers on the real positions only.

The feed-forward sub-layer treats every position alone, so a layer given `rows` (the real,
non-pad positions of the batch, `real_rows`) runs it on those rows only (`on_rows`): padded
positions cost nothing there and keep their input unchanged. Nothing downstream depends on
them: encoder self- and cross-attention mask padded source positions as keys, and target
padding is on the right, behind the causal mask, where the loss skips it (the logits
`decode` returns at padded positions are meaningless, with or without packing). The outputs
at real positions are the same up to rounding (other matrix shapes, other summation order).

`Transformer.pack_rows` switches it (`PACK_ROWS` by default, 0 = off; `model.pack_rows` in
the training configs). docs/guides/speed.md has the measurements.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

PACK_ROWS = 64
"""`Transformer.pack_rows` by default: feed-forward sub-layers on the real positions, topped up
to a multiple of 64 rows (5% more target tokens/s in fp32 on Multi30k's batches, docs: Speed)."""


def real_rows(ids: Tensor, pad_id: int, multiple: int) -> Tensor | None:
    """Indices of the non-pad positions of `ids` (B, T) in its flattened (B*T) order, topped
    up with padded positions to a multiple of `multiple` rows (few distinct shapes: bf16
    kernels are built per shape), or None when that would leave out no position. `multiple`
    is at least 1: `TranslationModule` refuses a negative `pack_rows`, and 0 never calls this.
    """
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
