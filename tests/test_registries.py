"""The extension points: a score, a positional encoding, an activation, a decoding strategy
and a learning-rate schedule each added in this file alone, then trained and decoded with,
through the Python API and the commands (minitx-translate, minitx-evaluate, the demo page,
``--model.optim.schedule``)."""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch
from helpers import TOY_CORPUS_DIR, TOY_TEST_SOURCES
from torch import Tensor, nn

from minitx.activations import ACTIVATIONS
from minitx.attention import SCORES, MultiHeadAttention
from minitx.decoding import (
    STRATEGIES,
    DecodingConfig,
    DecodingStrategy,
    Hypothesis,
    generate,
    greedy_decode,
)
from minitx.errors import ConfigError
from minitx.model import Transformer, TransformerConfig
from minitx.positional import POSITIONAL_ENCODINGS, PositionalEncoding
from minitx.registry import Registry
from minitx.training import TranslationModule
from minitx.training.schedules import SCHEDULES, Schedule, make_schedule
from minitx.translator import Translator
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
OPEN_ENDED = {"schedule": "inverse_sqrt"}
"""A schedule that needs no planned length, so `configure_optimizers` runs without a Trainer."""


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
    optimizer = torch.optim.AdamW(module.parameter_groups(), lr=1e-3)  # no Trainer: no plan
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
        module = TranslationModule(transformer={**SMALL, "score": "cosine"}, optim=OPEN_ENDED)
        scores = [m for m in module.model.modules() if isinstance(m, CosineScore)]
        assert len(scores) == 3  # encoder self, decoder self, cross
        train_one_step(module)
        assert scores[0].temperature.grad is not None  # the new score is really in the graph
        model = module.model.eval()
        for config in (DecodingConfig(strategy="greedy"), DecodingConfig(beam_size=3)):
            hyps = generate(model, batch()["src"], config)
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
        module = TranslationModule(transformer={**SMALL, "positional": "halving"}, optim=OPEN_ENDED)
        assert isinstance(module.model.positional, Halving)
        train_one_step(module)


def test_an_activation_registered_in_this_file_is_used() -> None:
    with ACTIVATIONS.temporarily("tanh", nn.Tanh):
        model = Transformer(TransformerConfig(**{**SMALL, "activation": "tanh"}))
        assert isinstance(model.encoder_layers[0].feed_forward.activation, nn.Tanh)


def test_temporarily_stands_in_for_a_registered_name_and_gives_it_back() -> None:
    """What the "registered already" error suggests: a notebook cell that registered a name
    can try another entry under it for a block, and has its own back after the block."""
    registry: Registry = Registry("thing")
    registry.register("a")(nn.ReLU)
    registry.register("b")(nn.Tanh)
    with registry.temporarily("a", nn.GELU):
        assert registry["a"] is nn.GELU and registry.names() == ("a", "b")
    assert registry["a"] is nn.ReLU and registry.names() == ("a", "b")
    with pytest.raises(RuntimeError), registry.temporarily("c", nn.SiLU):
        raise RuntimeError  # the block fails: the new name goes all the same
    assert registry.names() == ("a", "b")
    with pytest.raises(TypeError), registry.temporarily("a", 3):  # type: ignore[arg-type]
        pass
    assert registry["a"] is nn.ReLU


def test_a_decoding_strategy_registered_in_this_file_is_reachable_from_the_config() -> None:
    calls = []

    def first_token_only(model, src, config):
        calls.append(config)
        return [[Hypothesis([EOS_ID], 0.0, 0.0)] for _ in range(src.size(0))]

    with STRATEGIES.temporarily("eos_only", first_token_only):
        torch.manual_seed(0)
        model = Transformer(TransformerConfig(**SMALL)).eval()
        config = DecodingConfig(strategy="eos_only")
        assert generate(model, batch()["src"], config) == [[Hypothesis([EOS_ID], 0.0, 0.0)]] * 3
        assert calls == [config]
    with pytest.raises(ValueError, match="unknown decoding strategy 'eos_only'"):
        DecodingConfig(strategy="eos_only")


