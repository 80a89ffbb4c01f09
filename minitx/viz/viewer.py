"""The standalone HTML attention viewer: one self-contained, offline file per sentence.

The page is assembled from minitx/viz/static/viewer.html, viewer.css and viewer.js (package
data, read with importlib.resources), with the maps embedded as JSON and a
Content-Security-Policy that forbids any network access. Open it with any browser.
"""

from __future__ import annotations

import functools
import html
import json
import logging
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import torch

from minitx.maps import KINDS, AttentionMaps
from minitx.viz.common import (
    ATTRIBUTION_KIND_PREFIX,
    DEFAULT_DPI,
    KIND_LABELS,
    attribution_label,
    check_attributions,
    check_map,
)
from minitx.viz.heatmaps import save_attention_images, save_attribution_images

logger = logging.getLogger(__name__)

_HTML_DECIMALS = 4


@functools.cache
def _static(name: str) -> str:
    """The text of one of the viewer's files in minitx/viz/static (package data)."""
    return (resources.files("minitx.viz") / "static" / name).read_text(encoding="utf-8")


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


def viewer_data(
    maps: AttentionMaps,
    *,
    decimals: int = _HTML_DECIMALS,
    attributions: Mapping[str, torch.Tensor] | None = None,
) -> dict[str, object]:
    """The JSON document embedded in the HTML viewer.

    Args:
        decimals: weights are rounded to this many decimal places.
        attributions: method -> (T, S) attributions of the same translation, on the
            cross-attention axes (e.g. `minitx.attribution.Attributions.scores`); each becomes
            a kind ``"attribution:{method}"`` shown beside cross-attention.

    Returns:
        ``{"src_tokens", "tgt_tokens", "predicted_tokens", "decimals", "kinds": {kind:
        {"label", "query_tokens", "query_inputs", "key_tokens", "layers"}}}`` where
        ``layers[l][h][q][k]`` is the weight of query q on key k in head h of layer l (kinds
        without layers are left out). ``query_tokens`` label the rows as `AttentionMaps.axes`
        does (decoder and cross rows: the piece being predicted); ``query_inputs`` is the
        piece each row reads (None for encoder rows). An attribution kind has one layer of one
        "head" (its (T, S) matrix), ``"attribution": true`` and ``"compare": "cross"``: the
        viewer's layer and head choices then pick the cross-attention shown beside it.

    Raises:
        ValueError: if a map's shape does not match the tokens or contains NaN / inf.
    """
    checked = check_attributions(attributions or {}, maps)
    kinds: dict[str, object] = {}
    for kind in KINDS:
        queries, keys = maps.axes(kind)
        layers = []
        for layer, weights in enumerate(maps.layers(kind)):
            check_map(weights, queries, keys, f"{kind} layer {layer}")
            layers.append(_rounded(weights, decimals))
        if layers:
            kinds[kind] = {
                "label": KIND_LABELS[kind],
                "query_tokens": list(queries),
                "query_inputs": maps.query_inputs(kind),
                "key_tokens": list(keys),
                "layers": layers,
            }
    for method, matrix in checked.items():  # checked: the maps have cross-attention
        kinds[ATTRIBUTION_KIND_PREFIX + method] = {
            **kinds["cross"],  # the same axes
            "label": attribution_label(method),
            "layers": [_rounded(matrix.unsqueeze(0), decimals)],
            "attribution": True,
            "compare": "cross",
        }
    return {
        "src_tokens": list(maps.src_tokens),
        "tgt_tokens": list(maps.tgt_tokens),
        "predicted_tokens": list(maps.predicted_tokens),
        "decimals": decimals,
        "kinds": kinds,
    }


