"""Off the happy path: every bad input, fault and interruption a user can meet, each with
the behaviour a careful user expects (README: "Exit statuses, errors and resuming").

- user errors end in one line ``error: <what, where, how to fix>`` and exit status 2, from
  the real entry points (subprocess where the process boundary matters);
- divergence stops at the step (or skips up to N bad batches, opt-in), never writing a
  non-finite checkpoint; SIGTERM / Ctrl-C save last.ckpt and exit 143 / 130; a kill during a
  checkpoint save leaves the previous file loadable;
- resuming keeps the metrics history and refuses a checkpoint of another model or corpus;
- inference never loses a line: over-long and odd inputs, output files replaced only on
  success, evaluation files aligned with the source, attention images of bounded size.

Everything trains the tiny config on the toy corpus.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from helpers import NO_MAPS, REPO_DIR, TINY_CONFIG, TOY_CORPUS_DIR, subprocess_env
from lightning.pytorch.callbacks import Callback
from PIL import Image
from preloaded import PreloadedProcess, run_python

from minitx import evaluation
from minitx.checkpoint import CHECKPOINT_KEY
from minitx.cli import evaluate as evaluate_cli
from minitx.cli import train as train_cli
from minitx.cli import translate as translate_cli
from minitx.cli import visualize as visualize_cli
from minitx.cli.common import UsageError
from minitx.cli.train import build_cli, main
from minitx.cli.train_runs import elsewhere_note, own_run_version
from minitx.errors import ConfigError
from minitx.model import TransformerConfig
from minitx.training import DivergenceError, OptimConfig, TranslationModule
from minitx.training.resume import RandomState
from minitx.translator import Translator
from minitx.viz import plot_attention_heads

REPO = REPO_DIR
TINY = ["--config", str(TINY_CONFIG), *NO_MAPS]  # the maps: test_cli_train, and the signals below
QUIET = ["--trainer.enable_progress_bar", "false", "--test", "false"]
LONG_WORDS = 1500  # more pieces than the tiny model's 1024 positions


def run_dirs(root: Path, name: str = "tiny") -> list[Path]:
    return sorted((root / "runs" / name).glob("*"))


def metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def train_process(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`python scripts/train.py` on the tiny config, as a user runs it."""
    environment = {**subprocess_env(), **env}
    if "MINITX_DEBUG" not in env:
        environment.pop("MINITX_DEBUG", None)
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *TINY, *args]
    return run_python(cmd, cwd=cwd, env=environment, timeout=300)


def one_error_line(stderr: str) -> str:
    """The single ``error: ...`` line of a failed command (and no traceback)."""
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    return errors[0]


def corpus_copy(tmp_path: Path) -> Path:
    corpus = tmp_path / "corpus"
    shutil.copytree(TOY_CORPUS_DIR, corpus)
    return corpus