@pytest.mark.parametrize(
    "returned",
    [
        ["a", "b", "c"],
        torch.zeros(3, 2),
        [[1, 2], [3], [4]],
        [[Hypothesis([EOS_ID], 0.0, 0.0)]] * 2,
        [[Hypothesis([EOS_ID], 0.0, 0.0)], [], [Hypothesis([EOS_ID], 0.0, 0.0)]],
    ],
    ids=["texts", "tensor", "ids", "a-sentence-short", "an-empty-list"],
)
def test_a_strategy_returning_something_else_is_named_by_generate(returned) -> None:
    """It failed later where the hypotheses are read (`'str' object has no attribute
    'tokens'`, a `zip()` length error), naming neither the strategy nor what it must return."""
    with STRATEGIES.temporarily("odd", lambda model, src, config: returned):
        torch.manual_seed(0)
        model = Transformer(TransformerConfig(**SMALL)).eval()
        wanted = r"give one non-empty list of minitx.decoding.Hypothesis per sentence \(3 here\)"
        with pytest.raises(TypeError, match=rf"decoding strategy 'odd' returned .*: {wanted}"):
            generate(model, batch()["src"], DecodingConfig(strategy="odd"))


class HeadsAveraged(nn.Module):
    """A score that drops the head axis: it broadcast into the weights and trained."""

    def __init__(self, *, d_head: int) -> None:
        super().__init__()

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return (q @ k.transpose(-2, -1)).mean(1)


class KeysFirst(nn.Module):
    """A score with its axes swapped: a broadcast error 14 frames deep, or, where Tq equals Tk,
    nothing at all."""

    def __init__(self, *, d_head: int) -> None:
        super().__init__()

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return k @ q.transpose(-2, -1)


@pytest.mark.parametrize(
    ("score", "shape"), [(HeadsAveraged, "(2, 5, 7)"), (KeysFirst, "(2, 4, 7, 5)")]
)
def test_a_score_of_the_wrong_shape_is_named_at_once(score, shape) -> None:
    with SCORES.temporarily("odd", score):
        mha = MultiHeadAttention(16, 4, score="odd")
        wanted = rf"score {score.__name__} gave {re.escape(shape)}, not \(2, 4, 5, 7\)"
        with pytest.raises(ValueError, match=wanted):
            mha(torch.randn(2, 5, 16), torch.randn(2, 7, 16))


def test_registry_rejects_a_second_entry_under_a_taken_name() -> None:
    """The message names what holds the name and the ways out (a notebook that reloads its
    module registers again)."""
    registry: Registry[type] = Registry("thing")
    registry.register("a")(int)
    with pytest.raises(
        ValueError,
        match=r"thing 'a' is registered already, as <class 'int'>: unregister\('a'\) first, or "
        r"use temporarily\(\)",
    ):
        registry.register("a")(float)
    assert list(registry) == ["a"] and registry["a"] is int


class NotAStrategy:
    """A class with a `decode`, but no `DecodingStrategy`."""

    def decode(self, model, src, config):
        return []


