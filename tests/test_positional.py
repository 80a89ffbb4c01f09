"""Tests for minitx.positional (the positional-encoding registry and its entries) and the
sinusoidal encoding of minitx.model."""

from __future__ import annotations

import math

import pytest
import torch

from minitx.model import SinusoidalPositionalEncoding
from minitx.positional import (
    LearnedPositionalEncoding,
    PositionalEncoding,
    RotaryPositionalEncoding,
    make_positional_encoding,
)

FP32 = {"atol": 1e-5, "rtol": 1e-5}


# --------------------------------------------------------------------------------------------
# Positional encodings
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [8, 16])
def test_sinusoidal_values_match_formula(d_model):
    pe = SinusoidalPositionalEncoding(d_model=d_model, max_len=64)
    table = pe(torch.zeros(1, 64, d_model))[0]  # (L, D)
    for p in (0, 1, 7, 63):
        for i in range(d_model // 2):
            angle = p / 10000 ** (2 * i / d_model)
            assert table[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert table[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)
    # It is added to the input, not concatenated or multiplied.
    x = torch.randn(2, 5, d_model, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(pe(x), x + table[:5], **FP32)


def test_sinusoidal_offset_and_limits():
    pe = SinusoidalPositionalEncoding(d_model=8, max_len=10)
    table = pe(torch.zeros(1, 10, 8))[0]
    torch.testing.assert_close(
        pe(torch.zeros(2, 3, 8), offset=4), table[4:7].expand(2, 3, 8), **FP32
    )
    torch.testing.assert_close(pe(torch.zeros(1, 1, 8), offset=9)[0], table[9:10], **FP32)
    with pytest.raises(ValueError, match="exceeds max_len=10"):
        pe(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match="length 11 exceeds max_len=10"):
        pe(torch.zeros(1, 3, 8), offset=8)
    # Derived, so not in the state dict; follows the input dtype.
    assert "pe" not in pe.state_dict()
    assert pe(torch.zeros(1, 2, 8, dtype=torch.bfloat16)).dtype == torch.bfloat16


def test_learned_positional_encoding():
    torch.manual_seed(1)
    pe = LearnedPositionalEncoding(d_model=8, max_len=6)
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(pe(x), x + pe.embedding.weight[:3], **FP32)
    torch.testing.assert_close(pe(x, offset=3), x + pe.embedding.weight[3:6], **FP32)
    with pytest.raises(ValueError, match="exceeds max_len=6"):
        pe(x, offset=4)
    # Trainable: gradient reaches exactly the rows that were used.
    pe(x, offset=2).sum().backward()
    used = pe.embedding.weight.grad.abs().sum(-1) > 0
    assert used.tolist() == [False, False, True, True, True, False]


def test_make_positional_encoding():
    assert isinstance(make_positional_encoding("sinusoidal", 8, 16), SinusoidalPositionalEncoding)
    learned = make_positional_encoding("learned", 8, 16)
    assert isinstance(learned, LearnedPositionalEncoding) and learned.embedding.num_embeddings == 16
    assert type(make_positional_encoding("none", 8, 16)) is PositionalEncoding
    assert isinstance(
        make_positional_encoding("rotary", 8, 16, n_heads=2), RotaryPositionalEncoding
    )
    with pytest.raises(ValueError, match="unknown positional encoding 'alibi'"):
        make_positional_encoding("alibi", 8, 16)


def test_none_adds_nothing_and_checks_the_length():
    pe = make_positional_encoding("none", 8, 4)
    x = torch.randn(2, 3, 8)
    assert pe(x) is x and pe.rotate(x) is x and not pe.uses_qk_hook
    with pytest.raises(ValueError, match="exceeds max_len=4"):
        pe(x, offset=2)


def test_rotary_scores_depend_only_on_the_relative_position():
    """(R_m q)·(R_n k) is the same for (m, n) and (m + s, n + s): RoPE's defining property."""
    torch.manual_seed(3)
    rope = RotaryPositionalEncoding(d_model=16, n_heads=2, max_len=64)  # heads of width 8
    q, k = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 1, 8)

    def score(m: int, n: int) -> torch.Tensor:
        return (rope.rotate(q, offset=m) * rope.rotate(k, offset=n)).sum(-1)

    for m, n, shift in [(0, 0, 5), (3, 1, 7), (2, 9, 20)]:
        torch.testing.assert_close(score(m, n), score(m + shift, n + shift), **FP32)
    assert not torch.allclose(score(3, 1), score(3, 2))  # but they do depend on m - n
    torch.testing.assert_close(rope.rotate(q, 0), q)  # position 0 is not rotated
    # A rotation keeps lengths; offsets match slicing a longer sequence.
    x = torch.randn(2, 2, 10, 8)
    torch.testing.assert_close(rope.rotate(x).norm(dim=-1), x.norm(dim=-1), **FP32)
    torch.testing.assert_close(rope.rotate(x)[:, :, 4:], rope.rotate(x[:, :, 4:], offset=4), **FP32)


def test_rotary_needs_an_even_head_width():
    with pytest.raises(ValueError, match="even head width"):
        RotaryPositionalEncoding(d_model=12, n_heads=4, max_len=8)
