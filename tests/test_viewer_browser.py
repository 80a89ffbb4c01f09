"""The HTML attention viewer in a real headless browser (Debian's chromium + chromedriver,
driven through selenium).

Mouse moves and option clicks go through WebDriver actions, so the page receives real,
trusted DOM events. Skipped, with the install command, when chromium, chromedriver or
selenium is missing. Install: ``sudo bash .ci/browser_setup.sh`` (apt-get install chromium
chromium-driver).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from browser import browser_missing, wait_for

from minitx.maps import AttentionMaps
from minitx.viz import write_html_viewer

pytestmark = pytest.mark.skipif(browser_missing() is not None, reason=str(browser_missing()))

NASTY = "<b>&\"x'"
SRC = ["▁Ein", "▁Mann", NASTY, "▁fährt", "rad", "</s>"]  # S = 6
TGT = ["<s>", "▁A", "▁man", "▁rides", "▁a", "▁bike", ".", "</s>"]  # T = 8
PRED = [*TGT[1:], "</s>"]  # decoder and cross rows: the piece each position predicts
N_HEADS = 3


def softmaxed(*shape: int, causal: bool = False, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    scores = 3.0 * torch.randn(*shape, generator=g)
    if causal:
        allowed = torch.ones(shape[-2], shape[-1], dtype=torch.bool).tril()
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1)


@pytest.fixture(scope="module")
def maps() -> AttentionMaps:
    s, t = len(SRC), len(TGT)
    return AttentionMaps(
        src_tokens=SRC,
        tgt_tokens=TGT,
        encoder_attentions=tuple(softmaxed(N_HEADS, s, s, seed=i) for i in range(2)),
        decoder_attentions=tuple(
            softmaxed(N_HEADS, t, t, causal=True, seed=10 + i) for i in range(3)
        ),
        cross_attentions=tuple(softmaxed(N_HEADS, t, s, seed=20 + i) for i in range(3)),
    )


@pytest.fixture(scope="module")
def viewer_url(maps: AttentionMaps, tmp_path_factory: pytest.TempPathFactory) -> str:
    path = write_html_viewer(maps, tmp_path_factory.mktemp("viewer") / "attention.html")
    return path.resolve().as_uri()


class Page:
    """The viewer open in the browser, with the few actions these tests use."""

    def __init__(self, driver: Any) -> None:
        self.driver = driver

    def js(self, script: str, *args: Any) -> Any:
        return self.driver.execute_script(script, *args)

    def wait_for(self, script: str, *args: Any) -> Any:
        return wait_for(self.driver, script, *args)

    def element(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def click(self, css: str) -> None:
        self.element(css).click()

    def hover(self, css: str) -> None:
        """Move the (real, trusted) mouse pointer to the centre of an element."""
        from selenium.webdriver.common.action_chains import ActionChains

        ActionChains(self.driver).move_to_element(self.element(css)).perform()


@pytest.fixture
def page(chrome: Any, viewer_url: str) -> Page:
    chrome.get(viewer_url)
    wait_for(chrome, "return document.body.getAttribute('data-ready') === '1'")
    return Page(chrome)


# ----------------------------------------------------------------------------- helpers

CELLS_JS = """
return Array.from(document.querySelectorAll('#heatmap td.cell')).map(function (td) {
  return [+td.dataset.q, +td.dataset.k, td.dataset.w, getComputedStyle(td).backgroundColor];
});
"""


def expected(maps: AttentionMaps, kind: str, layer: int, head: str) -> np.ndarray:
    weights = maps.layers(kind)[layer].double()  # (H, Tq, Tk)
    return (weights.mean(0) if head == "avg" else weights[int(head)]).numpy()


def heatmap(page: Page) -> tuple[np.ndarray, np.ndarray]:
    """(weights (Tq, Tk) from data-w, luminance (Tq, Tk) of the cell background)."""
    cells = page.js(CELLS_JS)
    tq = max(c[0] for c in cells) + 1
    tk = max(c[1] for c in cells) + 1
    assert len(cells) == tq * tk
    weights, luminance = np.full((tq, tk), np.nan), np.full((tq, tk), np.nan)
    for q, k, w, colour in cells:
        r, g, b = (float(x) for x in colour[colour.index("(") + 1 : -1].split(",")[:3])
        weights[q, k], luminance[q, k] = float(w), 0.2126 * r + 0.7152 * g + 0.0722 * b
    return weights, luminance


def status(page: Page) -> dict:
    return page.js(
        "var s = document.getElementById('status');"
        "return {kind: s.dataset.kind, layer: s.dataset.layer, head: s.dataset.head};"
    )


def select(page: Page, control: str, value: str) -> None:
    """Pick an option the way a user does (click on it), then wait for the re-render."""
    page.click(f'#{control} option[value="{value}"]')
    page.wait_for(f"return document.getElementById('status').dataset.{control} === '{value}'")


def assert_shows(page: Page, maps: AttentionMaps, kind: str, layer: int, head: str) -> None:
    assert status(page) == {"kind": kind, "layer": str(layer), "head": head}
    want = expected(maps, kind, layer, head)
    got, luminance = heatmap(page)
    assert got.shape == want.shape  # one cell per (query, key)
    np.testing.assert_allclose(got, want, atol=1.01e-4, rtol=0)  # 4 decimals
    # the shading follows the weights: viridis gets monotonically lighter from 0 to 1
    order = np.argsort(got, axis=None, kind="stable")
    assert (np.diff(luminance.ravel()[order]) >= -1.5).all()
    assert luminance.max() - luminance.min() > 40


# ----------------------------------------------------------------------------- tests


def test_viewer_renders_the_default_map(page: Page, maps: AttentionMaps) -> None:
    assert_shows(page, maps, "cross", 0, "avg")  # it opens on the alignment
    options = page.js(
        "return ['kind', 'layer', 'head'].map(function (id) {"
        "  return Array.from(document.getElementById(id).options).map(o => o.value); });"
    )
    assert options == [["encoder", "decoder", "cross"], ["0", "1", "2"], ["avg", "0", "1", "2"]]
    labels = page.js(
        "return [Array.from(document.querySelectorAll('#heatmap th.qtok')).map(e => e.textContent),"
        " Array.from(document.querySelectorAll('#heatmap th.ktok')).map(e => e.textContent),"
        " document.querySelectorAll('#heatmap b, #lines b').length];"
    )
    assert labels == [PRED, SRC, 0]  # the nasty token is text, not markup


def test_viewer_follows_kind_layer_and_head(page: Page, maps: AttentionMaps) -> None:
    select(page, "kind", "cross")
    assert_shows(page, maps, "cross", 0, "avg")  # (T, S) now
    select(page, "layer", "2")
    assert_shows(page, maps, "cross", 2, "avg")
    select(page, "head", "1")
    assert_shows(page, maps, "cross", 2, "1")
    labels = page.js(
        "return [Array.from(document.querySelectorAll('#heatmap th.qtok')).map(e => e.textContent),"
        " Array.from(document.querySelectorAll('#heatmap th.ktok')).map(e => e.textContent)];"
    )
    assert labels == [PRED, SRC]

    select(page, "kind", "decoder")  # layer 2 and head 1 exist there too and are kept
    assert_shows(page, maps, "decoder", 2, "1")
    got, _ = heatmap(page)
    assert (np.triu(got, k=1) == 0).all()  # causal
    select(page, "kind", "encoder")  # the encoder has 2 layers: falls back to layer 0
    assert_shows(page, maps, "encoder", 0, "1")


def test_hovering_a_query_token_shows_its_row(page: Page, maps: AttentionMaps) -> None:
    readout_js = (
        "var r = document.getElementById('readout');"
        "return {q: r.dataset.q, ws: Array.from(r.querySelectorAll('.kw')).map(e => e.dataset.w),"
        " toks: Array.from(r.querySelectorAll('.kw .tok')).map(e => e.textContent),"
        " max: Array.from(r.querySelectorAll('.kw')).findIndex(e => e.classList.contains('max')),"
        " active: Array.from(document.querySelectorAll('#heatmap tr.active'))"
        ".map(e => e.dataset.q),"
        " on: document.querySelectorAll('#lines line.on').length,"
        " title: r.querySelector('.ro-title') && r.querySelector('.ro-title').textContent};"
    )
    assert page.js(readout_js)["q"] is None  # nothing focused yet
    select(page, "kind", "cross")
    select(page, "layer", "1")
    select(page, "head", "2")
    want = expected(maps, "cross", 1, "2")

    for css, q in [
        ('#heatmap th.qtok[data-q="3"]', 3),  # a query label of the heatmap
        ('#lines text.qtok[data-q="5"]', 5),  # a query token of the line view
        ('#heatmap td.cell[data-q="1"][data-k="4"]', 1),  # a cell
    ]:
        page.hover(css)
        page.wait_for(f"return document.getElementById('readout').dataset.q === '{q}'")
        readout = page.js(readout_js)
        assert readout["toks"] == SRC
        assert readout["title"].startswith(f"position {q}, predicting {PRED[q]} (reading {TGT[q]})")
        np.testing.assert_allclose([float(w) for w in readout["ws"]], want[q], atol=1e-4, rtol=0)
        assert readout["max"] == int(np.argmax(want[q]))
        assert readout["active"] == [str(q)]  # exactly that row is highlighted
        assert readout["on"] == int((want[q].round(4) > 0).sum())  # its lines, and only them

    # changing the head keeps the focused query and updates its weights
    select(page, "head", "avg")
    readout = page.js(readout_js)
    assert readout["q"] == "1"
    np.testing.assert_allclose(
        [float(w) for w in readout["ws"]], expected(maps, "cross", 1, "avg")[1], atol=1e-4, rtol=0
    )


# ----------------------------------------------------------------------------- attributions

METHODS = ("saliency", "ig")


@pytest.fixture(scope="module")
def attributions() -> dict[str, torch.Tensor]:
    """Random (T, S) attribution matrices of the fixture's sentence: rows sum to 1."""
    return {m: softmaxed(len(PRED), len(SRC), seed=40 + i) for i, m in enumerate(METHODS)}


