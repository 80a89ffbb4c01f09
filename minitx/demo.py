"""The live demo page: a `Translator` behind a small Gradio app (the optional ``demo`` extra).

Type or pick a sentence, choose the decoding strategy (any registered in
`minitx.decoding.STRATEGIES` when the page is built: beam search, greedy, sampling, ...; the
beam size for a strategy that reads one), and see the translation, the n-best list and the
interactive attention viewer of that translation (the standalone viewer of
`minitx.viz.viewer`, embedded as an iframe ``srcdoc``, since Gradio does not run a
fragment's inline scripts).

The page works offline: analytics are off, the theme uses the system's fonts (nothing from
a font CDN), the viewer forbids every network load, and the server binds to 127.0.0.1
unless told otherwise. ``minitx-demo`` (minitx/cli/demo.py) is the command.
"""

from __future__ import annotations

import html
import math
import os
from typing import TYPE_CHECKING, Any

from minitx.decoding import DEFAULT_BEAM_SIZE, STRATEGIES, DecodingConfig, strategy_for
from minitx.errors import require_extra
from minitx.translator import Translator
from minitx.viz import viewer_html

if TYPE_CHECKING:
    import gradio as gr

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
MAX_BEAM = 10
EXAMPLES: dict[str, list[str]] = {
    "de": [
        "Ein Mann fährt Fahrrad.",
        "Zwei Hunde spielen im Schnee.",
        "Eine Frau mit einem roten Hut liest ein Buch.",
        "Kinder spielen am Strand Fußball.",
    ],
    "en": [
        "A man rides a bike.",
        "Two dogs are playing in the snow.",
        "A woman in a red hat is reading a book.",
        "Children are playing soccer on the beach.",
    ],
}
"""Sentences offered for a checkpoint's source language."""
VIEWER_HEIGHT_PX = 820


