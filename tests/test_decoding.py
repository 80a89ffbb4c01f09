"""Tests for minitx.decoding: greedy, beam search and sampling, with and without the KV cache,
and an overfit run that greedy decoding must reproduce exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minitx.decoding import (
    DecodingConfig,
    beam_search,
    generate,
    greedy_decode,
    length_penalty,
    max_target_lengths,
    sample_decode,
    sampling_distribution,
)
from minitx.decoding.beam import BLOCK, top_k_per_row
from minitx.decoding.common import next_token_log_probs
from minitx.errors import ConfigError
from minitx.model import Transformer, TransformerConfig
from minitx.vocab import pad

PAD, BOS, EOS = 0, 2, 3
LOGITS = {"atol": 1e-4, "rtol": 1e-4}


def make_model(seed: int = 0, **overrides) -> Transformer:
    values = dict(
        src_vocab_size=12,
        tgt_vocab_size=12,
        d_model=16,
        n_heads=2,
        n_encoder_layers=1,
        n_decoder_layers=2,
        d_ff=32,
        dropout=0.0,
        max_positions=40,
    )
    torch.manual_seed(seed)
    return Transformer(TransformerConfig(**{**values, **overrides})).eval()


def pad_batch(seqs: list[list[int]]) -> torch.Tensor:
    width = max(len(s) for s in seqs)
    return torch.tensor([s + [PAD] * (width - len(s)) for s in seqs])


def row_tokens(row: torch.Tensor) -> list[int]:
    """Generated ids of one output row without the trailing padding."""
    tokens = row.tolist()
    while tokens and tokens[-1] == PAD:
        tokens.pop()
    return tokens


def teacher_forced_log_prob(model: Transformer, src: torch.Tensor, tokens: list[int]) -> float:
    """Sum of the model's log-probabilities of `tokens` (ending in eos) given src (1, S)."""
    ids = torch.tensor([tokens])  # (1, T)
    tgt_in = torch.cat([torch.tensor([[BOS]]), ids[:, :-1]], dim=1)
    with torch.no_grad():
        logp = torch.log_softmax(model(src, tgt_in), dim=-1)  # (1, T, V)
    return logp.gather(-1, ids[..., None]).sum().item()


def check_generated_rows(ids: torch.Tensor, limits: list[int]) -> None:
    """Every row: no bos; pad only after eos (or the cap); eos at most once, last; length <= cap."""
    for row, limit in zip(ids.tolist(), limits, strict=True):
        assert BOS not in row
        if EOS in row:
            end = row.index(EOS) + 1
            assert all(t == PAD for t in row[end:]), row
            assert PAD not in row[: end - 1], row
            assert end <= limit
        else:
            assert PAD not in row[:limit], row  # ran to its cap
            assert all(t == PAD for t in row[limit:]), row


def record_decode_batch_sizes(model: Transformer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Patch `model.decode` to append each call's batch size to the returned list."""
    sizes: list[int] = []
    decode = model.decode
    monkeypatch.setattr(
        model,
        "decode",
        lambda tgt_in, *a, **k: sizes.append(tgt_in.size(0)) or decode(tgt_in, *a, **k),
    )
    return sizes


@pytest.fixture(scope="module")
def model() -> Transformer:
    return make_model(seed=1)


@pytest.fixture(scope="module")
def sources() -> torch.Tensor:
    g = torch.Generator().manual_seed(2)
    return pad_batch([torch.randint(4, 12, (n,), generator=g).tolist() for n in (5, 2, 4, 3)])


# --------------------------------------------------------------------------------------------
# Greedy
# --------------------------------------------------------------------------------------------


def test_max_target_lengths():
    model = make_model(max_positions=12)
    src = pad_batch([[5, 6, 7], [5, 6, 7, 8, 9], [5]])
    assert max_target_lengths(src, model, 1.5, 2).tolist() == [6, 9, 3]  # floor(1.5 n) + 2
    assert max_target_lengths(src, model, 0.0, 0).tolist() == [1, 1, 1]  # at least one token
    assert max_target_lengths(src, model, 3.0, 5).tolist() == [11, 11, 8]  # bos takes a position
    # a huge but finite a or b: the model's cap (it overflowed int64 and became one token)
    assert max_target_lengths(src, model, 1e19, 0).tolist() == [11, 11, 11]
    assert max_target_lengths(src, model, 0.0, 10**30).tolist() == [11, 11, 11]


@pytest.mark.parametrize(
    ("src", "message"),
    [
        (torch.tensor([5, 6, EOS]), r"src \(3,\): give \(B, S\) token ids, src\[None\] for one"),
        (torch.tensor([[5.0, 6.0, EOS]]), "src is torch.float32: give integer token ids"),
        (torch.tensor([[5, 12, EOS]]), r"src holds id 12, not a piece of this model's source"),
        (torch.tensor([[5, -1, EOS]]), "src holds id -1, not a piece"),
    ],
    ids=["one-dimensional", "float", "above-the-vocabulary", "negative"],
)
@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_generate_refuses_sources_it_cannot_read(model, src, message, strategy):
    """Was torch's IndexError from the embedding, a dtype error, or (sampling a 1-D source)
    "'int' object is not iterable", by strategy."""
    with pytest.raises(ValueError, match=message):
        generate(model, src, DecodingConfig(strategy=strategy))


def test_generate_refuses_a_model_in_training_mode_and_takes_an_empty_batch():
    """Was: dropout on in every decoding step, without a word; an empty batch was torch's
    "max(): Expected reduction dim" (greedy, sample) or "max() arg is an empty sequence"."""
    model = make_model(dropout=0.5).train()
    with pytest.raises(ValueError, match=r"training mode \(dropout on\): call model.eval"):
        generate(model, torch.tensor([[5, EOS]]), DecodingConfig())
    model.eval()
    for strategy in ("greedy", "beam", "sample"):
        assert (
            generate(model, torch.zeros(0, 4, dtype=torch.long), DecodingConfig(strategy=strategy))
            == []
        )


def test_greedy_with_and_without_cache_identical(model, sources):
    cached = greedy_decode(
        model,
        sources,
        DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4, use_cache=True),
    )
    full = greedy_decode(
        model,
        sources,
        DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4, use_cache=False),
    )
    assert torch.equal(cached, full)
    check_generated_rows(cached, max_target_lengths(sources, model, 1.0, 4).tolist())


