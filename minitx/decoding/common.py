"""Pieces every decoding strategy shares: the hypothesis record, the length cap, the
next-token scores, the length penalty."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from minitx.model import Transformer
from minitx.vocab import BOS_ID, PAD_ID


@dataclass
class Hypothesis:
    """One beam-search output: token ids (eos included when produced), its total log-probability
    and the length-normalised score used for ranking."""

    tokens: list[int]
    log_prob: float
    score: float


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016); alpha=0 disables it."""
    return ((5.0 + length) / 6.0) ** alpha


def max_target_lengths(src: Tensor, model: Transformer, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence cap on generated tokens (eos included): (B,) long tensor."""
    src_len = (src != PAD_ID).sum(-1)  # (B,)
    limit = (src_len.float() * max_len_a).long() + max_len_b
    return limit.clamp(1, model.config.max_positions - 1)  # bos takes one position


def _next_token_scores(logits: Tensor, model: Transformer) -> Tensor:
    """Log-probabilities (fp32) of the next token; pad and bos can never be generated."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp[:, PAD_ID] = float("-inf")
    logp[:, BOS_ID] = float("-inf")
    return logp
