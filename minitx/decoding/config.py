"""`DecodingConfig`: every decoding setting, in one place, with the package's defaults; and
`DecodingStrategy`, what the config asks of the strategy its `strategy` field names.

`DecodingConfig` never branches on a strategy's name: it asks the registered class, so a
strategy registered in any file is a full citizen of the config, the inference API and the
commands at once (docs/ARCHITECTURE.md, "A decoding strategy").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields, replace
from typing import TYPE_CHECKING, Any, ClassVar

from minitx.errors import ConfigError, check_known_keys, plain_value
from minitx.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

    from minitx.decoding.common import Hypothesis
    from minitx.model import Transformer

DEFAULT_BEAM_SIZE = 5
"""The beam size minitx uses wherever none is given (translate, evaluate, Translator, test)."""
DEFAULT_BATCH_SIZE = 128
"""Sentences decoded together wherever no batch size is given (translate, evaluate, Translator,
the CTranslate2 wrapper). Every decoding step has a cost that more rows share: on a 2-core
Xeon, batches of 128 decode greedily 1.12-1.29x as fast as batches of 64, beam search
1.03-1.06x (docs/results.md, "CTranslate2"). Peak memory grows with it for long inputs."""
MAX_DECODER_ROWS = 8 * DEFAULT_BATCH_SIZE * DEFAULT_BEAM_SIZE
"""The most decoder rows (sentences x beams or samples) `Translator` decodes at once: it takes
fewer sentences per batch above it, never fewer than one. 16 sentences at beam 8,000 asked
for more than 24 GB and were killed without a word; 5,120 rows of the default model hold
about 3 GB of keys and values at 100 target positions."""
MAX_SAMPLES = 10_000
"""The most samples per sentence: each is a decoder row, and one sentence is decoded whole
(10,000 took 4 GB with the default model; 100,000 were killed without a word)."""
DEFAULT_ALPHA = 1.0
"""GNMT's length-penalty exponent where none is given (`DecodingConfig.alpha`)."""
MAX_ALPHA = 10.0
"""The largest length-penalty exponent: far beyond any useful one, far from where the penalty
of a 1,023-piece output overflows (about 138)."""


class DecodingStrategy:
    """A way to decode, as the `STRATEGIES` registry holds it (subclass it, then
    ``@STRATEGIES.register("name")``). Built with no arguments.

    Every strategy reads the shared `DecodingConfig` fields `n_best`, `alpha`, `max_len_a`,
    `max_len_b` and `use_cache`; `options` names the other fields it reads. The defaults below
    describe a strategy with no options that returns one hypothesis per sentence.
    """

    options: ClassVar[tuple[str, ...]] = ()
    """The `DecodingConfig` fields this strategy reads besides the shared ones, e.g.
    ``("temperature", "top_k", "top_p", "seed")`` for sampling."""
    exclusive_options: ClassVar[bool] = True
    """Whether every other strategy must leave `options` at their defaults, so that no setting
    is silently ignored (a `ConfigError` names them). Beam search says False: its `beam_size`
    may stay set under greedy decoding, which the commands' ``--beam 1`` means."""

    def decode(
        self, model: Transformer, src: Tensor, config: DecodingConfig
    ) -> list[list[Hypothesis]]:
        """Translate a batch, `src` (B, S): right-padded source ids, each ending in eos. For
        each sentence its hypotheses, best first (`config.n_best` for the built-in ones)."""
        raise NotImplementedError(f"{type(self).__name__} must implement decode")

    width_name: ClassVar[str] = "the hypotheses it searches"
    """What `width` is called in messages (beam search: "the beam size")."""

    def width(self, config: DecodingConfig) -> int:
        """Hypotheses searched per sentence (`n_best` may not exceed it unless `check` says
        otherwise): 1 here."""
        return 1

    def check(self, config: DecodingConfig) -> None:
        """Raise a `ConfigError` naming a setting this strategy cannot use. Here: `n_best`
        must be between 1 and `width`."""
        width = self.width(config)
        if not 1 <= config.n_best <= width:
            raise ConfigError(
                f"DecodingConfig.n_best must be between 1 and {self.width_name} ({width}) for "
                f"strategy {config.strategy!r}, got {config.n_best}"
            )

    def describe(self, config: DecodingConfig) -> str:
        """Short label for printed results: the strategy's name here."""
        return config.strategy

    def file_tag(self, config: DecodingConfig) -> str:
        """How output file names name this decoding: the strategy's name here."""
        return config.strategy


Strategy = Callable[["Transformer", "Tensor", "DecodingConfig"], "list[list[Hypothesis]]"]
"""A plain function accepted as a registry entry: a strategy with no options of its own and
one hypothesis per sentence (`FunctionStrategy`)."""

