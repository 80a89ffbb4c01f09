"""Matrix-multiply FLOPs of the Transformer, from its shapes and a batch's real lengths.

The benchmark divides the FLOPs a training step needs by the step's time and by the matmul
peak it measures at the model's own shapes: the model FLOPs utilisation (MFU).

Counted (a multiply-add is 2 FLOPs), per sentence pair with S source and T target tokens
(padding excluded), width D, feed-forward width F, vocabulary V:

- encoder layer:  S·(8D² + 4DF)   q, k, v, out projections and the feed-forward
                  + 4S²D           scores q·kᵀ and the weighted sum of values
- decoder layer:  T·(12D² + 4DF)  self q, k, v, out; cross q, out; feed-forward
                  + 4SD²           cross-attention k, v of the encoder output
                  + 4T²D + 4TSD    self- and cross-attention scores and sums
- output layer:   2TDV             logits of every target position

Attention is counted over the full T×T (or T×S) matrix of real tokens, as the kernels compute
it (the causal mask halves the useful part only). Embeddings, norms, softmax and the optimizer
are not matmuls and are not counted. A training step costs 3× the forward FLOPs: the backward
pass multiplies twice per forward matmul (gradients of inputs and of weights).
"""

from __future__ import annotations

from collections.abc import Sequence

from minitx.model import TransformerConfig

TRAINING_STEP_FACTOR = 3
"""Forward + backward matmul FLOPs per forward FLOP."""


def forward_flops(config: TransformerConfig, src_len: int, tgt_len: int) -> int:
    """Matmul FLOPs of one teacher-forced forward pass of one sentence pair (see module doc)."""
    d, f, s, t = config.d_model, config.d_ff, src_len, tgt_len
    encoder = s * (8 * d * d + 4 * d * f) + 4 * s * s * d
    decoder = t * (12 * d * d + 4 * d * f) + 4 * s * d * d + 4 * t * t * d + 4 * t * s * d
    output = 2 * t * d * config.tgt_vocab_size
    return config.n_encoder_layers * encoder + config.n_decoder_layers * decoder + output


def training_flops(
    config: TransformerConfig, src_lengths: Sequence[int], tgt_lengths: Sequence[int]
) -> int:
    """Matmul FLOPs of one training step (forward + backward) over a batch of real lengths."""
    pairs = zip(src_lengths, tgt_lengths, strict=True)
    return TRAINING_STEP_FACTOR * sum(forward_flops(config, s, t) for s, t in pairs)
