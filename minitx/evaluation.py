"""Corpus-level scoring of a `Translator` with sacreBLEU (cased BLEU, lowercased BLEU, chrF),
and the corpus split it scores (`load_split`: the reader of minitx-evaluate and of the
experiments' probes)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from minitx.decoding import DEFAULT_BATCH_SIZE, DecodingConfig
from minitx.errors import CorpusError
from minitx.metrics import bleu_metric, corpus_scores
from minitx.textio import sentence_list
from minitx.translator import Progress, Translator


class Split(NamedTuple):
    """One corpus split, ready to score: the usable pairs and where they sit in the files."""

    sources: list[str]
    references: list[str]
    lines: list[int]
    """1-based line (row) of each pair in the split's files."""
    n_lines: int
    """Lines (rows) of the split, usable or not."""
    skipped: dict[str, int]
    resolved: str
    """The corpus as read: `source` after `minitx.data.resolve_data_source`."""
    files: tuple[Path, ...] = ()
    """The local files the split is read from (`minitx.data.split_files`); none for a hub
    dataset."""


def load_split(source: str, split: str, src_lang: str, tgt_lang: str, limit: int | None) -> Split:
    """The pairs of one split (the first `limit` lines only, when given) with both sides
    non-empty, their line numbers and the skip counts.

    Args:
        source: anything `minitx.data.load_parallel_corpus` reads (a directory of
            ``{split}.{lang}[.gz]`` files, a ``{split}`` jsonl pattern, ``builtin:toy``, a hub
            id); ``MINITX_DATA_DIR`` replaces a hub id, as in training.
        split: "train", "validation" or "test", under the loader's default file names (in a
            directory: the Multi30k names, e.g. test_2016_flickr.de, else the split's own,
            test.de; either may end in .gz); any other name is a file stem (NAME.de).

    Raises:
        CorpusError: the corpus cannot be read, has no such split, or the split has no pair
            with both sides non-empty.
    """
    import datasets

    from minitx.data import (
        HUB_SPLITS,
        MULTI30K_SPLITS,
        clean_pairs,
        describe_directory,
        load_parallel_corpus,
        local_stem,
        resolve_data_source,
        side_texts,
        split_files,
        usable_pairs,
    )

    resolved = resolve_data_source(source)
    # Read only the wanted split, under the loader's default name for it (local files or hub).
    directory = Path(resolved).expanduser()
    local = "{split}" in resolved or directory.exists() or directory.is_symlink()
    stem = (
        local_stem(resolved, split, (src_lang, tgt_lang)) if local else HUB_SPLITS.get(split, split)
    )
    pattern = resolved if "{split}" in resolved else None
    try:
        corpus = load_parallel_corpus(resolved, src_lang, tgt_lang, splits={split: stem})
    except FileNotFoundError as exc:
        if pattern:  # the loader's hint (data.splits) is training's, not this command's
            raise CorpusError(
                f"{pattern}: no {split!r} split: minitx-evaluate --split {split} reads "
                f"{pattern.format(split=stem)} (or .gz); to read another file of the pattern, "
                f"pass --split NAME for {pattern.format(split='NAME')}"
            ) from None
        if not directory.is_dir():
            raise CorpusError(str(exc)) from None
        multi30k = MULTI30K_SPLITS.get(split)  # how to name the two files of the split
        names = f"{multi30k}.{src_lang} and {multi30k}.{tgt_lang}, or " if multi30k else ""
        raise CorpusError(
            f"{directory}: no {split!r} split for {src_lang} -> {tgt_lang}: minitx-evaluate "
            f"--split {split} reads {names}{split}.{src_lang} and {split}.{tgt_lang} (each "
            "optionally .gz), one sentence a line, line-aligned; to score any file pair, put it "
            f"there as NAME.{src_lang} and NAME.{tgt_lang} and pass --split NAME; "
            f"{describe_directory(directory)}"
        ) from None
    except (ValueError, ConnectionError) as exc:
        raise CorpusError(str(exc)) from None
    if split not in corpus:
        raise CorpusError(f"{resolved}: no {split!r} split (found {sorted(corpus)})")
    rows = corpus[split]
    if limit is not None and limit < len(rows):
        rows = rows.select(range(limit))
    if not usable_pairs(side_texts(rows, src_lang), side_texts(rows, tgt_lang)):
        # before clean_pairs, whose skip notice would come before the error line
        raise CorpusError(
            f"{resolved}: the {split!r} split has no non-empty sentence pairs ({len(rows)} "
            "lines, none with both sides non-empty)"
        )
    cleaned, skipped = clean_pairs(datasets.DatasetDict({split: rows}), src_lang, tgt_lang)
    pairs = cleaned[split]
    return Split(
        sources=side_texts(pairs, src_lang),
        references=side_texts(pairs, tgt_lang),
        lines=[int(n) for n in pairs["line"]],
        n_lines=len(rows),
        skipped=skipped[split],
        resolved=resolved,
        files=tuple(split_files(resolved, stem, (src_lang, tgt_lang)) if local else ()),
    )