def test_greedy_cached_logits_equal_full_recomputation_step_by_step(model, sources):
    enc = model.encode(sources)
    cache = model.new_cache()
    tokens = torch.full((sources.size(0), 1), BOS)
    with torch.no_grad():
        for _ in range(6):
            step = model.decode(tokens[:, -1:], enc.memory, enc.src_mask, cache=cache).logits[:, -1]
            full = model.decode(tokens, enc.memory, enc.src_mask).logits[:, -1]
            torch.testing.assert_close(step, full, **LOGITS)
            tokens = torch.cat([tokens, full.argmax(-1, keepdim=True).clamp(min=4)], dim=1)
    # greedy_decode itself: each token is the argmax (pad/bos excluded) of the teacher-forced
    # logits.
    ids = greedy_decode(
        model, sources, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4)
    )
    with torch.no_grad():
        logits = model(
            sources, torch.cat([torch.full((sources.size(0), 1), BOS), ids[:, :-1]], dim=1)
        )
    logits[..., [PAD, BOS]] = float("-inf")
    for i, row in enumerate(ids.tolist()):
        n = len(row_tokens(ids[i]))
        assert logits[i, :n].argmax(-1).tolist() == row[:n]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_decoding_step_gives_log_softmax_and_reuses_fp32_logits(model, sources, dtype):
    """fp32 logits become the log-probabilities in place (no second (N, V) tensor per step);
    bf16 ones are read into fresh fp32 ones. Either way: log_softmax, pad and bos at -inf."""
    enc = model.encode(sources)
    seen: list[torch.Tensor] = []
    decode = model.decode

    def decode_in_dtype(*args, **kwargs):
        out = decode(*args, **kwargs)
        out.logits = out.logits.to(dtype)
        seen.append(out.logits.clone())  # the values, before any in-place softmax
        seen.append(out.logits)
        return out

    tokens = torch.full((sources.size(0), 1), BOS)
    with torch.no_grad(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(model, "decode", decode_in_dtype)
        logp = next_token_log_probs(model, tokens, enc.memory, enc.src_mask, None)
    values, logits = seen
    assert logp.dtype == torch.float32
    want = torch.log_softmax(values[:, -1].float(), dim=-1)
    want[:, [PAD, BOS]] = float("-inf")
    torch.testing.assert_close(logp, want)
    shares = logp.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()
    assert shares == (dtype == torch.float32)


def test_batched_greedy_equals_one_at_a_time(model, sources):
    batched = greedy_decode(
        model, sources, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4)
    )
    for i in range(sources.size(0)):
        alone = sources[i : i + 1, : int((sources[i] != PAD).sum())]  # no padding at all
        single = greedy_decode(
            model, alone, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4)
        )
        assert row_tokens(batched[i]) == row_tokens(single[0])


def test_finished_sentences_leave_the_greedy_batch(model, sources, monkeypatch):
    """Sentences with shorter caps stop early; later steps decode only the others, and the
    ids are those of a run that keeps every row (each row's own greedy decoding)."""
    sizes = record_decode_batch_sizes(model, monkeypatch)
    ids = greedy_decode(
        model, sources, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=0)
    )  # caps = source lengths
    limits = max_target_lengths(sources, model, 1.0, 0).tolist()
    check_generated_rows(ids, limits)
    assert sizes[0] == sources.size(0) and sizes == sorted(sizes, reverse=True)
    assert sizes[-1] < sizes[0]  # the caps (5, 2, 4, 3 + eos) end some rows first
    monkeypatch.undo()
    for i in range(sources.size(0)):
        single = greedy_decode(
            model, sources[i : i + 1], DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=0)
        )
        assert row_tokens(ids[i]) == row_tokens(single[0])


