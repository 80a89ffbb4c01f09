"""The `minitx-evaluate` command: score a trained minitx model on a corpus split.

Its usage (the corpus, the scores printed, the hypothesis files, exit status) is written once,
in the parser's description and epilog: see ``minitx-evaluate --help`` or the documentation
site's command-line reference, which is generated from them. This module reads the split
(`minitx.evaluation.load_split`), translates it with a `minitx.translator.Translator` once per
decoding, scores it with sacreBLEU (`minitx.evaluation`) and writes the hypotheses and the
JSON report.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from minitx.cli.common import (
    OneLineArgumentParser,
    UsageError,
    add_checkpoint_argument,
    add_decoding_arguments,
    attention_from_args,
    beam_of,
    check_decoding_args,
    decoding_label,
    each_warning_once,
    file_path,
    hub_verbosity,
    load_translator,
    path_or_stream,
    positive_int,
    run_cli,
    sentence_progress,
)
from minitx.outputs import check_output_file, files_read_from, is_standard_output
from minitx.textio import without_surrogates, write_text_atomic

if TYPE_CHECKING:  # the inference stack (torch, sacreBLEU) loads lazily: --help stays fast
    from minitx.evaluation import Split

DEFAULT_LANGS = ("de", "en")
SPLITS = ("test", "validation", "train")
SPLIT_NAME = re.compile(r"\w[\w.-]*")
"""A ``--split``: one of `SPLITS` or the stem of a file pair (no path, no braces)."""
DESCRIPTION = """\
Translate a corpus split with a minitx model (--checkpoint: a .ckpt, a release directory or a
hub repo id) and score it: sacreBLEU (cased, tokenized as the target language needs) with its
signature, lowercased BLEU, chrF, the decoding time and sentences per second.

corpus: --data takes anything minitx.data.load_parallel_corpus reads (a directory of
{split}.{lang}[.gz] files, a {split} jsonl pattern, builtin:toy, a hub id) with the loader's
default split names. The default is the Multi30k hub id, which MINITX_DATA_DIR (when set)
replaces by a local directory, as in training. The languages default to the ones stored in
the checkpoint (de -> en when it has none). Pairs with an empty side are not scored and are
counted, as in training (minitx.data.clean_pairs), so every score covers all other pairs;
their line in the hypotheses file is empty, so that file stays line-aligned with the source.

output: standard output gets two lines per beam size: the summary, starting with the
decoding (`greedy: BLEU ... | signature`, `beam 5 (alpha 1): BLEU ...` or, with a hard
--attention, `greedy, hard-argmax cross-attention: BLEU ...`), then sacreBLEU's detailed
BLEU (n-gram precisions, brevity penalty, length ratio, lengths) with chrF and its
signature. Notes (corpus, pair counts, hypothesis files) and progress go to standard error: a
progress bar on a terminal, otherwise one line per decoding such as `greedy: translated 1000
sentences in 5.7 s (175.4 sentences/s)`. The hypotheses of each decoding are written to
--hyp-out (default: next to the checkpoint, <checkpoint stem>.<split>.<decoding>[.bf16].hyp,
<decoding> being greedy, beam<N> or sample, the names training uses too, with .<corpus>
(the last part of --data, when given, and for a local directory six hex digits of its path,
e.g. .iwslt-3fa2c1), .first<L> under a --limit L below the split's size
and .<src>-<tgt> for a language pair other than the checkpoint's before <decoding>, and
.<mode>-<scope> after it under a hard --attention, e.g. greedy.hard-argmax-cross), one line
per line of the split's source file, in order (empty for a pair with an empty side). --json
FILE writes every figure (and the file names) as JSON; --json - writes it to standard output,
and the summary lines to standard error.
Output files are replaced only once they are complete.
"""
EPILOG = """\
examples:
  minitx-evaluate --checkpoint RUN.ckpt                   # Multi30k test split, beam 5
  minitx-evaluate --checkpoint RUN.ckpt --beam 1 5        # greedy vs beam 5
  minitx-evaluate --checkpoint RUN.ckpt --sample --top-p 0.9 --seed 1   # one sample each
  minitx-evaluate --checkpoint RUN.ckpt --beam 1 --attention hard-argmax   # hard cross-attention
  minitx-evaluate --checkpoint RUN.ckpt --beam 1 --attention hard-sample --hard-attention-scope all
  minitx-evaluate --checkpoint RUN.ckpt --data builtin:toy --split validation --limit 5
  MINITX_DATA_DIR=/path/to/multi30k/data/task1/raw minitx-evaluate --checkpoint RUN.ckpt

