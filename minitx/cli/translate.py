"""Translate sentences with a trained minitx checkpoint.

Examples:
    minitx-translate --checkpoint RUN.ckpt "Ein Mann fährt Fahrrad."
    minitx-translate --checkpoint RUN.ckpt --input test.de --output test.hyp.en
    cat test.de | minitx-translate --checkpoint RUN.ckpt --beam 1
    minitx-translate --checkpoint RUN.ckpt             # interactive prompt
    minitx-translate --checkpoint RUN.ckpt --n-best 3 "Ein Hund rennt."

Input, in this order: SENTENCE arguments; or ``--input FILE`` (UTF-8, one sentence per line);
or standard input when neither is given: read to the end when it is piped or redirected, an
interactive ``> `` prompt when it is a terminal (each line is translated as it is entered;
Ctrl-D on an empty line ends).

Output (standard output, or ``--output FILE``): one translation per input line, in input order.
``--output FILE`` is replaced only when every line is translated (a failure or Ctrl-C leaves
an existing FILE as it was). A sentence longer than the model's positions is cut to fit, with
a warning that counts such lines; every other line is translated as usual.
An empty input line gives an empty output line, so the line counts of input and output match.
Progress goes to standard error: a bar (sentences done / total, sentences/s) on a terminal,
otherwise one line at the end (``translated 200 sentences in 19.1 s (10.5 sentences/s)``).
With ``--n-best K`` each input line gives up to K lines ``INDEX<TAB>SCORE<TAB>TRANSLATION``,
best first: INDEX is the 0-based number of the input line, SCORE the length-normalised
log-probability that beam search ranks by (see ``minitx.decoding.beam_search``). Beam search
returns K hypotheses per sentence; an empty input line gets a single line ``INDEX<TAB>0.0000<TAB>``.

Decoding: beam search with ``--beam 5`` by default, the default of every minitx command
(better translations; ``--beam 1`` is greedy decoding, faster).

Exit status: 0 on success; 2 on a usage or input error (missing, corrupt or foreign
checkpoint, unreadable input file, invalid UTF-8 in a file, on standard input or in an argument,
unwritable output), with a one-line ``error: ...`` message on standard error and no traceback;
130 when interrupted with Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from minitx.cli.common import (
    UsageError,
    add_decoding_arguments,
    check_arguments_utf8,
    check_decoding_args,
    decoding_from_args,
    load_translator,
    run_cli,
    sentence_progress,
)
from minitx.decoding import DEFAULT_BEAM_SIZE
from minitx.textio import atomic_output, decode_utf8

if (
    TYPE_CHECKING
):  # torch and the inference stack load lazily (load_translator), so --help stays fast
    from minitx.translator import Progress, Translator

PROMPT = "> "
EPILOG = """\
examples:
  translate.py --checkpoint RUN.ckpt "Ein Mann fährt Fahrrad."
  translate.py --checkpoint RUN.ckpt --input test.de --output test.hyp.en
  cat test.de | translate.py --checkpoint RUN.ckpt --beam 1
  translate.py --checkpoint RUN.ckpt --n-best 3 "Ein Hund rennt."

--n-best K prints up to K lines per input line, best first:
  INDEX<TAB>SCORE<TAB>TRANSLATION  (INDEX: 0-based input line; SCORE: length-normalised
  log-probability; an empty input line gives the single line INDEX<TAB>0.0000<TAB>)

exit status: 0 ok, 2 usage or input error (message on stderr), 130 interrupted
"""
DEFAULT_BEAM = DEFAULT_BEAM_SIZE


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        description=(
            "Translate sentences with a minitx checkpoint: SENTENCE arguments, --input FILE, or "
            "standard input (an interactive prompt when it is a terminal). Prints one translation "
            "per input line, in input order."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    parser.add_argument(
        "sentences", nargs="*", metavar="SENTENCE", help="source sentences to translate"
    )
    parser.add_argument(
        "--checkpoint", required=True, type=Path, help="self-contained minitx .ckpt file"
    )
    parser.add_argument(
        "--input", type=Path, metavar="FILE", help="read sentences from FILE (UTF-8, one per line)"
    )
    parser.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help="write translations to FILE (default: standard output)",
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="K",
        help="print the K best translations per sentence with their scores (K <= --beam)",
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject impossible option combinations (argparse exits with status 2)."""
    check_decoding_args(parser, args)
    if args.n_best is not None and not 1 <= args.n_best <= args.beam:
        parser.error(f"--n-best must be between 1 and --beam ({args.beam}), got {args.n_best}")
    if args.sentences and args.input is not None:
        parser.error("give SENTENCE arguments or --input FILE, not both")