def test_cache_reorder_can_keep_the_cross_attention_cache(model, sources):
    enc = model.encode(sources)
    cache = model.new_cache()
    bos = torch.full((sources.size(0), 1), 2)
    model.decode(bos, enc.memory, enc.src_mask, cache=cache)
    cross_before = [c.k for _, c in cache.layers]
    swap = torch.tensor([1, 0, 3, 2])
    cache.reorder(swap, None)
    assert all(c.k is k for (_, c), k in zip(cache.layers, cross_before, strict=True))
    kept = torch.tensor([2, 0])
    cache.reorder(swap, kept)
    assert all(
        torch.equal(c.k, k[kept]) for (_, c), k in zip(cache.layers, cross_before, strict=True)
    )


def test_greedy_respects_per_sentence_caps(model, sources):
    for a, b in [(0.0, 3), (1.0, 0), (0.5, 2)]:
        ids = greedy_decode(
            model, sources, DecodingConfig(strategy="greedy", max_len_a=a, max_len_b=b)
        )
        limits = max_target_lengths(sources, model, a, b).tolist()
        assert ids.size(1) <= max(limits)
        check_generated_rows(ids, limits)


@pytest.fixture(scope="module")
def pad_loving_model() -> Transformer:
    """A model whose unconstrained argmax is always pad, then bos; eos is never likely."""
    m = make_model(seed=3, tie_output=False)
    g = torch.Generator().manual_seed(4)
    direction = torch.randn(16, generator=g)
    with torch.no_grad():
        m.decoder_norm.weight.fill_(0.01)  # decoder states ~= the LayerNorm bias
        m.decoder_norm.bias.copy_(direction)
        m.output.weight.copy_(0.1 * torch.randn(12, 16, generator=g))
        m.output.weight[PAD] = 10 * direction
        m.output.weight[BOS] = 9 * direction
        m.output.weight[EOS] = -10 * direction
    return m


def test_never_emits_pad_or_bos(pad_loving_model, sources):
    m = pad_loving_model
    with torch.no_grad():
        raw = m(sources, torch.full((sources.size(0), 3), BOS)).argmax(-1)
    assert (raw == PAD).all(), "test setup: pad must be the model's favourite token"
    limits = max_target_lengths(sources, m, 1.0, 2).tolist()
    for use_cache in (True, False):
        ids = greedy_decode(
            m,
            sources,
            DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=2, use_cache=use_cache),
        )
        check_generated_rows(ids, limits)
        assert [len(row_tokens(r)) for r in ids] == limits  # no eos: every row runs to its cap
    hyps = beam_search(
        m, sources, DecodingConfig(beam_size=3, n_best=3, max_len_a=1.0, max_len_b=2)
    )
    for sentence in hyps:
        for h in sentence:
            assert PAD not in h.tokens and BOS not in h.tokens


# --------------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------------


def test_beam_size_one_equals_greedy(model, sources):
    for a, b in [(1.0, 4), (0.0, 2)]:
        greedy = greedy_decode(
            model, sources, DecodingConfig(strategy="greedy", max_len_a=a, max_len_b=b)
        )
        hyps = beam_search(model, sources, DecodingConfig(beam_size=1, max_len_a=a, max_len_b=b))
        assert [h[0].tokens for h in hyps] == [row_tokens(r) for r in greedy]
        assert torch.equal(pad([h[0].tokens for h in hyps]), greedy)


def test_greedy_hypotheses_are_scored_as_beam_size_one_scores_them(model, sources):
    """Greedy hypotheses carried NaN as their score, which `minitx-translate --beam 1 --n-best
    1` printed; now the log-probability and its length-normalised score, as beam search's."""
    for alpha in (1.0, 0.6):
        config = DecodingConfig(max_len_a=1.0, max_len_b=4, alpha=alpha)
        greedy = generate(model, sources, dataclasses.replace(config, strategy="greedy"))
        beam = beam_search(model, sources, dataclasses.replace(config, beam_size=1))
        _assert_same_hypotheses(greedy, beam)
        assert all(h[0].log_prob < 0 for h in greedy)


def _assert_same_hypotheses(a, b):
    assert len(a) == len(b)
    for hyps_a, hyps_b in zip(a, b, strict=True):
        assert [h.tokens for h in hyps_a] == [h.tokens for h in hyps_b]
        for ha, hb in zip(hyps_a, hyps_b, strict=True):
            assert ha.score == pytest.approx(hb.score, abs=1e-4)
            assert ha.log_prob == pytest.approx(hb.log_prob, abs=1e-4)


