"""Corpus BLEU and chrF of translations, with sacreBLEU's settings written once: validation
during training and minitx-evaluate (`minitx.evaluation`) score with the same metrics, so a
validation BLEU and a test BLEU are the same figure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from sacrebleu.metrics import BLEU, CHRF, BLEUScore, CHRFScore


class CorpusScores(NamedTuple):
    """sacreBLEU's corpus scores of one set of translations, and what to cite for each."""

    bleu: BLEUScore  # cased, 13a tokenisation: `.score`, `.precisions`, `.bp`, lengths
    chrf: CHRFScore  # chrF2, sacreBLEU's defaults
    bleu_signature: str
    chrf_signature: str


def bleu_metric(*, lowercase: bool = False) -> BLEU:
    """sacreBLEU's BLEU with 13a tokenisation (the standard WMT-style figure), cased unless
    `lowercase`. The lowercased figure scores the same translations as the cased one, so only
    the cased one warns of tokenized text (sacreBLEU's ``force``, which changes no score)."""
    return BLEU(tokenize="13a", lowercase=lowercase, force=lowercase)


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> CorpusScores:
    """Cased BLEU and chrF of `hypotheses` against one reference each."""
    bleu, chrf = bleu_metric(), CHRF()
    hyps, refs = list(hypotheses), [list(references)]
    return CorpusScores(
        bleu.corpus_score(hyps, refs),
        chrf.corpus_score(hyps, refs),
        str(bleu.get_signature()),
        str(chrf.get_signature()),
    )
