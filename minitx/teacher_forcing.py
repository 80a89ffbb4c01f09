"""The teacher-forced pass: the model reads a source and a *given* target, every target
position at once, as in training.

Attention maps (`minitx.maps`), alignments (`Translator.align`), gradient attributions
(`minitx.attribution`) and the experiments' probes all read (source, target) pairs this way,
so that they share one framing and one forward pass.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from numbers import Integral

import torch
from torch import Tensor

from minitx.errors import EmptyInputError, check_whole_number
from minitx.kv_cache import check_one_row_each
from minitx.model import Transformer
from minitx.model_outputs import TransformerOutput
from minitx.tokenizer import Tokenizer
from minitx.vocab import PAD_ID, frame_source, frame_target, pad

logger = logging.getLogger(__name__)

WEIGHTS: tuple[str, ...] = ("none", "decoder", "all")
"""Which attention maps `teacher_forced` returns: none, the decoder's (self and cross; the
encoder keeps its fused path, so its output is the one decoding sees) or every map."""


def length_batches(ids: Sequence[Sequence[int]], batch_size: int) -> list[list[int]]:
    """Indices of the non-empty sequences, sorted by length (shortest first), cut into batches
    of `batch_size`: little padding per batch. Empty sequences are left out."""
    check_whole_number("batch_size", batch_size, 1)  # 2.5 or None failed inside range()
    order = sorted((i for i, seq in enumerate(ids) if seq), key=lambda i: len(ids[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pair_ids(
    model: Transformer, tokenizer: Tokenizer, source: str, target: str | Sequence[int], what: str
) -> tuple[list[int], list[int]]:
    """One (source, target) pair as ids without special ids, each side cut to the model's
    positions (with a warning naming `what`, e.g. "attention maps"); `target` is text, or ids
    without bos or eos (e.g. generated ones).

    Raises:
        EmptyInputError: when the source has no piece.
        ValueError: a target id is outside the vocabulary.
    """
    source_ids = tokenizer.encode([source.strip()])[0]
    if not source_ids:  # "" or "\u200b": no piece (a ValueError: the command's traceback)
        raise EmptyInputError(
            f"{what} need a non-empty source sentence: this one has no piece (only spaces or "
            "invisible characters)"
        )
    target_ids = tokenizer.encode([target.strip()])[0] if isinstance(target, str) else list(target)
    vocab = model.config.tgt_vocab_size  # given ids: else torch's IndexError in the embedding
    bad = next((t for t in target_ids if not (isinstance(t, Integral) and 0 <= t < vocab)), None)
    if bad is not None:
        raise ValueError(
            f"{what}: target id {bad!r} is not a piece of this model's target vocabulary (0 "
            f"to {vocab - 1}); give text, or ids the model generated"
        )
    limit = model.config.max_positions - 1  # eos / bos take one position
    for side, ids in (("source", source_ids), ("target", target_ids)):
        if len(ids) > limit:
            logger.warning(
                "%s: the %s has %d pieces, more than the model's %d positions allow; its first "
                "%d pieces are used",
                what,
                side,
                len(ids),
                limit + 1,
                limit,
            )
    return source_ids[:limit], target_ids[:limit]


def frame_pairs(
    pairs: Sequence[tuple[Sequence[int], Sequence[int]]], device: torch.device | str | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """(source ids, target ids) pairs, without special ids, as the teacher-forced tensors.

    Returns:
        src (B, S): each source + eos; tgt_in (B, T): bos + each target; labels (B, T): each
        target + eos (what position t predicts); all right-padded with `PAD_ID`.
    """
    framed = [frame_target(target) for _, target in pairs]
    src = pad([frame_source(source) for source, _ in pairs], device=device)
    tgt_in = pad([decoder_input for decoder_input, _ in framed], device=device)
    labels = pad([label for _, label in framed], device=device)
    return src, tgt_in, labels


def teacher_forced(
    model: Transformer, src: Tensor, tgt_in: Tensor, *, weights: str = "none"
) -> TransformerOutput:
    """The teacher-forced forward pass: `model` reads `src` (B, S) and `tgt_in` (B, T) (as
    `frame_pairs` makes them) and predicts every target position at once.

    Args:
        model: the Transformer (in the caller's grad / inference mode and autocast).
        weights: which attention maps to return, one of `WEIGHTS`. Maps need the explicit
            attention path; "decoder" leaves the encoder on its fused one.

    Returns:
        The logits (B, T, V) and the maps asked for (the others None).
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {WEIGHTS}, got {weights!r}")
    check_one_row_each(src, tgt_in)
    enc = model.encode(src, need_weights=weights == "all")
    dec = model.decode(tgt_in, enc.memory, enc.src_mask, need_weights=weights != "none")
    return TransformerOutput(dec.logits, enc.attentions, dec.self_attentions, dec.cross_attentions)


def target_log_probs(logits: Tensor, labels: Tensor) -> Tensor:
    """log p(labels[..., t] | ...) from (..., T, V) logits: (..., T), computed in float32 at
    least (float64 stays float64); 0 where the label is padding."""
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    picked = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return picked.masked_fill(labels == PAD_ID, 0.0)
