"""Tests for minitx.viz: matplotlib heatmaps, PNG export, the HTML viewer and the CLI."""

from __future__ import annotations

import gc
import json
import logging
import re
import sys
import types
from pathlib import Path

import matplotlib
import matplotlib.image as mpimg
import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from minitx.decoding import DecodingConfig
from minitx.maps import KINDS, AttentionMaps
from minitx.outputs import MARKER
from minitx.translator import usable_device
from minitx.viz import (
    figures_for_maps,
    plot_attention_heads,
    save_attention_images,
    update_attention_heads,
    update_figures_for_maps,
    visualize,
    write_html_viewer,
)

ROOT = Path(__file__).resolve().parents[1]
NASTY = "<b>&\"x'"
SRC = ["▁Ein", "▁Mann", "▁fährt", NASTY, "rad", ".", "</s>"]  # S = 7
TGT = ["<s>", "▁A", "▁man", "▁rides", "▁a", "▁bi", "cycle", ".", "</s>"]  # T = 9
N_LAYERS, N_HEADS = 2, 4
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def softmaxed(*shape: int, causal: bool = False, seed: int = 0) -> torch.Tensor:
    """Random attention weights (..., Tq, Tk), rows summing to 1 (causal: lower-triangular)."""
    g = torch.Generator().manual_seed(seed)
    scores = 2.0 * torch.randn(*shape, generator=g)
    if causal:
        allowed = torch.ones(shape[-2], shape[-1], dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)


def make_maps(
    src: list[str] = SRC, tgt: list[str] = TGT, n_layers: int = N_LAYERS
) -> AttentionMaps:
    s, t = len(src), len(tgt)
    return AttentionMaps(
        src_tokens=list(src),
        tgt_tokens=list(tgt),
        encoder_attentions=tuple(softmaxed(N_HEADS, s, s, seed=i) for i in range(n_layers)),
        decoder_attentions=tuple(
            softmaxed(N_HEADS, t, t, causal=True, seed=10 + i) for i in range(n_layers)
        ),
        cross_attentions=tuple(softmaxed(N_HEADS, t, s, seed=20 + i) for i in range(n_layers)),
    )


@pytest.fixture(scope="module")
def maps() -> AttentionMaps:
    return make_maps()


def image_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.images]


def tick_texts(labels) -> list[str]:
    return [label.get_text() for label in labels]


# ----------------------------------------------------------------------------- figures


@pytest.mark.parametrize("average", [True, False])
def test_plot_has_one_panel_per_head_plus_average(maps: AttentionMaps, average: bool) -> None:
    weights = maps.cross_attentions[1]  # (H, T, S)
    fig = plot_attention_heads(weights, TGT, SRC, title="cross", average=average)
    panels = image_axes(fig)
    assert len(panels) == N_HEADS + int(average)
    assert len(fig.axes) == len(panels) + 1  # exactly one shared colorbar, no empty panels
    for ax in panels:
        assert tick_texts(ax.get_xticklabels()) == SRC  # keys on x
        assert tick_texts(ax.get_yticklabels()) == TGT  # queries on y
        (image,) = ax.images
        assert image.get_clim() == (0.0, 1.0)
    for h in range(N_HEADS):
        np.testing.assert_allclose(panels[h].images[0].get_array(), weights[h].numpy())
    if average:
        np.testing.assert_allclose(
            panels[-1].images[0].get_array(), weights.mean(0).numpy(), rtol=1e-6
        )
        assert "average" in panels[-1].get_title()


def test_figure_grows_with_tokens_and_heads() -> None:
    def area(n_heads: int, n_tokens: int) -> float:
        toks = [f"t{i}" for i in range(n_tokens)]
        w, h = plot_attention_heads(
            softmaxed(n_heads, n_tokens, n_tokens), toks, toks
        ).get_size_inches()
        return w * h

    assert area(4, 40) > 3 * area(4, 8)
    assert area(8, 12) > 1.4 * area(2, 12)


def test_plot_draws_tokens_literally() -> None:
    # a piece that would be a mathtext error if it were parsed as math
    toks = [r"$\nosuchcommand$", "▁a", NASTY]
    fig = plot_attention_heads(softmaxed(2, 3, 3), toks, toks)
    fig.canvas.draw()  # raises if any label went through the mathtext parser
    assert tick_texts(image_axes(fig)[0].get_xticklabels()) == toks