@pytest.fixture
def attribution_page(
    chrome: Any,
    maps: AttentionMaps,
    attributions: dict[str, torch.Tensor],
    tmp_path_factory: pytest.TempPathFactory,
) -> Page:
    path = tmp_path_factory.mktemp("viewer") / "attention.html"
    write_html_viewer(maps, path, attributions=attributions)
    chrome.get(path.resolve().as_uri())
    wait_for(chrome, "return document.body.getAttribute('data-ready') === '1'")
    return Page(chrome)


COMPARE_JS = """
var a = document.getElementById('agreement');
return {hidden: document.getElementById('compare-panel').hidden,
        title: document.getElementById('compare-title').textContent,
        cells: Array.from(document.querySelectorAll('#compare td.cell')).map(function (td) {
          return [+td.dataset.q, +td.dataset.k, +td.dataset.w]; }),
        spearman: a.dataset.spearman, top1: a.dataset.top1, rows: a.dataset.rows,
        text: a.textContent};
"""


def rounded(matrix: torch.Tensor) -> torch.Tensor:
    return matrix.double().round(decimals=4)


def test_attributions_are_shown_beside_cross_attention(
    attribution_page: Page, maps: AttentionMaps, attributions: dict[str, torch.Tensor]
) -> None:
    from minitx.attribution import agreement

    page = attribution_page
    kinds = page.js("return Array.from(document.getElementById('kind').options).map(o => o.value)")
    assert kinds == ["encoder", "decoder", "cross", "attribution:saliency", "attribution:ig"]
    assert page.js(COMPARE_JS)["hidden"] is True  # cross-attention alone: nothing beside it

    for method in METHODS:
        select(page, "kind", f"attribution:{method}")
        # the layer and head choices are the cross-attention's: what is shown beside it
        for layer, head in [("0", "avg"), ("2", "1"), ("1", "avg")]:
            select(page, "layer", layer)
            select(page, "head", head)
            assert status(page) == {"kind": f"attribution:{method}", "layer": layer, "head": head}
            got, luminance = heatmap(page)  # the attribution itself, in #heatmap
            want = attributions[method].double().numpy()
            np.testing.assert_allclose(got, want, atol=1.01e-4, rtol=0)
            assert luminance.max() - luminance.min() > 40
            shown = page.js(COMPARE_JS)
            assert shown["hidden"] is False
            average = "average of heads" if head == "avg" else f"head {head}"
            assert shown["title"] == f"cross-attention, layer {layer}, {average}"
            cross = np.zeros((len(PRED), len(SRC)))
            for q, k, w in shown["cells"]:
                cross[q, k] = w
            want_cross = expected(maps, "cross", int(layer), head)
            np.testing.assert_allclose(cross, want_cross, atol=1.01e-4, rtol=0)
            # the agreement line: minitx.attribution.agreement on the numbers on the page
            heads = rounded(maps.cross_attentions[int(layer)])
            shown_cross = heads.mean(0) if head == "avg" else heads[int(head)]
            agree = agreement(rounded(attributions[method]), shown_cross)
            assert int(shown["rows"]) == agree["rows"] == len(PRED) - 1
            assert float(shown["spearman"]) == pytest.approx(agree["spearman"], abs=1e-4)
            assert float(shown["top1"]) == pytest.approx(agree["top1"], abs=1e-4)
            assert (
                f"in {round(agree['top1'] * agree['rows'])} of {agree['rows']} rows"
                in (shown["text"])
            )


