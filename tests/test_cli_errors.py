"""What a command prints when it fails: one ``error:`` line, first, and nothing else.

- every command's parser reports a command-line mistake as one line, ``error: <message>
  (PROG --help shows the usage)``, exit status 2, without argparse's usage block;
- number options and settings refuse NaN and infinity (one line naming the option or key);
- minitx-train keeps Lightning's and datasets' messages quiet unless ``--verbose``: the first
  line of a failed run is its ``error:`` line.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import PYTHON, TINY_CONFIG, TOY_CORPUS_DIR, command_module, subprocess_env
from lightning.pytorch.callbacks import ModelSummary
from preloaded import run_python

from minitx.cli.common import (
    OneLineArgumentParser,
    finite_float,
    path_or_stream,
    positive_float,
    positive_int,
)
from minitx.cli.train import build_cli, set_verbosity
from minitx.cli.train import main as train_main
from minitx.translator import Translator

COMMANDS = ("translate", "evaluate", "visualize", "ct2", "export", "average", "demo", "experiment")
"""The argparse commands (minitx-train is a LightningCLI)."""

ONE_LINE = r"^error: .+  \(\S.* --help shows the usage\)$"


def command(name: str):
    """The module of `minitx-NAME` (minitx.cli.NAME, or an extra's command.py)."""
    return importlib.import_module(command_module(name))


def the_error_line(stderr: str) -> str:
    """The one line of a failed command's standard error (no usage block, no traceback)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: "), stderr
    return lines[0]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_reports_command_line_errors_on_one_line(name: str) -> None:
    parser = command(name).build_parser()
    assert isinstance(parser, OneLineArgumentParser)
    floats = [
        action.option_strings or action.dest
        for action in parser._actions
        if action.type is float  # a float option must refuse nan and inf
    ]
    assert not floats, f"minitx-{name}: use finite_float / positive_float for {floats}"


@pytest.mark.parametrize(
    ("name", "argv", "message"),
    [
        ("translate", ["--checkpoint", "x.ckpt", "--alpha", "nan"], "--alpha: 'nan'"),
        ("translate", ["--checkpoint", "x.ckpt", "--alpha=-inf"], "--alpha: '-inf'"),
        ("evaluate", ["--checkpoint", "c", "--sample", "--temperature", "inf"], "--temperature"),
        ("visualize", ["Ein Hund.", "--checkpoint", "x.ckpt", "--top-p", "NaN"], "--top-p"),
        ("experiment", ["scores", "--budget", "nan"], "--budget: 'nan'"),
    ],
    ids=["alpha-nan", "alpha-minus-inf", "temperature-inf", "top-p-nan", "budget-nan"],
)
def test_a_number_option_refuses_nan_and_infinity_on_one_line(
    name: str, argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        command(name).main(argv)
    assert exit_info.value.code == 2
    line = the_error_line(capsys.readouterr().err)
    assert message in line and "is not a finite number" in line
    assert re.match(ONE_LINE, line), line


@pytest.mark.parametrize(
    ("name", "argv", "message"),
    [
        ("translate", ["--checkpoint", "x.ckpt", "--beam", "0"], "--beam must be >= 1, got 0"),
        (  # the length penalty's OverflowError, after the model had loaded
            "translate",
            ["--checkpoint", "x.ckpt", "--alpha", "1000"],
            "--alpha must lie in [0, 10.0], got 1000.0",
        ),
        (  # a penalty that shrinks with length: an empty translation, exit status 0
            "translate",
            ["--checkpoint", "x.ckpt", "--alpha=-5"],
            "--alpha must lie in [0, 10.0], got -5.0",
        ),
        (  # argparse kept the last: b.de alone was translated, a.de dropped without a word
            "translate",
            ["--checkpoint", "x.ckpt", "--input", "a.de", "--input", "b.de"],
            "--input is given twice: give it once",
        ),
        (
            "translate",
            ["--checkpoint", "x.ckpt", "--output", "a.en", "--output", "-", "x"],
            "--output is given twice: give it once",
        ),
        (  # a Path drops the ./: it was tried as the hub repo owner/name, with the hub's text
            "translate",
            ["--checkpoint", "./owner/name", "x"],
            "checkpoint not found: ./owner/name",
        ),
        (  # as a Path the / was lost: a file out.en was written
            "translate",
            ["--checkpoint", "x.ckpt", "--output", "out.en/", "x"],
            "--output: out.en/ ends with /: give a file name",
        ),
        (  # a file named out was written, and "hypotheses written to out"
            "evaluate",
            ["--checkpoint", "x.ckpt", "--hyp-out", "out/"],
            "--hyp-out: out/ ends with /: give a file name",
        ),
        (  # a traceback after the model had loaded (the check ran outside argparse)
            "evaluate",
            ["--checkpoint", "x.ckpt", "--json", "scores/"],
            "--json: scores/ ends with /: give a file name",
        ),
        ("average", ["a.ckpt", "b.ckpt", "--out", "avg/"], "--out: avg/ ends with /: give a"),
        ("evaluate", ["--checkpoint", "x.ckpt", "--limit", "0"], "--limit: must be at least 1"),
        (  # it fell back to the checkpoint's language without a word
            "evaluate",
            ["--checkpoint", "x.ckpt", "--src-lang", ""],
            "--src-lang is empty; give a language code such as de, or leave it out",
        ),
        (  # it named neither the flags nor what to give
            "evaluate",
            ["--checkpoint", "x.ckpt", "--src-lang", "de", "--tgt-lang", "de"],
            "give two different languages",
        ),
        (  # "unrecognized arguments: Hund rennt." alone
            "visualize",
            ["--checkpoint", "x.ckpt", "Ein", "Hund", "rennt."],
            "unrecognized arguments: Hund rennt.; give one SENTENCE: quote it if it has spaces",
        ),
        (  # matplotlib's fonts failed below 6 dpi, in a traceback
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--dpi", "5"],
            "--dpi must be a number from 20 to 600, got 5",
        ),
        (
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--dpi", "20000"],
            "--dpi must be a number from 20 to 600, got 20000",
        ),
        (  # numpy's MemoryError (75 GiB for the nodes), after the translation
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--attributions", "ig", "--ig-steps", "100000"],
            "--ig-steps must be at most 1000, got 100000",
        ),
        (  # it was ignored without a word
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--ig-steps", "8"],
            "--ig-steps sets integrated gradients: add --attributions ig (or all)",
        ),
        (
            "visualize",
            [
                "Ein Hund.",
                "--checkpoint",
                "x.ckpt",
                "--attributions",
                "saliency",
                "--ig-steps",
                "8",
            ],
            "--ig-steps sets integrated gradients",
        ),
        (  # the second ig was dropped without a word, where --kinds refuses a repeat
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--attributions", "ig,ig"],
            "--attributions ig ig: ig given more than once; give each method once",
        ),
        (  # "unknown attribution method(s) ['all']", whose choices did not name all
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--attributions", "all,ig"],
            "--attributions all,ig: give all alone, or some methods",
        ),
        (
            "visualize",
            ["Ein Hund.", "--checkpoint", "x.ckpt", "--attributions", "ALL"],
            "unknown attribution method(s) ['ALL']; choose from saliency, ixg, ig, or all",
        ),
        ("demo", ["--checkpoint", "x.ckpt", "--port", "0"], "--port must be between"),
        ("experiment", ["scores", "--budget", "0"], "--budget: must be above 0"),
        ("average", ["a.ckpt"], "the following arguments are required: --out"),
        ("export", ["--checkpoint", "x.ckpt"], "required: --out"),
        ("ct2", ["--out", "d"], "required: --checkpoint"),
        ("translate", ["--checkpoint", "x.ckpt", "--beam", "two"], "invalid int value: 'two'"),
        (  # argparse reads -1e-3 as a flag, and said only "expected one argument"
            "translate",
            ["--checkpoint", "x.ckpt", "--alpha", "-1e-3"],
            "argument --alpha: expected one argument; give it one (a value starting with '-' "
            "reads as a flag: --alpha=VALUE)",
        ),
    ],
    ids=[
        "beam",
        "alpha",
        "alpha-negative",
        "input-twice",
        "output-twice",
        "explicit-path",
        "output-directory",
        "hyp-out-directory",
        "json-directory",
        "average-out-directory",
        "limit",
        "empty-language",
        "same-language",
        "unquoted-sentence",
        "dpi",
        "huge-dpi",
        "ig-steps-huge",
        "ig-steps-alone",
        "ig-steps-without-ig",
        "attributions-twice",
        "attributions-all-and-more",
        "attributions-unknown",
        "port",
        "budget",
        "average",
        "export",
        "ct2",
        "not-a-number",
        "negative-value",
    ],
)
def test_a_command_line_mistake_is_one_error_line_without_the_usage_block(
    name: str, argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        command(name).main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    line = the_error_line(err)
    assert message in line, line
    assert "usage:" not in err


@pytest.mark.parametrize(
    ("name", "argv", "flag"),
    [
        ("translate", ["--checkpoint", "x.ckpt", "--output", ""], "--output"),
        ("translate", ["--checkpoint", "x.ckpt", "--input", " "], "--input"),
        ("evaluate", ["--checkpoint", "x.ckpt", "--hyp-out", ""], "--hyp-out"),
        ("evaluate", ["--checkpoint", "x.ckpt", "--json", ""], "--json"),
        ("visualize", ["Ein Hund.", "--checkpoint", "x.ckpt", "--out-dir", ""], "--out-dir"),
        ("export", ["--checkpoint", "x.ckpt", "--out", ""], "--out"),
        ("ct2", ["--checkpoint", "x.ckpt", "--out", ""], "--out"),
        ("average", ["a.ckpt", "b.ckpt", "--out", ""], "--out"),
        ("experiment", ["scores", "--out", ""], "--out"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_an_empty_file_or_directory_option_is_refused_not_read_as_here(
    name: str, argv: list[str], flag: str, capsys: pytest.CaptureFixture
) -> None:
    """An empty value (a shell variable unset) was `Path("")`, the current directory: the
    errors then said "--out . is the current directory", or evaluate wrote into it."""
    with pytest.raises(SystemExit) as exit_info:
        command(name).main(argv)
    assert exit_info.value.code == 2
    line = the_error_line(capsys.readouterr().err)
    assert flag in line and "is empty; give a file" in line and " . " not in line, line


@pytest.mark.parametrize("errors", ["strict", "surrogateescape"], ids=["ascii", "c-locale"])
def test_a_character_standard_output_cannot_encode_is_escaped_with_one_warning(
    errors: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Was: a UnicodeEncodeError traceback, status 1 (a training after its first validation,
    printing a German example to an ASCII standard output). Under ``LC_ALL=C`` Python's
    standard output is ASCII with ``surrogateescape``, which was left as it was: the traceback
    came after the lines before it. A byte read undecoded there still goes out as it came."""
    from minitx.cli.common import escape_what_stdout_cannot_encode

    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="ascii", errors=errors)
    monkeypatch.setattr(sys, "stdout", stdout)
    escape_what_stdout_cannot_encode()
    print("zwei männer")
    print("über die straße")
    if errors == "surrogateescape":
        print("caf\udce9")
    sys.stdout.flush()
    expected = b"zwei m\\xe4nner\n\\xfcber die stra\\xdfe\n"
    assert raw.getvalue() == expected + (b"caf\xe9\n" if errors == "surrogateescape" else b"")
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("warning: standard output's encoding (ascii) cannot write 'ä'")


