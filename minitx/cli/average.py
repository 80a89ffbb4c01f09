"""`minitx-average`: average the weights of several checkpoints of one model into a new one
(`minitx.averaging.average_checkpoints`), as ``minitx-train --averaging.last_n N`` does for the
last epochs of a run; docs/guides/training.md (Checkpoint averaging) shows its use.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

from minitx.cli.common import (
    OneLineArgumentParser,
    UsageError,
    file_path,
    nonempty_path,
    run_cli,
)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        description=(
            "Average the weights of minitx checkpoints of one model (e.g. the last epochs of a "
            "run) into a new checkpoint."
        ),
    )
    parser.add_argument(
        "checkpoints",
        nargs="+",
        type=nonempty_path,
        metavar="CKPT",
        help="the .ckpt files to average",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=file_path,
        metavar="FILE",
        help="the averaged .ckpt to write",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out when it exists already (only a checkpoint is ever replaced)",
    )
    return parser


def run(args: argparse.Namespace) -> int:
    """Average and write. Raises `UsageError` for input problems."""
    from minitx.averaging import average_checkpoints
    from minitx.checkpoint import write_checkpoint
    from minitx.outputs import check_output_file

    out: Path = args.out
    # a directory, no directory; the checkpoint check is below
    check_output_file(out, inputs=args.checkpoints, flag="--out", text=False)
    if out.exists() and not out.is_file():  # reading /dev/zero as a zip ran out of memory
        raise UsageError(
            f"--out {out} is a device or a pipe, not a file; a checkpoint is written to a file "
            "of its own: give a file name"
        )
    if out.exists() and not args.overwrite:
        raise UsageError(f"--out {out} exists; choose another name or pass --overwrite")
    if out.exists() and not _is_torch_file(out):  # a user's script, say: never replaced
        raise UsageError(
            f"--out {out} is not a checkpoint (not a file torch.save wrote); --overwrite "
            "replaces only a checkpoint: choose another name or move the file away"
        )
    averaged = average_checkpoints(args.checkpoints)  # its errors (MinitxError) are one line
    try:
        write_checkpoint(averaged, out)
    except OSError as exc:  # else the message would name the temporary file beside `out`
        raise UsageError(f"cannot write --out {out}: {exc.strerror or exc}") from None
    files = f"{len(args.checkpoints)} checkpoint{'s' if len(args.checkpoints) > 1 else ''}"
    print(f"averaged {files} into {out} ({out.stat().st_size:,} bytes)")
    if len(args.checkpoints) == 1:  # a glob that matched one file, most often
        print(
            f"note: one checkpoint given: {out} holds its weights alone, nothing averaged",
            file=sys.stderr,
        )
    return 0


def _is_torch_file(path: Path) -> bool:
    """Whether `path` is a zip archive as torch.save writes it (its pickle, ``*/data.pkl``)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        return False


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status (0 ok, 2 user error, 130 Ctrl-C)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
