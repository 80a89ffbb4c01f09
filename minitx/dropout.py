"""Dropout (Srivastava et al., 2014), as `nn.Dropout`, with a cheaper mask on a CPU.

The model's dropouts are `nn.Dropout`'s: in training each element is zeroed with
probability p and the survivors are scaled by 1 / (1 - p); in eval mode it is the identity.
Only the way the mask is drawn differs, and only on a CPU.

Why: torch draws a CPU dropout mask element by element (`bernoulli_`), a measurable share of
a bf16 training step (docs/guides/speed.md). Here one draw of the generator (`random_` on
int32: 31 random bits) gives two 16-bit lanes, each deciding one element against its own
threshold: the mask costs about a third.
The keep probability is 1 - p with p rounded to a multiple of 2^-15 (0.1 -> 0.100006).
On a GPU (fast counter-based generators) `F.dropout` runs as it is.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def lane_thresholds(p: float) -> Tensor:
    """(2,) int16 thresholds, in the order a 32-bit draw holds its two 16-bit lanes in memory:
    the low lane is uniform on [-2^15, 2^15) and keeps when >= -2^15 + round(p * 2^16); the
    high lane (31 random bits: its sign bit is 0) is uniform on [0, 2^15) and keeps when
    >= round(p * 2^15). Both drop with probability p to within 2^-16."""
    low = min(-(2**15) + round(p * 2**16), 2**15 - 1)  # p near 1: keep 2^-16, not overflow
    high = min(round(p * 2**15), 2**15 - 1)
    order = [low, high] if sys.byteorder == "little" else [high, low]
    return torch.tensor(order, dtype=torch.int16)


def dropout_mask(shape: torch.Size, p: float) -> Tensor:
    """A bool keep-mask of `shape`, True with probability 1 - p, from the default generator:
    two elements per 32-bit draw (see the module docstring)."""
    n = shape.numel()
    draws = torch.empty((n + 1) // 2, dtype=torch.int32).random_()  # 31 random bits each
    lanes = draws.view(torch.int16).view(-1, 2)  # (ceil(n/2), 2): the two halves of a draw
    keep = (lanes >= lane_thresholds(p)).view(-1)
    return (keep if keep.numel() == n else keep[:n]).view(shape)


class Dropout(nn.Dropout):
    """`nn.Dropout(p)` whose CPU mask is drawn two elements per random number (see above)."""

    def forward(self, x: Tensor) -> Tensor:
        """x (...) -> (...): x itself in eval mode or at p = 0, else x * mask / (1 - p)."""
        if not self.training or self.p == 0.0:
            return x
        if not x.is_cpu or self.p >= 1.0 or self.inplace:
            return F.dropout(x, self.p, True, self.inplace)
        # The mask in x's dtype: a bool operand makes both products (forward and backward)
        # take a slow mixed-type path; 0 and 1 are exact, so the result is the same.
        return x * dropout_mask(x.shape, self.p).to(x.dtype) * (1.0 / (1.0 - self.p))
