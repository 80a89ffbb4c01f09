"""The live demo page: a `Translator` behind a small Gradio app (the optional ``demo`` extra).

Type or pick a sentence, choose the decoding strategy (any registered in
`minitx.decoding.STRATEGIES` when the page is built: beam search, greedy, sampling, ...; the
beam size for a strategy that reads one), and see the translation, the n-best list and the
interactive attention viewer of that translation (the standalone viewer of
`minitx.viz.viewer`, embedded as an iframe ``srcdoc``, since Gradio does not run a
fragment's inline scripts).

The page works offline: analytics are off, the theme uses the system's fonts (nothing from
a font CDN), the viewer forbids every network load, and the server binds to 127.0.0.1
unless told otherwise. ``minitx-demo`` (minitx/extras/demo/command.py) is the command.

The page's memory is bounded, so it stays flat under repeated requests: a sentence over the
page's limits (`DEFAULT_MAX_CHARS` characters, checked before tokenizing, and
`DEFAULT_MAX_PIECES` sentencepiece pieces or the model's positions, the fewer; `build_demo`'s
``max_chars`` / ``max_pieces``) is refused
with a message on the page before anything is translated, since the viewer grows with
pieces² × layers × heads; and Gradio keeps the last input and output values of only
`MAX_SESSIONS` browser tabs or API clients (with its default, 10,000, it kept a copy of
every visitor's last viewer page for good; see `launch`).
"""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING, Any

from minitx.decoding import DEFAULT_BEAM_SIZE, STRATEGIES, DecodingConfig, strategy_for
from minitx.errors import ConfigError, InputTooLongError, require_extra
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
DEFAULT_MAX_CHARS = 1000
"""Longest sentence the page translates by default, in characters (checked before tokenizing)."""
DEFAULT_MAX_PIECES = 256
"""Longest sentence the page translates by default, in pieces, where the model reads more: the
viewer grows with pieces² × layers × heads (1,000 pieces on the default config's model made a
233 MB page; by that scaling, 256 pieces and their translation of up to 394 make a tenth)."""
MAX_SESSIONS = 4
"""Browser tabs / API clients whose last input and output values Gradio keeps in memory (its
``state_session_capacity``): the page needs none of them between requests, and each can hold a
viewer page of many megabytes."""
MAX_QUEUED = 16
"""Translations that may wait in Gradio's queue (one runs at a time); more are refused."""
MAX_UPLOAD_BYTES = 1 << 20
"""Gradio's upload limit (``max_file_size``): the page takes no files."""