@pytest.mark.parametrize(
    ("shape", "n_q", "n_k", "match"),
    [
        ((4, 9, 7), 8, 7, "9 query tokens|8 query tokens"),
        ((4, 9, 7), 9, 6, "6 key tokens"),
        ((9, 7), 9, 7, r"\(H, Tq, Tk\)"),
        ((4, 0, 0), 0, 0, "empty"),
    ],
)
def test_plot_rejects_shape_mismatch(shape, n_q: int, n_k: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plot_attention_heads(torch.zeros(shape), ["q"] * n_q, ["k"] * n_k)


def test_plot_rejects_nan() -> None:
    w = softmaxed(2, 3, 3)
    w[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        plot_attention_heads(w, ["a"] * 3, ["b"] * 3)


def test_figures_for_maps_keys_and_axes(maps: AttentionMaps) -> None:
    figs = figures_for_maps(maps)
    assert list(figs) == [f"{k}/layer_{i}" for k in KINDS for i in range(N_LAYERS)]
    predicted = [*TGT[1:], "</s>"]  # decoder rows: the piece each position predicts
    expected_axes = {"encoder": (SRC, SRC), "decoder": (predicted, TGT), "cross": (predicted, SRC)}
    for key, fig in figs.items():
        queries, keys = expected_axes[key.split("/")[0]]
        first = image_axes(fig)[0]
        assert tick_texts(first.get_yticklabels()) == queries
        assert tick_texts(first.get_xticklabels()) == keys
        assert len(image_axes(fig)) == N_HEADS + 1

    only_cross = figures_for_maps(maps, kinds=("cross",), average=False)
    assert list(only_cross) == ["cross/layer_0", "cross/layer_1"]
    assert len(image_axes(only_cross["cross/layer_0"])) == N_HEADS
    with pytest.raises(ValueError, match="unknown attention kind"):
        figures_for_maps(maps, kinds=("encoder", "self"))
    # a kind twice: the training's maps added its entropy in twice (4.48 nats over 12 keys)
    with pytest.raises(ValueError, match="cross given more than once; name each kind once"):
        figures_for_maps(maps, kinds=("cross", "cross"))
    # one string: its letters were named as unknown kinds ['c', 'r', 'o', 's', 's']
    with pytest.raises(TypeError, match=r"give a list of attention kinds, e.g. \['cross'\]"):
        figures_for_maps(maps, kinds="cross")


def test_decoder_rows_are_labelled_by_the_piece_they_predict(tmp_path: Path) -> None:
    """Position t reads tgt_tokens[t] and predicts tgt_tokens[t + 1]: the row that produces
    "rides" must say "rides" (it read "man") in AttentionMaps, the PNG and the viewer."""
    maps = make_maps(tgt=["<s>", "▁A", "▁man", "▁rides"], n_layers=1)
    assert maps.predicted_tokens == ["▁A", "▁man", "▁rides", "</s>"]
    queries, keys = maps.axes("cross")
    assert queries[2] == "▁rides" and maps.query_inputs("cross")[2] == "▁man"
    assert keys == SRC
    assert maps.axes("decoder")[1] == maps.tgt_tokens  # keys: what the decoder reads
    assert maps.axes("encoder")[0] == SRC and maps.query_inputs("encoder") is None
    fig = figures_for_maps(maps, kinds=("cross",))["cross/layer_0"]
    assert tick_texts(image_axes(fig)[0].get_yticklabels()) == queries
    assert any("next target piece" in t.get_text() for t in fig.texts)  # what the rows mean
    data = embedded_data(write_html_viewer(maps, tmp_path / "v.html").read_text("utf-8"))
    assert data["kinds"]["cross"]["query_tokens"] == queries
    assert data["kinds"]["cross"]["query_inputs"] == maps.tgt_tokens
    with pytest.raises(ValueError, match="3 predicted tokens for 4 decoder positions"):
        AttentionMaps(
            maps.src_tokens,
            maps.tgt_tokens,
            maps.encoder_attentions,
            maps.decoder_attentions,
            maps.cross_attentions,
            predicted_tokens=["a", "b", "c"],
        )


def drawn(fig: Figure) -> np.ndarray:
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba()).copy()


def test_refilled_figures_draw_exactly_as_new_ones(maps: AttentionMaps) -> None:
    """The map logger builds a sentence's figures once and refills them at each later log:
    the pixels must be those of figures built for the new weights."""
    later = AttentionMaps(
        maps.src_tokens,
        maps.tgt_tokens,
        *(
            tuple(
                softmaxed(*w.shape, causal=kind == "decoder", seed=99 + i) for i, w in enumerate(ws)
            )
            for kind, ws in zip(
                KINDS,
                (maps.encoder_attentions, maps.decoder_attentions, maps.cross_attentions),
                strict=True,
            )
        ),
    )
    figures = figures_for_maps(maps)
    before = {key: drawn(fig) for key, fig in figures.items()}
    update_figures_for_maps(figures, later)
    fresh = figures_for_maps(later)
    assert list(figures) == list(fresh)
    for key, fig in figures.items():
        after = drawn(fig)
        assert np.array_equal(after, drawn(fresh[key])), key
        assert not np.array_equal(after, before[key]), key  # the pixels did change


def test_a_refill_that_does_not_fit_is_refused() -> None:
    fig = plot_attention_heads(softmaxed(2, 3, 4), ["q"] * 3, ["k"] * 4)
    with pytest.raises(ValueError, match=r"weights \(2, 3, 5\) \(average=True\) do not fit"):
        update_attention_heads(fig, softmaxed(2, 3, 5))
    with pytest.raises(ValueError, match="do not fit a figure of 3 panels"):
        update_attention_heads(fig, softmaxed(3, 3, 4))
    nan = softmaxed(2, 3, 4)
    nan[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN or inf"):
        update_attention_heads(fig, nan)


def test_figures_for_maps_rejects_inconsistent_maps() -> None:
    bad = make_maps()
    bad.cross_attentions = (bad.cross_attentions[0], softmaxed(N_HEADS, len(TGT), len(SRC) + 1))
    with pytest.raises(ValueError, match="cross layer 1"):
        figures_for_maps(bad)


# ----------------------------------------------------------------------------- PNGs


def test_save_attention_images_writes_valid_pngs(maps: AttentionMaps, tmp_path: Path) -> None:
    out = tmp_path / "nested" / "attn"
    paths = save_attention_images(maps, out, prefix="step5_", dpi=50)
    expected = [f"step5_{k}_layer{i}.png" for k in KINDS for i in range(N_LAYERS)]
    assert [p.name for p in paths] == expected
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)  # nothing else written
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
        image = mpimg.imread(path)
        assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50
        assert image[..., :3].std() > 0.05  # not a blank canvas

    subset = save_attention_images(maps, tmp_path / "sub", kinds=["decoder"], dpi=40)
    assert [p.name for p in subset] == ["decoder_layer0.png", "decoder_layer1.png"]


def test_characters_the_font_lacks_are_one_warning_not_one_per_label_and_drawing(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    recwarn: pytest.WarningsRecorder,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Japanese target drew its tokens as empty boxes with one raw matplotlib UserWarning
    per label and drawing (18 in one log of the maps): one minitx warning names each character
    and the fix, once."""
    import minitx.viz.heatmaps

    monkeypatch.setattr(minitx.viz.heatmaps, "_said_glyphs", set())  # none said in this process
    maps = make_maps(tgt=["<s>", "▁日本", "▁語", "x"])
    only_dejavu = matplotlib.rc_context({"font.family": ["DejaVu Sans"]})  # no CJK font here
    with only_dejavu, caplog.at_level(logging.WARNING, logger="minitx.viz.heatmaps"):
        save_attention_images(maps, tmp_path / "a", kinds=["cross"], dpi=20)
        save_attention_images(maps, tmp_path / "b", kinds=["cross"], dpi=20)  # said already
    assert not [w for w in recwarn if "missing from font" in str(w.message)]
    said = [r.getMessage() for r in caplog.records if "drawn as empty boxes" in r.getMessage()]
    assert len(said) == 1 and "font (DejaVu Sans)" in said[0] and "font.family" in said[0], said
    assert all(f"'{ch}'" in said[0] for ch in "日本語") and "'x'" not in said[0]


def test_save_images_refuses_a_dpi_it_cannot_draw_before_writing(
    maps: AttentionMaps, tmp_path: Path
) -> None:
    """Was: dpi 1 to 5 reached matplotlib, whose font renderer failed ("invalid ppem") in a
    traceback, after the output directory was made."""
    for dpi in (5, 19.5, 601, float("nan"), "50", True):
        with pytest.raises(
            ValueError, match=re.escape(f"dpi must be a number from 20 to 600, got {dpi!r}")
        ):
            visualize(maps, tmp_path / "out", dpi=dpi)  # type: ignore[arg-type]
        assert not (tmp_path / "out").exists()
    assert [p.name for p in save_attention_images(maps, tmp_path, kinds=["cross"], dpi=20.0)] == [
        f"cross_layer{i}.png" for i in range(N_LAYERS)
    ]


def test_save_attention_images_releases_figures(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    maps = make_maps(n_layers=1)

    def live_figures() -> int:
        gc.collect()
        return sum(type(obj) is Figure for obj in gc.get_objects())

    before = live_figures()
    for step in range(2):
        save_attention_images(maps, tmp_path, prefix=f"{step}_", dpi=30)
    assert live_figures() == before
    assert plt.get_fignums() == []  # pyplot's global registry was never touched


# ----------------------------------------------------------------------------- HTML


def embedded_data(html_text: str) -> dict:
    match = re.search(
        r'<script type="application/json" id="attn-data">(.*?)</script>', html_text, re.S
    )
    assert match, "embedded JSON data not found"
    return json.loads(match.group(1))


def test_html_viewer_is_standalone(maps: AttentionMaps, tmp_path: Path) -> None:
    path = write_html_viewer(maps, tmp_path / "deep" / "viewer.html")
    assert path == tmp_path / "deep" / "viewer.html"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:[a-z]+:)?//""", text, re.I)
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, re.I)
    assert not re.search(r"<link\b|<iframe\b|<img\b|@import|url\(", text, re.I)
    assert "https://" not in text
    # the only URL-like string is the SVG namespace used by createElementNS
    assert set(re.findall(r"https?://[^\s\"']+", text)) <= {"http://www.w3.org/2000/svg"}
    assert "Content-Security-Policy" in text and "default-src 'none'" in text
    assert len(re.findall(r"<script\b", text)) == 2  # the JSON data and the inline code


