"""Export a minitx checkpoint to CTranslate2 (fast CPU/GPU inference, int8 weights).

Examples:
    minitx-ct2 --checkpoint RUN.ckpt --out RUN-ct2
    minitx-ct2 --checkpoint RUN.ckpt --out RUN-ct2-int8 --quantization int8
    minitx-ct2 --checkpoint RUN.ckpt --out RUN-ct2 --force        # replace an earlier export

What the directory holds and how to translate with it: `minitx.extras.ctranslate2.export`
and the guide (docs/guides/export.md, "CTranslate2"). Needs ``pip install 'minitx[export]'``.

Exit status: 0 ok; 2 a usage or input error (missing or foreign checkpoint, a model setting
CTranslate2 cannot express, an existing ``--out`` without ``--force``, ctranslate2 not
installed), with one ``error: ...`` line; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys

from minitx.cli.common import OneLineArgumentParser, add_checkpoint_argument, nonempty_path, run_cli
from minitx.errors import OutputError
from minitx.textio import NO_ROOM


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        prog="minitx-ct2",
        description=(
            "Convert a minitx checkpoint into a CTranslate2 model directory, with its "
            "sentencepiece model beside it."
        ),
    )
    add_checkpoint_argument(parser)
    parser.add_argument("--out", required=True, type=nonempty_path, help="model directory to write")
    parser.add_argument(
        "--quantization",
        default="float32",
        metavar="TYPE",
        help="weight type stored in model.bin: float32 (default), int8, int8_float32, "
        "int8_float16, int8_bfloat16, int16, float16 or bfloat16; int8 is ~4x smaller",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace --out if it exists and minitx wrote it (never a directory of your own, "
        "one you added files to, the current one or its parents, or one that holds "
        "--checkpoint)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Convert; a missing or unusable checkpoint is a `MinitxError`, which `run_cli` reports
    as one line."""
    from minitx.extras.ctranslate2.export import export_ctranslate2

    try:
        out = export_ctranslate2(
            args.checkpoint, args.out, quantization=args.quantization, force=args.force
        )
    except OSError as exc:  # CTranslate2's writer names no file: name the flag
        if exc.errno not in NO_ROOM:
            raise
        raise OutputError(
            f"cannot write into --out {args.out}: {exc.strerror or exc}; free some space there or "
            "write somewhere else"
        ) from None
    files = ", ".join(sorted(p.name for p in out.iterdir()))
    print(f"wrote {out} ({args.quantization}): {files}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status (0 ok, 2 user error, 130 Ctrl-C)."""
    args = build_parser().parse_args(argv)
    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