standard output, per beam size: `greedy: BLEU ... | <sacreBLEU signature>`, then
`  BLEU = 39.55 71.2/46.3/... (BP = ... ratio = ... hyp_len = ... ref_len = ...) | chrF2 ...`

exit status: 0 ok; 2 a usage or input error (bad checkpoint, missing corpus, unreadable
files): one "error: ..." line on standard error, no traceback; 130 interrupted
"""


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = OneLineArgumentParser(
        prog="minitx-evaluate",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EPILOG,
    )
    add_checkpoint_argument(parser)
    parser.add_argument(
        "--data",
        metavar="DIR_OR_HUB_ID",
        help="corpus: directory of {split}.{lang}[.gz] files, a {split} jsonl pattern, "
        "builtin:toy or a hub id (default: minitx.data.DEFAULT_SOURCE, the Multi30k hub id; "
        "MINITX_DATA_DIR replaces a hub id)",
    )
    parser.add_argument(
        "--split",
        default="test",
        metavar="SPLIT",
        help=f"split to translate: {', '.join(SPLITS)} (in a directory: Multi30k's file names, "
        "e.g. test_2016_flickr.de, else the split's own, test.de; .gz optional), or any file "
        "stem NAME of NAME.<src-lang> / NAME.<tgt-lang> in --data DIR, to score any file pair "
        "(default: test)",
    )
    parser.add_argument("--src-lang", help="source language (default: the checkpoint's, else de)")
    parser.add_argument("--tgt-lang", help="target language (default: the checkpoint's, else en)")
    add_decoding_arguments(parser, several_beams=True)
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="N",
        help="use only the first N lines of the split (quick checks)",
    )
    parser.add_argument(
        "--hyp-out",
        type=file_path,
        metavar="PATH",
        help="hypotheses file; must contain {beam} when several beam sizes are given "
        "(default: <checkpoint dir>/<checkpoint stem>.<split>.<greedy|beamN>[.bf16].hyp, beside a "
        "release directory, in the current directory for a hub repo id)",
    )
    parser.add_argument(
        "--json",
        metavar="FILE",
        help="also write the results to FILE as JSON; - writes them to stdout instead of the "
        "summary lines, which go to stderr (./- is a file called -)",
    )
    return parser


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Reject impossible values (argparse exits with status 2)."""
    check_decoding_args(parser, args)  # builds args.decodings
    for flag, lang in (("--src-lang", args.src_lang), ("--tgt-lang", args.tgt_lang)):
        if lang is not None and not lang.strip():  # it fell back to the default without a word
            parser.error(f"{flag} is empty; give a language code such as de, or leave it out")
    if args.src_lang is not None and args.src_lang == args.tgt_lang:  # before the model loads
        parser.error(
            f"--src-lang and --tgt-lang are both {args.src_lang!r}: give two different languages"
        )
    if not SPLIT_NAME.fullmatch(args.split):
        parser.error(
            f"--split {args.split!r}: give {', '.join(SPLITS)} or a file stem (letters, digits, "
            "'_', '-', '.')"
        )
    if args.json is not None and not args.json.strip():  # else the current directory
        parser.error("--json is empty; give a file name, or - for standard output")
    if args.json is not None:  # a name ending in / (kept as text: - is standard output)
        try:
            path_or_stream(args.json)
        except argparse.ArgumentTypeError as exc:
            parser.error(f"argument --json: {exc}")
    if args.hyp_out is not None and str(args.hyp_out) == "-":  # else a file named "-"
        parser.error(
            "--hyp-out -: the hypotheses go to a file (standard output carries the scores); "
            "give a file name, or --json - for the scores as JSON"
        )
    if args.hyp_out is not None and is_standard_output(args.hyp_out, pipe=True):
        parser.error(  # written through, the hypotheses came before the JSON of --json -
            f"--hyp-out {args.hyp_out} is the pipe or terminal this command's standard output "
            "goes to, which carries the scores; give a file name, or --json - for the scores "
            "as JSON"
        )
    if args.hyp_out is not None and len(set(args.beam)) > 1 and "{beam}" not in str(args.hyp_out):
        parser.error("--hyp-out must contain {beam} when several --beam values are given")
    unknown = re.findall(r"\{[^{}]*\}", str(args.hyp_out or "").replace("{beam}", ""))
    if unknown:  # a typo such as {beams} would otherwise be written into the file name
        parser.error(f"--hyp-out: unknown placeholder {unknown[0]}; only {{beam}} is replaced")


