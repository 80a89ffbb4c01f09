"""Hard word alignments read off cross-attention, in the Pharaoh ``src-tgt`` format.

For each output piece, the cross-attention row that *predicts* it (decoder position t predicts
piece t, see `minitx.maps.AttentionMaps`) is averaged over the heads of one decoder layer (or
of all layers) and its argmax over the source pieces is the aligned source piece, as fairseq's
``--print-alignment`` does (``utils.extract_hard_alignment``): the source eos and the row
that predicts the target eos are left out, indices are 0-based, and a pair reads
``SOURCE-TARGET``. On top of fairseq's piece alignments, ``unit="word"`` aligns whitespace
words: a sentencepiece piece starting with "▁" begins a word, a target word's rows are
averaged, a source word's columns summed (the attention mass on the word), and each target
word gets exactly one source word. Source words are those of the source sentence as written,
target words those of the decoded translation (where an unknown piece is a word of its own).

Torch, the standard library, `minitx.vocab` and `minitx.errors` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from minitx.errors import ConfigError, is_whole_number
from minitx.vocab import UNK_PIECE

WORD_BOUNDARY = "\u2581"
"""sentencepiece's word-boundary mark: a piece starting with it begins a word."""
UNITS = ("word", "piece")
"""What an alignment index counts: whitespace words or sentencepiece pieces."""
DEFAULT_LAYER: int | None = None
"""The decoder layer whose cross-attention aligns by default: None, the mean of every layer,
which scored best on a de->en checkpoint (scripts/alignment_layers.py; the inference guide,
"Word alignments")."""

Alignment = list[tuple[int, int]]
"""(source index, target index) pairs, 0-based, sorted by target index."""


@dataclass(frozen=True)
class AlignmentConfig:
    """Which cross-attention aligns, and what the indices count.

    Attributes:
        layer: decoder layer (negative counts from the last, as in Python); None averages
            every layer.
        head: attention head of that layer; None averages the heads.
        unit: "word" (whitespace words) or "piece" (sentencepiece pieces).
    """

    layer: int | None = DEFAULT_LAYER
    head: int | None = None
    unit: str = "word"

    def __post_init__(self) -> None:
        for name in ("layer", "head"):
            value = getattr(self, name)
            if value is not None and not is_whole_number(value):
                raise ConfigError(
                    f"AlignmentConfig.{name} must be a whole number or None, got {value!r}"
                )
        if self.unit not in UNITS:
            raise ConfigError(f"AlignmentConfig.unit must be one of {UNITS}, got {self.unit!r}")

    def check(self, n_layers: int, n_heads: int) -> None:
        """Reject a layer or head the model does not have.

        Raises:
            ConfigError: naming the valid range.
        """
        for name, value, size in (("layer", self.layer, n_layers), ("head", self.head, n_heads)):
            if value is not None and not -size <= value < size:
                noun = ("decoder layer" if name == "layer" else "head") + "s" * (size != 1)
                raise ConfigError(
                    f"alignment {name} {value} does not exist: the model has {size} {noun} (use "
                    f"{-size}..{size - 1}, or their mean: --alignment-{name} mean, or "
                    f"AlignmentConfig({name}=None) in Python)"
                )


def combine_cross_attention(cross: Sequence[Tensor], config: AlignmentConfig) -> Tensor:
    """One (..., T, S) map out of the per-layer (..., H, T, S) cross-attention maps: the
    configured layer (or the mean of the layers), then head (or the mean of the heads)."""
    maps = torch.stack([m.float() for m in cross])  # (L, ..., H, T, S)
    chosen = maps.mean(0) if config.layer is None else maps[config.layer]  # (..., H, T, S)
    return chosen.mean(-3) if config.head is None else chosen.select(-3, config.head)


def word_index(pieces: Sequence[str], *, unk_is_word: bool = False) -> list[int | None]:
    """The whitespace word each piece belongs to (0-based).

    A piece starting with "▁" begins a word, and so does the first piece. A piece that is only
    "▁" belongs to the word that follows it (to the one before it at the end; None when there
    is no word). With `unk_is_word`, an unknown piece (``<unk>``) is a word of its own, as in
    decoded text (sentencepiece writes it " ⁇ "); without it, it is part of the word it sits
    in, as in the source text the user wrote.
    """
    words: list[int | None] = []
    count, boundary = 0, True
    for piece in pieces:
        if unk_is_word and piece == UNK_PIECE:
            count, boundary = count + 1, True
            words.append(count - 1)
            continue
        boundary |= piece.startswith(WORD_BOUNDARY)
        if not piece.strip(WORD_BOUNDARY):
            words.append(None)
            continue
        if boundary:
            count, boundary = count + 1, False
        words.append(count - 1)
    for i, word in enumerate(words):  # a bare "▁" joins the next word, or the last one
        if word is None:
            after = next((w for w in words[i + 1 :] if w is not None), None)
            words[i] = after if after is not None else (count - 1 if count else None)
    return words


def align(
    weights: Tensor, src_pieces: Sequence[str], tgt_pieces: Sequence[str], unit: str = "word"
) -> Alignment:
    """Hard alignment from one cross-attention map.

    Args:
        weights: (T, S') attention of the rows that predict `tgt_pieces` over the source
            positions; S' >= S, columns beyond the S source pieces (eos) are ignored.
        src_pieces: the S source pieces (no eos).
        tgt_pieces: the T output pieces (no bos, no eos).
        unit: "piece" or "word" (see the module docstring).

    Returns:
        (source index, target index) pairs, one per target piece or word, by target index.
    """
    if unit not in UNITS:
        raise ValueError(f"align: unit must be one of {UNITS}, got {unit!r}")
    n_src, n_tgt = len(src_pieces), len(tgt_pieces)
    if weights.dim() != 2:
        raise ValueError(f"align: weights {tuple(weights.shape)}: give one (T, S') map")
    if weights.size(0) < n_tgt:
        raise ValueError(f"align: {weights.size(0)} attention rows for {n_tgt} target pieces")
    if weights.size(1) < n_src:  # else pieces beyond the columns were never aligned, silently
        raise ValueError(f"align: {weights.size(1)} attention columns for {n_src} source pieces")
    if n_src == 0 or n_tgt == 0:
        return []
    w = weights[:n_tgt, :n_src].float()  # (T, S)
    if unit == "piece":
        return [(int(s), t) for t, s in enumerate(w.argmax(-1).tolist())]
    src_words = word_index(src_pieces)  # the words of the source as written
    tgt_words = word_index(tgt_pieces, unk_is_word=True)  # the words of the decoded translation
    if all(i is None for i in src_words):
        return []
    n_src_words = max(i for i in src_words if i is not None) + 1
    by_src = torch.zeros(n_src, n_src_words)  # (S, S_words): sum the columns of each word
    for piece, word in enumerate(src_words):
        if word is not None:
            by_src[piece, word] = 1.0
    word_cols = w @ by_src  # (T, S_words)
    pairs = []
    for word in sorted({i for i in tgt_words if i is not None}):
        rows = [t for t, i in enumerate(tgt_words) if i == word]
        pairs.append((int(word_cols[rows].mean(0).argmax()), word))
    return pairs


def format_alignment(pairs: Alignment) -> str:
    """Pharaoh / fairseq format: ``"0-0 1-2 2-1"`` (source-target, 0-based)."""
    return " ".join(f"{s}-{t}" for s, t in pairs)