def test_beam_cached_equals_uncached(model, sources):
    kwargs = dict(beam_size=4, n_best=4, alpha=0.6, max_len_a=1.0, max_len_b=3)
    _assert_same_hypotheses(
        beam_search(model, sources, DecodingConfig(use_cache=True, **kwargs)),
        beam_search(model, sources, DecodingConfig(use_cache=False, **kwargs)),
    )


def test_beam_n_best_sorted_and_distinct(model, sources):
    hyps = beam_search(
        model, sources, DecodingConfig(beam_size=4, n_best=3, max_len_a=1.0, max_len_b=3)
    )
    assert len(hyps) == sources.size(0)
    limits = max_target_lengths(sources, model, 1.0, 3).tolist()
    for sentence, limit in zip(hyps, limits, strict=True):
        assert len(sentence) == 3
        scores = [h.score for h in sentence]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in sentence}) == 3
        for h in sentence:
            assert 1 <= len(h.tokens) <= limit
            assert EOS not in h.tokens[:-1]
            assert len(h.tokens) == limit or h.tokens[-1] == EOS  # finished by eos or by the cap
    # n_best is a prefix of the larger n_best list.
    more = beam_search(
        model, sources, DecodingConfig(beam_size=4, n_best=4, max_len_a=1.0, max_len_b=3)
    )
    assert [[h.tokens for h in s] for s in hyps] == [[h.tokens for h in s[:3]] for s in more]


def test_batched_beam_equals_one_at_a_time(model, sources):
    kwargs = dict(beam_size=3, n_best=2, max_len_a=1.0, max_len_b=3)
    batched = beam_search(model, sources, DecodingConfig(**kwargs))
    for i in range(sources.size(0)):
        alone = sources[i : i + 1, : int((sources[i] != PAD).sum())]
        _assert_same_hypotheses([batched[i]], beam_search(model, alone, DecodingConfig(**kwargs)))


def test_beam_first_step_decodes_one_row_per_sentence(model, sources, monkeypatch):
    """Every beam starts as bos alone: the first step decodes one row per sentence, later
    steps k rows per sentence still decoding; the hypotheses are those of each sentence
    decoded alone."""
    sizes = record_decode_batch_sizes(model, monkeypatch)
    kwargs = dict(beam_size=3, n_best=3, max_len_a=1.0, max_len_b=3)
    batched = beam_search(model, sources, DecodingConfig(**kwargs))
    assert sizes[0] == sources.size(0)
    assert sizes[1] == 3 * sources.size(0)  # no sentence can be done after one step
    assert all(n % 3 == 0 for n in sizes[1:]) and sizes[1:] == sorted(sizes[1:], reverse=True)
    monkeypatch.undo()
    for i in range(sources.size(0)):
        alone = sources[i : i + 1, : int((sources[i] != PAD).sum())]
        _assert_same_hypotheses([batched[i]], beam_search(model, alone, DecodingConfig(**kwargs)))


