"""The checks behind `minitx.model.TransformerConfig`: every setting in range, every name
registered, the special ids of old checkpoints. A setting minitx cannot use raises
`ConfigError` naming it and what to choose.

Importing this module registers the built-in score functions (`minitx.scores`), positional
encodings (`minitx.positional`) and activations (`minitx.activations`), so that the config
accepts their names.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

import minitx.scores  # noqa: F401  (registers "dot", "additive" and "bilinear" in SCORES)
from minitx.activations import ACTIVATIONS
from minitx.attention import SCORES
from minitx.errors import ConfigError, check_known_keys, plain_value
from minitx.positional import POSITIONAL_ENCODINGS
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID

LEGACY_ID_KEYS = {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
"""Special ids that checkpoints written before minitx.vocab carried in the model config."""

MODEL_MAXIMA = {
    "src_vocab_size": 1 << 20,
    "tgt_vocab_size": 1 << 20,
    "d_model": 8192,
    "n_heads": 256,
    "n_encoder_layers": 128,
    "n_decoder_layers": 128,
    "d_ff": 32768,
    "max_positions": 32768,
}
"""Largest `TransformerConfig` sizes minitx builds, for training or from a file: far
above any model minitx trains (the paper's big model: d_model 1024, d_ff 4096, 6 + 6 layers),
low enough that an absurd config (`d_model: 1000000000`) is refused in one line before anything
is allocated."""


def _heads_hint(d_model: int, n_heads: int) -> str:
    """Valid nearby choices: head counts dividing d_model, and d_model values for n_heads
    that keep the head width even (rotary positions need that; sinusoidal ones an even d_model).
    """
    heads = [h for h in range(1, 2 * n_heads + 3) if d_model % h == 0]
    nearest = sorted(heads, key=lambda h: (abs(h - n_heads), h))[:2]
    step = 2 * n_heads
    below, above = (d_model // step) * step, (d_model // step + 1) * step
    widths = [w for w in (below, above) if w > 0]
    return f"choose n_heads from {sorted(nearest)} or d_model from {widths}"


def check_transformer_config(c: Any) -> None:
    """Raise `ConfigError` for the first setting of the `TransformerConfig` `c` that minitx
    cannot use; a setting given as a numpy number is stored as Python's (`plain_value`)."""
    sizes = ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_positions")
    for field in fields(c):  # from Python any value reaches here: d_model 32.0 built no model
        value = plain_value("TransformerConfig", field.name, getattr(c, field.name), field.type)
        setattr(c, field.name, value)
    for name in (*sizes, "n_encoder_layers", "n_decoder_layers"):
        if getattr(c, name) <= 0:
            raise ConfigError(f"TransformerConfig.{name} must be positive, got {getattr(c, name)}")
        if getattr(c, name) > MODEL_MAXIMA[name]:  # a damaged file would allocate for minutes
            raise ConfigError(
                f"TransformerConfig.{name} must be at most {MODEL_MAXIMA[name]} (the largest "
                f"minitx builds), got {getattr(c, name)}"
            )
    if c.max_positions < 2:  # bos takes one: a decoder of one position generates nothing
        raise ConfigError(
            f"TransformerConfig.max_positions must be at least 2 (bos and one token), got "
            f"{c.max_positions}"
        )
    if c.d_model % c.n_heads:
        raise ConfigError(
            f"TransformerConfig: d_model ({c.d_model}) must be divisible by n_heads "
            f"({c.n_heads}); {_heads_hint(c.d_model, c.n_heads)}"
        )
    for name in ("dropout", "attention_dropout", "activation_dropout"):
        if not 0.0 <= getattr(c, name) < 1.0:
            raise ConfigError(f"TransformerConfig.{name} must be in [0, 1), got {getattr(c, name)}")
    registries = {"activation": ACTIVATIONS, "positional": POSITIONAL_ENCODINGS, "score": SCORES}
    for name, registry in registries.items():
        registry.check(getattr(c, name), where=f"TransformerConfig.{name}")
    try:
        POSITIONAL_ENCODINGS[c.positional].check_config(d_model=c.d_model, n_heads=c.n_heads)
    except ValueError as exc:
        raise ConfigError(f"TransformerConfig: {exc}") from None
    if c.share_embeddings and c.src_vocab_size != c.tgt_vocab_size:
        raise ConfigError(
            f"TransformerConfig: share_embeddings needs equal vocabularies, got src "
            f"{c.src_vocab_size} and tgt {c.tgt_vocab_size}; set share_embeddings=False "
            "for separate vocabularies"
        )
    for name in ("src_vocab_size", "tgt_vocab_size"):  # named, for the key the user gave
        if getattr(c, name) <= max(LEGACY_ID_KEYS.values()):
            raise ConfigError(
                f"TransformerConfig.{name} must be larger than the special ids (pad {PAD_ID}, "
                f"bos {BOS_ID}, eos {EOS_ID}), got {getattr(c, name)}"
            )


def transformer_config_values(values: dict, names: Iterable[str]) -> dict:
    """The settings of a `TransformerConfig.to_dict` dict: the fixed special ids that older
    checkpoints stored are dropped (refused unless they are minitx.vocab's); unknown keys
    are an error."""
    values = dict(values)
    for key, expected in LEGACY_ID_KEYS.items():
        if key in values and (given := values.pop(key)) != expected:
            raise ConfigError(
                f"TransformerConfig: {key} must be {expected} (minitx.vocab), got {given!r}"
            )
    check_known_keys("TransformerConfig", values, names)
    return values
