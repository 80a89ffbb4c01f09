"""Greedy decoding: the most probable token at every step, batched, KV-cached."""

from __future__ import annotations

import torch
from torch import Tensor

from minitx.decoding.common import max_target_lengths, next_token_log_probs
from minitx.decoding.config import DecodingConfig
from minitx.model import Transformer
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID


def greedy_decode(model: Transformer, src: Tensor, config: DecodingConfig | None = None) -> Tensor:
    """Pick the most probable token at each step. A sentence that has finished (eos or its
    length cap) leaves the batch, so the later steps only compute the unfinished ones.

    `src` (B, S) holds right-padded source ids; `config` (default `DecodingConfig()`) gives
    the length cap and `use_cache`. Returns (B, L) generated ids (no bos), each row ending at
    its eos (if reached before the cap) and right-padded with pad_id.
    """
    return greedy_search(model, src, config)[0]


@torch.no_grad()
def greedy_search(
    model: Transformer, src: Tensor, config: DecodingConfig | None = None
) -> tuple[Tensor, Tensor]:
    """`greedy_decode`, and the log-probability of each row's tokens: ids (B, L) and (B,)
    sums, so that greedy output gets a score as beam search's does."""
    config = config or DecodingConfig()
    enc = model.encode(src)
    memory, src_mask = enc.memory, enc.src_mask  # rows of the sentences still decoding
    limits = max_target_lengths(src, model, config.max_len_a, config.max_len_b)  # (B,)
    batch = src.size(0)
    out = torch.full((batch, int(limits.max())), PAD_ID, dtype=torch.long, device=src.device)
    alive = torch.arange(batch, device=src.device)  # original row of each decoding row
    tokens = torch.full((batch, 1), BOS_ID, dtype=torch.long, device=src.device)  # (N, 1 + t)
    cache = model.new_cache() if config.use_cache else None
    log_prob = torch.zeros(batch, device=src.device)  # (B,) of the tokens chosen so far
    steps = 0
    for step in range(out.size(1)):
        best, next_token = next_token_log_probs(model, tokens, memory, src_mask, cache).max(-1)
        out[alive, step] = next_token  # (N,)
        log_prob[alive] += best
        steps = step + 1
        done = (next_token == EOS_ID) | (step + 1 >= limits[alive])  # (N,)
        if bool(done.all()):
            break
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        if bool(done.any()):  # finished sentences leave the batch: later steps skip them
            keep = (~done).nonzero().squeeze(1)  # (N',)
            alive, tokens = alive[keep], tokens[keep]
            memory, src_mask = memory[keep], src_mask[keep]
            if cache is not None:
                cache.reorder(keep, keep)
    return out[:, :steps], log_prob