def test_top_k_per_row_in_blocks_equals_topk():
    """The two-stage top-k (the best blocks, then their pieces) gives topk's values and
    indices: rows whose best pieces crowd into one block, spread over many, or sit beside
    -inf (pad, bos)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 40 * BLOCK, generator=g)  # distinct values: indices are unambiguous
    x[0, 7 * BLOCK : 7 * BLOCK + 10] += 10.0  # all ten best in one block
    x[1, torch.arange(10) * 4 * BLOCK] += 10.0  # one in each of ten blocks
    x[2, :BLOCK] = float("-inf")  # a whole block at -inf, pad and bos among them
    for k in (1, 5, 10):
        values, index = top_k_per_row(x, k)
        want_values, want_index = x.topk(k, dim=-1)
        assert torch.equal(values, want_values) and torch.equal(index, want_index)
    small = torch.randn(3, 12, generator=g)  # too few blocks: plain topk
    assert torch.equal(top_k_per_row(small, 4)[1], small.topk(4, dim=-1).indices)


def test_beam_wider_than_half_the_vocabulary(model, sources):
    """beam 8 over a 12-piece vocabulary: the first step has fewer than 2k candidates."""
    hyps = beam_search(
        model, sources, DecodingConfig(beam_size=8, n_best=8, max_len_a=1.0, max_len_b=2)
    )
    for i, sentence in enumerate(hyps):
        assert len(sentence) == 8 and len({tuple(h.tokens) for h in sentence}) == 8
        src = sources[i : i + 1, : int((sources[i] != PAD).sum())]
        for h in sentence:
            assert h.log_prob == pytest.approx(
                teacher_forced_log_prob(model, src, h.tokens), abs=1e-4
            )


def test_a_beam_wider_than_the_vocabulary_is_refused(model, sources):
    """beam 13 over a 12-piece vocabulary: a mistake (each step would score K x V candidates
    per sentence), refused before any decoding."""
    with pytest.raises(ConfigError, match="beam size 13 is larger than the model's target vocab"):
        beam_search(model, sources, DecodingConfig(beam_size=13))


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_scores_are_teacher_forced_log_probs(model, sources, alpha):
    hyps = beam_search(
        model,
        sources,
        DecodingConfig(beam_size=3, n_best=3, alpha=alpha, max_len_a=1.0, max_len_b=3),
    )
    for i, sentence in enumerate(hyps):
        src = sources[i : i + 1, : int((sources[i] != PAD).sum())]
        for h in sentence:
            expected = teacher_forced_log_prob(model, src, h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-4)
            assert h.score == pytest.approx(
                h.log_prob / length_penalty(len(h.tokens), alpha), rel=1e-6
            )


def test_length_penalty():
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(1, 1.0) == pytest.approx(1.0)
    assert length_penalty(7, 1.0) == pytest.approx(2.0)
    assert length_penalty(7, 0.5) == pytest.approx(2.0**0.5)
    assert length_penalty(10, 1.0) > length_penalty(3, 1.0)


@pytest.mark.parametrize(("beam_size", "n_best"), [(0, 1), (-1, 1), (3, 0), (3, 4), (1, 2)])
def test_beam_search_config_rejects_bad_arguments(beam_size, n_best):
    with pytest.raises(ConfigError, match="beam_size must be >= 1|n_best must be between 1"):
        DecodingConfig(beam_size=beam_size, n_best=n_best)


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"alpha": float("nan")}, "alpha must be a finite number, got nan"),  # arbitrary order
        ({"alpha": float("inf")}, "alpha must be a finite number, got inf"),  # every score -0.0
        ({"max_len_a": float("nan")}, "max_len_a must be a finite number"),  # one token each
        ({"alpha": "1"}, r"alpha must be a number, got '1'"),
        ({"beam_size": 2.5}, r"beam_size must be a whole number, got 2.5"),
        ({"n_best": 2.0}, "n_best must be a whole number"),
        ({"beam_size": True}, "beam_size must be a whole number, got True"),
        ({"use_cache": "no"}, "use_cache must be true or false, got 'no'"),  # was read as true
        ({"use_cache": None}, "use_cache must be true or false, got None"),
        # the penalty of a long output overflowed (OverflowError) or became 0 (ZeroDivisionError)
        ({"alpha": 1000.0}, r"alpha must lie in \[0, 10.0\], got 1000.0"),
        ({"alpha": -1000.0}, r"alpha must lie in \[0, 10.0\], got -1000.0"),
        # a penalty that shrinks with length: the best of a beam search was eos alone
        ({"alpha": -5.0}, r"alpha must lie in \[0, 10.0\], got -5.0"),
    ],
    ids=[
        "alpha-nan",
        "alpha-inf",
        "len-nan",
        "alpha-str",
        "beam-float",
        "nbest-float",
        "bool",
        "cache-str",
        "cache-none",
        "alpha-large",
        "alpha-very-negative",
        "alpha-negative",
    ],
)
def test_decoding_settings_of_the_wrong_type_or_not_finite_are_refused(setting, message):
    """The commands refused these already (`--alpha nan`); the library took them and decoded
    wrongly without a word, or failed deep inside torch (`topk` with a float)."""
    with pytest.raises(ConfigError, match=message):
        DecodingConfig(**setting)


def test_decoding_settings_take_numpy_numbers_as_a_transformer_config_does():
    """One notion of a whole number for both configs and every count (`errors.plain_value`):
    numpy's were refused here and taken by `TransformerConfig`; they are stored as Python's."""
    config = DecodingConfig(beam_size=np.int64(4), alpha=np.float32(0.5), n_best=np.int32(3))
    assert config == DecodingConfig(beam_size=4, alpha=0.5, n_best=3)
    assert [type(v) for v in (config.beam_size, config.alpha, config.n_best)] == [int, float, int]
    # and what every count of minitx takes (errors.is_whole_number): a 0-d integer tensor
    assert DecodingConfig(beam_size=torch.tensor(4)) == DecodingConfig(beam_size=4)


def test_a_beam_size_alone_means_greedy_for_one_and_beam_search_above():
    """`with_changes` decides it once, for itself (`Translator`'s ``beam_size=``) and `for_beam`
    (the commands' ``--beam``); a named strategy is kept."""
    assert DecodingConfig.for_beam(1) == DecodingConfig(strategy="greedy", beam_size=1)
    assert DecodingConfig.for_beam(3) == DecodingConfig(strategy="beam", beam_size=3)
    assert DecodingConfig().with_changes(beam_size=1) == DecodingConfig.for_beam(1)
    assert DecodingConfig().with_changes(beam_size=4, alpha=0.0) == DecodingConfig.for_beam(
        4, alpha=0.0
    )
    kept = DecodingConfig().with_changes(beam_size=1, strategy="beam")
    assert kept.strategy == "beam" and kept.beam_size == 1
    assert DecodingConfig().with_changes() == DecodingConfig()


# --------------------------------------------------------------------------------------------
# Sampling
# --------------------------------------------------------------------------------------------


def sampled(model, src, **kwargs) -> list[list[list[int]]]:
    """Token ids of every sample of every sentence."""
    return [
        [h.tokens for h in hyps]
        for hyps in sample_decode(model, src, DecodingConfig(strategy="sample", **kwargs))
    ]


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize(
    "settings", [{"temperature": 0.0}, {"top_k": 1}, {"top_k": 1, "top_p": 0.3, "temperature": 2.0}]
)
def test_sampling_argmax_settings_equal_greedy(model, sources, settings, use_cache):
    """Temperature 0 means argmax; top-k 1 leaves one token: both are greedy decoding."""
    greedy = [
        row_tokens(r)
        for r in greedy_decode(
            model, sources, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4)
        )
    ]
    samples = sampled(
        model, sources, n_best=3, seed=7, max_len_a=1.0, max_len_b=4, use_cache=use_cache,
        **settings,
    )  # fmt: skip
    assert samples == [[g] * 3 for g in greedy]


def test_sampling_low_temperature_tends_to_greedy(model, sources):
    greedy = [
        row_tokens(r)
        for r in greedy_decode(
            model, sources, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=4)
        )
    ]
    samples = sampled(model, sources, temperature=1e-3, seed=3, max_len_a=1.0, max_len_b=4)
    assert samples == [[g] for g in greedy]


