"""The experiments suite (minitx.extras.experiments, minitx-experiment): the definitions, the
probes, and the runner end to end on the toy corpus with a budget of seconds."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import IO

import pytest
import torch
import yaml
from helpers import REPO_DIR, subprocess_env
from preloaded import PreloadedProcess, run_python

from minitx.errors import ConfigError, OutputError
from minitx.extras.experiments import EXPERIMENTS, runner
from minitx.extras.experiments.definitions import Experiment, Variant
from minitx.extras.experiments.probes import attention_statistics, head_divergence, shuffled_sources
from minitx.extras.experiments.report import bleu_curve, budget_in_steps
from minitx.extras.experiments.runner import (
    Settings,
    max_time,
    run_key,
    summarise_metrics,
    train_command,
)
from minitx.model import Transformer, TransformerConfig
from minitx.tokenizer import Tokenizer
from minitx.training import OptimConfig
from minitx.translator import Translator

TOY_PAIRS = (
    ["ein mann fährt fahrrad .", "zwei hunde spielen im schnee ."],
    ["a man rides a bike .", "two dogs play in the snow ."],
)


# ------------------------------------------------------------------ definitions


def test_every_override_is_a_real_setting_with_a_valid_value() -> None:
    groups = {"model.transformer": TransformerConfig, "model.optim": OptimConfig}
    for experiment in EXPERIMENTS.values():
        names = [v.name for v in experiment.variants]
        assert len(set(names)) == len(names), experiment.name
        if not experiment.trains:
            continue
        for variant in experiment.variants:
            for key, value in variant.overrides.items():
                group, field = key.rsplit(".", 1)
                cls = groups[group]
                assert field in {f.name for f in fields(cls)}, key
                if cls is TransformerConfig:  # the config validates its values
                    TransformerConfig(**{field: yaml.safe_load(value)})


def test_the_experiments_vary_what_their_claims_are_about() -> None:
    def setting(experiment: str, key: str) -> set[str | None]:
        return {v.overrides.get(key) for v in EXPERIMENTS[experiment].variants}

    assert setting("scores", "model.transformer.score") == {None, "dot", "additive", "bilinear"}
    assert setting("position", "model.transformer.positional") == {
        None,
        "none",
        "learned",
        "rotary",
    }
    assert setting("heads", "model.transformer.n_heads") == {"1", "2", None, "8"}
    scale = {v.name: v.overrides for v in EXPERIMENTS["scale"].variants}
    assert scale["dot-dh256"] == {
        "model.transformer.score": "dot",
        "model.transformer.n_heads": "1",
    }
    assert not EXPERIMENTS["hard"].trains
    norm = {v.name: v.overrides for v in EXPERIMENTS["norm"].variants}
    assert norm["post-LN-3x-lr"]["model.optim.lr"] == "0.003"
    # "3x" the rate of long, the recipe every variant trains on (runner.RECIPE)
    long = yaml.safe_load((REPO_DIR / "minitx" / "configs" / "long.yaml").read_text())
    assert long["model"]["optim"]["lr"] * 3 == pytest.approx(0.003)


def test_max_time_format() -> None:
    assert max_time(8) == "00:00:08:00"
    assert max_time(0.25) == "00:00:00:15"
    assert max_time(125.5) == "00:02:05:30"
    assert max_time(0.001) == "00:00:00:01"
    assert max_time(100 * 60) == "04:04:00:00"  # hours past a day go to the days field


def test_budget_in_minutes_or_steps_and_the_run_key() -> None:
    variant = EXPERIMENTS["scores"].variants[1]  # dot
    timed = Settings(budget_minutes=5)
    command = train_command(timed, variant, "run")
    assert command[command.index("--config") + 1] == "long"  # the recipe they were measured on
    on_top = train_command(Settings(config="multi30k_en_de"), variant, "run")
    start = on_top.index("--config")
    assert on_top[start : start + 4] == ["--config", "long", "--config", "multi30k_en_de"]
    assert command[command.index("--trainer.max_time") + 1] == "00:00:05:00"
    # the minutes bound the run, not the config's epochs (tiny's 2)
    assert command[command.index("--trainer.max_epochs") + 1] == "-1"
    assert command[-1] == "--model.transformer.score=dot" and "--trainer.max_steps" not in command
    stepped = Settings(max_steps=300)
    command = train_command(stepped, variant, "run")
    assert command[command.index("--trainer.max_steps") + 1] == "300"
    assert command[command.index("--trainer.max_time") + 1] == "null"
    keys = {run_key(s, variant) for s in (timed, stepped, Settings(budget_minutes=6))}
    assert len(keys) == 3  # different budgets are different runs
    assert run_key(Settings(budget_minutes=5), variant) == run_key(timed, variant)
    default = EXPERIMENTS["heads"].variants[2]  # 4 heads: no overrides, like "sinusoidal"
    assert run_key(timed, default) == run_key(timed, EXPERIMENTS["position"].variants[1])


def test_the_run_key_follows_what_the_run_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A finished run was reused after its --config file was edited (the key held the file's
    name, not its text), and from another working directory or MINITX_DATA_DIR, where
    relative paths and the corpus are others."""
    variant = EXPERIMENTS["scores"].variants[1]
    config = tmp_path / "my.yaml"
    config.write_text("model:\n  optim:\n    lr: 0.005\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DATA_DIR", raising=False)
    settings = Settings(config="my.yaml", max_steps=10)
    before = run_key(settings, variant)
    assert run_key(Settings(config="my.yaml", max_steps=10), variant) == before  # stable
    config.write_text("model:\n  optim:\n    lr: 0.0001\n", encoding="utf-8")
    edited = run_key(settings, variant)
    monkeypatch.setenv("MINITX_DATA_DIR", str(tmp_path))
    elsewhere = run_key(settings, variant)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    config_there = tmp_path / "sub" / "my.yaml"
    config_there.write_bytes(config.read_bytes())
    moved = run_key(settings, variant)
    assert len({before, edited, elsewhere, moved}) == 4
    packaged = run_key(Settings(config="tiny"), variant)
    assert packaged != run_key(Settings(config="multi30k_en_de"), variant)


