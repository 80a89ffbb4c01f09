"""`AttentionMaps.to_bertviz`: the maps of a real translation in the form bertviz's
encoder-decoder `head_view` and `model_view` take (the batch axis back, tokens per side)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from minitx.maps import AttentionMaps
from minitx.translator import Translator


@pytest.fixture(scope="module")
def maps(tiny_checkpoint: Path) -> AttentionMaps:
    return Translator.from_pretrained(tiny_checkpoint).attention("ein mann fährt fahrrad .")


def test_to_bertviz_restores_the_batch_axis(maps: AttentionMaps) -> None:
    args = maps.to_bertviz()
    assert args["encoder_tokens"] == maps.src_tokens
    assert args["decoder_tokens"] == maps.predicted_tokens  # rows: the piece each one predicts
    assert maps.to_bertviz("input")["decoder_tokens"] == maps.tgt_tokens
    s, t = len(maps.src_tokens), len(maps.tgt_tokens)
    for kind, (n_q, n_k) in {"encoder": (s, s), "decoder": (t, t), "cross": (t, s)}.items():
        layers = args[f"{kind}_attention"]
        assert isinstance(layers, tuple) and len(layers) == len(maps.layers(kind))
        for batched, plain in zip(layers, maps.layers(kind), strict=True):
            assert batched.shape == (1, plain.shape[0], n_q, n_k)
            assert torch.equal(batched[0], plain)
    with pytest.raises(ValueError, match="decoder_tokens must be"):
        maps.to_bertviz("target")


@pytest.mark.parametrize("view", ["head_view", "model_view"])
@pytest.mark.parametrize("decoder_tokens", ["predicted", "input"])
def test_bertviz_draws_the_maps(maps: AttentionMaps, view: str, decoder_tokens: str) -> None:
    bertviz = pytest.importorskip(
        "bertviz",
        reason="pip install --no-deps bertviz (.ci/run does; its views need no transformers)",
    )
    html = getattr(bertviz, view)(**maps.to_bertviz(decoder_tokens), html_action="return").data
    # bertviz embeds the tokens as JSON, with sentencepiece's word marker shown as a space
    for token in {*maps.src_tokens, *maps.to_bertviz(decoder_tokens)["decoder_tokens"]}:
        assert json.dumps(token.replace("\u2581", " ")) in html
    for name in ("Encoder", "Decoder", "Cross"):
        assert f'"name": "{name}"' in html  # all three kinds are in the view
