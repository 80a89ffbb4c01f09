"""What `minitx.model.Transformer` returns: `EncoderOutput` from `encode`, `DecoderOutput`
from `decode` / `decoder_states`, `TransformerOutput` from `forward(..., need_weights=True)`.
Attention maps are in the bertviz layout: one (B, H, Tq, Tk) tensor per layer."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


@dataclass
class EncoderOutput:
    """memory (B, S, D), src_mask (B, 1, 1, S) and, when asked, one (B, H, S, S) map per layer."""

    memory: Tensor
    src_mask: Tensor
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class DecoderOutput:
    """Decoder results: `states` (B, T, D) after the last LayerNorm; `logits` (B, T, V), None
    from `Transformer.decoder_states`; when asked, one self-attention map (B, H, T, T') and
    one cross-attention map (B, H, T, S) per layer."""

    states: Tensor
    logits: Tensor | None = None
    self_attentions: tuple[Tensor, ...] | None = None
    cross_attentions: tuple[Tensor, ...] | None = None


@dataclass
class TransformerOutput:
    """`Transformer.forward(..., need_weights=True)` and `minitx.teacher_forcing.teacher_forced`:
    logits (B, T, V) plus maps in the bertviz layout (None where not asked for)."""

    logits: Tensor
    encoder_attentions: tuple[Tensor, ...] | None = None
    decoder_attentions: tuple[Tensor, ...] | None = None
    cross_attentions: tuple[Tensor, ...] | None = None
