"""Attention heatmaps with matplotlib (Agg): one figure per kind and layer, a panel per head
plus their average, subword tokens on the axes, colour scale 0-1; and one figure per
attribution method, its (T, S) matrix beside the head-averaged cross-attention of every layer.

Figures are plain `matplotlib.figure.Figure` objects with an Agg canvas attached: pyplot (and
its global figure registry) is never used, so nothing is kept alive after a figure goes out
of scope.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib import rcParams
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties, findfont, get_font
from matplotlib.textpath import TextToPath

from minitx.maps import KINDS, AttentionMaps
from minitx.viz.common import (
    ATTRIBUTION_LABELS,
    DEFAULT_DPI,
    KIND_LABELS,
    attribution_label,
    check_attributions,
    check_dpi,
    check_kinds,
    check_map,
)

logger = logging.getLogger(__name__)

_GLYPH_WARNING = r"Glyph \d+ .* missing from font"
"""matplotlib's warning of a character its fonts cannot draw: once per label and drawing."""
_said_glyphs: set[str] = set()  # each said once a process: every later log draws them again


def _say_missing_glyphs(texts: Sequence[str]) -> None:
    """Warn once, naming them and the fix, of the characters of `texts` that none of
    matplotlib's fonts (``font.family``, as it falls back from one to the next) can draw: the
    figure shows an empty box for each. matplotlib's own warning (a raw UserWarning per label
    and drawing, 18 for one log of Japanese maps) is then silenced in this process, ours
    standing for it."""
    fonts = [get_font(findfont(FontProperties(family=[f]))) for f in rcParams["font.family"]]
    characters = dict.fromkeys(ch for text in texts for ch in text if ch.isprintable())
    missing = [
        ch
        for ch in characters
        if ch not in _said_glyphs and all(font.get_char_index(ord(ch)) == 0 for font in fonts)
    ]
    if not missing:
        return
    if not _said_glyphs:  # once: a change of the filters shows every "once" warning again
        warnings.filterwarnings("ignore", message=_GLYPH_WARNING, category=UserWarning)
    _said_glyphs.update(missing)
    logger.warning(
        "the figures' font (%s) has no %s: drawn as empty boxes; name a font that has them "
        "first in matplotlib's font.family (a matplotlibrc line such as 'font.family: Noto "
        "Sans CJK JP, DejaVu Sans')",
        ", ".join(font.family_name for font in fonts),
        " ".join(repr(ch) for ch in missing[:10]) + (" ..." if len(missing) > 10 else ""),
    )


_CELL_IN = 0.19  # inches per token along each heatmap axis (~14 pt: room for 7 pt labels)
_MIN_PANEL_IN = 1.6  # smallest heatmap side, so that tiny maps stay legible
_MAX_PANEL_IN = 8.0  # largest heatmap side: long sentences shrink cells and thin the labels
_MAX_LABEL_CHARS = 16  # longer pieces are shortened with an ellipsis on the axes
_PANEL_TITLE_IN = 0.28  # room above each heatmap for "head h"
_PANEL_GAP_IN = 0.25  # gap between neighbouring panels
_TICK_FONTSIZE = 7


def _max_text_width_in(texts: Sequence[str], fontsize: float = _TICK_FONTSIZE) -> float:
    """Width in inches of the widest of ``texts`` when drawn as plain text (no mathtext)."""
    font, measure = FontProperties(size=fontsize), TextToPath()
    widths = [measure.get_text_width_height_descent(t, font, ismath=False)[0] for t in set(texts)]
    return max(widths, default=0.0) / 72.0


def _axis_labels(tokens: Sequence[str], side_in: float) -> tuple[list[int], list[str]]:
    """Tick positions and labels for one heatmap axis `side_in` inches long: every token
    while they fit at `_CELL_IN` each, else every k-th; pieces are shortened to
    `_MAX_LABEL_CHARS` characters."""
    step = max(1, math.ceil(len(tokens) * _CELL_IN / side_in - 1e-9))
    ticks = list(range(0, len(tokens), step))
    labels = [
        t if len(t) <= _MAX_LABEL_CHARS else t[: _MAX_LABEL_CHARS - 1] + "\u2026"
        for t in (tokens[i] for i in ticks)
    ]
    return ticks, labels


def _grid_columns(n_panels: int, n_tokens: int) -> int:
    """Columns of the panel grid: wide for short sentences, near-square for long ones."""
    if n_tokens <= 16:
        return min(n_panels, 5)
    return max(1, math.ceil(math.sqrt(n_panels)))


