"""Tests for minitx.model: config validation, parameter counts, tying, attention maps,
equivalence with PyTorch's encoder/decoder stacks, causality and padding invariance."""

from __future__ import annotations

import io
import math
import re
from dataclasses import fields

import numpy as np
import pytest
import torch
from torch import nn

from minitx.attention import MultiHeadAttention, causal_mask
from minitx.errors import VALUE_KINDS
from minitx.model import Transformer, TransformerConfig
from minitx.packing import on_rows, real_rows
from minitx.teacher_forcing import teacher_forced
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID

FP32 = {"atol": 1e-5, "rtol": 1e-5}
LOGITS = {"atol": 1e-4, "rtol": 1e-4}

TINY = dict(
    src_vocab_size=20,
    tgt_vocab_size=20,
    d_model=16,
    n_heads=2,
    n_encoder_layers=1,
    n_decoder_layers=1,
    d_ff=24,
    dropout=0.0,
    max_positions=32,
)


def tiny(seed: int = 0, **overrides) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**TINY, **overrides})).eval()


def rand_ids(shape: tuple[int, ...], vocab: int = 20, seed: int = 0) -> torch.Tensor:
    """Random ids in [4, vocab): never pad/unk/bos/eos."""
    return torch.randint(4, vocab, shape, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------------------------
# Config
# --------------------------------------------------------------------------------------------


BAD_CONFIGS = [
    (dict(d_model=30, n_heads=4), r"d_model \(30\) must be divisible by n_heads \(4\)"),
    (dict(d_model=-8), r"d_model must be positive, got -8"),
    (dict(n_heads=0), r"n_heads must be positive"),
    (dict(src_vocab_size=0), r"src_vocab_size must be positive"),
    (dict(tgt_vocab_size=-5, share_embeddings=False), r"tgt_vocab_size must be positive"),
    (dict(d_ff=-1), r"d_ff must be positive"),
    (dict(max_positions=0), r"max_positions must be positive"),
    (dict(max_positions=1), r"max_positions must be at least 2 \(bos and one token\)"),
    (dict(n_encoder_layers=0), r"n_encoder_layers must be positive, got 0"),
    (dict(n_decoder_layers=-2), r"n_decoder_layers must be positive, got -2"),
    (dict(dropout=1.0), r"dropout must be in \[0, 1\), got 1.0"),
    (dict(dropout=-0.1), r"dropout must be in \[0, 1\)"),
    (dict(attention_dropout=1.5), r"attention_dropout must be in \[0, 1\)"),
    (dict(activation_dropout=-0.5), r"activation_dropout must be in \[0, 1\)"),
    (
        dict(activation="tanh"),
        r"activation: unknown activation 'tanh'; choose one of \('relu', 'gelu'",
    ),
    (dict(positional="alibi"), r"positional: unknown positional encoding 'alibi'; choose one of"),
    (
        dict(score="cosine"),
        r"score: unknown attention score 'cosine'; "
        r"choose one of \('scaled_dot', 'dot', 'additive', 'bilinear'\)",
    ),
    (dict(d_model=9, n_heads=3), r"sinusoidal positions need an even d_model, got 9"),
    (dict(d_model=12, n_heads=4, positional="rotary"), r"rotary positions need an even head width"),
    (
        dict(src_vocab_size=20, tgt_vocab_size=30, share_embeddings=True),
        r"share_embeddings needs equal vocabularies.*20.*30",
    ),
    (
        dict(src_vocab_size=3, tgt_vocab_size=3),
        r"src_vocab_size must be larger than the special ids",
    ),
    # From Python any value arrives: each is refused by its kind before it builds a broken model.
    (dict(d_model=32.0), r"d_model must be a whole number, got 32.0"),
    (dict(n_encoder_layers=1.5), r"n_encoder_layers must be a whole number, got 1.5"),
    (dict(n_heads="4"), r"n_heads must be a whole number, got '4'"),
    (dict(d_ff=True), r"d_ff must be a whole number, got True"),
    (dict(dropout="0.1"), r"dropout must be a number, got '0.1'"),
    (dict(activation=3), r"activation must be a name, got 3"),
    (dict(norm_first="no"), r"norm_first must be true or false, got 'no'"),
    (
        dict(src_vocab_size=3, tgt_vocab_size=30, share_embeddings=False),
        r"larger than the special ids.*got 3",
    ),
]


@pytest.mark.parametrize(
    ("overrides", "message"),
    BAD_CONFIGS,
    ids=[",".join(f"{k}={v}" for k, v in o.items()) for o, _ in BAD_CONFIGS],
)
def test_config_validation(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**{**TINY, **overrides})


def test_every_config_field_has_a_kind_to_check():
    """`check_transformer_config` reads each field's annotation in `VALUE_KINDS`: a new field of
    another type (`int | None`, say) must get its entry, or the check fails with a KeyError."""
    assert {f.type for f in fields(TransformerConfig)} <= set(VALUE_KINDS)


def test_numpy_numbers_are_kept_as_python_numbers_so_checkpoints_load_safely():
    """A config set from numpy (a sweep's `np.arange`) was stored as given: the checkpoint that
    held it could not be read back with torch's ``weights_only`` load."""
    config = TransformerConfig(**{**TINY, "d_model": np.int64(32), "dropout": np.float32(0.5)})
    assert type(config.d_model) is int and type(config.dropout) is float
    assert config == TransformerConfig(**{**TINY, "d_model": 32, "dropout": 0.5})
    buffer = io.BytesIO()
    torch.save({"config": config.to_dict()}, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["config"] == config.to_dict()


def test_config_valid_corner_cases():
    TransformerConfig(
        **{**TINY, "d_model": 9, "n_heads": 3, "positional": "learned"}
    )  # odd D is fine when learned
    TransformerConfig(
        **{**TINY, "src_vocab_size": 10, "tgt_vocab_size": 30, "share_embeddings": False}
    )
    TransformerConfig(**{**TINY, "dropout": 0.0, "attention_dropout": 0.999})
    TransformerConfig(**{**TINY, "dropout": 0, "d_model": np.int64(32)})  # an int, numpy's int
    TransformerConfig()  # the defaults are valid


def test_config_dict_round_trip_and_unknown_keys():
    config = TransformerConfig(
        **{**TINY, "score": "bilinear", "norm_first": False, "share_embeddings": False}
    )
    values = config.to_dict()
    assert set(values) == {f.name for f in fields(TransformerConfig)}
    assert values["score"] == "bilinear" and values["norm_first"] is False
    assert TransformerConfig.from_dict(values) == config
    with pytest.raises(ValueError, match=r"unknown keys \['n_layers', 'width'\]"):
        TransformerConfig.from_dict({**values, "n_layers": 2, "width": 3})
    with pytest.raises(ValueError, match="must be positive"):  # from_dict validates too
        TransformerConfig.from_dict({**values, "d_ff": 0})


def test_special_ids_come_from_minitx_vocab_and_old_checkpoints_still_load():
    config = TransformerConfig(**TINY)
    assert (config.pad_id, config.bos_id, config.eos_id) == (PAD_ID, BOS_ID, EOS_ID)
    assert "pad_id" not in config.to_dict()  # not a setting
    legacy = {**config.to_dict(), "pad_id": 0, "bos_id": 2, "eos_id": 3}  # before minitx.vocab
    assert TransformerConfig.from_dict(legacy) == config
    with pytest.raises(ValueError, match=r"pad_id must be 0 \(minitx.vocab\), got 1$"):
        TransformerConfig.from_dict({**legacy, "pad_id": 1})


# --------------------------------------------------------------------------------------------
# Parameters, embeddings and tying
# --------------------------------------------------------------------------------------------


def expected_parameter_count(c: TransformerConfig) -> int:
    d, dh, f = c.d_model, c.d_model // c.n_heads, c.d_ff
    score = {
        "scaled_dot": 0,
        "dot": 0,
        "bilinear": dh * dh,
        "additive": dh * dh + (dh * dh + dh) + dh,
    }[c.score]
    mha = 4 * (d * d + d) + score
    ff = (d * f + f) + (f * d + d)
    ln = 2 * d
    embeddings = c.src_vocab_size * d + (0 if c.share_embeddings else c.tgt_vocab_size * d)
    positions = c.max_positions * d if c.positional == "learned" else 0
    encoder = c.n_encoder_layers * (mha + ff + 2 * ln)
    decoder = c.n_decoder_layers * (2 * mha + ff + 3 * ln)
    final_norms = 2 * ln if c.norm_first else 0
    output = 0 if c.tie_output else c.tgt_vocab_size * d
    return embeddings + positions + encoder + decoder + final_norms + output


PARAM_VARIANTS = [
    dict(),
    dict(share_embeddings=False, tgt_vocab_size=27),
    dict(share_embeddings=False, tgt_vocab_size=27, tie_output=False),
    dict(tie_output=False, positional="learned", norm_first=False),
    dict(score="bilinear", n_encoder_layers=2, n_decoder_layers=3),
    dict(score="additive", share_embeddings=False, src_vocab_size=31),
]


@pytest.mark.parametrize("overrides", PARAM_VARIANTS, ids=range(len(PARAM_VARIANTS)))
def test_num_parameters_matches_formula(overrides):
    model = tiny(**overrides)
    assert model.num_parameters() == expected_parameter_count(model.config)


@pytest.mark.parametrize(
    ("share", "tie"), [(True, True), (True, False), (False, True), (False, False)]
)
def test_embedding_sharing_and_tying(share, tie):
    model = tiny(share_embeddings=share, tie_output=tie)
    assert (model.src_embed is model.tgt_embed) == share
    assert (model.output.weight is model.tgt_embed.weight) == tie
    if not tie:
        assert model.output.weight is not model.src_embed.weight
    # Tied weights really are one tensor: a change to one shows in the other.
    with torch.no_grad():
        model.tgt_embed.weight[5, 0] = 123.0
    assert (model.output.weight[5, 0].item() == 123.0) == tie
    assert (model.src_embed.weight[5, 0].item() == 123.0) == share


@pytest.mark.parametrize("share", [True, False])
def test_pad_embedding_row_is_zero_at_init(share):
    model = tiny(seed=1, share_embeddings=share)
    for embedding in (model.src_embed, model.tgt_embed):
        assert (embedding.weight[PAD_ID] == 0).all()
        assert embedding.weight[PAD_ID + 1].abs().sum() > 0  # other rows are not
    # Pad tokens in the source then contribute only their positional encoding.
    x = model._embed(model.src_embed, torch.tensor([[PAD_ID, PAD_ID]]))
    torch.testing.assert_close(x[0], model.positional.pe[:2], **FP32)


def test_initialisation_is_chosen_by_module_type():
    """Embeddings (the learned positions too) ~ N(0, 1/D); every nn.Linear Xavier-uniform,
    including an additive score's; a bilinear score keeps its own identity start."""
    model = tiny(score="additive", positional="learned", d_model=64, n_heads=2)
    std = 64**-0.5
    for embedding in (model.src_embed.weight[PAD_ID + 1 :], model.positional.embedding.weight):
        assert abs(embedding.std().item() - std) < 0.15 * std
    for linear in [
        model.encoder_layers[0].self_attn.q_proj,
        model.encoder_layers[0].self_attn.score.w_q,
    ]:
        bound = math.sqrt(6 / (linear.in_features + linear.out_features))
        assert linear.weight.abs().max() <= bound
        assert linear.weight.abs().max() > 0.8 * bound  # Xavier's range, not nn.Linear's default


def test_bilinear_score_is_not_reinitialised_by_the_model():
    model = tiny(score="bilinear")
    w = model.encoder_layers[0].self_attn.score.weight
    torch.testing.assert_close(w, torch.eye(8) / math.sqrt(8), **FP32)


# --------------------------------------------------------------------------------------------
# Forward and attention maps
# --------------------------------------------------------------------------------------------


def test_ids_of_another_rank_or_batch_are_named_before_any_work(monkeypatch):
    """A learner's slips: one sentence as (T,), a batch as (1, B, T), or targets for another
    batch than the sources, which `decode`'s row sharing (for beams) paired silently; the
    teacher-forced pass of `minitx.teacher_forcing` refuses them as `forward` does, and both
    before the encoder runs."""
    model = tiny()
    src, tgt = rand_ids((2, 6), seed=1), rand_ids((2, 5), seed=2)
    with pytest.raises(ValueError, match=re.escape("ids (6,): give (B, T) token ids, ids[None]")):
        model.encode(src[0])
    with pytest.raises(ValueError, match=re.escape("ids (1, 2, 6): give (B, T) token ids") + "$"):
        model.encode(src[None])
    with pytest.raises(ValueError, match=re.escape("ids (5,): give (B, T) token ids")):
        model(src, tgt[0])
    encoded = []
    monkeypatch.setattr(model, "encode", lambda *a, **k: encoded.append(1))
    for src_rows, tgt_rows in ((src, tgt.repeat(2, 1)), (src[:1], tgt)):
        shapes = f"src {tuple(src_rows.shape)}, tgt_in {tuple(tgt_rows.shape)}"
        for run in (model, teacher_forced):
            with pytest.raises(ValueError, match=re.escape(f"{shapes}: give one row of tgt_in")):
                run(model, src_rows, tgt_rows) if run is teacher_forced else run(src_rows, tgt_rows)
    assert not encoded
    monkeypatch.undo()
    assert model(src[:1], tgt[:1]).shape == (1, 5, 20)


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
def test_forward_shapes_and_attention_maps(score):
    model = tiny(n_encoder_layers=2, n_decoder_layers=3, score=score)
    src = rand_ids((2, 6), seed=1)
    src[1, 4:] = 0
    tgt = rand_ids((2, 5), seed=2)
    logits = model(src, tgt)
    assert logits.shape == (2, 5, 20)
    out = model(src, tgt, need_weights=True)
    torch.testing.assert_close(out.logits, logits, **LOGITS)
    assert (
        len(out.encoder_attentions) == 2
        and len(out.decoder_attentions) == 3
        and len(out.cross_attentions) == 3
    )
    for enc in out.encoder_attentions:
        assert enc.shape == (2, 2, 6, 6)
        assert (enc[1, :, :, 4:] == 0).all()  # padded source keys
    for dec in out.decoder_attentions:
        assert dec.shape == (2, 2, 5, 5)
        assert torch.equal(dec, dec.tril())  # causal: lower-triangular
        assert (dec.diagonal(dim1=-2, dim2=-1) > 0).all()
    for cross in out.cross_attentions:
        assert cross.shape == (2, 2, 5, 6)
        assert (cross[1, :, :, 4:] == 0).all()
    for maps in (out.encoder_attentions, out.decoder_attentions, out.cross_attentions):
        for m in maps:
            torch.testing.assert_close(m.sum(-1), torch.ones(m.shape[:-1]), **FP32)
    # Different layers give different maps (they are not one map repeated).
    assert not torch.allclose(out.decoder_attentions[0], out.decoder_attentions[1])


def test_all_padding_source_gives_finite_logits():
    model = tiny(seed=2)
    src = rand_ids((2, 4), seed=3)
    src[0] = 0  # an all-padding sentence
    tgt = rand_ids((2, 3), seed=4)
    fused = model(src, tgt)
    explicit = model(src, tgt, need_weights=True)
    assert torch.isfinite(fused).all()
    torch.testing.assert_close(explicit.logits, fused, **LOGITS)
    assert (explicit.cross_attentions[0][0] == 0).all()


def test_dropout_only_in_training():
    model = tiny(seed=3, dropout=0.3)
    src, tgt = rand_ids((2, 5), seed=5), rand_ids((2, 4), seed=6)
    a, b = model(src, tgt), model(src, tgt)
    torch.testing.assert_close(a, b, atol=0, rtol=0)
    model.train()
    assert not torch.allclose(model(src, tgt), a)


def _sinusoid_table(length: int, d: int) -> torch.Tensor:
    table = torch.zeros(length, d)
    for p in range(length):
        for i in range(d // 2):
            table[p, 2 * i] = math.sin(p / 10000 ** (2 * i / d))
            table[p, 2 * i + 1] = math.cos(p / 10000 ** (2 * i / d))
    return table


def _copy_mha(ours: MultiHeadAttention, ref: nn.MultiheadAttention) -> None:
    ref.in_proj_weight.copy_(
        torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
    )
    ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    ref.out_proj.load_state_dict(ours.out_proj.state_dict())


@pytest.mark.parametrize(
    "overrides",
    [
        dict(),
        dict(norm_first=False, scale_embeddings=False),
        dict(positional="learned", share_embeddings=False, tie_output=False),
    ],
    ids=["preLN", "postLN-unscaled", "learned-untied"],
)
def test_transformer_equals_torch_encoder_decoder_stacks(overrides):
    """Embeddings + PyTorch's TransformerEncoder/Decoder (weights copied) + output = our logits."""
    model = tiny(seed=4, n_encoder_layers=2, n_decoder_layers=2, **overrides)
    c = model.config
    model.train()  # dropout is 0; train mode keeps PyTorch's stacks off their fast path
    d = c.d_model

    def ref_layer(kind):
        cls = nn.TransformerEncoderLayer if kind == "enc" else nn.TransformerDecoderLayer
        return cls(d, c.n_heads, c.d_ff, dropout=0.0, batch_first=True, norm_first=c.norm_first)

    encoder = nn.TransformerEncoder(
        ref_layer("enc"),
        c.n_encoder_layers,
        norm=nn.LayerNorm(d) if c.norm_first else None,
        enable_nested_tensor=False,
    )
    decoder = nn.TransformerDecoder(
        ref_layer("dec"), c.n_decoder_layers, norm=nn.LayerNorm(d) if c.norm_first else None
    )
    with torch.no_grad():
        for ours, ref in zip(model.encoder_layers, encoder.layers, strict=True):
            _copy_mha(ours.self_attn, ref.self_attn)
            ref.linear1.load_state_dict(ours.feed_forward.w1.state_dict())
            ref.linear2.load_state_dict(ours.feed_forward.w2.state_dict())
            ref.norm1.load_state_dict(ours.attn_block.norm.state_dict())
            ref.norm2.load_state_dict(ours.ff_block.norm.state_dict())
        for ours, ref in zip(model.decoder_layers, decoder.layers, strict=True):
            _copy_mha(ours.self_attn, ref.self_attn)
            _copy_mha(ours.cross_attn, ref.multihead_attn)
            ref.linear1.load_state_dict(ours.feed_forward.w1.state_dict())
            ref.linear2.load_state_dict(ours.feed_forward.w2.state_dict())
            ref.norm1.load_state_dict(ours.self_block.norm.state_dict())
            ref.norm2.load_state_dict(ours.cross_block.norm.state_dict())
            ref.norm3.load_state_dict(ours.ff_block.norm.state_dict())
        if c.norm_first:
            encoder.norm.load_state_dict(model.encoder_norm.state_dict())
            decoder.norm.load_state_dict(model.decoder_norm.state_dict())
    encoder.train(), decoder.train()

    def embed(embedding, ids):
        scale = math.sqrt(d) if c.scale_embeddings else 1.0
        if c.positional == "sinusoidal":
            positions = _sinusoid_table(ids.size(1), d)
        else:
            positions = model.positional.embedding.weight[: ids.size(1)]
        return embedding.weight[ids] * scale + positions

    src = rand_ids((2, 6), seed=7)
    src[1, 3:] = 0
    tgt = rand_ids((2, 5), seed=8)
    ignore = src == 0  # PyTorch: True = ignore
    memory = encoder(embed(model.src_embed, src), src_key_padding_mask=ignore)
    states = decoder(
        embed(model.tgt_embed, tgt),
        memory,
        tgt_mask=~causal_mask(5),
        memory_key_padding_mask=ignore,
    )
    expected = states @ model.output.weight.T
    real = ~ignore  # the memory at padded positions is read by nothing: left unspecified
    torch.testing.assert_close(model.encode(src).memory[real], memory[real], **LOGITS)
    torch.testing.assert_close(model(src, tgt), expected, **LOGITS)


# --------------------------------------------------------------------------------------------
# Causality and padding invariance
# --------------------------------------------------------------------------------------------


CAUSAL_VARIANTS = [
    dict(),
    dict(norm_first=False),
    dict(score="additive", positional="learned"),
    dict(score="dot"),
]


@pytest.mark.parametrize("need_weights", [False, True], ids=["fused", "explicit"])
@pytest.mark.parametrize("overrides", CAUSAL_VARIANTS, ids=range(len(CAUSAL_VARIANTS)))
def test_causality_future_targets_do_not_change_past_logits(overrides, need_weights):
    model = tiny(seed=5, n_decoder_layers=2, **overrides)
    src = rand_ids((2, 5), seed=9)
    tgt = rand_ids((2, 7), seed=10)

    def logits(t):
        out = model(src, t, need_weights=need_weights)
        return out.logits if need_weights else out

    base = logits(tgt)
    for t in (0, 2, 5):
        changed = tgt.clone()
        changed[:, t + 1 :] = rand_ids(changed[:, t + 1 :].shape, seed=11 + t)
        assert not torch.equal(changed, tgt)
        new = logits(changed)
        torch.testing.assert_close(new[:, : t + 1], base[:, : t + 1], **LOGITS)
        assert not torch.allclose(
            new[:, t + 1], base[:, t + 1], atol=1e-3
        )  # the change is seen later


PAD_VARIANTS = [
    dict(),
    dict(norm_first=False, score="additive"),
    dict(positional="learned", score="bilinear"),
]


@pytest.mark.parametrize("overrides", PAD_VARIANTS, ids=range(len(PAD_VARIANTS)))
def test_source_padding_invariance(overrides):
    model = tiny(seed=6, n_encoder_layers=2, n_decoder_layers=2, **overrides)
    src = rand_ids((1, 4), seed=12)
    padded = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], dim=1)
    tgt = rand_ids((1, 5), seed=13)
    enc, enc_padded = model.encode(src), model.encode(padded)
    torch.testing.assert_close(enc_padded.memory[:, :4], enc.memory, **LOGITS)
    torch.testing.assert_close(model(padded, tgt), model(src, tgt), **LOGITS)
    torch.testing.assert_close(
        model(padded, tgt, need_weights=True).logits, model(src, tgt), **LOGITS
    )
    # Sanity: a real token in place of the padding does change the result.
    other = padded.clone()
    other[0, 4] = 7
    assert not torch.allclose(model(other, tgt), model(src, tgt), atol=1e-3)


def test_batched_forward_equals_one_at_a_time():
    model = tiny(seed=7, n_encoder_layers=2, n_decoder_layers=2)
    lengths = [5, 2, 4]
    srcs = [rand_ids((1, n), seed=20 + n) for n in lengths]
    tgts = [rand_ids((1, 4), seed=30 + i) for i in range(3)]
    batch = torch.zeros(3, 5, dtype=torch.long)
    for i, s in enumerate(srcs):
        batch[i, : s.size(1)] = s[0]
    logits = model(batch, torch.cat(tgts))
    for i in range(3):
        torch.testing.assert_close(logits[i : i + 1], model(srcs[i], tgts[i]), **LOGITS)


def test_decode_with_cache_equals_full_decode():
    model = tiny(seed=8, n_decoder_layers=2)
    src = rand_ids((2, 5), seed=14)
    src[0, 3:] = 0
    tgt = rand_ids((2, 6), seed=15)
    enc = model.encode(src)
    full = model.decode(tgt, enc.memory, enc.src_mask, need_weights=True)
    cache = model.new_cache()
    for t in range(6):
        assert cache.length == t
        step = model.decode(
            tgt[:, t : t + 1], enc.memory, enc.src_mask, cache=cache, need_weights=True
        )
        torch.testing.assert_close(step.logits[:, 0], full.logits[:, t], **LOGITS)
        assert step.self_attentions[0].shape == (2, 2, 1, t + 1)
        torch.testing.assert_close(
            step.cross_attentions[1][:, :, 0], full.cross_attentions[1][:, :, t], **FP32
        )
    assert cache.length == 6
    # decoder_states is decode without the projection.
    states = model.decoder_states(tgt, enc.memory, enc.src_mask)
    assert states.logits is None
    torch.testing.assert_close(model.output(states.states), full.logits, **FP32)


def test_positions_beyond_max_positions_raise():
    model = tiny(max_positions=6)
    with pytest.raises(ValueError, match="exceeds max_len=6"):
        model(rand_ids((1, 7)), rand_ids((1, 2)))


# ----------------------------------------------------- order blindness without positions
def _permuted_encodings(positional: str, lengths: tuple[int, ...]):
    """Encoder outputs of a padded batch and of the same batch with its first min(lengths)
    tokens permuted (padding kept at the end, so every row is a permutation of itself)."""
    model = tiny(positional=positional, n_encoder_layers=2)
    width = max(lengths)
    src = rand_ids((len(lengths), width), seed=3)
    src[:, 0] = torch.arange(4, 4 + len(lengths))  # distinct tokens at positions 0 and 1
    src[:, 1] = torch.arange(10, 10 + len(lengths))
    for row, length in enumerate(lengths):
        src[row, length:] = PAD_ID
    shuffle = torch.randperm(min(lengths), generator=torch.Generator().manual_seed(1))
    perm = torch.cat([shuffle, torch.arange(min(lengths), width)])  # (S,)
    assert not torch.equal(perm, torch.arange(width))
    with torch.no_grad():
        memory = model.encode(src).memory  # (B, S, D)
        permuted = model.encode(src[:, perm]).memory
    return memory[:, perm], permuted


@pytest.mark.parametrize("lengths", [(7, 7), (7, 5)], ids=["no padding", "padding at the end"])
def test_encoder_without_positions_is_permutation_equivariant(lengths):
    """Self-attention is blind to order: with `positional: none`, permuting the source tokens
    permutes the encoder outputs the same way (padding included: a pad query sees the same set
    of keys)."""
    expected, permuted = _permuted_encodings("none", lengths)
    torch.testing.assert_close(permuted, expected, **FP32)


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rotary"])
@pytest.mark.parametrize("lengths", [(7, 7), (7, 5)], ids=["no padding", "padding at the end"])
def test_encoder_with_positions_is_not_permutation_equivariant(positional, lengths):
    expected, permuted = _permuted_encodings(positional, lengths)
    assert (permuted - expected).abs().amax() > 1e-3


@pytest.mark.parametrize("overrides", PAD_VARIANTS, ids=range(len(PAD_VARIANTS)))
def test_packed_feed_forward_equals_the_padded_one(overrides):
    """Feed-forward sub-layers on the real positions only (`pack_rows`, on by default) give
    the padded computation's logits at real positions, and the same gradients."""
    model = tiny(seed=9, n_encoder_layers=2, n_decoder_layers=2, **overrides)
    src = rand_ids((3, 6), seed=15)
    src[0, 4:], src[2, 2:] = PAD_ID, PAD_ID
    tgt = rand_ids((3, 5), seed=16)
    tgt[1, 3:] = PAD_ID
    real = tgt != PAD_ID
    outputs = {}
    for pack in (1, 0):  # every real row alone; no packing
        model.zero_grad()
        model.pack_rows = pack
        logits = model(src, tgt)
        logits[real].logsumexp(-1).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        outputs[pack] = (logits[real], grads)
    (packed, packed_grads), (padded, padded_grads) = outputs[1], outputs[0]
    torch.testing.assert_close(packed, padded, **LOGITS)
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], **LOGITS, msg=name)