def test_html_viewer_embeds_rounded_weights(maps: AttentionMaps, tmp_path: Path) -> None:
    data = embedded_data(write_html_viewer(maps, tmp_path / "v.html").read_text("utf-8"))
    assert data["src_tokens"] == SRC and data["tgt_tokens"] == TGT
    assert set(data["kinds"]) == set(KINDS)
    for kind in KINDS:
        entry = data["kinds"][kind]
        queries, keys = maps.axes(kind)
        assert entry["query_tokens"] == queries and entry["key_tokens"] == keys
        got = np.array(entry["layers"])  # (L, H, Tq, Tk)
        want = torch.stack(maps.layers(kind)).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=5e-5 + 1e-9, rtol=0)
        np.testing.assert_array_equal(got, np.round(got, 4))  # 4 decimals, no more
    # decoder self-attention is causal: zeros above the diagonal survive the round trip
    dec = np.array(data["kinds"]["decoder"]["layers"])
    assert (np.triu(dec, k=1) == 0).all()


def test_html_viewer_escapes_tokens_and_title(tmp_path: Path) -> None:
    breakout = "</script><script>alert(1)</script>"
    maps = make_maps(src=[*SRC[:-1], breakout], tgt=[*TGT[:-1], "<!--"])
    text = write_html_viewer(maps, tmp_path / "v.html", title='<i>T</i> & "q"').read_text("utf-8")
    assert NASTY not in text and "<b>" not in text
    assert breakout not in text and "alert(1)</script>" not in text
    assert "<!--" not in text
    assert text.count("</script>") == 2
    assert "<title>&lt;i&gt;T&lt;/i&gt; &amp; &quot;q&quot;</title>" in text
    data = embedded_data(text)
    assert data["src_tokens"][3] == NASTY and data["src_tokens"][-1] == breakout
    assert data["tgt_tokens"][-1] == "<!--"
    assert "▁Mann" in text  # sentencepiece pieces stay readable UTF-8


