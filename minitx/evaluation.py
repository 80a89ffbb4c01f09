"""Corpus-level scoring of a `Translator` with sacreBLEU (BLEU cased 13a, lowercased BLEU, chrF)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from sacrebleu.metrics import BLEU, CHRF

from minitx.translator import Translator


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
    """

    bleu: float
    signature: str
    bleu_lowercase: float
    chrf: float
    seconds: float
    hypotheses: list[str] = field(repr=False)

    @property
    def sentences_per_second(self) -> float:
        """Translation throughput."""
        return len(self.hypotheses) / max(self.seconds, 1e-9)

    def summary(self) -> str:
        """One human-readable line."""
        return (
            f"BLEU {self.bleu:.2f} (lowercased {self.bleu_lowercase:.2f}), chrF {self.chrf:.2f} | "
            f"{len(self.hypotheses)} sentences in {self.seconds:.1f} s ({self.sentences_per_second:.1f}/s) | {self.signature}"
        )


def score(hypotheses: Sequence[str], references: Sequence[str], seconds: float = 0.0) -> EvaluationResult:
    """Score translations against one reference each."""
    if len(hypotheses) != len(references):
        raise ValueError(f"score: {len(hypotheses)} hypotheses but {len(references)} references")
    bleu = BLEU(tokenize="13a")
    cased = bleu.corpus_score(list(hypotheses), [list(references)])
    lowercase = BLEU(tokenize="13a", lowercase=True).corpus_score(list(hypotheses), [list(references)])
    chrf = CHRF().corpus_score(list(hypotheses), [list(references)])
    return EvaluationResult(cased.score, str(bleu.get_signature()), lowercase.score, chrf.score, seconds, list(hypotheses))


def evaluate(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    beam_size: int = 1,
    alpha: float = 1.0,
    batch_size: int = 64,
) -> EvaluationResult:
    """Translate `sources` and score them against `references` (greedy when beam_size == 1)."""
    if len(sources) != len(references):
        raise ValueError(f"evaluate: {len(sources)} sources but {len(references)} references")
    start = time.perf_counter()
    hypotheses = translator.translate(sources, beam_size=beam_size, alpha=alpha, batch_size=batch_size)
    return score(hypotheses, references, time.perf_counter() - start)