@pytest.mark.parametrize(
    "locale",
    [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONUTF8": "0"}],
    ids=["ascii", "c-locale"],
)
def test_visualize_prints_a_sentence_an_ascii_standard_output_cannot_hold(
    locale: dict[str, str], tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The command echoes its sentence: any non-ASCII one ended in a traceback, status 1,
    after the files were written (under ``LC_ALL=C`` too, as errors.md has it)."""
    out = tmp_path / "maps"
    command = [PYTHON, "-m", command_module("visualize"), "--checkpoint", str(tiny_checkpoint)]
    env = {k: v for k, v in subprocess_env().items() if not k.startswith(("LC_", "LANG"))}
    env.pop("PYTHONIOENCODING", None)
    proc = subprocess.run(
        [*command, "--beam", "1", "--out-dir", str(out), "zwei männer"],
        capture_output=True,
        env=env | locale,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert b"source:      zwei m\\xe4nner\n" in proc.stdout
    assert b"cannot write '\\xe4'" in proc.stderr and (out / "attention.html").is_file()


def test_debug_mode_keeps_argparse_usage_block(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("MINITX_DEBUG", "1")
    with pytest.raises(SystemExit):
        command("translate").main(["--checkpoint", "x.ckpt", "--beam", "0"])
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "NaN", "abc"])
def test_finite_float_refuses_what_is_not_a_finite_number(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        finite_float(text)
    assert finite_float("0.5") == 0.5 and finite_float("-2") == -2.0
    with pytest.raises(argparse.ArgumentTypeError, match="above 0"):
        positive_float("0")


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["--model.optim.lr=.nan"], "model.optim.lr=nan"),
        (["--model.optim.lr", "nan"], "model.optim.lr=nan"),  # jsonargparse refuses the text
        (["--model.optim.lr", "NaN"], "model.optim.lr=NaN"),
        (["--model.optim.lr=1e999"], "model.optim.lr=inf"),
        (["--model.optim.betas=[0.9, .inf]"], "model.optim.betas[1]=inf"),
        (["--model.validation.decoding.alpha=.nan"], "model.validation.decoding.alpha=nan"),
        (["--trainer.gradient_clip_val=.nan"], "trainer.gradient_clip_val=nan"),
        (["--config", "{nan_yaml}"], "model.optim.weight_decay=nan"),
    ],
    ids=[
        "lr-nan",
        "lr-nan-text",
        "lr-NaN-text",
        "lr-overflow",
        "betas-inf",
        "alpha-nan",
        "clip-nan",
        "yaml-nan",
    ],  # fmt: skip
)
def test_training_refuses_a_nan_or_infinite_setting_before_anything_runs(
    args: list[str],
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    nan_yaml = tmp_path / "nan.yaml"
    nan_yaml.write_text("model:\n  optim:\n    weight_decay: .nan\n", encoding="utf-8")
    args = [arg.format(nan_yaml=nan_yaml) for arg in args]
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), "--trainer.max_epochs", "1", *args])
    assert exit_info.value.code == 2
    line = the_error_line(capsys.readouterr().err)
    assert f"error: {key}: not a finite number" in line, line
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").rglob("*.ckpt"))


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("run_name: null", "run_name=null: give text"),
        ("runs_dir: ~", "runs_dir=null: give text"),
        ("data:\n  source: null", "data.source=null: give text"),
        ("data:\n  src_lang: null", "data.src_lang=null: give text"),
        ("model:\n  transformer:\n    d_model: null", "d_model=null: give a whole number"),
        # a null inside a mapping: jsonargparse's dump of each subtype and its error
        (
            "data:\n  splits: {train: train, validation: null}",
            "data.splits={'train': 'train', 'validation': None}: give a mapping {name: text, "
            "...} or null",
        ),
    ],
    ids=["run-name", "runs-dir", "source", "src-lang", "d-model", "splits"],
)
@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_a_null_for_a_setting_that_takes_none_is_one_error_line(
    yaml_text: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """A config file's null where text or a number belongs was a TypeError or AttributeError
    deep inside (os.path.normpath(None), None.startswith)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    (tmp_path / "null.yaml").write_text(yaml_text + "\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), "--config", "null.yaml"])
    assert exit_info.value.code == 2
    line = the_error_line(capsys.readouterr().err)
    assert line.startswith("error: ") and message in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_time", "bad"], "trainer.max_time='bad': not a duration; give DD:HH:MM:SS"),
        (["--trainer.max_time", "00:20:00"], "trainer.max_time='00:20:00': not a duration"),
        (["--trainer.max_time", "0:0:20:0"], "trainer.max_time='0:0:20:0': not a duration"),
        (["--trainer.max_time", "1000000000:00:00:00"], "max_time='1000000000:00:00:00': not a"),
        (["--trainer.max_time", "00:00:00:00"], "the budget must be longer than zero"),
        (["--seed_everything", "-1"], "seed_everything=-1: a seed lies in 0..4294967295"),
        (["--seed_everything", str(2**32)], f"seed_everything={2**32}: a seed lies in"),
        (["--model.optim.lr", "inf"], "model.optim.lr=inf: not a finite number"),  # "give a number"
        (
            ["--model.optim.lr", "-1e-3"],
            "argument --model.optim.lr: expected one argument; give it one (a value starting "
            "with '-' reads as a flag: --model.optim.lr=VALUE)",
        ),
        (  # it trained the whole run, then failed before the test
            ["--data.splits", "{train: train, validation: val}"],
            "has no 'test', which --test true (the default) scores after fitting",
        ),
        (  # said only after the corpus was read, the tokenizer trained, each split tokenized
            ["--data.splits", "{train: train, valid: val, test: test_2016_flickr}"],
            "has no 'validation'; unknown keys ['valid']; map train, validation and test",
        ),
        (  # a traceback at the fit's start
            ["--attention_maps.kinds", "[]"],
            "attention_maps.kinds: no attention kinds selected; expected a subset of",
        ),
        pytest.param(  # refused at the module's setup, after the tokenizer was trained
            ["--data.tgt_lang", "ja"],
            "BLEU of 'ja' text splits its words with MeCab: pip install 'sacrebleu[ja]'",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("MeCab") is not None, reason="MeCab is installed"
            ),
        ),
        (  # jsonargparse's "Expected a <class 'tuple'>. Got value: cross"
            ["--attention_maps.kinds", "cross"],
            "attention_maps.kinds=cross: give a list in brackets, as in --attention_maps.kinds "
            "'[cross, ...]'",
        ),
        (  # accepted: the logged entropy of cross-attention was twice its value
            ["--attention_maps.kinds", "[cross, cross]"],
            "attention_maps.kinds: cross given more than once; name each kind once",
        ),
        (  # a traceback: the run does not pickle into spawned processes
            ["--trainer.strategy", "ddp_spawn"],
            "trainer.strategy=ddp_spawn: minitx-train starts its processes with",
        ),
        (  # stopped at the first batch padded to 56 positions
            ["--model.transformer.max_positions", "52", "--data.max_len", "52"],
            "max_positions (52) is not a multiple of data.pad_multiple (8): a sentence of 52",
        ),
        (  # the average silently replaced the run's last.ckpt (a resume went on from it)
            ["--averaging.last_n", "2", "--averaging.filename", "last.ckpt"],
            "averaging.filename 'last.ckpt' names a checkpoint the run saves",
        ),
        (  # ... or its best checkpoint, still reported as the best
            ["--averaging.last_n", "2", "--averaging.filename", "epoch01-bleu1.41.ckpt"],
            "averaging.filename 'epoch01-bleu1.41.ckpt' names a checkpoint the run saves",
        ),
    ],
    ids=[
        "max-time-word",
        "max-time-three-parts",
        "max-time-one-digit",
        "max-time-too-long",
        "max-time-zero",
        "seed-negative",
        "seed-big",
        "lr-inf",
        "lr-negative-exponent",
        "no-test-split",
        "misnamed-validation-split",
        "no-attention-kinds",
        "japanese-without-mecab",
        "attention-kinds-without-brackets",
        "attention-kind-twice",
        "ddp-spawn",
        "padding-past-max-positions",
        "average-over-last",
        "average-over-best",
    ],
)
def test_training_refuses_a_malformed_budget_or_seed_in_one_line(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), "--trainer.max_epochs", "1", *args])
    assert exit_info.value.code == 2
    line = the_error_line(capsys.readouterr().err)
    assert line.startswith("error: ") and message in line, line
    assert not list(tmp_path.glob("runs/*/*"))  # refused before a run directory is made