def plot_attention_heads(
    weights: torch.Tensor,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    *,
    title: str = "",
    average: bool = True,
    cmap: str = "viridis",
    query_axis: str = "queries",
    key_axis: str = "keys",
    panel_names: Sequence[str] | None = None,
    value_label: str = "attention weight",
) -> Figure:
    """Plot every head of one attention layer as a grid of heatmaps.

    Keys run along the x axis (labels rotated), queries down the y axis. All panels share
    one fixed colour scale from 0 to 1 and one colorbar, so heads are directly comparable.
    The figure grows with the number of tokens and heads (about 0.19 inch per token), which
    keeps sentences of up to ~40 subword pieces readable. Longer ones are drawn at a bounded
    size (8 inches per heatmap side) with every k-th token labelled, so the image stays small
    enough to open; the HTML viewer shows every token.

    Args:
        weights: (H, Tq, Tk) attention weights of one layer, rows summing to 1 (or zero).
        query_tokens: Tq query pieces (y axis, named `query_axis`).
        key_tokens: Tk key pieces (x axis, named `key_axis`).
        average: also draw the head average (Tq, Tk) as a last panel.
        panel_names: a title per panel of ``weights`` (default ``head 0``, ``head 1``, ...),
            e.g. when the panels are an attribution beside cross-attention layers.
        value_label: the colorbar's label.

    Returns:
        A Figure with an Agg canvas: H (+1 with ``average``) image panels and a colorbar.

    Raises:
        ValueError: if ``weights`` is not (H, Tq, Tk) with Tq = len(query_tokens) and
            Tk = len(key_tokens), is empty, or contains NaN / inf.
    """
    check_map(weights, query_tokens, key_tokens, "plot_attention_heads")
    w = weights.detach().to(device="cpu", dtype=torch.float32).numpy()  # (H, Tq, Tk)
    n_heads, tq, tk = w.shape
    names = list(panel_names) if panel_names is not None else [f"head {h}" for h in range(n_heads)]
    if len(names) != n_heads:
        raise ValueError(f"plot_attention_heads: {len(names)} panel names for {n_heads} panels")
    panels: list[tuple[str, np.ndarray]] = list(zip(names, w, strict=True))
    if average:
        panels.append(("average of heads", w.mean(axis=0)))

    n_panels = len(panels)
    ncols = _grid_columns(n_panels, max(tq, tk))
    nrows = math.ceil(n_panels / ncols)

    # Explicit layout in inches (no layout engine: constrained layout doubled the cost of a
    # figure). Tick-label room is measured from the actual text extents.
    heat_w = min(_MAX_PANEL_IN, max(_MIN_PANEL_IN, _CELL_IN * tk))
    heat_h = min(_MAX_PANEL_IN, max(_MIN_PANEL_IN, _CELL_IN * tq))
    x_ticks, x_labels = _axis_labels(key_tokens, heat_w)
    y_ticks, y_labels = _axis_labels(query_tokens, heat_h)
    _say_missing_glyphs([*x_labels, *y_labels])  # before they are measured and drawn
    ylab = _max_text_width_in(y_labels) + 0.08  # query labels, left of each heatmap
    xlab = _max_text_width_in(x_labels) + 0.08  # rotated key labels, below each heatmap
    cell_w = ylab + heat_w + _PANEL_GAP_IN
    cell_h = _PANEL_TITLE_IN + heat_h + xlab + _PANEL_GAP_IN
    left, bottom, right = 0.3, 0.3, 1.0  # "queries" label, "keys" label, colorbar
    top = 0.45 if title else 0.1
    fig_w = left + ncols * cell_w - _PANEL_GAP_IN + right
    fig_h = top + nrows * cell_h - _PANEL_GAP_IN + bottom

    def rect(x: float, y_top: float, w: float, h: float) -> list[float]:
        """Inches from the top-left corner -> figure fractions [left, bottom, width, height]."""
        return [x / fig_w, 1.0 - (y_top + h) / fig_h, w / fig_w, h / fig_h]

    fig = Figure(figsize=(fig_w, fig_h))
    FigureCanvasAgg(fig)
    image = None
    for i, (name, matrix) in enumerate(panels):
        row, col = divmod(i, ncols)
        x0 = left + col * cell_w + ylab
        y0 = top + row * cell_h + _PANEL_TITLE_IN
        ax = fig.add_axes(rect(x0, y0, heat_w, heat_h))
        image = ax.imshow(
            matrix, vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto", interpolation="nearest"
        )
        ax.set_title(name, fontsize=9, pad=4)
        # parse_math=False: a piece like "$5$" must be shown as is, not as mathtext
        ax.set_xticks(x_ticks, x_labels, rotation=90, parse_math=False)
        ax.set_yticks(y_ticks, y_labels, parse_math=False)
        ax.tick_params(length=0, pad=2, labelsize=_TICK_FONTSIZE)
    assert image is not None  # n_panels >= 1 (checked above)

    grid_top = top + _PANEL_TITLE_IN
    grid_h = (nrows - 1) * cell_h + heat_h
    cbar_h = min(grid_h, max(1.5, 0.6 * grid_h))
    cax = fig.add_axes(rect(fig_w - right + 0.25, grid_top + (grid_h - cbar_h) / 2, 0.14, cbar_h))
    colorbar = fig.colorbar(image, cax=cax)
    colorbar.set_label(value_label, fontsize=8)
    colorbar.ax.tick_params(labelsize=7)
    grid_mid_x = (left + (ncols * cell_w - _PANEL_GAP_IN) / 2) / fig_w
    fig.text(grid_mid_x, 0.08 / fig_h, key_axis, ha="center", va="bottom", fontsize=8)
    fig.text(
        0.08 / fig_w,
        1.0 - (grid_top + grid_h / 2) / fig_h,
        query_axis,
        rotation=90,
        ha="left",
        va="center",
        fontsize=8,
    )
    if title:
        fig.suptitle(title, x=grid_mid_x, y=1.0 - 0.1 / fig_h, va="top", fontsize=11)
    return fig