def test_html_viewer_rejects_bad_maps(tmp_path: Path) -> None:
    bad = make_maps()
    bad.encoder_attentions = (softmaxed(N_HEADS, len(SRC), len(SRC) - 1),)
    with pytest.raises(ValueError, match="encoder layer 0"):
        write_html_viewer(bad, tmp_path / "v.html")
    assert not (tmp_path / "v.html").exists()
    # text UTF-8 cannot hold (a lone surrogate, from a str built in Python) fails before the
    # file is opened: no empty page left behind
    with pytest.raises(UnicodeEncodeError):
        write_html_viewer(make_maps(src=[*SRC[:-1], "\ud800"]), tmp_path / "v.html")
    assert not (tmp_path / "v.html").exists()


# ----------------------------------------------------------------------------- visualize + CLI


def test_visualize_writes_pngs_and_html(tmp_path: Path) -> None:
    maps = make_maps(n_layers=1)
    paths = visualize(maps, tmp_path, dpi=30)
    assert [p.name for p in paths[:-1]] == [f"{k}_layer0.png" for k in KINDS]
    assert paths[-1] == tmp_path / "attention.html" and paths[-1].is_file()

    paths = visualize(maps, tmp_path / "b", kinds=["cross"], html_viewer=False, dpi=30)
    assert [p.name for p in paths] == ["cross_layer0.png"]
    assert not (tmp_path / "b" / "attention.html").exists()