def test_summarise_metrics_pairs_bleu_with_its_time() -> None:
    rows = [
        {"step": "9", "val/bleu": "1.5", "time/fit_seconds": "30"},
        {"step": "19", "val/bleu": "4.0", "time/fit_seconds": "90"},
        {"step": "19", "test/bleu_greedy": "3.5", "test/bleu_beam5": "3.9"},
        {"step": "5", "train/tokens_per_sec_step": "100"},
        {"step": "15", "train/tokens_per_sec_step": "300"},
        {"step": "19", "train/epoch_seconds": "3.8"},
    ]
    found = summarise_metrics(rows)
    assert found["val_bleu_curve"] == [
        {"step": 9, "minutes": 0.5, "bleu": 1.5},
        {"step": 19, "minutes": 1.5, "bleu": 4.0},
    ]
    assert found["best_val_bleu"] == 4.0
    assert (found["test_bleu_greedy"], found["test_bleu_beam5"]) == (3.5, 3.9)
    assert found["tokens_per_sec"] == 200 and found["steps"] == 19
    assert found["ms_per_step"] == pytest.approx(200)  # training time only, per step
    assert summarise_metrics([])["ms_per_step"] is None and summarise_metrics([])["steps"] == 0


def test_bleu_curves_plot_steps_for_a_budget_in_steps() -> None:
    rows = [
        {"step": "99", "val/bleu": "2.0", "time/fit_seconds": "240"},
        {"step": "199", "val/bleu": "7.0"},  # no clock: left out of the minutes curve
    ]
    variant = {"val_bleu_curve": summarise_metrics(rows)["val_bleu_curve"]}
    assert budget_in_steps({"budget": "300 steps"}) and not budget_in_steps({"budget": "8 minutes"})
    assert bleu_curve(variant, by_steps=True) == ([100, 200], [2.0, 7.0])  # steps done
    assert bleu_curve(variant, by_steps=False) == ([4.0], [2.0])


# ------------------------------------------------------------------ probes


def test_head_divergence_bounds() -> None:
    uniform = torch.full((2, 3, 4), 0.25)
    assert head_divergence(uniform) == pytest.approx(0.0, abs=1e-7)
    assert head_divergence(uniform[:1]) == 0.0  # one head
    one_hot = torch.zeros(2, 3, 4)
    one_hot[0, :, 0] = 1.0
    one_hot[1, :, 1] = 1.0
    assert head_divergence(one_hot) == pytest.approx(math.log(2))


def test_shuffled_sources_keep_the_words_and_the_final_punctuation() -> None:
    sources = ["ein mann fährt mit einem roten fahrrad durch die stadt .", "hallo welt"]
    shuffled = shuffled_sources(sources, seed=1)
    assert shuffled == shuffled_sources(sources, seed=1)
    assert shuffled[0] != sources[0] and shuffled[0].endswith(" .")
    for before, after in zip(sources, shuffled, strict=True):
        assert sorted(before.split()) == sorted(after.split())


