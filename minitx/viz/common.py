"""What the heatmaps and the viewer share: kind and attribution labels, the PNG resolution,
and checks that an attention map (or an attribution matrix) fits its tokens."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence

import torch

from minitx.maps import KINDS, AttentionMaps

DEFAULT_DPI: int = 110
"""Resolution of saved PNG heatmaps."""
MIN_DPI: int = 20
"""Below about 6 dpi matplotlib's font renderer fails on the labels (FreeType's "invalid
ppem"); a figure under 20 dpi has labels a few pixels high, too small to read."""
MAX_DPI: int = 600
"""Twice print quality: at 20,000 a long sentence's figure is an image of billions of pixels,
which ends in a MemoryError after minutes."""

KIND_LABELS: dict[str, str] = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}
"""Human-readable name of each attention kind."""

ATTRIBUTION_LABELS: dict[str, str] = {
    "saliency": "saliency (gradient)",
    "ixg": "input \u00d7 gradient",
    "ig": "integrated gradients",
}
"""Human-readable name of each attribution method of `minitx.attribution.METHODS` (viz
imports only the maps; a method not listed here is shown by its name)."""

ATTRIBUTION_KIND_PREFIX = "attribution:"
"""The viewer's kind of an attribution method: ``"attribution:" + method``."""


def attribution_label(method: str) -> str:
    """The display name of an attribution method."""
    return f"attribution: {ATTRIBUTION_LABELS.get(method, method)}"


def check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds as a tuple.

    Raises:
        TypeError: `kinds` is one string (its letters would be read as the kinds).
        ValueError: `kinds` is empty, not a subset of ``KINDS``, or names a kind twice (the
            training's maps would average its entropy in twice).
    """
    if isinstance(kinds, str):
        raise TypeError(f"give a list of attention kinds, e.g. [{kinds!r}], not one string")
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown attention kind(s) {unknown}; expected a subset of {KINDS}")
    if not kinds:
        raise ValueError(f"no attention kinds selected; expected a subset of {KINDS}")
    twice = sorted({k for k in kinds if kinds.count(k) > 1})
    if twice:
        raise ValueError(f"{', '.join(twice)} given more than once; name each kind once")
    return kinds


def check_dpi(dpi: float) -> float:
    """`dpi` if a PNG can be drawn at it: a number from `MIN_DPI` to `MAX_DPI` (matplotlib
    takes a float as well as an int).

    Raises:
        ValueError: any other value.
    """
    number = isinstance(dpi, numbers.Real) and not isinstance(dpi, bool)
    if not number or not MIN_DPI <= dpi <= MAX_DPI:  # nan fails the range too
        raise ValueError(f"dpi must be a number from {MIN_DPI} to {MAX_DPI}, got {dpi!r}")
    return dpi


def check_attributions(
    attributions: Mapping[str, torch.Tensor], maps: AttentionMaps
) -> dict[str, torch.Tensor]:
    """The attribution matrices as a dict, each checked against the cross-attention axes of
    `maps` (rows: the predicted pieces, columns: the source pieces).

    Raises:
        ValueError: a matrix that is not (T, S), is not finite, or maps without
            cross-attention to compare with.
    """
    queries, keys = maps.axes("cross")
    if attributions and not maps.cross_attentions:
        raise ValueError("attributions are shown beside cross-attention, and these maps have none")
    checked = {}
    for method, matrix in attributions.items():
        if not isinstance(matrix, torch.Tensor) or matrix.dim() != 2:
            shape = tuple(matrix.shape) if isinstance(matrix, torch.Tensor) else type(matrix)
            raise ValueError(f"attribution {method}: expected a (T, S) tensor, got {shape}")
        check_map(matrix.unsqueeze(0), queries, keys, f"attribution {method}")
        checked[method] = matrix
    return checked


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