def load_script():
    """The visualize command (minitx-visualize)."""
    import minitx.cli.visualize

    return minitx.cli.visualize


def test_script_runs_with_a_translator(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    maps = make_maps(n_layers=1)
    calls: dict[str, object] = {}

    class FakeTranslator:
        model = types.SimpleNamespace(config=types.SimpleNamespace(tgt_vocab_size=1000))

        @classmethod
        def from_pretrained(cls, path, device="cpu", bf16=False):
            calls["checkpoint"], calls["device"] = Path(path), device
            return cls()

        def set_attention(self, mode: str, *, scope: str, seed: int) -> None:
            calls["attention_mode"] = (mode, scope, seed)

        def attention(self, sentence: str, decoding=None) -> AttentionMaps:
            calls["attention"], calls["decoding"] = sentence, decoding
            return maps

    fake = types.ModuleType("minitx.translator")
    fake.Translator = FakeTranslator
    fake.CheckpointError = ValueError
    fake.usable_device = usable_device  # --device is checked before the model loads
    monkeypatch.setitem(sys.modules, "minitx.translator", fake)
    ckpt = tmp_path / "run.ckpt"
    ckpt.write_bytes(b"not read by the fake")
    out = tmp_path / "attn"
    script = load_script()
    argv = ["--checkpoint", str(ckpt), "Ein Mann fährt Fahrrad.", "--out-dir", str(out)]
    assert script.main([*argv, "--kinds", "encoder", "cross", "--dpi", "30", "--beam", "3"]) == 0
    assert calls == {
        "checkpoint": ckpt,
        "device": "cpu",
        "attention": "Ein Mann fährt Fahrrad.",
        "decoding": DecodingConfig(beam_size=3),
        "attention_mode": ("soft", "cross", 0),  # no --attention: as trained
    }
    translation = "".join(maps.tgt_tokens[1:]).replace("\u2581", " ").strip()
    printed = capsys.readouterr().out
    assert f"translation: {translation}" in printed
    written = sorted(p.name for p in out.iterdir())
    assert written == sorted(["attention.html", "encoder_layer0.png", "cross_layer0.png", MARKER])
    for name in written[1:]:  # the marker (first) is not listed
        assert str(out / name) in printed
    assert "\u2192 A man rides a bicycle." in (out / "attention.html").read_text(
        "utf-8"
    )  # in the title

    argv[-1] = str(tmp_path / "c")
    assert script.main([*argv, "--no-html", "--kinds", "decoder", "--dpi", "30"]) == 0
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == [MARKER, "decoder_layer0.png"]
    assert calls["decoding"] == DecodingConfig()  # the default beam of every command
    assert "(beam 5 (alpha 1))" in capsys.readouterr().out

    monkeypatch.undo()  # a missing file is a one-line error, while the options are read
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--checkpoint", str(tmp_path / "missing.ckpt"), "x"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing.ckpt" in err and "Traceback" not in err


def test_script_help_needs_no_translator(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    script = load_script()
    monkeypatch.setitem(sys.modules, "minitx.translator", None)  # any import of it would fail
    with pytest.raises(SystemExit) as exit_info:
        script.main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--checkpoint", "--out-dir", "--kinds", "--no-html", "--dpi"):
        assert option in out


def test_viewer_files_are_package_data_inlined_into_the_page(
    maps: AttentionMaps, tmp_path: Path
) -> None:
    """viewer.html, viewer.css and viewer.js are found through importlib.resources (so they
    travel with a non-editable install) and end up inline in the written page."""
    from importlib import resources

    static = resources.files("minitx.viz") / "static"
    text = write_html_viewer(maps, tmp_path / "v.html").read_text(encoding="utf-8")
    for name in ("viewer.css", "viewer.js"):
        body = (static / name).read_text(encoding="utf-8")
        assert len(body) > 500 and body in text, name
    template = (static / "viewer.html").read_text(encoding="utf-8")
    assert "__DATA__" in template and "__DATA__" not in text


# ----------------------------------------------------------------------------- attributions


def make_attributions(maps: AttentionMaps, methods=("saliency", "ig")) -> dict[str, torch.Tensor]:
    t, s = len(maps.predicted_tokens), len(maps.src_tokens)
    return {m: softmaxed(t, s, seed=30 + i) for i, m in enumerate(methods)}


def test_attribution_labels_cover_the_methods() -> None:
    from minitx.attribution import METHODS
    from minitx.viz.common import ATTRIBUTION_LABELS

    assert list(ATTRIBUTION_LABELS) == list(METHODS)


def test_viewer_data_adds_one_kind_per_attribution_method(maps: AttentionMaps) -> None:
    from minitx.viz import viewer_data

    attributions = make_attributions(maps)
    data = viewer_data(maps, attributions=attributions)
    assert list(data["kinds"]) == [*KINDS, "attribution:saliency", "attribution:ig"]
    kind = data["kinds"]["attribution:ig"]
    assert kind["label"] == "attribution: integrated gradients"
    assert kind["attribution"] is True and kind["compare"] == "cross"
    queries, keys = maps.axes("cross")
    assert kind["query_tokens"] == queries and kind["key_tokens"] == keys
    assert kind["query_inputs"] == maps.tgt_tokens
    got = torch.tensor(kind["layers"], dtype=torch.float64)  # (1 layer, 1 head, T, S)
    assert got.shape == (1, 1, len(queries), len(keys))
    torch.testing.assert_close(got[0, 0], attributions["ig"].double(), atol=5.1e-5, rtol=0)
    assert "attribution" not in data["kinds"]["cross"]  # attention kinds are unchanged
    assert viewer_data(maps) == viewer_data(maps, attributions={})


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.zeros(3, 4), r"has shape \(1, 3, 4\)|weights have shape"),
        (torch.full((9, 7), float("nan")), "NaN"),
        (torch.zeros(2, 9, 7), r"expected a \(T, S\) tensor"),
    ],
)
def test_viewer_rejects_attributions_that_do_not_fit(
    maps: AttentionMaps, bad: torch.Tensor, match: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=match):
        write_html_viewer(maps, tmp_path / "v.html", attributions={"ig": bad})
    with pytest.raises(ValueError, match=match):
        visualize(maps, tmp_path / "out", attributions={"ig": bad}, dpi=30)
    assert not (tmp_path / "v.html").exists() and not (tmp_path / "out").exists()