def test_sampling_seeded_reproducible_and_local(model, sources):
    kwargs = dict(n_best=4, max_len_a=1.0, max_len_b=4)
    global_state = torch.get_rng_state()
    first = sampled(model, sources, seed=11, **kwargs)
    assert torch.equal(torch.get_rng_state(), global_state)  # the global RNG is never used
    assert sampled(model, sources, seed=11, **kwargs) == first
    torch.manual_seed(123)  # the global seed plays no part
    assert sampled(model, sources, seed=11, **kwargs) == first
    assert sampled(model, sources, seed=12, **kwargs) != first
    assert sampled(model, sources, seed=None, **kwargs) != sampled(
        model, sources, seed=None, **kwargs
    )
    # the samples of one sentence differ from each other (an untrained model is nearly flat)
    assert all(len({tuple(t) for t in sentence}) > 1 for sentence in first)


def test_sampling_n_samples_per_sentence(model, sources):
    hyps = sample_decode(
        model,
        sources,
        DecodingConfig(strategy="sample", n_best=5, seed=1, alpha=0.6, max_len_a=1.0, max_len_b=3),
    )
    limits = max_target_lengths(sources, model, 1.0, 3).tolist()
    assert [len(h) for h in hyps] == [5] * sources.size(0)
    for sentence, limit in zip(hyps, limits, strict=True):
        scores = [h.score for h in sentence]
        assert scores == sorted(scores, reverse=True)
        for h in sentence:
            assert 1 <= len(h.tokens) <= limit and PAD not in h.tokens and BOS not in h.tokens
            assert EOS not in h.tokens[:-1]
            assert len(h.tokens) == limit or h.tokens[-1] == EOS
            assert h.score == pytest.approx(h.log_prob / length_penalty(len(h.tokens), 0.6))
    config = DecodingConfig(
        strategy="sample", n_best=5, seed=1, alpha=0.6, max_len_a=1.0, max_len_b=3
    )
    assert [[h.tokens for h in s] for s in generate(model, sources, config)] == [
        [h.tokens for h in s] for s in hyps
    ]


def test_batched_sampling_equals_one_at_a_time(model, sources):
    kwargs = dict(n_best=3, seed=5, top_p=0.9, max_len_a=1.0, max_len_b=4)
    batched = sampled(model, sources, **kwargs)
    for i in range(sources.size(0)):
        alone = sources[i : i + 1, : int((sources[i] != PAD).sum())]
        assert sampled(model, alone, **kwargs) == [batched[i]]
    reordered = sampled(model, sources.flip(0), **kwargs)
    assert reordered == batched[::-1]


