"""Attention heatmaps (matplotlib, Agg) and a standalone HTML attention viewer.

Everything here works on :class:`~minitx.maps.AttentionMaps`, i.e. on one sentence pair with
per-layer tensors of shape (H, Tq, Tk). Figures are plain :class:`matplotlib.figure.Figure`
objects with an Agg canvas attached: pyplot (and its global figure registry) is never used,
so nothing is kept alive after a figure goes out of scope.

The HTML viewer is one self-contained file: inline CSS and JavaScript, the maps embedded as
JSON, a Content-Security-Policy that forbids any network access. Open it with any browser.
"""

from __future__ import annotations

import html
import json
import logging
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties
from matplotlib.textpath import TextToPath

from minitx.maps import KINDS, AttentionMaps

__all__ = [
    "DEFAULT_DPI",
    "KIND_LABELS",
    "figures_for_maps",
    "plot_attention_heads",
    "save_attention_images",
    "viewer_data",
    "visualize",
    "write_html_viewer",
]

logger = logging.getLogger(__name__)

DEFAULT_DPI: int = 110
"""Resolution of saved PNG heatmaps."""

KIND_LABELS: dict[str, str] = {
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention",
    "cross": "cross-attention",
}
"""Human-readable name of each attention kind."""

_CELL_IN = 0.19  # inches per token along each heatmap axis (~14 pt: room for 7 pt labels)
_MIN_PANEL_IN = 1.6  # smallest heatmap side, so that tiny maps stay legible
_PANEL_TITLE_IN = 0.28  # room above each heatmap for "head h"
_PANEL_GAP_IN = 0.25  # gap between neighbouring panels
_TICK_FONTSIZE = 7
_HTML_DECIMALS = 4


# --------------------------------------------------------------------------------------
# validation helpers


def _check_kinds(kinds: Sequence[str]) -> tuple[str, ...]:
    """The kinds as a tuple; ValueError when empty or not a subset of ``KINDS``."""
    kinds = tuple(kinds)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown attention kind(s) {unknown}; expected a subset of {KINDS}")
    if not kinds:
        raise ValueError(f"no attention kinds selected; expected a subset of {KINDS}")
    return kinds


