"""The feed-forward activations by name (`TransformerConfig.activation`); register another
with `ACTIVATIONS.register("tanh")(nn.Tanh)`: any module class built with no arguments."""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from minitx.registry import Registry

ACTIVATIONS: Registry[Callable[[], nn.Module]] = Registry(
    "activation", base=nn.Module, functions=False, built_with=()
)
"""Feed-forward activations by name; an entry is built with no arguments."""
ACTIVATIONS.register("relu")(nn.ReLU)
ACTIVATIONS.register("gelu")(nn.GELU)
ACTIVATIONS.register("silu")(nn.SiLU)