def hypothesis_path(args: argparse.Namespace, beam: int, pair: str = "") -> Path:
    """Where the hypotheses of one beam size go; `pair` (e.g. "fr-en") names a language pair
    other than the checkpoint's, so that its file does not replace the checkpoint's own."""
    if args.hyp_out is not None:  # {beam}: the search's width, 1 for --strategy greedy
        width = args.decodings[beam].width  # (the key is the unused default --beam there)
        return Path(str(args.hyp_out).replace("{beam}", str(width)))
    infix = f".{data_tag(args.data)}" if args.data is not None else ""
    infix += f".first{args.limit}" if args.limit is not None else ""
    infix += f".{pair}" if pair else ""
    tag = args.decodings[beam].file_tag
    if args.attention != "soft":  # e.g. greedy.hard-argmax-cross, greedy.hard-sample-all-seed2
        settings = attention_from_args(args)
        tag += f".{args.attention}-{settings['scope']}"
        tag += f"-seed{settings['seed']}" if args.attention == "hard-sample" else ""
    if args.bf16:  # bf16 decoding may differ from fp32: never overwrite the fp32 file
        tag += ".bf16"
    local = args.checkpoint.exists()  # else a hub repo id: write into the current directory
    # absolute: `--checkpoint .` in a release had no stem, and its parent was the release
    # itself (links are not followed: the file goes beside the name given)
    checkpoint = Path(os.path.abspath(args.checkpoint)) if local else args.checkpoint
    name = f"{checkpoint.stem}.{args.split}{infix}.{tag}.hyp"
    return (checkpoint.parent if local else Path()) / name


def data_tag(data: str) -> str:
    """A file-name part naming ``--data`` (``/corpora/iwslt`` -> "iwslt-3fa2c1", ``builtin:toy``
    -> "builtin_toy"), so that scoring another corpus's split of the same name does not replace
    the hypotheses of the default corpus. A local directory is named by its last part and six
    hex digits of its absolute path (two corpora in folders of one name are two files); one
    given as ``.`` or ``..`` by its own name."""
    parts = [part for part in Path(data).parts if "{" not in part]  # not a {split} pattern
    where = Path(*parts) if parts else Path()
    if (not parts or parts[-1] == "..") and where.is_dir():  # "." named every corpus "data"
        parts = [where.resolve().name]
    name = re.sub(r"[^\w.-]+", "_", parts[-1] if parts else data).strip("._") or "data"
    if where.is_dir():
        # the path's bytes: a name that is no UTF-8 is held as lone surrogates
        name += "-" + hashlib.sha1(os.fsencode(where.resolve())).hexdigest()[:6]
    return name


def aligned_lines(data: Split, hypotheses: list[str]) -> str:
    """The hypotheses file: one line per line of the split, empty where a pair was skipped."""
    out = [""] * data.n_lines
    for line, hypothesis in zip(data.lines, hypotheses, strict=True):
        out[line - 1] = hypothesis
    return "".join(text + "\n" for text in out)


