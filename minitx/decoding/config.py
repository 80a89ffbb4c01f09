"""`DecodingConfig`: every decoding setting, in one place, with the package's defaults."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from minitx.errors import ConfigError, check_known_keys

DEFAULT_BEAM_SIZE = 5
"""The beam size minitx uses wherever none is given (translate, evaluate, Translator, test)."""
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed")
"""The `DecodingConfig` fields that only strategy "sample" reads."""


@dataclass(frozen=True)
class DecodingConfig:
    """How to turn a source sentence into a translation.

    Attributes:
        strategy: a name in `minitx.decoding.STRATEGIES` ("beam", "greedy", ...).
        beam_size: hypotheses kept per sentence by beam search (ignored by greedy).
        n_best: hypotheses returned per sentence (<= beam_size; 1 for greedy).
        alpha: GNMT length-penalty exponent for ranking beam hypotheses; 0 disables it.
        max_len_a: length cap a·|src| + b generated tokens (eos included) ...
        max_len_b: ... per sentence.
        use_cache: reuse the keys and values of earlier steps (same result, much faster).
        temperature: sampling only: divide the logits by it; 0 means argmax (greedy's output).
        top_k: sampling only: draw among the k most probable tokens (0 = no limit).
        top_p: sampling only: then among the smallest set of most probable tokens whose
            probability reaches top_p (nucleus sampling; 1.0 = no limit).
        seed: sampling only: seed of the local random generators (None: a fresh one each
            call). The same seed gives the same samples, in any batch (see
            `minitx.decoding.sampling`).

    For strategy "sample", `n_best` is the number of samples drawn per sentence (any number),
    returned best score first; the sampling fields must keep their defaults for the other
    strategies, so that no setting is silently ignored.
    """

    strategy: str = "beam"
    beam_size: int = DEFAULT_BEAM_SIZE
    n_best: int = 1
    alpha: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    use_cache: bool = True
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = 0

    def __post_init__(self) -> None:
        from minitx.decoding.strategies import STRATEGIES  # the registry lives beside the code

        STRATEGIES.check(self.strategy, where="DecodingConfig.strategy")
        if self.beam_size < 1:
            raise ConfigError(f"DecodingConfig.beam_size must be >= 1, got {self.beam_size}")
        self._check_sampling()
        if self.strategy == "sample":
            if self.n_best < 1:
                raise ConfigError(
                    f"DecodingConfig.n_best (samples per sentence) must be >= 1, got {self.n_best}"
                )
        elif not 1 <= self.n_best <= self.width:
            raise ConfigError(
                f"DecodingConfig.n_best must be between 1 and the beam size ({self.width}) "
                f"for strategy {self.strategy!r}, got {self.n_best}"
            )
        if self.max_len_a < 0 or self.max_len_b < 0 or (self.max_len_a == 0 and self.max_len_b < 1):
            raise ConfigError(
                f"DecodingConfig: the length cap max_len_a·|src| + max_len_b must allow at least "
                f"one token, got a={self.max_len_a}, b={self.max_len_b}"
            )

    def _check_sampling(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ConfigError(
                f"DecodingConfig.temperature must be >= 0 (0 = argmax), got {self.temperature}"
            )
        if self.top_k < 0:
            raise ConfigError(f"DecodingConfig.top_k must be >= 0 (0 = off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"DecodingConfig.top_p must be in (0, 1] (1 = off), got {self.top_p}")
        if self.seed is not None and (
            isinstance(self.seed, bool) or not isinstance(self.seed, int)
        ):
            raise ConfigError(f"DecodingConfig.seed must be an integer or None, got {self.seed!r}")
        if self.strategy != "sample":
            changed = [
                name
                for name in SAMPLING_FIELDS
                if getattr(self, name) != getattr(DecodingConfig, name)
            ]
            if changed:
                raise ConfigError(
                    f"DecodingConfig: {', '.join(changed)} only apply to strategy 'sample', "
                    f"not {self.strategy!r}; use strategy='sample' or leave them at their defaults"
                )

    @property
    def width(self) -> int:
        """Hypotheses searched per sentence: the beam size for beam search, the number of
        samples for sampling, else 1."""
        if self.strategy == "sample":
            return self.n_best
        return self.beam_size if self.strategy == "beam" else 1

    @classmethod
    def for_beam(cls, beam_size: int, **changes: Any) -> DecodingConfig:
        """Greedy for `beam_size == 1`, else beam search of that size (the CLI's `--beam N`)."""
        strategy = "greedy" if beam_size == 1 else "beam"
        return cls(strategy=strategy, beam_size=beam_size, **changes)

    def replace(self, **changes: Any) -> DecodingConfig:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def describe(self) -> str:
        """Short label for printed results, e.g. "greedy", "beam 5 (alpha 1)" or
        "sampling (temperature 0.7, top-p 0.9, seed 0)"."""
        if self.strategy == "beam":
            return f"beam {self.beam_size} (alpha {self.alpha:g})"
        if self.strategy == "sample":
            parts = [f"temperature {self.temperature:g}"]
            parts += [f"top-k {self.top_k}"] if self.top_k else []
            parts += [f"top-p {self.top_p:g}"] if self.top_p < 1 else []
            parts += [f"seed {self.seed}" if self.seed is not None else "unseeded"]
            return f"sampling ({', '.join(parts)})"
        return self.strategy

    @property
    def file_tag(self) -> str:
        """How output file names name this decoding: "greedy" or "beam5" (beam size)."""
        return f"beam{self.beam_size}" if self.strategy == "beam" else self.strategy

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (hyper-parameters, JSON output)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DecodingConfig:
        """Inverse of `to_dict`; unknown keys are an error."""
        check_known_keys("DecodingConfig", values, (f.name for f in fields(cls)))
        return cls(**values)
