"""Special token ids and where they go: the single source for the tokenizer, batching, model,
decoding and every teacher-forced pass.

The sentencepiece models minitx trains reserve these ids (`minitx.tokenizer`); the model and
decoders read them from here. The framing is written here once too: a source is its pieces
followed by eos (`frame_source`); a target is read by the decoder after bos and predicted up
to eos (`frame_target`); rows of unequal length are right-padded with `PAD_ID` (`pad`).
Training batches (`minitx.data.collate`), the translator, attention maps and the experiments'
probes all build their tensors with these three functions. Torch and the standard library
only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

PAD_ID = 0
"""Padding; never attended to, never generated."""
UNK_ID = 1
"""Unknown piece."""
BOS_ID = 2
"""Beginning of sentence: the first decoder input."""
EOS_ID = 3
"""End of sentence: appended to every source, ends every target."""

PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"


def frame_source(ids: Sequence[int]) -> list[int]:
    """The encoder's input for a source: its (S - 1,) piece ids, without special ids,
    followed by eos: (S,)."""
    return [*ids, EOS_ID]


def frame_target(ids: Sequence[int]) -> tuple[list[int], list[int]]:
    """The teacher-forced (decoder_input, labels) of (T - 1,) target piece ids without
    special ids (e.g. generated ids, eos removed), both (T,): decoder position t reads
    ``decoder_input[t]`` and predicts ``labels[t]``."""
    return [BOS_ID, *ids], [*ids, EOS_ID]


def pad(
    sequences: Sequence[Sequence[int]],
    *,
    multiple: int = 1,
    device: torch.device | str | None = None,
) -> Tensor:
    """Right-pad id sequences with `PAD_ID` into one tensor.

    Args:
        sequences: B rows of ids, of any lengths (empty ones too).
        multiple: the width is the longest row rounded up to a multiple of this (batching
            rounds lengths so that batch shapes come from a small set).
        device: where the tensor goes (default: the CPU).

    Returns:
        (B, L) `torch.long` ids, L = the longest row's length rounded up to `multiple`.
    """
    if multiple < 1:
        raise ValueError(f"pad: multiple must be >= 1, got {multiple}")
    longest = max((len(row) for row in sequences), default=0)
    width = -(-longest // multiple) * multiple
    rows = [[*row, *[PAD_ID] * (width - len(row))] for row in sequences]
    out = torch.tensor(rows, dtype=torch.long) if rows else torch.empty((0, 0), dtype=torch.long)
    return out if device is None else out.to(device)
