"""Seeing attention: matplotlib heatmaps (heatmaps.py) and a standalone HTML viewer
(viewer.py, with its page, styles and script in static/). Everything works on
`minitx.maps.AttentionMaps`, i.e. one sentence pair with per-layer tensors (H, Tq, Tk), and,
beside its cross-attention, on attribution matrices (T, S) of the same sentence (plain
tensors by method name, e.g. `minitx.attribution.Attributions.scores`). Nothing here imports
the model, the training code or Lightning.
"""

from minitx.viz.common import ATTRIBUTION_LABELS, DEFAULT_DPI, KIND_LABELS
from minitx.viz.heatmaps import (
    figures_for_attributions,
    figures_for_maps,
    plot_attention_heads,
    save_attention_images,
    save_attribution_images,
    update_attention_heads,
    update_figures_for_maps,
)
from minitx.viz.viewer import viewer_data, viewer_html, visualize, write_html_viewer

__all__ = [
    "ATTRIBUTION_LABELS",
    "DEFAULT_DPI",
    "KIND_LABELS",
    "figures_for_attributions",
    "figures_for_maps",
    "plot_attention_heads",
    "save_attention_images",
    "save_attribution_images",
    "update_attention_heads",
    "update_figures_for_maps",
    "viewer_data",
    "viewer_html",
    "visualize",
    "write_html_viewer",
]