def test_hovering_an_attribution_row_shows_both_rows(
    attribution_page: Page, maps: AttentionMaps, attributions: dict[str, torch.Tensor]
) -> None:
    page = attribution_page
    select(page, "kind", "attribution:ig")
    select(page, "layer", "2")
    select(page, "head", "0")
    page.hover('#compare td.cell[data-q="4"][data-k="2"]')  # a cell of the cross-attention
    page.wait_for("return document.getElementById('readout').dataset.q === '4'")
    readout = page.js(
        "var r = document.getElementById('readout');"
        "return {mine: Array.from(r.querySelectorAll('.kw')).map(e => +e.dataset.w),"
        " theirs: Array.from(r.querySelectorAll('.kwc')).map(e => +e.dataset.w),"
        " toks: Array.from(r.querySelectorAll('.kw .tok')).map(e => e.textContent),"
        " active: Array.from(document.querySelectorAll('tr.active')).map(e => e.dataset.q),"
        " text: r.textContent};"
    )
    np.testing.assert_allclose(readout["mine"], attributions["ig"][4].numpy(), atol=1e-4)
    np.testing.assert_allclose(readout["theirs"], expected(maps, "cross", 2, "0")[4], atol=1e-4)
    assert readout["toks"] == SRC
    assert readout["active"] == ["4", "4"]  # the row in both tables
    assert f"predicting {PRED[4]} (reading {TGT[4]})" in readout["text"]
    assert "cross-attention, layer 2, head 0 attends to:" in readout["text"]

    select(page, "kind", "cross")  # back to attention: the panel beside it goes
    assert page.js(COMPARE_JS)["hidden"] is True
    assert page.js("return document.querySelectorAll('#readout .kwc').length") == 0
