"""minitx.attribution: gradient attributions of the source pieces, checked against finite
differences, the completeness of integrated gradients and Captum; the agreement measures; and
`Translator.attributions` on the tiny trained model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from minitx.attribution import (
    METHODS,
    Attributions,
    aggregate,
    agreement,
    attribute,
    average_ranks,
    gradient_attributions,
    rank_correlation,
    teacher_forced_attributions,
    top1_agreement,
)
from minitx.errors import ConfigError
from minitx.model import Transformer, TransformerConfig
from minitx.vocab import BOS_ID, EOS_ID

SRC = [5, 6, 7, 8, 9]  # S = 6 with eos
TGT = [10, 11, 12]  # T = 4: bos + 3 pieces read, 3 pieces + eos predicted


def tiny_model(
    *, share_embeddings: bool = True, activation: str = "relu", seed: int = 0
) -> Transformer:
    """A small random model in float64, so that finite differences are exact enough."""
    torch.manual_seed(seed)
    config = TransformerConfig(
        src_vocab_size=40,
        tgt_vocab_size=40,
        d_model=16,
        n_heads=2,
        n_encoder_layers=2,
        n_decoder_layers=2,
        d_ff=32,
        max_positions=32,
        share_embeddings=share_embeddings,
        tie_output=share_embeddings,
        activation=activation,
    )
    return Transformer(config).double().eval()


def tensors() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return (
        torch.tensor([*SRC, EOS_ID]),
        torch.tensor([BOS_ID, *TGT]),
        torch.tensor([*TGT, EOS_ID]),
    )


def log_probs(model: Transformer, embeddings: torch.Tensor) -> torch.Tensor:
    """(T,) log-probabilities of the labels with the source embedding rows replaced by
    `embeddings` (S, D), written independently of minitx.attribution: the rows of the source
    ids are patched in the model's own source embedding matrix (which must be separate from
    the target side's and the output's)."""
    assert not model.config.share_embeddings
    src, tgt_in, targets = tensors()
    weight = model.src_embed.weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight[src] = embeddings  # the source ids are distinct
            logits = model(src[None], tgt_in[None])[0]  # (T, V)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


def central_differences(f, e: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(T, S, D) derivatives of f: (S, D) -> (T,) by central differences."""
    columns = []
    for s in range(e.size(0)):
        for d in range(e.size(1)):
            up, down = e.clone(), e.clone()
            up[s, d] += eps
            down[s, d] -= eps
            columns.append((f(up) - f(down)) / (2 * eps))
    return torch.stack(columns, -1).view(-1, *e.shape)


def test_saliency_is_the_gradient_finite_differences_say() -> None:
    """The gradient of each predicted piece's log-probability with respect to each source
    embedding entry matches central differences of the model's own forward pass."""
    model = tiny_model(share_embeddings=False)
    src, tgt_in, targets = tensors()
    raw, values, _ = gradient_attributions(model, src, tgt_in, targets, ["saliency", "ixg"])
    e = model.src_embed.weight[src].detach().clone()  # (S, D)
    torch.testing.assert_close(values, log_probs(model, e), rtol=0, atol=1e-12)
    numeric = central_differences(lambda x: log_probs(model, x), e)
    torch.testing.assert_close(raw["saliency"], numeric, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(raw["ixg"], numeric * e, rtol=1e-5, atol=1e-8)
    assert numeric.abs().amax() > 1e-3  # the check is not vacuous


def test_a_shared_embedding_matrix_is_replaced_on_the_source_side_only() -> None:
    """With one matrix for source, target and output (the default), only the source lookup
    takes the attributed embeddings: f(e) is the model's forward pass, and its gradient
    matches finite differences of f."""
    from minitx.attribution import _log_prob_function

    model = tiny_model(share_embeddings=True)
    src, tgt_in, targets = tensors()
    raw, values, _ = gradient_attributions(model, src, tgt_in, targets, ["saliency"])
    with torch.no_grad():
        logits = model(src[None], tgt_in[None])[0]
    plain = torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)
    torch.testing.assert_close(values, plain, rtol=0, atol=1e-12)
    f = _log_prob_function(model, src[None], tgt_in[None], targets[None])
    e = model.src_embed.weight[src].detach().clone()
    with torch.no_grad():
        numeric = central_differences(lambda x: f(x[None])[0], e)
    torch.testing.assert_close(raw["saliency"], numeric, rtol=1e-5, atol=1e-8)


