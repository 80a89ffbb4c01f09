"""The extension points: a score, a positional encoding, an activation and a decoding
strategy each added in this file alone, then trained and decoded with."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from minitx.attention import SCORES
from minitx.decoding import STRATEGIES, DecodingConfig, Hypothesis, decode, greedy_decode
from minitx.layers import ACTIVATIONS
from minitx.model import Transformer, TransformerConfig
from minitx.positional import POSITIONAL_ENCODINGS, PositionalEncoding
from minitx.registry import Registry
from minitx.training import TranslationModule
from minitx.vocab import EOS_ID, PAD_ID

SMALL = dict(
    src_vocab_size=30,
    tgt_vocab_size=30,
    d_model=16,
    n_heads=2,
    n_encoder_layers=1,
    n_decoder_layers=1,
    d_ff=32,
)


class CosineScore(nn.Module):
    """A new score, written here: cosine similarity of q and k times a learned temperature."""

    def __init__(self, *, d_head: int) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(5.0))

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        q, k = nn.functional.normalize(q, dim=-1), nn.functional.normalize(k, dim=-1)
        return self.temperature * (q @ k.transpose(-2, -1))


def batch(seed: int = 0) -> dict[str, Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, 30, (3, 7), generator=g)
    src[:, -1] = EOS_ID
    tgt = torch.randint(4, 30, (3, 6), generator=g)
    return {"src": src, "tgt_in": tgt, "tgt_out": tgt.roll(-1, dims=1)}


def train_one_step(module: TranslationModule) -> None:
    before = [p.detach().clone() for p in module.model.parameters()]
    optimizer = module.configure_optimizers()["optimizer"]
    loss, _, _ = module._losses(batch())
    loss.backward()
    optimizer.step()
    assert torch.isfinite(loss)
    changed = [
        not torch.equal(a, b) for a, b in zip(before, module.model.parameters(), strict=True)
    ]
    assert any(changed)


def test_a_score_registered_in_this_file_trains_and_decodes() -> None:
    with SCORES.temporarily("cosine", CosineScore):
        torch.manual_seed(0)
        module = TranslationModule(transformer={**SMALL, "score": "cosine"})
        scores = [m for m in module.model.modules() if isinstance(m, CosineScore)]
        assert len(scores) == 3  # encoder self, decoder self, cross
        train_one_step(module)
        assert scores[0].temperature.grad is not None  # the new score is really in the graph
        model = module.model.eval()
        for config in (DecodingConfig(strategy="greedy"), DecodingConfig(beam_size=3)):
            hyps = decode(model, batch()["src"], config)
            assert len(hyps) == 3 and all(h[0].tokens for h in hyps)
        out = model(batch()["src"], batch()["tgt_in"], need_weights=True)
        assert torch.allclose(out.cross_attentions[0].sum(-1), torch.tensor(1.0))
    assert "cosine" not in SCORES
    with pytest.raises(ValueError, match="unknown attention score 'cosine'"):
        TransformerConfig(**{**SMALL, "score": "cosine"})


def test_a_positional_encoding_registered_in_this_file_is_used() -> None:
    class Halving(PositionalEncoding):
        """Scales the embeddings down with position: enough to tell that it ran."""

        def forward(self, x: Tensor, offset: int = 0) -> Tensor:
            steps = torch.arange(offset, offset + x.size(1), dtype=x.dtype)
            return x / (1.0 + steps)[:, None]

    with POSITIONAL_ENCODINGS.temporarily("halving", Halving):
        torch.manual_seed(0)
        module = TranslationModule(transformer={**SMALL, "positional": "halving"})
        assert isinstance(module.model.positional, Halving)
        train_one_step(module)


def test_an_activation_registered_in_this_file_is_used() -> None:
    with ACTIVATIONS.temporarily("tanh", nn.Tanh):
        model = Transformer(TransformerConfig(**{**SMALL, "activation": "tanh"}))
        assert isinstance(model.encoder_layers[0].feed_forward.activation, nn.Tanh)


def test_a_decoding_strategy_registered_in_this_file_is_reachable_from_the_config() -> None:
    calls = []

    def first_token_only(model, src, config):
        calls.append(config)
        return [[Hypothesis([EOS_ID], 0.0, 0.0)] for _ in range(src.size(0))]

    with STRATEGIES.temporarily("eos_only", first_token_only):
        torch.manual_seed(0)
        model = Transformer(TransformerConfig(**SMALL)).eval()
        config = DecodingConfig(strategy="eos_only")
        assert decode(model, batch()["src"], config) == [[Hypothesis([EOS_ID], 0.0, 0.0)]] * 3
        assert calls == [config]
    with pytest.raises(ValueError, match="unknown decoding strategy 'eos_only'"):
        DecodingConfig(strategy="eos_only")


def test_registry_rejects_a_second_entry_under_a_taken_name() -> None:
    registry: Registry[type] = Registry("thing")
    registry.register("a")(int)
    with pytest.raises(ValueError, match="thing 'a' is registered already"):
        registry.register("a")(float)
    assert list(registry) == ["a"] and registry["a"] is int


def test_greedy_strategy_equals_greedy_decode() -> None:
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = batch(3)["src"]
    ids = greedy_decode(model, src)
    hyps = decode(model, src, DecodingConfig(strategy="greedy"))
    for row, (hyp,) in zip(ids.tolist(), hyps, strict=True):
        assert hyp.tokens == [t for t in row if t != PAD_ID]


def test_rotary_model_is_causal_and_caches_like_full_recomputation() -> None:
    """RoPE reaches self-attention through the q/k hook: cached decoding (queries rotated
    at offset t) equals recomputing the whole prefix, and future tokens stay invisible."""
    torch.manual_seed(2)
    model = Transformer(TransformerConfig(**{**SMALL, "positional": "rotary"})).eval()
    assert model.encoder_layers[0].self_attn.positions is model.positional
    assert model.decoder_layers[0].cross_attn.positions is None
    src = batch(4)["src"]
    cached = greedy_decode(model, src, use_cache=True)
    full = greedy_decode(model, src, use_cache=False)
    assert torch.equal(cached, full)
    tgt = batch(4)["tgt_in"]
    changed = tgt.clone()
    changed[:, 3:] = 5
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])
    # Order matters: swapping two source tokens changes the states of the others (with no
    # positional information at all, those states would stay exactly the same).
    shuffled = src.clone()
    shuffled[:, [0, 1]] = shuffled[:, [1, 0]]
    with torch.no_grad():
        assert not torch.allclose(
            model.encode(src).memory[:, 2:], model.encode(shuffled).memory[:, 2:]
        )
