"""Corpus BLEU and chrF of translations, with sacreBLEU's settings written once: validation
during training and minitx-evaluate (`minitx.evaluation`) score with the same metrics, so a
validation BLEU and a test BLEU are the same figure.

BLEU counts words, so its tokenization follows the target language as sacreBLEU chooses it:
13a (the WMT figure), except for Chinese (``zh``), Japanese (``ja-mecab``) and Korean
(``ko-mecab``), written without spaces between words, where 13a would see a sentence as one
word and score nearly every translation 0. The signature names the tokenization."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import NamedTuple

from sacrebleu.metrics import BLEU, CHRF, BLEUScore, CHRFScore

from minitx.errors import ConfigError

logger = logging.getLogger(__name__)

TOKENIZED_LINES = 100
"""Hypotheses ending in " ." that make `corpus_scores` say the text looks tokenized
(sacreBLEU's own threshold)."""
_said_tokenized = False  # said once per process: every validation of a run would repeat it


class CorpusScores(NamedTuple):
    """sacreBLEU's corpus scores of one set of translations, and what to cite for each."""

    bleu: BLEUScore  # cased, the language's tokenization: `.score`, `.precisions`, `.bp`
    chrf: CHRFScore  # chrF2, sacreBLEU's defaults
    bleu_signature: str
    chrf_signature: str


def bleu_metric(*, lowercase: bool = False, language: str | None = None) -> BLEU:
    """sacreBLEU's BLEU, cased unless `lowercase`, with the tokenization sacreBLEU chooses for
    the target `language` (an ISO code such as ``en``; 13a when None or another language).
    Its own warning of tokenized text is off (``force``, which changes no score): three lines
    at every scoring, naming a parameter no minitx flag has; `corpus_scores` says it once, in
    minitx's words.

    Raises:
        ConfigError: `language` is ``ja`` or ``ko`` and sacreBLEU's MeCab tokenizer for it is
            not installed.
    """
    # sacreBLEU knows bare codes: zh-TW, zh_CN (as OPUS names files) and ZH are Chinese too
    base = re.split(r"[-_]", language)[0].lower() if language else ""
    try:
        return BLEU(lowercase=lowercase, force=True, trg_lang=base)
    except RuntimeError:  # sacreBLEU's word for a missing MeCab, in a 6-line message
        if base not in ("ja", "ko"):
            raise
        raise ConfigError(
            f"BLEU of {language!r} text splits its words with MeCab: pip install "
            f"'sacrebleu[{base}]'"
        ) from None


def corpus_scores(
    hypotheses: Sequence[str], references: Sequence[str], *, language: str | None = None
) -> CorpusScores:
    """Cased BLEU and chrF of `hypotheses` against one reference each, in the target
    `language` (`bleu_metric`)."""
    global _said_tokenized
    bleu, chrf = bleu_metric(language=language), CHRF()
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