def test_attribution_figures_sit_beside_cross_attention(maps: AttentionMaps) -> None:
    from minitx.viz import figures_for_attributions

    figures = figures_for_attributions(maps, make_attributions(maps))
    assert list(figures) == ["attribution/saliency", "attribution/ig"]
    fig = figures["attribution/ig"]
    panels = image_axes(fig)
    assert [ax.get_title() for ax in panels] == [
        "integrated gradients",
        *(f"layer {i}, mean of heads" for i in range(N_LAYERS)),
    ]
    fig.canvas.draw()  # the panels' titles side by side: they ran into each other
    boxes = [ax.title.get_window_extent(fig.canvas.get_renderer()) for ax in panels]
    assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:], strict=False))
    queries, keys = maps.axes("cross")
    for ax in panels:
        assert tick_texts(ax.get_yticklabels()) == queries
        assert tick_texts(ax.get_xticklabels()) == keys
    np.testing.assert_allclose(
        panels[1].images[0].get_array(), maps.cross_attentions[0].mean(0).numpy(), atol=1e-6
    )
    assert fig._suptitle.get_text() == "attribution: integrated gradients beside cross-attention"


def test_visualize_writes_attribution_pngs_and_viewer_kinds(tmp_path: Path) -> None:
    maps = make_maps(n_layers=1)
    paths = visualize(maps, tmp_path, dpi=30, attributions=make_attributions(maps))
    names = [p.name for p in paths]
    assert names == [
        *(f"{k}_layer0.png" for k in KINDS),
        "attribution_saliency.png",
        "attribution_ig.png",
        "attention.html",
    ]
    for path in paths[:-1]:
        assert path.read_bytes()[:8] == PNG_MAGIC
    data = embedded_data(paths[-1].read_text(encoding="utf-8"))
    assert "attribution:ig" in data["kinds"]