STRATEGIES: Registry[type[DecodingStrategy] | Strategy] = Registry(
    "decoding strategy", base=DecodingStrategy
)
"""Decoding strategies by name: `DecodingStrategy` subclasses (or plain functions)."""


class FunctionStrategy(DecodingStrategy):
    """A plain function registered as a strategy (`Strategy`): `DecodingStrategy`'s defaults
    around it."""

    def __init__(self, function: Strategy) -> None:
        self.function = function

    def decode(
        self, model: Transformer, src: Tensor, config: DecodingConfig
    ) -> list[list[Hypothesis]]:
        """The function's hypotheses."""
        return self.function(model, src, config)


def strategy_for(name: str) -> DecodingStrategy:
    """The registered strategy `name`, ready to use.

    Raises:
        ConfigError: no strategy of that name is registered (the message lists them).
    """
    entry = STRATEGIES[name]  # a DecodingStrategy subclass or a function: `register` checks
    return entry() if isinstance(entry, type) else FunctionStrategy(entry)


@dataclass(frozen=True)
class DecodingConfig:
    """How to turn a source sentence into a translation.

    Attributes:
        strategy: a name in `minitx.decoding.STRATEGIES` ("beam", "greedy", "sample", ...).
        beam_size: hypotheses kept per sentence by beam search (ignored by greedy).
        n_best: hypotheses returned per sentence (<= beam_size; 1 for greedy).
        alpha: GNMT length-penalty exponent for ranking beam hypotheses, 0 to `MAX_ALPHA`;
            0 disables it.
        max_len_a: length cap a·|src| + b generated tokens (eos included) ...
        max_len_b: ... per sentence.
        use_cache: reuse the keys and values of earlier steps (same result, much faster;
            under "hard-sample" attention the draws differ, since without the cache every
            step draws again for the earlier positions).
        temperature: sampling only: divide the logits by it; 0 means argmax (greedy's output).
        top_k: sampling only: draw among the k most probable tokens (0 = no limit).
        top_p: sampling only: then among the smallest set of most probable tokens whose
            probability reaches top_p (nucleus sampling; 1.0 = no limit).
        seed: sampling only: seed of the local random generators (None: a fresh one each
            call). The same seed gives the same samples, in any batch (see
            `minitx.decoding.sampling`).

    The strategy validates the settings it reads (`DecodingStrategy.check`): for "sample",
    `n_best` is the number of samples drawn per sentence (up to `MAX_SAMPLES`), returned best
    score first. A strategy's exclusive options (the sampling fields) must keep their defaults
    under the other strategies, so that no setting is silently ignored.
    """

    strategy: str = "beam"
    beam_size: int = DEFAULT_BEAM_SIZE
    n_best: int = 1
    alpha: float = DEFAULT_ALPHA
    max_len_a: float = 1.5
    max_len_b: int = 10
    use_cache: bool = True
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = 0

    def __post_init__(self) -> None:
        self._check_types()
        STRATEGIES.check(self.strategy, where="DecodingConfig.strategy")
        if self.beam_size < 1:
            raise ConfigError(f"DecodingConfig.beam_size must be >= 1, got {self.beam_size}")
        # Above the cap ((5 + length) / 6) ** 1000 overflowed. Below 0 the penalty shrinks
        # with length and so punishes long outputs twice: at -5 the best was eos alone, an
        # empty translation that looks like an empty input line.
        if not 0.0 <= self.alpha <= MAX_ALPHA:
            raise ConfigError(
                f"DecodingConfig.alpha must lie in [0, {MAX_ALPHA}], got {self.alpha} "
                "(0 disables the length penalty; GNMT's uses 0.6 to 1)"
            )
        self._check_other_strategies_options()
        self.implementation.check(self)
        if self.max_len_a < 0 or self.max_len_b < 0 or (self.max_len_a == 0 and self.max_len_b < 1):
            raise ConfigError(
                f"DecodingConfig: the length cap max_len_a·|src| + max_len_b must allow at least "
                f"one token, got a={self.max_len_a}, b={self.max_len_b}"
            )

    def _check_types(self) -> None:
        """Whole numbers where counts are meant, true or false for a switch, finite numbers
        elsewhere (as for a `TransformerConfig`, `plain_value`): `alpha` nan ranked the beams
        in an arbitrary order and `max_len_a` nan cut every output to one token, without a
        word."""
        kinds = dict.fromkeys(("beam_size", "n_best", "max_len_b", "top_k", "seed"), "int")
        kinds |= dict.fromkeys(("alpha", "max_len_a", "temperature", "top_p"), "float")
        kinds["use_cache"] = "bool"  # use_cache="no" was read as true
        for name, kind in kinds.items():
            value = getattr(self, name)
            if name == "seed" and value is None:
                continue
            value = plain_value("DecodingConfig", name, value, kind)
            if not math.isfinite(value):
                raise ConfigError(f"DecodingConfig.{name} must be a finite number, got {value!r}")
            object.__setattr__(self, name, value)  # frozen: set once, here, as for any dataclass

    def _check_other_strategies_options(self) -> None:
        """Refuse a setting that only another strategy reads (its exclusive options), changed
        from its default."""
        own = set(self.implementation.options)
        defaults = {f.name: f.default for f in fields(self) if f.default is not MISSING}
        for name in STRATEGIES:
            other = strategy_for(name)
            if not other.exclusive_options:
                continue
            unknown = [option for option in other.options if option not in defaults]
            if unknown:
                raise ConfigError(
                    f"decoding strategy {name!r} declares options {unknown} that are not "
                    f"DecodingConfig fields; its `options` must name fields of {sorted(defaults)}"
                )
            changed = [
                option
                for option in other.options
                if option not in own and getattr(self, option) != defaults[option]
            ]
            if changed:
                raise ConfigError(
                    f"DecodingConfig: {', '.join(changed)} only apply to strategy {name!r}, "
                    f"not {self.strategy!r}; use strategy={name!r} or leave them at their "
                    "defaults"
                )

    def check_beam_fits(self, vocab_size: int) -> None:
        """Refuse a `beam_size` larger than the target vocabulary of `vocab_size` pieces: each
        step scores beam_size x vocab_size candidates per sentence, so it is a mistake, not a
        search.

        Raises:
            ConfigError: naming the largest beam size that fits.
        """
        if self.beam_size > vocab_size:
            raise ConfigError(
                f"beam size {self.beam_size} is larger than the model's target vocabulary "
                f"({vocab_size} pieces); give a beam size of at most {vocab_size} "
                f"({DEFAULT_BEAM_SIZE} is the default)"
            )

    @property
    def implementation(self) -> DecodingStrategy:
        """The registered `DecodingStrategy` that `strategy` names."""
        return strategy_for(self.strategy)

    @property
    def width(self) -> int:
        """Hypotheses searched per sentence, as the strategy says: the beam size for beam
        search, the number of samples for sampling, 1 for greedy."""
        return self.implementation.width(self)

    @classmethod
    def for_beam(cls, beam_size: int, **changes: Any) -> DecodingConfig:
        """Greedy for `beam_size == 1`, else beam search of that size (the CLI's `--beam N`)."""
        return cls().with_changes(beam_size=beam_size, **changes)

    def with_changes(self, **changes: Any) -> DecodingConfig:
        """`replace`, where a `beam_size` change without a `strategy` also picks the strategy,
        greedy for 1 and beam search otherwise: the one place that makes `beam_size=1` mean
        greedy everywhere, as `--beam 1` does on the command line (`for_beam`, `Translator`'s
        and `evaluate`'s keyword changes)."""
        if "beam_size" in changes and "strategy" not in changes:
            changes["strategy"] = "greedy" if changes["beam_size"] == 1 else "beam"
        return self.replace(**changes) if changes else self

    @classmethod
    def from_arguments(cls, decoding: DecodingConfig | None, **changes: Any) -> DecodingConfig:
        """What a `decoding` argument (None: `DecodingConfig()`) and keyword `changes` mean
        together, as every `Translator` method and `evaluate` read them. Anything else as
        `decoding` (a dict, say) is a TypeError that shows the keyword form."""
        if decoding is None:
            decoding = cls()
        elif not isinstance(decoding, DecodingConfig):
            raise TypeError(
                f"decoding must be a DecodingConfig or None, not {type(decoding).__name__}; "
                "give its fields as keywords instead, e.g. translate(sentences, beam_size=5)"
            )
        return decoding.with_changes(**changes)

    def replace(self, **changes: Any) -> DecodingConfig:
        """A copy with some fields changed (validated again); a name that is no field is a
        `ConfigError` listing the fields (``beamsize=3``)."""
        check_known_keys("DecodingConfig", changes, (f.name for f in fields(self)))
        return replace(self, **changes)

    def describe(self) -> str:
        """Short label for printed results, as the strategy says, e.g. "greedy",
        "beam 5 (alpha 1)" or "sampling (temperature 0.7, top-p 0.9, seed 0)"."""
        return self.implementation.describe(self)

    @property
    def file_tag(self) -> str:
        """How output file names name this decoding, as the strategy says: "greedy", "beam5"
        (beam size; "beam5-a0.6" with another alpha than the default) or "sample-t0.7-seed3"
        (the sampling settings)."""
        return self.implementation.file_tag(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DecodingConfig:
        """Inverse of `dataclasses.asdict`; unknown keys are an error."""
        check_known_keys("DecodingConfig", values, (f.name for f in fields(cls)))
        return cls(**values)