@pytest.fixture(scope="module")
def toy_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Tokenizer:
    from helpers import TOY_CORPUS_DIR

    lines = [
        line
        for lang in ("de", "en")
        for line in (TOY_CORPUS_DIR / f"train.{lang}").read_text().splitlines()
    ]
    return Tokenizer.train(lines, vocab_size=100)


def _model(score: str, n_heads: int, vocab: int) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        d_model=32, n_heads=n_heads, n_encoder_layers=2, n_decoder_layers=2, d_ff=64,
        dropout=0.0, score=score, src_vocab_size=vocab, tgt_vocab_size=vocab,
    )  # fmt: skip
    return Transformer(config).eval()


def test_unscaled_logits_are_sqrt_dk_wider_and_everything_is_measured(toy_tokenizer) -> None:
    """The same weights with and without 1/sqrt(d_k): the first attentions' logits spread
    exactly sqrt(d_head) times wider without it (the claim's premise, measured by the probe)."""
    vocab = toy_tokenizer.vocab_size
    stats = {
        score: attention_statistics(_model(score, 2, vocab), toy_tokenizer, *TOY_PAIRS)
        for score in ("scaled_dot", "dot")
    }
    assert stats["dot"]["pairs"] == 2
    layers = {s: {(x["kind"], x["layer"]): x for x in stats[s]["layers"]} for s in stats}
    assert sorted(layers["dot"]) == sorted(
        (kind, layer) for kind in ("encoder", "decoder", "cross") for layer in (0, 1)
    )
    for key, dot in layers["dot"].items():
        scaled = layers["scaled_dot"][key]
        ratio = dot["logit_std"] / scaled["logit_std"]
        if key in (("encoder", 0), ("decoder", 0)):  # same inputs: exactly sqrt(d_head)
            assert ratio == pytest.approx(math.sqrt(16), rel=1e-4), key
        else:  # inputs differ already (earlier attentions differ), the spread still grows
            assert ratio > 2, key
        for entry in (dot, scaled):
            assert 0 < entry["max_weight"] <= 1 and entry["entropy"] >= 0
            assert len(entry["head_entropy"]) == 2 and entry["grad_norm"] > 0
            assert 0 <= entry["head_divergence"] <= math.log(2)
    # sharper softmax without the scale: larger largest weights, lower entropy (on average)
    mean = {s: sum(x["max_weight"] for x in layers[s].values()) for s in layers}
    assert mean["dot"] > mean["scaled_dot"]
    assert all(0 < w <= 1 for ws in stats["dot"]["max_weights"].values() for w in ws)


def test_attention_statistics_leave_the_model_as_it_was(toy_tokenizer) -> None:
    model = _model("additive", 4, toy_tokenizer.vocab_size).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    attention_statistics(model, toy_tokenizer, *TOY_PAIRS)
    assert model.training
    assert all(p.grad is None for p in model.parameters())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


# ------------------------------------------------------------------ the runner and command


SMOKE = ("--config", "tiny", "--budget", "0.25", "--val-every", "10", "--probe-pairs", "4",
         "--set", "trainer.max_epochs=2")  # fmt: skip


def preloaded_run(
    command: list[str], *, capture_output: bool = False, text: bool = False, check: bool = False
) -> subprocess.CompletedProcess:
    """`subprocess.run` as the runner calls it to check the settings every variant shares
    (output captured as text), in a preloaded fork (tests/preloaded.py): without the 6-9 s of
    imports of a minitx-train process."""
    assert command[:3] == runner.TRAIN and capture_output and text and not check, command
    return run_python(command)


def preloaded_training(command: list[str], log: IO[str]) -> int:
    """`runner.run_training` in a preloaded fork: a variant's minitx-train process, its
    output and errors into the log file."""
    assert command[:3] == runner.TRAIN, command
    with PreloadedProcess(command, merge_stderr=True, stdout=Path(log.name)) as process:
        process.wait(600)
    return process.returncode


def run_in_process(
    *args: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> subprocess.CompletedProcess:
    """`minitx-experiment ARGS` in this process, as `run_command` gives it, the variants'
    trainings each in a process of its own (a preloaded fork): no second import of torch and
    Lightning."""
    from minitx.extras.experiments.command import main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the variants' minitx-train processes
    monkeypatch.setattr(runner.subprocess, "run", preloaded_run)
    monkeypatch.setattr(runner, "run_training", preloaded_training)
    status = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["minitx-experiment", *args], status, out, err)