def test_packed_feed_forward_leaves_padded_rows_alone():
    """The feed-forward sees the real rows topped up to a multiple of `pack_rows` (counted by
    a hook), and a padded row left out comes out of the sub-layer as it went in."""
    model = tiny(seed=10)
    src = rand_ids((2, 8), seed=17)
    src[1, 3:] = PAD_ID  # 8 + 3 real positions of 16
    layer = model.encoder_layers[0]
    seen = []
    handle = layer.feed_forward.register_forward_hook(
        lambda m, i, o: seen.append(i[0].numel() // i[0].size(-1))
    )
    try:
        for multiple in (64, 4, 1, 0):
            model.pack_rows = multiple
            model.encode(src)
    finally:
        handle.remove()
    assert seen == [2 * 8, 12, 11, 2 * 8]  # 64: all 16 rows; 4: 12 rows; 1: the 11 real ones
    x = torch.randn(2, 8, TINY["d_model"])
    rows = real_rows(src, PAD_ID, multiple=4)
    assert sorted(rows.tolist()) == list(range(8 + 3)) + [11]  # the real rows + one pad row

    def ff_sublayer(h: torch.Tensor) -> torch.Tensor:
        return layer.ff_block.around(h, layer.feed_forward)

    out = on_rows(ff_sublayer, x, rows)
    torch.testing.assert_close(out[1, 4:], x[1, 4:], rtol=0, atol=0)
    torch.testing.assert_close(out[1, :4], ff_sublayer(x[1, :4]), **FP32)
    assert not torch.allclose(out[1, :4], x[1, :4])
    assert real_rows(rand_ids((2, 8)), PAD_ID, multiple=1) is None  # no padding: no packing