@pytest.mark.parametrize(
    ("registry", "entry", "wanted"),
    [
        (STRATEGIES, NotAStrategy, "a subclass of minitx.decoding.config.DecodingStrategy or"),
        (STRATEGIES, "greedy", "a subclass of minitx.decoding.config.DecodingStrategy or"),
        (POSITIONAL_ENCODINGS, nn.Identity, "a subclass of minitx.positional.PositionalEncoding"),
        (POSITIONAL_ENCODINGS, lambda **kw: None, "a subclass of .*PositionalEncoding$"),
        (SCHEDULES, int, "a subclass of minitx.training.schedules.Schedule$"),
        # accepted, then a TypeError when a model was built
        (SCORES, lambda q, k: q @ k.transpose(-2, -1), "a subclass of torch.nn.modules.module"),
        (ACTIVATIONS, torch.tanh, "a subclass of torch.nn.modules.module.Module$"),
    ],
    ids=[
        "strategy-class",
        "strategy-text",
        "positional-class",
        "positional-function",
        "schedule",
        "score-function",
        "activation-function",
    ],
)
def test_an_entry_of_the_wrong_kind_is_refused_when_registered(registry, entry, wanted) -> None:
    """A plain class registered as a strategy was refused at every DecodingConfig, beam search
    and greedy included (every strategy's options are checked), and a positional encoding
    that was no PositionalEncoding failed at the model's build: both now fail at `register`,
    naming the entry and what to register, and leave the registry as it was."""
    before = registry.names()
    with pytest.raises(TypeError, match=rf"'mine' is .*: register {wanted}"):
        registry.register("mine")(entry)
    assert registry.names() == before
    DecodingConfig(strategy="beam")  # the others still work