def update_attention_heads(fig: Figure, weights: torch.Tensor, *, average: bool = True) -> None:
    """Put new weights into a figure of `plot_attention_heads`, drawn for the same tokens.

    Building a figure (axes, ticks, labels) costs about as much as drawing it; a caller that
    draws the same sentence again and again (the training's map logger) builds it once and
    only swaps the pixels. The figure then draws exactly as a new one would.

    Args:
        fig: a figure of `plot_attention_heads`, with the same ``average`` setting.
        weights: (H, Tq, Tk) weights with the figure's H, Tq and Tk.

    Raises:
        ValueError: if the figure has another number of panels or another panel shape, or
            ``weights`` contains NaN / inf.
    """
    images = [image for ax in fig.axes for image in ax.get_images()]  # the panels, in order
    w = weights.detach().to(device="cpu", dtype=torch.float32).numpy()  # (H, Tq, Tk)
    if not np.isfinite(w).all():
        raise ValueError("update_attention_heads: weights contain NaN or inf")
    matrices = [*w, w.mean(axis=0)] if average else list(w)
    if len(images) != len(matrices) or any(i.get_array().shape != w.shape[1:] for i in images):
        raise ValueError(
            f"update_attention_heads: weights {tuple(w.shape)} (average={average}) do not fit "
            f"a figure of {len(images)} panels of {images[0].get_array().shape if images else ()}"
        )
    for image, matrix in zip(images, matrices, strict=True):
        image.set_data(matrix)


_AXIS_NAMES = {
    "encoder": {"query_axis": "queries (source pieces)", "key_axis": "keys (source pieces)"},
    "decoder": {
        "query_axis": "queries (the next target piece)",
        "key_axis": "keys (decoder inputs)",
    },
    "cross": {
        "query_axis": "queries (the next target piece)",
        "key_axis": "keys (source pieces)",
    },
}
"""Axis names per kind: decoder rows are labelled by the piece they predict (maps.axes): the
reference's next piece in the training maps, the model's own in the maps of its translation."""


def figures_for_maps(
    maps: AttentionMaps,
    *,
    kinds: Sequence[str] = KINDS,
    average: bool = True,
) -> dict[str, Figure]:
    """One heads-grid figure per (kind, layer) of a sentence's attention maps, for `kinds` (a
    subset of `minitx.maps.KINDS`), with a head-average panel when `average`.

    Returns:
        Figures keyed ``"{kind}/layer_{i}"``, e.g. ``"encoder/layer_0"``, ``"cross/layer_2"``,
        in kind order then layer order.

    Raises:
        ValueError: on an unknown kind or a map whose shape does not match the tokens.
    """
    return {key: fig for key, _, fig in _iter_figures(maps, check_kinds(kinds), average)}


def update_figures_for_maps(
    figures: Mapping[str, Figure], maps: AttentionMaps, *, average: bool = True
) -> None:
    """Put the weights of `maps` into `figures`, made by `figures_for_maps` (same kinds and
    ``average``) for a sentence with the same tokens, e.g. the same pair at a later epoch.

    Raises:
        ValueError: a map whose shape does not fit its figure.
    """
    for kind in KINDS:
        for layer, weights in enumerate(maps.layers(kind)):
            key = f"{kind}/layer_{layer}"
            if key in figures:
                update_attention_heads(figures[key], weights, average=average)


