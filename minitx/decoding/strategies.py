"""The built-in decoding strategies (greedy, beam, sample), each a `DecodingStrategy`
registered in `STRATEGIES` (see `minitx.decoding.config`), and the one entry point, `generate`.
"""

from __future__ import annotations

import math
import reprlib
from typing import ClassVar

import torch
from torch import Tensor

from minitx.decoding.beam import beam_search
from minitx.decoding.common import Hypothesis, until_eos
from minitx.decoding.config import (
    DEFAULT_ALPHA,
    MAX_SAMPLES,
    STRATEGIES,
    DecodingConfig,
    DecodingStrategy,
    strategy_for,
)
from minitx.decoding.greedy import greedy_search
from minitx.decoding.sampling import sample_decode
from minitx.errors import ConfigError
from minitx.model import Transformer


@STRATEGIES.register("greedy")
class Greedy(DecodingStrategy):
    """`greedy_decode`, as one hypothesis per sentence, scored as beam search scores: its
    log-probability over the GNMT length penalty with the config's `alpha`."""

    def decode(
        self, model: Transformer, src: Tensor, config: DecodingConfig
    ) -> list[list[Hypothesis]]:
        """One hypothesis per sentence of `src` (B, S)."""
        rows, log_probs = greedy_search(model, src, config)
        hypotheses = []
        for row, log_prob in zip(rows.tolist(), log_probs.tolist(), strict=True):
            hypotheses.append([Hypothesis.scored(until_eos(row), log_prob, config.alpha)])
        return hypotheses


@STRATEGIES.register("beam")
class BeamSearch(DecodingStrategy):
    """`beam_search` with the config's beam size, n-best, length penalty and cap."""

    options: ClassVar[tuple[str, ...]] = ("beam_size",)
    exclusive_options: ClassVar[bool] = False  # greedy is beam size 1 (`--beam 1`)

    def decode(
        self, model: Transformer, src: Tensor, config: DecodingConfig
    ) -> list[list[Hypothesis]]:
        """`config.n_best` hypotheses per sentence of `src` (B, S), best first."""
        return beam_search(model, src, config)

    width_name = "the beam size"

    def width(self, config: DecodingConfig) -> int:
        """The beam size."""
        return config.beam_size

    def describe(self, config: DecodingConfig) -> str:
        """E.g. "beam 5 (alpha 1)"."""
        return f"beam {config.beam_size} (alpha {config.alpha:g})"

    def file_tag(self, config: DecodingConfig) -> str:
        """E.g. "beam5", or "beam5-a0.6" with another length penalty than the default: no
        evaluation replaces another's file."""
        alpha = f"-a{config.alpha:g}" if config.alpha != DEFAULT_ALPHA else ""
        return f"beam{config.beam_size}{alpha}"


