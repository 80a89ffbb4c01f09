"""Sampling: draw each next token from the model's (tempered, truncated) distribution.

Batched and KV-cached like greedy decoding. The randomness is local and keyed: every
(sentence, sample) row has its own `torch.Generator`, seeded from the config's seed, the
sentence's source ids and the sample's number. So a seed reproduces its samples exactly, the
global RNG is never touched, and a sentence gets the same samples whatever batch it is
decoded in, alone or with others, in any order (up to floating-point differences of the
logits between batch shapes, which only matter when a uniform draw falls exactly on a
boundary of the cumulative distribution). Two identical sentences get identical samples.
"""

from __future__ import annotations

import hashlib
import secrets

import torch
from torch import Tensor

from minitx.decoding.common import (
    Hypothesis,
    max_target_lengths,
    next_token_log_probs,
    until_eos,
)
from minitx.decoding.config import DecodingConfig
from minitx.model import Transformer
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID


def sampling_distribution(
    logp: Tensor, *, temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0
) -> Tensor:
    """The distribution sampling draws from, in this order: temperature, top-k, top-p.

    Args:
        logp: (N, V) next-token log-probabilities (pad and bos already at -inf).
        temperature: divide the logits by it (> 0; 0 is argmax and handled by the caller).
        top_k: keep the k most probable tokens (0 = all).
        top_p: then keep the smallest set of most probable tokens whose probability reaches
            `top_p` (nucleus sampling; 1.0 = all). The most probable token is always kept.

    Returns:
        (N, V) probabilities, zero outside the kept tokens, each row summing to 1.
    """
    # The most probable token at 0, then times 1/T held inside float32 (MPS has no float64):
    # a tiny temperature leaves the argmax at 0 and sends the others to -inf; a huge one sets
    # every allowed token to 0 (and -inf * 0, NaN, back to -inf). Neither gives NaN.
    shifted = logp - logp.amax(-1, keepdim=True)  # (N, V)
    inverse = min(1.0 / temperature, torch.finfo(logp.dtype).max)
    scores = (shifted * inverse).masked_fill(logp == float("-inf"), float("-inf"))
    # The ranking comes from logp: a temperature keeps it, but float32 can flatten it to ties.
    vocab = scores.size(-1)
    if 0 < top_k < vocab:
        kth = logp.topk(top_k, dim=-1).values[:, -1:]  # (N, 1)
        scores = scores.masked_fill(logp < kth, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if top_p < 1.0:
        order = logp.argsort(dim=-1, descending=True)  # (N, V)
        sorted_probs = probs.gather(-1, order)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass of the more probable tokens
        drop_sorted = before >= top_p
        drop_sorted[:, 0] = False  # the most probable token stays (float32 rounds 1e-46 to 0)
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def _row_seed(seed: int, src_ids: list[int], sample: int) -> int:
    """A 63-bit generator seed for one (sentence, sample) row: stable across runs and
    platforms (a hash of the values, not Python's salted `hash`)."""
    key = f"{seed}|{sample}|{' '.join(map(str, src_ids))}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


@torch.no_grad()
def sample_decode(
    model: Transformer, src: Tensor, config: DecodingConfig
) -> list[list[Hypothesis]]:
    """Draw `config.n_best` translations per sentence with the config's `temperature`, `top_k`
    and `top_p` (see `sampling_distribution`) and `seed` (None draws a fresh one from the
    operating system).

    Temperature 0 is argmax at every step: the samples are then greedy decoding's output
    (as is `top_k=1`). Each sample is a `Hypothesis` whose `log_prob` is its log-probability
    under the model itself (temperature 1, no truncation) and whose `score` is that divided
    by the GNMT length penalty with `alpha`, as for beam search; the samples of a sentence
    are returned best score first. `src` (B, S) holds right-padded source ids.
    """
    device = src.device
    n = config.n_best
    seed = secrets.randbits(63) if config.seed is None else config.seed
    generators = []
    for row in src.tolist():
        ids = [t for t in row if t != PAD_ID]
        for j in range(n):
            generators.append(torch.Generator(device=device).manual_seed(_row_seed(seed, ids, j)))
    enc = model.encode(src)
    memory = enc.memory.repeat_interleave(n, dim=0)  # (B*N, S, D)
    src_mask = enc.src_mask.repeat_interleave(n, dim=0)  # (B*N, 1, 1, S)
    limits = max_target_lengths(src, model, config.max_len_a, config.max_len_b)
    limits = limits.repeat_interleave(n)  # (B*N,)
    rows = memory.size(0)
    tokens = torch.full((rows, 1), BOS_ID, dtype=torch.long, device=device)  # (B*N, 1 + t)
    log_probs = torch.zeros(rows, device=device)
    finished = torch.zeros(rows, dtype=torch.bool, device=device)
    cache = model.new_cache() if config.use_cache else None
    for step in range(int(limits.max())):
        logp = next_token_log_probs(model, tokens, memory, src_mask, cache)  # (B*N, V)
        if config.temperature == 0:
            next_token = logp.argmax(-1)
        else:
            probs = sampling_distribution(
                logp, temperature=config.temperature, top_k=config.top_k, top_p=config.top_p
            )
            draws = torch.cat([torch.rand(1, generator=g, device=device) for g in generators])
            cdf = probs.cumsum(-1)  # (B*N, V); inverse-CDF sampling with the rows' own draws
            next_token = torch.searchsorted(cdf, (draws * cdf[:, -1])[:, None], right=True)[:, 0]
            next_token = next_token.clamp(max=probs.size(-1) - 1)
        next_token = next_token.masked_fill(finished, PAD_ID)
        gained = logp.gather(-1, next_token[:, None])[:, 0]
        log_probs += gained.masked_fill(finished, 0.0)
        tokens = torch.cat([tokens, next_token[:, None]], dim=1)
        finished |= (next_token == EOS_ID) | (step + 1 >= limits)
        if bool(finished.all()):
            break

    out: list[list[Hypothesis]] = []
    for sentence in range(src.size(0)):
        hyps = []
        for row in range(sentence * n, (sentence + 1) * n):
            seq = until_eos(tokens[row, 1:].tolist())
            hyps.append(Hypothesis.scored(seq, float(log_probs[row]), config.alpha))
        out.append(sorted(hyps, key=lambda h: h.score, reverse=True))
    return out