@pytest.mark.parametrize(
    "settings",
    [
        {"top_k": 3},
        {"top_p": 0.5},
        {"top_k": 4, "top_p": 0.7, "temperature": 0.7},
        {"top_p": 0.9, "temperature": 1.5},
    ],
)
def test_sampled_tokens_stay_inside_top_k_and_top_p(model, sources, settings):
    """Recompute each step's distribution teacher-forced, independently of the sampler, and
    check every sampled token: its rank is below k, and the probability of the tokens more
    probable than it (after temperature and top-k) is below p. Also: the log-probability a
    sample carries is the model's own (temperature 1, no truncation), as beam search's."""
    temperature = settings.get("temperature", 1.0)
    top_k, top_p = settings.get("top_k", 0), settings.get("top_p", 1.0)
    hyps = sample_decode(
        model,
        sources,
        DecodingConfig(strategy="sample", n_best=6, seed=2, max_len_a=1.0, max_len_b=4, **settings),
    )
    for i, sentence in enumerate(hyps):
        src = sources[i : i + 1, : int((sources[i] != PAD).sum())]
        for h in sentence:
            tokens = torch.tensor([h.tokens])
            tgt_in = torch.cat([torch.tensor([[BOS]]), tokens[:, :-1]], dim=1)
            with torch.no_grad():
                logits = model(src, tgt_in)[0]  # (T, V)
            logp = torch.log_softmax(logits, dim=-1)  # as beam search scores: pad/bos included
            assert h.log_prob == pytest.approx(logp.gather(-1, tokens.T).sum().item(), abs=1e-4)
            logp[:, [PAD, BOS]] = float("-inf")  # never sampled
            for t, token in enumerate(h.tokens):
                p = torch.softmax(logp[t] / temperature, dim=-1)
                rank = int((p > p[token]).sum())
                if top_k:
                    assert rank < top_k
                    kept = p >= p.topk(top_k).values[-1]
                    p = torch.where(kept, p, torch.zeros_like(p))
                    p = p / p.sum()
                assert float(p[p > p[token]].sum()) < top_p + 1e-6


def test_sampling_distribution_truncates_and_normalises():
    logp = torch.log_softmax(torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]]), dim=-1)
    full = sampling_distribution(logp)
    torch.testing.assert_close(full, logp.exp())
    top2 = sampling_distribution(logp, top_k=2)
    assert (top2[0, 2:] == 0).all() and top2[0, :2].sum().item() == pytest.approx(1.0)
    nucleus = sampling_distribution(logp, top_p=0.7)  # p0 ~ 0.64 < 0.7 <= p0 + p1
    assert (nucleus[0] > 0).tolist() == [True, True, False, False, False]
    assert sampling_distribution(logp, top_p=1e-6)[0].tolist() == [1.0, 0, 0, 0, 0]
    hot = sampling_distribution(logp, temperature=10.0)
    assert hot[0].max() - hot[0].min() < full[0].max() - full[0].min()  # flatter


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"temperature": 1e-40}, [1.0, 0, 0, 0, 0, 0]),  # float32: a subnormal
        ({"temperature": 1e-300}, [1.0, 0, 0, 0, 0, 0]),  # float32: 0
        ({"temperature": 1e39}, [0.2, 0.2, 0.2, 0.2, 0.2, 0]),  # float32: inf
        ({"top_p": 1e-46}, [1.0, 0, 0, 0, 0, 0]),  # float32: 0
        ({"top_p": 1e-300, "temperature": 1e-300}, [1.0, 0, 0, 0, 0, 0]),
        # the ranking is the model's even where float32 makes every score alike
        ({"temperature": 1e300, "top_k": 2}, [0.5, 0.5, 0, 0, 0, 0]),
        ({"temperature": 1e300, "top_p": 0.5}, [1 / 3, 1 / 3, 1 / 3, 0, 0, 0]),
    ],
)
def test_sampling_at_the_edges_of_float32_gives_the_limit_not_nan(
    options: dict, expected: list[float]
) -> None:
    """Finite settings that float32 rounds to 0 or inf: the argmax (temperature towards 0, a
    nucleus of nothing) or every allowed token alike (temperature towards inf; top-k and top-p
    still keep the most probable ones), never NaN, which sampled piece 0 after piece 0
    (`--temperature 1e-40` printed "èèèè...")."""
    logits = torch.tensor([[-0.3, -2.0, -2.5, -3.0, -9.0, float("-inf")]])  # the last: pad
    probs = sampling_distribution(torch.log_softmax(logits, dim=-1), **options)
    torch.testing.assert_close(probs[0], torch.tensor(expected))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"strategy": "sample", "temperature": -0.5}, "temperature"),
        ({"strategy": "sample", "temperature": float("nan")}, "temperature"),
        ({"strategy": "sample", "top_k": -1}, "top_k"),
        ({"strategy": "sample", "top_p": 0.0}, "top_p"),
        ({"strategy": "sample", "top_p": 1.5}, "top_p"),
        ({"strategy": "sample", "n_best": 0}, "n_best"),
        ({"strategy": "sample", "seed": 1.5}, "seed"),
        ({"strategy": "beam", "temperature": 0.7}, "only apply to strategy 'sample'"),
        ({"strategy": "greedy", "top_p": 0.9, "seed": 3}, "top_p, seed only apply"),
    ],
)
def test_sampling_config_rejects_bad_values(changes, message):
    with pytest.raises(ConfigError, match=message):
        DecodingConfig(**changes)


