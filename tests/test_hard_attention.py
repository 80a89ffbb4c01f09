"""Hard attention at inference (minitx.hard_attention and its attention_mode,
Translator's attention_mode, the commands' --attention): one-hot rows over allowed keys only,
soft mode unchanged, seeded sampling that follows the weights, cached decoding unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import TOY_CORPUS_DIR, TOY_TEST_SOURCES

from minitx.attention import (
    MultiHeadAttention,
    causal_mask,
    combine_masks,
    padding_mask,
    scaled_dot_product_attention,
)
from minitx.decoding import DecodingConfig, greedy_decode
from minitx.errors import ConfigError
from minitx.hard_attention import (
    ATTENTION_MODES,
    HardAttention,
    attention_mode,
    attention_modules,
    hard_weights,
)
from minitx.model import Transformer, TransformerConfig
from minitx.translator import Translator

HARD_MODES = [m for m in ATTENTION_MODES if m != "soft"]


def _qkv(b: int = 2, h: int = 3, tq: int = 5, tk: int = 5, d: int = 8, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, h, t, d, generator=g) for t in (tq, tk, tk))


def _masks() -> dict[str, torch.Tensor]:
    """(B, 1, Tq, Tk) masks with padding, causality and fully masked rows, bool and additive."""
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 0, 0]])  # row 1: two pads at the end
    causal_padding = combine_masks(padding_mask(ids), causal_mask(5))  # (B, 1, 5, 5)
    dead = padding_mask(ids).expand(2, 1, 5, 5).clone()
    dead[0, 0, 2] = False  # query 2 of sentence 0 sees no key
    dead[1, 0, 4] = False
    additive = torch.zeros(dead.shape).masked_fill(~dead, float("-inf"))
    return {"padding+causal": causal_padding, "dead rows": dead, "additive": additive}


def _allowed(mask: torch.Tensor) -> torch.Tensor:
    return mask if mask.dtype == torch.bool else torch.isfinite(mask)


# ------------------------------------------------------------------------------ the core
@pytest.mark.parametrize("mode", HARD_MODES)
@pytest.mark.parametrize("kind", list(_masks()))
def test_hard_weights_are_one_hot_rows_over_allowed_keys(mode, kind) -> None:
    q, k, v = _qkv()
    mask = _masks()[kind]
    gen = torch.Generator().manual_seed(1)
    out, weights = scaled_dot_product_attention(q, k, v, mask, reweight=HardAttention(mode, gen))
    allowed = _allowed(mask).expand_as(weights)  # (B, H, Tq, Tk)
    live = allowed.any(dim=-1)  # (B, H, Tq)
    assert set(weights.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(weights.sum(-1), live.float(), rtol=0, atol=0)
    assert not (weights.bool() & ~allowed).any()  # a masked key is never chosen
    # the output of a live row is the value of its chosen key; a dead row's output is zero
    chosen = weights.argmax(dim=-1, keepdim=True)  # (B, H, Tq, 1)
    picked = torch.gather(v, 2, chosen.expand(-1, -1, -1, v.size(-1)))
    torch.testing.assert_close(out, picked * live[..., None])
    if kind == "dead rows":
        assert not live.all() and (out[~live] == 0).all()
    if mode == "hard-argmax":
        _, soft = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(chosen, soft.argmax(dim=-1, keepdim=True), rtol=0, atol=0)


def test_soft_mode_is_the_existing_path_exactly() -> None:
    q, k, v = _qkv()
    for mask in _masks().values():
        before = scaled_dot_product_attention(q, k, v, mask)
        after = scaled_dot_product_attention(q, k, v, mask, reweight=HardAttention("soft"))
        assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        assert hard_weights(before[1], "soft") is before[1]


def test_hard_sample_is_seeded_and_follows_the_weights() -> None:
    probs = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.0])  # the last key is masked
    weights = probs.expand(2, 10_000, 5)  # (H, Tq, Tk): 20000 draws from one row
    draws = [hard_weights(weights, "hard-sample", torch.Generator().manual_seed(7)) for _ in "ab"]
    assert torch.equal(draws[0], draws[1])  # the same seed, the same draws
    other = hard_weights(weights, "hard-sample", torch.Generator().manual_seed(8))
    assert not torch.equal(draws[0], other)
    frequencies = draws[0].reshape(-1, 5).mean(dim=0)
    torch.testing.assert_close(frequencies, probs, rtol=0, atol=0.02)
    assert frequencies[-1] == 0  # never the masked key
    # a row that is nearly one-hot almost always picks its peak; argmax always does
    peaked = torch.tensor([[0.001, 0.998, 0.001]]).expand(1000, 3)
    sampled = hard_weights(peaked, "hard-sample", torch.Generator().manual_seed(0))
    assert sampled[:, 1].mean() > 0.98
    assert hard_weights(peaked, "hard-argmax")[:, 1].all()


def test_unknown_mode_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="hard-argmax"):
        hard_weights(torch.ones(1, 2) / 2, "hardest")
    with pytest.raises(ConfigError, match="hard-argmax"):
        HardAttention("hardest")


@pytest.mark.parametrize("mode", HARD_MODES)
def test_mha_hard_mode_uses_the_explicit_path(mode) -> None:
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 6, 16)
    mask = padding_mask(torch.tensor([[4, 5, 6, 7, 8, 9], [4, 5, 6, 0, 0, 0]]))
    soft, _ = mha(x, mask=mask)
    outs = []
    for need_weights in (False, True):
        mha.reweight = HardAttention(mode, torch.Generator().manual_seed(3))
        out, weights = mha(x, mask=mask, need_weights=need_weights)
        outs.append(out)
    torch.testing.assert_close(outs[0], outs[1])  # no fused shortcut without weights
    assert set(weights.unique().tolist()) == {0.0, 1.0}
    assert not torch.allclose(outs[0], soft)


# ------------------------------------------------------------------------------ the model
def _model(**changes) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        src_vocab_size=40,
        tgt_vocab_size=40,
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=32,
        **changes,
    )
    return Transformer(config).eval()


SRC = torch.tensor([[7, 8, 9, 10, 11, 3], [12, 13, 14, 3, 0, 0]])  # eos 3, pad 0
TGT_IN = torch.tensor([[2, 20, 21, 22], [2, 23, 24, 0]])  # bos 2


def _is_one_hot(maps: tuple[torch.Tensor, ...]) -> bool:
    return all(set(m.unique().tolist()) <= {0.0, 1.0} for m in maps)


@pytest.mark.parametrize("scope", ["cross", "all"])
def test_model_attention_mode_switches_its_scope_and_restores(scope) -> None:
    model = _model()
    with torch.no_grad():
        soft = model(SRC, TGT_IN, need_weights=True)
        with attention_mode(model, "hard-argmax", scope=scope) as switched:
            assert switched is model
            hard = model(SRC, TGT_IN, need_weights=True)
        after = model(SRC, TGT_IN, need_weights=True)
    assert _is_one_hot(hard.cross_attentions)
    others = hard.encoder_attentions + hard.decoder_attentions
    assert _is_one_hot(others) == (scope == "all")
    if scope == "cross":  # the encoder is untouched
        for a, b in zip(hard.encoder_attentions, soft.encoder_attentions, strict=True):
            assert torch.equal(a, b)
    assert not torch.allclose(hard.logits, soft.logits)
    assert torch.equal(after.logits, soft.logits)  # soft again, exactly
    assert all(m.reweight is None for m in attention_modules(model, "all"))


def test_attention_mode_is_not_in_the_checkpoint() -> None:
    model = _model()
    before = model.state_dict()
    with attention_mode(model, "hard-sample", scope="all", seed=3):
        after = model.state_dict()
    assert list(before) == list(after)
    assert all(torch.equal(before[key], after[key]) for key in before)
    assert "attention_mode" not in TransformerConfig.__dataclass_fields__
    with (
        pytest.raises(ConfigError, match="cross, all"),
        attention_mode(model, "hard-argmax", scope="decoder"),
    ):
        pass
    with pytest.raises(ConfigError, match="soft"), attention_mode(model, "hardest"):
        pass


@pytest.mark.parametrize("scope", ["cross", "all"])
def test_greedy_with_hard_attention_cached_equals_uncached(scope) -> None:
    model = _model()
    with attention_mode(model, "hard-argmax", scope=scope):
        cached = greedy_decode(model, SRC, DecodingConfig(use_cache=True))
        uncached = greedy_decode(model, SRC, DecodingConfig(use_cache=False))
    assert torch.equal(cached, uncached)


def test_hard_sample_decoding_repeats_with_its_seed() -> None:
    model = _model()
    runs = []
    for seed in (5, 5, 6):
        with attention_mode(model, "hard-sample", scope="all", seed=seed):
            runs.append(model(SRC, TGT_IN))
    assert torch.equal(runs[0], runs[1])
    assert not torch.equal(runs[0], runs[2])


@pytest.mark.parametrize("mode", HARD_MODES)
def test_hard_attention_decodes_an_empty_source_as_soft_attention_does(mode) -> None:
    """Was torch's argmax IndexError (hard-argmax) or a reshape error (hard-sample): with no
    key to pick, the weights stay the empty ones soft attention has."""
    empty = torch.zeros(2, 3, 4, 0)
    assert hard_weights(empty, mode) is empty
    model, src = _model(), torch.zeros(1, 0, dtype=torch.long)
    soft = greedy_decode(model, src)
    with attention_mode(model, mode, scope="all", seed=1):
        assert torch.equal(greedy_decode(model, src), soft)


@pytest.mark.parametrize("seed", [1.5, "a"])
def test_attention_mode_refuses_a_seed_that_is_not_a_whole_number(seed) -> None:
    """Was torch's manual_seed RuntimeError, or a string-formatting TypeError."""
    with pytest.raises(ConfigError, match="attention seed"):
        with attention_mode(_model(), "hard-sample", seed=seed):
            pass


