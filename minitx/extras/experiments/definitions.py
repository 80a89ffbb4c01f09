"""The experiments: the claims made about attention, each as variants of one base run.

An `Experiment` names a claim and the `Variant`s that test it. A variant is a set of
command-line overrides of `minitx-train` on the 45-minute de->en recipe (`runner.RECIPE`);
every variant of every experiment trains with the same seed, data and time budget, so that
only the overrides differ. Their names (d_head 64 / 256, "3x-lr" = lr 0.003) hold for that
recipe; with another config on top (`--config tiny` for a smoke run) the same overrides apply,
whatever they then mean.

`probes` name the measurements taken on each trained variant besides BLEU and speed:
"attention" (`probes.attention_statistics`, at initialisation and after training),
"word_order" (BLEU with the source words shuffled). The "hard" experiment trains nothing: it
decodes a given checkpoint with hard attention (`trains = False`); nor does "explain"
(`minitx.extras.experiments.explain`), whose variants are the attribution methods it compares with
the attention of a given checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Variant:
    """One training run of an experiment.

    Attributes:
        name: short label, unique within its experiment (used in tables, plots and paths).
        overrides: `minitx-train` arguments as key -> value, e.g.
            {"model.transformer.score": "dot"}; empty = the base config itself.
    """

    name: str
    overrides: dict[str, str] = field(default_factory=dict)

    def arguments(self) -> list[str]:
        """The overrides as command-line arguments, in a stable order."""
        return [f"--{key}={value}" for key, value in sorted(self.overrides.items())]


@dataclass(frozen=True)
class Experiment:
    """A claim about attention and the variants that test it.

    Attributes:
        name: what `minitx-experiment NAME` calls it.
        claim: the claim as the classic explanations make it.
        variants: the runs (for `trains=False`: the decodings of one checkpoint).
        probes: measurements besides BLEU and speed (see the module docstring).
        trains: False for an experiment on a trained checkpoint only.
    """

    name: str
    claim: str
    variants: tuple[Variant, ...]
    probes: tuple[str, ...] = ("attention",)
    trains: bool = True


def _score(name: str) -> Variant:
    return Variant(name, {"model.transformer.score": name} if name != "scaled_dot" else {})


def _heads(n: int) -> dict[str, str]:
    return {} if n == 4 else {"model.transformer.n_heads": str(n)}


EXPERIMENTS: dict[str, Experiment] = {
    e.name: e
    for e in (
        Experiment(
            "scores",
            "Additive, dot, scaled-dot and bilinear scores are interchangeable in quality; "
            "scaled dot is preferred for speed.",
            tuple(_score(name) for name in ("scaled_dot", "dot", "additive", "bilinear")),
        ),
        Experiment(
            "scale",
            "Without the 1/sqrt(d_k) scale the logits grow with d_k, the softmax saturates, "
            "gradients vanish and training suffers, more so for wide heads.",
            (
                Variant("scaled-dh64"),
                Variant("dot-dh64", {"model.transformer.score": "dot"}),
                Variant("scaled-dh256", _heads(1)),
                Variant("dot-dh256", {"model.transformer.score": "dot", **_heads(1)}),
            ),
        ),
        Experiment(
            "position",
            "Self-attention is blind to order: without positional encoding the model cannot "
            "use word order.",
            (
                Variant("none", {"model.transformer.positional": "none"}),
                Variant("sinusoidal"),
                Variant("learned", {"model.transformer.positional": "learned"}),
                Variant("rotary", {"model.transformer.positional": "rotary"}),
            ),
            probes=("attention", "word_order"),
        ),
        Experiment(
            "heads",
            "Several heads attend to different things and beat one head of the same width.",
            tuple(Variant(f"{n}-heads", _heads(n)) for n in (1, 2, 4, 8)),
        ),
        Experiment(
            "hard",
            "Hard attention (the single most probable key, or a sampled one) is rarely used; "
            "what it costs a trained model is never shown.",
            tuple(
                Variant(
                    "soft" if mode == "soft" else f"{mode}-{scope}",
                    {"attention": mode, "scope": scope},
                )
                for mode, scope in (
                    ("soft", "cross"),
                    ("hard-argmax", "cross"),
                    ("hard-sample", "cross"),
                    ("hard-argmax", "all"),
                    ("hard-sample", "all"),
                )
            ),
            probes=(),
            trains=False,
        ),
        Experiment(
            "norm",
            "Pre-LN trains stably at learning rates where post-LN (the original paper) "
            "diverges or needs a long warm-up.",
            (
                Variant("pre-LN"),
                Variant("post-LN", {"model.transformer.norm_first": "false"}),
                Variant("pre-LN-3x-lr", {"model.optim.lr": "0.003"}),
                Variant(
                    "post-LN-3x-lr",
                    {"model.transformer.norm_first": "false", "model.optim.lr": "0.003"},
                ),
            ),
        ),
        Experiment(
            "explain",
            "The weight a head puts on a source word says which word the translation depends "
            "on: attention agrees with gradient attributions, and removing the most attended "
            "word changes the translation as much as removing the most attributed one.",
            tuple(Variant(method) for method in ("saliency", "ixg", "ig")),
            probes=(),
            trains=False,
        ),
    )
}
"""Every experiment by name, in the order `minitx-experiment all` runs them."""