def test_script_writes_attributions_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from minitx.attribution import Attributions

    maps = make_maps(n_layers=1)
    asked: dict[str, object] = {}

    class FakeTranslator:
        model = types.SimpleNamespace(config=types.SimpleNamespace(tgt_vocab_size=1000))

        @classmethod
        def from_pretrained(cls, path, device="cpu", bf16=False):
            return cls()

        def set_attention(self, mode: str, *, scope: str, seed: int) -> None:
            pass

        def attention(self, sentence: str, decoding=None) -> AttentionMaps:
            return maps

        def attributions(self, sentence: str, *, methods, ig_steps, decoding) -> Attributions:
            asked.update(methods=methods, ig_steps=ig_steps, decoding=decoding)
            return Attributions(
                list(maps.src_tokens),
                list(maps.tgt_tokens),
                list(maps.predicted_tokens),
                make_attributions(maps, methods),
                torch.zeros(len(maps.tgt_tokens)),
            )

    fake = types.ModuleType("minitx.translator")
    fake.Translator = FakeTranslator
    fake.CheckpointError = ValueError
    fake.usable_device = usable_device  # --device is checked before the model loads
    monkeypatch.setitem(sys.modules, "minitx.translator", fake)
    ckpt = tmp_path / "run.ckpt"
    ckpt.write_bytes(b"not read by the fake")
    script = load_script()
    argv = ["--checkpoint", str(ckpt), "Ein Mann fährt Fahrrad.", "--dpi", "30", "--kinds", "cross"]
    out = tmp_path / "a"
    assert script.main([*argv, "--out-dir", str(out), "--attributions", "ig,saliency"]) == 0
    assert asked == {"methods": ("ig", "saliency"), "ig_steps": 16, "decoding": DecodingConfig()}
    assert sorted(p.name for p in out.iterdir()) == [
        MARKER,
        "attention.html",
        "attribution_ig.png",
        "attribution_saliency.png",
        "cross_layer0.png",
    ]
    out = tmp_path / "b"
    assert (
        script.main([*argv, "--out-dir", str(out), "--attributions", "all", "--ig-steps", "4"]) == 0
    )
    assert asked["methods"] == ("saliency", "ixg", "ig") and asked["ig_steps"] == 4
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        script.main([*argv, "--attributions", "saliency,lime"])
    assert exit_info.value.code == 2
    assert "--attributions: unknown attribution method(s) ['lime']" in capsys.readouterr().err


def test_printing_maps_shows_the_pieces_not_every_weight() -> None:
    layers = (torch.rand(2, 3, 3),)
    maps = AttentionMaps(["▁A", "▁b", "</s>"], ["<s>", "▁X", "▁y"], layers, layers, layers)
    text = repr(maps)
    assert "tensor(" not in text and len(text) < 200, text
    assert "'▁A'" in text and "predicted_tokens=['▁X', '▁y', '</s>']" in text
