"""`minitx-export`: write a training checkpoint (or a release directory) as a release
directory (`minitx.release`), optionally uploaded to the hub.

The directory's files, what ``--out`` may be and the hub upload are told once, in
docs/guides/export.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from minitx.cli.common import (
    OneLineArgumentParser,
    UsageError,
    add_checkpoint_argument,
    nonempty_path,
    run_cli,
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        description=(
            "Write a minitx checkpoint as a release directory (safetensors weights, config.json, "
            "tokenizer.model, model card README.md) and optionally push it to the Hugging Face hub."
        ),
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--out", required=True, type=nonempty_path, metavar="DIR", help="release directory"
    )
    parser.add_argument(
        "--evaluation",
        type=nonempty_path,
        metavar="FILE",
        help="a minitx-evaluate --json report; its BLEU scores and signatures go into the card",
    )
    parser.add_argument(
        "--push-to-hub",
        metavar="REPO_ID",
        help="then upload the directory to this hub model repo (owner/name; created if absent; "
        "needs `hf auth login` or HF_TOKEN)",
    )
    parser.add_argument(
        "--private", action="store_true", help="create the hub repo as private (--push-to-hub)"
    )
    return parser


def read_evaluation(path: Path) -> dict:
    """The `minitx-evaluate --json` report at `path`."""
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))  # a BOM, as Notepad writes
    except FileNotFoundError:
        raise UsageError(f"--evaluation file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--evaluation {path}: not a readable JSON file ({exc})") from None


def run(args: argparse.Namespace) -> int:
    """Load, write, upload. Raises `UsageError` for input problems."""
    from minitx import release
    from minitx.errors import SourceUnreachableError

    release.check_release_dir(args.out, flag="--out")
    if args.push_to_hub:  # before anything is written
        release.check_repo_id(args.push_to_hub, flag="--push-to-hub")
    evaluation = read_evaluation(args.evaluation) if args.evaluation is not None else None
    loaded = release.load(args.checkpoint)  # its errors are one error line
    try:  # a report of other weights is refused before anything is written
        written = release.save_pretrained(
            loaded, args.out, evaluation=evaluation, evaluation_name=str(args.evaluation)
        )
    except OSError as exc:
        raise UsageError(f"cannot write into --out {args.out}: {exc.strerror or exc}") from None
    for path in written:
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    if args.checkpoint.is_file():
        total = sum(path.stat().st_size for path in written)
        size = args.checkpoint.stat().st_size
        print(f"{total:,} bytes in all, {total / size:.0%} of the checkpoint's {size:,}")
    if args.push_to_hub:
        try:
            url = release.push_to_hub(args.out, args.push_to_hub, private=args.private)
        except (OSError, ValueError) as exc:  # huggingface_hub's errors are OSErrors
            fix = (
                "once the hub can be reached (online)"
                if isinstance(exc, SourceUnreachableError)
                else "log in (`hf auth login` or HF_TOKEN) and check the repo id, then"
            )
            raise UsageError(
                f"pushing {args.out} to the hub repo {args.push_to_hub} failed "
                f"({type(exc).__name__}: {' '.join(str(exc).split())[:300]}); the directory is "
                f"written; {fix} run minitx-export --checkpoint {shlex.quote(str(args.out))} "
                f"--out {shlex.quote(str(args.out))} --push-to-hub {shlex.quote(args.push_to_hub)}"
            ) from None
        print(f"pushed to {args.push_to_hub}: {url}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status (0 ok, 2 user error, 130 Ctrl-C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.private and not args.push_to_hub:  # else it would be dropped without a word
        parser.error("--private applies only with --push-to-hub (a hub repo to create)")
    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
