"""Pieces every decoding strategy shares: the hypothesis record, the length cap, the
next-token step, the length penalty."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from minitx.kv_cache import DecoderCache
from minitx.model import Transformer
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Hypothesis:
    """One beam-search output: token ids (eos included when produced), its total log-probability
    and the length-normalised score used for ranking."""

    tokens: list[int]
    log_prob: float
    score: float

    @classmethod
    def scored(cls, tokens: list[int], log_prob: float, alpha: float) -> Hypothesis:
        """`tokens` with their log-probability, ranked by it over the GNMT length penalty of
        their length (eos included): the one score of every strategy."""
        return cls(tokens, log_prob, log_prob / length_penalty(len(tokens), alpha))


def length_penalty(length: int, alpha: float) -> float:
    """GNMT length penalty ((5 + length) / 6) ** alpha (Wu et al., 2016); alpha=0 disables it."""
    return ((5.0 + length) / 6.0) ** alpha


def max_target_lengths(src: Tensor, model: Transformer, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence cap on generated tokens (eos included): (B,) long tensor."""
    src_len = (src != PAD_ID).sum(-1)  # (B,)
    most = model.config.max_positions - 1  # bos takes one position
    # Capped before the cast to int64: a huge a or b overflowed it to a negative cap, which
    # the clamp then made one token. In fp32 (no float64 on mps), the caps of every a as before.
    limit = (src_len.float() * max_len_a).clamp(max=most).long() + min(max_len_b, most)
    return limit.clamp(1, most)


def next_token_log_probs(
    model: Transformer, tokens: Tensor, memory: Tensor, src_mask: Tensor, cache: DecoderCache | None
) -> Tensor:
    """(N, V) log-probabilities (fp32) of the token after `tokens` (N, 1 + t), the step every
    strategy takes; with a `cache` only the last token is fed. Pad and bos can never be
    generated."""
    step_in = tokens[:, -1:] if cache is not None else tokens
    logits = model.decode(step_in, memory, src_mask, cache=cache).logits[:, -1]  # (N, V)
    logits = logits.float()  # bf16 logits: an fp32 copy; fp32 ones: themselves
    if logits.is_contiguous() and not logits.requires_grad:
        # In place: a fresh (N, V) tensor every step (beam search: 640 x 8,000 floats) costs
        # the allocator's page faults, more than the softmax itself; no one else reads logits.
        logp = torch.log_softmax(logits, dim=-1, out=logits)
    else:  # a strided view of (N, T, V) without the cache, or logits that keep a gradient
        logp = torch.log_softmax(logits, dim=-1)
    logp[:, PAD_ID] = float("-inf")
    logp[:, BOS_ID] = float("-inf")
    return logp


def until_eos(tokens: list[int]) -> list[int]:
    """Generated ids up to their eos (included), or without padding when no eos came."""
    return (
        tokens[: tokens.index(EOS_ID) + 1]
        if EOS_ID in tokens
        else [t for t in tokens if t != PAD_ID]
    )
