"""Other attention score functions, registered in `minitx.attention.SCORES` beside the
scaled dot product: each maps (q (..., Tq, Dk), k (..., Tk, Dk)) to scores (..., Tq, Tk).
Masking, softmax and dropout are `scaled_dot_product_attention`'s job, not the score's; any
score but "scaled_dot" runs that explicit path (no fused kernel)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from minitx.attention import SCORES


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

    Memory grows as B·H·Tq·Tk·Dk, so it suits study, not long sequences. The parameters
    are shared by all heads of a layer.
    """

    def __init__(self, *, d_head: int) -> None:
        super().__init__()
        self.w_q = nn.Linear(d_head, d_head, bias=False)
        self.w_k = nn.Linear(d_head, d_head, bias=True)
        self.v = nn.Linear(d_head, 1, bias=False)

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        hidden = torch.tanh(
            self.w_q(q).unsqueeze(-2) + self.w_k(k).unsqueeze(-3)
        )  # (..., Tq, Tk, Dk)
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
