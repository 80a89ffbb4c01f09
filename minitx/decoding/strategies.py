"""The decoding-strategy registry and the one entry point, `decode`.

A strategy is a function `(model, src (B, S), config) -> list[list[Hypothesis]]`: for each
source sentence its hypotheses, best first. Register a new one with
`@STRATEGIES.register("name")`; `DecodingConfig(strategy="name")` then accepts it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from minitx.decoding.beam import beam_search
from minitx.decoding.common import Hypothesis
from minitx.decoding.greedy import greedy_decode
from minitx.decoding.sampling import sample_decode
from minitx.model import Transformer
from minitx.registry import Registry
from minitx.vocab import EOS_ID, PAD_ID

if TYPE_CHECKING:
    from minitx.decoding.config import DecodingConfig

Strategy = Callable[[Transformer, Tensor, "DecodingConfig"], list[list[Hypothesis]]]

STRATEGIES: Registry[Strategy] = Registry("decoding strategy")
"""Decoding strategies by name."""


@STRATEGIES.register("greedy")
def greedy(model: Transformer, src: Tensor, config: DecodingConfig) -> list[list[Hypothesis]]:
    """`greedy_decode`, as one hypothesis per sentence (greedy does not score: NaN)."""
    ids = greedy_decode(
        model,
        src,
        max_len_a=config.max_len_a,
        max_len_b=config.max_len_b,
        use_cache=config.use_cache,
    )
    out = []
    for row in ids.tolist():
        tokens = row[: row.index(EOS_ID) + 1] if EOS_ID in row else [t for t in row if t != PAD_ID]
        out.append([Hypothesis(tokens, float("nan"), float("nan"))])
    return out


@STRATEGIES.register("beam")
def beam(model: Transformer, src: Tensor, config: DecodingConfig) -> list[list[Hypothesis]]:
    """`beam_search` with the config's beam size, n-best, length penalty and cap."""
    return beam_search(
        model,
        src,
        beam_size=config.beam_size,
        n_best=config.n_best,
        alpha=config.alpha,
        max_len_a=config.max_len_a,
        max_len_b=config.max_len_b,
        use_cache=config.use_cache,
    )


@STRATEGIES.register("sample")
def sample(model: Transformer, src: Tensor, config: DecodingConfig) -> list[list[Hypothesis]]:
    """`sample_decode`: `n_best` samples per sentence with the config's temperature, top-k,
    top-p and seed, ranked by length-normalised log-probability (`alpha`)."""
    return sample_decode(
        model,
        src,
        num_samples=config.n_best,
        temperature=config.temperature,
        top_k=config.top_k,
        top_p=config.top_p,
        seed=config.seed,
        alpha=config.alpha,
        max_len_a=config.max_len_a,
        max_len_b=config.max_len_b,
        use_cache=config.use_cache,
    )


@torch.no_grad()
def decode(model: Transformer, src: Tensor, config: DecodingConfig) -> list[list[Hypothesis]]:
    """Translate a batch of source ids with the strategy the config names.

    Args:
        model: the Transformer, in eval mode.
        src: (B, S) source ids, right-padded, each ending in eos.
        config: the decoding settings.

    Returns:
        For each sentence, its `config.n_best` hypotheses, best first; each hypothesis's
        tokens end with eos when one was generated before the length cap.
    """
    return STRATEGIES[config.strategy](model, src, config)