class ScoreWithoutHeadSize(nn.Module):
    """A score module the model cannot build: it is built as cls(d_head=...)."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, q: Tensor, k: Tensor) -> Tensor:
        return q @ k.transpose(-2, -1)


def test_an_entry_the_model_cannot_build_is_refused_when_registered() -> None:
    """A score class without d_head was accepted, then failed at the model's build with
    "__init__() got an unexpected keyword argument 'd_head'"."""
    before = SCORES.names()
    with pytest.raises(TypeError, match=r"cannot be built as entry\(d_head=\.\.\.\)"):
        SCORES.register("mine")(ScoreWithoutHeadSize)
    assert SCORES.names() == before
    ACTIVATIONS.register("tanh-module")(nn.Tanh)  # built with no arguments: taken
    ACTIVATIONS.unregister("tanh-module")


def test_greedy_strategy_equals_greedy_decode() -> None:
    torch.manual_seed(1)
    model = Transformer(TransformerConfig(**SMALL)).eval()
    src = batch(3)["src"]
    ids = greedy_decode(model, src)
    hyps = generate(model, src, DecodingConfig(strategy="greedy"))
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
    cached = greedy_decode(model, src, DecodingConfig(use_cache=True))
    full = greedy_decode(model, src, DecodingConfig(use_cache=False))
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


# ---------------------------------------------------------------------- a decoding strategy


class GreedyAndReversed(DecodingStrategy):
    """A new strategy, written here: the greedy translation (score 0), then the same pieces in
    reverse order (score -1) as the runner-up. No options of its own; width 2."""

    calls: ClassVar[list[DecodingConfig]] = []

    def decode(
        self, model: Transformer, src: Tensor, config: DecodingConfig
    ) -> list[list[Hypothesis]]:
        type(self).calls.append(config)
        ids = greedy_decode(model, src, config)
        out = []
        for row in ids.tolist():
            pieces = [t for t in row if t not in (PAD_ID, EOS_ID)]
            both = [Hypothesis(pieces + [EOS_ID], 0.0, 0.0)]
            both.append(Hypothesis(pieces[::-1] + [EOS_ID], -1.0, -1.0))
            out.append(both[: config.n_best])
        return out

    def width(self, config: DecodingConfig) -> int:
        return 2

    def describe(self, config: DecodingConfig) -> str:
        return "greedy and reversed"

    def file_tag(self, config: DecodingConfig) -> str:
        return "reversed"


@pytest.fixture
def reversed_strategy() -> GreedyAndReversed:
    GreedyAndReversed.calls.clear()
    with STRATEGIES.temporarily("reversed", GreedyAndReversed):
        yield GreedyAndReversed
    assert "reversed" not in STRATEGIES


@pytest.fixture(scope="module")
def translator(tiny_checkpoint: Path) -> Translator:
    return Translator.from_pretrained(tiny_checkpoint)


SENTENCES = TOY_TEST_SOURCES[:3]


def test_a_strategy_class_declares_and_checks_its_settings(reversed_strategy) -> None:
    config = DecodingConfig(strategy="reversed", n_best=2)
    assert (config.width, config.describe(), config.file_tag) == (
        2,
        "greedy and reversed",
        "reversed",
    )
    with pytest.raises(
        ConfigError, match=r"between 1 and the hypotheses it searches \(2\) for strategy 'reversed'"
    ):
        DecodingConfig(strategy="reversed", n_best=3)
    with pytest.raises(ConfigError, match="top_p only apply to strategy 'sample', not 'reversed'"):
        DecodingConfig(strategy="reversed", top_p=0.5)


def test_an_exclusive_option_of_a_registered_strategy_is_refused_elsewhere() -> None:
    class Tempered(DecodingStrategy):
        options: ClassVar[tuple[str, ...]] = ("temperature",)

    with STRATEGIES.temporarily("tempered", Tempered):
        assert DecodingConfig(strategy="tempered", temperature=0.5).temperature == 0.5
        with pytest.raises(ConfigError, match="temperature only apply to strategy 'sample'"):
            DecodingConfig(strategy="greedy", temperature=0.5)  # sample is registered first
        DecodingConfig(strategy="sample", temperature=0.5)  # sample reads it too

    class Misspelt(DecodingStrategy):
        options: ClassVar[tuple[str, ...]] = ("temprature",)

    with STRATEGIES.temporarily("misspelt", Misspelt):
        with pytest.raises(ConfigError, match=r"declares options \['temprature'\]"):
            DecodingConfig(strategy="greedy")


def test_a_registered_strategy_reaches_the_translate_command(
    reversed_strategy, translator: Translator, tiny_checkpoint: Path, capsys
) -> None:
    from minitx.cli import translate

    args = ["--checkpoint", str(tiny_checkpoint), "--strategy", "reversed"]
    assert translate.main([*args, "--n-best", "2", *SENTENCES]) == 0
    rows = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    expected = translator.translate_n_best(SENTENCES, DecodingConfig(strategy="reversed", n_best=2))
    assert [(int(i), float(score), text) for i, score, text in rows] == [
        (i, score, text) for i, hyps in enumerate(expected) for text, score in hyps
    ]
    assert [float(r[1]) for r in rows] == [0.0, -1.0] * 3  # the strategy's own scores
    assert all(c.strategy == "reversed" for c in reversed_strategy.calls)
    assert translate.main([*args, *SENTENCES]) == 0  # one line each: the best, greedy's
    assert capsys.readouterr().out.splitlines() == translator.translate(SENTENCES, beam_size=1)
    for bad, message in (
        (["--beam", "3"], "--beam does not apply to --strategy reversed"),
        (["--n-best", "3"], "between 1 and the hypotheses it searches (2)"),
        (["--top-p", "0.9"], "--top-p applies only with --sample, not with --strategy reversed"),
        (["--sample"], "--sample and --strategy reversed exclude each other"),
    ):
        with pytest.raises(SystemExit) as exc:
            translate.main([*args, *bad, "x"])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_built_in_strategies_by_name_are_the_old_flags() -> None:
    """``--strategy beam|greedy|sample`` give the configs of ``--beam N`` / ``--sample``."""
    from minitx.cli.common import decoding_from_args
    from minitx.cli.translate import build_parser, check_args

    parser = build_parser()

    def config(*options: str) -> DecodingConfig:
        args = parser.parse_args(["--checkpoint", "x", *options, "a sentence"])
        check_args(parser, args)
        return decoding_from_args(args, n_best=args.n_best or 1)

    assert config("--strategy", "beam", "--beam", "3") == config("--beam", "3")
    assert config("--strategy", "beam") == config() == DecodingConfig()
    assert config("--strategy", "greedy").describe() == config("--beam", "1").describe()
    sampling = ("--top-p", "0.9", "--seed", "2", "--n-best", "3")
    assert config("--strategy", "sample", *sampling) == config("--sample", *sampling)
    assert config("--sample", "--strategy", "sample") == DecodingConfig(strategy="sample")


def test_an_unregistered_strategy_is_no_choice(tiny_checkpoint: Path, capsys) -> None:
    from minitx.cli import translate

    with pytest.raises(SystemExit) as exc:
        translate.main(["--checkpoint", str(tiny_checkpoint), "--strategy", "reversed", "x"])
    assert exc.value.code == 2 and "invalid choice: 'reversed'" in capsys.readouterr().err


def test_a_registered_strategy_reaches_the_evaluate_command(
    reversed_strategy, translator: Translator, tiny_checkpoint: Path, tmp_path: Path, capsys
) -> None:
    from minitx.cli import evaluate

    hyp, report = tmp_path / "hyp.txt", tmp_path / "report.json"
    args = ["--checkpoint", str(tiny_checkpoint), "--data", str(TOY_CORPUS_DIR), "--limit", "4"]
    args += ["--strategy", "reversed", "--hyp-out", str(hyp), "--json", str(report)]
    assert evaluate.main(args) == 0
    assert capsys.readouterr().out.startswith("greedy and reversed: BLEU ")
    best = translator.translate(TOY_TEST_SOURCES[:4], DecodingConfig(strategy="reversed"))
    assert hyp.read_text(encoding="utf-8").splitlines() == best
    [result] = json.loads(report.read_text(encoding="utf-8"))["results"]
    assert result["decoding"] == "greedy and reversed" and result["beam"] is None
    assert reversed_strategy.calls and all(
        c.strategy == "reversed" for c in reversed_strategy.calls
    )


def test_a_registered_strategy_reaches_the_demo_page(
    reversed_strategy, translator: Translator
) -> None:
    pytest.importorskip("gradio", reason="the demo needs Gradio: pip install -e '.[dev]'")
    from minitx.extras.demo.page import build_demo

    demo = build_demo(translator)
    [radio] = [b for b in demo.blocks.values() if getattr(b, "elem_id", None) == "strategy"]
    assert [value for _, value in radio.choices] == ["beam", "greedy", "sample", "reversed"]
    click = next(f for f in demo.fns.values() if len(f.inputs) == 3)  # the Translate button
    translation, rows, iframe = click.fn(SENTENCES[0], "reversed", 5)
    assert translation == translator.translate(SENTENCES[:1], beam_size=1)[0]
    assert [(rank, score) for rank, score, _ in rows] == [(1, 0.0), (2, -1.0)]
    assert reversed_strategy.calls[-1].strategy == "reversed" and "attention-viewer" in iframe


# ---------------------------------------------------------------------- a learning-rate schedule


class StepDown(Schedule):
    """A new schedule, written here: warm-up, then half the peak rate after `total_steps`/2."""

    needs_total_steps: ClassVar[bool] = True

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        self.warmup_steps, self.total_steps = max(1, warmup_steps), total_steps

    def __call__(self, step: int) -> float:
        step = max(1, step)
        if step < self.warmup_steps:
            return step / self.warmup_steps
        return 1.0 if step < self.total_steps // 2 else 0.5


def scheduler_of(module: TranslationModule, planned: float) -> Schedule:
    """The schedule `configure_optimizers` builds for a run planned to `planned` steps."""
    module._trainer = SimpleNamespace(estimated_stepping_batches=planned)
    return module.configure_optimizers()["lr_scheduler"]["scheduler"].lr_lambdas[0]


def test_a_schedule_registered_in_this_file_is_model_optim_schedule(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from minitx.cli.train import build_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["minitx-train"])  # LightningCLI reads it besides `args`
    args = ["--model.optim.schedule", "step_down", "--model.optim.warmup_steps", "10"]
    args += ["--trainer.logger", "false"]
    with SCHEDULES.temporarily("step_down", StepDown):
        cli = build_cli(args)
        assert cli.model.optim.schedule == "step_down"
        schedule = scheduler_of(cli.model, 200)
        assert isinstance(schedule, StepDown) and schedule.total_steps == 200  # the run's plan
        assert [schedule(s) for s in (5, 10, 99, 100)] == [0.5, 1.0, 1.0, 0.5]
        with pytest.raises(
            ConfigError, match="applies to the linear, cosine, budget and step_down"
        ):
            TranslationModule(
                transformer=SMALL, optim={"schedule": "inverse_sqrt", "total_steps": 500}
            )
    with pytest.raises(ValueError, match="schedule 'step_down'; choose one of"):
        TranslationModule(transformer=SMALL, optim={"schedule": "step_down"})


class HalfRate(Schedule):
    """The guide's recipe to the letter: `__call__` alone, the plan kept by `Schedule`."""

    def __call__(self, step: int) -> float:
        return 1.0 if step < self.warmup_steps else 0.5


