"""Greedy and beam-search decoding over a `Transformer`, with or without the KV cache.

Both work on a batch of source sentences, stop each sentence at its own eos, and cap the
output length relative to the source length: max_len = max_len_a * len(src) + max_len_b.
Generated sequences never contain pad or bos.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from minitx.model import Transformer


def max_target_lengths(src: Tensor, model: Transformer, max_len_a: float, max_len_b: int) -> Tensor:
    """Per-sentence cap on generated tokens (eos included): (B,) long tensor."""
    src_len = (src != model.config.pad_id).sum(-1)  # (B,)
    limit = (src_len.float() * max_len_a).long() + max_len_b
    return limit.clamp(1, model.config.max_positions - 1)  # bos takes one position


def _next_token_scores(logits: Tensor, model: Transformer) -> Tensor:
    """Log-probabilities (fp32) of the next token; pad and bos can never be generated."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp[:, model.config.pad_id] = float("-inf")
    logp[:, model.config.bos_id] = float("-inf")
    return logp


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
    c = model.config
    enc = model.encode(src)
    limits = max_target_lengths(src, model, max_len_a, max_len_b)  # (B,)
    batch = src.size(0)
    tokens = torch.full((batch, 1), c.bos_id, dtype=torch.long, device=src.device)  # (B, 1 + t)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    cache = model.new_cache() if use_cache else None
    for step in range(int(limits.max())):
        step_in = tokens[:, -1:] if use_cache else tokens
        logits = model.decode(step_in, enc.memory, enc.src_mask, cache=cache).logits[:, -1]  # (B, V)
        next_token = _next_token_scores(logits, model).argmax(-1)  # (B,)
        next_token = next_token.masked_fill(finished, c.pad_id)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == c.eos_id) | (step + 1 >= limits)
        if bool(finished.all()):
            break
    return tokens[:, 1:]


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


@torch.no_grad()
def beam_search(
    model: Transformer,
    src: Tensor,
    *,
    beam_size: int = 5,
    n_best: int = 1,
    alpha: float = 1.0,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
    use_cache: bool = True,
) -> list[list[Hypothesis]]:
    """Batched beam search.

    Each sentence keeps `beam_size` live hypotheses. A candidate ending in eos that ranks among
    the top `beam_size` of a step is finished; a sentence is done when it has `beam_size`
    finished hypotheses or reaches its length cap (then its live beams are finished as they
    are). Done sentences leave the batch, so the work shrinks as decoding goes on.

    Args:
        model: the Transformer (eval mode).
        src: (B, S) source ids, right-padded.
        beam_size: hypotheses kept per sentence (1 = greedy).
        n_best: hypotheses returned per sentence (<= beam_size).
        alpha: length-penalty exponent (see `length_penalty`).
        max_len_a, max_len_b: length cap a·|src| + b per sentence.
        use_cache: reuse keys/values of earlier steps.

    Returns:
        For each sentence, its `n_best` hypotheses, best (highest score) first.
    """
    if beam_size < 1 or not 1 <= n_best <= beam_size:
        raise ValueError(f"beam_search: need beam_size >= 1 and 1 <= n_best <= beam_size, got {beam_size}, {n_best}")
    c, k = model.config, beam_size
    device = src.device
    enc = model.encode(src)
    limits = max_target_lengths(src, model, max_len_a, max_len_b).tolist()
    memory = enc.memory.repeat_interleave(k, dim=0)  # (B*K, S, D)
    src_mask = enc.src_mask.repeat_interleave(k, dim=0)  # (B*K, 1, 1, S)
    active = list(range(src.size(0)))  # sentence ids still being decoded, in row order
    tokens = torch.full((len(active) * k, 1), c.bos_id, dtype=torch.long, device=device)
    beam_scores = torch.zeros(len(active), k, device=device)
    beam_scores[:, 1:] = float("-inf")  # all beams start identical: expand only the first
    finished: list[list[Hypothesis]] = [[] for _ in active]
    cache = model.new_cache() if use_cache else None

    for step in range(max(limits)):
        step_in = tokens[:, -1:] if use_cache else tokens
        logits = model.decode(step_in, memory, src_mask, cache=cache).logits[:, -1]  # (N*K, V)
        logp = _next_token_scores(logits, model)
        vocab = logp.size(-1)
        candidates = (beam_scores.view(-1, 1) + logp).view(len(active), k * vocab)  # (N, K*V)
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (N, 2K): enough for K non-eos
        top_beam, top_token = top_index // vocab, top_index % vocab
        top_scores_l, top_beam_l, top_token_l = top_scores.tolist(), top_beam.tolist(), top_token.tolist()

        keep_rows, next_tokens, next_scores, still_active = [], [], [], []
        for row, sent in enumerate(active):
            length = step + 1  # generated tokens including this step's
            live: list[tuple[int, int, float]] = []  # (source row, token, score)
            for rank in range(2 * k):
                score, beam, token = top_scores_l[row][rank], top_beam_l[row][rank], top_token_l[row][rank]
                if score == float("-inf"):
                    break
                if token == c.eos_id:
                    if rank < k:
                        seq = tokens[row * k + beam, 1:].tolist() + [token]
                        finished[sent].append(Hypothesis(seq, score, score / length_penalty(length, alpha)))
                elif len(live) < k:
                    live.append((row * k + beam, token, score))
            at_cap = length >= limits[sent]
            if at_cap:  # finish the live beams as they are
                for src_row, token, score in live:
                    seq = tokens[src_row, 1:].tolist() + [token]
                    finished[sent].append(Hypothesis(seq, score, score / length_penalty(length, alpha)))
            if at_cap or len(finished[sent]) >= k or not live:
                continue
            still_active.append(sent)
            live += [live[-1][:2] + (float("-inf"),)] * (k - len(live))  # pad with dead beams
            for src_row, token, score in live:
                keep_rows.append(src_row)
                next_tokens.append(token)
                next_scores.append(score)

        if not still_active:
            break
        index = torch.tensor(keep_rows, device=device)
        tokens = torch.cat([tokens.index_select(0, index), torch.tensor(next_tokens, device=device)[:, None]], dim=1)
        beam_scores = torch.tensor(next_scores, device=device).view(len(still_active), k)
        if len(still_active) != len(active):  # drop finished sentences from the encoder outputs
            sent_rows = torch.tensor([active.index(s) for s in still_active], device=device)
            rows = (sent_rows[:, None] * k + torch.arange(k, device=device)).view(-1)
            memory, src_mask = memory.index_select(0, rows), src_mask.index_select(0, rows)
        if cache is not None:
            cache.reorder(index)
        active = still_active

    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:n_best] for hyps in finished]


def hypotheses_to_tensor(hyps: list[list[Hypothesis]], pad_id: int = 0, device: torch.device | str = "cpu") -> Tensor:
    """Best hypothesis of each sentence as a (B, L) right-padded id tensor on `device` (like `greedy_decode`)."""
    best = [h[0].tokens if h else [] for h in hyps]
    width = max(1, max(len(t) for t in best))
    out = torch.full((len(best), width), pad_id, dtype=torch.long)
    for i, t in enumerate(best):
        out[i, : len(t)] = torch.tensor(t, dtype=torch.long)
    return out.to(device)
