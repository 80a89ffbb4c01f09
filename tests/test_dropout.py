"""minitx.dropout: nn.Dropout's contract with a mask drawn two elements per random number."""

import pytest
import torch
from torch import nn

from minitx.dropout import Dropout, dropout_mask, lane_thresholds
from minitx.model import Transformer, TransformerConfig


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_both_lanes_of_a_draw_drop_with_probability_p(p):
    torch.manual_seed(0)
    keep = dropout_mask(torch.Size([1_000_000]), p).float()
    # Even and odd elements come from the two 16-bit halves of each 32-bit draw: a threshold
    # given to the wrong half would keep one of them always (or never).
    for lane in (keep[0::2], keep[1::2]):
        assert lane.mean().item() == pytest.approx(1 - p, abs=3e-3)


def test_thresholds_round_p_to_two_to_the_minus_15_and_stay_in_int16():
    assert lane_thresholds(0.5).tolist() in ([0, 16384], [16384, 0])
    assert max(lane_thresholds(1 - 1e-9).tolist()) == 2**15 - 1  # no overflow near p = 1


def test_training_zeroes_or_scales_each_element_and_keeps_the_dtype():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 7, dtype=torch.bfloat16)  # an odd number of elements
    out = Dropout(0.25).train()(x)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    kept = out != 0
    assert 0 < kept.sum() < x.numel()
    torch.testing.assert_close(out[kept], x[kept] * (1 / 0.75))


def test_the_gradient_is_the_mask_scaled():
    torch.manual_seed(0)
    x = torch.randn(64, 33, requires_grad=True)
    out = Dropout(0.1).train()(x)
    out.sum().backward()
    torch.testing.assert_close(x.grad, (out != 0).float() / 0.9)


def test_eval_mode_and_p_zero_return_the_input_and_p_one_zeroes_it():
    x = torch.randn(4, 8)
    assert Dropout(0.1).eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    assert torch.equal(Dropout(1.0).train()(x), torch.zeros_like(x))


def test_a_seed_repeats_the_mask():
    x = torch.ones(100, 100)
    torch.manual_seed(3)
    first = Dropout(0.1).train()(x)
    torch.manual_seed(3)
    again = Dropout(0.1).train()(x)
    other = Dropout(0.1).train()(x)
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_the_model_drops_out_through_it():
    model = Transformer(TransformerConfig(src_vocab_size=50, tgt_vocab_size=50))
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(isinstance(m, Dropout) for m in dropouts)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_the_output_is_the_input_times_the_mask_then_the_scale_to_the_bit(dtype):
    """However the product is computed, it rounds as x * mask * (1 / (1 - p)) does: the
    scale is applied once, at full precision, not rounded into a mask of x's dtype."""
    x = torch.randn(37, 11).to(dtype)
    torch.manual_seed(5)
    out = Dropout(0.1).train()(x)
    torch.manual_seed(5)
    assert torch.equal(out, x * dropout_mask(x.shape, 0.1) * (1 / 0.9))
