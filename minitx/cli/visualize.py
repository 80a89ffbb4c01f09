"""Translate one sentence with a checkpoint and draw its attention maps.

Writes PNG heatmaps (one per attention kind and layer: every head as a panel, plus the head
average) and a standalone HTML viewer ``attention.html`` into ``--out-dir``, then prints the
translation and the written paths.

Example:
    minitx-visualize --checkpoint runs/best.ckpt "Ein Mann fährt Fahrrad." --out-dir attn/

(``python scripts/visualize_attention.py`` is the same command.) The sentence is translated
with the default decoding of every minitx command (beam 5) unless ``--beam`` says otherwise.
A sentence longer than the model's positions is cut to fit (with a warning). PNGs of long
sentences are drawn at a bounded size with every k-th token labelled; the HTML viewer has
every token.

Exit status: 0 ok; 2 a usage or input error (one ``error: ...`` line); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minitx.cli.common import (
    CHECKPOINT_HELP,
    UsageError,
    add_decoding_arguments,
    attention_from_args,
    check_arguments_utf8,
    check_decoding_args,
    decoding_from_args,
    load_translator,
    run_cli,
)
from minitx.maps import KINDS
from minitx.viz import DEFAULT_DPI, visualize


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        description=(
            "Translate SENTENCE with a minitx checkpoint and write its attention maps as PNG "
            "heatmaps (per kind and layer) and a standalone HTML viewer."
        ),
    )
    parser.add_argument("sentence", help="source sentence to translate")
    parser.add_argument("--checkpoint", required=True, type=Path, help=CHECKPOINT_HELP)
    parser.add_argument(
        "--out-dir", type=Path, default=Path("attn"), help="output directory (default: attn/)"
    )
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=KINDS,
        default=list(KINDS),
        metavar="KIND",
        help=f"attention kinds to plot as PNGs, any of {', '.join(KINDS)} (default: all)",
    )
    parser.add_argument(
        "--no-html", action="store_true", help="do not write the HTML viewer attention.html"
    )
    parser.add_argument(
        "--dpi", type=int, default=DEFAULT_DPI, help=f"PNG resolution (default: {DEFAULT_DPI})"
    )
    add_decoding_arguments(parser, what="of the translation whose maps are drawn", batch_size=False)
    return parser


def _shorten(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def run(args: argparse.Namespace) -> int:
    """Load, translate, draw, write. Raises `UsageError` for input problems."""
    check_arguments_utf8({"SENTENCE": args.sentence})
    translator = load_translator(args.checkpoint, device=args.device, bf16=args.bf16)
    translator.set_attention(**attention_from_args(args))  # hard attention: one-hot maps
    decoding = decoding_from_args(args)
    maps = translator.attention(args.sentence, decoding=decoding)  # maps of the generated pieces
    translation = (
        "".join(maps.tgt_tokens[1:]).replace("\u2581", " ").strip()
    )  # sentencepiece detokenisation
    try:
        paths = visualize(
            maps,
            args.out_dir,
            kinds=args.kinds,
            html_viewer=not args.no_html,
            dpi=args.dpi,
            title=f"minitx attention: {_shorten(args.sentence)} \u2192 {_shorten(translation)}",
        )
    except OSError as exc:
        raise UsageError(
            f"cannot write into --out-dir {args.out_dir}: {exc.strerror or exc}"
        ) from None
    print(f"source:      {args.sentence}")
    print(f"translation: {translation}  ({decoding.describe()})")
    for path in paths:
        print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status (0 ok, 2 user error, 130 Ctrl-C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.sentence.strip():
        parser.error("the sentence is empty")
    check_decoding_args(parser, args)
    if args.dpi <= 0:
        parser.error(f"--dpi must be positive, got {args.dpi}")
    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
