"""Attention maps as data: what the model attended to for one sentence pair.

The maps follow the Hugging Face / bertviz layout (one tensor per layer) with the batch
dimension removed, so that plotting and the HTML viewer work on a single sentence;
`AttentionMaps.to_bertviz` puts it back for bertviz's views.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import torch

from minitx.teacher_forcing import frame_pairs, pair_ids, teacher_forced
from minitx.vocab import EOS_PIECE

if TYPE_CHECKING:
    from minitx.model import Transformer
    from minitx.tokenizer import Tokenizer

KINDS: tuple[str, ...] = ("encoder", "decoder", "cross")
"""Attention kinds: encoder self-attention, decoder (causal) self-attention, cross-attention."""


@dataclass
class AttentionMaps:
    """All attention weights of one translation.

    Decoder position t reads the input piece ``tgt_tokens[t]`` and predicts
    ``predicted_tokens[t]`` (the next piece; eos at the end, unless the maps are of a
    translation that decoding cut at its length cap: `without_last_position`). Rows of
    decoder self- and cross-attention are therefore labelled with `predicted_tokens` by
    `axes`: the row of "loading" is the one that *produces* "loading", not the one that
    reads it.

    Attributes:
        src_tokens: source subword pieces, length S (as fed to the encoder, eos included).
        tgt_tokens: decoder input pieces, length T (bos first, then the target/generated pieces).
        encoder_attentions: one (H, S, S) tensor per encoder layer.
        decoder_attentions: one (H, T, T) tensor per decoder layer (lower-triangular).
        cross_attentions: one (H, T, S) tensor per decoder layer (queries: target, keys: source).
        predicted_tokens: the piece each decoder position predicts, length T; by default
            ``tgt_tokens[1:]`` followed by eos.
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    # repr=False: printing a translation's maps shows its pieces, not every weight
    encoder_attentions: tuple[torch.Tensor, ...] = field(repr=False)
    decoder_attentions: tuple[torch.Tensor, ...] = field(repr=False)
    cross_attentions: tuple[torch.Tensor, ...] = field(repr=False)
    predicted_tokens: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.predicted_tokens:
            self.predicted_tokens = [*self.tgt_tokens[1:], EOS_PIECE]
        if len(self.predicted_tokens) != len(self.tgt_tokens):
            raise ValueError(
                f"AttentionMaps: {len(self.predicted_tokens)} predicted tokens for "
                f"{len(self.tgt_tokens)} decoder positions"
            )

    def layers(self, kind: str) -> tuple[torch.Tensor, ...]:
        """The per-layer maps of one kind ("encoder", "decoder" or "cross")."""
        self.axes(kind)  # refuses an unknown kind
        return getattr(self, f"{kind}_attentions")

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query labels, key tokens) for the maps of one kind.

        Encoder rows are the source pieces. Decoder and cross-attention rows are labelled by
        the piece each position predicts (`predicted_tokens`); their keys are what is read:
        the decoder inputs (decoder) or the source pieces (cross).
        """
        if kind == "encoder":
            return self.src_tokens, self.src_tokens
        if kind == "decoder":
            return self.predicted_tokens, self.tgt_tokens
        if kind == "cross":
            return self.predicted_tokens, self.src_tokens
        raise ValueError(f"unknown attention kind {kind!r}; expected one of {KINDS}")

    def to_bertviz(self, decoder_tokens: str = "predicted") -> dict[str, Any]:
        """The keyword arguments of bertviz's encoder-decoder views.

        ``bertviz.head_view(**maps.to_bertviz())`` and ``bertviz.model_view(**...)`` show
        these maps. bertviz wants the batch axis back: each attention is a tuple with one
        (1, H, Tq, Tk) tensor per layer.

        Args:
            decoder_tokens: which pieces label the decoder positions (bertviz takes one list
                for the rows of decoder self- and cross-attention and the keys of decoder
                self-attention). "predicted" (default) follows `axes`: the row of "bicycle"
                is the position that produces "bicycle". "input" labels every position with
                the piece it reads (bos first), as Hugging Face's decoder inputs do.

        Returns:
            ``encoder_attention``, ``decoder_attention``, ``cross_attention`` (tuples of
            (1, H, Tq, Tk) tensors), ``encoder_tokens`` (the source pieces, eos included) and
            ``decoder_tokens``.
        """
        if decoder_tokens not in ("predicted", "input"):
            raise ValueError(
                f"decoder_tokens must be 'predicted' or 'input', got {decoder_tokens!r}"
            )

        def batched(maps: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
            return tuple(m.unsqueeze(0) for m in maps)  # (H, Tq, Tk) -> (1, H, Tq, Tk)

        return {
            "encoder_attention": batched(self.encoder_attentions),
            "decoder_attention": batched(self.decoder_attentions),
            "cross_attention": batched(self.cross_attentions),
            "encoder_tokens": list(self.src_tokens),
            "decoder_tokens": list(
                self.predicted_tokens if decoder_tokens == "predicted" else self.tgt_tokens
            ),
        }

    def translation(self) -> str:
        """The translation these maps are of, as text: the predicted pieces, eos left out,
        joined as sentencepiece writes words (a cut translation keeps its last piece, which
        `tgt_tokens` no longer reads)."""
        pieces = self.predicted_tokens
        pieces = pieces[:-1] if pieces[-1:] == [EOS_PIECE] else pieces
        return "".join(pieces).replace("\u2581", " ").strip()

    def without_last_position(self) -> AttentionMaps:
        """These maps less the last decoder position, the one predicting eos: for a
        translation that decoding cut at its length cap, which predicted no eos. The rest is
        unchanged, since the decoder is causal (no earlier position reads the last)."""
        if len(self.tgt_tokens) < 2:
            raise ValueError("AttentionMaps: one decoder position, none to keep without it")
        return replace(
            self,
            tgt_tokens=self.tgt_tokens[:-1],
            predicted_tokens=self.predicted_tokens[:-1],
            decoder_attentions=tuple(m[:, :-1, :-1] for m in self.decoder_attentions),
            cross_attentions=tuple(m[:, :-1] for m in self.cross_attentions),
        )

    def query_inputs(self, kind: str) -> list[str] | None:
        """The input piece each query position reads (decoder and cross), None for encoder
        rows, whose label already is their input."""
        self.axes(kind)  # refuses an unknown kind
        return None if kind == "encoder" else self.tgt_tokens


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of each head's attention distributions: (..., H, Tq, Tk) weights,
    rows summing to 1 (or all zero) -> (..., H) mean over query rows of -sum_k p log p. Low =
    focused heads."""
    return row_entropy(weights).mean(-1)


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy (nats) of each row of (..., Tq, Tk) attention weights: (..., Tq)."""
    p = weights.float()
    return -(p * torch.log(p.clamp_min(1e-12))).sum(-1)


@torch.inference_mode()
def teacher_forced_maps(
    model: Transformer, tokenizer: Tokenizer, source: str, target: str | list[int]
) -> AttentionMaps:
    """Every attention map of `model` (in eval mode) reading `source` with `target` (text, or
    ids without bos or eos, e.g. generated ones) as decoder input.

    One sentence at a time, so no padding appears on the axes. Source pieces end with eos;
    target pieces (the decoder inputs) start with bos. A side longer than the model's
    positions is cut to fit, with a warning (`minitx.teacher_forcing.pair_ids`).

    Raises:
        EmptyInputError: when the source has no piece (a `ValueError`).
    """
    src_ids, tgt_ids = pair_ids(model, tokenizer, source, target, "attention maps")
    return pair_maps(model, tokenizer, src_ids, tgt_ids)


@torch.inference_mode()
def pair_maps(
    model: Transformer, tokenizer: Tokenizer, src_ids: Sequence[int], tgt_ids: Sequence[int]
) -> AttentionMaps:
    """`teacher_forced_maps` of a pair given as ids without special ids (each side within the
    model's positions): one teacher-forced pass (`minitx.teacher_forcing`) with every map."""
    device = next(model.parameters()).device
    src, tgt_in, labels = frame_pairs([(src_ids, tgt_ids)], device)  # (1, S), (1, T), (1, T)
    out = teacher_forced(model, src, tgt_in, weights="all")

    def first(maps: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return tuple(m[0].float().cpu() for m in maps)  # drop the batch axis: (H, Tq, Tk)

    return AttentionMaps(
        src_tokens=tokenizer.id_to_piece(src[0].tolist()),
        tgt_tokens=tokenizer.id_to_piece(tgt_in[0].tolist()),
        predicted_tokens=tokenizer.id_to_piece(labels[0].tolist()),
        encoder_attentions=first(out.encoder_attentions),
        decoder_attentions=first(out.decoder_attentions),
        cross_attentions=first(out.cross_attentions),
    )