def test_hard_sample_takes_any_whole_seed_as_sampling_does() -> None:
    """A seed beyond torch's range (2**64 and up, below -2**63) was a traceback at the first
    translation (manual_seed's overflow), where --sample took it: it seeds as its value modulo
    2**64, which is what torch makes of a seed in its range (-1 is 2**64 - 1)."""
    model = _model()
    runs = {}
    for seed in (3, 3 + 2**64, 3 - 2**70, 2**64 - 1, -1, -(2**63) - 1, 2**63 - 1):
        with attention_mode(model, "hard-sample", scope="all", seed=seed):
            runs[seed] = model(SRC, TGT_IN)
    assert torch.equal(runs[3], runs[3 + 2**64]) and torch.equal(runs[3], runs[3 - 2**70])
    assert torch.equal(runs[2**64 - 1], runs[-1])
    assert torch.equal(runs[-(2**63) - 1], runs[2**63 - 1])
    assert not torch.equal(runs[3], runs[-1])


# ------------------------------------------------------------------ Translator, commands
@pytest.fixture(scope="module")
def hard_translator(tiny_checkpoint: Path) -> Translator:
    translator = Translator.from_pretrained(tiny_checkpoint)
    translator.set_attention("hard-argmax", scope="cross")
    return translator


def test_translator_hard_attention_maps_and_settings(hard_translator) -> None:
    maps = hard_translator.attention(TOY_TEST_SOURCES[0], beam_size=1)
    assert _is_one_hot(maps.cross_attentions)
    assert not _is_one_hot(maps.encoder_attentions)  # scope "cross" leaves the encoder soft
    assert all(m.reweight is None for m in attention_modules(hard_translator.model, "all"))
    with pytest.raises(ConfigError):
        Translator(hard_translator.model, hard_translator.tokenizer, attention_mode="hardest")


