"""What the heatmaps and the viewer share: kind labels, the PNG resolution, and checks that
an attention map fits its tokens."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from minitx.maps import KINDS

DEFAULT_DPI: int = 110
"""Resolution of saved PNG heatmaps."""

KIND_LABELS: dict[str, str] = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}
"""Human-readable name of each attention kind."""


def check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds as a tuple; ValueError when empty or not a subset of ``KINDS``."""
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown attention kind(s) {unknown}; expected a subset of {KINDS}")
    if not kinds:
        raise ValueError(f"no attention kinds selected; expected a subset of {KINDS}")
    return kinds


def check_map(
    weights: torch.Tensor, query_tokens: Sequence[str], key_tokens: Sequence[str], what: str
) -> None:
    """Raise ValueError unless ``weights`` is a finite, non-empty (H, Tq, Tk) map."""
    if not isinstance(weights, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(weights).__name__}")
    if weights.dim() != 3:
        raise ValueError(
            f"{what}: expected weights of shape (H, Tq, Tk), got {tuple(weights.shape)}"
        )
    n_heads, tq, tk = weights.shape
    if tq != len(query_tokens) or tk != len(key_tokens):
        raise ValueError(
            f"{what}: weights have shape (H={n_heads}, Tq={tq}, Tk={tk}) but there are "
            f"{len(query_tokens)} query tokens and {len(key_tokens)} key tokens"
        )
    if n_heads == 0 or tq == 0 or tk == 0:
        raise ValueError(f"{what}: empty attention map of shape {tuple(weights.shape)}")
    if not bool(torch.isfinite(weights).all()):
        raise ValueError(f"{what}: attention weights contain NaN or infinite values")