def _check_map(
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


# --------------------------------------------------------------------------------------
# matplotlib heatmaps


def _max_text_width_in(texts: Sequence[str], fontsize: float = _TICK_FONTSIZE) -> float:
    """Width in inches of the widest of ``texts`` when drawn as plain text (no mathtext)."""
    font, measure = FontProperties(size=fontsize), TextToPath()
    widths = [measure.get_text_width_height_descent(t, font, ismath=False)[0] for t in set(texts)]
    return max(widths, default=0.0) / 72.0


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
) -> Figure:
    """Plot every head of one attention layer as a grid of heatmaps.

    Keys run along the x axis (labels rotated), queries down the y axis. All panels share
    one fixed colour scale from 0 to 1 and one colorbar, so heads are directly comparable.
    The figure grows with the number of tokens and heads (about 0.19 inch per token), which
    keeps sentences of up to ~40 subword pieces readable.

    Args:
        weights: (H, Tq, Tk) attention weights of one layer, rows summing to 1 (or zero).
        query_tokens: Tq query pieces (y axis).
        key_tokens: Tk key pieces (x axis).
        title: figure title (omitted when empty).
        average: also draw the head average (Tq, Tk) as a last panel.
        cmap: matplotlib colormap name.

    Returns:
        A Figure with an Agg canvas: H (+1 with ``average``) image panels and a colorbar.

    Raises:
        ValueError: if ``weights`` is not (H, Tq, Tk) with Tq = len(query_tokens) and
            Tk = len(key_tokens), is empty, or contains NaN / inf.
    """
    _check_map(weights, query_tokens, key_tokens, "plot_attention_heads")
    w = weights.detach().to(device="cpu", dtype=torch.float32).numpy()  # (H, Tq, Tk)
    n_heads, tq, tk = w.shape
    panels: list[tuple[str, np.ndarray]] = [(f"head {h}", w[h]) for h in range(n_heads)]
    if average:
        panels.append(("average of heads", w.mean(axis=0)))

    n_panels = len(panels)
    ncols = _grid_columns(n_panels, max(tq, tk))
    nrows = math.ceil(n_panels / ncols)

    # Explicit layout in inches (no layout engine: constrained layout doubled the cost of a
    # figure). Tick-label room is measured from the actual text extents.
    ylab = _max_text_width_in(query_tokens) + 0.08  # query labels, left of each heatmap
    xlab = _max_text_width_in(key_tokens) + 0.08  # rotated key labels, below each heatmap
    heat_w = max(_MIN_PANEL_IN, _CELL_IN * tk)
    heat_h = max(_MIN_PANEL_IN, _CELL_IN * tq)
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
        ax.set_xticks(range(tk), list(key_tokens), rotation=90, parse_math=False)
        ax.set_yticks(range(tq), list(query_tokens), parse_math=False)
        ax.tick_params(length=0, pad=2, labelsize=_TICK_FONTSIZE)
    assert image is not None  # n_panels >= 1 (checked above)

    grid_top = top + _PANEL_TITLE_IN
    grid_h = (nrows - 1) * cell_h + heat_h
    cbar_h = min(grid_h, max(1.5, 0.6 * grid_h))
    cax = fig.add_axes(rect(fig_w - right + 0.25, grid_top + (grid_h - cbar_h) / 2, 0.14, cbar_h))
    colorbar = fig.colorbar(image, cax=cax)
    colorbar.set_label("attention weight", fontsize=8)
    colorbar.ax.tick_params(labelsize=7)
    grid_mid_x = (left + (ncols * cell_w - _PANEL_GAP_IN) / 2) / fig_w
    fig.text(grid_mid_x, 0.08 / fig_h, "keys", ha="center", va="bottom", fontsize=8)
    fig.text(
        0.08 / fig_w,
        1.0 - (grid_top + grid_h / 2) / fig_h,
        "queries",
        rotation=90,
        ha="left",
        va="center",
        fontsize=8,
    )
    if title:
        fig.suptitle(title, x=grid_mid_x, y=1.0 - 0.1 / fig_h, va="top", fontsize=11)
    return fig


def figures_for_maps(
    maps: AttentionMaps,
    *,
    kinds: Sequence[str] = KINDS,
    average: bool = True,
) -> dict[str, Figure]:
    """One heads-grid figure per (kind, layer) of a sentence's attention maps.

    Args:
        maps: the attention maps of one translation.
        kinds: which kinds to plot, a subset of ``("encoder", "decoder", "cross")``.
        average: add a head-average panel to every figure.

    Returns:
        Figures keyed ``"{kind}/layer_{i}"``, e.g. ``"encoder/layer_0"``, ``"cross/layer_2"``,
        in kind order then layer order.

    Raises:
        ValueError: on an unknown kind or a map whose shape does not match the tokens.
    """
    figures: dict[str, Figure] = {}
    for kind, layer, fig in _iter_figures(maps, _check_kinds(kinds), average):
        figures[f"{kind}/layer_{layer}"] = fig
    return figures


def _iter_figures(
    maps: AttentionMaps, kinds: tuple[str, ...], average: bool
) -> Iterator[tuple[str, int, Figure]]:
    """Yield (kind, layer index, Figure), building each figure only when asked for."""
    for kind in kinds:
        queries, keys = maps.axes(kind)
        for layer, weights in enumerate(maps.layers(kind)):
            _check_map(weights, queries, keys, f"{kind} layer {layer}")
            title = f"{KIND_LABELS[kind]} — layer {layer}"
            yield (
                kind,
                layer,
                plot_attention_heads(weights, queries, keys, title=title, average=average),
            )


