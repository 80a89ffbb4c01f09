#!/usr/bin/env python
"""Which cross-attention aligns best? Score every decoder layer and head of a checkpoint.

The model reads each test pair (source, reference) teacher-forced; its cross-attention aligns
them (`Translator.align`, word units). A small hand-made German-English lexicon of nouns,
numbers and colours gives the expected pairs: a source word from the lexicon that occurs once
in its sentence, whose translation occurs exactly once in the reference. The score is the
share of those pairs that the alignment gets right.

    python scripts/alignment_layers.py RUN.ckpt ../shared/data/multi30k 500
"""

from __future__ import annotations

import argparse
import re

from minitx.alignment import AlignmentConfig
from minitx.cli.common import OneLineArgumentParser, each_warning_once, run_cli
from minitx.errors import DataError
from minitx.evaluation import load_split
from minitx.translator import Translator

LEXICON: dict[str, tuple[str, ...]] = {
    "mann": ("man",), "frau": ("woman",), "hund": ("dog",), "kind": ("child",),
    "junge": ("boy",), "mädchen": ("girl",), "straße": ("street",), "wasser": ("water",),
    "ball": ("ball",), "fahrrad": ("bicycle", "bike"), "auto": ("car",), "gruppe": ("group",),
    "menschen": ("people",), "männer": ("men",), "frauen": ("women",), "hemd": ("shirt",),
    "hut": ("hat",), "strand": ("beach",), "gebäude": ("building",), "bühne": ("stage",),
    "zwei": ("two",), "drei": ("three",), "rot": ("red",), "blau": ("blue",),
    "schwarz": ("black",), "weiß": ("white",), "grün": ("green",), "gelb": ("yellow",),
    "hunde": ("dogs",), "kinder": ("children",), "jungen": ("boys",),
    "fußball": ("soccer", "football"), "schnee": ("snow",), "gitarre": ("guitar",),
}  # fmt: skip
COLOURS = ("rot", "blau", "schwarz", "weiß", "grün", "gelb")
"""Inflected as adjectives (roten, blaues, ...): matched by their stem."""


def normalise(word: str) -> str:
    return re.sub(r"[^\wäöüß]", "", word.lower())


def lexicon_key(word: str) -> str | None:
    """The lexicon entry a source word stands for, if any."""
    word = normalise(word)
    for colour in COLOURS:
        if word.startswith(colour) and len(word) <= len(colour) + 2:
            return colour
    return word if word in LEXICON else None


def expected_pairs(sources: list[str], references: list[str]) -> list[tuple[int, int, int]]:
    """(sentence, source word, target word) triples the lexicon makes unambiguous."""
    items = []
    for i, (source, reference) in enumerate(zip(sources, references, strict=True)):
        src_words, tgt_words = source.split(), [normalise(w) for w in reference.split()]
        for si, word in enumerate(src_words):
            key = lexicon_key(word)
            if key is None or sum(lexicon_key(w) == key for w in src_words) != 1:
                continue
            hits = [ti for ti, t in enumerate(tgt_words) if t in LEXICON[key]]
            if len(hits) == 1:
                items.append((i, si, hits[0]))
    return items


def main() -> int:
    """Parse the command line and report; a user error is one ``error:`` line (status 2)."""
    parser = OneLineArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", help="a .ckpt or release directory of a de->en model")
    parser.add_argument("data", help="corpus whose test split is read, as minitx-evaluate --data")
    parser.add_argument(
        "sentences", type=int, nargs="?", default=500, help="test sentences read (default: 500)"
    )
    args = parser.parse_args()
    if args.sentences < 1:
        parser.error(f"sentences must be >= 1, got {args.sentences}")
    return run_cli(report, args)


def report(args: argparse.Namespace) -> int:
    """Score every layer, head and their mean on the lexicon pairs of the test split."""
    split = load_split(args.data, "test", "de", "en", args.sentences)
    sources, references = split.sources, split.references
    items = expected_pairs(sources, references)
    if not items:
        raise DataError(
            f"no lexicon pair found in the first {len(sources)} test sentences; give more "
            "sentences, or a German-English corpus (the lexicon is German-English)"
        )
    translator = Translator.from_pretrained(args.checkpoint)
    source, target = translator.languages  # None where the checkpoint does not say
    if source not in (None, "de") or target not in (None, "en"):  # pairs it never learned
        raise DataError(
            f"{args.checkpoint} translates {source or '?'} -> {target or '?'}; the lexicon is "
            "German-English: give a de -> en model"
        )
    layers, heads = translator.model.config.n_decoder_layers, translator.model.config.n_heads
    print(
        f"{len(items)} lexicon pairs in {len(sources)} sentences; {layers} decoder "
        f"layer{'s' if layers > 1 else ''} x {heads} head{'s' if heads > 1 else ''}"
    )
    configs = [(f"layer {x}, mean of heads", AlignmentConfig(layer=x)) for x in range(layers)]
    configs += [("mean of layers and heads", AlignmentConfig(layer=None))]
    configs += [
        (f"layer {x}, head {h}", AlignmentConfig(layer=x, head=h))
        for x in range(layers)
        for h in range(heads)
    ]
    with each_warning_once():  # every layer and head reads the same sentences
        for name, config in configs:
            alignments = translator.align(sources, references, alignment=config)
            right = sum(dict((t, s) for s, t in alignments[i]).get(ti) == si for i, si, ti in items)
            print(f"  {name:28s} {right / len(items):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
