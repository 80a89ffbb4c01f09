"""The `minitx-translate` command: translate sentences with a trained minitx model.

Its usage (input, output, the n-best and alignment formats, decoding, exit status) is written
once, in the parser's description and epilog: see ``minitx-translate --help`` or the
documentation site's command-line reference, which is generated from them. This module reads
the input (SENTENCE arguments, a file, a terminal prompt or a stream, in chunks), translates
it with a `minitx.translator.Translator` and writes each chunk before reading on.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import select
import sys
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from minitx.alignment import DEFAULT_LAYER as DEFAULT_ALIGNMENT_LAYER
from minitx.alignment import UNITS as ALIGNMENT_UNITS
from minitx.alignment import AlignmentConfig, format_alignment
from minitx.cli.common import (
    OneLineArgumentParser,
    StoreOnce,
    UsageError,
    add_checkpoint_argument,
    add_decoding_arguments,
    check_decoding_args,
    load_translator,
    path_or_stream,
    positive_int,
    run_cli,
    sentence_progress,
)
from minitx.errors import MissingFileError, OutputError
from minitx.outputs import (
    check_output_file,
    files_read_from,
    is_standard_output,
    same_regular_file,
)
from minitx.textio import (
    atomic_output,
    check_line_ends,
    decode_utf8,
    iter_lines,
    utf8_arguments,
)

if TYPE_CHECKING:  # the inference stack loads lazily (in `run`), so --help stays fast
    from minitx.translator import Progress, Translator

PROMPT = "> "
DESCRIPTION = """\
Translate sentences with a minitx model (--checkpoint: a .ckpt, a release directory or a hub
repo id). Prints one translation per input line, in input order.

input, in this order: SENTENCE arguments; or --input FILE (UTF-8, one sentence per line); or
standard input when neither is given: an interactive "> " prompt when it is a terminal (each
line is translated as it is entered; Ctrl-D on an empty line ends); otherwise (a pipe or a
redirected file) it is streamed: read in chunks of at most --buffer-size lines (default: the
batch size), each translated and written (and flushed) before the next is read. A chunk is
handed on as soon as it is full or no further line is waiting, so a slow producer's lines
are translated as they arrive, and a fast one's in full batches.

output (standard output, or --output FILE): one translation per input line, in input order;
an empty input line gives an empty output line, so the line counts match. --output FILE is
replaced only when every line is translated (a failure or Ctrl-C leaves an existing FILE as
it was). A sentence longer than the model's positions is cut to fit, with a warning that
counts such lines; every other line is translated as usual. Progress goes to standard error:
a bar (sentences done / total, sentences/s) on a terminal, otherwise one line at the end
(`translated 200 sentences in 19.1 s (10.5 sentences/s)`).

decoding: beam search with --beam 5 by default, the default of every minitx command (better
translations; --beam 1 is greedy decoding, faster). --sample draws from the model's
distribution instead (--temperature, --top-k, --top-p, --seed); with --n-best K it draws K
samples per sentence, listed best score first. --attention hard-argmax (or hard-sample,
seeded by --seed) replaces each row of the cross-attention weights (--hard-attention-scope
all: of every attention) by a one-hot row at one source piece, to see what soft attention is
worth (see minitx.attention).
"""
EPILOG = """\
examples:
  minitx-translate --checkpoint RUN.ckpt "Ein Mann fährt Fahrrad."
  minitx-translate --checkpoint RUN.ckpt --input test.de --output test.hyp.en
  cat test.de | minitx-translate --checkpoint RUN.ckpt --beam 1
  minitx-translate --checkpoint RUN.ckpt              # an interactive prompt
  minitx-translate --checkpoint RUN.ckpt --n-best 3 "Ein Hund rennt."
  minitx-translate --checkpoint RUN.ckpt --sample --top-p 0.9 --seed 1 --n-best 4 "Ein Hund."
  minitx-translate --checkpoint RUN.ckpt --print-alignment "Ein Hund rennt."  # TEXT<TAB>0-0 1-1
  minitx-translate --checkpoint RUN.ckpt --attention hard-argmax "Ein Hund rennt."
  producer | minitx-translate --checkpoint RUN.ckpt   # streams: prints as the lines arrive

