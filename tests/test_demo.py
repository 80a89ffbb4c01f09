"""The live demo page (minitx/demo.py, minitx-demo): what it computes, its command, and the
page end to end in headless Chromium (selenium) against `Translator` itself.

The browser test skips, with the install command, without chromium + chromedriver; the
Gradio parts skip without Gradio (`pip install -e '.[dev]'` brings it).
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser import free_port, wait_for
from helpers import PYTHON, TOY_TEST_SOURCES, subprocess_env

from minitx.decoding import DecodingConfig
from minitx.demo import decoding_for, translate_for_page
from minitx.translator import Translator

SENTENCE = TOY_TEST_SOURCES[3]
SCREENSHOT_ENV = "MINITX_DEMO_SCREENSHOT"
"""Where the end-to-end test saves its screenshot of the page (default: the test's tmp dir)."""


@pytest.fixture(scope="module")
def translator(tiny_checkpoint: Path) -> Translator:
    return Translator.from_checkpoint(tiny_checkpoint)


def srcdoc(iframe: str) -> str:
    return html.unescape(re.search(r'srcdoc="([^"]*)"', iframe).group(1))


@pytest.mark.parametrize(("strategy", "beam"), [("greedy", 4), ("beam", 3)])
def test_page_shows_the_translators_results(
    translator: Translator, strategy: str, beam: int
) -> None:
    decoding = decoding_for(strategy, beam)
    want = (
        DecodingConfig(strategy="greedy") if strategy == "greedy" else DecodingConfig.for_beam(beam)
    )
    assert decoding == want
    translation, rows, iframe = translate_for_page(translator, SENTENCE, strategy, beam)
    assert translation == translator.translate([SENTENCE], decoding)[0]
    n_best = translator.translate_n_best([SENTENCE], decoding.replace(n_best=decoding.width))[0]
    assert [row[0] for row in rows] == list(range(1, decoding.width + 1))
    assert [row[2] for row in rows] == [text for text, _ in n_best]
    assert rows[0][2] == translation
    scores = [row[1] for row in rows]
    if strategy == "greedy":
        assert scores == [None]  # greedy decoding does not score
    else:
        assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
    assert 'sandbox="allow-scripts"' in iframe and "<script" not in iframe.split("srcdoc")[0]
    page = srcdoc(iframe)
    assert page.startswith("<!DOCTYPE html>") and "default-src 'none'" in page  # offline viewer


def test_an_empty_sentence_is_refused(translator: Translator) -> None:
    with pytest.raises(ValueError, match="type a sentence"):
        translate_for_page(translator, "   ", "greedy", 5)


def test_demo_command_help_and_missing_gradio(tmp_path: Path) -> None:
    proc = subprocess.run(
        [PYTHON, "-m", "minitx", "demo", "--help"],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--checkpoint" in proc.stdout and "127.0.0.1" in proc.stdout
    blocker = tmp_path / "gradio.py"  # shadows the real package: `import gradio` fails
    blocker.write_text("raise ImportError('no gradio here')\n")
    env = subprocess_env()
    env["PYTHONPATH"] = f"{tmp_path}{os.pathsep}{env['PYTHONPATH']}"
    proc = subprocess.run(
        [PYTHON, "-m", "minitx", "demo", "--checkpoint", "missing.ckpt"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith("error: the live demo page needs the gradio package")
    assert "pip install 'minitx[demo]'" in line


def test_a_port_in_use_is_a_one_line_error(
    tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    pytest.importorskip("gradio", reason="the demo needs Gradio: pip install -e '.[dev]'")
    import minitx.demo
    from minitx.cli import demo as command

    def taken(*args: Any, **kwargs: Any) -> str:
        raise OSError("Cannot find empty port in range: 7860-7860.")  # as Gradio says it

    monkeypatch.setattr(minitx.demo, "build_demo", lambda translator: None)
    monkeypatch.setattr(minitx.demo, "launch", taken)
    assert command.main(["--checkpoint", str(tiny_checkpoint), "--port", "7860"]) == 2
    assert capsys.readouterr().err.startswith("error: cannot serve on 127.0.0.1:7860: the port")


# ---------------------------------------------------------------------- in the browser


@pytest.fixture(scope="module")
def demo_url(translator: Translator) -> Iterator[str]:
    pytest.importorskip("gradio", reason="the demo needs Gradio: pip install -e '.[dev]'")
    from minitx.demo import build_demo, launch

    demo = build_demo(translator)
    url = launch(demo, port=free_port(), block=False)
    assert url.startswith("http://127.0.0.1:")  # localhost by default
    try:
        yield url
    finally:
        demo.close()


CELLS_JS = """
return Array.from(document.querySelectorAll('#heatmap td.cell')).map(function (td) {
  return [+td.dataset.q, +td.dataset.k, +td.dataset.w];
});
"""


def test_demo_end_to_end(
    chrome: Any, demo_url: str, translator: Translator, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By

    chrome.get(demo_url)
    box = wait_for(chrome, "return document.querySelector('#source textarea')", timeout=30)
    assert "Ein Mann fährt Fahrrad." in chrome.find_element(By.TAG_NAME, "body").text  # examples
    box.send_keys(SENTENCE)
    chrome.find_element(By.CSS_SELECTOR, "#strategy input[value='greedy']").click()
    chrome.find_element(By.CSS_SELECTOR, "#translate").click()
    shown = wait_for(
        chrome,
        "var t = document.querySelector('#translation textarea');"
        "return document.querySelector('#viewer iframe') && t && t.value;",
        timeout=30,
    )
    greedy = DecodingConfig(strategy="greedy")
    assert shown == translator.translate([SENTENCE], greedy)[0]
    assert shown in chrome.find_element(By.CSS_SELECTOR, "#n-best").text  # rank 1 of the list

    # the viewer inside the iframe shows this translation's maps (cross-attention first)
    maps = translator.attention(SENTENCE, decoding=greedy)
    chrome.switch_to.frame(chrome.find_element(By.CSS_SELECTOR, "#viewer iframe"))
    try:
        wait_for(chrome, "return document.body.getAttribute('data-ready') === '1'")
        cells = chrome.execute_script(CELLS_JS)
        rows = chrome.execute_script(
            "return Array.from(document.querySelectorAll('#heatmap th.qtok'))"
            ".map(e => e.textContent);"
        )
        kind = chrome.execute_script("return document.getElementById('status').dataset.kind;")
    finally:
        chrome.switch_to.default_content()
    assert kind == "cross"
    assert rows == list(maps.axes("cross")[0])  # labelled by the predicted pieces
    want = maps.layers("cross")[0].double().mean(0).numpy()  # layer 0, head average
    got = np.full(want.shape, np.nan)
    for q, k, w in cells:
        got[q, k] = w
    np.testing.assert_allclose(got, want, atol=1.01e-4, rtol=0)

    # offline: every resource the page loaded came from the demo server itself
    loaded = chrome.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name);"
    )
    origin = demo_url.rstrip("/")
    assert loaded and all(u.startswith((origin, "data:", "blob:")) for u in loaded), loaded

    # beam search (the default size, 5): the n-best list fills with the whole beam
    chrome.find_element(By.CSS_SELECTOR, "#strategy input[value='beam']").click()
    chrome.find_element(By.CSS_SELECTOR, "#translate").click()
    beam = [text for text, _ in translator.translate_n_best([SENTENCE], n_best=5)[0]]
    wait_for(
        chrome,
        "var t = document.querySelector('#n-best').innerText;"
        "return arguments[0].every(h => t.includes(h));",
        beam,
        timeout=30,
    )
    assert (
        chrome.execute_script("return document.querySelector('#translation textarea').value;")
        == translator.translate([SENTENCE])[0]
    )

    chrome.set_window_size(1280, 1400)
    target = Path(os.environ.get(SCREENSHOT_ENV) or tmp_path / "demo.png")
    assert chrome.save_screenshot(str(target)) and target.read_bytes()[:4] == b"\x89PNG"
    chrome.set_window_size(1280, 1000)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