def run(args: argparse.Namespace) -> int:
    """Load, translate, score, write. Raises `UsageError` for input problems."""
    translator = load_translator(args)
    ckpt_src, ckpt_tgt = translator.languages
    src_lang = args.src_lang or ckpt_src or DEFAULT_LANGS[0]
    tgt_lang = args.tgt_lang or ckpt_tgt or DEFAULT_LANGS[1]
    from minitx.data import DEFAULT_SOURCE  # with the data layer: --help stays fast
    from minitx.data.sources import is_hub_id
    from minitx.evaluation import evaluate, load_split  # its CorpusError is one error line
    from minitx.metrics import bleu_metric
    from minitx.release import check_not_a_release_file, weights_checksum

    bleu_metric(language=tgt_lang)  # a tokenizer it lacks (Japanese: MeCab), before decoding

    source = DEFAULT_SOURCE if args.data is None else args.data
    hub_verbosity(verbose=False)  # offline, the error line comes first, not the hub's retries
    data = load_split(source, args.split, src_lang, tgt_lang, args.limit)
    beyond = args.limit if args.limit is not None and data.n_lines < args.limit else None
    if beyond is not None:  # the whole split: its files are named as without --limit
        args.limit = None
    pair = ""  # in the hypotheses' file names when it is not the checkpoint's own
    if ckpt_src and ckpt_tgt and (src_lang, tgt_lang) != (ckpt_src, ckpt_tgt):
        pair = f"{src_lang}-{tgt_lang}"
    hyp_flag = (
        "the hypotheses file (--hyp-out names another)" if args.hyp_out is None else "--hyp-out"
    )
    # decided once, here: where the checkpoint went while it decoded changed nothing
    hypotheses = {beam: hypothesis_path(args, beam, pair) for beam in args.decodings}
    outputs = [(hyp_flag, path) for path in hypotheses.values()]
    json_path = None if args.json is None else path_or_stream(args.json)  # None: stdout
    if json_path is not None and is_standard_output(json_path):  # /dev/stdout: as `-`
        json_path = None
    json_to_stdout = args.json is not None and json_path is None
    # checked now, not after the decoding; no output may replace the checkpoint, the corpus
    # or another output
    inputs = files_read_from(args.checkpoint) + list(data.files)
    written: dict[Path, str] = {}  # resolved path -> the flag that names it
    for flag, path in [*outputs, ("--json", json_path)]:
        if path is None:
            continue
        check_output_file(path, inputs=inputs, flag=flag)
        check_not_a_release_file(path, flag)
        where = Path(path).resolve()
        if where in written:
            raise UsageError(
                f"{flag} {path} is also the file of {written[where]}; give each output its own file"
            )
        written[where] = flag

    # once the split is read and the outputs checked: an error line comes first, and alone
    if beyond is not None:
        print(
            f"note: --limit {beyond} is more than the {args.split} split's {data.n_lines} "
            "lines: scoring all of them",
            file=sys.stderr,
        )
    if pair:
        print(
            f"warning: the checkpoint was trained {ckpt_src} -> {ckpt_tgt}, "
            f"scoring {src_lang} -> {tgt_lang}",
            file=sys.stderr,
        )
    skipped_note = ", ".join(f"{n} {reason}" for reason, n in data.skipped.items() if n) or "none"
    print(
        f"{args.checkpoint}: {args.split} split of {data.resolved} ({src_lang} -> {tgt_lang}): "
        f"scoring {len(data.sources)} of {data.n_lines} pairs"
        + (f" (the first {args.limit} lines)" if args.limit else "")
        + f"; skipped, with an empty line in the hypotheses: {skipped_note}",
        file=sys.stderr,
    )

    summary_out = sys.stderr if json_to_stdout else sys.stdout
    results = []
    with each_warning_once():  # the sources are read once per beam size
        for beam, decoding in args.decodings.items():  # in the order given
            label = decoding_label(decoding, args)
            with sentence_progress(len(data.sources), label) as progress:
                result = evaluate(
                    translator,
                    data.sources,
                    data.references,
                    decoding,
                    batch_size=args.batch_size,
                    lines=data.lines,  # the file's lines: the pairs with an empty side are out
                    progress=progress,
                    language=tgt_lang,
                )
            result.decoding = label  # e.g. "greedy, hard-argmax cross-attention"
            path = hypotheses[beam]
            try:
                write_text_atomic(path, aligned_lines(data, result.hypotheses))
            except OSError as exc:
                raise UsageError(
                    f"cannot write the hypotheses to {path}: {exc.strerror or exc}"
                ) from None
            # starts with the decoding, e.g. "greedy: BLEU"; on stderr when stdout carries the JSON
            print(result.summary(), file=summary_out, flush=True)
            print(f"  {result.details()}", file=summary_out, flush=True)
            print(f"hypotheses written to {path}", file=sys.stderr)
            results.append(
                {
                    "beam": beam_of(args, beam),
                    # greedy decoding ranks no hypotheses: no length penalty to record
                    "alpha": None if decoding.strategy == "greedy" else decoding.alpha,
                    **result.as_dict(),
                    "hypotheses_file": str(path),
                }
            )

    if args.json is not None:
        report = {
            "checkpoint": str(args.checkpoint),
            "weights_sha256": weights_checksum(translator.model),  # minitx-export checks it
            "data": source,
            "resolved_data": data.resolved,
            # a hub id read from MINITX_DATA_DIR's files: the card says so, without the path
            "data_dir_env": is_hub_id(source) and data.resolved != source,
            "split": args.split,
            "src_lang": src_lang,
            "tgt_lang": tgt_lang,
            "sentences": len(data.sources),
            "lines": data.n_lines,
            "skipped": data.skipped,
            "limit": args.limit,
            "device": args.device,
            "bf16": args.bf16,
            "batch_size": args.batch_size,
            "attention": attention_from_args(args),
            "results": results,
        }
        # a path whose name is no UTF-8 (its bytes held as lone surrogates) shows U+FFFD
        # there: the report stays UTF-8, as JSON must be
        text = without_surrogates(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
        if json_to_stdout:
            sys.stdout.write(text)
            return 0
        try:
            write_text_atomic(json_path, text)
        except OSError as exc:
            raise UsageError(f"cannot write --json {args.json}: {exc.strerror or exc}") from None
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_args(parser, args)
    return run_cli(run, args)


if __name__ == "__main__":
    sys.exit(main())
