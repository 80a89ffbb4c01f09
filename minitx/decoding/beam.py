"""Batched beam search with the KV cache, per-hypothesis eos, GNMT length penalty, n-best."""

from __future__ import annotations

import torch
from torch import Tensor

from minitx.decoding.common import (
    Hypothesis,
    _next_token_scores,
    length_penalty,
    max_target_lengths,
)
from minitx.model import Transformer
from minitx.vocab import BOS_ID, EOS_ID


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
        raise ValueError(
            "beam_search: need beam_size >= 1 and 1 <= n_best <= beam_size, "
            f"got {beam_size}, {n_best}"
        )
    k = beam_size
    device = src.device
    enc = model.encode(src)
    limits = max_target_lengths(src, model, max_len_a, max_len_b).tolist()
    memory = enc.memory.repeat_interleave(k, dim=0)  # (B*K, S, D)
    src_mask = enc.src_mask.repeat_interleave(k, dim=0)  # (B*K, 1, 1, S)
    active = list(range(src.size(0)))  # sentence ids still being decoded, in row order
    tokens = torch.full((len(active) * k, 1), BOS_ID, dtype=torch.long, device=device)
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
        top_scores_l, top_beam_l, top_token_l = (
            top_scores.tolist(),
            top_beam.tolist(),
            top_token.tolist(),
        )

        keep_rows, next_tokens, next_scores, still_active = [], [], [], []
        for row, sent in enumerate(active):
            length = step + 1  # generated tokens including this step's
            live: list[tuple[int, int, float]] = []  # (source row, token, score)
            for rank in range(2 * k):
                score, beam, token = (
                    top_scores_l[row][rank],
                    top_beam_l[row][rank],
                    top_token_l[row][rank],
                )
                if score == float("-inf"):
                    break
                if token == EOS_ID:
                    if rank < k:
                        seq = tokens[row * k + beam, 1:].tolist() + [token]
                        finished[sent].append(
                            Hypothesis(seq, score, score / length_penalty(length, alpha))
                        )
                elif len(live) < k:
                    live.append((row * k + beam, token, score))
            at_cap = length >= limits[sent]
            if at_cap:  # finish the live beams as they are
                for src_row, token, score in live:
                    seq = tokens[src_row, 1:].tolist() + [token]
                    finished[sent].append(
                        Hypothesis(seq, score, score / length_penalty(length, alpha))
                    )
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
        tokens = torch.cat(
            [tokens.index_select(0, index), torch.tensor(next_tokens, device=device)[:, None]],
            dim=1,
        )
        beam_scores = torch.tensor(next_scores, device=device).view(len(still_active), k)
        sentences_left = len(still_active) != len(active)
        if sentences_left:  # drop finished sentences from the encoder outputs
            sent_rows = torch.tensor([active.index(s) for s in still_active], device=device)
            rows = (sent_rows[:, None] * k + torch.arange(k, device=device)).view(-1)
            memory, src_mask = memory.index_select(0, rows), src_mask.index_select(0, rows)
        if cache is not None:  # the beams of a sentence share its cross-attention keys/values
            cache.reorder(index, cross=sentences_left)
        active = still_active

    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:n_best] for hyps in finished]