class HalfWay(HalfRate):
    needs_total_steps: ClassVar[bool] = True

    def __call__(self, step: int) -> float:
        return 1.0 if step < self.total_steps // 2 else 0.5


def test_a_schedule_with_its_call_alone_gets_the_plan() -> None:
    """Was: `Schedule` had no `__init__`, and building one as `cls(warmup_steps)` ended in
    "HalfRate() takes no arguments" once training began."""
    with SCHEDULES.temporarily("half_rate", HalfRate), SCHEDULES.temporarily("half_way", HalfWay):
        schedule = make_schedule("half_rate", 10, None)
        assert schedule.warmup_steps == 10 and [schedule(9), schedule(10)] == [1.0, 0.5]
        schedule = make_schedule("half_way", 10, 200)
        assert schedule.total_steps == 200 and [schedule(99), schedule(100)] == [1.0, 0.5]


def _paper(step: int, warmup: int) -> float:
    """The schedules' formulas as they were before the registry (the numbers must not move)."""
    warmup, step = max(1, warmup), max(1, step)
    return min(step / warmup, math.sqrt(warmup / step))


def _decay(step: int, warmup: int, total: int, cosine: bool) -> float:
    warmup = max(1, warmup)
    total, step = max(warmup + 1, total), max(1, step)
    if step < warmup:
        return step / warmup
    progress = min(1.0, max(0.0, (step - warmup) / (total - warmup)))
    return 0.5 * (1.0 + math.cos(math.pi * progress)) if cosine else 1.0 - progress


