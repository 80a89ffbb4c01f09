"""Attention maps as data: what the model attended to for one sentence pair.

The maps follow the Hugging Face / bertviz layout (one tensor per layer) with the batch
dimension removed, so that plotting and the HTML viewer work on a single sentence.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KINDS: tuple[str, ...] = ("encoder", "decoder", "cross")
"""Attention kinds: encoder self-attention, decoder (causal) self-attention, cross-attention."""


@dataclass
class AttentionMaps:
    """All attention weights of one translation.

    Attributes:
        src_tokens: source subword pieces, length S (as fed to the encoder, eos included).
        tgt_tokens: decoder input pieces, length T (bos first, then the target/generated pieces).
        encoder_attentions: one (H, S, S) tensor per encoder layer.
        decoder_attentions: one (H, T, T) tensor per decoder layer (lower-triangular).
        cross_attentions: one (H, T, S) tensor per decoder layer (queries: target, keys: source).
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    encoder_attentions: tuple[torch.Tensor, ...]
    decoder_attentions: tuple[torch.Tensor, ...]
    cross_attentions: tuple[torch.Tensor, ...]

    def layers(self, kind: str) -> tuple[torch.Tensor, ...]:
        """The per-layer maps of one kind ("encoder", "decoder" or "cross")."""
        if kind not in KINDS:
            raise ValueError(f"unknown attention kind {kind!r}; expected one of {KINDS}")
        return getattr(self, f"{kind}_attentions")

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) for the maps of one kind."""
        if kind == "encoder":
            return self.src_tokens, self.src_tokens
        if kind == "decoder":
            return self.tgt_tokens, self.tgt_tokens
        if kind == "cross":
            return self.tgt_tokens, self.src_tokens
        raise ValueError(f"unknown attention kind {kind!r}; expected one of {KINDS}")


def attention_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean entropy (nats) of each head's attention distributions.

    Args:
        weights: (..., H, Tq, Tk) attention weights, rows summing to 1 (or all zero).

    Returns:
        (..., H) mean over query rows of -sum_k p log p. Low = focused heads.
    """
    p = weights.float()
    ent = -(p * torch.log(p.clamp_min(1e-12))).sum(-1)  # (..., H, Tq)
    return ent.mean(-1)