def _iter_figures(
    maps: AttentionMaps, kinds: tuple[str, ...], average: bool
) -> Iterator[tuple[str, str, Figure]]:
    """Yield (key, file stem, Figure) per kind and layer, building each figure only when
    asked for. `update_figures_for_maps` finds the figures by the same keys."""
    for kind in kinds:
        queries, keys = maps.axes(kind)
        for layer, weights in enumerate(maps.layers(kind)):
            check_map(weights, queries, keys, f"{kind} layer {layer}")
            title = f"{KIND_LABELS[kind]} — layer {layer}"
            figure = plot_attention_heads(
                weights, queries, keys, title=title, average=average, **_AXIS_NAMES[kind]
            )
            yield f"{kind}/layer_{layer}", f"{kind}_layer{layer}", figure


def _save_figures(
    figures: Iterator[tuple[str, str, Figure]], out_dir: Path | str, prefix: str, dpi: int
) -> list[Path]:
    """Write each figure to ``out_dir/{prefix}{stem}.png``. Figures are built, saved and
    released one at a time, so memory stays flat however many layers (or calls) there are.

    Raises:
        ValueError: a `dpi` outside `check_dpi`'s range, before anything is written.
    """
    check_dpi(dpi)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for _, stem, fig in figures:
        path = out_dir / f"{prefix}{stem}.png"
        fig.savefig(path, dpi=dpi)
        fig.clear()  # drop artists now; the figure itself is unreferenced after this
        paths.append(path)
        logger.debug("wrote %s", path)
    return paths


def save_attention_images(
    maps: AttentionMaps,
    out_dir: Path | str,
    *,
    prefix: str = "",
    dpi: int = DEFAULT_DPI,
    kinds: Sequence[str] = KINDS,
    average: bool = True,
) -> list[Path]:
    """Write the figures of `figures_for_maps` as PNGs in `out_dir` (created if missing),
    e.g. ``{prefix}encoder_layer0.png``; returns the paths, in kind order then layer order."""
    return _save_figures(_iter_figures(maps, check_kinds(kinds), average), out_dir, prefix, dpi)


def _iter_attribution_figures(
    maps: AttentionMaps, attributions: Mapping[str, torch.Tensor]
) -> Iterator[tuple[str, str, Figure]]:
    """Yield (key, file stem, Figure) per method: the attribution, then the head average of
    each layer's cross-attention, as panels of one figure on one 0-1 scale."""
    checked = check_attributions(attributions, maps)
    queries, keys = maps.axes("cross")
    for layer, weights in enumerate(maps.cross_attentions):
        check_map(weights, queries, keys, f"cross layer {layer}")
    averages = [weights.float().mean(0) for weights in maps.cross_attentions]  # (T, S) each
    for method, matrix in checked.items():
        names = [ATTRIBUTION_LABELS.get(method, method)]
        names += [f"layer {i}, mean of heads" for i in range(len(averages))]  # the title says cross
        panels = torch.stack([matrix.float().cpu(), *(a.cpu() for a in averages)])
        figure = plot_attention_heads(
            panels,
            queries,
            keys,
            title=f"{attribution_label(method)} beside cross-attention",
            average=False,
            panel_names=names,
            value_label="share of the row (weight or attribution)",
            **_AXIS_NAMES["cross"],
        )
        yield f"attribution/{method}", f"attribution_{method}", figure


def figures_for_attributions(
    maps: AttentionMaps, attributions: Mapping[str, torch.Tensor]
) -> dict[str, Figure]:
    """One figure per attribution method of `attributions` (method -> (T, S), e.g.
    `minitx.attribution.Attributions.scores`), keyed ``"attribution/{method}"`` in their
    order: the matrix beside the head-averaged cross-attention of every decoder layer of
    `maps`, on the same axes and the same 0-1 colour scale (each row of either is a
    distribution over the source pieces).

    Raises:
        ValueError: a matrix whose shape does not match the cross-attention axes, or maps
            without cross-attention.
    """
    return {key: fig for key, _, fig in _iter_attribution_figures(maps, attributions)}


def save_attribution_images(
    maps: AttentionMaps,
    attributions: Mapping[str, torch.Tensor],
    out_dir: Path | str,
    *,
    prefix: str = "",
    dpi: int = DEFAULT_DPI,
) -> list[Path]:
    """Write ``{prefix}attribution_{method}.png`` per method (see `figures_for_attributions`);
    returns the paths, in the order of `attributions`."""
    return _save_figures(_iter_attribution_figures(maps, attributions), out_dir, prefix, dpi)