@dataclass
class EvaluationResult:
    """Scores of one decoding run over a corpus.

    Attributes:
        bleu: sacreBLEU, cased, tokenized as `minitx.metrics.bleu_metric` does for the
            target language (13a, the standard WMT-style figure, for most).
        signature: sacreBLEU's signature string for `bleu` (what to cite).
        bleu_lowercase: the same BLEU computed case-insensitively.
        chrf: chrF2 (sacreBLEU defaults).
        seconds: wall-clock time spent translating.
        hypotheses: the translations, in input order.
        decoding: how they were decoded, e.g. "beam 5 (alpha 1)" (empty when unknown).
        precisions: BLEU's 1- to 4-gram precisions (%), cased.
        brevity_penalty: BLEU's brevity penalty.
        length_ratio: hypothesis length / reference length (BLEU's tokens).
        hyp_len: hypothesis length in BLEU's tokens.
        ref_len: reference length in BLEU's tokens.
        chrf_signature: sacreBLEU's signature string for `chrf`.
    """

    bleu: float
    signature: str
    bleu_lowercase: float
    chrf: float
    seconds: float
    hypotheses: list[str] = field(repr=False)
    decoding: str = ""
    precisions: list[float] = field(default_factory=list)
    brevity_penalty: float = 1.0
    length_ratio: float = 0.0
    hyp_len: int = 0
    ref_len: int = 0
    chrf_signature: str = ""

    @property
    def sentences_per_second(self) -> float:
        """Translation throughput."""
        return len(self.hypotheses) / max(self.seconds, 1e-9)

    def details(self) -> str:
        """sacreBLEU's detailed BLEU (n-gram precisions, brevity penalty, lengths) and the
        chrF signature, on one line."""
        grams = "/".join(f"{p:.1f}" for p in self.precisions)
        return (
            f"BLEU = {self.bleu:.2f} {grams} (BP = {self.brevity_penalty:.3f} "
            f"ratio = {self.length_ratio:.3f} hyp_len = {self.hyp_len} ref_len = {self.ref_len})"
            f" | chrF2 = {self.chrf:.2f} | {self.chrf_signature}"
        )

    def as_dict(self) -> dict[str, Any]:
        """Every figure and both signatures (not the hypotheses), e.g. for JSON."""
        figures = {k: v for k, v in asdict(self).items() if k != "hypotheses"}
        return {**figures, "sentences_per_second": self.sentences_per_second}

    def summary(self) -> str:
        """One human-readable line."""
        label = f"{self.decoding}: " if self.decoding else ""
        n = len(self.hypotheses)
        return (
            f"{label}BLEU {self.bleu:.2f} (lowercased {self.bleu_lowercase:.2f}), "
            f"chrF {self.chrf:.2f} | {n} sentence{'' if n == 1 else 's'} in {self.seconds:.1f} s "
            f"({self.sentences_per_second:.1f}/s) | {self.signature}"
        )


def score(
    hypotheses: Sequence[str],
    references: Sequence[str],
    seconds: float = 0.0,
    *,
    language: str | None = None,
) -> EvaluationResult:
    """Score translations in the target `language` (an ISO code, which picks BLEU's
    tokenization: `minitx.metrics.bleu_metric`) against one reference each.

    Raises:
        TypeError: `hypotheses` or `references` is one string or holds something else than
            strings (`minitx.textio.sentence_list`).
        ValueError: their numbers differ, or there are none (BLEU of nothing is no score).
    """
    # one string each was scored character by character
    hypotheses = sentence_list(hypotheses, "translation")
    references = sentence_list(references, "reference")
    if len(hypotheses) != len(references):
        raise ValueError(f"score: {len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:  # sacreBLEU's IndexError
        raise ValueError("score: no sentences to score; give at least one hypothesis")
    scores = corpus_scores(hypotheses, references, language=language)
    lowercase = bleu_metric(lowercase=True, language=language).corpus_score(
        list(hypotheses), [list(references)]
    )
    cased = scores.bleu
    return EvaluationResult(
        cased.score,
        scores.bleu_signature,
        lowercase.score,
        scores.chrf.score,
        seconds,
        list(hypotheses),
        precisions=[float(p) for p in cased.precisions],
        brevity_penalty=float(cased.bp),
        length_ratio=float(cased.ratio),
        hyp_len=int(cased.sys_len),
        ref_len=int(cased.ref_len),
        chrf_signature=scores.chrf_signature,
    )


def evaluate(
    translator: Translator,
    sources: Iterable[str],
    references: Iterable[str],
    decoding: DecodingConfig | None = None,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lines: Sequence[int] | None = None,
    progress: Progress | None = None,
    language: str | None = None,
    **changes: Any,
) -> EvaluationResult:
    """Translate `sources` with `translator` and score them against `references` (one per
    source), in the target `language` (default: the translator's; `score`); the other
    arguments are `Translator.translate`'s (`lines`: each source's line in its file, for the
    warnings, e.g. a `Split`'s).

    Raises:
        TypeError: `sources` or `references` is one string or holds something else than
            strings (`minitx.textio.sentence_list`).
        ValueError: their numbers differ, or there are none (BLEU of nothing is no score).
        ConfigError: BLEU of the target language needs a tokenizer not installed (MeCab, for
            Japanese and Korean): before anything is decoded.
    """
    # checked before any decoding: a string of references scored each character
    sources, references = sentence_list(sources), sentence_list(references, "reference")
    if len(sources) != len(references):
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references")
    if not sources:
        raise ValueError("evaluate: no sentences to score; give at least one source and reference")
    config = DecodingConfig.from_arguments(decoding, **changes)
    language = language or translator.languages[1]  # BLEU's tokenization follows it
    bleu_metric(language=language)  # one it cannot score (Japanese without MeCab): said now
    start = time.perf_counter()
    hypotheses = translator.translate(
        sources, config, batch_size=batch_size, lines=lines, progress=progress
    )
    result = score(hypotheses, references, time.perf_counter() - start, language=language)
    result.decoding = config.describe()
    return result
