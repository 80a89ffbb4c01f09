"""The one teacher-forced pass (minitx/teacher_forcing.py) that maps, alignments, attributions
and the experiments' probes share."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minitx.model import Transformer, TransformerConfig
from minitx.teacher_forcing import (
    frame_pairs,
    length_batches,
    target_log_probs,
    teacher_forced,
)
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID

PAIRS = [([5, 6, 7], [8, 9]), ([10], [11, 12, 13, 14])]


def small_model() -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=30,
        tgt_vocab_size=30,
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_positions=16,
    )
    return Transformer(config).eval()


def test_length_batches_sort_by_length_and_leave_out_empty_sequences() -> None:
    ids = [[1, 2, 3], [], [4], [5, 6], [7]]
    assert length_batches(ids, 2) == [[2, 4], [3, 0]]
    assert length_batches([[], []], 4) == []


def test_pairs_are_framed_and_padded_as_in_training() -> None:
    src, tgt_in, labels = frame_pairs(PAIRS)
    assert src.tolist() == [[5, 6, 7, EOS_ID], [10, EOS_ID, PAD_ID, PAD_ID]]
    assert tgt_in.tolist() == [[BOS_ID, 8, 9, PAD_ID, PAD_ID], [BOS_ID, 11, 12, 13, 14]]
    assert labels.tolist() == [[8, 9, EOS_ID, PAD_ID, PAD_ID], [11, 12, 13, 14, EOS_ID]]


def test_the_pass_is_the_models_forward_pass_with_the_maps_asked_for() -> None:
    model = small_model()
    src, tgt_in, _ = frame_pairs(PAIRS)
    with torch.inference_mode():
        full = model(src, tgt_in, need_weights=True)
        everything = teacher_forced(model, src, tgt_in, weights="all")
        decoder = teacher_forced(model, src, tgt_in, weights="decoder")
        plain = teacher_forced(model, src, tgt_in)
    assert torch.equal(everything.logits, full.logits)
    for mine, theirs in zip(everything.encoder_attentions, full.encoder_attentions, strict=True):
        assert torch.equal(mine, theirs)
    for mine, theirs in zip(everything.cross_attentions, full.cross_attentions, strict=True):
        assert torch.equal(mine, theirs)
    assert decoder.encoder_attentions is None and len(decoder.cross_attentions) == 2
    assert plain.cross_attentions is None and plain.logits.shape == full.logits.shape
    with pytest.raises(ValueError, match="weights must be one of"):
        teacher_forced(model, src, tgt_in, weights="cross")


def test_target_log_probs_are_the_negative_cross_entropy_and_skip_padding() -> None:
    model = small_model()
    src, tgt_in, labels = frame_pairs(PAIRS)
    with torch.inference_mode():
        logits = teacher_forced(model, src, tgt_in).logits  # (B, T, V)
    picked = target_log_probs(logits, labels)  # (B, T)
    assert picked.dtype == torch.float32
    assert (picked[labels == PAD_ID] == 0).all() and (picked[labels != PAD_ID] < 0).all()
    expected = -F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=PAD_ID)
    torch.testing.assert_close(picked.sum() / (labels != PAD_ID).sum(), expected)
    assert target_log_probs(logits.double(), labels).dtype == torch.float64  # never narrowed