def test_runner_on_the_toy_corpus(
    tmp_path: Path,
    tiny_checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "exp"
    io = {"monkeypatch": monkeypatch, "capsys": capsys}
    proc = run_in_process(
        "position", "--variants", "none", "sinusoidal", *SMOKE, "--out", str(out), **io
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((out / "position" / "results.json").read_text())
    variants = {v["name"]: v for v in summary["variants"]}
    assert sorted(variants) == ["none", "sinusoidal"]
    for variant in variants.values():
        assert variant["status"] == "ok"
        assert variant["val_bleu_curve"] and all(
            p["minutes"] > 0 for p in variant["val_bleu_curve"]
        )
        assert variant["test_bleu_greedy"] is not None and variant["steps"] > 0
        assert {"bleu", "shuffled_bleu"} <= set(variant["word_order"])
        assert set(variant["attention"]) == {"init", "trained"}
        assert variant["command"].startswith("minitx-train --config long --config tiny")
    assert "--model.transformer.positional=none" in variants["none"]["command"]
    table = (out / "position" / "results.md").read_text()
    assert "| `none` | ok |" in table and "test BLEU shuffled words" in table
    for png in ("bleu_over_time.png", "entropy_per_layer.png", "word_order.png"):
        assert (out / "position" / png).stat().st_size > 1000, png
    assert "## position" in (out / "README.md").read_text()

    # one row again: reused, and the other row of the table stays
    proc = run_in_process("position", "--variants", "none", *SMOKE, "--out", str(out), **io)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = json.loads((out / "position" / "results.json").read_text())["variants"]
    assert [v["name"] for v in again] == ["none", "sinusoidal"] and again[0] == variants["none"]

    # the same settings again (heads' "4-heads" is the base config, like "sinusoidal"): the
    # finished run is reused, not trained again
    runs = sorted(p.name for p in (out / "runs").iterdir())
    log = next((out / "runs").glob("*/train.log"))
    mtime = log.stat().st_mtime
    proc = run_in_process("heads", "--variants", "4-heads", *SMOKE, "--out", str(out), **io)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(p.name for p in (out / "runs").iterdir()) == runs
    assert log.stat().st_mtime == mtime and "training" not in proc.stdout
    assert "[heads] 4-heads: reuses the finished run " in proc.stdout  # said, not silent
    heads = json.loads((out / "heads" / "results.json").read_text())["variants"][0]
    assert heads["name"] == "4-heads" and heads["command"] == variants["sinusoidal"]["command"]

    # hard attention decodes a given checkpoint: soft equals plain greedy decoding
    proc = run_in_process(
        "hard", "--checkpoint", str(tiny_checkpoint), "--out", str(out), "--variants",
        "soft", "hard-argmax-cross", "hard-sample-all", **io,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    hard = {
        v["name"]: v for v in json.loads((out / "hard" / "results.json").read_text())["variants"]
    }
    assert sorted(hard) == ["hard-argmax-cross", "hard-sample-all", "soft"]
    assert "--attention hard-argmax" in hard["hard-argmax-cross"]["command"]
    assert (out / "hard" / "hard_attention.png").is_file()
    from minitx.evaluation import evaluate, load_split

    translator = Translator.from_pretrained(tiny_checkpoint)

    test = load_split("builtin:toy", "test", "de", "en", None)
    plain = evaluate(translator, test.sources, test.references, beam_size=1)
    assert hard["soft"]["test_bleu_greedy"] == pytest.approx(plain.bleu)
    # the written command scores that same data (minitx-evaluate's default is Multi30k's)
    from minitx.cli import evaluate as evaluate_cli

    report, hyp = tmp_path / "soft.json", str(tmp_path / "{beam}.hyp")
    args = [*shlex.split(hard["soft"]["command"])[1:], "--json", str(report), "--hyp-out", hyp]
    assert evaluate_cli.main(args) == 0
    scored = json.loads(report.read_text())["results"][0]["bleu"]
    assert scored == pytest.approx(hard["soft"]["test_bleu_greedy"])
    assert "(test split of `builtin:toy`, greedy)" in (out / "hard" / "results.md").read_text()


def test_a_variant_that_fails_says_so_and_every_variant_failing_is_an_error(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    recwarn: pytest.WarningsRecorder,
) -> None:
    """A failed variant is a result: its row in the table, and its error line printed as it
    happens, not only in results.md; no matplotlib warning of an empty plot. When every variant
    of the experiment failed, the input is to blame (here a --set no variant can train with;
    a --config that does not exist exited 0 too): status 2 and the first failure as the one
    error line, after the table is written."""
    bad = ("--set", "model.transformer.n_heads=3")  # the tiny d_model 64: refused at once
    out = tmp_path / "exp"
    monkeypatch.chdir(tmp_path)
    io = {"monkeypatch": monkeypatch, "capsys": capsys}
    proc = run_in_process("scores", "--variants", "dot", *SMOKE, *bad, "--out", str(out), **io)
    failed = "[scores] dot: failed (exit 2): error: model.transformer: d_model (64) must be"
    assert failed in proc.stdout, proc.stdout
    assert "| `dot` | failed (exit 2) |" in (out / "scores" / "results.md").read_text()
    assert proc.returncode == 2, proc.stderr[-2000:]
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(
        "error: scores: the training of every variant failed, the first with: failed (exit 2): "
        "error: model.transformer: d_model (64) must be"
    ), proc.stderr[-2000:]
    assert not recwarn.list, [str(w.message) for w in recwarn]  # in a process: on its stderr


def test_rows_of_other_settings_are_left_out_of_the_table_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--variants dot` with --steps 30 over a table of 20 steps kept the other row under a
    header of 30 steps, without a word."""
    experiment = EXPERIMENTS["scores"]
    first, second = (v.name for v in experiment.variants[:2])
    earlier = Settings(out=tmp_path / "exp", max_steps=20, config="tiny")
    path = tmp_path / "results.json"
    path.write_text(
        json.dumps(
            {
                "settings": {k: str(v) for k, v in asdict(earlier).items()},
                "variants": [{"name": first, "steps": 20}, {"name": second, "steps": 20}],
            }
        )
    )
    moved = replace(earlier, out=tmp_path / "moved")  # the same runs, another folder
    rows = runner._merged(path, [{"name": first, "steps": 20}], experiment, moved)
    assert [row["name"] for row in rows] == [first, second] and capsys.readouterr().out == ""
    longer = replace(earlier, max_steps=30)
    rows = runner._merged(path, [{"name": first, "steps": 30}], experiment, longer)
    assert rows == [{"name": first, "steps": 30}]
    assert capsys.readouterr().out == (
        f"[scores] left out of the table, run with other settings: {second} (run them again "
        "with these settings to compare)\n"
    )


REFUSED_KEY = "error: unrecognized arguments: --model.transformer.bogus=1"
DOT = Variant("dot", {"model.transformer.score": "dot"})


@pytest.mark.parametrize(
    ("overrides", "variant", "parsed"),
    [
        (["model.transformer.bogus=1"], DOT, 2),
        (["model.transformer.bogus=1"], Variant("scaled_dot"), 2),
        (["model.transformer.n_heads=3"], DOT, 0),  # parses: refused when the model is built
        (["model.transformer.n_heads=3"], Variant("scaled_dot"), 0),
        (["model.transformer.bogus=1"], DOT, 1),  # the parse crashed: not a refusal
    ],
    ids=["shared-refused", "no-overrides-of-its-own", "variant-refused", "refused-later", "crash"],
)
def test_a_refusal_of_the_shared_settings_is_an_error_before_the_next_variant(
    overrides: list[str],
    variant: Variant,
    parsed: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A variant refused before it trained (status 2, no run) is a result (its table row)
    unless minitx-train also refuses what all variants share (--config, --set) parsed alone:
    then every variant would be refused the same way, so the command ends at once, saying so,
    instead of starting each in turn. (minitx-train stands in here: the variant refused, and
    --print_config ending with `parsed`.)"""
    commands = []

    def fake_run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
        commands.append(command)  # parsing the shared settings alone
        stderr = REFUSED_KEY if parsed == 2 else "Traceback ...\n  File x\nKeyError: 1"
        return subprocess.CompletedProcess(command, parsed, "", stderr + "\n")

    def fake_training(command: list[str], log: IO[str]) -> int:
        trainings.append(command)
        log.write(REFUSED_KEY if parsed == 2 else "error: d_model (64) must be ...")
        return 2

    trainings: list[list[str]] = []
    monkeypatch.setattr(runner.subprocess, "run", fake_run)
    monkeypatch.setattr(runner, "run_training", fake_training)
    settings = Settings(out=tmp_path / "exp", config="tiny", overrides=overrides)
    family = settings.out / "runs" / "key"
    family.mkdir(parents=True)
    experiment = Experiment("scores", "", (variant,), (), True)
    if parsed == 2:
        with pytest.raises(ConfigError) as error:
            runner._train(settings, experiment, variant, family, "key")
        assert str(error.value) == (
            "minitx-train refused the settings every variant shares: unrecognized arguments: "
            "--model.transformer.bogus=1; fix --config or --set (nothing was trained with them)"
        )
        assert not family.exists()  # only the log of an attempt that trained nothing
    else:
        result = runner._train(settings, experiment, variant, family, "key")
        assert result["status"].startswith("failed (exit 2): ")
        assert (family / "train.log").is_file()
    assert trainings == [train_command(settings, variant, "key")]
    (shared,) = commands
    assert shared[-1] == "--print_config"
    # the shared settings alone, as each variant starts from them
    assert shared[:-1] == train_command(settings, Variant("shared"), "key")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nonsense"], "invalid choice: 'nonsense' (choose from 'scores', "),
        (["scores", "--variants", "rotary"], "'rotary' is no variant of scores"),
        (["scores", "--set", "trainer.max_epochs"], "KEY=VALUE"),
        (  # the scaled_dot row was trained with additive attention, under its own name
            ["scores", "--variants", "scaled_dot", "--set", "model.transformer.score=additive"],
            "--set model.transformer.score: the experiment scores varies it; leave it out",
        ),
        (  # the header said 5 steps, the rows had 3
            ["scores", "--steps", "5", "--set", "trainer.max_steps=3"],
            "--set trainer.max_steps: --steps sets it; leave it out of --set",
        ),
        (["scores", "--budget", "0"], "must be above 0"),
        (["scores", "--steps", "0"], "argument --steps: must be at least 1, got 0"),
        (["scores", "--val-every", "-2"], "argument --val-every: must be at least 1, got -2"),
        (["scores", "--budget", "1", "--steps", "9"], "--steps: not allowed with argument --bud"),
        (["scores", "--out", "{mine}"], "holds a README.md that minitx-experiment did not write"),
        (["hard", "--checkpoint", "missing.ckpt"], "checkpoint not found: missing.ckpt (pass"),
        (  # only hard and explain read a checkpoint: scores would have trained without it
            ["scores", "--checkpoint", "run.ckpt"],
            "--checkpoint is read by hard and explain only, not by scores; leave it out",
        ),
        (["hard", "--sentences", "5"], "--sentences is read by explain only, not by hard"),
        (  # explain read the checkpoint and ran, the 5 steps unused and unsaid
            ["explain", "--checkpoint", "run.ckpt", "--steps", "5"],
            "--steps sets how a model trains, and with --checkpoint nothing trains (explain "
            "reads the trained model); leave it out",
        ),
        (
            ["hard", "explain", "--checkpoint", "run.ckpt", "--set", "data.max_len=20"],
            "--set sets how a model trains, and with --checkpoint nothing trains (hard and "
            "explain read",
        ),
        (  # hard is named, but none of its variants is chosen: it is skipped
            ["hard", "scores", "--variants", "dot", "--checkpoint", "run.ckpt"],
            "not by scores; leave it out, or add hard or explain to the experiments and a vari",
        ),
        (["scores", "--out", __file__], f"--out {__file__} is a file; give a directory"),
        (  # /proc takes no new directory, even for root (the message was its errno's alone)
            ["scores", "--out", "/proc/minitx-experiment"],
            "cannot write the output directory /proc/minitx-experiment: ",
        ),
    ],
)
def test_command_errors_are_one_line(args, message, capsys, tmp_path: Path) -> None:
    from minitx.extras.experiments.command import main

    mine = tmp_path / "notes"  # a directory with a README of the user's: it was replaced
    mine.mkdir()
    (mine / "README.md").write_text("my own notes\n")
    try:
        status = main([arg.format(mine=mine) for arg in args])
    except SystemExit as exit_info:  # a flag the parser refuses ends there, as argparse does
        status = exit_info.code
    assert status == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert (mine / "README.md").read_text() == "my own notes\n"


def test_a_results_directory_is_rewritten_whole_and_never_takes_the_users_files(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """An experiment's directory is replaced whole at the end of each call (the figures of
    another set of variants go with it); one holding a file minitx did not write is refused
    before any work (and again before it is replaced), as every other command's output
    directory is, and nothing in it changes."""
    from minitx.extras.experiments.command import main
    from minitx.extras.experiments.report import check_results_dir, write_report

    directory = tmp_path / "exp" / "hard"

    def draw(names: list[str]) -> Callable[[Path, dict], list[Path]]:
        def figures(where: Path, summary: dict) -> list[Path]:
            for name in names:
                (where / name).write_bytes(b"png")
            return [where / name for name in names]

        return figures

    written = write_report(directory, {"run": 1}, render=str, draw=draw(["a.png", "b.png"]))
    assert [p.name for p in written] == ["results.json", "results.md", "a.png", "b.png"]
    assert all(p.parent == directory and p.is_file() for p in written)
    check_results_dir(directory)  # its own: rewritten without a word
    write_report(directory, {"run": 2}, render=str, draw=draw(["a.png"]))
    assert sorted(p.name for p in directory.iterdir()) == [
        ".minitx-output", "a.png", "results.json", "results.md"
    ]  # fmt: skip
    (directory / "mine.png").write_text("the user's")
    with pytest.raises(OutputError, match=r"holds files minitx did not write \(mine.png\)"):
        check_results_dir(directory)
    with pytest.raises(OutputError, match=r"\(mine.png\)"):  # so is a call from Python
        write_report(directory, {"run": 3}, render=str, draw=draw([]))
    assert (directory / "mine.png").read_text() == "the user's"
    # written before the folders were marked: taken when it holds only what an experiment
    # writes, with that experiment's results.json
    older = tmp_path / "exp" / "norm"
    older.mkdir()
    (older / "results.json").write_text(json.dumps({"experiment": "norm"}))
    (older / "results.md").write_text("| table |")
    (older / "bleu_over_time.png").write_bytes(b"png")
    check_results_dir(older)
    (older / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match=r"norm has no \.minitx-output file"):
        check_results_dir(older)
    (tmp_path / "exp" / "scores").mkdir()  # not written by minitx-experiment at all
    (tmp_path / "exp" / "scores" / "results.md").write_text("my notes")
    for name, why in (("hard", "holds files minitx did not write"), ("scores", "has no .minitx")):
        before = {p: p.read_bytes() for p in (tmp_path / "exp").rglob("*") if p.is_file()}
        status = main([name, "--out", str(tmp_path / "exp"), "--checkpoint", str(written[0])])
        err = capsys.readouterr().err
        assert status == 2 and err.startswith(f"error: --out {tmp_path / 'exp' / name} {why}")
        assert "so minitx-experiment does not replace it" in err and err.count("\n") == 1
        after = {p: p.read_bytes() for p in (tmp_path / "exp").rglob("*") if p.is_file()}
        assert after == before


def test_hard_decodes_a_hub_repo_id_downloaded_before_it_runs(
    tmp_path: Path,
    tiny_checkpoint: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """`--checkpoint owner/name` is a hub repo id, as in every command that reads a model: it
    was refused as "no such file or release directory". The download (a stand-in here: a
    release of the tiny model) comes before any experiment runs."""
    from minitx import release
    from minitx.extras.experiments.command import main

    local = tmp_path / "hub-cache" / "release"
    Translator.from_pretrained(tiny_checkpoint).save_pretrained(local)
    asked: list[str] = []

    def download(repo_id: str, *, revision: str | None = None) -> Path:
        asked.append(repo_id)
        return local

    monkeypatch.setattr(release, "download", download)
    out = tmp_path / "exp"
    status = main(
        ["hard", "--checkpoint", "you/minitx-tiny", "--variants", "soft", "--out", str(out)]
    )
    assert status == 0, capsys.readouterr().err[-2000:]
    assert asked == ["you/minitx-tiny"]
    summary = json.loads((out / "hard" / "results.json").read_text())
    assert summary["checkpoint"] == str(local)  # the commands in its table read that copy
    assert summary["variants"][0]["status"] == "ok"


def test_an_offline_hub_id_is_one_line_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Offline, a repo id ends at once, in one line that says how to go on: huggingface_hub's
    retries are quiet, as in the other commands (`hub_verbosity`)."""
    import logging

    from minitx import release
    from minitx.cli.common import HUB_RETRY_LOGGER
    from minitx.errors import CheckpointError
    from minitx.extras.experiments.command import main

    def offline(repo_id: str, *, revision: str | None = None) -> Path:
        for attempt in range(1, 4):  # as huggingface_hub logs its retries
            logging.getLogger(HUB_RETRY_LOGGER).warning(f"Retrying in 1s [Retry {attempt}/5].")
        raise CheckpointError(f"{repo_id!r}: the download failed; offline, pass a directory")

    monkeypatch.setattr(release, "download", offline)
    status = main(["explain", "--checkpoint", "you/minitx", "--out", str(tmp_path / "exp")])
    err = capsys.readouterr().err
    assert status == 2 and "Retry" not in err
    assert err.splitlines()[-1].startswith("error: 'you/minitx': the download failed")
    assert not (tmp_path / "exp" / "explain").exists()


def test_the_report_figures_leave_the_callers_matplotlib_backend(tmp_path: Path) -> None:
    """A notebook's backend stays as it was: the figures are matplotlib Figures of their own,
    not pyplot's (which would need the process-wide backend switched to Agg)."""
    import matplotlib

    from minitx.extras.experiments.report import figures

    variants = [{"name": "soft", "test_bleu_greedy": 1.5}, {"name": "hard", "test_bleu_greedy": 1}]
    summary = {"experiment": "hard", "budget": None, "variants": variants}
    backend = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        assert figures(tmp_path, summary) == [tmp_path / "hard_attention.png"]
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(backend)
    assert (tmp_path / "hard_attention.png").stat().st_size > 1000


def test_ctrl_c_says_that_the_interrupted_variant_starts_over(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Finished runs are reused, the one Ctrl-C cut short is trained from its start again: the
    line said only the first."""
    from minitx.extras.experiments import command

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "run", interrupted)
    assert command.main(["scores"]) == 130
    err = capsys.readouterr().err
    assert "(finished runs are reused, the interrupted one starts over)" in err, err


_STOPPING_CHILD = """
import os, pathlib, signal, sys, time
here = pathlib.Path(sys.argv[1])
def stop(signum, frame):
    time.sleep(1)  # as minitx-train finishes its update, saves last.ckpt and cleans up
    with open(here / "stopped", "a") as stopped:  # one line a signal
        stopped.write(signal.Signals(signum).name + "\\n")
    sys.exit(128 + signum)
signal.signal(signal.SIGINT, stop)
signal.signal(signal.SIGTERM, stop)
(here / "ready").write_text(str(os.getpid()))
time.sleep(120)
"""

_RUNNER = """
import sys
from minitx.extras.experiments.runner import run_training
with open("train.log", "w") as log:
    sys.exit(run_training([sys.executable, "-c", sys.argv[1], "."], log))
"""


def _start_runner(directory: Path, stdout: int) -> subprocess.Popen:
    """`_RUNNER` over `_STOPPING_CHILD` in `directory`, once its child is ready for a stop."""
    runner_process = subprocess.Popen(
        [sys.executable, "-c", _RUNNER, _STOPPING_CHILD],
        cwd=directory,
        env=subprocess_env(),
        stdout=stdout,
        text=True,
        start_new_session=True,  # a process group of its own, as a terminal's job
    )
    deadline = time.monotonic() + 60
    while not (directory / "ready").exists() or not (directory / "ready").read_text():
        assert runner_process.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    return runner_process


@pytest.mark.parametrize(
    ("stop", "to_group", "received", "said"),
    [
        (signal.SIGINT, True, "SIGINT", "Ctrl-C"),  # a terminal's Ctrl-C: the whole job
        (signal.SIGTERM, False, "SIGTERM", "SIGTERM"),  # `kill PID`: the runner alone
        (signal.SIGHUP, True, "SIGTERM", "SIGTERM"),  # the terminal closed
    ],
    ids=["ctrl-c", "sigterm-to-the-runner", "hang-up"],
)
def test_a_stop_reaches_the_variants_training_once_and_is_waited_for(
    stop: int, to_group: bool, received: str, said: str, tmp_path: Path
) -> None:
    """The runner passes each stop on to minitx-train (in a session of its own) and waits
    while it saves and cleans up. It was killed a quarter second after Ctrl-C
    (`subprocess.run`), leaving its temporary files behind; later, a SIGTERM to the runner
    alone left it training with no parent."""
    runner_process = _start_runner(tmp_path, subprocess.PIPE)
    if to_group:
        os.killpg(runner_process.pid, stop)
    else:
        os.kill(runner_process.pid, stop)
    out, _ = runner_process.communicate(timeout=60)
    assert runner_process.returncode == 128 + signal.Signals[received]
    stopped = tmp_path / "stopped"
    assert stopped.exists(), "the training process was killed, not let stop"
    assert stopped.read_text() == received + "\n"  # once: a second one would stop it at once
    assert f"{said}: minitx-train stops after its update" in out, out
    child = int((tmp_path / "ready").read_text())
    with pytest.raises(ProcessLookupError):  # gone, not left running
        os.kill(child, 0)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_killed_runner_stops_the_variants_training_too(tmp_path: Path) -> None:
    """A runner killed at once (SIGKILL, the OOM killer) cannot pass a stop on: its
    minitx-train, in a session of its own, trained on with no parent. The kernel now sends it
    a SIGTERM, so it saves and stops as for any SIGTERM."""
    runner_process = _start_runner(tmp_path, subprocess.DEVNULL)
    child = int((tmp_path / "ready").read_text())
    runner_process.kill()
    runner_process.wait(timeout=30)
    stopped = tmp_path / "stopped"
    deadline = time.monotonic() + 30
    while not stopped.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert stopped.exists() and stopped.read_text() == "SIGTERM\n"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)  # left running on a failure: not past the test