def decode_lines(data: bytes, name: str) -> list[str]:
    """UTF-8 bytes -> lines: split on ``\\n`` only, a final newline ends the last line, ``\\r``
    is dropped.

    Raises:
        UsageError: invalid UTF-8, naming `name` and the 1-based line.
    """
    try:
        text = decode_utf8(data, name)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_input_file(path: Path) -> list[str]:
    """Lines of `path` (see `decode_lines`)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"input file not found: {path}") from None
    except OSError as exc:
        raise UsageError(f"cannot read input file {path}: {exc.strerror or exc}") from None
    return decode_lines(data, str(path))


def read_stdin() -> list[str]:
    """All lines of a piped / redirected standard input."""
    stream = sys.stdin
    if stream is None:
        raise UsageError(
            "no input: give SENTENCE arguments, --input FILE, or pipe text to standard input"
        )
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        return decode_lines(buffer.read(), "<stdin>")
    return decode_lines(stream.read().encode("utf-8", "surrogateescape"), "<stdin>")


def check_output(path: Path | None) -> None:
    """Fail before translating when the output file cannot be created."""
    if path is None:
        return
    if path.is_dir():
        raise UsageError(f"--output {path} is a directory")
    if not path.parent.is_dir():
        raise UsageError(f"--output {path}: directory {path.parent} does not exist")


def format_results(
    translator: Translator,
    lines: Sequence[str],
    args: argparse.Namespace,
    first_index: int = 0,
    progress: Progress | None = None,
) -> list[str]:
    """Translate `lines` and format the output lines (plain or n-best)."""
    batching = {"batch_size": args.batch_size, "progress": progress}
    if args.n_best is None:
        return translator.translate(lines, decoding_from_args(args), **batching)
    results = translator.translate_n_best(
        lines, decoding_from_args(args, n_best=args.n_best), **batching
    )
    return [
        f"{first_index + i}\t{score:.4f}\t{text}"
        for i, hyps in enumerate(results)
        for text, score in hyps
    ]


def interactive(translator: Translator, args: argparse.Namespace, out: TextIO) -> None:
    """Prompt for sentences on a terminal, translating each line as it is entered, until EOF."""
    print("Type a sentence and press Enter; Ctrl-D ends.", file=sys.stderr)
    index = 0
    while True:
        try:
            if out is sys.stdout and sys.stdout.isatty():
                line = input(PROMPT)
            else:  # keep the prompt out of redirected output
                print(PROMPT, end="", file=sys.stderr, flush=True)
                line = input()
        except EOFError:
            print(file=sys.stderr)
            return
        for text in format_results(translator, [line], args, first_index=index):
            print(text, file=out, flush=True)
        index += 1


def run(args: argparse.Namespace) -> int:
    """Read, translate, write. Raises `UsageError` for input problems."""
    check_output(args.output)
    if args.sentences:
        check_arguments_utf8({f"SENTENCE argument {i}": s for i, s in enumerate(args.sentences, 1)})
        lines: list[str] | None = list(args.sentences)
    elif args.input is not None:
        lines = read_input_file(args.input)
    elif sys.stdin is not None and sys.stdin.isatty():
        lines = None  # interactive
    else:
        lines = read_stdin()

    translator = load_translator(args.checkpoint, device=args.device, bf16=args.bf16)
    with contextlib.ExitStack() as stack:
        out: TextIO = sys.stdout
        if args.output is not None:  # replaced only once every line is translated
            try:
                out = stack.enter_context(atomic_output(args.output))
            except OSError as exc:
                raise UsageError(
                    f"cannot write --output {args.output}: {exc.strerror or exc}"
                ) from None
        if lines is None:
            interactive(translator, args, out)
        else:
            with sentence_progress(len(lines)) as progress:  # on standard error
                results = format_results(translator, lines, args, progress=progress)
            for text in results:
                print(text, file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    try:
        return run_cli(run, args)
    except BrokenPipeError:  # e.g. `... | head -1`: the reader has gone, nothing left to do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
