"""Measurements on a model, beyond BLEU: what the experiments report about attention.

`attention_statistics` reads every attention of a model teacher-forced on reference pairs,
one sentence at a time (so no padding enters); `shuffled_sources` is the word-order probe's
input. Everything here reads the model; nothing changes it (gradients are computed and
dropped).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from minitx.attention import MultiHeadAttention
from minitx.maps import KINDS, row_entropy
from minitx.model import Transformer
from minitx.teacher_forcing import frame_pairs, pair_ids, target_log_probs, teacher_forced
from minitx.tokenizer import Tokenizer


def head_divergence(weights: Tensor) -> float:
    """Mean Jensen-Shannon divergence (nats, at most ln 2) between the rows of every pair of
    heads of (H, Tq, Tk) weights, same query; 0.0 for one head."""
    n_heads = weights.size(0)
    if n_heads < 2:
        return 0.0
    a, b = torch.triu_indices(n_heads, n_heads, offset=1)  # every pair of heads, a < b
    p, q = weights[a], weights[b]  # (pairs, Tq, Tk)
    js = row_entropy((p + q) / 2) - (row_entropy(p) + row_entropy(q)) / 2  # (pairs, Tq)
    return float(js.mean())


def _attentions(model: Transformer) -> dict[tuple[str, int], MultiHeadAttention]:
    """(kind, layer) -> that attention module."""
    found = {}
    for layer, block in enumerate(model.encoder_layers):
        found[("encoder", layer)] = block.self_attn
    for layer, block in enumerate(model.decoder_layers):
        found[("decoder", layer)] = block.self_attn
        found[("cross", layer)] = block.cross_attn
    return found


def _one_pair(
    model: Transformer, src: Tensor, tgt_in: Tensor, labels: Tensor
) -> tuple[
    dict[str, tuple[Tensor, ...]], dict[tuple[str, int], float], dict[tuple[str, int], float]
]:
    """One teacher-forced forward/backward pass of one pair (src (1, S); tgt_in and labels
    (1, T), as `minitx.teacher_forcing.frame_pairs` makes them): the weights of every
    attention by kind, one (H, Tq, Tk) tensor per layer, and per (kind, layer) the norm of the
    loss gradient reaching the score's inputs (the projected queries and keys: the gradient
    that flows through the softmax, not the values) and the standard deviation of the score
    logits."""
    squares: dict[tuple[str, int], float] = defaultdict(float)  # |dL/dq|^2 + |dL/dk|^2
    logits: dict[tuple[str, int], float] = {}

    def scores_seen(key: tuple[str, int]):
        def add(grad: Tensor) -> None:
            squares[key] += float(grad.float().pow(2).sum())

        def hook(module: Any, args: tuple, output: Tensor) -> None:
            logits[key] = float(output.detach().float().std())
            for x in args[:2]:  # q (1, H, Tq, Dh), k (1, H, Tk, Dh)
                if x.requires_grad:
                    x.register_hook(add)

        return hook

    handles = [
        attention.score.register_forward_hook(scores_seen(key))
        for key, attention in _attentions(model).items()
    ]
    try:
        with torch.enable_grad():
            # every map: the explicit path, where the score module (and its hook) runs
            out = teacher_forced(model, src, tgt_in, weights="all")
            loss = -target_log_probs(out.logits, labels).mean()  # the cross-entropy
            loss.backward()
    finally:
        for handle in handles:
            handle.remove()
        model.zero_grad(set_to_none=True)
    maps = {
        kind: tuple(m[0].detach().float().cpu() for m in attentions)
        for kind, attentions in zip(
            KINDS,
            (out.encoder_attentions, out.decoder_attentions, out.cross_attentions),
            strict=True,
        )
    }
    grads = {key: math.sqrt(total) for key, total in squares.items()}
    return maps, grads, logits


def attention_statistics(
    model: Transformer,
    tokenizer: Tokenizer,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    max_weight_samples: int = 2000,
) -> dict[str, Any]:
    """Statistics of every attention of `model` (eval mode; put back as it was) over pairs.

    Args:
        sources: source sentences, read teacher-forced one pair at a time.
        references: their reference translations (the decoder inputs and labels).
        max_weight_samples: how many rows' largest weights to keep per attention kind, for a
            histogram.

    Returns:
        A JSON-ready dict: "layers" lists one entry per (kind, layer) with "kind", "layer",
        "entropy" (mean row entropy, nats), "head_entropy" (per head), "max_weight" (mean
        largest weight of a row), "head_divergence" (mean Jensen-Shannon divergence between
        heads), "logit_std" and "grad_norm" (at the score's q and k; means over the pairs);
        "max_weights" holds, per
        kind, up to `max_weight_samples` largest row weights; "pairs" counts the pairs read.
    """
    was_training = model.training
    model.eval()
    entropies: dict[tuple[str, int], list[Tensor]] = defaultdict(list)  # (H, Tq) per pair
    row_maxes: dict[tuple[str, int], list[Tensor]] = defaultdict(list)  # (H, Tq) per pair
    per_pair: dict[tuple[str, int], list[tuple[float, float, float]]] = defaultdict(list)
    max_weights: dict[str, list[float]] = {kind: [] for kind in KINDS}
    device = next(model.parameters()).device
    pairs = 0
    try:
        for source, reference in zip(sources, references, strict=True):
            if not source.strip() or not reference.strip():
                continue
            src_ids, tgt_ids = pair_ids(model, tokenizer, source, reference, "attention probes")
            src, tgt_in, labels = frame_pairs([(src_ids, tgt_ids)], device)  # (1, S), (1, T)
            maps, grads, logits = _one_pair(model, src, tgt_in, labels)
            pairs += 1
            for kind in KINDS:
                for layer, weights in enumerate(maps[kind]):  # (H, Tq, Tk)
                    key = (kind, layer)
                    entropies[key].append(row_entropy(weights))
                    row_maxes[key].append(weights.amax(-1))
                    per_pair[key].append(
                        (head_divergence(weights), logits[key], grads.get(key, 0.0))
                    )
                    max_weights[kind].extend(row_maxes[key][-1].flatten().tolist())
    finally:
        model.train(was_training)
    layers = []
    for kind, layer in sorted(entropies, key=lambda key: (KINDS.index(key[0]), key[1])):
        entropy = torch.cat(entropies[(kind, layer)], -1)  # (H, rows of every pair)
        divergence, logit_std, grad_norm = (
            torch.tensor(per_pair[(kind, layer)], dtype=torch.float64).mean(0).tolist()
        )
        layers.append(
            {
                "kind": kind,
                "layer": layer,
                "entropy": float(entropy.mean()),
                "head_entropy": entropy.mean(-1).tolist(),
                "max_weight": float(torch.cat(row_maxes[(kind, layer)], -1).mean()),
                "head_divergence": divergence,
                "logit_std": logit_std,
                "grad_norm": grad_norm,
            }
        )
    rng = random.Random(0)
    sampled = {
        kind: (
            rng.sample(values, max_weight_samples) if len(values) > max_weight_samples else values
        )
        for kind, values in max_weights.items()
    }
    return {"pairs": pairs, "layers": layers, "max_weights": sampled}


def shuffled_sources(sources: Sequence[str], seed: int = 0) -> list[str]:
    """Each sentence with its whitespace-separated words in a random order (a final "." or
    other punctuation token stays last), the same for a given seed: the word-order probe."""
    rng = random.Random(seed)
    shuffled = []
    for sentence in sources:
        words = sentence.split()
        tail = [words.pop()] if words and not any(c.isalnum() for c in words[-1]) else []
        rng.shuffle(words)
        shuffled.append(" ".join(words + tail))
    return shuffled


__all__ = [
    "attention_statistics",
    "head_divergence",
    "shuffled_sources",
]