def viewer_html(
    maps: AttentionMaps,
    *,
    title: str = "minitx attention",
    attributions: Mapping[str, torch.Tensor] | None = None,
) -> str:
    """The viewer page of :func:`write_html_viewer` as a string (e.g. for an iframe's
    ``srcdoc``, as the demo app embeds it).

    Raises:
        ValueError: if a map's shape does not match the tokens or contains NaN / inf.
    """
    parts = {
        "TITLE": html.escape(title),
        "CSS": _static("viewer.css"),
        "JS": _static("viewer.js"),
        "DATA": _json_for_script(viewer_data(maps, attributions=attributions)),
    }
    # one pass: text substituted in (title, data) is never scanned for placeholders again
    template = _static("viewer.html")
    return re.sub(r"__(TITLE|CSS|JS|DATA)__", lambda m: parts[m.group(1)], template)


def write_html_viewer(
    maps: AttentionMaps,
    path: Path | str,
    *,
    title: str = "minitx attention",
    attributions: Mapping[str, torch.Tensor] | None = None,
) -> Path:
    """Write a standalone, offline HTML viewer for one sentence's attention maps.

    The page lets the user pick the attention kind (``#kind``), layer (``#layer``) and head
    (``#head``; value ``"avg"`` = average of heads) and shows the map as a heatmap table
    (cells ``#heatmap td.cell`` with ``data-q``, ``data-k``, ``data-w``) next to a
    bertviz-style line view (``#lines``). Hovering (or focusing) a query token, a cell or a
    line highlights that query's row and fills ``#readout`` (``data-q``) with its weights
    over the key tokens (``#readout .kw`` with ``data-k``, ``data-w``). ``#status`` carries
    ``data-kind``, ``data-layer``, ``data-head`` of the map on screen.

    With `attributions`, each method is one more kind (``attribution:saliency``, ...): the
    heatmap and the lines show the attribution matrix, and beside them ``#compare`` shows the
    cross-attention of the chosen layer and head (cells as in ``#heatmap``), with
    ``#agreement`` (``data-spearman``, ``data-top1``, ``data-rows``): the mean rank correlation
    of their rows and the share of rows whose largest entry is the same source piece, the
    source eos and the row predicting eos left out (`minitx.attribution.agreement`). The
    readout then lists both rows.

    The file needs no network: CSS and JavaScript are inline, the maps are embedded as JSON
    (``<script type="application/json" id="attn-data">``, see :func:`viewer_data`) and a
    Content-Security-Policy blocks every external load. Tokens are only ever inserted as
    text, so pieces such as ``<b>&"x'`` are shown literally.

    Args:
        maps: the attention maps of one translation; encoder maps (H, S, S), decoder maps
            (H, T, T), cross maps (H, T, S).
        path: the HTML file to write (parent directories are created); returned as a Path.
        attributions: method -> (T, S) attributions (see :func:`viewer_data`).

    Raises:
        ValueError: if a map's shape does not match the tokens or contains NaN / inf.
    """
    path = Path(path)
    page = viewer_html(maps, title=title, attributions=attributions)
    data = page.encode("utf-8")  # first: text UTF-8 cannot hold (a lone surrogate) fails
    path.parent.mkdir(parents=True, exist_ok=True)  # before the file is opened, not empty
    path.write_bytes(data)
    logger.debug("wrote %s (%d bytes)", path, len(data))
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
    attributions: Mapping[str, torch.Tensor] | None = None,
) -> list[Path]:
    """Write PNG heatmaps (`save_attention_images`, `save_attribution_images`) and, with
    `html_viewer`, ``attention.html`` (`write_html_viewer`) into `out_dir`: the whole of
    ``minitx-visualize`` after inference. `kinds` get PNGs; the viewer holds all kinds.

    Returns:
        The PNG paths (kind order, then layer order, then the attributions), then the HTML
        path if written.
    """
    attributions = check_attributions(attributions or {}, maps)  # before anything is written
    paths = save_attention_images(maps, out_dir, dpi=dpi, kinds=kinds, average=average)
    paths += save_attribution_images(maps, attributions, out_dir, dpi=dpi)
    if html_viewer:
        page = Path(out_dir) / "attention.html"
        paths.append(write_html_viewer(maps, page, title=title, attributions=attributions))
    return paths