@STRATEGIES.register("sample")
class Sampling(DecodingStrategy):
    """`sample_decode`: `n_best` samples per sentence with the config's temperature, top-k,
    top-p and seed, ranked by length-normalised log-probability (`alpha`)."""

    options: ClassVar[tuple[str, ...]] = ("temperature", "top_k", "top_p", "seed")

    def decode(
        self, model: Transformer, src: Tensor, config: DecodingConfig
    ) -> list[list[Hypothesis]]:
        """`config.n_best` samples per sentence of `src` (B, S), best score first."""
        return sample_decode(model, src, config)

    def width(self, config: DecodingConfig) -> int:
        """The number of samples, `n_best`."""
        return config.n_best

    def check(self, config: DecodingConfig) -> None:
        """Temperature >= 0, top-k >= 0, top-p in (0, 1], an integer seed or None, and at
        least one sample per sentence."""
        if not (math.isfinite(config.temperature) and config.temperature >= 0):
            raise ConfigError(
                f"DecodingConfig.temperature must be >= 0 (0 = argmax), got {config.temperature}"
            )
        if config.top_k < 0:
            raise ConfigError(f"DecodingConfig.top_k must be >= 0 (0 = off), got {config.top_k}")
        if not 0 < config.top_p <= 1:
            raise ConfigError(
                f"DecodingConfig.top_p must be in (0, 1] (1 = off), got {config.top_p}"
            )
        seed = config.seed
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise ConfigError(f"DecodingConfig.seed must be an integer or None, got {seed!r}")
        if not 1 <= config.n_best <= MAX_SAMPLES:
            raise ConfigError(
                f"DecodingConfig.n_best (samples per sentence) must lie in [1, {MAX_SAMPLES}], "
                f"got {config.n_best}"
            )

    def describe(self, config: DecodingConfig) -> str:
        """E.g. "sampling (temperature 0.7, top-p 0.9, seed 0)"."""
        parts = [f"temperature {config.temperature:g}"]
        parts += [f"top-k {config.top_k}"] if config.top_k else []
        parts += [f"top-p {config.top_p:g}"] if config.top_p < 1 else []
        parts += [f"seed {config.seed}" if config.seed is not None else "unseeded"]
        return f"sampling ({', '.join(parts)})"

    def file_tag(self, config: DecodingConfig) -> str:
        """E.g. "sample-t0.7-p0.9-seed4": the settings that change the file (limits left at
        "none" and a single sample are left out), so that no seeded sampling replaces another's
        file; unseeded ones ("seed-none") differ at every run anyway.
        """
        parts = [f"t{config.temperature:g}"]
        parts += [f"k{config.top_k}"] if config.top_k else []
        parts += [f"p{config.top_p:g}"] if config.top_p < 1.0 else []
        parts += [f"n{config.n_best}"] if config.n_best > 1 else []  # the best of n is written
        ranked = config.n_best > 1 and config.alpha != DEFAULT_ALPHA  # alpha ranks the samples
        parts += [f"a{config.alpha:g}"] if ranked else []
        parts += ["seed-none" if config.seed is None else f"seed{config.seed}"]
        return "-".join(["sample", *parts])


@torch.no_grad()
def generate(model: Transformer, src: Tensor, config: DecodingConfig) -> list[list[Hypothesis]]:
    """Translate a batch `src` (B, S) of right-padded source ids, each ending in eos, with
    the strategy `config` names (`model` in eval mode). For each sentence its `config.n_best`
    hypotheses, best first; their tokens end with eos when one came before the length cap.

    Raises:
        ValueError: `src` is not (B, S) integer ids of the model's source vocabulary, or the
            model is in training mode (its dropout would change every output).
        TypeError: the strategy returned something else (one of your own, say), which would
            fail later where the hypotheses are read, naming neither it nor the contract.
    """
    check_source(model, src)
    if src.size(0) == 0:  # nothing to translate: no strategy needs to see an empty batch
        return []
    hypotheses = strategy_for(config.strategy).decode(model, src, config)
    if not (
        isinstance(hypotheses, list)
        and len(hypotheses) == src.size(0)
        and all(isinstance(h, list) and h for h in hypotheses)
        and all(isinstance(hyp, Hypothesis) for h in hypotheses for hyp in h)
    ):
        raise TypeError(
            f"decoding strategy {config.strategy!r} returned {reprlib.repr(hypotheses)}: give "
            f"one non-empty list of minitx.decoding.Hypothesis per sentence ({src.size(0)} "
            "here), best first"
        )
    return hypotheses


def check_source(model: Transformer, src: Tensor) -> None:
    """`generate`'s checks, before any strategy runs: torch's own errors for these (an
    IndexError from the embedding, a float tensor's dtype error) named neither the ids nor
    the fix, and a model left in training mode decoded with dropout, without a word."""
    if not isinstance(src, Tensor) or src.dim() != 2:
        shape = tuple(src.shape) if isinstance(src, Tensor) else type(src).__name__
        one = ", src[None] for one sentence" if isinstance(src, Tensor) and src.dim() == 1 else ""
        raise ValueError(f"src {shape}: give (B, S) token ids{one}")
    if src.dtype.is_floating_point or src.dtype.is_complex or src.dtype == torch.bool:
        raise ValueError(f"src is {src.dtype}: give integer token ids (torch.long)")
    vocab = model.config.src_vocab_size
    if src.numel() and not (0 <= int(src.min()) and int(src.max()) < vocab):
        bad = int(src[(src < 0) | (src >= vocab)][0])
        raise ValueError(
            f"src holds id {bad}, not a piece of this model's source vocabulary (0 to "
            f"{vocab - 1}); encode text with the model's tokenizer"
        )
    if model.training:
        raise ValueError("the model is in training mode (dropout on): call model.eval() first")