def append_line(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(text + "\n")


# ------------------------------------------------------------------ one-line user errors


def test_an_impossible_model_setting_is_one_error_line_with_a_hint_that_works(
    tmp_path: Path,
) -> None:
    proc = train_process(["--model.transformer.n_heads", "3"], tmp_path)
    assert proc.returncode == 2
    error = one_error_line(proc.stderr)
    assert "model.transformer" in error and "n_heads (3)" in error
    hint = re.search(r"choose n_heads from \[([\d, ]+)\] or d_model from \[([\d, ]+)\]", error)
    assert hint, error
    sizes = {"src_vocab_size": 100, "tgt_vocab_size": 100}
    for heads in map(int, hint[1].split(",")):  # every suggestion is a valid model
        TransformerConfig(d_model=64, n_heads=heads, **sizes)
    for d_model in map(int, hint[2].split(",")):
        for positional in ("sinusoidal", "rotary"):
            TransformerConfig(d_model=d_model, n_heads=3, positional=positional, **sizes)


def test_debug_env_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINITX_DEBUG", "1")
    with pytest.raises(ConfigError, match="n_heads"):
        main(TINY + ["--model.transformer.n_heads", "3"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--runs_dir", "a_file/runs"], r"cannot write the run directory a_file/runs/tiny"),
        (["--checkpoint.dirpath", "a_file/ckpt"], r"cannot write the checkpoint directory"),
        (["--data.max_len", "5000"], r"data.max_len \(5000\) exceeds .* max_positions \(1024\)"),
        (["--model.optim.skip_bad_batches", "-1"], r"model.optim.skip_bad_batches must be >= 0"),
        (["--model.optim.betas", "[1.5, 0.98]"], r"model.optim.betas must each lie in \[0, 1\)"),
        (  # the test after fitting read it not, and decoded every sentence
            ["--trainer.limit_test_batches", "0"],
            r"trainer.limit_test_batches=0(\.0)?: the test after fitting decodes the whole test",
        ),
        (  # Lightning's one batch, not all of them
            ["--trainer.limit_test_batches", "1"],
            r"trainer.limit_test_batches=1(\.0)?: the test after fitting decodes the whole test",
        ),
        (  # Lightning logged every step without a word
            ["--trainer.log_every_n_steps", "-1"],
            r"trainer.log_every_n_steps=-1: give a number of steps \(at least 1\), or 0",
        ),
        (["--ckpt_path", "last"], r"no runs/tiny/\*/checkpoints/last.ckpt to resume from"),
        (["--model.transformer.n_heads", "abc"], r"model.transformer.n_heads=abc: give a whole"),
        (
            ["--trainer.enable_progress_bar", "maybe"],
            r"trainer.enable_progress_bar=maybe: give true or false or null  \(",
        ),
        (
            ["--data.max_lenn", "3"],
            r"unrecognized arguments: --data.max_lenn 3; did you mean --data.max_len\? .*--help",
        ),
        (["--trainr.max_steps=3"], r"--trainr.max_steps=3; did you mean --trainer.max_steps\?"),
        (["--model.transformer.score", "cosin"], r"unknown attention score 'cosin'; choose one"),
        (
            ["--config", "a_checkpoint"],
            r"--config a_checkpoint: not a YAML config .* as --ckpt_path$",
        ),
        (
            ["-c", "a_checkpoint"],
            r"-c a_checkpoint: not a YAML config \(byte 4 is not UTF-8 text\)",
        ),
        (
            ["--model.optim.schedule", "linear", "--trainer.max_epochs", "-1"],
            r"schedule 'linear' decays to zero .* set trainer.max_epochs or trainer.max_steps",
        ),
    ],
    ids=[
        "runs-dir",
        "checkpoint-dir",
        "max-len",
        "skip-bad-batches",
        "betas",
        "limit-test-batches",
        "limit-test-batches-one",
        "log-every-negative",
        "nothing-to-resume",
        "not-a-number",
        "not-a-bool",
        "misspelt-key",
        "misspelt-section",
        "unknown-score",
        "checkpoint-as-config",
        "checkpoint-as-short-config",
        "decay-without-plan",
    ],
)
def test_settings_and_paths_that_cannot_work_fail_before_training(
    args: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    (tmp_path / "a_file").write_text("not a directory\n")
    (tmp_path / "a_checkpoint").write_bytes(b"PK\x03\x04\x80 a zip archive, as torch.save writes")
    assert re.search(message, refused_before_training(args, tmp_path, monkeypatch, capsys))


def refused_before_training(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> str:
    """The one error line of training the tiny config with `args` in `tmp_path`, after
    checking that it ended with status 2 and trained nothing."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + args)
    assert exit_info.value.code == 2
    assert not list(tmp_path.rglob("*.ckpt"))  # nothing trained
    return one_error_line(capsys.readouterr().err)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model: 3", r"model is 3, but it is a section .* as in 'model: \{transformer: \.\.\.\}'"),
        ("trainer: 3", r"trainer is 3, but it is a section"),
        ("model: {optim: 3}", r"model.optim is 3, .* 'model: \{optim: \{label_smoothing: "),
        ("attention_maps: [1]", r"attention_maps is \[1\], but it is a section"),
        # this one trained the default model (d_model 256) without a word
        ("model: {transformer: 3}", r"model.transformer is 3, but it is a section"),
        ("model:", r"model is empty, but it is a section"),
        ("# nothing but a comment", r"the file holds no settings"),
        ("- trainer", r"the file holds list \['trainer'\], not a mapping of settings"),
        (
            "trainer:\n\tmax_steps: 5",
            r"not valid YAML \(found character .* line 2, column 1\); indent with spaces, not tabs",
        ),
        (  # the hint was about tabs whatever the error
            "trainer: {max_steps: 5",
            r"not valid YAML \(expected ',' or '}'.*\); check the brackets, quotes and indents",
        ),
        # the first section was dropped without a word: the second alone was read
        (
            "model: {transformer: {d_model: 64}}\ntrainer: {max_steps: 3}\nmodel: {optim: {}}",
            r"key 'model' is given twice \(lines 1 and 3\), and YAML would keep only the "
            r"second: write it once$",
        ),
        ("trainer:\n  max_steps: 3\n  max_steps: 5", r"key 'max_steps' is given twice"),
        # jsonargparse's message named no file
        (
            "model: {transformer: {d_modle: 64}}",
            r"model.transformer.d_modle is not a setting; did you mean model.transformer.d_model\?",
        ),
        ("trainr: {max_steps: 3}", r"trainr is not a setting; did you mean trainer\? \(minitx-"),
        (
            "model: {transformer: {class_path: minitx.model.TransformerConfig, "
            "init_args: {d_modle: 64}}}",
            r"model.transformer.d_modle is not a setting; did you mean model.transformer.d_model",
        ),
        (
            "data: {max_positions: 64}",
            r"data.max_positions is set from model.transformer.max_positions; set that instead$",
        ),
        ("? [a, b]\n: 1", r"not valid YAML \(found unhashable key"),  # was a TypeError
        # a list was dropped without a word (jsonargparse follows one path), a missing file
        # in it too; a number ended in jsonargparse's AttributeError traceback
        ("config: [sub.yaml]", r"config: \['sub.yaml'\]: give the path of one YAML file"),
        ("config: 3", r"config: 3: give the path of one YAML file to include"),
        ("config: ''", r"config: '': give the path of one YAML file to include"),
        # jsonargparse's "File does not exist" named no including file
        ("config: nosuch.yaml", r"config: nosuch.yaml: no such file \(.*nosuch.yaml\); give"),
        ("config: tiny", r"a packaged config is read from the command line: --config tiny --co"),
        ("config: sub", r"config: sub: a directory \("),
        # the including file's model section replaced the included one's: lr was lost
        (
            "config: sub.yaml\nmodel: {transformer: {d_model: 32}}",
            r"it sets model keys and includes .*sub.yaml, whose model.optim.lr would be lost",
        ),
    ],
    ids=[
        "model",
        "trainer",
        "optim",
        "maps",
        "transformer",
        "empty-section",
        "empty",
        "list",
        "tab",  # jsonargparse's message named no file
        "bracket",
        "section-twice",
        "key-twice",
        "typo",
        "typo-in-a-section-name",
        "typo-in-init-args",
        "linked",
        "list-key",
        "include-list",
        "include-number",
        "include-empty",
        "include-missing",
        "include-packaged-name",
        "include-directory",
        "include-section-lost",
    ],
)
def test_a_config_file_that_cannot_be_read_as_written_is_refused(
    text: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    (tmp_path / "sub").mkdir()  # what the include cases name: a folder, and a file of settings
    (tmp_path / "sub.yaml").write_text("model: {optim: {lr: 0.0123}}\n")
    (tmp_path / "c.yaml").write_text(text + "\n")
    error = refused_before_training(["--config", "c.yaml"], tmp_path, monkeypatch, capsys)
    assert error.startswith("error: --config c.yaml: ") and re.search(message, error), error


def test_a_config_file_included_by_another_is_checked_as_well(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """jsonargparse reads a ``config:`` key as files to include, relative to the including
    file's folder. Included, a file with a section twice trained on the second alone, and a
    misspelt key was named with no file; files that include each other are named too."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "twice.yaml").write_text("data: {vocab_size: 100}\ndata: {max_len: 50}\n")
    (tmp_path / "sub" / "typo.yaml").write_text("data: {vocab_sizee: 100}\n")
    (tmp_path / "sub" / "top.yaml").write_text("config: typo.yaml\n")
    (tmp_path / "a.yaml").write_text("config: sub/twice.yaml\n")
    (tmp_path / "loop.yaml").write_text("config: loop2.yaml\n")
    (tmp_path / "loop2.yaml").write_text("config: loop.yaml\n")
    for top, message in (
        ("a.yaml", "error: sub/twice.yaml (included by a.yaml): key 'data' is given twice"),
        ("sub/top.yaml", "error: sub/typo.yaml (included by sub/top.yaml): data.vocab_sizee is "),
        ("loop.yaml", "error: loop.yaml (included by loop2.yaml): the config files include each"),
    ):
        error = refused_before_training(["--config", top], tmp_path, monkeypatch, capsys)
        assert error.startswith(message), error


@pytest.mark.parametrize(
    "include",
    [
        "sub.yaml",
        "~/sub.yaml",  # jsonargparse reads ~ as the home directory
        "'{model: {optim: {lr: 0.0123}}}'",  # settings written inline, as --config takes them
    ],
)
def test_an_include_in_other_sections_is_read(
    include: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """The include's keys stand where the including file sets none of their section; a null
    include is none."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "sub.yaml").write_text("model: {optim: {lr: 0.0123}}\n")
    (tmp_path / "c.yaml").write_text(f"config: {include}\ntrainer: {{max_steps: 7}}\n")
    (tmp_path / "none.yaml").write_text("config: null\ntrainer: {max_steps: 7}\n")
    for config, lr in (("c.yaml", 0.0123), ("none.yaml", 0.005)):  # tiny's own rate
        with pytest.raises(SystemExit) as exit_info:
            main([*TINY, "--config", config, "--print_config"])
        assert exit_info.value.code == 0
        printed = yaml.safe_load(capsys.readouterr().out)
        assert (printed["model"]["optim"]["lr"], printed["trainer"]["max_steps"]) == (lr, 7)


def test_yaml_merge_keys_may_be_redone_and_are_read_as_yaml_reads_them() -> None:
    """A key given after `<<:` replaces the merged one (YAML's rule), not a key given twice."""
    from minitx.cli.train_config import _UniqueKeys

    text = "base: &b {max_steps: 2, max_epochs: 3}\ntrainer:\n  <<: *b\n  max_steps: 4\n"
    read = yaml.load(text, Loader=_UniqueKeys)
    assert read == yaml.safe_load(text) and read["trainer"] == {"max_steps": 4, "max_epochs": 3}


def test_an_over_long_validation_pair_is_cut_when_loaded_not_fatal_after_an_epoch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    corpus = corpus_copy(tmp_path)
    append_line(corpus / "val.de", " ".join(["Mann"] * LONG_WORDS))
    append_line(corpus / "val.en", " ".join(["man"] * LONG_WORDS))
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.WARNING, logger="minitx"):
        cli = main(TINY + QUIET + ["--data.source", str(corpus), "--trainer.max_epochs", "1"])
    assert cli.trainer.current_epoch == 1 and cli.trainer.global_step > 0
    assert cli.datamodule.skipped["validation"]["truncated"] == 1
    assert max(cli.datamodule.dataset["validation"]["src_len"]) == 1023
    n_val = len((corpus / "val.de").read_text(encoding="utf-8").splitlines())
    assert len(cli.datamodule.texts("validation")[0]) == n_val  # no pair dropped
    assert re.search(r"validation: 1 of \d+ pairs are longer .* max_positions=1024", caplog.text)


# ------------------------------------------------------ training: signals, checkpoints, resume


class RecordLr(Callback):
    """Remembers the learning rate at the start of fitting."""

    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_start(self, trainer, pl_module) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_print_config_shows_the_whole_config_wherever_it_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Before --config it printed only what was parsed so far: the tiny file's keys, without
    the defaults or the flags after it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--print_config", *TINY, "--trainer.max_steps", "7"])
    assert exit_info.value.code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["trainer"]["max_steps"] == 7
    assert "weight_decay" in printed["model"]["optim"]  # a default the tiny file does not set
    assert not list(tmp_path.rglob("*.ckpt"))


@pytest.mark.parametrize("stop", ["ctrl-c", "error-inside-a-step", "error-after-a-step"])
def test_a_run_stopped_inside_an_epoch_resumes_with_the_batches_it_had_not_trained(
    stop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C at update 30, inside the second epoch (23 updates each; the stop comes after
    update 31, the hook that notes it running after minitx's), an error raised inside the
    step after update 30 (a second Ctrl-C, say, which stops at once), or one raised in a hook
    after update 31: the resume trains that epoch's other batches, not its first ones again,
    neither skipping the batch whose step failed nor repeating the one whose step was done,
    so its losses are step for step those of a run never stopped (the tiny config has no
    dropout), the last row before the stop included."""
    args = TINY + QUIET + ["--trainer.max_epochs", "2"]
    losses = {}
    for name in ("whole", "resumed"):
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        if name == "resumed":
            interrupt = {
                "ctrl-c": InterruptTraining(30),
                "error-inside-a-step": RaiseAt(30, "on_train_batch_start"),
                "error-after-a-step": RaiseAt(31, "on_train_batch_end"),
            }[stop]
            with_callback(monkeypatch, interrupt)
            with pytest.raises(SystemExit) as exit_info:
                main(args)
            assert exit_info.value.code == 130
        run = main(args + (["--ckpt_path", "last"] if name == "resumed" else []))
        assert run.trainer.global_step == 46
        (run_dir,) = run_dirs(tmp_path / name)
        rows = metrics(run_dir)
        losses[name] = {int(r["step"]): r["train/loss"] for r in rows if r.get("train/loss")}
    assert len(losses["whole"]) == 46
    if stop == "error-after-a-step":  # the update is kept, not its row: the hook failed first
        del losses["whole"][30]
    if stop != "error-inside-a-step":
        assert losses["resumed"] == losses["whole"]  # the update before the stop logged too
    else:  # Lightning counts the failed step in its logging step: the rows' `step` skips one
        assert [losses["resumed"][s] for s in sorted(losses["resumed"])] == [
            losses["whole"][s] for s in sorted(losses["whole"])
        ]


def test_a_resumed_run_with_dropout_goes_on_step_for_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dropout draws its masks from torch's generator: a resume seeded it afresh, so the
    resumed run's losses left the uninterrupted run's at the first update after the stop.
    The checkpoint now carries the generator's state; for a stop inside a step (a second
    Ctrl-C, its masks drawn), the state from that step's start."""
    args = TINY + QUIET + ["--trainer.max_epochs", "2", "--model.transformer.dropout", "0.1"]
    stops = {
        "whole": None,
        "after-an-update": InterruptTraining(30),
        "inside-a-step": RaiseAt(30, "on_after_backward"),  # update 31 drew its masks
    }
    losses = {}
    for name, stop in stops.items():
        (tmp_path / name).mkdir()
        monkeypatch.chdir(tmp_path / name)
        if stop is not None:
            with_callback(monkeypatch, stop)
            with pytest.raises(SystemExit):
                main(args)
        main(args + (["--ckpt_path", "last"] if stop is not None else []))
        (run_dir,) = run_dirs(tmp_path / name)
        rows = metrics(run_dir)
        losses[name] = {int(r["step"]): r["train/loss"] for r in rows if r.get("train/loss")}
    assert len(losses["whole"]) == 46
    assert losses["after-an-update"] == losses["whole"]
    # the cut update's logging step is skipped (Lightning counted it): the same losses, in order
    cut = losses["inside-a-step"]
    assert 30 not in cut and [cut[k] for k in sorted(cut)] == list(losses["whole"].values())


def test_random_state_round_trips_and_a_damaged_one_is_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The checkpoint's generator state is restored (a resumed run draws what the run that
    never stopped drew); a damaged one is left out with a warning, not torch's traceback."""
    saved = RandomState().state_dict()
    expected = torch.rand(4)
    RandomState().load_state_dict(saved)
    assert torch.equal(torch.rand(4), expected)
    before = torch.get_rng_state()
    with caplog.at_level("WARNING", logger="minitx.training.resume"):
        RandomState().load_state_dict({"cpu": torch.zeros(3, dtype=torch.uint8)})
    assert "the CPU's random generator state is damaged: left out" in caplog.text
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.parametrize("stop", ["ctrl-c", "error-inside-a-step"])
def test_an_interrupted_fit_leaves_the_signal_handlers_as_it_found_them(
    stop: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning ends an interrupted fit ignoring Ctrl-C, or with the handlers it found at its
    start (the interrupt callback's): a process that goes on (a notebook, the suite) would
    lose its next Ctrl-C. The command puts back the handlers from before the fit."""
    monkeypatch.chdir(tmp_path)
    interrupt = {
        "ctrl-c": InterruptTraining(3),
        "error-inside-a-step": RaiseAt(3, "on_train_batch_start"),
    }
    with_callback(monkeypatch, interrupt[stop])
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + ["--trainer.max_epochs", "1"])
    assert exit_info.value.code == 130
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.skipif(sys.platform == "win32", reason="no advisory locks (fcntl) on Windows")
def test_a_run_directory_in_use_by_another_process_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The same resume started twice: the second one is refused (both went ahead, writing the
    same checkpoints and metrics), and writes nothing; once the first has ended, it resumes."""
    monkeypatch.chdir(tmp_path)
    main(TINY + QUIET + ["--trainer.max_epochs", "1"])
    (run_dir,) = run_dirs(tmp_path)
    before = file_digests(run_dir)
    holder = "import sys, time; from minitx.outputs import hold_run_dir; from pathlib import Path; "
    holder += "hold_run_dir(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)"
    env = subprocess_env()
    with subprocess.Popen(
        [sys.executable, "-c", holder, str(run_dir)], stdout=subprocess.PIPE, text=True, env=env
    ) as other:  # another minitx-train training in it
        try:
            assert other.stdout.readline() == "held\n"
            capsys.readouterr()
            with pytest.raises(SystemExit) as exit_info:
                main(TINY + QUIET + ["--trainer.max_epochs", "2", "--ckpt_path", "last"])
        finally:
            other.kill()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {run_dir.resolve()} is in use by another training process" in err, err
    assert file_digests(run_dir) == before
    resumed = main(TINY + QUIET + ["--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert resumed.trainer.current_epoch == 2


class SignalDuringTheStop(Callback):
    """Ctrl-C after update 3 (acted on after update 4), then a SIGTERM while the stop's
    checkpoint is being written."""

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    def on_save_checkpoint(self, trainer, *args) -> None:
        if trainer.interrupted:
            os.kill(os.getpid(), signal.SIGTERM)


def test_a_signal_while_the_stop_saves_is_ignored_and_the_checkpoint_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Was: the second signal cut the write short (SIGTERMException inside torch.save, three
    chained tracebacks, exit status 1), or lost the last update's row of the history."""
    monkeypatch.chdir(tmp_path)
    with_callback(monkeypatch, SignalDuringTheStop())
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + ["--trainer.max_epochs", "1"])
    assert exit_info.value.code == 130
    err = capsys.readouterr().err
    assert err.count("already stopping (kill -9 ends at once)") == 1, err
    assert "Traceback" not in err and "training interrupted (Ctrl-C): saved" in err
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["global_step"] == 4  # the update after the signal's, as for any stop
    assert [int(r["step"]) for r in metrics(run_dir) if r.get("train/loss")] == [0, 1, 2, 3]


def test_a_stop_inside_a_gradient_accumulation_waits_for_its_update() -> None:
    """With accumulate_grad_batches 3 a Ctrl-C is acted on after the third batch, whose update
    takes the three: stopped after the first or second, the saved state would hold neither
    their gradients nor (the loader having served them) a way to train them again."""
    from types import SimpleNamespace

    from minitx.training.callbacks import CheckpointOnInterrupt

    callback = CheckpointOnInterrupt()
    callback.stop_signal = signal.SIGINT  # noted in the first batch
    handed = []
    callback._hand_over = lambda after_logging: handed.append(after_logging)
    progress = SimpleNamespace(is_last_batch=False)
    trainer = SimpleNamespace(
        accumulate_grad_batches=3,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress)),
        max_epochs=5, current_epoch=0, max_steps=-1, global_step=1, should_stop=False,
    )  # fmt: skip
    for batch_idx in range(6):
        handed.append(batch_idx)
        callback.on_train_batch_end(trainer, None, None, None, batch_idx)
    assert handed == [0, 1, 2, True, 3, 4, 5, True]


def test_a_signal_after_the_hand_over_is_not_swallowed() -> None:
    """Only the hand-over's own call through Lightning's handler passes `_note_signal` by: a
    SIGTERM that reaches it later (Lightning puts it back as the handler when an interrupted
    fit ends) stops at once, as a second signal does."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from minitx.training.callbacks import CheckpointOnInterrupt

    callback = CheckpointOnInterrupt()
    callback.stop_signal, callback._handed_over = signal.SIGINT, True
    with pytest.raises(SIGTERMException):
        callback._note_signal(signal.SIGTERM, None)


@pytest.mark.parametrize("ignore_after_stop", [False, True])
def test_the_handlers_come_back_once_the_stop_has_saved_unless_the_process_ends(
    ignore_after_stop: bool,
) -> None:
    """As a library callback (a notebook goes on) the handlers from before the fit are back
    once last.ckpt is written; minitx-train's keeps ignoring signals through Lightning's
    teardown (a signal there was a traceback) and puts its own back after the fit."""
    from minitx.training.callbacks import CheckpointOnInterrupt

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    callback = CheckpointOnInterrupt(ignore_after_stop=ignore_after_stop)
    trainer = SimpleNamespace(
        world_size=1, is_global_zero=True, checkpoint_callback=None, global_step=0
    )
    try:
        callback.on_fit_start(trainer, None)
        callback.stop_signal = signal.SIGINT
        callback.on_exception(trainer, None, KeyboardInterrupt())
        ours = signal.getsignal(signal.SIGINT) == callback._note_signal
        assert ours == ignore_after_stop
        if ignore_after_stop:
            callback._note_signal(signal.SIGTERM, None)  # ignored: no SIGTERMException
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGTERM, before[1])


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_a_resume_with_a_budget_below_the_time_spent_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Was: accepted with exit status 0, nothing trained, the last updates left unvalidated,
    and config.yaml saying the run had a 1-second budget. The run's own budget, spent,
    resumes (a finished run, for its test)."""
    monkeypatch.chdir(tmp_path)
    budget = ["--trainer.max_time", "00:00:10:00", "--trainer.max_steps", "3"]
    main(TINY + QUIET + budget)
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + ["--ckpt_path", "last", "--trainer.max_time", "{microseconds: 1}"])
    assert exit_info.value.code == 2
    error = one_error_line(capsys.readouterr().err)
    assert re.fullmatch(
        r"error: --ckpt_path \S+last.ckpt: its run has trained for \d+ s of its trainer.max_time "
        r"00:00:10:00, more than --trainer.max_time \{'microseconds': 1\}; resume with its own "
        r"budget \(00:00:10:00\) or a longer one, or null, or start a new run",
        error,
    ), error
    main(TINY + QUIET + [*budget, "--ckpt_path", "last"])  # its own budget: accepted


def test_under_ddp_a_signal_during_the_agreement_waits_for_the_next_one() -> None:
    """The processes agree on a stop in an all-reduce (`_noted`); a signal noted while it
    waits for the others is not in this agreement, and was then thrown away: said ("stopping
    after this update"), never acted on, and a later one taken as the first."""
    import torch

    from minitx.training.callbacks import CheckpointOnInterrupt

    callback = CheckpointOnInterrupt()
    callback._distributed, callback._speaks = True, False
    others = [0]  # what the other process has noted, by agreement

    class Strategy:
        root_device = torch.device("cpu")

        def reduce(self, tensor: torch.Tensor, reduce_op: str) -> torch.Tensor:
            callback._note_signal(signal.SIGTERM, None)  # lands while the collective waits
            return torch.maximum(tensor, torch.tensor(others))

    trainer = SimpleNamespace(strategy=Strategy())
    assert not callback._noted(trainer)  # the other process knows nothing of it yet
    assert callback.stop_signal == signal.SIGTERM
    assert callback._noted(trainer)  # at the next point, both stop
    assert callback.stop_signal == signal.SIGTERM


class InterruptTraining(Callback):
    """Ctrl-C (a SIGINT to this process) after update `step`."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGINT)


class RaiseAt(Callback):
    """A KeyboardInterrupt raised when update `step` is done: from `on_train_batch_start`,
    inside the next step with its batch handed over (a second Ctrl-C, which stops at once),
    or from `on_train_batch_end`, in a hook of the loop's batch end."""

    def __init__(self, step: int, hook: str) -> None:
        hooks = ("on_train_batch_start", "on_after_backward", "on_train_batch_end")
        assert hook in hooks, hook  # else never raises
        self.step = step
        setattr(self, hook, self._raise)

    def _raise(self, trainer, *args) -> None:
        if trainer.global_step == self.step:
            raise KeyboardInterrupt


@pytest.mark.parametrize("by_path", [False, True], ids=["last", "path"])
def test_resume_last_continues_at_the_saved_step_epoch_and_lr(
    by_path: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--ckpt_path last``, or the path of the run's last.ckpt (which went on in a new run
    directory, with Lightning's warning that the checkpoint directory had changed)."""
    monkeypatch.chdir(tmp_path)
    common = TINY + ["--trainer.enable_progress_bar", "false", "--test", "false"]
    first = main(common + ["--trainer.max_epochs", "1"])
    steps_per_epoch = first.trainer.global_step
    first.trainer.loggers[1].log_metrics({"train/loss": 9.0}, step=10**6)
    first.trainer.loggers[1].save()  # a row logged after the checkpoint: dropped on resume
    assert steps_per_epoch > 0
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    saved_lr = saved["optimizer_states"][0]["param_groups"][0]["lr"]

    which = str(run_dir.relative_to(tmp_path) / "checkpoints" / "last.ckpt") if by_path else "last"
    second = build_cli(common + ["--trainer.max_epochs", "2", "--ckpt_path", which])
    record = RecordLr()
    second.trainer.callbacks.append(record)
    second.trainer.fit(second.model, datamodule=second.datamodule, ckpt_path=second.resume_path)
    assert Path(second.resume_path).resolve() == (run_dir / "checkpoints" / "last.ckpt").resolve()
    assert run_dirs(tmp_path) == [run_dir]  # same run directory, no new one
    assert record.lrs == [pytest.approx(saved_lr)]
    assert second.trainer.global_step == 2 * steps_per_epoch
    assert second.trainer.current_epoch == 2
    # The history continues: epoch 0's rows are kept, nothing is logged twice.
    rows = metrics(run_dir)
    assert [int(float(r["epoch"])) for r in rows if r.get("val/bleu")] == [0, 1]
    train_steps = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert train_steps == sorted(set(train_steps)) and len(train_steps) == 2 * steps_per_epoch


def test_only_a_runs_last_checkpoint_resumes_in_its_directory(tmp_path: Path) -> None:
    """By path, the last.ckpt of a run of this family goes on in its run directory; an earlier
    best checkpoint, or another family's checkpoint, starts a new one."""
    runs = tmp_path / "runs"
    checkpoints = runs / "tiny" / "2026-01-01_00-00-00" / "checkpoints"
    checkpoints.mkdir(parents=True)
    last, best = checkpoints / "last.ckpt", checkpoints / "epoch00-bleu1.00.ckpt"
    assert own_run_version(last, runs / "tiny") == "2026-01-01_00-00-00"
    assert own_run_version(best, runs / "tiny") is None
    assert own_run_version(last, runs / "multi30k_de_en") is None
    assert own_run_version(tmp_path / "last.ckpt", runs / "tiny") is None


def test_a_runs_last_checkpoint_from_another_directory_says_how_to_continue_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A job started in another working directory, given a run's last.ckpt by path, goes on in
    a new run directory there and says so at the start, with the settings that continue the
    run in its own directory instead; those settings do."""
    args = TINY + QUIET + ["--trainer.max_epochs", "1"]
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    main(args)
    (first,) = run_dirs(tmp_path / "a")
    last = Path("..") / "a" / first.relative_to(tmp_path / "a") / "checkpoints" / "last.ckpt"
    monkeypatch.chdir(tmp_path / "b")
    capsys.readouterr()
    resumed = ["--trainer.max_epochs", "2", "--ckpt_path", str(last)]
    main(args + resumed)
    (elsewhere,) = run_dirs(tmp_path / "b")
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes[0].endswith("other than its run's: trainer.max_epochs 1 -> 2"), notes
    notes = notes[1:]
    hint = f"add --runs_dir {tmp_path / 'a' / 'runs'} --run_name tiny"
    assert len(notes) == 1 and notes[0].endswith(hint), notes  # absolute: it works anywhere
    assert str(elsewhere.relative_to(tmp_path / "b")) in notes[0]
    run = main(args + resumed + hint.removeprefix("add ").split())
    assert run.trainer.global_step == 46 and run_dirs(tmp_path / "a") == [first]
    assert len(metrics(first)) > len(metrics(elsewhere)) > 0  # its history went on in place
    # from inside the runs directory the path is short, the settings still whole; a last.ckpt
    # with no run family above it (checkpoint.dirpath /scratch/checkpoints) gets no note
    inside = Path(first.name) / "checkpoints" / "last.ckpt"
    monkeypatch.chdir(first.parent)
    assert elsewhere_note(inside, Path("new")).endswith(hint)
    assert elsewhere_note(Path("/scratch/checkpoints/last.ckpt"), Path("new")) is None
    logged = elsewhere_note(inside, Path("new"), own_loggers=True)
    assert logged.endswith(
        f"set the first logger's save_dir to {tmp_path / 'a' / 'runs'} and its name to tiny"
    )


def test_a_resumed_run_keeps_its_best_checkpoint_after_the_run_directory_moved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resumed under another path to its directory (absolute where it was relative, then
    moved), a run still knows the score of the best checkpoint it kept: it keeps one best
    checkpoint, the best of every validation. (Lightning alone forgot the score, so the next
    validation, however much worse, became "best" and the older file stayed behind.)"""
    monkeypatch.chdir(tmp_path)
    args = TINY + QUIET + ["--ckpt_path", "last"]
    main(TINY + QUIET + ["--trainer.max_epochs", "1"])
    main(args + ["--trainer.max_epochs", "2", "--runs_dir", str(tmp_path / "runs")])
    (tmp_path / "runs").rename(tmp_path / "moved")
    run = main(args + ["--trainer.max_epochs", "3", "--runs_dir", "moved"])
    (run_dir,) = (tmp_path / "moved" / "tiny").iterdir()
    callback = run.trainer.checkpoint_callback
    kept = sorted((run_dir / "checkpoints").glob("epoch*.ckpt"))
    scores = [float(r["val/bleu"]) for r in metrics(run_dir) if r.get("val/bleu")]
    assert len(scores) == 3 and kept == [Path(callback.best_model_path).absolute()], kept
    assert float(callback.best_model_score) == pytest.approx(max(scores))


def test_a_resumed_run_with_more_epochs_decays_over_its_new_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A linear schedule planned for 1 epoch, resumed for 2: the rate reaches zero at the end
    of epoch 2, not of epoch 1 (which would leave the second epoch without updates). A
    changed warm-up would be refused (test_resuming_with_other_settings_is_refused)."""
    monkeypatch.chdir(tmp_path)
    common = TINY + QUIET + ["--model.optim.schedule", "linear"]
    first = main(common + ["--model.optim.warmup_steps", "5", "--trainer.max_epochs", "1"])
    n = first.trainer.global_step
    assert first.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0)

    args = ["--model.optim.warmup_steps", "5", "--trainer.max_epochs", "2", "--ckpt_path", "last"]
    second = main(common + args)
    schedule = second.trainer.lr_scheduler_configs[0].scheduler.lr_lambdas[0]
    assert (schedule.total_steps, schedule.warmup_steps) == (2 * n, 5)
    (run_dir,) = run_dirs(tmp_path)
    lrs = [float(r["lr-AdamW/pg1"]) for r in metrics(run_dir) if r.get("lr-AdamW/pg1")]
    assert len(lrs) == 2 * n  # one logged rate per update (tiny logs every step)
    peak = max(lrs)
    assert lrs[n] == pytest.approx(peak * n / (2 * n - 5))  # the new line at the resumed step
    assert all(a > b > 0 for a, b in zip(lrs[n:], lrs[n + 1 :], strict=False))
    assert second.trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("key", "done", "fewer", "made"),
    [
        ("max_epochs", 3, 2, "had gone through 3 epochs"),
        ("max_steps", 12, 5, "had made 12 updates"),
    ],
)
def test_a_resume_past_the_plan_is_refused_and_writes_nothing(
    key: str,
    done: int,
    fewer: int,
    made: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """max_epochs: Lightning refused it (a traceback) only after the run's config.yaml,
    metrics and events had been rewritten for the new setting. max_steps: Lightning trained
    nothing and exited 0 ("fit finished in 0.0 min"), then tested again."""
    monkeypatch.chdir(tmp_path)
    main(TINY + QUIET + [f"--trainer.{key}", str(done)])
    (run_dir,) = run_dirs(tmp_path)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + [f"--trainer.{key}", str(fewer), "--ckpt_path", "last"])
    assert exit_info.value.code == 2
    last = run_dir.relative_to(tmp_path) / "checkpoints" / "last.ckpt"
    assert one_error_line(capsys.readouterr().err) == (
        f"error: --ckpt_path {last}: its run {made}, more than --trainer.{key} {fewer}; resume "
        f"with --trainer.{key} {done} or more (the run's own setting, if it was larger), or "
        "start a new run"
    )
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    assert run_dirs(tmp_path) == [run_dir]
    # the run's own setting resumes the finished run (it trains nothing more), as Lightning does
    again = main(TINY + QUIET + [f"--trainer.{key}", str(done), "--ckpt_path", "last"])
    trained = again.trainer.current_epoch if key == "max_epochs" else again.trainer.global_step
    assert trained == done


def test_a_resume_says_which_checkpoint_and_update_it_goes_on_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Lightning restored in silence: a new user could not tell a resume from a fresh run."""
    monkeypatch.chdir(tmp_path)
    main(TINY + QUIET + ["--trainer.max_steps", "3"])
    (run_dir,) = run_dirs(tmp_path)
    capsys.readouterr()
    resumed = main(TINY + QUIET + ["--trainer.max_steps", "5", "--ckpt_path", "last"])
    last = run_dir.relative_to(tmp_path) / "checkpoints" / "last.ckpt"
    out, err = capsys.readouterr()
    assert f"resuming from {last} at update 3\n" in out
    assert resumed.trainer.global_step == 5
    # what differs from the run's own settings is said (config.yaml now holds it), once
    notes = [line for line in err.splitlines() if "other than its run's" in line]
    assert notes == ["note: resuming with settings other than its run's: trainer.max_steps 3 -> 5"]
    main(TINY + QUIET + ["--trainer.max_steps", "5", "--ckpt_path", "last"])
    assert "other than its run's" not in capsys.readouterr().err  # the same settings: no note


def _other_moments(state: dict) -> None:
    state["optimizer_states"][0]["state"][0]["exp_avg"] = torch.zeros(3)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        # the fused AdamW kernel trusted them: the process crashed (SIGSEGV) at the first update
        (_other_moments, "its optimizer's 'exp_avg' of parameter 0 has shape (3,)"),
        # Lightning restored nothing and trained on with fresh moments, status 0
        (lambda s: s.update(optimizer_states=[]), "it does not hold the state of one optimizer"),
        # tracebacks from Lightning's restore
        (lambda s: s.update(loops={}), "its 'loops' entry has no 'fit_loop' state"),
        # Lightning counted the updates from 0 again, status 0
        (lambda s: s.pop("loops"), "its 'loops' entry has no 'fit_loop' state"),
        # Lightning's strict load_state_dict: a traceback, and a new run directory left behind
        (lambda s: s["state_dict"].popitem(), "its weights lack 'model."),
        (lambda s: s["state_dict"].update(extra=torch.zeros(1)), "have an unknown 'extra'"),
        (lambda s: s.update(callbacks=[1]), "its 'callbacks' entry is not a mapping"),
        (lambda s: s.update(lr_schedulers=[5]), "its 'lr_schedulers' entry is not a list"),
        (lambda s: s.update(lr_schedulers=[]), "the state of one learning-rate schedule"),
        (lambda s: s.update(global_step="x"), "its 'global_step' is 'x', not a whole number"),
    ],
    ids=[
        "moments",
        "no-optimizer",
        "loops",
        "no-loops",
        "missing-weight",
        "extra-weight",
        "callbacks",
        "schedulers",
        "no-schedule",
        "step",
    ],
)
def test_a_damaged_training_state_is_refused_before_the_resume_writes_anything(
    damage: Callable[[dict], None],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    main(TINY + QUIET + ["--trainer.max_steps", "3"])
    (run_dir,) = run_dirs(tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"
    state = torch.load(last, weights_only=True)
    damage(state)
    torch.save(state, last)
    before = {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + ["--trainer.max_steps", "6", "--ckpt_path", "last"])
    assert exit_info.value.code == 2
    error = one_error_line(capsys.readouterr().err)
    assert error.startswith(f"error: cannot resume from --ckpt_path {last.relative_to(tmp_path)}: ")
    assert message in error and error.endswith("or start a new run")
    assert {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()} == before
    assert run_dirs(tmp_path) == [run_dir]


def test_a_resume_from_what_is_not_a_minitx_checkpoint_is_refused_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Without minitx's entry, a resume skipped the model, tokenizer and language checks (and
    a plain dict was called a weights-only checkpoint)."""
    monkeypatch.chdir(tmp_path)
    main(TINY + QUIET + ["--trainer.max_steps", "3"])
    (run_dir,) = run_dirs(tmp_path)
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    state.pop(CHECKPOINT_KEY)
    torch.save(state, "no_minitx.ckpt")
    torch.save({"a": 1}, "a_dict.ckpt")
    for name in ("no_minitx.ckpt", "a_dict.ckpt"):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            main(TINY + QUIET + ["--trainer.max_steps", "6", "--ckpt_path", name])
        assert exit_info.value.code == 2
        error = one_error_line(capsys.readouterr().err)
        assert error.startswith(f"error: {name}: not a minitx checkpoint: it lacks the"), error
    assert run_dirs(tmp_path) == [run_dir]


def test_training_without_a_logger_leaves_out_the_rate_monitor_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The configs' LearningRateMonitor made Lightning refuse ``--trainer.logger false`` with
    a traceback once the fit had started."""
    monkeypatch.chdir(tmp_path)
    cli = main(TINY + QUIET + ["--trainer.logger", "false", "--trainer.max_steps", "3"])
    assert cli.trainer.global_step == 3 and cli.trainer.loggers == []
    assert not any(type(c).__name__ == "LearningRateMonitor" for c in cli.trainer.callbacks)
    assert "note: trainer.logger false: LearningRateMonitor left out" in capsys.readouterr().err


def test_a_tilde_the_shell_left_is_the_home_directory_in_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Was: runs_dir '~/runs' (quoted, or from a config file) split a run between the home
    directory (TensorBoard's events) and a folder named ~ here (the CSV, the checkpoints), and
    ended in Lightning's traceback; data.cache_dir and the commands' --out made a folder ~."""
    from minitx.cli.common import nonempty_path
    from minitx.data.datamodule import TranslationDataModule

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    cli = build_cli(TINY + ["--runs_dir", "~/runs", "--data.cache_dir", "~/cache"])
    assert cli.run_root == home / "runs" / "tiny"
    assert cli.datamodule.hparams.cache_dir == str(home / "cache")
    dm = TranslationDataModule(source=str(TOY_CORPUS_DIR), cache_dir="~/c")
    assert dm.hparams.cache_dir == str(home / "c")
    assert nonempty_path("~/rel") == home / "rel"
    assert nonempty_path("~no-such-user-here") == Path("~no-such-user-here")  # a name, as before
    assert not (tmp_path / "~").exists()


def test_a_dangling_link_as_a_directory_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Was "File exists", after the data was prepared (data.cache_dir), or before (runs_dir)."""
    from minitx.data.datamodule import TranslationDataModule

    monkeypatch.chdir(tmp_path)
    (tmp_path / "cache").symlink_to("nowhere")
    (tmp_path / "runs").symlink_to("elsewhere")
    with pytest.raises(ConfigError, match="cache is a link to nowhere, which does not exist"):
        TranslationDataModule(source=str(TOY_CORPUS_DIR), cache_dir="cache")
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET)
    assert exit_info.value.code == 2
    error = one_error_line(capsys.readouterr().err)
    assert "runs is a link to elsewhere, which does not exist; create that directory" in error


def test_an_empty_ckpt_path_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + ["--ckpt_path", ""])
    assert exit_info.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith("error: --ckpt_path is empty;")


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("runs_dir", "", "--runs_dir is empty;"),
        ("runs_dir", " ", "--runs_dir is empty;"),
        ("run_name", "", "--run_name is empty;"),
        ("run_name", ".", "--run_name .: give a name inside runs_dir"),
        ("run_name", "a/..", "--run_name a/..: give a name inside runs_dir"),
        ("run_name", "../elsewhere", "--run_name ../elsewhere: give a name inside runs_dir"),
    ],
)
def test_a_run_directory_outside_its_family_is_refused_in_one_line(
    key: str,
    value: str,
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """`--runs_dir "$RUNS"` with RUNS unset trained into ./tiny; an empty run name (or `.`), into
    the runs directory itself, beside the run families; `..`, outside it."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + [f"--{key}", value])
    assert exit_info.value.code == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"error: {message}")
    assert list(tmp_path.iterdir()) == []


def test_resume_last_without_a_previous_run_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="no .*last.ckpt to resume from"):
        build_cli(TINY + ["--ckpt_path", "last"])


@pytest.mark.parametrize(
    ("sig", "status", "reason"),
    [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_leaves_a_usable_last_checkpoint_and_a_nonzero_status(
    sig: int, status: int, reason: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), "--config", str(TINY_CONFIG),
        "--trainer.max_epochs", "100000",
        "--trainer.enable_progress_bar", "false", "--test", "false",
    ]  # fmt: skip
    with PreloadedProcess(cmd, cwd=tmp_path, env=env, merge_stderr=True) as proc:
        deadline = time.time() + 120
        while time.time() < deadline and not list(
            (tmp_path / "runs").glob("tiny/*/checkpoints/epoch*.ckpt")
        ):
            time.sleep(0.2)  # wait until training is well under way (first epoch done)
        assert proc.poll() is None, proc.output_so_far()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    (last,) = list((tmp_path / "runs").glob("tiny/*/checkpoints/last.ckpt"))
    relative = last.relative_to(tmp_path)
    assert (
        f"training interrupted ({reason}): saved {relative}; to resume, run the same command "
        f"with --ckpt_path {relative} added"
    ) in out
    what = "SIGTERM" if sig == signal.SIGTERM else "Ctrl-C"  # the second one of its kind
    assert f"{what}: stopping after this update or validation (a second {what} stops" in out
    assert proc.returncode == status, out[-2000:]  # not 0: the run did not finish
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] > 0
    assert Translator.from_pretrained(last).translate(["ein mann ."])[0] is not None


def test_a_reader_that_has_gone_or_a_full_disk_under_the_training_log(tmp_path: Path) -> None:
    """`minitx-train | head -1` ends with 141 and no traceback, `minitx-train > /dev/full` with
    one error line; both save last.ckpt first, as the inference commands end (README)."""
    env = {**subprocess_env(), "OMP_NUM_THREADS": "1"}
    env.pop("MINITX_DEBUG", None)
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *TINY, *QUIET]
    cmd += ["--trainer.max_epochs", "1"]  # one epoch line is enough to write into either
    reader, writer = os.pipe()
    os.close(reader)  # the reader has gone before the first epoch line
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=300
    )
    os.close(writer)
    assert proc.returncode == 141, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "error:" not in proc.stderr, proc.stderr
    assert "training interrupted (BrokenPipeError): saved" in proc.stderr
    assert len(list((tmp_path / "runs").glob("tiny/*/checkpoints/last.ckpt"))) == 1
    if not Path("/dev/full").exists():
        return
    with open("/dev/full", "w") as full:  # a real process: its exit-time flush is the point
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=env, stdout=full, stderr=subprocess.PIPE, text=True, timeout=300
        )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert one_error_line(proc.stderr).startswith("error: cannot write the output (standard")


def test_divergence_stops_at_the_step_with_a_clear_error_and_no_bad_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--model.optim.lr", "1000", "--trainer.enable_progress_bar", "false"]
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: training diverged at step" in err and "lower model.optim.lr" in err
    for path in (tmp_path / "runs").rglob("*.ckpt"):  # whatever was written is usable
        Translator.from_pretrained(path)


KILLED_DURING_SAVE = """
import sys, time
from pathlib import Path
import torch
from fsspec.implementations.local import LocalFileOpener
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

path, marker = Path(sys.argv[1]), Path(sys.argv[2])
io = TorchCheckpointIO()  # what Trainer.save_checkpoint uses
io.save_checkpoint({"step": 1, "w": torch.ones(1000)}, path)  # the good, older checkpoint
write = LocalFileOpener.write

def write_half_then_hang(self, data):
    write(self, bytes(data)[: len(data) // 2])
    self.flush()
    marker.write_text("writing")
    time.sleep(60)  # killed here, half of the new checkpoint on disk

LocalFileOpener.write = write_half_then_hang
io.save_checkpoint({"step": 2, "w": torch.zeros(100000)}, path)
"""


def test_a_kill_during_a_checkpoint_save_leaves_the_previous_file_loadable(
    tmp_path: Path,
) -> None:
    """Checkpoints are written to a temporary file and renamed (Lightning's fsspec
    transaction), so `kill -9` in the middle of a save never truncates last.ckpt."""
    path, marker = tmp_path / "last.ckpt", tmp_path / "marker"
    cmd = [sys.executable, "-c", KILLED_DURING_SAVE, str(path), str(marker)]
    with PreloadedProcess(cmd) as proc:
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the save never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["step"] == 1 and torch.equal(checkpoint["w"], torch.ones(1000))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--model.transformer.d_ff", "256"], r"model config differs .*d_ff: 128 -> 256"),
        (["--data.vocab_size", "100"], r"model config differs"),
        (["--data.source", "{other_corpus}"], r"tokenizer .* differs"),
        (
            ["--data.src_lang", "en", "--data.tgt_lang", "de"],  # the same joint tokenizer
            r"the checkpoint translates de->en, this run en->de",
        ),
        (["--model.optim.lr", "0.002"], r"optimizer settings \(model.optim.lr 0.005 -> 0.002\)"),
        (
            ["--model.optim.warmup_steps", "5"],
            r"optimizer settings \(model.optim.warmup_steps 20 -> 5\)",
        ),
        (["--seed_everything", "5"], r"another seed_everything \(0 -> 5\): a resumed run"),
        (  # every difference in one error: fixing the first, a user met the next
            ["--model.transformer.d_ff", "256", "--model.optim.lr", "0.002"],
            r"model config differs .*d_ff: 128 -> 256.*; and .*optimizer settings \(model.optim.lr",
        ),
    ],
    ids=["model", "vocabulary", "corpus", "languages", "rate", "warm-up", "seed", "model-and-rate"],
)
def test_resuming_with_other_settings_is_refused(
    change: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    common = TINY + ["--trainer.enable_progress_bar", "false", "--test", "false"]
    main(common + ["--trainer.max_epochs", "1"])
    capsys.readouterr()
    other_corpus = tmp_path / "other"  # the toy corpus with other training sentences
    shutil.copytree(TOY_CORPUS_DIR, other_corpus)
    for lang in ("de", "en"):
        lines = (other_corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        (other_corpus / f"train.{lang}").write_text("\n".join(lines[:30]) + "\n", encoding="utf-8")
    change = [arg.format(other_corpus=other_corpus) for arg in change]
    (run_dir,) = run_dirs(tmp_path)
    before = file_digests(run_dir)
    with pytest.raises(SystemExit) as exit_info:
        main(common + ["--trainer.max_epochs", "2", "--ckpt_path", "last", *change])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"error: cannot resume.*" + message, err), err[-2000:]
    # a refused resume writes nothing: config.yaml, metrics, events, checkpoints as they were
    assert file_digests(run_dir) == before


def test_a_run_seeded_at_random_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """`seed_everything: true` draws a seed at each start, says it and records it in the run's
    config.yaml (Lightning 2.6 took 0 for it, with its own warning, so every "random" run was
    the same run); the resume compares only a seed given as a number, so its draw is no other
    seed given."""
    monkeypatch.chdir(tmp_path)
    common = TINY + QUIET + ["--seed_everything", "true"]
    main(common + ["--trainer.max_steps", "3"])
    drawn = re.findall(
        r"the seed drawn is (\d+) \(--seed_everything \1 repeats", capsys.readouterr().err
    )
    (config,) = tmp_path.rglob("config.yaml")
    assert len(drawn) == 1 and f"seed_everything: {drawn[0]}\n" in config.read_text()
    resumed = main(common + ["--trainer.max_steps", "5", "--ckpt_path", "last"])
    assert resumed.trainer.global_step == 5
    again = re.findall(r"the seed drawn is (\d+)", capsys.readouterr().err)
    assert len(again) == 1 and again != drawn  # drawn afresh: 1 in 2^31 to fail


def file_digests(directory: Path) -> dict[str, str]:
    """sha256 of every file under `directory`, by relative path."""
    return {
        str(path.relative_to(directory)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


class InterruptValidation(Callback):
    """Ctrl-C (a SIGINT to this process), or `signum`, at batch `batch` of the first
    validation of the fit at step `step` or after."""

    def __init__(self, step: int, signum: int = signal.SIGINT, batch: int = 1) -> None:
        self.step, self.signum, self.batch = step, signum, batch
        self.sent = False

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, *args) -> None:
        due = trainer.global_step >= self.step and batch_idx == self.batch and not self.sent
        if due and not trainer.sanity_checking:
            self.sent = True
            os.kill(os.getpid(), self.signum)


def with_callback(monkeypatch: pytest.MonkeyPatch, callback: Callback) -> None:
    """The next `main()` fits with `callback` too (as --trainer.callbacks+= would add it)."""
    build = train_cli.build_cli

    def build_once(args: list[str] | None = None):
        monkeypatch.setattr(train_cli, "build_cli", build)
        cli = build(args)
        cli.trainer.callbacks.append(callback)
        return cli

    monkeypatch.setattr(train_cli, "build_cli", build_once)


@pytest.mark.parametrize(
    ("plan", "step"),
    [
        (["--trainer.max_epochs", "1"], 23),
        (["--trainer.max_steps", "30"], 30),
        (["--trainer.max_steps", "46", "--model.validation.validations_per_run", "4"], 46),
    ],
    ids=["epoch-end", "max-steps-inside-an-epoch", "validations-per-run"],
)
def test_a_ctrl_c_during_the_final_validation_stops_after_it(
    plan: list[str],
    step: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """Ctrl-C during the last validation (at the end of the last epoch, or where max_steps
    ends the run inside an epoch): the validation finishes, its scores are logged and the best
    checkpoint can come from it, then the process ends with 130 before the test; the same
    command with --ckpt_path last trains nothing more and scores the test."""
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "5", *plan]
    with_callback(monkeypatch, InterruptValidation(step))
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == 130
    assert "Ctrl-C: stopping after this update or validation" in capsys.readouterr().err
    (run_dir,) = run_dirs(tmp_path)
    final = [r for r in metrics(run_dir) if r.get("val/bleu") and int(r["step"]) == step - 1]
    assert len(final) == 1  # the validation ran to its end, logged at its step, once
    assert not (run_dir / "test.greedy.hyp").exists()

    resumed = main(args + ["--ckpt_path", "last"])
    out = capsys.readouterr().out
    assert resumed.trainer.global_step == step  # no update more
    rows = metrics(run_dir)
    assert len([r for r in rows if r.get("val/bleu") and int(r["step"]) == step - 1]) == 1
    trained = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert trained == list(range(step))
    best = Path(resumed.trainer.checkpoint_callback.best_model_path)
    assert best.is_file() and f"best checkpoint: {best}" in out
    assert re.search(r"^test \(10 sentences\), best checkpoint:$", out, re.M), out[-2000:]
    hypotheses = (run_dir / "test.greedy.hyp").read_text(encoding="utf-8").splitlines()
    assert len(hypotheses) == 10
    assert [r for r in rows if r.get("test/bleu_greedy")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "ctrl-c"])
def test_a_stop_while_a_new_run_prepares_its_data_says_so_and_leaves_no_run_directory(
    signum: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The data of a new run is prepared inside the fit, before the fit's own handlers: a
    SIGTERM there ended the process unsaid (status -15) and a Ctrl-C said nothing (130), each
    leaving an empty run directory."""
    from minitx.data.datamodule import TranslationDataModule

    setup = TranslationDataModule.setup

    def stopped(self: TranslationDataModule, stage: str) -> None:
        # else the SIGTERM would end the test run: Python's default for it
        assert callable(signal.getsignal(signum)), "a signal here ends the process unsaid"
        signal.raise_signal(signum)
        setup(self, stage)

    monkeypatch.setattr(TranslationDataModule, "setup", stopped)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main([*TINY, "--trainer.enable_progress_bar", "false"])
    sigterm = signum == signal.SIGTERM
    assert exit_info.value.code == (143 if sigterm else 130)
    what = "terminated (SIGTERM)" if sigterm else "interrupted (Ctrl-C)"
    assert f"{what} before training began: nothing was trained" in capsys.readouterr().err
    assert run_dirs(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handlers from before


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("cadence", ["mid-epoch", "epoch-end"])
def test_a_stop_during_a_validation_stops_after_it_and_the_resume_goes_on(
    signum: int,
    cadence: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """A 46-update plan validating every 12 updates (validations_per_run 4), or at the end of
    each 23-update epoch; Ctrl-C or SIGTERM during the first validation's first batch: it
    finishes, its best checkpoint is saved, the run stops before the next update (130 / 143),
    and the resume trains on from there (no update twice, none lost) and validates at the
    other points once each. A SIGTERM cut the validation short (Lightning's handler, put
    around minitx's, acted on it at the batch's end), and a Ctrl-C stopped before the best
    checkpoint was saved; the resume then ran the validation's end again, without scores
    (Lightning's warning that the monitored key is missing). The validation's progress line
    and examples were not printed."""
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "5"]
    args += ["--trainer.max_steps", "46", "--test", "false"]
    if cadence == "mid-epoch":
        args += ["--model.validation.validations_per_run", "4"]
    validated = [12, 24, 36, 46] if cadence == "mid-epoch" else [23, 46]
    with_callback(monkeypatch, InterruptValidation(1, signum, batch=0))
    with pytest.raises(SystemExit) as exit_info:
        main(args)
    assert exit_info.value.code == (143 if signum == signal.SIGTERM else 130)
    (run_dir,) = run_dirs(tmp_path)
    assert [int(r["step"]) + 1 for r in metrics(run_dir) if r.get("val/loss")] == validated[:1]
    assert [p.name for p in (run_dir / "checkpoints").glob("epoch*.ckpt")]  # the best so far
    out = capsys.readouterr().out  # that validation's examples, and its line inside an epoch
    assert f"validation examples, epoch 1 (step {validated[0]}," in out
    assert cadence == "epoch-end" or f"epoch 1/5 validation | step {validated[0]}/46 |" in out

    resumed = main(args + ["--ckpt_path", "last"])
    assert resumed.trainer.global_step == 46
    rows = metrics(run_dir)
    assert [int(r["step"]) + 1 for r in rows if r.get("val/loss")] == validated
    assert [int(r["step"]) for r in rows if r.get("train/loss")] == list(range(46))
    if cadence == "mid-epoch":  # at an epoch's end Lightning runs the epoch's end hooks again
        said = capsys.readouterr()
        assert "could not find the monitored key" not in said.out + said.err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("when", ["twice-in-a-validation", "in-the-update-before-it"])
def test_a_validation_a_stop_cuts_short_is_left_out_not_logged_with_part_of_its_batches(
    signum: int, when: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second signal inside a validation step, or one in the update before a validation
    (which Lightning's SIGTERM handling then cuts short): the resume leaves that validation out,
    and every validation it logs holds the scores of a run that never stopped. A second signal
    stopped inside the step: Lightning's resume ran the validation's remaining number of
    batches, from the loader's start, and logged their scores as the validation's."""
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "5"]
    args += ["--trainer.max_steps", "46", "--test", "false", "--data.eval_max_tokens", "64"]
    args += ["--model.validation.validations_per_run", "4"]  # at updates 12, 24, 36 and 46
    main(args + ["--run_name", "uninterrupted"])
    (uninterrupted,) = run_dirs(tmp_path, "uninterrupted")
    scores = [(r["step"], r["val/loss"], r["val/bleu"]) for r in metrics(uninterrupted)]
    scores = [score for score in scores if score[1]]
    assert len(scores) == 4

    def signals_in(patch: pytest.MonkeyPatch, name: str, step: int, times: int) -> None:
        """`times` signals, each inside a call of `TranslationModule.<name>` at `step`."""
        original, sent = getattr(TranslationModule, name), []

        def with_a_signal(self: TranslationModule, batch: Any, batch_idx: int) -> Any:
            if self.global_step == step and len(sent) < times and not self.trainer.sanity_checking:
                sent.append(batch_idx)
                os.kill(os.getpid(), signum)
            return original(self, batch, batch_idx)

        patch.setattr(TranslationModule, name, with_a_signal)

    with monkeypatch.context() as patch:  # undone before the resume
        if when == "twice-in-a-validation":
            signals_in(patch, "validation_step", step=12, times=2)  # its first two batches of 4
        else:
            signals_in(patch, "training_step", step=11, times=1)  # the 12th update
        with pytest.raises(SystemExit) as exit_info:
            main(args)
    assert exit_info.value.code == (143 if signum == signal.SIGTERM else 130)
    (run_dir,) = run_dirs(tmp_path, "tiny")
    resumed = main(args + ["--ckpt_path", "last"])
    assert resumed.trainer.global_step == 46
    rows = metrics(run_dir)
    assert [(r["step"], r["val/loss"], r["val/bleu"]) for r in rows if r["val/loss"]] == scores[1:]
    assert [int(r["step"]) for r in rows if r.get("train/loss")] == list(range(46))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_test_exits_130_or_143_and_the_resume_runs_it(
    signum: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Ctrl-C or SIGTERM during the test after training, in its second decoding: status 130 /
    143 with a note, no test score logged, and a resume, with nothing left to train, prints
    the best checkpoint (from the saved checkpoint state) and runs the test, whose scores are
    logged once. A SIGTERM there ended the process unsaid (SIGTERM's default), and the first
    decoding's scores, logged at once, were logged again by the resume."""
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1"]
    decodings, evaluate = [], evaluation.evaluate

    def stopped_in_the_second(*args: Any, **kwargs: Any) -> Any:
        decodings.append(args[3].strategy)
        if len(decodings) == 2:
            # else the SIGTERM would end the test run: Python's default for it
            assert callable(signal.getsignal(signum)), "a signal here ends the process unsaid"
            signal.raise_signal(signum)
        return evaluate(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(evaluation, "evaluate", stopped_in_the_second)
        try:
            main(args)
        except KeyboardInterrupt:
            pytest.fail("a stop during the test ended the command with a traceback")
        except SystemExit as exit_info:
            assert exit_info.code == (143 if signum == signal.SIGTERM else 130)
        else:
            pytest.fail("the interrupted command exited 0")
    what = "terminated (SIGTERM)" if signum == signal.SIGTERM else "interrupted (Ctrl-C)"
    err = capsys.readouterr().err
    assert decodings == ["greedy", "beam"]
    (run_dir,) = run_dirs(tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"  # the path, as a stopped fit names it
    assert f"test {what}: the training is finished and saved; the same command with " in err
    assert f"--ckpt_path {last.relative_to(tmp_path)} runs the test again" in err, err
    assert not [r for r in metrics(run_dir) if r.get("test/bleu_greedy")]
    assert not (run_dir / "test.beam5.hyp").exists()

    resumed = main(args + ["--ckpt_path", "last"])
    out = capsys.readouterr().out
    best = Path(resumed.trainer.checkpoint_callback.best_model_path)
    assert best.is_file() and best.name.startswith("epoch00") and f"best checkpoint: {best}" in out
    assert "test (10 sentences), best checkpoint:" in out
    assert len((run_dir / "test.beam5.hyp").read_text(encoding="utf-8").splitlines()) == 10
    tested = [r for r in metrics(run_dir) if r.get("test/bleu_greedy") or r.get("test/bleu_beam5")]
    assert len(tested) == 1 and tested[0]["test/bleu_greedy"] and tested[0]["test/bleu_beam5"]


def test_a_finished_run_with_averaging_resumed_tests_its_average_again_and_logs_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A run with `averaging.last_n` resumed when finished (nothing left to train: it was
    stopped in its test, say) tests the average it wrote at its end, as the run did; its test
    scores are in the history once. It tested the best checkpoint, which replaced the test's
    hypotheses, and added a second row of test scores. Without the average, a note says that
    the best checkpoint is tested."""
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "2"]
    args += ["--averaging.last_n", "2"]

    def tested(run_dir: Path) -> list[dict[str, str]]:
        keys = ("test/bleu_greedy", "test/chrf_greedy", "test/bleu_beam5", "test/chrf_beam5")
        return [{k: r[k] for k in keys} for r in metrics(run_dir) if r.get("test/bleu_greedy")]

    main(args)
    (run_dir,) = run_dirs(tmp_path)
    averaged = run_dir / "checkpoints" / "averaged.ckpt"
    said = f"averaged checkpoint {averaged.relative_to(tmp_path)}:"
    assert said in capsys.readouterr().out
    scores, hypotheses = tested(run_dir), (run_dir / "test.greedy.hyp").read_text()
    assert len(scores) == 1

    main(args + ["--ckpt_path", "last"])
    assert said in capsys.readouterr().out
    assert tested(run_dir) == scores
    assert (run_dir / "test.greedy.hyp").read_text() == hypotheses

    averaged.unlink()
    main(args + ["--ckpt_path", "last"])
    said = capsys.readouterr()
    assert "test (10 sentences), best checkpoint:" in said.out
    assert "note: no averaged checkpoint of this run's end" in said.err
    assert len(tested(run_dir)) == 1


def test_the_training_test_hypotheses_stay_line_aligned_with_the_test_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A whitespace-only line in the test split is not scored, and gets an empty line in the
    training's test.*.hyp, as in minitx-evaluate's: 10 lines for 10 sources."""
    corpus = corpus_copy(tmp_path)
    sources = (corpus / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    sources[3] = "  \t "
    (corpus / "test_2016_flickr.de").write_text("\n".join(sources) + "\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = ["--trainer.enable_progress_bar", "false", "--trainer.max_epochs", "1"]
    main(TINY + args + ["--data.source", str(corpus)])
    out = capsys.readouterr().out
    assert "test (9 sentences; 1 of 10 lines not scored: an empty side)" in out, out[-2000:]
    (run_dir,) = run_dirs(tmp_path)
    for decoding in ("greedy", "beam5"):
        lines = (run_dir / f"test.{decoding}.hyp").read_text(encoding="utf-8").split("\n")
        assert len(lines) == len(sources) + 1 and lines[-1] == ""
        assert lines[3] == "" and all(lines[i] for i in range(len(sources)) if i != 3)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"train.de": "a\nb\n", "train.en": "a\n"}, r"line"),
        ({"train.de": b"ok\n\xff\n", "train.en": "ok\nfine\n"}, r"not valid UTF-8"),
        ({}, r"not found|no such|missing"),
    ],
    ids=["unequal-lines", "bad-utf8", "missing-files"],
)
def test_bad_corpus_through_the_training_command_is_one_error_line(
    files: dict, message: str, tmp_path: Path
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for stem in ("val", "test_2016_flickr"):
        for lang in ("de", "en"):
            (corpus / f"{stem}.{lang}").write_text("ein satz\n" if lang == "de" else "a sentence\n")
    for name, content in files.items():
        path = corpus / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    if not files:
        corpus = tmp_path / "no_such_dir"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("MINITX_DEBUG", None)
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *TINY, "--data.source", str(corpus)]
    proc = run_python(cmd, cwd=tmp_path, env=env, timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.search(message, errors[0], re.I), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ divergence


def test_a_bad_batch_is_skipped_only_when_allowed() -> None:
    """`configure_gradient_clipping` sees a non-finite gradient norm before the optimizer
    step: with skips left it unsets every gradient (so the optimizer updates nothing),
    otherwise it stops the run."""
    sizes = {"src_vocab_size": 50, "tgt_vocab_size": 50, "d_model": 16, "n_heads": 2, "d_ff": 32}
    module = TranslationModule(sizes, OptimConfig(skip_bad_batches=1))
    optimizer = torch.optim.AdamW(module.parameters(), lr=1.0)
    module.log = lambda *args, **kwargs: None  # no Trainer attached
    before = [p.detach().clone() for p in module.parameters()]
    for p in module.parameters():
        p.grad = torch.ones_like(p)
    next(module.parameters()).grad[0] = float("nan")
    module.configure_gradient_clipping(optimizer, gradient_clip_val=1.0)
    assert all(p.grad is None for p in module.parameters())
    optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, module.parameters(), strict=True))
    for p in module.parameters():
        p.grad = torch.full_like(p, float("inf"))
    with pytest.raises(DivergenceError, match="after skipping 1 bad batches: the gradient norm"):
        module.configure_gradient_clipping(optimizer, gradient_clip_val=1.0)


def test_skip_bad_batches_counts_then_stops(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    args = ["--model.optim.lr", "1000", "--model.optim.skip_bad_batches", "3"]
    with caplog.at_level(logging.WARNING, logger="minitx"), pytest.raises(SystemExit) as exit_info:
        main(TINY + QUIET + args)
    assert exit_info.value.code == 2
    assert "after skipping 3 bad batches" in one_error_line(capsys.readouterr().err)
    assert len(re.findall(r"batch skipped, no update \(\d of at most 3", caplog.text)) == 3
    for path in tmp_path.rglob("*.ckpt"):  # whatever was written is usable
        Translator.from_pretrained(path)


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_a_nan_loss_is_skipped_and_counted_when_allowed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    recwarn: pytest.WarningsRecorder,
) -> None:
    """A training batch whose loss is NaN is skipped (logged once in minitx's words, not also
    in Lightning's, no update) and the run goes on; each epoch's metrics count the skips in
    train/skipped_batches."""
    monkeypatch.chdir(tmp_path)
    losses, seen = TranslationModule._losses, []

    def nan_on_the_second_training_batch(self, batch):
        loss, nll, n_tokens = losses(self, batch)
        seen.append(self.training)
        if self.training and seen.count(True) == 2:
            loss = loss * float("nan")
        return loss, nll, n_tokens

    monkeypatch.setattr(TranslationModule, "_losses", nan_on_the_second_training_batch)
    args = ["--trainer.max_epochs", "2", "--model.optim.skip_bad_batches", "1"]
    with caplog.at_level(logging.WARNING, logger="minitx"):
        main(TINY + QUIET + args)
    skips = re.findall(
        r"step \d+: the loss is nan; batch skipped, no update \(1 of at most 1", caplog.text
    )
    assert len(skips) == 1, caplog.text
    assert not [w for w in recwarn if "returned `None`" in str(w.message)]
    [metrics] = tmp_path.glob("runs/tiny/*/csv/metrics.csv")
    counts = [r["train/skipped_batches"] for r in csv.DictReader(metrics.open(encoding="utf-8"))]
    assert [float(c) for c in counts if c] == [1.0, 1.0]  # one per epoch: a running count


def stand_in_trainer(
    directory: Path, saved: list[tuple[Path, bool]], *, rank_zero: bool = True
) -> SimpleNamespace:
    """What `CheckpointOnInterrupt.on_exception` reads of a trainer 5 updates in, saving
    into `directory`; each save is appended to `saved`."""
    return SimpleNamespace(
        checkpoint_callback=SimpleNamespace(dirpath=str(directory)),
        global_step=5,
        train_dataloader=None,
        is_global_zero=rank_zero,
        save_checkpoint=lambda path, weights_only: saved.append((Path(path), weights_only)),
    )


@pytest.mark.parametrize("finite", [True, False])
def test_an_error_saves_last_ckpt_unless_the_weights_are_not_finite(
    finite: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run stopped by an exception saves its state in last.ckpt, to resume from; weights
    that are NaN or infinite would make a resume fail at once, so last.ckpt keeps the last good
    state then, and the log says why."""
    from minitx.training.callbacks import CheckpointOnInterrupt

    saved: list[tuple[Path, bool]] = []
    trainer = stand_in_trainer(tmp_path, saved)
    module = torch.nn.Linear(2, 2)
    if not finite:
        with torch.no_grad():
            module.weight[0, 0] = float("inf")
    with caplog.at_level(logging.ERROR, logger="minitx"):
        CheckpointOnInterrupt().on_exception(trainer, module, RuntimeError("boom"))
    if finite:
        assert saved == [(tmp_path / "last.ckpt", False)] and not caplog.records
    else:
        assert saved == []
        assert "weights are not finite: last.ckpt left as it was (RuntimeError)" in caplog.text


def test_skip_bad_batches_is_refused_under_ddp(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank that skipped a batch would leave the others waiting in the gradient all-reduce."""
    sizes = {"src_vocab_size": 50, "tgt_vocab_size": 50, "d_model": 16, "n_heads": 2, "d_ff": 32}
    module = TranslationModule(sizes, OptimConfig(skip_bad_batches=1))
    two_ranks = type("Trainer", (), {"world_size": 2, "datamodule": None})()
    monkeypatch.setattr(module, "_attached_trainer", lambda: two_ranks)
    with pytest.raises(ConfigError, match="skip_bad_batches works in single-process training"):
        module.setup("fit")


# ------------------------------------------------------------------ inference never loses a line

ODD_LINES = [
    "Ein Mann fährt Fahrrad.",
    " ".join(["Mann"] * LONG_WORDS),  # longer than the model's positions
    "",
    "\t  ",
    "Zwei Hunde 🐕🐕 spielen \u200b im Schnee.",
    "x" * 3000,  # one long "word"
    "<script>alert(1)</script> $5$ \\n",
]


def test_long_and_odd_lines_each_get_their_own_output_line(
    tiny_checkpoint: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    source = tmp_path / "in.de"
    source.write_text("\n".join(ODD_LINES) + "\n", encoding="utf-8")
    output = tmp_path / "out.en"
    argv = ["--checkpoint", str(tiny_checkpoint), "--input", str(source), "--output", str(output)]
    assert translate_cli.main([*argv, "--beam", "1"]) == 0
    lines = output.read_text(encoding="utf-8").split("\n")
    assert len(lines) == len(ODD_LINES) + 1 and lines[-1] == ""
    assert lines[2] == lines[3] == ""  # empty in, empty out
    assert lines[0] and lines[1] and lines[4] and lines[6]
    err = capsys.readouterr().err
    assert re.search(r"1 of 7 sentences have more than 1023 pieces.* \(line 2\)", err), err


def test_the_output_file_is_replaced_only_when_every_line_is_translated(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    output = tmp_path / "out.en"
    output.write_text("the previous translations\n", encoding="utf-8")
    argv = ["--checkpoint", str(tiny_checkpoint), "--output", str(output), "Ein Hund."]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Translator, "translate_n_best", interrupted)  # what the command calls
        assert translate_cli.main(argv) == 130
    assert output.read_text(encoding="utf-8") == "the previous translations\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.en"]  # no temporary file left
    assert translate_cli.main(argv) == 0
    assert output.read_text(encoding="utf-8") != "the previous translations\n"
    assert oct(output.stat().st_mode & 0o777) == oct(0o666 & ~current_umask())


def test_a_replaced_output_file_keeps_its_mode(tiny_checkpoint: Path, tmp_path: Path) -> None:
    """A private file (0600) became readable by all (0666 less the umask) when replaced; a
    shell's ``>`` keeps the mode, and so does a command's --output now."""
    output = tmp_path / "private.en"
    output.write_text("secret\n", encoding="utf-8")
    output.chmod(0o600)
    argv = ["--checkpoint", str(tiny_checkpoint), "--output", str(output), "Ein Hund."]
    assert translate_cli.main(argv) == 0
    assert output.read_text(encoding="utf-8") != "secret\n"
    assert oct(output.stat().st_mode & 0o777) == oct(0o600)


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_non_utf8_argument_is_one_error_line(tiny_checkpoint: Path) -> None:
    cmd = [sys.executable, "-m", "minitx.cli.translate", "--checkpoint"]
    cmd += [str(tiny_checkpoint), b"Ein \xff Mann"]
    env = {**subprocess_env(), "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 2
    assert "SENTENCE argument 1 is not valid UTF-8 (byte 0xff" in one_error_line(proc.stderr)


def test_utf8_typed_under_an_ascii_locale_is_read_as_typed() -> None:
    """Under ``LC_ALL=C`` with UTF-8 mode off, Python keeps the bytes of "läuft" as lone
    surrogates; they were refused as "not valid UTF-8 (byte 0xc3)", though they are."""
    from minitx.textio import utf8_arguments

    typed = "Ein Hund läuft.".encode()
    as_ascii_locale_decodes = typed.decode("ascii", "surrogateescape")
    assert as_ascii_locale_decodes != "Ein Hund läuft."
    assert os.fsencode(as_ascii_locale_decodes) == typed  # what the helper reads back
    assert utf8_arguments({"SENTENCE": as_ascii_locale_decodes, "b": "ok"}) == [
        "Ein Hund läuft.",
        "ok",
    ]
    with pytest.raises(UsageError, match=r"S is not valid UTF-8 \(byte 0xe9 at character 4\)"):
        utf8_arguments({"S": "caf\udce9 x"})


def test_visualize_suggests_only_what_it_has_for_a_non_utf8_sentence(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """minitx-visualize has no --input, which the message suggested."""
    from minitx.cli import visualize

    argv = ["--checkpoint", str(tiny_checkpoint), "caf\udce9", "--out-dir", str(tmp_path / "m")]
    assert visualize.main(argv) == 2
    error = one_error_line(capsys.readouterr().err)
    assert "SENTENCE is not valid UTF-8 (byte 0xe9" in error and "--input" not in error, error


def test_evaluate_keeps_every_line_of_the_source_file(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    corpus = corpus_copy(tmp_path)
    src = (corpus / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    ref = (corpus / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    src[1], ref[1] = " ".join(["Mann"] * LONG_WORDS), "a man"
    src[3] = ""  # an empty side: not scored, an empty hypothesis line
    (corpus / "test_2016_flickr.de").write_text("\n".join(src) + "\n", encoding="utf-8")
    (corpus / "test_2016_flickr.en").write_text("\n".join(ref) + "\n", encoding="utf-8")
    hyp = tmp_path / "hyp.txt"
    argv = ["--checkpoint", str(tiny_checkpoint), "--data", str(corpus), "--hyp-out", str(hyp)]
    assert evaluate_cli.main([*argv, "--beam", "1"]) == 0
    lines = hyp.read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(src) and lines[3] == "" and lines[1]
    err = capsys.readouterr().err
    assert f"scoring {len(src) - 1} of {len(src)} pairs" in err
    assert "1 of" in err and "more than 1023 pieces" in err


def test_attention_images_of_a_long_sentence_have_a_bounded_size(
    tiny_checkpoint: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    sentence = " ".join(["Mann"] * LONG_WORDS)
    argv = ["--checkpoint", str(tiny_checkpoint), "--out-dir", str(tmp_path), "--beam", "1"]
    assert visualize_cli.main([sentence, *argv, "--kinds", "encoder", "--dpi", "100"]) == 0
    png = sorted(tmp_path.glob("encoder_layer*.png"))[0]
    with Image.open(png) as image:
        width, height = image.size
    assert width <= 3000 and height <= 3000  # 1024 x 1024 tokens, drawn at 8 inches a side
    assert (tmp_path / "attention.html").stat().st_size > 1_000_000  # the viewer has it all
    assert "more than the model's 1024 positions" in capsys.readouterr().err


def test_a_heatmap_of_720_tokens_is_small_enough_to_open() -> None:
    n = 720
    weights = torch.softmax(torch.randn(4, n, n), dim=-1)
    tokens = [f"\u2581piece{i}" for i in range(n)]
    figure = plot_attention_heads(weights, tokens, tokens)
    width, height = figure.get_size_inches() * 100
    assert width * height < Image.MAX_IMAGE_PIXELS  # Pillow opens it (was 30,418 px a side)
    assert width < 4000 and height < 4000
    labels = figure.axes[0].get_xticklabels()
    assert 20 <= len(labels) <= 60  # every k-th token labelled


def test_a_users_csv_logger_resumed_keeps_its_rows_prefix_and_flush(tmp_path: Path) -> None:
    """`continuing_loggers` puts a ContinuingCSVLogger in place of Lightning's CSVLogger (which
    deletes metrics.csv) with the same file, key prefix and flush interval."""
    from lightning.pytorch.loggers import CSVLogger

    from minitx.training.loggers import ContinuingCSVLogger, continuing_loggers

    args = {
        "save_dir": str(tmp_path),
        "name": "n",
        "version": "v",
        "prefix": "p",
        "flush_logs_every_n_steps": 1,
    }
    metrics = tmp_path / "n" / "v" / "metrics.csv"
    metrics.parent.mkdir(parents=True)
    metrics.write_text("step,p-a\n0,1.0\n1,2.0\n2,3.0\n3,4.0\n", encoding="utf-8")
    [logger] = continuing_loggers([CSVLogger(**args)], [args], resume_step=1)
    assert isinstance(logger, ContinuingCSVLogger)
    logger.log_metrics({"a": 5.0}, step=2)  # written at once: a flush every step
    rows = list(csv.DictReader(metrics.open(encoding="utf-8")))
    assert [(r["step"], r["p-a"]) for r in rows] == [("0", "1.0"), ("1", "2.0"), ("2", "5.0")]


@pytest.mark.parametrize("prefix", ["", "p"])
def test_a_resume_from_an_older_checkpoint_drops_the_next_updates_rows_at_its_step(
    prefix: str, tmp_path: Path
) -> None:
    """A last.ckpt older than the history (a stop whose write was cut short): the rows at its
    step 30 that the next update logged (its learning rate, its loss) were kept and logged
    again by the resume. The rows of the validation and maps at that step stay."""
    from minitx.training.loggers import ContinuingCSVLogger

    key = (lambda name: f"{prefix}-{name}") if prefix else (lambda name: name)
    names = ["lr-AdamW/pg1", "train/loss", "attention_entropy/cross", "test/bleu", "val/bleu"]
    header = ["step", *map(key, names)]
    rows = [
        (29, "train/loss"),
        (29, "val/bleu"),
        (30, "attention_entropy/cross"),
        (30, "lr-AdamW/pg1"),
        (30, "train/loss"),
        (30, "test/bleu"),
        (31, "train/loss"),
    ]
    metrics = tmp_path / "csv" / "metrics.csv"
    metrics.parent.mkdir()
    with metrics.open("w", newline="", encoding="utf-8") as file:
        writer = csv.DictWriter(file, fieldnames=header)
        writer.writeheader()
        writer.writerows({"step": step, key(name): 1.0} for step, name in rows)
    logger = ContinuingCSVLogger(str(tmp_path), version="csv", resume_step=30, prefix=prefix)
    logger.save()
    kept = [
        (int(r["step"]), next(name for name in names if r[key(name)]))
        for r in csv.DictReader(metrics.open(encoding="utf-8"))
    ]
    assert kept == [(29, "train/loss"), (29, "val/bleu"), (30, "attention_entropy/cross")]


def test_a_resume_that_max_epochs_ends_before_its_new_step_plan_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A run its step plan ended inside an epoch, resumed with a larger plan: Lightning counts
    the cut epoch as done, so the tiny config's 2 epochs end it at update 23 of 40. It ended
    with status 0 and no word of it; the closing line now names the bound."""
    monkeypatch.chdir(tmp_path)
    args = [*TINY, "--trainer.enable_progress_bar", "false", "--test", "false"]
    main([*args, "--trainer.max_steps", "10"])
    capsys.readouterr()
    resumed = main([*args, "--trainer.max_steps", "40", "--ckpt_path", "last"])
    out = capsys.readouterr().out
    step = resumed.trainer.global_step
    assert step < 40  # Lightning's count: with it, the note below must be there
    closing = next(line for line in out.splitlines() if line.startswith("fit finished"))
    assert (
        f", stopped by trainer.max_epochs (2) after {step} of trainer.max_steps' 40 updates "
        "(a larger max_epochs trains on);" in closing
    ), closing


@pytest.mark.parametrize("rank_zero", [True, False])
def test_the_checkpoint_saved_on_a_stop_is_said_by_one_process(
    rank_zero: bool, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Under DDP every process saves last.ckpt on a stop (the save is a collective), and each
    said so: the same line once per process."""
    from minitx.training.callbacks import CheckpointOnInterrupt

    saved: list[tuple[Path, bool]] = []
    trainer = stand_in_trainer(tmp_path, saved, rank_zero=rank_zero)
    with caplog.at_level(logging.WARNING, logger="minitx.training.callbacks"):
        CheckpointOnInterrupt().on_exception(trainer, torch.nn.Linear(2, 2), KeyboardInterrupt())
    assert saved == [(tmp_path / "last.ckpt", False)]  # every process takes part in the save
    said = [r.getMessage() for r in caplog.records if "training interrupted" in r.getMessage()]
    assert len(said) == (1 if rank_zero else 0), said
