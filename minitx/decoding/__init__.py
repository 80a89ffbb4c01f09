"""Decoding: turning source ids into target ids with a trained `Transformer`.

One entry point, `generate(model, src, DecodingConfig(...))`, used by validation,
`Translator` and every command; strategies (greedy,
beam, sample, ...) are `DecodingStrategy` classes in the `STRATEGIES` registry, each
declaring and validating the settings it reads.
All of them work on a batch, stop each sentence at its own eos, cap the output length at
max_len_a·|src| + max_len_b, and never generate pad or bos.
"""

from minitx.decoding.beam import beam_search
from minitx.decoding.common import Hypothesis, length_penalty, max_target_lengths
from minitx.decoding.config import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_BEAM_SIZE,
    MAX_DECODER_ROWS,
    STRATEGIES,
    DecodingConfig,
    DecodingStrategy,
    strategy_for,
)
from minitx.decoding.greedy import greedy_decode
from minitx.decoding.sampling import sample_decode, sampling_distribution
from minitx.decoding.strategies import generate

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BEAM_SIZE",
    "MAX_DECODER_ROWS",
    "STRATEGIES",
    "DecodingConfig",
    "DecodingStrategy",
    "Hypothesis",
    "beam_search",
    "generate",
    "greedy_decode",
    "length_penalty",
    "max_target_lengths",
    "sample_decode",
    "sampling_distribution",
    "strategy_for",
]