def test_sampling_config_accepts_many_samples_and_describes_itself():
    config = DecodingConfig(strategy="sample", n_best=20, temperature=0.7, top_p=0.9, seed=4)
    assert config.width == 20 and config.file_tag == "sample-t0.7-p0.9-n20-seed4"
    # another seed or setting, another file name: no sampling replaces another's file
    tags = {
        DecodingConfig(strategy="sample", **changes).file_tag
        for changes in ({}, {"seed": 5}, {"seed": None}, {"top_k": 40}, {"temperature": 0.5})
    }
    assert tags == {
        "sample-t1-seed0",
        "sample-t1-seed5",
        "sample-t1-seed-none",
        "sample-t1-k40-seed0",
        "sample-t0.5-seed0",
    }
    assert config.describe() == "sampling (temperature 0.7, top-p 0.9, seed 4)"
    assert DecodingConfig.from_dict(dataclasses.asdict(config)) == config
    # the length penalty ranks several samples, and beams: it names their files too (an
    # evaluation with --alpha 0.6 replaced the default's beam5 file)
    ranked = config.replace(alpha=0.6)
    assert ranked.file_tag == "sample-t0.7-p0.9-n20-a0.6-seed4"
    assert ranked.replace(n_best=1).file_tag == "sample-t0.7-p0.9-seed4"  # one: not ranked
    assert DecodingConfig(beam_size=5, alpha=0.6).file_tag == "beam5-a0.6"
    assert DecodingConfig(beam_size=5).file_tag == "beam5"


# --------------------------------------------------------------------------------------------
# Overfit a handful of pairs, then decode them
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def overfit():
    """A tiny model trained to reverse 6 short id sequences (lengths 3-6)."""
    g = torch.Generator().manual_seed(5)
    srcs = [torch.randint(4, 20, (n,), generator=g).tolist() for n in (3, 4, 5, 6, 4, 5)]
    tgts = [s[::-1] for s in srcs]
    src = pad_batch(srcs)
    tgt_in = pad_batch([[BOS] + t for t in tgts])
    tgt_out = pad_batch([t + [EOS] for t in tgts])
    config = TransformerConfig(
        src_vocab_size=20,
        tgt_vocab_size=20,
        d_model=32,
        n_heads=2,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=64,
        dropout=0.0,
        max_positions=32,
    )
    torch.manual_seed(6)
    m = Transformer(config)
    opt = torch.optim.Adam(m.parameters(), lr=3e-3)
    losses = []
    for _ in range(200):
        loss = F.cross_entropy(
            m(src, tgt_in).reshape(-1, 20), tgt_out.reshape(-1), ignore_index=PAD
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    m.eval()
    with torch.no_grad():
        final = F.cross_entropy(
            m(src, tgt_in).reshape(-1, 20), tgt_out.reshape(-1), ignore_index=PAD
        ).item()
    return m, src, tgts, losses, final


def test_overfit_reaches_near_zero_loss_and_greedy_reproduces_targets(overfit):
    m, src, tgts, losses, final = overfit
    assert losses[0] > 2.0
    assert final < 0.05, losses[::20]
    for use_cache in (True, False):
        ids = greedy_decode(m, src, DecodingConfig(strategy="greedy", use_cache=use_cache))
        assert [row_tokens(r) for r in ids] == [t + [EOS] for t in tgts]
    # Each sentence alone decodes the same.
    for i, t in enumerate(tgts):
        alone = src[i : i + 1, : len(t)]
        assert row_tokens(greedy_decode(m, alone, DecodingConfig(strategy="greedy"))[0]) == t + [
            EOS
        ]


def test_overfit_model_stops_each_sentence_at_its_eos(overfit):
    m, src, tgts, _, _ = overfit
    ids = greedy_decode(m, src, DecodingConfig(strategy="greedy", max_len_a=2.0, max_len_b=5))
    assert ids.size(1) == max(len(t) for t in tgts) + 1  # stops once every row has its eos
    for row, t in zip(ids.tolist(), tgts, strict=True):
        assert row[len(t)] == EOS
        assert row[len(t) + 1 :] == [PAD] * (ids.size(1) - len(t) - 1)


def test_overfit_model_truncated_at_per_sentence_cap(overfit):
    m, src, tgts, _, _ = overfit
    # cap = |src| = |target|: the target fits, its eos does not.
    ids = greedy_decode(m, src, DecodingConfig(strategy="greedy", max_len_a=1.0, max_len_b=0))
    assert [row_tokens(r) for r in ids] == tgts
    ids = greedy_decode(m, src, DecodingConfig(strategy="greedy", max_len_a=0.0, max_len_b=2))
    assert ids.tolist() == [t[:2] for t in tgts]


def test_overfit_model_beam_search_finds_targets(overfit):
    m, src, tgts, _, _ = overfit
    for use_cache in (True, False):
        hyps = beam_search(m, src, DecodingConfig(beam_size=3, n_best=2, use_cache=use_cache))
        assert [h[0].tokens for h in hyps] == [t + [EOS] for t in tgts]
        for sentence in hyps:
            assert sentence[0].log_prob > -0.5  # nearly certain
            assert sentence[0].score > sentence[1].score