@pytest.mark.parametrize("form", ["--config", "-c", "--config="])
def test_a_flag_before_a_config_that_sets_its_key_again_is_refused(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Was: the file, read after the flag, won: `--trainer.accelerator gpu --config tiny`
    trained on the CPU, and `--model.optim.lr 0.1 --config long` at long's rate, unsaid."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    config = [f"--config={TINY_CONFIG}"] if form == "--config=" else [form, str(TINY_CONFIG)]
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--model.optim.lr=0.1", *config])
    assert exit_info.value.code == 2
    line = the_error_line(capsys.readouterr().err)
    flag = "--config" if form == "--config=" else form
    assert line == (  # a packaged config by the name it is given
        f"error: --model.optim.lr comes before {flag} tiny, which sets model.optim.lr again and "
        f"wins (the command line is read in order); put --model.optim.lr after {flag} tiny"
    )
    # a key the file leaves alone may come first, and so may a section's value (jsonargparse
    # merges the file's keys into it); the same flag after the file wins
    first = ["--data.max_len", "50", "--attention_maps", "{kinds: [cross]}"]
    with pytest.raises(SystemExit) as exit_info:
        train_main([*first, *config, "--model.optim.lr", "0.1", "--print_config"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert (printed["data"]["max_len"], printed["model"]["optim"]["lr"]) == (50, 0.1)
    assert printed["attention_maps"]["kinds"] == ["cross"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--trainer.max_time", "bad"], "trainer.max_time='bad': not a duration"),
        (["--seed_everything", "-1"], "seed_everything=-1: a seed lies in 0..4294967295"),
        (["--model.optim.lr", ".nan"], "model.optim.lr=nan: not a finite number"),
        (
            ["--averaging.last_n", "2", "--averaging.filename", "last.ckpt"],
            "averaging.filename 'last.ckpt' names a checkpoint the run saves",
        ),
        (["--run_name", ""], "--run_name is empty; give a directory name"),
        (["--run_name", "../../escape"], "--run_name ../../escape: give a name inside runs_dir"),
    ],
)
@pytest.mark.parametrize("flag", ["--print_config", "--print_config=skip_default"])
def test_print_config_refuses_what_a_run_refuses(
    flag: str,
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Was: --print_config printed these (`lr: .nan`, `max_time: bad`), exit 0, as the values
    a run would use; the run then refused them."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), flag, *args])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    line = the_error_line(captured.err)
    assert line.startswith("error: ") and message in line, line


def train_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """`minitx-train ...` (`python -m minitx.cli.train`) as a user runs it, standard error
    captured (a pipe)."""
    env = subprocess_env()
    env.pop("MINITX_DEBUG", None)
    cmd = [sys.executable, "-m", "minitx.cli.train", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_failed_training_shows_its_error_line_first(tmp_path: Path) -> None:
    """No 'Seed set to 0', 'GPU available', 'TPU available' or litlogger tip before it: the
    default recipe's run on a missing corpus prints its error line and nothing else."""
    proc = train_process(["--data.source", str(tmp_path / "nonexistent")], tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert "nonexistent" in lines[0]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert not proc.stdout.strip(), proc.stdout[-3000:]


def test_verbose_brings_the_library_messages_back(tmp_path: Path) -> None:
    args = ["--data.source", str(tmp_path / "nonexistent"), "--verbose"]
    proc = train_process(args, tmp_path)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Seed set to 0" in proc.stderr and "GPU available" in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error: ")]


OFFLINE_HUB = """
import logging, sys
import datasets

def offline(*args, **kwargs):  # what datasets does without a network: retries, then fails
    for n in range(1, 6):
        logging.getLogger("huggingface_hub.utils._http").warning(f"Retrying in 0s [Retry {n}/5].")
    raise ConnectionError("Couldn't reach the hub")

datasets.load_dataset = offline
from minitx.cli.NAME import ENTRY
sys.exit(ENTRY())  # the console script's entry point, reading sys.argv
"""


@pytest.mark.parametrize("name", ["train", "evaluate"])
def test_an_unreachable_hub_dataset_is_one_error_line_without_the_retries(
    name: str, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """Offline, huggingface_hub logs each retry of a hub download; they stay quiet (``-v``
    shows them) but for one line of minitx's at the first, which says why nothing happens for
    a while, and the error line, which says how to use local files, comes last."""
    data = {"train": ["--config", str(TINY_CONFIG), "--data.source"], "evaluate": ["--data"]}
    argv = [*data[name], "minitx-tests/offline"]
    if name == "evaluate":
        argv = ["--checkpoint", str(tiny_checkpoint), "--beam", "1", *argv]
    entry = {"train": "run", "evaluate": "main"}[name]
    script = OFFLINE_HUB.replace("NAME", name).replace("ENTRY", entry)
    cmd = [sys.executable, "-c", script, *argv]
    env = subprocess_env()
    for variable in ("MINITX_DEBUG", "HF_HUB_VERBOSITY", "MINITX_DATA_DIR"):  # the last: local
        env.pop(variable, None)  # files instead of any hub id
    proc = run_python(cmd, cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "Retry" in line or "error:" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "minitx-tests/offline" in errors[0] and "MINITX_DATA_DIR" in errors[0]
    assert proc.stderr.rstrip().endswith(errors[0])
    notices = [line for line in proc.stderr.splitlines() if "hub does not answer" in line]
    assert len(notices) == 1 and "-v shows each try" in notices[0], proc.stderr[-3000:]
    if name == "train":
        proc = run_python([*cmd, "-v"], cwd=tmp_path, env=env)
        assert "Retrying in 0s [Retry 5/5]." in proc.stderr, proc.stderr[-3000:]


@pytest.mark.parametrize("verbose", [False, True])
def test_the_model_summary_comes_with_verbose_only(
    verbose: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's layer table (its FLOPs column 0: minitx gives no example input) is
    Lightning's chatter; an explicit `trainer.enable_model_summary` still decides."""
    monkeypatch.chdir(tmp_path)
    args = ["--trainer.logger", "false"] + (["-v"] if verbose else [])
    try:
        cli = build_cli(args)
        assert any(isinstance(cb, ModelSummary) for cb in cli.trainer.callbacks) == verbose
        cli = build_cli([*args, "--trainer.enable_model_summary", "true"])
        assert any(isinstance(cb, ModelSummary) for cb in cli.trainer.callbacks)
    finally:
        set_verbosity(False)  # the libraries quiet again for the tests that follow


# ------------------------------------------------------------------ devices and standard output
INFERENCE = ("translate", "evaluate", "visualize", "demo")
"""The commands that load a model onto ``--device``."""


def inference_argv(name: str, checkpoint: Path) -> list[str]:
    """A command line of `name` that runs (demo: up to its server) on the tiny checkpoint."""
    return {
        "translate": ["--checkpoint", str(checkpoint), "ein hund"],
        "evaluate": [
            "--checkpoint",
            str(checkpoint),
            "--data",
            str(TOY_CORPUS_DIR),
            "--limit",
            "1",
        ],
        "visualize": ["ein hund", "--checkpoint", str(checkpoint), "--no-html", "--kinds", "cross"],
        "demo": ["--checkpoint", str(checkpoint)],
    }[name]


@pytest.mark.parametrize("name", INFERENCE)
@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("meta", "--device 'meta': minitx runs on cpu, cuda, mps"),
        ("cuda", "--device 'cuda': CUDA is not available on this machine"),
        ("cuda:1", "--device 'cuda:1': CUDA is not available"),
        # not torch's list of its internal device types (ipu, xpu, mkldnn, ...)
        ("tpu", "--device 'tpu': not a device torch knows; minitx runs on cpu, cuda, mps (e.g"),
        ("", "--device '': not a device torch knows; minitx runs on cpu, cuda, mps (e.g"),
    ],
)
def test_a_device_minitx_cannot_use_is_one_error_line(
    name: str,
    device: str,
    message: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # also on a GPU machine
    try:  # refused while the options are checked (argparse's exit), before any loading
        status = command(name).main([*inference_argv(name, tiny_checkpoint), "--device", device])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    line = the_error_line(capsys.readouterr().err)
    assert line.startswith(f"error: {message}"), line


class _Unwritable(io.StringIO):
    """A standard output that fails every write with `error`."""

    def __init__(self, error: OSError) -> None:
        super().__init__()
        self.error = error

    def write(self, text: str) -> int:
        raise self.error


@pytest.mark.parametrize("name", ["translate", "evaluate"])
def test_a_full_disk_under_standard_output_is_one_error_line(
    name: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    full = _Unwritable(OSError(errno.ENOSPC, "No space left on device"))
    monkeypatch.setattr(sys, "stdout", full)
    assert command(name).main(inference_argv(name, tiny_checkpoint)) == 2
    err = capsys.readouterr().err  # evaluate's progress lines come before
    line = err.splitlines()[-1]
    assert "Traceback" not in err and err.count("error:") == 1, err
    assert line.startswith("error: cannot write the output (standard output"), err
    assert "No space left" in line


@pytest.mark.parametrize("name", ["translate", "evaluate"])
def test_a_reader_that_has_gone_ends_the_command_quietly(
    name: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """``... | head -0``: no message, exit status 141, as a shell reports a SIGPIPE death."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdout", _Unwritable(BrokenPipeError(errno.EPIPE, "Broken pipe")))
    assert command(name).main(inference_argv(name, tiny_checkpoint)) == 141
    assert "error" not in capsys.readouterr().err.lower()


def test_full_disk_and_closed_pipe_as_a_shell_runs_them(tiny_checkpoint: Path) -> None:
    """The real thing, exit-time flush included: `> /dev/full` and `| head -c 0`."""
    env = subprocess_env()
    env.pop("MINITX_DEBUG", None)
    argv = [sys.executable, "-m", "minitx.cli.translate", "--checkpoint", str(tiny_checkpoint)]
    if Path("/dev/full").exists():
        with open("/dev/full", "w") as full:
            proc = subprocess.run(
                [*argv, "ein hund"], stdout=full, stderr=subprocess.PIPE, text=True, env=env
            )
        assert proc.returncode == 2, proc.stderr
        assert the_error_line(proc.stderr).startswith("error: cannot write the output")
    reader, writer = os.pipe()
    os.close(reader)  # the reader has gone before the first line
    proc = subprocess.run(
        argv, input="ein hund\n" * 200, stdout=writer, stderr=subprocess.PIPE, text=True, env=env
    )
    os.close(writer)
    assert proc.returncode == 141, proc.stderr
    assert "Traceback" not in proc.stderr and "error" not in proc.stderr.lower(), proc.stderr


@pytest.mark.parametrize(
    ("name", "flags", "message"),
    [
        ("evaluate", ["--beam", "5", "1", "5"], "--beam 5 1 5: 5 given more than once"),
        ("export", ["--private"], "--private applies only with --push-to-hub"),
        ("visualize", ["--kinds", "cross", "encoder", "cross"], "--kinds cross encoder cross: "),
    ],
    ids=["a-beam-twice", "private-without-a-repo", "a-kind-twice"],
)
def test_a_flag_that_would_be_dropped_without_a_word_is_refused(
    name: str,
    flags: list[str],
    message: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    """Was: evaluate decoded beam 5 once and wrote two results for three beams; export made a
    release and no repo, private or not; visualize drew the cross-attention maps twice. All
    exited 0."""
    with pytest.raises(SystemExit) as exit_info:
        command(name).main([*base_argv(name, tiny_checkpoint, tmp_path), *flags])
    assert exit_info.value.code == 2
    assert the_error_line(capsys.readouterr().err).startswith(f"error: {message}")
    assert not (tmp_path / "release").exists()


def test_visualize_a_sentence_of_invisible_characters_is_one_error_line(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Was a ValueError's traceback, exit status 1: the sentence passed the emptiness check
    (str.strip keeps zero-width characters) and the tokenizer made no piece of it."""
    out = tmp_path / "maps"
    argv = ["\u200b\ufeff", "--checkpoint", str(tiny_checkpoint), "--out-dir", str(out)]
    assert command("visualize").main(argv) == 2
    error = the_error_line(capsys.readouterr().err)
    assert error.startswith("error: attention maps need a non-empty source sentence: this one")
    assert not list(out.glob("*.png")) and not list(out.glob("*.html"))


# ------------------------------------------------------------------ every flag, bad values
RUNS_FOR_REAL = ("translate", "evaluate", "average")
"""Commands run to the end on the tiny checkpoint with each bad value; the others (a server, a
hub upload, training runs, CTranslate2) stop where their work would start: `run` is replaced
by a stand-in that loads the model on ``--device`` when they have one."""


def bad_values(action: argparse.Action, real: bool) -> list[str]:
    """Values of the wrong type, out of range and malformed for one option (from its
    argparse action, so that a new option is covered without a change here)."""
    if action.nargs == 0:  # a flag: a value is malformed
        return ["=1"]
    if action.choices is not None:
        return ["no-such-choice", ""]
    kind = action.type
    if kind in (int, positive_int):
        return ["two", "1.5", "-1", "0", *([] if real else ["1000000000000"])]
    if kind in (finite_float, positive_float):
        return ["x", "nan", "-1e30", "0", *([] if real else ["1e30"])]
    if kind in (Path, path_or_stream):
        return ["", "/nonexistent/dir/file", "."]
    return ["", "-1", "no such thing"]  # text, or a type of the command's own


def flag_cases() -> list[tuple[str, str, str]]:
    cases = []
    for name in COMMANDS:
        for action in command(name).build_parser()._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            flag = action.option_strings[-1]
            for value in bad_values(action, name in RUNS_FOR_REAL):
                cases.append((name, flag, value))
    return cases


def base_argv(name: str, checkpoint: Path, tmp_path: Path) -> list[str]:
    if name in INFERENCE:
        return inference_argv(name, checkpoint)
    return {
        "average": [str(checkpoint), str(checkpoint), "--out", str(tmp_path / "avg.ckpt")],
        "export": ["--checkpoint", str(checkpoint), "--out", str(tmp_path / "release")],
        "ct2": ["--checkpoint", str(checkpoint), "--out", str(tmp_path / "ct2")],
        "experiment": ["scores"],
    }[name]


@pytest.mark.parametrize(
    ("name", "flag", "value"), flag_cases(), ids=lambda v: repr(v)[1:-1] or "empty"
)
def test_every_flag_of_every_inference_command_refuses_bad_values_in_one_line(
    name: str,
    flag: str,
    value: str,
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Each bad value ends in one ``error:`` line and status 2, or is used (status 0); never
    a traceback (an exception escaping `main` fails the test)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO("ein hund\n"))
    module = command(name)
    if name not in RUNS_FOR_REAL:

        def stand_in(args: argparse.Namespace) -> int:
            if getattr(args, "device", None) is not None:
                Translator.from_pretrained(args.checkpoint, device=args.device)
            return 0

        monkeypatch.setattr(module, "run", stand_in)
    argv = base_argv(name, tiny_checkpoint, tmp_path)
    argv += [f"{flag}{value}"] if value.startswith("=") else [flag, value]
    try:
        status = module.main(argv)
    except SystemExit as exc:
        status = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert status in (0, 2), (status, err)
    if status == 2:
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err


def _train_settings() -> list[tuple[str, object]]:
    """minitx's own training settings (model.*, data.*, attention_maps.*, averaging.*) with the
    tiny config's values."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = build_cli(["--config", str(TINY_CONFIG)])
    own = ("model.", "data.", "attention_maps.", "averaging.")
    return [(k, v) for k, v in cli.config.items() if k.startswith(own)]


def _bad_values(value: object) -> list[str]:
    """A value of the wrong type, and one out of range, for a setting whose value is `value`
    (huge sizes are left out: a model of 10^12 dimensions is tried for real, not parsed)."""
    if isinstance(value, bool):
        return ["maybe"]
    if isinstance(value, (int, float)):
        return ["abc", "-7"]
    if isinstance(value, str) or value is None:
        return ["no-such-name"] if isinstance(value, str) else ["[[1"]
    return ["abc"]  # a tuple (betas) or another structure


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_every_training_setting_refuses_bad_values_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Each of minitx's training settings (model.*, data.*, attention_maps.*, averaging.*)
    with a value of the wrong type or out of range ends in one ``error:`` line and status 2,
    or is accepted (the run is built, not fitted); never a traceback. Lightning's own
    trainer.* settings are its to check."""
    import minitx.cli.train as train

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    monkeypatch.setattr(train, "_train_and_test", train.build_cli)  # build the run, no fit
    # Built here, not at import: every test session would otherwise build a training CLI.
    cases = [(key, bad) for key, value in _train_settings() for bad in _bad_values(value)]
    failures = []
    for key, bad in cases:
        try:
            status = train_main(["--config", str(TINY_CONFIG), f"--{key}", bad])
            status = 0 if status is not None else status
        except SystemExit as exc:
            status = exc.code
        except Exception as exc:  # an escaping exception: what a user sees as a traceback
            failures.append(f"--{key} {bad}: {type(exc).__name__}: {exc}")
            continue
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        if "Traceback" in err or status not in (0, 2) or (status == 2 and len(errors) != 1):
            failures.append(f"--{key} {bad}: status {status}: {err[-300:]}")
    assert not failures, "\n".join(failures)
    assert len(cases) > 90  # the settings were found (59 in the tiny config)


@pytest.mark.parametrize(
    "name", ["translate", "evaluate", "visualize", "export", "ct2", "demo", "experiment"]
)
def test_an_empty_checkpoint_is_named_as_such(name: str, capsys: pytest.CaptureFixture) -> None:
    """``--checkpoint "$RUN"`` with RUN unset: Path("") is ".", which read as a damaged release
    (or, in minitx-visualize, as an input inside --out-dir)."""
    from minitx.cli import launch

    module = importlib.import_module(launch.COMMANDS[name][0])
    with pytest.raises(SystemExit) as exit_info:
        module.build_parser().parse_args(["--checkpoint", "", "hard"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: argument --checkpoint: is empty; give a .ckpt file"), err


def test_every_console_script_starts_through_the_guarded_launcher() -> None:
    """pyproject.toml's ``[project.scripts]``: each ``minitx-NAME`` is
    ``minitx.cli.launch:NAME``, and each command of the launcher has its script."""
    from importlib.metadata import entry_points

    from minitx.cli import launch

    scripts = {
        ep.name: ep.value
        for ep in entry_points(group="console_scripts")
        if ep.name.startswith("minitx-")
    }
    if not scripts:
        pytest.skip("minitx is not installed (pip install -e . registers its console scripts)")
    assert scripts == {f"minitx-{name}": f"minitx.cli.launch:{name}" for name in launch.COMMANDS}
    for name, (module, function) in launch.COMMANDS.items():
        assert callable(getattr(launch, name)), name
        assert function in ("main", "run") and module.startswith("minitx."), name


@pytest.mark.parametrize(
    ("signum", "status", "what"),
    [(signal.SIGINT, 130, "interrupted (Ctrl-C)"), (signal.SIGTERM, 143, "terminated (SIGTERM)")],
    ids=["ctrl-c", "sigterm"],
)
def test_a_stop_during_the_imports_is_one_line_and_status_130_or_143(
    signum: int, status: int, what: str, tmp_path: Path
) -> None:
    """A Ctrl-C or SIGTERM while `minitx-train` imports torch and Lightning (seconds): one
    line, status 130 / 143, no traceback through the libraries. A SIGTERM there ended the
    process unsaid (its default)."""
    code = "import sys; from minitx.cli import launch; print('ready', flush=True); "
    code += "sys.exit(launch.train())"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "--print_config"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=subprocess_env(),
    )
    assert proc.stdout.readline() == "ready\n"
    # Into the command's imports (microseconds away), which take seconds: torch, Lightning.
    time.sleep(0.5)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err[-2000:]
    assert err.strip() == f"{what} while starting: nothing was done"
    assert out == ""


@pytest.mark.parametrize(
    ("command", "slow", "message"),
    [
        ("translate", "build_parser", "interrupted (Ctrl-C) while starting: nothing was done"),
        ("evaluate", "build_parser", "interrupted (Ctrl-C) while starting: nothing was done"),
        ("train", "build_cli", "interrupted (Ctrl-C) before training began: nothing was trained"),
    ],
    ids=["translate", "evaluate", "train"],
)
def test_ctrl_c_after_the_imports_and_before_the_work_is_one_line_and_status_130(
    command: str, slow: str, message: str, tmp_path: Path
) -> None:
    """A Ctrl-C while the command builds and parses its command line (which imports torch) or,
    for training, prepares its run: one line and status 130, not a traceback. The signal is
    sent from inside that step, so the test does not depend on the machine's pace."""
    code = f"""
import os, signal, sys, time
from minitx.cli import launch, {command} as cmd
step = cmd.{slow}
def interrupted(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)  # the handler runs here
    return step(*args, **kwargs)
cmd.{slow} = interrupted
sys.exit(launch.{command}())
"""
    proc = run_python(
        [sys.executable, "-c", code, "--help"], cwd=tmp_path, env=subprocess_env(), timeout=120
    )
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert proc.stderr.strip() == message


def test_a_run_refused_before_it_wrote_anything_leaves_no_directories(tmp_path: Path) -> None:
    """A corpus that is not there: one error line, and the runs directories the command made
    for it (runs_dir, run_name, the run) are gone again; a runs_dir that was there stays."""
    fresh, kept = tmp_path / "fresh" / "runs", tmp_path / "kept"
    kept.mkdir()
    for runs in (fresh, kept):
        args = ["--config", "tiny", "--data.source", str(tmp_path / "nothing"), "--runs_dir"]
        proc = run_python(
            [sys.executable, "-m", "minitx.cli.train", *args, str(runs)],
            cwd=tmp_path,
            env=subprocess_env(),
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert proc.stderr.strip().splitlines()[-1].startswith("error: "), proc.stderr
    assert not (tmp_path / "fresh").exists()
    assert kept.is_dir() and not any(kept.iterdir())


def test_sigterm_while_the_run_is_prepared_is_one_line_and_leaves_no_run_directory(
    tmp_path: Path,
) -> None:
    """A SIGTERM (a scheduler's) after the run directory is claimed and before the fit: one
    line, status 143, and the empty run directory removed (the signal's default ended the
    process silently and left it). Sent from inside the step, as in the Ctrl-C test above."""
    code = """
import os, signal, sys, time
from minitx.cli import launch, train as cmd
step = cmd.build_cli
def terminated(*args, **kwargs):
    cli = step(*args, **kwargs)  # the run directory is claimed here
    print(cli.run_version, flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler runs here
    return cli
cmd.build_cli = terminated
sys.exit(launch.train())
"""
    runs = tmp_path / "runs"
    args = ["--config", "tiny", "--runs_dir", str(runs), "--data.cache_dir", str(tmp_path / "c")]
    proc = run_python(
        [sys.executable, "-c", code, *args], cwd=tmp_path, env=subprocess_env(), timeout=120
    )
    assert proc.returncode == 143, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        "terminated (SIGTERM) before training began: nothing was trained"
    )
    version = proc.stdout.strip().splitlines()[-1]
    assert version and not (runs / "tiny" / version).exists()


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
@pytest.mark.parametrize(
    ("setting", "value", "named"),
    [
        # Lightning accepts these at zero and divides by them inside the loop
        ("accumulate_grad_batches", "0", "trainer.accumulate_grad_batches=0"),
        ("check_val_every_n_epoch", "0", "trainer.check_val_every_n_epoch=0"),
        ("val_check_interval", "0", "trainer.val_check_interval=0"),
        # a plan of nothing: the fit ended at once, exit status 0, an empty run directory
        ("max_steps", "0", "trainer.max_steps=0 trains nothing; give at least 1, or -1"),
        ("max_epochs", "0", "trainer.max_epochs=0 trains nothing"),
        ("limit_train_batches", "0", "trainer.limit_train_batches=0 trains nothing"),
        # Lightning's Trainer refuses these itself, with an exception of its own
        ("max_epochs", "-5", "`max_epochs` must be"),
        ("num_nodes", "0", "`num_nodes` must be"),
        ("strategy", "bogus", "invalid strategy name"),
        ("limit_train_batches", "-1", "limit_train_batches"),
        # Lightning's ModuleNotFoundError for the library the precision needs: a traceback
        ("precision", "transformer-engine", "Requirement 'transformer_engine"),
        # fp16 weights on a CPU: the run diverged, and the error blamed the learning rate
        ("precision", "16-true", "trainer.precision 16-true: fp16 weights and optimizer state"),
        # Lightning's TypeError: a traceback
        ("devices", "0,1", "`devices` selected with `CPUAccelerator` should be an int > 0"),
        # jsonargparse listed each of the union's types with its error
        ("precision", "8", "trainer.precision=8: give one of 64, 32, 16, transformer-engine,"),
        # Lightning takes it, and torch scales the gradients by it: the run diverged, status 0
        ("gradient_clip_val", "-1", "trainer.gradient_clip_val=-1: give 0 or more"),
    ],
)
def test_a_trainer_setting_lightning_cannot_use_is_one_error_line(
    setting: str,
    value: str,
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Lightning's trainer.* settings end in one ``error:`` line and status 2 when its Trainer
    refuses them or would fail on them inside the loop; never its traceback, and no run is
    written."""
    import minitx.cli.train as train

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    monkeypatch.setattr(train, "_train_and_test", train.build_cli)  # build the run, no fit
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), f"--trainer.{setting}", value])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(errors) == 1, err
    assert named in errors[0] and "Traceback" not in err, err
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
@pytest.mark.parametrize("loader", ["train", "val"])
def test_a_fraction_of_an_epoch_below_one_batch_is_one_error_line_and_no_run(
    loader: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Lightning checks limit_*_batches against the batches once the fit has counted them:
    its MisconfigurationException was a traceback, status 1, beside a new run directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), f"--trainer.limit_{loader}_batches", "0.001"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(errors) == 1, err
    assert f"Please increase the `limit_{loader}_batches` argument" in errors[0], err
    assert "Traceback" not in err and not list(tmp_path.rglob("*.yaml"))


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
@pytest.mark.parametrize(
    "setting", [["--checkpoint.save_top_k", "0"], ["--trainer.limit_val_batches", "0"]]
)
def test_a_run_without_a_best_checkpoint_says_why_it_has_no_test(
    setting: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The test after training was left out without a word when no best checkpoint was kept;
    without validation, Lightning's warning that val/bleu is missing came every epoch."""
    monkeypatch.chdir(tmp_path)
    train_main(["--config", str(TINY_CONFIG), "--trainer.max_epochs", "1", *setting])
    out, err = capsys.readouterr()
    (last,) = tmp_path.rglob("last.ckpt")
    assert "note: no test: no best checkpoint was kept" in err, err
    assert f"minitx-evaluate --checkpoint {last.relative_to(tmp_path)}" in err, err
    assert "could not find the monitored key" not in out + err and "test (" not in out


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
@pytest.mark.parametrize(
    ("args", "named"),
    [
        # ModelCheckpoint refused these with a traceback
        (["--checkpoint.mode", "bogus"], "checkpoint.mode='bogus': give min or max"),
        (["--checkpoint.save_top_k", "-5"], "checkpoint.save_top_k=-5: give -1 (keep all)"),
        (["--checkpoint.every_n_epochs", "-1"], "checkpoint.every_n_epochs=-1: give 0"),
        # refused by Lightning after the first epoch's training
        (
            ["--checkpoint.monitor", "val/blue"],
            "checkpoint.monitor=val/blue: validation logs val/loss, val/ppl, val/bleu, val/chrf",
        ),
        # accepted, and the highest loss was kept as the best checkpoint and tested
        (
            ["--checkpoint.monitor", "val/loss", "--checkpoint.mode", "max"],
            "keeps the worst checkpoint as the best; set --checkpoint.mode min",
        ),
        (
            ["--checkpoint.monitor", "val/bleu", "--checkpoint.mode", "min"],
            "set --checkpoint.mode max",
        ),
    ],
    ids=["mode", "save-top-k", "every-n-epochs", "unknown-metric", "loss-max", "bleu-min"],
)
def test_a_checkpoint_setting_that_cannot_work_is_one_error_line(
    args: list[str],
    named: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The checkpoint.* settings end in one ``error:`` line and status 2 before any run is
    written."""
    import minitx.cli.train as train

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    monkeypatch.setattr(train, "_train_and_test", train.build_cli)  # build the run, no fit
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), *args])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(errors) == 1, err
    assert named in errors[0] and "Traceback" not in err, err
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
@pytest.mark.parametrize(
    ("size", "said"),
    [
        ("0", "data.vocab_size must be positive, got 0"),
        ("1", "data.vocab_size must be larger than the special ids (pad 0, bos 2, eos 3), got 1"),
    ],
)
def test_an_error_in_a_linked_setting_names_the_setting_the_user_gave(
    size: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """`--data.vocab_size 0` said "model.transformer.src_vocab_size must be positive": a key
    the user never typed (it is set from data.vocab_size); `1` named "model.transformer"."""
    import minitx.cli.train as train

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train, "_train_and_test", train.build_cli)  # build the run, no fit
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), "--data.vocab_size", size])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.strip() == f"error: {said}", err


def test_a_validation_interval_longer_than_an_epoch_is_one_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Lightning checks an interval in batches against the epoch's batches only when the fit
    starts: its ValueError was a traceback and status 1."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    args = ["--config", str(TINY_CONFIG), "--trainer.enable_progress_bar", "false"]
    with pytest.raises(SystemExit) as exit_info:
        train_main([*args, "--trainer.val_check_interval", "1000"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith("error: trainer.val_check_interval (1000) must be less than")
    assert errors[0].endswith("--trainer.check_val_every_n_epoch null)")
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # the new run's directory went


@pytest.mark.parametrize(
    ("script", "arguments", "message"),
    [
        ("alignment_layers.py", ["missing.ckpt", "builtin:toy"], "checkpoint not found"),
        ("alignment_layers.py", ["CKPT", "no-such-corpus-dir/"], "not found"),
        ("alignment_layers.py", ["CKPT", "builtin:toy", "0"], "sentences must be >= 1"),
        ("alignment_layers.py", ["CKPT", "CORPUS"], "no lexicon pair found"),
        ("alignment_layers.py", ["EN_DE", "builtin:toy"], "translates en -> de; the lexicon"),
        ("data_stats.py", ["--source", "builtin:toy", "--max-tokens", "0"], "--max-tokens"),
        ("data_stats.py", ["--source", "no-such-corpus-dir/"], "not found"),
        ("data_stats.py", ["--source", "builtin:toy", "--seed", "-1"], "--seed must be >= 0"),
        (  # every pair skipped: the statistics of nothing were a traceback
            "data_stats.py",
            ["--source", "builtin:toy", "--vocab-size", "100", "--max-len", "2"],
            "(skipped: 60 too_long); it needs line pairs with both sides non-empty and at most "
            "--max-len (2) pieces a side",  # the script's flag, not minitx-train's data.max_len
        ),
        (  # named data.vocab_size, a key of minitx-train's configs, not this script's flag
            "data_stats.py",
            ["--source", "builtin:toy", "--vocab-size", "100000"],
            "Set --vocab-size to",
        ),
        ("data_stats.py", ["--source", "builtin:toy", "--vocab-size", "6"], "Set --vocab-size to"),
    ],
    ids=[
        "align-no-checkpoint",
        "align-no-corpus",
        "align-no-sentences",
        "align-no-lexicon-pair",
        "align-another-language-pair",
        "stats-no-tokens",
        "stats-no-corpus",
        "stats-negative-seed",
        "stats-every-pair-too-long",
        "stats-vocabulary-too-large",
        "stats-vocabulary-too-small",
    ],
)
def test_the_scripts_report_a_user_error_in_one_line(
    script: str, arguments: list[str], message: str, tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """The measuring scripts the guides name (scripts/alignment_layers.py,
    scripts/data_stats.py) end a user's mistake with one ``error:`` line and status 2, as the
    commands do: no traceback."""
    from helpers import SCRIPTS_DIR

    corpus = tmp_path / "corpus"  # a test split without one word of the lexicon
    corpus.mkdir()
    for lang in ("de", "en"):
        (corpus / f"test.{lang}").write_text("qqq zzz .\n", encoding="utf-8")
    given = {"CKPT": str(tiny_checkpoint), "CORPUS": str(corpus)}
    if "EN_DE" in arguments:  # the tiny model's release, said to translate en -> de
        from minitx import release

        given["EN_DE"] = str(tmp_path / "en-de")
        release.save_pretrained(release.load(tiny_checkpoint), tmp_path / "en-de")
        config = json.loads((tmp_path / "en-de" / "config.json").read_text(encoding="utf-8"))
        config |= {"src_lang": "en", "tgt_lang": "de"}
        (tmp_path / "en-de" / "config.json").write_text(json.dumps(config), encoding="utf-8")
    arguments = [given.get(a, a) for a in arguments]
    cmd = [sys.executable, str(SCRIPTS_DIR / script), *arguments]
    proc = run_python(cmd, cwd=tmp_path, env=subprocess_env(), timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert message in errors[0] and "Traceback" not in proc.stderr, proc.stderr
    if "too_long" in message:  # the pass before the error reported on standard output
        assert "tokenization (train split" in proc.stdout, proc.stdout
        assert proc.stderr.count("skipped 60 of 60 pairs") == 1, proc.stderr


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--config", "nope"], r"--config nope: no such file, nor a packaged config .*tiny"),
        (["--config=~/nope.yaml"], r"--config ~/nope\.yaml: no such file"),
        (["--data.cache_dir", "notes.txt"], r"data\.cache_dir notes\.txt: notes\.txt is a file"),
        (["--data.cache_dir", "notes.txt/c"], r"cache_dir notes\.txt/c: notes\.txt is a file"),
        (["--data.cache_dir", ""], r"data\.cache_dir is empty \(''\): give a directory, or null"),
        (["--data.cache_dir", "/proc/c"], r"data\.cache_dir /proc/c: cannot write in /proc \("),
        (["--config", ""], r"--config '': empty \(is a shell variable unset\?\).*tiny"),
        (["--config", "."], r"--config \.: a directory, not a config file; .*tiny"),
        (["--config", "/dev/null"], r"--config /dev/null: a device or pipe, not a config file"),
        (["--data", "."], r"--data '\.': data is a section .* as in --data\.source \."),
        (["--data", ""], r"--data '': data is a section .* as in --data\.source DIR"),
        (["--data", "notes.txt"], r"--data notes\.txt: the file does not hold a mapping of"),
        (
            ["--model.transformer", "3"],
            r"model\.transformer is a section .*--model\.transformer\.KEY",
        ),
    ],
    ids=[
        "unknown-config-name",
        "unknown-config-path",
        "cache-dir-a-file",
        "cache-dir-in-a-file",
        "cache-dir-empty",
        "cache-dir-where-no-file-goes",
        "empty-config",
        "config-a-directory",
        "config-a-device",
        "data-a-directory",
        "data-empty",
        "data-a-text-file",
        "section-a-number",
    ],
)
def test_a_config_name_or_cache_dir_that_cannot_be_used_says_what_would_do(
    extra: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """An unknown ``--config`` name lists the packaged ones (it was jsonargparse's "File does
    not exist"); a file as ``data.cache_dir`` asks for a directory (it was "File exists"), an
    empty one is refused (the caches went into the current directory) and one where no file
    can go is named with the flag (it was the system's message alone); an
    empty or special ``--config`` names what to give (it was "Unexpected config:" or "Path is
    not a file"), and a value given to a section (``--data DIR``) names its keys (it was
    jsonargparse's "Unable to load config", twice)."""
    import minitx.cli.train as train

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    monkeypatch.setattr(train, "_train_and_test", train.build_cli)  # build the run, no fit
    (tmp_path / "notes.txt").write_text("mine\n")
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), *extra])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert exit_info.value.code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert re.search(message, errors[0]), errors[0]
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == ["notes.txt"]


def test_the_help_of_config_names_the_packaged_configs(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        train_main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    config_help = help_text.split("-c CONFIG, --config CONFIG", 1)[1].split("--print_config")[0]
    assert "a packaged config's name:" in config_help and "multi30k_de_en" in config_help


def test_config_values_jsonargparse_reads_itself_are_passed_on() -> None:
    """Standard input (``--config -``), YAML text and URLs are jsonargparse's to read: not
    refused as unknown config names."""
    from minitx.cli.train_config import resolve_config_names

    for value in ("-", "{trainer: {max_epochs: 1}}", "trainer: {max_epochs: 1}", "file:///x.yaml"):
        assert resolve_config_names(["--config", value]) == ["--config", value]


def test_a_packaged_config_name_is_found_beside_a_folder_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In runs/, `--config tiny` met the run family tiny/ and was refused as a directory; a
    file of that name still comes first."""
    from minitx.cli.train_config import CONFIG_DIR, resolve_config_names

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").mkdir()
    assert resolve_config_names(["--config", "tiny"]) == ["--config", str(CONFIG_DIR / "tiny.yaml")]
    assert resolve_config_names(["--config=tiny"]) == [f"--config={CONFIG_DIR / 'tiny.yaml'}"]
    (tmp_path / "long").write_text("trainer: {max_epochs: 1}\n")
    assert resolve_config_names(["--config", "long"]) == ["--config", "long"]


@pytest.mark.parametrize(
    ("argv0", "hint"),
    [
        ("scripts/train.py", "python scripts/train.py --help"),
        ("/venv/bin/minitx-train", "minitx-train --help"),
        ("/src/minitx/cli/train.py", "minitx-train --help"),  # python -m minitx.cli.train
    ],
)
def test_a_training_parse_error_names_the_command_that_lists_the_keys(
    argv0: str, hint: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The hint is a command the user can run: `python -m minitx.cli.train` (how
    minitx-experiment starts its variants) is also called train.py."""
    monkeypatch.setattr(sys, "argv", [argv0])
    with pytest.raises(SystemExit) as exit_info:
        train_main(["--config", str(TINY_CONFIG), "--model.transformer.d_model", "abc"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.rstrip().endswith(f"({hint} lists every key)")


def test_a_bad_value_from_a_config_file_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The line "model.optim.lr=abc: give a number" named the key, not the file among several
    --config files that set it; a value given as a flag is not blamed on a file."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "typo.yaml").write_text("model:\n  optim:\n    lr: abc\n")
    (tmp_path / "negative.yaml").write_text("model:\n  optim:\n    lr: -3\n")
    cases = [
        (["--config", "typo.yaml"], "lr=abc: give a number (set in --config typo.yaml)"),
        (["--config", "negative.yaml"], "got lr=-3.0, warmup_steps=20, weight_decay=0.1 (set in "),
        (["--config", "negative.yaml", "--model.optim.lr", "-2"], "weight_decay=0.1\n"),
    ]
    for args, said in cases:
        with pytest.raises(SystemExit) as exit_info:
            train_main(["--config", str(TINY_CONFIG), *args])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and said in err, err