def test_integrated_gradients_are_complete() -> None:
    """The signed IG attributions of a row add up to f(e) - f(0), up to the quadrature error,
    which shrinks fast with more nodes along a smooth path (GELU; a ReLU's kinks slow it);
    with one node (the midpoint) IG is the gradient at e/2 times e."""
    model = tiny_model(share_embeddings=False, activation="gelu")
    src, tgt_in, targets = tensors()
    e = model.src_embed.weight[src].detach()
    baseline = log_probs(model, torch.zeros_like(e))
    gaps = []
    for steps in (2, 8, 32):
        raw, values, delta = gradient_attributions(
            model, src, tgt_in, targets, ["ig"], ig_steps=steps
        )
        torch.testing.assert_close(delta, raw["ig"].sum((1, 2)) - (values - baseline))
        gaps.append(float(delta.abs().max()))
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 1e-8
    one, _, _ = gradient_attributions(model, src, tgt_in, targets, ["ig"], ig_steps=1)
    at_half = central_differences(lambda x: log_probs(model, x), e / 2)
    torch.testing.assert_close(one["ig"], at_half * e, rtol=1e-5, atol=1e-8)


def test_the_methods_match_captum() -> None:
    """Captum's Saliency (abs=False), InputXGradient and IntegratedGradients (Gauss-Legendre,
    zero baseline), one target position at a time, give the same numbers."""
    captum_attr = pytest.importorskip("captum.attr")
    from minitx.attribution import _log_prob_function

    model = tiny_model()
    src, tgt_in, targets = tensors()
    steps = 8
    raw, _, _ = gradient_attributions(model, src, tgt_in, targets, METHODS, ig_steps=steps)
    f = _log_prob_function(model, src[None], tgt_in[None], targets[None])  # (N, S, D) -> (N, T)
    e = model.src_embed.weight[src].detach()[None].requires_grad_()  # (1, S, D)
    for t in range(len(targets)):
        saliency = captum_attr.Saliency(f).attribute(e, target=t, abs=False)
        ixg = captum_attr.InputXGradient(f).attribute(e, target=t)
        ig = captum_attr.IntegratedGradients(f).attribute(
            e, baselines=torch.zeros_like(e), target=t, n_steps=steps, method="gausslegendre"
        )
        torch.testing.assert_close(raw["saliency"][t], saliency[0])
        torch.testing.assert_close(raw["ixg"][t], ixg[0])
        torch.testing.assert_close(raw["ig"][t], ig[0], rtol=1e-6, atol=1e-9)


def test_attribute_gives_row_distributions_on_the_cross_attention_axes() -> None:
    model = tiny_model().float()
    model.train()  # put in eval mode for the call, and back
    scores, values, delta = attribute(model, SRC, TGT)
    assert model.training
    assert list(scores) == list(METHODS)
    for matrix in scores.values():
        assert matrix.shape == (len(TGT) + 1, len(SRC) + 1) and matrix.dtype == torch.float32
        assert (matrix >= 0).all()
        torch.testing.assert_close(matrix.sum(-1), torch.ones(len(TGT) + 1))
    assert values.shape == delta.shape == (len(TGT) + 1,)
    assert (values <= 0).all()
    with torch.inference_mode():  # gradients all the same
        again, _, _ = attribute(model, SRC, TGT, ["saliency"])
    torch.testing.assert_close(again["saliency"], scores["saliency"])
    only, _, none = attribute(model, SRC, TGT, ["ixg", "saliency", "ixg"])
    assert list(only) == ["ixg", "saliency"] and none is None
    with pytest.raises(ConfigError, match="unknown attribution method.*saliency, ixg, ig"):
        attribute(model, SRC, TGT, ["attention"])
    with pytest.raises(ConfigError, match="ig_steps"):
        attribute(model, SRC, TGT, ["ig"], ig_steps=0)
    with pytest.raises(ConfigError, match="ig_steps must be at most 1000, got 100000"):
        attribute(model, SRC, TGT, ["ig"], ig_steps=100_000)  # numpy asked for 75 GiB