--n-best K prints up to K lines per input line, best first (with --sample: K samples):
  INDEX<TAB>SCORE<TAB>TRANSLATION  (INDEX: the 0-based number of the input line; SCORE: the
  length-normalised log-probability beam search ranks by, see minitx.decoding.beam_search;
  an empty input line gives the single line INDEX<TAB>0.0000<TAB>)
--print-alignment appends <TAB>ALIGNMENT to each translation: SRC-TGT pairs of 0-based
  indices (the Pharaoh format of fast_align and fairseq's A- lines), one per target word
  (--alignment-unit piece: per sentencepiece piece), read off the cross-attention of
  --alignment-layer averaged over the heads (see minitx.alignment); the output keeps one line
  per input line (`cut -f2` gives the alignments)

exit status: 0 ok; 2 a usage or input error (missing, corrupt or foreign checkpoint,
unreadable input file, invalid UTF-8 in a file, on standard input or in an argument,
unwritable output): one "error: ..." line on standard error, no traceback; 130 interrupted
"""

_DEFAULT_LAYER_NAME = "mean" if DEFAULT_ALIGNMENT_LAYER is None else str(DEFAULT_ALIGNMENT_LAYER)


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        prog="minitx-translate",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    parser.add_argument(
        "sentences", nargs="*", metavar="SENTENCE", help="source sentences to translate"
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--input",
        type=path_or_stream,
        action=StoreOnce,
        metavar="FILE",
        help="read sentences from FILE (UTF-8, one per line, gzip-compressed or not; '-': "
        "standard input, which is read when no SENTENCE is given)",
    )
    parser.add_argument(
        "--output",
        type=path_or_stream,
        action=StoreOnce,
        metavar="FILE",
        help="write translations to FILE (default, or '-': standard output)",
    )
    add_decoding_arguments(parser)
    parser.add_argument(
        "--n-best",
        type=int,
        default=None,
        metavar="K",
        help="print the K best translations per sentence with their scores (K <= --beam; "
        "with --sample: K samples)",
    )
    parser.add_argument(
        "--buffer-size",
        type=positive_int,
        metavar="N",
        help="piped standard input: translate at most N lines at a time, writing each chunk "
        "before reading on (default: --batch-size)",
    )
    alignment = parser.add_argument_group(
        "alignment", "word alignments from the cross-attention (see minitx.alignment)"
    )
    alignment.add_argument(
        "--print-alignment",
        action="store_true",
        help="append <TAB>SRC-TGT index pairs (0-based, one per target word) to each translation",
    )
    alignment.add_argument(
        "--alignment-layer",
        type=_layer_or_mean,
        default=None,
        metavar="L",
        help="decoder layer whose cross-attention aligns (negative: from the last), or 'mean' "
        f"of all layers (default: {_DEFAULT_LAYER_NAME})",
    )
    alignment.add_argument(
        "--alignment-head",
        type=_layer_or_mean,
        default=None,
        metavar="H",
        help="one head of that layer, or 'mean' of the heads (default: mean)",
    )
    alignment.add_argument(
        "--alignment-unit",
        choices=ALIGNMENT_UNITS,
        default=None,
        help="what the indices count: whitespace words or sentencepiece pieces (default: word)",
    )
    return parser


def _layer_or_mean(text: str) -> int | str:
    """``--alignment-layer`` / ``--alignment-head``: an integer or ``mean``."""
    if text == "mean":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'mean', got {text!r}") from None


def alignment_from_args(args: argparse.Namespace) -> AlignmentConfig:
    """The `AlignmentConfig` the ``--alignment-*`` options ask for (its defaults for the
    others; ``mean`` is None there)."""
    given = {name: getattr(args, f"alignment_{name}") for name in ("layer", "head", "unit")}
    return AlignmentConfig(
        **{
            name: None if value == "mean" else value
            for name, value in given.items()
            if value is not None
        }
    )


def input_source(args: argparse.Namespace) -> str:
    """Where the sentences come from: "arguments" (SENTENCE arguments), "file" (--input), a
    "terminal" (interactive) or a "pipe" (piped standard input). The one place that decides
    it, for the checks and for `run`."""
    if args.sentences:
        return "arguments"
    if args.input is not None:
        return "file"
    if sys.stdin is not None and sys.stdin.isatty():
        return "terminal"
    return "pipe"


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject impossible option combinations (argparse exits with status 2)."""
    check_decoding_args(parser, args, n_best=args.n_best)  # builds args.decoding
    if args.sentences and args.input is not None:
        parser.error("give SENTENCE arguments or --input FILE, not both")
    source = input_source(args)
    if args.buffer_size is not None and source != "pipe":  # else ignored without a word
        reads = {"arguments": "SENTENCE arguments", "file": "--input FILE"}.get(
            source, "a terminal (read line by line)"
        )
        parser.error(f"--buffer-size applies only to piped standard input, not to {reads}")
    chosen = [
        f"--alignment-{name}"
        for name in ("layer", "head", "unit")
        if getattr(args, f"alignment_{name}") is not None
    ]
    if chosen and not args.print_alignment:
        verb = "applies" if len(chosen) == 1 else "apply"
        parser.error(f"{', '.join(chosen)} {verb} only with --print-alignment")


def read_input_file(path: Path) -> list[str]:
    """Lines of `path`, read as corpora are (`minitx.textio.iter_lines`): gzip-compressed or
    not, split on ``\\n`` only, ``\\r`` dropped.

    Raises:
        UsageError: the file does not exist.
        DataError: it cannot be read, is a damaged gzip file or is not UTF-8 text (naming the
            file and the 1-based line).
    """
    try:
        return list(iter_lines(path))
    except MissingFileError:
        raise UsageError(f"input file not found: {path}") from None


def _line_chunks(stream: BinaryIO, size: int) -> Iterator[list[bytes]]:
    """Raw lines of `stream` (each with its ``\\n``, but a last one without) in chunks of at
    most `size`: a chunk is handed on when it is full, when no further line is waiting (the
    writer pauses), or at the end.

    Waiting lines are found with ``select`` on the file descriptor; where that does not work
    (no descriptor, Windows pipes) chunks are simply `size` lines (or the rest).
    """
    try:
        fd = stream.fileno()
        select.select([fd], [], [], 0)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is None:
        chunk: list[bytes] = []
        for line in iter(stream.readline, b""):
            chunk.append(line)
            if len(chunk) == size:
                yield chunk
                chunk = []
        if chunk:
            yield chunk
        return

    lines: list[bytes] = []
    partial, eof = b"", False

    def read_some() -> None:  # one read(2): whatever the pipe holds, up to 64 KiB
        nonlocal partial, eof
        data = os.read(fd, 1 << 16)
        if not data:
            eof = True
            if partial:
                lines.append(partial)
                partial = b""
            return
        *complete, partial = (partial + data).split(b"\n")
        lines.extend(line + b"\n" for line in complete)

    while lines or not eof:
        while not lines and not eof:  # block for at least one line
            read_some()
        while len(lines) < size and not eof and select.select([fd], [], [], 0)[0]:
            read_some()  # and take what else is already there, without waiting
        if lines:
            yield lines[:size]
            del lines[:size]


def stdin_chunks(size: int) -> Iterator[list[str]]:
    """The lines of a piped or redirected standard input, in chunks (see `_line_chunks`).

    Raises:
        UsageError: no standard input.
        DataError: invalid UTF-8 (naming the 1-based line).
    """
    stream = sys.stdin
    if stream is None:
        raise UsageError(
            "no input: give SENTENCE arguments, --input FILE, or pipe text to standard input"
        )
    binary = getattr(stream, "buffer", None)
    if binary is None:  # a text stream without bytes beneath (e.g. io.StringIO)
        binary = io.BytesIO(stream.read().encode("utf-8", "surrogateescape"))
    first_line, utf8_before = 1, False
    for chunk in _line_chunks(binary, size):
        if first_line == 1:
            check_line_ends(chunk[0], "<stdin>", "pipe the text through tr '\\r' '\\n'")
        raw = b"\n".join(line.removesuffix(b"\n") for line in chunk)
        text = decode_utf8(raw, "<stdin>", first_line=first_line, utf8_before=utf8_before)
        yield [line.removesuffix("\r") for line in text.split("\n")]
        utf8_before = utf8_before or not text.isascii()  # for a bad byte's advice (O(1))
        first_line += len(chunk)


def format_results(
    translator: Translator,
    lines: Sequence[str],
    args: argparse.Namespace,
    first_index: int = 0,
    progress: Progress | None = None,
) -> list[str]:
    """Translate `lines` (input lines `first_index`, ... counted from 0) and format the output
    lines: plain or n-best, each translation followed by <TAB>ALIGNMENT when asked."""
    common = {"batch_size": args.batch_size, "first_line": first_index + 1, "progress": progress}
    if args.print_alignment:
        aligned = translator.translate_with_alignment(
            lines, args.decoding, alignment=alignment_from_args(args), **common
        )
        results = [
            [(f"{text}\t{format_alignment(pairs)}", score) for text, score, pairs in hyps]
            for hyps in aligned
        ]
    else:
        results = translator.translate_n_best(lines, args.decoding, **common)
    if args.n_best is None:
        return [hyps[0][0] for hyps in results]
    return [
        f"{first_index + i}\t{score:.4f}\t{text}"
        for i, hyps in enumerate(results)
        for text, score in hyps
    ]


def interactive(translator: Translator, args: argparse.Namespace, out: TextIO) -> None:
    """Prompt for sentences on a terminal, translating each line as it is entered, until EOF; a
    line that is not UTF-8 is said in a warning and left out, and the prompt goes on."""
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
        except UnicodeDecodeError as exc:  # the terminal's encoding, read strictly
            byte = f"byte 0x{exc.object[exc.start]:02x}"
            print(
                f"warning: that line is not valid {exc.encoding} ({byte}); type it again",
                file=sys.stderr,
            )
            continue
        try:  # under a C locale the bytes come as lone surrogates: UTF-8 is read back
            (line,) = utf8_arguments({"that line": line}, fix="type it again")
        except UsageError as exc:
            print(f"warning: {exc}", file=sys.stderr)
            continue
        for text in format_results(translator, [line], args, first_index=index):
            print(text, file=out, flush=True)
        index += 1


def check_not_standard_input(output: str | None) -> None:
    """Refuse an output that is the regular file standard input reads (``< f.de --output
    f.de`` replaced the sources with their translations; ``< f.de >> f.de`` read its own
    translations back and never ended).

    Raises:
        OutputError: `output` (or, without it, standard output) is that file.
    """
    stdin = sys.stdin
    if stdin is None:
        return
    if output is not None:
        if is_standard_output(output, stdin):
            raise OutputError(
                f"--output {output} is the file standard input reads; write to another file"
            )
    elif same_regular_file(stdin, sys.stdout):
        raise OutputError(
            "standard output goes to the file standard input reads: the translations would be "
            "read back as sentences; write them to another file"
        )


def run(args: argparse.Namespace) -> int:
    """Read, translate, write. Raises `UsageError` for input problems."""
    if args.output is not None and is_standard_output(args.output):
        args.output = None  # /dev/stdout: through the stream, as `-`
    if args.output is not None:
        inputs = files_read_from(args.checkpoint) + ([args.input] if args.input else [])
        check_output_file(args.output, inputs=inputs)
        from minitx.release import check_not_a_release_file  # with the model's libraries

        check_not_a_release_file(args.output)
    chunks: Iterable[list[str]] | None  # None: interactive
    source = input_source(args)
    if source == "pipe":  # standard input redirected from a file: that file is an input too
        check_not_standard_input(args.output)
    if source == "arguments":
        chunks = [
            utf8_arguments({f"SENTENCE argument {i}": s for i, s in enumerate(args.sentences, 1)})
        ]
    elif source == "file":
        chunks = [read_input_file(args.input)]
    elif source == "terminal":
        chunks = None
    else:
        chunks = stdin_chunks(args.buffer_size or args.batch_size)

    translator = load_translator(args)
    if args.print_alignment:  # before any input is read or translated
        model = translator.model.config
        alignment_from_args(args).check(model.n_decoder_layers, model.n_heads)
    with contextlib.ExitStack() as stack:
        out: TextIO = sys.stdout
        if args.output is not None:  # replaced only once every line is translated
            try:
                out = stack.enter_context(atomic_output(args.output))
            except OSError as exc:
                raise UsageError(
                    f"cannot write --output {args.output}: {exc.strerror or exc}"
                ) from None
        if chunks is None:
            interactive(translator, args, out)
            return 0
        total = sum(len(lines) for lines in chunks) if isinstance(chunks, list) else None
        with sentence_progress(total) as progress:  # on standard error
            index = 0
            for lines in chunks:
                results = format_results(translator, lines, args, index, progress)
                for text in results:
                    print(text, file=out)
                out.flush()  # each chunk's translations leave now, not at the end
                index += len(lines)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    return run_cli(run, args)  # a gone reader (`| head -1`): quiet, status 141


if __name__ == "__main__":
    sys.exit(main())
