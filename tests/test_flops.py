"""The FLOP formula of minitx.flops equals PyTorch's own count of the model's matmuls."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from minitx.flops import forward_flops, training_flops
from minitx.model import Transformer, TransformerConfig


@pytest.mark.parametrize(("src_len", "tgt_len"), [(7, 5), (4, 9)])
@pytest.mark.parametrize("layers", [(1, 1), (2, 3)])
def test_forward_flops_equal_pytorchs_count(
    src_len: int, tgt_len: int, layers: tuple[int, int]
) -> None:
    config = TransformerConfig(
        src_vocab_size=50, tgt_vocab_size=50, d_model=16, n_heads=2, d_ff=24,
        n_encoder_layers=layers[0], n_decoder_layers=layers[1], dropout=0.0,
    )  # fmt: skip
    model = Transformer(config).eval()
    batch = 3  # equal lengths: no padding, so every computed product is counted
    src = torch.randint(4, 50, (batch, src_len))
    tgt = torch.randint(4, 50, (batch, tgt_len))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(src, tgt, need_weights=True)  # the explicit path: plain matmuls
    assert counter.get_total_flops() == batch * forward_flops(config, src_len, tgt_len)


def test_training_flops_add_up_over_the_batch() -> None:
    config = TransformerConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=16, n_heads=2)
    one = forward_flops(config, 5, 6) + forward_flops(config, 9, 8)
    assert training_flops(config, [5, 9], [6, 8]) == 3 * one
