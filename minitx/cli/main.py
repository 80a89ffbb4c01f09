"""`minitx <command> [args...]` and `python -m minitx <command>`: one entry for every command."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("minitx.cli.train", "train a Transformer (LightningCLI; --help lists every key)"),
    "translate": ("minitx.cli.translate", "translate sentences, a file or stdin with a checkpoint"),
    "evaluate": ("minitx.cli.evaluate", "score a checkpoint on a corpus split (BLEU, chrF)"),
    "visualize": ("minitx.cli.visualize", "draw the attention maps of one sentence"),
    "ct2": ("minitx.cli.ct2", "export a checkpoint to CTranslate2 (needs minitx[export])"),
    "export": ("minitx.cli.export", "write a checkpoint as a release directory (and to the hub)"),
    "average": ("minitx.cli.average", "average the weights of checkpoints of one model"),
    "demo": ("minitx.cli.demo", "serve a live demo page (needs minitx[demo])"),
    "experiment": ("minitx.cli.experiment", "measure the claims about attention (experiments)"),
}


def usage() -> str:
    """The list of commands."""
    lines = [
        "usage: minitx <command> [args...]   (or python -m minitx <command> ...)",
        "",
        "commands:",
    ]
    lines += [f"  {name:10s} {text}" for name, (_, text) in COMMANDS.items()]
    lines.append("\n`minitx <command> --help` shows a command's options.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to the command named first; exit status 2 for an unknown command."""
    from_sys_argv = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    command = importlib.import_module(COMMANDS[name][0])
    if name == "train":  # LightningCLI exits by itself on errors; main returns the CLI object
        if from_sys_argv:  # LightningCLI reads sys.argv itself (and warns if also given args)
            program = Path(sys.argv[0]).name
            program = "python -m minitx" if program == "__main__.py" else program
            sys.argv[:] = [f"{program} train", *rest]
            command.main(None)
        else:
            command.main(rest)
        return 0
    return command.main(rest)


if __name__ == "__main__":
    sys.exit(main())