def save_attention_images(
    maps: AttentionMaps,
    out_dir: Path | str,
    *,
    prefix: str = "",
    dpi: int = DEFAULT_DPI,
    kinds: Sequence[str] = KINDS,
    average: bool = True,
) -> list[Path]:
    """Write one PNG heatmap grid per (kind, layer), e.g. ``{prefix}encoder_layer0.png``.

    Figures are built, saved and released one at a time, so memory stays flat however many
    layers (or calls) there are.

    Args:
        maps: the attention maps of one translation.
        out_dir: directory for the images (created if missing).
        prefix: prepended to every file name.
        dpi: resolution of the PNGs.
        kinds: which kinds to write, a subset of ``("encoder", "decoder", "cross")``.
        average: add a head-average panel to every image.

    Returns:
        The written paths, in kind order then layer order.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: list[Path] = []
    for kind, layer, fig in _iter_figures(maps, _check_kinds(kinds), average):
        path = out_dir / f"{prefix}{kind}_layer{layer}.png"
        fig.savefig(path, dpi=dpi)
        fig.clear()  # drop artists now; the figure itself is unreferenced after this
        paths.append(path)
        logger.debug("wrote %s", path)
    return paths


# --------------------------------------------------------------------------------------
# standalone HTML viewer


def _rounded(weights: torch.Tensor, decimals: int = _HTML_DECIMALS) -> list:
    """(H, Tq, Tk) tensor -> nested lists of floats rounded to ``decimals`` places."""
    return weights.detach().to(device="cpu", dtype=torch.float64).round(decimals=decimals).tolist()


def _json_for_script(obj: object) -> str:
    """JSON that is safe inside an HTML ``<script>`` element (no ``</script>``, ``<!--``)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return (
        text.replace("&", "\\u0026")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def viewer_data(maps: AttentionMaps, *, decimals: int = _HTML_DECIMALS) -> dict[str, object]:
    """The JSON document embedded in the HTML viewer.

    Args:
        maps: the attention maps of one translation.
        decimals: weights are rounded to this many decimal places.

    Returns:
        ``{"src_tokens", "tgt_tokens", "decimals", "kinds": {kind: {"label",
        "query_tokens", "key_tokens", "layers"}}}`` where ``layers[l][h][q][k]`` is the
        weight of query q on key k in head h of layer l (kinds without layers are left out).

    Raises:
        ValueError: if a map's shape does not match the tokens or contains NaN / inf.
    """
    kinds: dict[str, object] = {}
    for kind in KINDS:
        queries, keys = maps.axes(kind)
        layers = []
        for layer, weights in enumerate(maps.layers(kind)):
            _check_map(weights, queries, keys, f"{kind} layer {layer}")
            layers.append(_rounded(weights, decimals))
        if layers:
            kinds[kind] = {
                "label": KIND_LABELS[kind],
                "query_tokens": list(queries),
                "key_tokens": list(keys),
                "layers": layers,
            }
    return {
        "src_tokens": list(maps.src_tokens),
        "tgt_tokens": list(maps.tgt_tokens),
        "decimals": decimals,
        "kinds": kinds,
    }


def write_html_viewer(
    maps: AttentionMaps, path: Path | str, *, title: str = "minitx attention"
) -> Path:
    """Write a standalone, offline HTML viewer for one sentence's attention maps.

    The page lets the user pick the attention kind (``#kind``), layer (``#layer``) and head
    (``#head``; value ``"avg"`` = average of heads) and shows the map as a heatmap table
    (cells ``#heatmap td.cell`` with ``data-q``, ``data-k``, ``data-w``) next to a
    bertviz-style line view (``#lines``). Hovering (or focusing) a query token, a cell or a
    line highlights that query's row and fills ``#readout`` (``data-q``) with its weights
    over the key tokens (``#readout .kw`` with ``data-k``, ``data-w``). ``#status`` carries
    ``data-kind``, ``data-layer``, ``data-head`` of the map on screen.

    The file needs no network: CSS and JavaScript are inline, the maps are embedded as JSON
    (``<script type="application/json" id="attn-data">``, see :func:`viewer_data`) and a
    Content-Security-Policy blocks every external load. Tokens are only ever inserted as
    text, so pieces such as ``<b>&"x'`` are shown literally.

    Args:
        maps: the attention maps of one translation; encoder maps (H, S, S), decoder maps
            (H, T, T), cross maps (H, T, S).
        path: the HTML file to write (parent directories are created).
        title: page title and heading.

    Returns:
        ``path`` as a Path.

    Raises:
        ValueError: if a map's shape does not match the tokens or contains NaN / inf.
    """
    path = Path(path)
    data = viewer_data(maps)
    parts = {
        "TITLE": html.escape(title),
        "CSS": _CSS,
        "JS": _JS,
        "DATA": _json_for_script(data),
    }
    # one pass: text substituted in (title, data) is never scanned for placeholders again
    page = re.sub(r"__(TITLE|CSS|JS|DATA)__", lambda m: parts[m.group(1)], _HTML_TEMPLATE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    logger.debug("wrote %s (%d bytes)", path, len(page))
    return path


def visualize(
    maps: AttentionMaps,
    out_dir: Path | str,
    *,
    kinds: Sequence[str] = KINDS,
    html_viewer: bool = True,
    dpi: int = DEFAULT_DPI,
    average: bool = True,
    title: str = "minitx attention",
) -> list[Path]:
    """Write PNG heatmaps (per kind and layer) and, optionally, ``attention.html``.

    This is the whole of ``scripts/visualize_attention.py`` after inference.

    Args:
        maps: the attention maps of one translation.
        out_dir: output directory (created if missing).
        kinds: which kinds get PNGs (the HTML viewer always holds all kinds).
        html_viewer: also write ``out_dir/attention.html``.
        dpi: resolution of the PNGs.
        average: add a head-average panel to every PNG.
        title: title of the HTML viewer.

    Returns:
        The PNG paths (kind order, then layer order), then the HTML path if written.
    """
    paths = save_attention_images(maps, out_dir, dpi=dpi, kinds=kinds, average=average)
    if html_viewer:
        paths.append(write_html_viewer(maps, Path(out_dir) / "attention.html", title=title))
    return paths


_HTML_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
      content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<meta name="generator" content="minitx.viz">
<title>__TITLE__</title>
<style>__CSS__</style>
</head>
<body>
<header>
  <h1>__TITLE__</h1>
  <form id="controls" onsubmit="return false">
    <label>kind <select id="kind" name="kind"></select></label>
    <label>layer <select id="layer" name="layer"></select></label>
    <label>head <select id="head" name="head"></select></label>
    <span id="status" role="status"></span>
  </form>
  <p class="hint">Hover (or tab to) a query token, a cell or a line to see where that query
  attends. Esc clears.</p>
</header>
<main>
  <section id="heatmap-panel">
    <table id="heatmap" aria-label="attention heatmap: rows are queries, columns are keys">
    </table>
    <div id="legend"><span>0</span><div class="bar"></div><span>1</span></div>
  </section>
  <section id="lines-panel">
    <svg id="lines" role="img"
         aria-label="attention lines from query tokens (left) to key tokens (right)"></svg>
  </section>
</main>
<div id="readout" aria-live="polite"></div>
<script type="application/json" id="attn-data">__DATA__</script>
<script>__JS__</script>
</body>
</html>
"""

_CSS = """
:root { --cell: 18px; --hl: #e4572e; }
* { box-sizing: border-box; }
body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif;
       margin: 0 1.2em 1.2em; color: #222; background: #fafafa; }
h1 { font-size: 1.25em; margin: 0.6em 0 0.3em; }
#controls { display: flex; flex-wrap: wrap; gap: 1em; align-items: center; }
#controls select { font: inherit; padding: 1px 4px; }
#status { color: #555; }
.hint { color: #777; font-size: 0.9em; margin: 0.3em 0 0.6em; }
main { display: flex; flex-wrap: wrap; gap: 2em; align-items: flex-start; }
#heatmap { border-collapse: collapse; }
#heatmap td.cell { width: var(--cell); height: var(--cell); min-width: var(--cell);
                   padding: 0; border: 1px solid #fafafa; cursor: crosshair; }
#heatmap th { font-weight: normal; font-size: 12px; white-space: pre; padding: 0 4px;
              color: #333; }
#heatmap th.qtok { text-align: right; cursor: pointer; }
#heatmap th.ktok { vertical-align: bottom; padding: 4px 0; }
#heatmap th.ktok span { writing-mode: vertical-rl; transform: rotate(180deg);
                        display: inline-block; }
#heatmap tr.active th.qtok { color: #fff; background: var(--hl); }
#heatmap tr.active td.cell { border-top-color: var(--hl); border-bottom-color: var(--hl); }
#heatmap td.cell.focus { outline: 2px solid var(--hl); outline-offset: -1px; }
#heatmap th.ktok.weighted span { border-radius: 2px; }
#heatmap th:focus, #lines text:focus { outline: 2px solid var(--hl); }
#legend { display: flex; align-items: center; gap: 6px; margin-top: 8px; font-size: 12px; }
#legend .bar { width: 180px; height: 10px; border-radius: 2px;
  background: linear-gradient(to right, #440154, #482878, #3e4989, #31688e, #26828e,
                              #1f9e89, #35b779, #6ece58, #b5de2b, #fde725); }
#lines { font-size: 12px; user-select: none; }
#lines text { white-space: pre; cursor: pointer; }
#lines line { stroke: #2b6cb0; stroke-width: 2; }
#lines.focused line { display: none; }
#lines.focused line.on { display: inline; stroke: var(--hl); }
#lines text.on { font-weight: bold; fill: var(--hl); }
#lines rect.kbg { fill: var(--hl); fill-opacity: 0; }
#readout { margin-top: 1.2em; padding: 0.6em 0.8em; background: #fff; border: 1px solid #ddd;
           border-radius: 4px; min-height: 3.2em; max-width: 80em; }
#readout .ro-title { margin-bottom: 0.4em; }
#readout .ro-title .tok { font-weight: bold; }
#readout .kw { display: inline-flex; flex-direction: column; align-items: center;
               margin: 2px; padding: 2px 4px; border-radius: 3px; border: 1px solid #ddd; }
#readout .kw .tok { white-space: pre; }
#readout .kw .val { font: 11px ui-monospace, "DejaVu Sans Mono", monospace; }
#readout .kw.max { border-color: #222; }
"""

_JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("attn-data").textContent);
  var DECIMALS = DATA.decimals;
  var kindSel = document.getElementById("kind");
  var layerSel = document.getElementById("layer");
  var headSel = document.getElementById("head");
  var table = document.getElementById("heatmap");
  var svg = document.getElementById("lines");
  var statusEl = document.getElementById("status");
  var readout = document.getElementById("readout");
  var SVGNS = "http://www.w3.org/2000/svg";
  var VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
                 [31, 158, 137], [53, 183, 121], [110, 206, 88], [181, 222, 43], [253, 231, 37]];
  var current = null;  // {kind, layer, head, label, queries, keys, matrix}
  var focusedQ = null;

  function colour(w) {
    var x = Math.min(1, Math.max(0, w)) * (VIRIDIS.length - 1);
    var i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
    var a = VIRIDIS[i], b = VIRIDIS[i + 1], c = [];
    for (var j = 0; j < 3; j++) c.push(Math.round(a[j] + f * (b[j] - a[j])));
    return "rgb(" + c.join(",") + ")";
  }
  function fmt(w) { return w.toFixed(DECIMALS); }
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;  // tokens are text, never markup
    return e;
  }
  function svgEl(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function setOptions(sel, options, keep) {
    var old = sel.value;
    sel.textContent = "";
    options.forEach(function (o) { sel.appendChild(el("option", {value: o[0]}, o[1])); });
    var values = options.map(function (o) { return o[0]; });
    sel.value = keep && values.indexOf(old) >= 0 ? old : values[0];
  }

  function selectedMatrix(kind, layer, head) {
    var heads = DATA.kinds[kind].layers[layer];
    if (head !== "avg") return heads[+head];
    var nh = heads.length, rows = heads[0].length, cols = heads[0][0].length, m = [];
    for (var q = 0; q < rows; q++) {
      var row = [];
      for (var k = 0; k < cols; k++) {
        var s = 0;
        for (var h = 0; h < nh; h++) s += heads[h][q][k];
        row.push(s / nh);
      }
      m.push(row);
    }
    return m;
  }

  function fillLayers() {
    var layers = DATA.kinds[kindSel.value].layers, opts = [];
    for (var l = 0; l < layers.length; l++) opts.push([String(l), "layer " + l]);
    setOptions(layerSel, opts, true);
  }
  function fillHeads() {
    var n = DATA.kinds[kindSel.value].layers[+layerSel.value].length;
    var opts = [["avg", "average of heads"]];
    for (var h = 0; h < n; h++) opts.push([String(h), "head " + h]);
    setOptions(headSel, opts, true);
  }

  function renderTable() {
    var c = current;
    var n = Math.max(c.queries.length, c.keys.length);
    table.style.setProperty("--cell", Math.max(14, Math.min(32, Math.floor(520 / n))) + "px");
    table.textContent = "";
    var head = el("tr");
    head.appendChild(el("th", {"class": "corner", title: "queries \u2193 / keys \u2192"}));
    c.keys.forEach(function (tok, k) {
      var th = el("th", {"class": "ktok", "data-k": k, scope: "col"});
      th.appendChild(el("span", {}, tok));
      head.appendChild(th);
    });
    var thead = el("thead"), tbody = el("tbody");
    thead.appendChild(head);
    c.queries.forEach(function (tok, q) {
      var tr = el("tr", {"data-q": q});
      tr.appendChild(el("th", {"class": "qtok", "data-q": q, scope: "row", tabindex: 0}, tok));
      c.matrix[q].forEach(function (w, k) {
        var s = fmt(w);
        var td = el("td", {"class": "cell", "data-q": q, "data-k": k, "data-w": s,
                           title: c.queries[q] + " \u2192 " + c.keys[k] + ": " + s});
        td.style.backgroundColor = colour(w);
        tr.appendChild(td);
      });
      tbody.appendChild(tr);
    });
    table.appendChild(thead);
    table.appendChild(tbody);
  }

  function renderLines() {
    var c = current, rowH = 18, top = 14, xl = 150, xr = 290, width = 440;
    var n = Math.max(c.queries.length, c.keys.length);
    svg.textContent = "";
    svg.setAttribute("width", width);
    svg.setAttribute("height", top + n * rowH + 6);
    svg.classList.remove("focused");
    var y = function (i) { return top + i * rowH; };
    c.keys.forEach(function (tok, k) {
      svg.appendChild(svgEl("rect", {"class": "kbg", "data-k": k, x: xr + 2, y: y(k) - 8,
                                     width: width - xr - 4, height: rowH - 2, rx: 2}));
    });
    c.queries.forEach(function (_, q) {
      c.matrix[q].forEach(function (w, k) {
        if (w <= 0) return;
        svg.appendChild(svgEl("line", {"class": "link", "data-q": q, "data-k": k,
                                       "data-w": fmt(w), x1: xl + 4, y1: y(q) - 4,
                                       x2: xr - 4, y2: y(k) - 4, "stroke-opacity": w}));
      });
    });
    c.queries.forEach(function (tok, q) {
      svg.appendChild(svgEl("text", {"class": "qtok", "data-q": q, x: xl, y: y(q),
                                     "text-anchor": "end", tabindex: 0}, tok));
    });
    c.keys.forEach(function (tok, k) {
      svg.appendChild(svgEl("text", {"class": "ktok", "data-k": k, x: xr + 6, y: y(k)}, tok));
    });
  }

  function clearFocus() {
    focusedQ = null;
    table.querySelectorAll("tr.active").forEach(function (e) { e.classList.remove("active"); });
    table.querySelectorAll("td.focus").forEach(function (e) { e.classList.remove("focus"); });
    table.querySelectorAll("th.ktok span").forEach(function (e) {
      e.style.backgroundColor = ""; e.style.color = "";
    });
    svg.classList.remove("focused");
    svg.querySelectorAll(".on").forEach(function (e) { e.classList.remove("on"); });
    svg.querySelectorAll("rect.kbg").forEach(function (e) { e.style.fillOpacity = ""; });
    readout.removeAttribute("data-q");
    readout.textContent = "";
    readout.appendChild(el("span", {"class": "hint"},
      "Hover a query token to see its attention over the " + current.keys.length +
      " key tokens."));
  }

  function focusQuery(q, k) {
    var c = current;
    if (!(q >= 0 && q < c.queries.length)) return;
    clearFocus();
    focusedQ = q;
    var row = c.matrix[q], best = 0;
    for (var i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
    var tr = table.querySelector('tr[data-q="' + q + '"]');
    if (tr) tr.classList.add("active");
    if (k !== undefined) {
      var td = table.querySelector('td[data-q="' + q + '"][data-k="' + k + '"]');
      if (td) td.classList.add("focus");
    }
    table.querySelectorAll("th.ktok").forEach(function (th) {
      var w = row[+th.getAttribute("data-k")], span = th.firstChild;
      span.style.backgroundColor = colour(w);
      span.style.color = w > 0.55 ? "#000" : "#fff";
    });
    svg.classList.add("focused");
    svg.querySelectorAll('line[data-q="' + q + '"], text.qtok[data-q="' + q + '"]')
      .forEach(function (e) { e.classList.add("on"); });
    svg.querySelectorAll("rect.kbg").forEach(function (r) {
      r.style.fillOpacity = (row[+r.getAttribute("data-k")] * 0.6).toFixed(3);
    });
    readout.textContent = "";
    readout.setAttribute("data-q", q);
    var title = el("div", {"class": "ro-title"});
    title.appendChild(document.createTextNode("query " + q + " "));
    title.appendChild(el("span", {"class": "tok"}, c.queries[q]));
    title.appendChild(document.createTextNode(
      " (" + c.label + ", layer " + c.layer + ", " +
      (c.head === "avg" ? "average of heads" : "head " + c.head) + ") attends to:"));
    readout.appendChild(title);
    var keysDiv = el("div", {"class": "ro-keys"});
    row.forEach(function (w, j) {
      var s = fmt(w);
      var item = el("span", {"class": "kw" + (j === best ? " max" : ""), "data-k": j,
                             "data-w": s, title: c.keys[j] + ": " + s});
      item.style.backgroundColor = "rgba(228, 87, 46, " + (w * 0.85).toFixed(3) + ")";
      item.appendChild(el("span", {"class": "tok"}, c.keys[j]));
      item.appendChild(el("span", {"class": "val"}, s));
      keysDiv.appendChild(item);
    });
    readout.appendChild(keysDiv);
  }

  function render() {
    var kind = kindSel.value, layer = +layerSel.value, head = headSel.value;
    var info = DATA.kinds[kind];
    current = {kind: kind, layer: layer, head: head, label: info.label,
               queries: info.query_tokens, keys: info.key_tokens,
               matrix: selectedMatrix(kind, layer, head)};
    renderTable();
    renderLines();
    statusEl.textContent = info.label + " \u00b7 layer " + layer + " \u00b7 " +
      (head === "avg" ? "average of heads" : "head " + head) + " \u00b7 " +
      current.queries.length + " queries \u00d7 " + current.keys.length + " keys";
    statusEl.setAttribute("data-kind", kind);
    statusEl.setAttribute("data-layer", layer);
    statusEl.setAttribute("data-head", head);
    var keep = focusedQ;
    if (keep !== null && keep < current.queries.length) focusQuery(keep); else clearFocus();
  }

  function onPoint(ev) {
    var t = ev.target.closest ? ev.target.closest("[data-q]") : null;
    if (!t || t.tagName.toLowerCase() === "tr") return;
    var k = t.getAttribute("data-k");
    focusQuery(+t.getAttribute("data-q"), k === null ? undefined : +k);
  }

  var kinds = Object.keys(DATA.kinds);
  if (!kinds.length) {
    readout.textContent = "These attention maps hold no layers.";
    return;
  }
  setOptions(kindSel, kinds.map(function (k) { return [k, DATA.kinds[k].label]; }), false);
  fillLayers();
  fillHeads();
  kindSel.addEventListener("change", function () { fillLayers(); fillHeads(); render(); });
  layerSel.addEventListener("change", function () { fillHeads(); render(); });
  headSel.addEventListener("change", render);
  [table, svg].forEach(function (root) {
    root.addEventListener("mouseover", onPoint);
    root.addEventListener("focusin", onPoint);
  });
  document.addEventListener("keydown", function (ev) {
    if (ev.key === "Escape") clearFocus();
  });
  render();
  document.body.setAttribute("data-ready", "1");
})();
"""
