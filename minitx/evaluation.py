"""Corpus-level scoring of a `Translator` with sacreBLEU (BLEU cased 13a, lowercased BLEU, chrF)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sacrebleu.metrics import BLEU, CHRF

from minitx.decoding import DecodingConfig
from minitx.translator import Progress, Translator, resolve_decoding


@dataclass
class EvaluationResult:
    """Scores of one decoding run over a corpus.

    Attributes:
        bleu: sacreBLEU, cased, 13a tokenisation (the standard WMT-style figure).
        signature: sacreBLEU's signature string for `bleu` (what to cite).
        bleu_lowercase: the same BLEU computed case-insensitively.
        chrf: chrF2 (sacreBLEU defaults).
        seconds: wall-clock time spent translating.
        hypotheses: the translations, in input order.
        decoding: how they were decoded, e.g. "beam 5 (alpha 1)" (empty when unknown).
        precisions: BLEU's 1- to 4-gram precisions (%), cased.
        brevity_penalty: BLEU's brevity penalty.
        length_ratio: hypothesis length / reference length (13a tokens).
        hyp_len: hypothesis length in 13a tokens.
        ref_len: reference length in 13a tokens.
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
        return {
            "decoding": self.decoding,
            "bleu": self.bleu,
            "bleu_lowercase": self.bleu_lowercase,
            "chrf": self.chrf,
            "signature": self.signature,
            "chrf_signature": self.chrf_signature,
            "precisions": self.precisions,
            "brevity_penalty": self.brevity_penalty,
            "length_ratio": self.length_ratio,
            "hyp_len": self.hyp_len,
            "ref_len": self.ref_len,
            "seconds": self.seconds,
            "sentences_per_second": self.sentences_per_second,
        }

    def summary(self) -> str:
        """One human-readable line."""
        label = f"{self.decoding}: " if self.decoding else ""
        return (
            f"{label}BLEU {self.bleu:.2f} (lowercased {self.bleu_lowercase:.2f}), "
            f"chrF {self.chrf:.2f} | {len(self.hypotheses)} sentences in {self.seconds:.1f} s "
            f"({self.sentences_per_second:.1f}/s) | {self.signature}"
        )


def score(
    hypotheses: Sequence[str], references: Sequence[str], seconds: float = 0.0
) -> EvaluationResult:
    """Score translations against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"score: {len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU(tokenize="13a")
    cased = bleu.corpus_score(list(hypotheses), [list(references)])
    lowercase = BLEU(tokenize="13a", lowercase=True).corpus_score(
        list(hypotheses), [list(references)]
    )
    chrf_metric = CHRF()
    chrf = chrf_metric.corpus_score(list(hypotheses), [list(references)])
    return EvaluationResult(
        cased.score,
        str(bleu.get_signature()),
        lowercase.score,
        chrf.score,
        seconds,
        list(hypotheses),
        precisions=[float(p) for p in cased.precisions],
        brevity_penalty=float(cased.bp),
        length_ratio=float(cased.ratio),
        hyp_len=int(cased.sys_len),
        ref_len=int(cased.ref_len),
        chrf_signature=str(chrf_metric.get_signature()),
    )


def evaluate(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    decoding: DecodingConfig | None = None,
    *,
    batch_size: int = 64,
    progress: Progress | None = None,
    **changes: Any,
) -> EvaluationResult:
    """Translate `sources` and score them against `references`.

    Args:
        translator: the model to score.
        sources: source sentences.
        references: one reference per source.
        decoding: decoding settings (default `DecodingConfig()`).
        batch_size: sentences per batch.
        progress: called with the number of sentences translated, after each batch.
        **changes: `DecodingConfig` fields to override, e.g. `beam_size=1` for greedy.
    """
    if len(sources) != len(references):
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references")
    config = resolve_decoding(decoding, **changes)
    start = time.perf_counter()
    hypotheses = translator.translate(sources, config, batch_size=batch_size, progress=progress)
    result = score(hypotheses, references, time.perf_counter() - start)
    result.decoding = config.describe()
    return result