def test_aggregate_takes_the_norm_per_piece_and_normalises_rows() -> None:
    raw = torch.tensor([[[3.0, 4.0], [0.0, 0.0], [-6.0, 8.0]], [[0.0, 0.0]] * 3])  # (2, 3, 2)
    torch.testing.assert_close(
        aggregate(raw), torch.tensor([[5 / 15, 0.0, 10 / 15], [0.0, 0.0, 0.0]])
    )


# ----------------------------------------------------------------------------- agreement


def test_rank_correlation_is_spearmans_rho() -> None:
    a = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 2.0], [0.5, 0.5, 0.5], [3.0, 1.0, 2.0]])
    b = torch.tensor([[1.0, 3.0, 2.0], [1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [3.0, 1.0, 2.0]])
    rho = rank_correlation(a, b)
    assert rho[0] == pytest.approx(0.5)
    assert rho[1] == pytest.approx(1.5 / math.sqrt(3))  # ties share their mean rank
    assert math.isnan(rho[2])  # a constant row has no ranking
    assert rho[3] == pytest.approx(1.0)
    torch.testing.assert_close(
        average_ranks(torch.tensor([0.2, 0.1, 0.2, 0.05])),
        torch.tensor([3.5, 2.0, 3.5, 1.0], dtype=torch.float64),
    )
    assert rank_correlation(-b, b)[0] == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="shapes"):
        rank_correlation(a, b[:, :2])


def test_agreement_leaves_out_the_eos_column_and_row() -> None:
    attention = torch.tensor(
        [[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.0, 0.0, 1.0]]  # last row predicts eos
    )
    attributed = torch.tensor([[0.6, 0.1, 0.3], [0.5, 0.1, 0.4], [1.0, 0.0, 0.0]])
    assert top1_agreement(attention, attributed).tolist() == [True, False, False]
    found = agreement(attention, attributed)  # 2 rows x 2 source pieces
    assert found == {"spearman": 0.0, "top1": 0.5, "rows": 2}  # rho +1 and -1
    one_piece = agreement(attention[:, -2:], attributed[:, -2:])  # one source piece: no ranking
    assert math.isnan(one_piece["spearman"]) and one_piece["top1"] == 1.0
    assert agreement(attention[:1], attributed[:1])["rows"] == 0


# ----------------------------------------------------------------------------- the translator


def test_translator_attributions_sit_beside_its_attention(tiny_checkpoint: Path) -> None:
    from minitx.translator import Translator

    translator = Translator.from_pretrained(tiny_checkpoint)
    sentence = "Ein Mann fährt Fahrrad."
    maps = translator.attention(sentence, beam_size=1)
    found = translator.attributions(sentence, beam_size=1, methods=["saliency", "ig"])
    assert isinstance(found, Attributions)
    assert found.axes() == maps.axes("cross")
    assert found.tgt_tokens == maps.tgt_tokens
    assert list(found.scores) == ["saliency", "ig"]
    for matrix in found.scores.values():
        assert matrix.shape == maps.cross_attentions[0].shape[1:]
        torch.testing.assert_close(matrix.sum(-1), torch.ones(len(found.predicted_tokens)))
    # The completeness gap is integrated gradients' quadrature error: more nodes shrink it. (How
    # small 16 nodes leave it depends on where the trained model's ReLU kinks fall: 0.07 here.)
    assert found.ig_delta is not None and torch.isfinite(found.ig_delta).all()
    finer = translator.attributions(sentence, beam_size=1, methods=["ig"], ig_steps=64)
    gap, finer_gap = float(found.ig_delta.abs().max()), float(finer.ig_delta.abs().max())
    assert finer_gap < gap and finer_gap < 0.05

    reference = translator.attributions(sentence, translation="A man rides a bike.")
    direct = teacher_forced_attributions(
        translator.model, translator.tokenizer, sentence, "A man rides a bike."
    )
    assert reference.axes() == direct.axes()
    for method in METHODS:
        torch.testing.assert_close(reference.scores[method], direct.scores[method])
    with pytest.raises(ValueError, match="non-empty"):
        translator.attributions("  ")
    with pytest.raises(ConfigError):
        translator.attributions(sentence, methods=["lime"])


def test_attributions_check_their_shapes() -> None:
    with pytest.raises(ValueError, match=r"expected \(T=2, S=3\)"):
        Attributions(["a", "b", "</s>"], ["<s>", "x"], ["x", "</s>"], {"ig": torch.zeros(3, 2)},
                     torch.zeros(2))  # fmt: skip