@pytest.mark.parametrize("name", ["inverse_sqrt", "linear", "cosine"])
@pytest.mark.parametrize(("warmup", "total"), [(100, 1475), (1000, 4000), (0, 50), (7, 8)])
def test_built_in_schedules_keep_their_learning_rates_bit_for_bit(
    name: str, warmup: int, total: int
) -> None:
    """Every rate `LambdaLR` sets through `TranslationModule`, equal (==) to the old formula."""
    expected = {
        "inverse_sqrt": lambda s: _paper(s, warmup),
        "linear": lambda s: _decay(s, warmup, total, cosine=False),
        "cosine": lambda s: _decay(s, warmup, total, cosine=True),
    }[name]
    assert [make_schedule(name, warmup, total)(s) for s in range(total + 50)] == [
        expected(s) for s in range(total + 50)
    ]
    if total <= warmup:
        return  # OptimConfig refuses these; the schedules themselves still clamp them
    lr = 1.5e-3
    optim = {"schedule": name, "warmup_steps": warmup, "lr": lr}
    module = TranslationModule(transformer=SMALL, optim=optim)
    scheduler = module.configure_optimizers() if name == "inverse_sqrt" else None
    if scheduler is None:
        module._trainer = SimpleNamespace(estimated_stepping_batches=total)
        scheduler = module.configure_optimizers()
    optimizer, lr_scheduler = scheduler["optimizer"], scheduler["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(total + 20):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        lr_scheduler.step()
    assert rates == [lr * expected(s) for s in range(total + 20)]
    state = vars(lr_scheduler.lr_lambdas[0])  # what a checkpoint stores of the schedule
    keys = {"warmup_steps"} if name == "inverse_sqrt" else {"warmup_steps", "total_steps"}
    assert set(state) == keys