def test_translate_command_hard_attention(hard_translator, tiny_checkpoint, capsys) -> None:
    from minitx.cli import translate

    sentences = TOY_TEST_SOURCES[:3]
    argv = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", "--attention", "hard-argmax"]
    assert translate.main([*argv, *sentences]) == 0
    assert capsys.readouterr().out.splitlines() == hard_translator.translate(sentences, beam_size=1)


def test_evaluate_command_hard_sample_everywhere(tiny_checkpoint, tmp_path, capsys) -> None:
    from minitx.cli import evaluate

    report = tmp_path / "scores.json"
    argv = ["--checkpoint", str(tiny_checkpoint), "--data", str(TOY_CORPUS_DIR), "--limit", "3"]
    argv += ["--beam", "1", "--attention", "hard-sample", "--hard-attention-scope", "all"]
    argv += ["--seed", "4", "--json", str(report)]
    hyps = []
    for _ in range(2):
        assert evaluate.main([*argv, "--hyp-out", str(tmp_path / f"h{len(hyps)}")]) == 0
        out = capsys.readouterr().out
        assert out.startswith("greedy, hard-sample attention everywhere (seed 4): BLEU ")
        hyps.append((tmp_path / f"h{len(hyps)}").read_text(encoding="utf-8"))
    assert hyps[0] == hyps[1]  # seeded
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["attention"] == {"mode": "hard-sample", "scope": "all", "seed": 4}


def test_evaluate_default_hypothesis_name_names_the_attention(
    tiny_checkpoint, tmp_path, capsys
) -> None:
    from minitx.cli import evaluate

    checkpoint = tmp_path / "model.ckpt"
    checkpoint.write_bytes(tiny_checkpoint.read_bytes())
    argv = ["--checkpoint", str(checkpoint), "--data", str(TOY_CORPUS_DIR), "--limit", "2"]
    assert evaluate.main([*argv, "--beam", "1", "--attention", "hard-argmax"]) == 0
    capsys.readouterr()
    toy = evaluate.data_tag(str(TOY_CORPUS_DIR))  # the corpus's part of the file names
    assert (tmp_path / f"model.test.{toy}.first2.greedy.hard-argmax-cross.hyp").is_file()
    # sampled attention: each seed its own file, so that --seed 3 keeps --seed 2's
    for seed in ("2", "3"):
        hard = ["--attention", "hard-sample", "--seed", seed]
        assert evaluate.main([*argv, "--beam", "1", *hard]) == 0
    capsys.readouterr()
    for seed in ("2", "3"):
        assert (
            tmp_path / f"model.test.{toy}.first2.greedy.hard-sample-cross-seed{seed}.hyp"
        ).is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hard-attention-scope", "all"], "only with a hard --attention"),
        (["--attention", "hard-argmax", "--seed", "1"], "--seed applies only with --sample"),
        (["--attention", "hardest"], "invalid choice"),
    ],
)
def test_attention_option_errors(tiny_checkpoint, capsys, args, message) -> None:
    from minitx.cli import translate

    with pytest.raises(SystemExit) as exit_info:
        translate.main(["--checkpoint", str(tiny_checkpoint), *args, "ein hund"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
