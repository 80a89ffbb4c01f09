"""Corpus BLEU and chrF of translations, with sacreBLEU's settings written once: validation
during training and minitx-evaluate (`minitx.evaluation`) score with the same metrics, so a
validation BLEU and a test BLEU are the same figure."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from sacrebleu.metrics import BLEU, CHRF, BLEUScore, CHRFScore

logger = logging.getLogger(__name__)

TOKENIZED_LINES = 100
"""Hypotheses ending in " ." that make `corpus_scores` say the text looks tokenized
(sacreBLEU's own threshold)."""
_said_tokenized = False  # said once per process: every validation of a run would repeat it


class CorpusScores(NamedTuple):
    """sacreBLEU's corpus scores of one set of translations, and what to cite for each."""

    bleu: BLEUScore  # cased, 13a tokenisation: `.score`, `.precisions`, `.bp`, lengths
    chrf: CHRFScore  # chrF2, sacreBLEU's defaults
    bleu_signature: str
    chrf_signature: str


def bleu_metric(*, lowercase: bool = False) -> BLEU:
    """sacreBLEU's BLEU with 13a tokenisation (the standard WMT-style figure), cased unless
    `lowercase`. Its own warning of tokenized text is off (``force``, which changes no score):
    three lines at every scoring, naming a parameter no minitx flag has; `corpus_scores`
    says it once, in minitx's words."""
    return BLEU(tokenize="13a", lowercase=lowercase, force=True)


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str]) -> CorpusScores:
    """Cased BLEU and chrF of `hypotheses` against one reference each."""
    global _said_tokenized
    bleu, chrf = bleu_metric(), CHRF()
    hyps, refs = list(hypotheses), [list(references)]
    tokenized = sum(h.endswith(" .") for h in hyps)
    if tokenized >= TOKENIZED_LINES and not _said_tokenized:
        _said_tokenized = True
        logger.warning(
            "%d of %d translations end in ' .', as tokenized text does: sacreBLEU tokenizes "
            "the text itself, so BLEU of tokenized text is not comparable with published "
            "scores; detokenize the corpus (e.g. with sacremoses) for that",
            tokenized,
            len(hyps),
        )
    return CorpusScores(
        bleu.corpus_score(hyps, refs),
        chrf.corpus_score(hyps, refs),
        str(bleu.get_signature()),
        str(chrf.get_signature()),
    )
