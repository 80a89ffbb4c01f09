"""Greedy decoding: the most probable token at every step, batched, KV-cached."""

from __future__ import annotations

import torch
from torch import Tensor

from minitx.decoding.common import _next_token_scores, max_target_lengths
from minitx.model import Transformer
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    *,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    use_cache: bool = True,
) -> Tensor:
    """Pick the most probable token at each step.

    Args:
        model: the Transformer (put it in eval mode first).
        src: (B, S) source ids, right-padded.
        max_len_a, max_len_b: length cap a·|src| + b per sentence.
        use_cache: reuse keys/values of earlier steps (same result, much faster).

    Returns:
        (B, L) generated ids (no bos), each row ending at its eos (if reached before the cap)
        and right-padded with pad_id.
    """
    enc = model.encode(src)
    limits = max_target_lengths(src, model, max_len_a, max_len_b)  # (B,)
    batch = src.size(0)
    tokens = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=src.device)  # (B, 1 + t)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    cache = model.new_cache() if use_cache else None
    for step in range(int(limits.max())):
        step_in = tokens[:, -1:] if use_cache else tokens
        logits = model.decode(step_in, enc.memory, enc.src_mask, cache=cache).logits[
            :, -1
        ]  # (B, V)
        next_token = _next_token_scores(logits, model).argmax(-1)  # (B,)
        next_token = next_token.masked_fill(finished, PAD_ID)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == EOS_ID) | (step + 1 >= limits)
        if bool(finished.all()):
            break
    return tokens[:, 1:]
