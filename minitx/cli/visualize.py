"""`minitx-visualize`: translate one sentence with a checkpoint and draw its attention maps:
PNG heatmaps per attention kind and layer and the HTML viewer ``attention.html`` (`minitx.viz`)
and, with ``--attributions``, the gradient attributions of the source pieces
(`minitx.attribution`).

The user's side (the files written, ``--out-dir`` written whole as every minitx output
directory is, by `minitx.outputs`) is told once, in docs/guides/attention-maps.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minitx.attribution import DEFAULT_IG_STEPS, METHODS, check_ig_steps, check_methods
from minitx.cli.common import (
    OneLineArgumentParser,
    UsageError,
    add_checkpoint_argument,
    add_decoding_arguments,
    check_decoding_args,
    decoding_label,
    each_warning_once,
    load_translator,
    nonempty_path,
    positive_int,
    refuse_repeats,
    run_cli,
)
from minitx.errors import ConfigError
from minitx.maps import KINDS
from minitx.outputs import check_output_dir, written_whole
from minitx.textio import utf8_arguments
from minitx.viz import DEFAULT_DPI, visualize
from minitx.viz.common import check_dpi

OUTPUT_KIND = "attention-maps"
"""What an output directory's `minitx.outputs.MARKER` says it holds."""
LARGE_PAGE_BYTES = 50_000_000
"""An attention.html above this gets a note: its maps grow with the sentence's length squared
(a 10,800-character line made a 230 MB page), more than a browser opens comfortably."""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        description=(
            "Translate SENTENCE with a minitx checkpoint and write its attention maps as PNG "
            "heatmaps (per kind and layer) and a standalone HTML viewer."
        ),
    )
    parser.add_argument("sentence", metavar="SENTENCE", help="source sentence to translate")
    parser.one_positional = "SENTENCE"
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--out-dir",
        type=nonempty_path,
        default=Path("attn"),
        help="output directory, new or empty (default: attn/)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace --out-dir when an earlier minitx-visualize wrote it (and you added no "
        "file to it)",
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
    parser.add_argument(
        "--attributions",
        metavar="METHODS",
        help="also show gradient attributions of the source pieces beside cross-attention: "
        f"`all`, or comma-separated methods among {', '.join(METHODS)} (saliency, input x "
        "gradient, integrated gradients); one PNG each, "
        "attribution_METHOD.png, and one more kind each in the viewer. Off by default: "
        "integrated gradients runs the model --ig-steps times per sentence and one backward "
        "pass per target piece",
    )
    parser.add_argument(
        "--ig-steps",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"quadrature nodes of integrated gradients (default: {DEFAULT_IG_STEPS})",
    )
    add_decoding_arguments(parser, what="of the translation whose maps are drawn", batch_size=False)
    return parser


def _shorten(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def run(args: argparse.Namespace) -> int:
    """Load, translate, draw, write. Raises `UsageError` for input problems."""
    [args.sentence] = utf8_arguments({"SENTENCE": args.sentence}, fix="set a UTF-8 locale")
    out = args.out_dir
    empty = out.is_dir() and not any(out.iterdir())
    inputs = [args.checkpoint] if args.checkpoint.exists() else []  # else a hub repo id
    force = args.force or empty
    check_output_dir(out, inputs=inputs, force=force, flag="--out-dir", kind=OUTPUT_KIND)
    translator = load_translator(args)  # a hard --attention: one-hot maps
    decoding = args.decoding
    scores = None
    with each_warning_once():  # the maps and the attributions read the sentence each
        maps = translator.attention(args.sentence, decoding=decoding)  # of the generated pieces
        if args.methods:
            found = translator.attributions(
                args.sentence, methods=args.methods, ig_steps=args.ig_steps, decoding=decoding
            )  # decodes the same translation again (decoding is deterministic)
            if found.predicted_tokens != maps.predicted_tokens:
                raise RuntimeError("the attributions and the maps read different translations")
            scores = found.scores
    translation = maps.translation()
    try:
        with written_whole(out, OUTPUT_KIND) as tmp:
            paths = visualize(
                maps,
                tmp,
                kinds=args.kinds,
                html_viewer=not args.no_html,
                dpi=args.dpi,
                title=f"minitx attention: {_shorten(args.sentence)} \u2192 {_shorten(translation)}",
                attributions=scores,
            )
    except OSError as exc:
        raise UsageError(f"cannot write into --out-dir {out}: {exc.strerror or exc}") from None
    print(f"source:      {args.sentence}")
    label = decoding_label(decoding, args)
    print(f"translation: {translation}  ({label})")
    for path in paths:
        print(f"wrote {out / path.relative_to(tmp)}")
    if not args.no_html:
        page = out / paths[-1].relative_to(tmp)  # `visualize` returns the page last
        size = page.stat().st_size
        if size > LARGE_PAGE_BYTES:
            print(
                f"note: {page} is {size / 1e6:,.0f} MB, more than a browser opens comfortably "
                "(the maps grow with the sentence's length squared); the PNG files hold the same "
                "maps, and --no-html leaves the page out",
                file=sys.stderr,
            )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status (0 ok, 2 user error, 130 Ctrl-C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.sentence.strip():
        parser.error("the sentence is empty")
    check_decoding_args(parser, args)  # builds args.decoding
    refuse_repeats(parser, "--kinds", args.kinds, "kind")
    try:
        check_dpi(args.dpi)
    except ValueError as exc:  # "dpi must be ...": "--dpi must be ..."
        parser.error(f"--{exc}")
    args.methods = ()
    if args.attributions is not None:
        names = [m.strip() for m in args.attributions.split(",")]
        if "all" in names and len(names) > 1:  # all is every method: another beside it is moot
            parser.error(f"--attributions {args.attributions}: give all alone, or some methods")
        refuse_repeats(parser, "--attributions", names, "method")  # as --kinds does
        try:
            args.methods = check_methods(METHODS if names == ["all"] else names)
        except ConfigError as exc:
            parser.error(f"--attributions: {exc}, or all")
    if args.ig_steps is not None and "ig" not in args.methods:  # else ignored without a word
        parser.error("--ig-steps sets integrated gradients: add --attributions ig (or all)")
    args.ig_steps = DEFAULT_IG_STEPS if args.ig_steps is None else args.ig_steps
    try:  # now, not after the translation
        check_ig_steps(args.ig_steps)
    except ConfigError as exc:  # "ig_steps must be ...": "--ig-steps must be ..."
        parser.error(str(exc).replace("ig_steps", "--ig-steps", 1))
    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
