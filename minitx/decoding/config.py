"""`DecodingConfig`: every decoding setting, in one place, with the package's defaults."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from minitx.errors import ConfigError, check_known_keys

DEFAULT_BEAM_SIZE = 5
"""The beam size minitx uses wherever none is given (translate, evaluate, Translator, test)."""


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
    """

    strategy: str = "beam"
    beam_size: int = DEFAULT_BEAM_SIZE
    n_best: int = 1
    alpha: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    use_cache: bool = True

    def __post_init__(self) -> None:
        from minitx.decoding.strategies import STRATEGIES  # the registry lives beside the code

        STRATEGIES.check(self.strategy, where="DecodingConfig.strategy")
        if self.beam_size < 1:
            raise ConfigError(f"DecodingConfig.beam_size must be >= 1, got {self.beam_size}")
        if not 1 <= self.n_best <= self.width:
            raise ConfigError(
                f"DecodingConfig.n_best must be between 1 and the beam size ({self.width}) "
                f"for strategy {self.strategy!r}, got {self.n_best}"
            )
        if self.max_len_a < 0 or self.max_len_b < 0 or (self.max_len_a == 0 and self.max_len_b < 1):
            raise ConfigError(
                f"DecodingConfig: the length cap max_len_a·|src| + max_len_b must allow at least "
                f"one token, got a={self.max_len_a}, b={self.max_len_b}"
            )

    @property
    def width(self) -> int:
        """Hypotheses searched per sentence: the beam size for beam search, else 1."""
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
        """Short label for printed results, e.g. "greedy" or "beam 5 (alpha 1.0)"."""
        if self.strategy == "beam":
            return f"beam {self.beam_size} (alpha {self.alpha:g})"
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