def import_gradio() -> Any:
    """Gradio, with its usage analytics off (set before the import, as Gradio reads it then).

    Raises:
        MissingExtraError: Gradio is not installed; the message names the extra.
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    return require_extra("gradio", "demo", "the live demo page")


def reads_beam_size(strategy: str) -> bool:
    """Whether `strategy` reads the beam size (the page shows the slider for it only)."""
    return "beam_size" in strategy_for(strategy).options


def decoding_for(strategy: str, beam_size: int) -> DecodingConfig:
    """The `DecodingConfig` of the page's controls: the strategy, with `beam_size` when it
    reads one (beam search), its other settings at their defaults.

    Raises:
        ConfigError: `strategy` is not registered, or `beam_size` is no whole number (a
            `ValueError`, shown on the page).
    """
    if reads_beam_size(strategy):
        try:  # the slider sends 5 or 5.0; an API client may send anything (2.7 was cut to 2)
            whole = float(beam_size).is_integer()
        except (TypeError, ValueError):
            whole = False
        if not whole:
            raise ConfigError(f"beam size {beam_size!r}: give a whole number")
        return DecodingConfig(strategy=strategy, beam_size=int(beam_size))
    return DecodingConfig(strategy=strategy)


def viewer_iframe(page: str) -> str:
    """An iframe showing the HTML `page` (its scripts run, sandboxed: no same-origin access)."""
    return (
        f'<iframe id="attention-viewer" title="attention viewer" sandbox="allow-scripts" '
        f'style="width: 100%; height: {VIEWER_HEIGHT_PX}px; border: 0" '
        f'srcdoc="{html.escape(page, quote=True)}"></iframe>'
    )


def model_max_pieces(translator: Translator) -> int:
    """The most source pieces `translator`'s model reads: its ``max_positions`` less one (the
    eos piece); the translator would cut a longer sentence."""
    return translator.model.config.max_positions - 1


def page_limits(
    translator: Translator, max_chars: int = DEFAULT_MAX_CHARS, max_pieces: int | None = None
) -> tuple[int, int]:
    """The page's (characters, pieces) limits: `max_chars`, and `max_pieces` or, when None,
    `DEFAULT_MAX_PIECES` or the most the model reads (`model_max_pieces`), the fewer.

    Raises:
        ConfigError: a limit below 1, or `max_pieces` over what the model reads.
    """
    most = model_max_pieces(translator)
    pieces = min(DEFAULT_MAX_PIECES, most) if max_pieces is None else max_pieces
    if max_chars < 1:
        raise ConfigError(f"--max-chars (max_chars) must be at least 1, got {max_chars}")
    if not 1 <= pieces <= most:
        raise ConfigError(
            f"--max-pieces (max_pieces) must be between 1 and {most:,} (the model's "
            f"max_positions {most + 1:,} less one for the eos piece), got {pieces:,}"
        )
    return max_chars, pieces


def check_sentence_length(
    translator: Translator,
    sentence: str,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_pieces: int | None = None,
) -> int:
    """Refuse a sentence over the page's limits: more than `max_chars` characters (counted
    before tokenizing, so a huge input costs nothing more) or more than `max_pieces`
    sentencepiece pieces (None: `DEFAULT_MAX_PIECES` or the most the model reads, the fewer).
    Returns its number of pieces (0: nothing the tokenizer keeps).

    Raises:
        InputTooLongError: over a limit; the message is one sentence for the page.
        ConfigError: impossible limits (see `page_limits`).
    """
    max_chars, max_pieces = page_limits(translator, max_chars, max_pieces)
    sentence = sentence.strip()  # as translated: a pasted line's newline is no character of it
    if len(sentence) > max_chars:
        raise InputTooLongError(
            f"This sentence has {len(sentence):,} characters, more than the {max_chars:,} the "
            "demo translates: shorten it, or start minitx-demo with a larger --max-chars."
        )
    pieces = len(translator.tokenizer.encode([sentence])[0])
    if pieces > max_pieces:
        most = model_max_pieces(translator)
        how = (
            "shorten it, or start minitx-demo with a larger --max-pieces "
            f"(at most {most:,}, what the model reads)"
            if max_pieces < most
            else "shorten it (the model reads no more)"
        )
        raise InputTooLongError(
            f"This sentence has {pieces:,} sentencepiece pieces, more than the {max_pieces:,} "
            f"the demo translates: {how}."
        )
    return pieces


def translate_for_page(
    translator: Translator,
    sentence: str,
    strategy: str,
    beam_size: int,
    *,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_pieces: int | None = None,
) -> tuple[str, list[list[Any]], str]:
    """What the page shows for one sentence, as typed (`strategy` and `beam_size` as
    `decoding_for` reads them): the translation, the n-best rows (rank, score, translation;
    the strategy's `width` hypotheses, best first: the whole beam; greedy decoding and sampling:
    one row, with its log-probability) and the attention viewer's iframe.

    Raises:
        InputTooLongError: over the limits (`check_sentence_length`); nothing is translated.
        ValueError: for an empty sentence (shown on the page as an error).
    """
    pieces = check_sentence_length(translator, sentence, max_chars=max_chars, max_pieces=max_pieces)
    if not sentence.strip():
        raise ValueError("type a sentence first")
    if not pieces:  # before any decoding
        raise ValueError("this sentence has only spaces or invisible characters: type a sentence")
    decoding = decoding_for(strategy, beam_size)
    n_best = translator.translate_n_best([sentence], decoding.replace(n_best=decoding.width))[0]
    maps = translator.attention(sentence, decoding=decoding)
    rows = [[rank, round(score, 4), text] for rank, (text, score) in enumerate(n_best, 1)]
    title = f"attention: {n_best[0][0]}"
    return n_best[0][0], rows, viewer_iframe(viewer_html(maps, title=title))


def build_demo(
    translator: Translator,
    *,
    title: str = "minitx translation demo",
    max_chars: int = DEFAULT_MAX_CHARS,
    max_pieces: int | None = None,
) -> gr.Blocks:
    """The demo app for `translator` (not yet launched; see `launch`). A sentence over the
    limits (`check_sentence_length`) is not translated: the page shows a message saying the
    limit, the sentence's length and how to raise it.

    Element ids for scripts and tests: ``#source`` (the sentence box), ``#strategy`` (every
    strategy registered when the page is built), ``#beam-size``,
    ``#translate`` (the button), ``#translation``, ``#n-best`` and ``#viewer`` (holding
    ``iframe#attention-viewer``).

    Raises:
        ConfigError: impossible limits (see `page_limits`).
    """
    max_chars, max_pieces = page_limits(translator, max_chars, max_pieces)
    gr = import_gradio()
    src, tgt = translator.languages
    pair = f"{src} → {tgt}" if src and tgt else "source → target"

    def run(sentence: str, strategy: str, beam_size: int) -> tuple[str, list[list[Any]], str]:
        try:
            return translate_for_page(
                translator,
                sentence or "",
                strategy,
                beam_size,
                max_chars=max_chars,
                max_pieces=max_pieces,
            )
        except InputTooLongError as exc:  # a message in the page (Gradio renders it as HTML)
            raise gr.Error(html.escape(str(exc)), duration=None, print_exception=False) from None
        except ValueError as exc:
            raise gr.Error(html.escape(str(exc)), print_exception=False) from None

    with gr.Blocks(title=title, analytics_enabled=False) as demo:
        gr.Markdown(f"# {title}\n{pair}: type or pick a sentence, choose the decoding.")
        with gr.Row():
            with gr.Column(scale=3):
                source = gr.Textbox(
                    label=f"sentence ({src or 'source'})",
                    info=f"at most {max_chars:,} characters and {max_pieces:,} pieces",
                    elem_id="source",
                )  # no max_length: the browser would cut a longer paste without a word
                examples = EXAMPLES.get(src or "", [])
                if examples:
                    gr.Examples(examples=[[e] for e in examples], inputs=[source])
            with gr.Column(scale=1):
                default = DecodingConfig().strategy  # beam search first, then the others
                choices = [default, *(name for name in STRATEGIES.names() if name != default)]
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
            "length-normalised log-probability; greedy decoding and sampling: one)",
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
        for trigger in (button.click, source.submit):  # one translation at a time, both ways
            trigger(
                run, inputs, outputs, concurrency_limit=1, concurrency_id="translate"
            )  # fmt: skip
    return demo.queue(max_size=MAX_QUEUED)


def launch(
    demo: gr.Blocks,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    block: bool = True,
) -> str:
    """Serve `demo` on http://host:port (no share link, no browser opened), with the memory
    Gradio keeps per visitor bounded by `MAX_SESSIONS` (see the module docstring), uploads
    capped (the page takes no files) and no run history in the browser.

    Args:
        demo: from `build_demo`.
        host: interface to bind; the default serves this machine only.
        block: wait until Ctrl-C (False: return at once, e.g. in tests; `demo.close()` stops).

    Returns:
        The local URL.
    """
    _, url, _ = demo.launch(
        server_name=host,
        server_port=port,
        share=False,
        inbrowser=False,
        prevent_thread_lock=True,  # returns at once; `block_thread` below waits
        quiet=True,  # Gradio's own lines suggest launch(share=True), no advice for a command
        show_error=True,
        ssr_mode=False,
        theme=import_gradio().themes.Default(  # the system's fonts: no font is fetched
            font=["ui-sans-serif", "system-ui", "sans-serif"],
            font_mono=["ui-monospace", "Consolas", "monospace"],
        ),
        footer_links=[],
        run_history=False,
        state_session_capacity=MAX_SESSIONS,
        max_file_size=MAX_UPLOAD_BYTES,
    )
    if block:
        print(f"serving the demo on {url} (Ctrl-C stops it)", flush=True)
        demo.block_thread()
    return url