def import_gradio() -> Any:
    """Gradio, with its usage analytics off (set before the import, as Gradio reads it then).

    Raises:
        MissingExtraError: Gradio is not installed; the message names the extra.
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    return require_extra("gradio", "demo", "the live demo page")


def strategy_choices() -> list[str]:
    """The strategies the page offers: every registered one, the default (beam search) first."""
    default = DecodingConfig().strategy
    return [default, *(name for name in STRATEGIES.names() if name != default)]


def reads_beam_size(strategy: str) -> bool:
    """Whether `strategy` reads the beam size (the page shows the slider for it only)."""
    return "beam_size" in strategy_for(strategy).options


def decoding_for(strategy: str, beam_size: int) -> DecodingConfig:
    """The `DecodingConfig` of the page's controls: the strategy, with `beam_size` when it
    reads one (beam search), its other settings at their defaults.

    Raises:
        ConfigError: `strategy` is not registered (a `ValueError`, shown on the page).
    """
    if reads_beam_size(strategy):
        return DecodingConfig(strategy=strategy, beam_size=int(beam_size))
    return DecodingConfig(strategy=strategy)


def viewer_iframe(page: str) -> str:
    """An iframe showing the HTML `page` (its scripts run, sandboxed: no same-origin access)."""
    return (
        f'<iframe id="attention-viewer" title="attention viewer" sandbox="allow-scripts" '
        f'style="width: 100%; height: {VIEWER_HEIGHT_PX}px; border: 0" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
    )


def translate_for_page(
    translator: Translator, sentence: str, strategy: str, beam_size: int
) -> tuple[str, list[list[Any]], str]:
    """What the page shows for one sentence: the translation, the n-best rows (rank, score,
    translation; the whole beam, best first; greedy: one row, score None; in general the
    strategy's `width` hypotheses) and the attention viewer's iframe.

    Raises:
        ValueError: for an empty sentence (shown on the page as an error).
    """
    if not sentence.strip():
        raise ValueError("type a sentence first")
    decoding = decoding_for(strategy, beam_size)
    n_best = translator.translate_n_best([sentence], decoding.replace(n_best=decoding.width))[0]
    maps = translator.attention(sentence, decoding=decoding)
    rows = [  # greedy decoding does not score its output (NaN): an empty cell
        [rank, None if math.isnan(score) else round(score, 4), text]
        for rank, (text, score) in enumerate(n_best, 1)
    ]
    title = f"attention: {n_best[0][0]}"
    return n_best[0][0], rows, viewer_iframe(viewer_html(maps, title=title))


def build_demo(translator: Translator, *, title: str = "minitx translation demo") -> gr.Blocks:
    """The demo app for `translator` (not yet launched; see `launch`).

    Element ids for scripts and tests: ``#source`` (the sentence box), ``#strategy`` (every
    strategy registered when the page is built, `strategy_choices`), ``#beam-size``,
    ``#translate`` (the button), ``#translation``, ``#n-best`` and ``#viewer`` (holding
    ``iframe#attention-viewer``).
    """
    gr = import_gradio()
    src, tgt = translator.languages
    pair = f"{src} → {tgt}" if src and tgt else "source → target"

    def run(sentence: str, strategy: str, beam_size: int) -> tuple[str, list[list[Any]], str]:
        try:
            return translate_for_page(translator, sentence, strategy, beam_size)
        except ValueError as exc:
            raise gr.Error(str(exc)) from None

    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        gr.Markdown(f"# {title}\n{pair}: type or pick a sentence, choose the decoding.")
        with gr.Row():
            with gr.Column(scale=3):
                source = gr.Textbox(label=f"sentence ({src or 'source'})", elem_id="source")
                examples = EXAMPLES.get(src or "", [])
                if examples:
                    gr.Examples(examples=[[e] for e in examples], inputs=[source])
            with gr.Column(scale=1):
                choices = strategy_choices()
                strategy = gr.Radio(choices, value=choices[0], label="decoding", elem_id="strategy")
                beam_size = gr.Slider(
                    2, MAX_BEAM, value=DEFAULT_BEAM_SIZE, step=1, label="beam size",
                    elem_id="beam-size",
                )  # fmt: skip
                button = gr.Button("Translate", variant="primary", elem_id="translate")
        translation = gr.Textbox(
            label=f"translation ({tgt or 'target'})", interactive=False, elem_id="translation"
        )
        n_best = gr.Dataframe(
            headers=["rank", "score", "translation"],
            label="n-best list (beam search: the whole beam, best first; score: "
            "length-normalised log-probability; greedy decoding: one, unscored)",
            interactive=False,
            elem_id="n-best",
        )
        gr.Markdown(
            "Attention of this translation: rows of decoder and cross-attention are labelled "
            "by the piece they predict; hover a token to see its weights."
        )
        viewer = gr.HTML(elem_id="viewer")
        strategy.change(lambda s: gr.update(visible=reads_beam_size(s)), strategy, beam_size)
        outputs = [translation, n_best, viewer]
        inputs = [source, strategy, beam_size]
        button.click(run, inputs, outputs)
        source.submit(run, inputs, outputs)
    return demo


def offline_theme() -> Any:
    """Gradio's default theme on the system's fonts, so that no font is fetched."""
    gr = import_gradio()
    return gr.themes.Default(
        font=["ui-sans-serif", "system-ui", "sans-serif"],
        font_mono=["ui-monospace", "Consolas", "monospace"],
    )


def launch(
    demo: gr.Blocks,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    block: bool = True,
) -> str:
    """Serve `demo` on http://host:port (no share link, no browser opened).

    Args:
        demo: from `build_demo`.
        host: interface to bind; the default serves this machine only.
        port: TCP port.
        block: wait until Ctrl-C (False: return at once, e.g. in tests; `demo.close()` stops).

    Returns:
        The local URL.
    """
    _, url, _ = demo.launch(
        server_name=host,
        server_port=port,
        share=False,
        inbrowser=False,
        prevent_thread_lock=not block,
        quiet=not block,
        show_error=True,
        ssr_mode=False,
        theme=offline_theme(),
        footer_links=[],
    )
    return url
