"""Hard attention, an inference mode: each row of attention weights becomes one-hot
(`ATTENTION_MODES`, `hard_weights`), after the softmax and the mask.

The switch is `attention_mode(model, ...)` (a context manager; `set_attention_mode` below
without the restore): it hands a `HardAttention` to the chosen `MultiHeadAttention` modules
as their `reweight`, which `scaled_dot_product_attention` applies to its weights. It changes
no parameter, so no checkpoint holds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import Tensor, nn

from minitx.attention import MultiHeadAttention
from minitx.errors import ConfigError, check_whole_number

ATTENTION_MODES = ("soft", "hard-argmax", "hard-sample")
"""How attention uses its weights: "soft" the softmax itself (training, and the default);
"hard-argmax" a one-hot row at each query's most probable key; "hard-sample" a one-hot row at a
key drawn from the query's weights. Hard modes are for inference: no gradient reaches the choice."""

HARD_ATTENTION_SCOPES = ("cross", "all")
"""Which attentions `attention_mode` switches: the decoder's cross-attention only,
or every attention (encoder self, decoder self and cross)."""


def check_attention_mode(mode: str) -> None:
    """Raise `ConfigError` unless `mode` is one of `ATTENTION_MODES`."""
    if mode not in ATTENTION_MODES:
        raise ConfigError(
            f"unknown attention mode {mode!r}; choose one of {', '.join(ATTENTION_MODES)}"
        )


def check_attention_scope(scope: str) -> None:
    """Raise `ConfigError` unless `scope` is one of `HARD_ATTENTION_SCOPES`."""
    if scope not in HARD_ATTENTION_SCOPES:
        choices = ", ".join(HARD_ATTENTION_SCOPES)
        raise ConfigError(f"unknown attention scope {scope!r}; choose one of {choices}")


def check_attention_seed(seed: int) -> None:
    """Raise `ConfigError` unless `seed` is a whole number (a float or a string failed at the
    first translation, in torch's manual_seed)."""
    check_whole_number("attention seed", seed)


def hard_weights(weights: Tensor, mode: str, generator: torch.Generator | None = None) -> Tensor:
    """Hard attention: each row of `weights` becomes a one-hot row at one of its keys.

    "hard-argmax" picks the most probable key of each row, "hard-sample" draws a key with the
    row's weights as probabilities (from `generator`, so a seeded generator repeats its draws);
    "soft" returns `weights` unchanged. Masked keys have weight 0, so they are never picked,
    and a row that is all zeros (every key masked) stays all zeros.

    Args:
        weights: (..., Tq, Tk) attention weights: rows summing to 1, or all zeros.
        generator: on the device of `weights`.

    Returns:
        (..., Tq, Tk) one-hot (or all-zero) rows, in the dtype of `weights`.
    """
    check_attention_mode(mode)
    if mode == "soft" or weights.size(-1) == 0:  # no key to pick (an empty source)
        return weights
    alive = weights.sum(dim=-1, keepdim=True) > 0  # (..., Tq, 1); False: every key masked
    if mode == "hard-argmax":
        choice = weights.argmax(dim=-1, keepdim=True)  # (..., Tq, 1)
    else:  # "hard-sample": one draw per row; a dead row draws from dummy ones, zeroed below
        rows = weights.masked_fill(~alive, 1.0).reshape(-1, weights.size(-1))  # (N, Tk)
        choice = torch.multinomial(rows, 1, generator=generator)  # (N, 1)
        choice = choice.view(*weights.shape[:-1], 1)  # (..., Tq, 1)
    one_hot = torch.zeros_like(weights).scatter_(-1, choice, 1.0)  # (..., Tq, Tk)
    return one_hot.masked_fill(~alive, 0.0)


@dataclass
class HardAttention:
    """A `MultiHeadAttention.reweight`: `hard_weights(weights, mode, generator)`.

    Attributes:
        mode: one of `ATTENTION_MODES`.
        generator: the random source of "hard-sample" (None: torch's global one).
    """

    mode: str
    generator: torch.Generator | None = None

    def __post_init__(self) -> None:
        check_attention_mode(self.mode)

    def __call__(self, weights: Tensor) -> Tensor:
        return hard_weights(weights, self.mode, self.generator)


def attention_modules(model: nn.Module, scope: str = "all") -> list[MultiHeadAttention]:
    """The attention modules of a `Transformer` in `scope` (`HARD_ATTENTION_SCOPES`), in
    module order."""
    check_attention_scope(scope)
    if scope == "cross":
        return [layer.cross_attn for layer in model.decoder_layers]
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def set_attention_mode(model: nn.Module, mode: str, *, scope: str, seed: int) -> None:
    """Set `mode` (`ATTENTION_MODES`) in the attentions of
    `scope` (`HARD_ATTENTION_SCOPES`) of `model`, "soft" in all others.

    "hard-sample" draws from one `torch.Generator` seeded with `seed`, on the model's device
    (call this after moving the model), shared by those modules in call order: the same seed,
    inputs and batches give the same draws.

    Raises:
        ConfigError: an unknown mode (from `HardAttention`) or scope, or a seed that is not a
            whole number.
    """
    check_attention_seed(seed)
    chosen = {id(module) for module in attention_modules(model, scope)}
    hard = None
    if mode != "soft":
        generator = None
        if mode == "hard-sample":
            device = next(model.parameters()).device
            # torch takes seeds in [-2**63, 2**64); modulo 2**64 is the seed it makes of those
            # (-1 is 2**64 - 1), so any whole number seeds it, as --seed does for sampling
            generator = torch.Generator(device=device).manual_seed(seed % 2**64)
        hard = HardAttention(mode, generator)  # one generator, shared in call order
    for module in attention_modules(model, "all"):
        module.reweight = hard if id(module) in chosen else None


M = TypeVar("M", bound=nn.Module)


@contextmanager
def attention_mode(model: M, mode: str, *, scope: str = "cross", seed: int = 0) -> Iterator[M]:
    """`set_attention_mode` for a `with` block, which gets `model`: `with
    attention_mode(model, "hard-argmax", scope="cross"): ids = greedy_decode(model, src)`.
    Each module's `reweight` from before comes back afterwards (also after an error). Each
    entry re-seeds "hard-sample"."""
    modules = attention_modules(model, "all")
    saved = [m.reweight for m in modules]
    set_attention_mode(model, mode, scope=scope, seed=seed)
    try:
        yield model
    finally:
        for module, old in zip(modules, saved, strict=True):
            module.reweight = old
