"""The training command (minitx-train): configs, run directories, logging, checkpoints,
resume, interrupts, precision, DDP.

Fast: everything trains the tiny config on the toy corpus (minitx/data/toy); the smoke-fit
tests share the session's one tiny run (conftest.py).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import (
    CONFIG_DIR,
    NO_MAPS,
    REPO_DIR,
    TINY_CONFIG,
    TOY_CORPUS_DIR,
    TOY_TEST_REFERENCES,
    TinyRun,
    subprocess_env,
    train_tiny,
)
from lightning.pytorch.callbacks import Timer
from preloaded import run_python
from sacrebleu.metrics import BLEU

from minitx.checkpoint import CHECKPOINT_KEY, load_checkpoint
from minitx.cli.train import build_cli, main
from minitx.training import precision
from minitx.translator import Translator

REPO = REPO_DIR
CONFIGS = sorted(CONFIG_DIR.glob("*.yaml"))
TINY = ["--config", str(TINY_CONFIG)]


def run_dirs(root: Path, name: str = "tiny") -> list[Path]:
    return sorted((root / "runs" / name).glob("*"))


def metrics(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "csv" / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


def logged(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key)]


# ---------------------------------------------------------------------------- configs


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_config_parses_and_instantiates(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--config", str(config), "--trainer.logger", "false"])
    vocab = cli.datamodule.hparams.vocab_size
    assert cli.model.model_config.src_vocab_size == cli.model.model_config.tgt_vocab_size == vocab
    assert cli.model.model.config.d_model == cli.config.model.transformer.d_model


@pytest.mark.parametrize("name", [p.stem for p in CONFIGS])
def test_packaged_config_by_name(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--config", name, "--trainer.logger", "false"])
    expected = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    assert cli.config.run_name == expected.get("run_name", "multi30k_de_en")  # long: a recipe


def test_the_short_config_flag_takes_a_packaged_name_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--help` shows ``-c CONFIG, --config CONFIG``: both take a packaged name."""
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["-c", "tiny", "--trainer.logger", "false"])
    assert cli.config.run_name == "tiny"


def test_run_name_alone_names_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--config", "tiny", "--run_name", "mine", "--runs_dir", "out"])
    tb, csv_logger = cli.trainer.loggers
    assert Path(tb.log_dir).parent == Path("out") / "mine"
    assert Path(csv_logger.log_dir) == Path(tb.log_dir) / "csv"


def test_the_progress_bar_shows_no_version_number(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a terminal the rich bar is minitx's: Lightning's `v_num` (the logger version's last
    four characters, e.g. `_csv`) is dropped; the logged metrics stay."""
    from lightning.pytorch.callbacks import RichProgressBar

    from minitx.training import MinitxProgressBar

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    cli = build_cli(["--config", "tiny"])
    bar = cli.trainer.progress_bar_callback
    assert isinstance(bar, MinitxProgressBar)
    assert "v_num" in RichProgressBar.get_metrics(bar, cli.trainer, cli.model)  # Lightning's
    assert "v_num" not in bar.get_metrics(cli.trainer, cli.model)


def test_configs_do_not_repeat_loggers_or_callbacks() -> None:
    for path in CONFIGS:
        if path.name == "multi30k_de_en.yaml":
            continue
        trainer = yaml.safe_load(path.read_text()).get("trainer") or {}
        assert "logger" not in trainer and "callbacks" not in trainer, path.name


def test_default_config_is_found_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--trainer.logger", "false"])
    defaults = yaml.safe_load((CONFIG_DIR / "multi30k_de_en.yaml").read_text())
    assert cli.config.data.src_lang == defaults["data"]["src_lang"] == "de"
    assert cli.config.trainer.precision == defaults["trainer"]["precision"]
    assert cli.config.run_name == defaults["run_name"] == "multi30k_de_en"


PAIR_CONFIGS = sorted(
    p.stem for p in CONFIGS if p.stem.startswith("multi30k_") and p.stem != "multi30k_de_en"
)


@pytest.mark.parametrize("name", PAIR_CONFIGS)
def test_a_pair_config_changes_only_the_languages_and_run_name(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`multi30k_X_Y` trains X -> Y with the default recipe: every other key is the default's."""
    monkeypatch.chdir(tmp_path)
    default = build_cli(["--trainer.logger", "false"]).config
    cli = build_cli(["--config", name, "--trainer.logger", "false"])
    src, tgt = name.split("_")[1:]
    assert (cli.config.data.src_lang, cli.config.data.tgt_lang, cli.config.run_name) == (
        src,
        tgt,
        name,
    )
    assert cli.config.model == default.model and cli.config.trainer == default.trainer
    changed = {k for k, v in vars(default.data).items() if vars(cli.config.data)[k] != v}
    assert changed == {"src_lang", "tgt_lang"} - ({"tgt_lang"} if tgt == "en" else set())


def test_the_default_is_the_20_minute_recipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 11: the default config's max_time is the 20-minute budget, and its plan and
    settings reach the Trainer, the data and the model, not just the config. The model,
    optimisation and data settings are the code's defaults (tests/test_defaults.py)."""
    monkeypatch.chdir(tmp_path)
    defaults = yaml.safe_load((CONFIG_DIR / "multi30k_de_en.yaml").read_text())
    cli = build_cli(["--trainer.logger", "false"])
    assert cli.config.trainer.max_time == defaults["trainer"]["max_time"] == "00:00:20:00"
    assert cli.trainer.max_steps == defaults["trainer"]["max_steps"] == 15000  # the step plan
    assert cli.trainer.max_epochs == defaults["trainer"]["max_epochs"] == -1  # no bound
    assert cli.datamodule.hparams.max_tokens == 1024
    assert cli.model.model_config.d_ff == 512
    assert cli.model.model_config.dropout == 0.1
    assert cli.model.optim.fused
    optim = cli.model.optim
    assert (optim.schedule, optim.warmup_steps, optim.lr) == ("budget", 100, 0.0015)
    assert cli.model.validation.validations_per_run == 10


def _flat(tree: dict, prefix: str = "") -> dict[str, object]:
    """{"a.b": value} for every leaf of a nested dict."""
    flat: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def test_the_long_recipe_changes_exactly_the_keys_it_lists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--config long` is the default with the 45-minute recipe's keys and nothing else."""
    monkeypatch.chdir(tmp_path)
    listed = _flat(yaml.safe_load((CONFIG_DIR / "long.yaml").read_text()))
    default = _flat(build_cli(["--trainer.logger", "false"]).config.as_dict())
    long = _flat(build_cli(["--config", "long", "--trainer.logger", "false"]).config.as_dict())
    changed = {key for key in default if key != "config" and long[key] != default[key]}
    assert changed == set(listed)
    assert all(long[key] == value for key, value in listed.items())


def test_the_long_recipe_goes_on_top_of_a_language_pair(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--config multi30k_fr_en --config long`: French -> English with the 45-minute recipe."""
    monkeypatch.chdir(tmp_path)
    long = yaml.safe_load((CONFIG_DIR / "long.yaml").read_text())
    args = ["--config", "multi30k_fr_en", "--config", "long", "--trainer.logger", "false"]
    cli = build_cli(args)
    config = cli.config
    assert (config.data.src_lang, config.data.tgt_lang, config.run_name) == (
        "fr",
        "en",
        "multi30k_fr_en",
    )
    assert config.trainer.max_time == long["trainer"]["max_time"] == "00:00:45:00"
    assert cli.trainer.max_steps == long["trainer"]["max_steps"] == -1  # epochs decide
    assert cli.trainer.max_epochs == long["trainer"]["max_epochs"] == 16
    assert cli.datamodule.hparams.max_tokens == long["data"]["max_tokens"] == 2048
    assert cli.model.model_config.d_ff == long["model"]["transformer"]["d_ff"] == 1024
    assert cli.model.model_config.dropout == 0.1  # the paper's P_drop, the default's too
    assert cli.model.optim.schedule == long["model"]["optim"]["schedule"] == "inverse_sqrt"
    assert cli.model.optim.warmup_steps == long["model"]["optim"]["warmup_steps"] == 1000


def test_the_shipped_language_pairs_have_configs() -> None:
    assert {"multi30k_en_de", "multi30k_fr_en", "multi30k_en_fr", "multi30k_cs_en"} <= set(
        PAIR_CONFIGS
    )


def test_dotted_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(
        [
            "--trainer.max_steps",
            "3000",
            "--trainer.max_epochs",
            "6",
            "--model.transformer.dropout",
            "0.25",
            "--trainer.logger",
            "false",
        ]
    )
    assert (cli.trainer.max_steps, cli.trainer.max_epochs) == (3000, 6)  # the default: 15000, -1
    assert cli.model.model.config.dropout == 0.25


def test_a_section_in_jsonargparse_class_form_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`class_path` and `init_args`, as jsonargparse writes a class's settings, are settings
    (the check of a config file's keys reads init_args as the section's keys)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.yaml").write_text(
        "model:\n  transformer:\n    class_path: minitx.model.TransformerConfig\n"
        "    init_args: {d_model: 64, n_heads: 2}\n"
    )
    cli = build_cli(["--config", str(TINY_CONFIG), "--config", "c.yaml"])
    assert (cli.model.model.config.d_model, cli.model.model.config.n_heads) == (64, 2)


@pytest.mark.parametrize(
    "text,key",
    [
        ("model:\n  d_modle: 3\n", "d_modle"),
        ("model:\n  transformer:\n    d_modle: 3\n", "d_modle"),
        ("data:\n  vocab: 3\n", "vocab"),
        ("trainer:\n  max_epoch: 3\n", "max_epoch"),
    ],
    ids=["model", "model.transformer", "data", "trainer"],
)
def test_unknown_config_keys_fail(
    text: str,
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    """One error line that names the file and the key (jsonargparse's named no file)."""
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(SystemExit) as exc:
        main(["--config", str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --config {bad}: ") and err.count("\n") == 1, err
    assert f".{key} is not a setting" in err


def test_invalid_model_value_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises((ValueError, SystemExit)) as exc:
        build_cli(["--model.transformer.n_heads", "3", "--trainer.logger", "false"])
    assert "divisible" in str(exc.value) or exc.type is SystemExit


# ---------------------------------------------------------------------------- smoke fit


def test_smoke_fit_logs_loss_bleu_chrf_perplexity_lr(tiny_run: TinyRun) -> None:
    rows = metrics(tiny_run.run_dir)
    for key in (
        "train/loss",
        "val/loss",
        "val/ppl",
        "val/bleu",
        "val/chrf",
        "train/tokens_per_sec",
        "train/epoch_seconds",
    ):
        assert logged(rows, key), f"{key} was not logged"
    assert any(k.startswith("lr-") for k in rows[0]), "learning rate was not logged"
    assert len(logged(rows, "val/bleu")) == tiny_run.max_epochs  # every epoch
    clock = logged(rows, "time/fit_seconds")  # one reading per validation, increasing
    assert len(clock) == tiny_run.max_epochs and clock == sorted(clock) and clock[0] > 0
    train_loss = logged(rows, "train/loss")
    assert train_loss[-1] < train_loss[0]
    assert (tiny_run.run_dir / "config.yaml").is_file()
    for name in ("greedy", "beam5"):  # the end-of-training test: greedy and the default beam
        hypotheses = (tiny_run.run_dir / f"test.{name}.hyp").read_text().splitlines()
        assert len(hypotheses) == 10
        # its scores are logged beside the curves (CSV here; TensorBoard gets the same call)
        bleu = BLEU(tokenize="13a").corpus_score(hypotheses, [list(TOY_TEST_REFERENCES)]).score
        assert logged(rows, f"test/bleu_{name}") == [pytest.approx(bleu)]
        assert len(logged(rows, f"test/chrf_{name}")) == 1


def test_validation_examples_go_to_tensorboard_as_text(tiny_run: TinyRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tiny_run.run_dir), size_guidance={"tensors": 0})
    events.Reload()
    (tag,) = [t for t in events.Tags()["tensors"] if t.startswith("val/examples")]
    texts = [e.tensor_proto.string_val[0].decode() for e in events.Tensors(tag)]
    assert len(texts) == tiny_run.max_epochs  # one block per validation
    val_sources = (TOY_CORPUS_DIR / "val.de").read_text(encoding="utf-8").splitlines()
    val_references = (TOY_CORPUS_DIR / "val.en").read_text(encoding="utf-8").splitlines()
    pairs = dict(zip(val_sources, val_references, strict=True))
    for epoch, text in enumerate(texts, 1):
        assert text.startswith(f"    validation examples, epoch {epoch} (step ")
        sources = re.findall(r"^ {4} {2}\d\. source: +(.*)$", text, re.M)
        references = re.findall(r"^ {4} {5}reference: +(.*)$", text, re.M)
        hypotheses = re.findall(r"^ {4} {5}hypothesis: ?(.*)$", text, re.M)
        assert len(sources) == len(references) == len(hypotheses) == 3  # log_examples default
        assert [pairs[src] for src in sources] == references  # real validation pairs


def test_a_redirected_log_gets_one_plain_line_per_epoch(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *TINY, "--trainer.max_epochs", "2"]
    cmd += ["--test", "false", "--model.validation.log_examples", "2"]
    proc = run_python(cmd, cwd=tmp_path, env=subprocess_env(), timeout=300)  # \r kept
    stdout, stderr = proc.stdout, proc.stderr
    assert proc.returncode == 0, stderr[-3000:]
    lines = [line for line in stdout.splitlines() if line.startswith("epoch ")]
    pattern = (
        r"epoch {e}/2 \| step \d+ \| train loss [\d.]+ \| val loss [\d.]+ \| ppl [\d.]+ \| "
        r"BLEU [\d.]+ \| chrF [\d.]+ \| [\d,]+ tok/s \| elapsed \d+:\d\d, ETA \d+:\d\d$"
    )
    assert len(lines) == 2, stdout[-3000:]
    for epoch, line in enumerate(lines, 1):
        assert re.match(pattern.format(e=epoch), line), line
    # each epoch line is followed by that validation's example translations (2 asked for)
    out = stdout.splitlines()
    for epoch, line in enumerate(lines, 1):
        block = out[out.index(line) + 1 : out.index(line) + 6]
        assert block[0].startswith(f"validation examples, epoch {epoch} (step ")
        assert block[0].endswith(", greedy):")
        assert [row.split(":")[0].strip() for row in block[1:4]] == [
            "1. source",
            "reference",
            "hypothesis",
        ]
        assert block[4].strip().startswith("2. source:")
    assert "\u2501" not in stdout + stderr  # no progress-bar frames in the log
    assert "\r" not in stdout + stderr  # nor datasets' carriage-return frames
    assert "Seed set to" not in stderr and "available:" not in stderr  # nor Lightning's INFO


def test_a_redirected_log_shows_validations_inside_an_epoch(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "train.py"), *TINY, "--trainer.max_epochs", "1"]
    cmd += ["--test", "false", "--model.validation.log_examples", "1"]
    cmd += ["--trainer.val_check_interval", "10", "--trainer.check_val_every_n_epoch", "null"]
    proc = run_python(cmd, cwd=tmp_path, env=subprocess_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    lines = [line for line in out if line.startswith("epoch ")]
    assert [line.split(" | ")[:2] for line in lines[:2]] == [
        ["epoch 1/1 validation", "step 10"],
        ["epoch 1/1 validation", "step 20"],
    ], proc.stdout[-3000:]
    assert all(" | BLEU " in line for line in lines[:2])
    assert lines[-1].startswith("epoch 1/1 | step ")  # the epoch's own line at its end
    for line in lines[:2]:  # each validation's examples right after its line
        assert out[out.index(line) + 1].startswith("validation examples, epoch 1 (step ")


@pytest.mark.parametrize(
    ("max_epochs", "max_steps", "estimated", "head", "eta"),
    [
        (4, -1, 500, "epoch 2/4 | step 200", "ETA 0:30"),  # 300 steps left at 0.1 s/step
        (-1, 400, 400, "epoch 2 | step 200/400", "ETA 0:20"),  # a budget in steps
        (3, 400, 400, "epoch 2/3 | step 200/400", "ETA 0:20"),  # max_steps ends it first
        (4, 1475, 500, "epoch 2/4 | step 200", "ETA 0:30"),  # max_epochs ends it first
        (-1, -1, float("inf"), "epoch 2 | step 200", "ETA unbounded"),  # nothing bounds it
    ],
)
def test_the_plain_line_shows_only_the_bounds_a_run_has(
    monkeypatch: pytest.MonkeyPatch,
    max_epochs: int,
    max_steps: int,
    estimated: float,
    head: str,
    eta: str,
) -> None:
    from types import SimpleNamespace

    from minitx.training import callbacks

    trainer = SimpleNamespace(
        current_epoch=1,
        global_step=100,  # a resumed run: the pace counts this process's steps only
        max_epochs=max_epochs,
        max_steps=max_steps,
        estimated_stepping_batches=estimated,
        callback_metrics={"train/loss": torch.tensor(2.5)},
        callbacks=[],
    )
    progress = callbacks.PlainProgress()
    monkeypatch.setattr(callbacks, "time", SimpleNamespace(perf_counter=lambda: 10.0))
    progress.on_train_start(trainer, None)
    trainer.global_step = 200  # 100 steps since the start, in 10 s
    monkeypatch.setattr(callbacks, "time", SimpleNamespace(perf_counter=lambda: 20.0))
    line = progress.line(trainer)
    assert line.startswith(head + " | train loss 2.500 | "), line
    assert line.endswith(f"elapsed 0:10, {eta}"), line
    # with max_time, its clock (restored on resume: 120 s before this process) is shown
    timer = Timer(duration={"minutes": 30})
    monkeypatch.setattr(timer, "time_elapsed", lambda stage: 130.0)
    trainer.callbacks = [timer]
    assert "| elapsed 2:10, " in progress.line(trainer)


def test_a_run_ended_by_max_steps_inside_an_epoch_prints_its_last_step_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """max_steps inside an epoch: the run validates there (`ValidateAtMaxSteps`), then ends
    the epoch at the same step."""
    from types import SimpleNamespace

    from lightning.pytorch.trainer.states import TrainerFn

    from minitx.training import callbacks

    batch_progress = SimpleNamespace(is_last_batch=False)
    trainer = SimpleNamespace(
        current_epoch=1,
        global_step=150,
        max_epochs=-1,
        max_steps=300,
        estimated_stepping_batches=300,
        callback_metrics={"val/bleu": torch.tensor(12.0)},
        callbacks=[],
        is_global_zero=True,
        sanity_checking=False,
        state=SimpleNamespace(fn=TrainerFn.FITTING),
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=batch_progress)),
    )
    progress = callbacks.PlainProgress()
    progress.on_train_start(trainer, None)
    progress.on_validation_end(trainer, None)  # a validation inside epoch 2 at step 150
    trainer.global_step = 200
    progress.on_train_epoch_end(trainer, None)  # epoch 2 ends at step 200: its own line
    trainer.current_epoch, trainer.global_step = 2, 300
    progress.on_validation_end(trainer, None)  # max_steps reached inside epoch 3
    progress.on_train_epoch_end(trainer, None)  # the same step: no second line
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[:2] for line in lines] == [
        ["epoch 2 validation", "step 150/300"],
        ["epoch 2", "step 200/300"],
        ["epoch 3 validation", "step 300/300"],
    ], lines
    # Step 200 did not validate: its line shows no figures of the validation at step 150.
    assert ["BLEU" in line for line in lines] == [True, False, True], lines


@pytest.mark.parametrize(
    ("max_steps", "global_step", "last_batch", "every_n_epochs", "max_epochs", "stops"),
    [
        (30, 30, False, 1, None, True),  # the plan ends inside an epoch: stop, validating first
        (30, 30, True, 1, None, False),  # it ends with the epoch: the epoch's own validation
        (30, 30, True, None, None, True),  # ... unless the cadence counts across epochs
        (30, 29, False, 1, None, False),  # not yet
        (-1, 30, False, 1, None, False),  # no step budget
        (-1, 30, True, None, 2, True),  # the last epoch ends between two validations
        (-1, 30, True, None, 3, False),  # an epoch that is not the last one
        (-1, 30, True, 1, 2, False),  # the last epoch validates at its end by itself
    ],
)
def test_validate_at_end_requests_the_stop_where_the_cadence_would_not_validate(
    max_steps: int,
    global_step: int,
    last_batch: bool,
    every_n_epochs: int | None,
    max_epochs: int | None,
    stops: bool,
) -> None:
    from types import SimpleNamespace

    from minitx.training import ValidateAtEnd

    batch_progress = SimpleNamespace(is_last_batch=last_batch)
    trainer = SimpleNamespace(
        max_steps=max_steps,
        max_epochs=max_epochs,
        current_epoch=1,
        check_val_every_n_epoch=every_n_epochs,
        val_check_interval=1.0,
        global_step=global_step,
        should_stop=False,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=batch_progress)),
    )
    ValidateAtEnd().on_train_batch_end(trainer, None, None, None, 0)
    assert trainer.should_stop is stops


CUT = ", stopped by trainer.max_time after 1,445 of 1,475 planned updates"
UNUSED = (
    ", the plan done with 9.0 of trainer.max_time's 20 min left "
    "(about 2,675 updates would fill it: --trainer.max_steps 2675)"
)

SHORT = (
    ", the plan done with 0.2 of trainer.max_time's 0.25 min left "
    "(about 225 updates would fill it: --trainer.max_steps 225)"
)


@pytest.mark.parametrize(
    ("remaining_s", "elapsed_s", "global_step", "planned", "note"),
    [
        (-0.5, 1200.5, 1445, 1475, CUT),
        (-3.0, 1203.0, 1475, 1475, ""),  # the plan ended; its last validation crossed the cap
        (12.0, 1188.0, 1200, 1475, ""),  # stopped before the cap (early stopping)
        (None, None, 1200, 1475, ""),  # no max_time
        (0.0, 1200.0, 700, math.inf, ", stopped by trainer.max_time after 700 updates"),
        (100.0, 1100.0, 1475, 1475, ""),  # the plan used 92% of the cap: nothing to say
        (540.0, 660.0, 1475, 1475, UNUSED),  # a faster machine: 1,475 * 1,200 / 660 = 2,681
        (540.0, 660.0, 1300, 1475, ""),  # early stopping on that machine: no advice
        (12.0, 3.0, 46, 46, SHORT),  # a quarter of a minute: not "0 min"
        # was "about 25 updates would fill it: --trainer.max_steps 25" after 30, and
        # "--trainer.max_steps 0", which minitx-train refuses: a round number only above the plan
        (
            0.3,
            1.7,
            30,
            30,
            ", the plan done with 0.0 of trainer.max_time's 0.03 min left "
            "(about 35 updates would fill it: --trainer.max_steps 35)",
        ),
        (
            0.5,
            0.5,
            1,
            1,
            ", the plan done with 0.0 of trainer.max_time's 0.02 min left "
            "(about 2 updates would fill it: --trainer.max_steps 2)",
        ),
    ],
)
def test_the_end_of_fit_line_says_how_the_plan_met_max_time(
    remaining_s: float | None, elapsed_s: float | None, global_step: int, planned: float, note: str
) -> None:
    """Lightning's own line after a cut names max_epochs ("`max_epochs=3` reached"); a plan
    that leaves much of the cap unused gets the number of updates that would fill it."""
    from minitx.cli.train import time_budget_note

    assert time_budget_note(remaining_s, elapsed_s, global_step, planned) == note


@pytest.mark.parametrize(
    ("max_epochs", "flags"),
    [
        (3, "--trainer.max_steps 2675 --trainer.max_epochs 5"),  # 3 x 590 = 1,770 < 2,675
        (5, "--trainer.max_steps 2675"),  # 2,950 updates: max_epochs does not bind
        (None, "--trainer.max_steps 2675"),
    ],
)
def test_the_plan_that_fills_max_time_lifts_a_binding_max_epochs(
    max_epochs: int | None, flags: str
) -> None:
    """The default bounds its 1,475-update plan by max_epochs 3: raising max_steps alone to
    2,675 would stop at epoch 3's end (1,770 updates)."""
    from minitx.cli.train import time_budget_note

    note = time_budget_note(540.0, 660.0, 1475, 1475, 590, max_epochs)
    assert note.endswith(f"would fill it: {flags})"), note


@pytest.mark.parametrize("max_epochs", [4, -1], ids=["epochs", "no-epoch-bound"])
def test_a_run_ended_by_max_steps_inside_an_epoch_validates_its_final_weights(
    tmp_path: Path, max_epochs: int
) -> None:
    """Without the final validation the last updates (a decaying schedule's best) were never
    scored: here BLEU too, although bleu_every_n_epochs skips that epoch. The validations
    before it skip BLEU, also when no epoch bound ends the run (max_epochs -1, as the
    default config)."""
    run = train_tiny(
        tmp_path,
        max_epochs=max_epochs,
        test=False,
        extra=(
            "--trainer.max_steps", "30",
            "--model.validation.bleu_every_n_epochs", "5",
            "--checkpoint.monitor", "val/loss",
            "--checkpoint.mode", "min",
            "--checkpoint.filename", "best-{step}",
        ),
    )  # fmt: skip
    assert run.global_step == 30
    rows = metrics(run.run_dir)
    validated = [(int(float(r["epoch"])), int(r["step"])) for r in rows if r.get("val/loss")]
    with_bleu = [(int(float(r["epoch"])), int(r["step"])) for r in rows if r.get("val/bleu")]
    assert len(validated) >= 2 and validated[-2][1] < validated[-1][1], validated
    if max_epochs == 4:
        assert [epoch for epoch, _ in validated] == [0, 1], validated  # epoch 1's end, then 30
    assert with_bleu == validated[-1:], rows


def test_validation_logs_exactly_the_metrics_a_checkpoint_may_monitor(tiny_run: TinyRun) -> None:
    """`VALIDATION_METRICS` is what minitx-train lets checkpoint.monitor name under val/."""
    from minitx.training.module import VALIDATION_METRICS

    logged = {key for row in metrics(tiny_run.run_dir) for key, v in row.items() if v}
    assert {key for key in logged if key.startswith("val/")} == set(VALIDATION_METRICS)


def test_smoke_fit_writes_attention_figures_to_tensorboard_and_png(tiny_run: TinyRun) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tiny_run.run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    images = set(events.Tags()["images"])
    for kind in ("encoder", "decoder", "cross"):
        tag = f"attention/s0/{kind}/layer_0"
        assert tag in images
        steps = [e.step for e in events.Images(tag)]
        assert steps[0] == 0 and len(steps) == 1 + tiny_run.max_epochs  # start + every epoch
        assert events.Images(tag)[0].encoded_image_string.startswith(b"\x89PNG")
    entropy = [t for t in events.Tags()["scalars"] if t.startswith("attention_entropy/")]
    assert len(entropy) == 3 * 2  # 3 kinds x 1 layer x 2 heads
    for tag in ("start", "epoch_000", "epoch_001"):
        pngs = sorted((tiny_run.run_dir / "attention" / tag).glob("*.png"))
        assert [p.name for p in pngs] == [
            "s0_cross_layer0.png",
            "s0_decoder_layer0.png",
            "s0_encoder_layer0.png",
        ]
        assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    # TensorBoard and the PNG file show one drawing of the figure, pixel for pixel.
    import io

    import numpy as np
    from PIL import Image

    logged = events.Images("attention/s0/cross/layer_0")[0].encoded_image_string
    tensorboard = np.asarray(Image.open(io.BytesIO(logged)).convert("RGB"))
    png = np.asarray(Image.open(tiny_run.run_dir / "attention" / "start" / "s0_cross_layer0.png"))
    assert tensorboard.shape == png[..., :3].shape and (tensorboard == png[..., :3]).all()


def test_more_map_sentences_than_the_split_has_is_said(
    tiny_checkpoint: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: ``--attention_maps.num_sentences 500`` drew the 10 there are, without a word."""
    from types import SimpleNamespace

    from minitx.training.callbacks import AttentionMapLogger

    tokenizer = Translator.from_pretrained(tiny_checkpoint).tokenizer
    sentences = ["ein mann .", "zwei hunde .", "ein " * 40]  # the last has too many pieces
    split = SimpleNamespace(texts=lambda name: (sentences, sentences))
    trainer = SimpleNamespace(datamodule=split)
    with caplog.at_level("WARNING", logger="minitx.training.callbacks"):
        pairs = AttentionMapLogger(num_sentences=2, max_pieces=24)._select_pairs(trainer, tokenizer)
        assert len(pairs) == 2 and caplog.text == ""
        pairs = AttentionMapLogger(num_sentences=5, max_pieces=24)._select_pairs(trainer, tokenizer)
    assert len(pairs) == 2
    # 3 in all: too few sentences, not too long ones (it said only "2 ... have <= 24 pieces")
    assert "num_sentences asks for 5 sentences, but only 2 of the 3 validation" in caplog.text


@pytest.mark.parametrize(("whole", "tag"), [(True, "epoch_001"), (False, "step_30")])
def test_maps_of_an_epoch_a_stop_cut_short_are_named_by_their_step(whole: bool, tag: str) -> None:
    """A run its max_steps (or clock) ends inside an epoch ends the epoch there: its maps went
    under that epoch's name, and the resume's real epoch end wrote over their PNGs."""
    from types import SimpleNamespace

    from minitx.training.callbacks import AttentionMapLogger

    progress = SimpleNamespace(is_last_batch=whole)
    trainer = SimpleNamespace(
        current_epoch=1,
        global_step=30,
        fit_loop=SimpleNamespace(epoch_loop=SimpleNamespace(batch_progress=progress)),
    )
    maps = AttentionMapLogger(every_n_epochs=1)
    tags = []
    maps._log = lambda trainer, module, tag: tags.append(tag)
    maps.on_train_epoch_end(trainer, None)
    assert tags == [tag]


def test_no_sentences_means_no_maps(tmp_path: Path) -> None:
    """``--attention_maps.num_sentences 0`` turns the maps off: no figures, no entropies."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = train_tiny(tmp_path, max_epochs=1, test=False, maps=False)
    assert not (run.run_dir / "attention").exists()
    events = EventAccumulator(str(run.run_dir), size_guidance={"images": 0, "scalars": 0})
    events.Reload()
    assert events.Tags()["images"] == []
    scalars = events.Tags()["scalars"]
    assert "train/loss" in scalars and not [t for t in scalars if "attention" in t]


def test_checkpoint_carries_model_config_tokenizer_and_training_config(tiny_run: TinyRun) -> None:
    best = [p for p in (tiny_run.run_dir / "checkpoints").glob("*.ckpt") if p.name != "last.ckpt"]
    assert len(best) == 1 and "bleu" in best[0].name
    checkpoint = load_checkpoint(best[0])
    payload = checkpoint[CHECKPOINT_KEY]
    assert payload["model_config"]["d_model"] == 64
    assert payload["data"] == {"src_lang": "de", "tgt_lang": "en"}
    train_config = yaml.safe_load(payload["train_config"])
    assert train_config["model"]["transformer"]["d_model"] == 64
    assert train_config["data"]["vocab_size"] == 120
    translator = Translator.from_pretrained(best[0])
    assert translator.tokenizer.vocab_size == 120
    assert translator.tokenizer.model_bytes == payload["tokenizer"]


# ---------------------------------------------------------------------------- resume, interrupt


def test_runs_without_a_logger_get_their_own_run_directories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--trainer.logger false` wrote every run into ./runs/checkpoints (Lightning's
    default_root_dir), whatever runs_dir and run_name said: the next run replaced the last
    one's last.ckpt and config.yaml without a word, and `--ckpt_path last` was refused."""
    monkeypatch.chdir(tmp_path)
    args = TINY + ["--trainer.logger", "false", "--runs_dir", "mine", "--run_name", "nolog"]
    args += ["--trainer.enable_progress_bar", "false", "--test", "false"]
    args += ["--attention_maps.num_sentences", "0"]
    for steps in (2, 3):
        main([*args, "--trainer.max_steps", str(steps)])
    lasts = sorted((tmp_path / "mine" / "nolog").glob("*/checkpoints/last.ckpt"))
    assert len(lasts) == 2 and not (tmp_path / "runs").exists()
    assert [load_checkpoint(p)["global_step"] for p in lasts] == [2, 3]
    assert all((p.parent.parent / "config.yaml").is_file() for p in lasts)
    cli = main([*args, "--trainer.max_steps", "4", "--ckpt_path", "last"])  # the newest run
    assert cli.trainer.global_step == 4
    assert load_checkpoint(lasts[1])["global_step"] == 4


# ---------------------------------------------------------------------------- precision, DDP


def test_bf16_mixed_trains_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MINITX_KEEP_BF16", "1")  # bf16 even where the CPU only emulates it
    cli = main(
        TINY
        + ["--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1"]
        + ["--trainer.enable_progress_bar", "false", "--test", "false"]
    )
    assert cli.trainer.precision == "bf16-mixed"
    (run_dir,) = run_dirs(tmp_path)
    assert torch.isfinite(torch.tensor(logged(metrics(run_dir), "val/loss"))).all()


def test_bf16_becomes_fp32_on_a_cpu_without_bf16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_KEEP_BF16", raising=False)
    monkeypatch.setattr(precision, "cpu_has_fast_bf16", lambda: False)
    args = TINY + ["--trainer.precision", "bf16-mixed", "--trainer.accelerator", "cpu"]
    args += ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"]
    cli = main(args + ["--test", "false"])
    assert cli.trainer.precision == "32-true"
    assert "has no bf16 instructions" in capsys.readouterr().err


@pytest.mark.ci_step  # two training processes: the suite's DDP step (pyproject.toml)
def test_a_corpus_error_under_ddp_is_one_line_not_buried_by_the_other_rank(
    tmp_path: Path,
) -> None:
    """Rank 0 refused the corpus in one line; rank 1, waiting for it in a collective, followed
    it with a 36-line traceback of gloo's "Connection closed by peer"."""
    for split, stem in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
        de, en = (
            (TOY_CORPUS_DIR / f"{stem}.{lang}").read_text(encoding="utf-8")
            for lang in "de en".split()
        )
        pairs = zip(de.splitlines(), en.splitlines(), strict=True)
        lines = [json.dumps({"de": de, "en": en}) for de, en in pairs]
        lines += ['{"de": "a", "en": '] if split == "train" else []  # its last line broken
        (tmp_path / f"{split}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    env.pop("MINITX_DEBUG", None)
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), *TINY,
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--data.source", str(tmp_path / "{split}.jsonl"), "--trainer.max_epochs", "1",
    ]  # fmt: skip
    result = run_python(cmd, cwd=tmp_path, env=env, timeout=240)  # rank 1: a new process
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr and "rank1" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "train.jsonl: line 61 is not valid JSON" in errors[0], errors


def patched_ddp_run(
    tmp_path: Path, patch: str, *args: str, timeout: float
) -> subprocess.CompletedProcess:
    """Train the tiny config in two DDP processes on the CPU, `patch` (Python code) run first
    in each: a real process, since Lightning starts the second by running the first's command
    line again. The script is `tmp_path / "train_patched.py"`."""
    script = tmp_path / "train_patched.py"
    launch = "\nimport sys\nfrom minitx.cli.launch import train\nsys.exit(train())\n"
    script.write_text(textwrap.dedent(patch) + launch, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable, str(script), *TINY, "--trainer.enable_progress_bar", "false",
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        *args,
    ]  # fmt: skip
    return subprocess.run(
        cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.ci_step  # two training processes: the suite's DDP step (pyproject.toml)
def test_a_sigterm_while_ddp_starts_its_processes_ends_them_all_and_says_so(
    tmp_path: Path,
) -> None:
    """A SIGTERM to the first process after it started the second and before training (while
    they connect): one line, status 143, the second process ended and the new run directory
    removed. SIGTERM's default ended the first process unsaid, its directory left, and the
    second waited for it (gloo's timeout: 30 minutes)."""
    patch = """
        import os, signal, time
        from lightning.pytorch.strategies import DDPStrategy

        connect = DDPStrategy.setup_environment

        def sigterm_first(self):  # the second process is started by now
            if os.environ["LOCAL_RANK"] == "0":  # the first process (its launcher's)
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler runs here
            connect(self)

        DDPStrategy.setup_environment = sigterm_first
        """
    result = patched_ddp_run(tmp_path, patch, timeout=240)
    assert result.returncode == 143, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last == "terminated (SIGTERM) before training began: nothing was trained"
    assert run_dirs(tmp_path) == []
    time.sleep(1)  # Lightning's kill reaches the second process
    found = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert found.stdout.strip() == "", "the second process still runs"


@pytest.mark.ci_step  # two training processes: the suite's DDP step (pyproject.toml)
def test_a_ctrl_c_of_one_ddp_process_stops_them_all_at_one_update(tmp_path: Path) -> None:
    """The second process alone gets a Ctrl-C after update 3 (a Ctrl-C reaches each
    process at its own moment): every process stops before update 4, and last.ckpt holds 3.
    The process that got it stopped alone, and the other waited in its next collective: a
    hang, or a crash without a checkpoint."""
    patch = """
        import os, signal
        from minitx.training import TokenThroughput

        end = TokenThroughput.on_train_batch_end

        def signal_the_second(self, trainer, *args, **kwargs):
            end(self, trainer, *args, **kwargs)
            if os.environ["LOCAL_RANK"] == "1" and trainer.global_step == 3:
                os.kill(os.getpid(), signal.SIGINT)

        TokenThroughput.on_train_batch_end = signal_the_second
        """
    result = patched_ddp_run(tmp_path, patch, "--test", "false", timeout=180)
    assert result.returncode == 130, result.stderr[-3000:]
    (run_dir,) = run_dirs(tmp_path)
    last = run_dir / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=True, map_location="cpu")["global_step"] == 3
    assert "training interrupted (Ctrl-C): saved " in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.ci_step  # two training processes: the suite's DDP step (pyproject.toml)
def test_a_master_port_in_use_is_one_line_and_ends_the_second_process(tmp_path: Path) -> None:
    """Was: torch's DistNetworkError traceback, exit status 1, the new run directory left, and
    the second process waiting for the first (gloo: 30 minutes) after the command returned."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
        env["MASTER_PORT"] = str(port)
        cmd = [
            sys.executable, "-m", "minitx.cli.train", *TINY, "--test", "false",
            "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
            "--run_name", f"port-{port}",  # the process to look for below
        ]  # fmt: skip
        result = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.splitlines() == [
        f"error: MASTER_PORT {port} is in use on this machine (another program, or another run): "
        "set MASTER_PORT to a free port"
    ]
    assert run_dirs(tmp_path, f"port-{port}") == []
    time.sleep(1)  # the kill reaches the second process
    found = subprocess.run(["pgrep", "-f", f"port-{port}"], capture_output=True, text=True)
    assert found.stdout.strip() == "", "the second process still runs"


@pytest.mark.ci_step  # two training processes: the suite's DDP step (pyproject.toml)
def test_ddp_two_cpu_processes(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), *TINY,
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--test", "false",
        "--verbose",  # Lightning's INFO lines: they say which backend it initialised
        # The clock (rank 0's) sets the rate of both processes; under DDP the validations
        # come at thirds of the one epoch, not by the clock.
        "--model.optim.schedule", "budget", "--model.optim.warmup_steps", "5",
        "--trainer.max_time", "00:00:10:00", "--model.validation.validations_per_run", "3",
    ]  # fmt: skip
    result = run_python(cmd, cwd=tmp_path, env=env, timeout=240)  # rank 1: a new process
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "distributed_backend=gloo" in result.stdout + result.stderr
    # Lightning's advice, once per epoch-level metric logged without sync_dist
    assert "sync_dist=True" not in result.stdout + result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert len(logged(metrics(run_dir), "val/bleu")) == 3
    # The epoch's target tokens of both processes: those of the same epoch in one process
    # (it logged the logging process's share alone, about half)
    single = [sys.executable, str(REPO / "scripts" / "train.py"), *TINY]
    single += ["--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false"]
    single += ["--test", "false", "--model.validation.validations_per_run", "0"]
    (tmp_path / "alone").mkdir()
    alone = run_python(single, cwd=tmp_path / "alone", env=env, timeout=240)
    assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
    (alone_dir,) = run_dirs(tmp_path / "alone")
    rows = metrics(run_dir)
    assert logged(rows, "train/tokens") == logged(metrics(alone_dir), "train/tokens")
    # and the epoch's rate counts them all, over the epoch's seconds
    (rate,), (seconds,), (tokens,) = (
        logged(rows, key) for key in ("train/tokens_per_sec", "train/epoch_seconds", "train/tokens")
    )
    assert rate * seconds == pytest.approx(tokens, rel=1e-3)


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_the_users_own_loggers_share_the_run_directory_the_first_one_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`trainer.logger` given in a config: the first logger's save_dir/name holds the run
    directory (checkpoints, config.yaml, its logs), the others write into subdirectories of it,
    and `--ckpt_path last` goes on in that same directory."""
    monkeypatch.chdir(tmp_path)
    loggers = tmp_path / "loggers.yaml"
    loggers.write_text(
        yaml.safe_dump(
            {
                "trainer": {
                    "logger": [
                        {
                            "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
                            "init_args": {"save_dir": "my_runs", "name": "exp1"},
                        },
                        {
                            "class_path": "lightning.pytorch.loggers.CSVLogger",
                            "init_args": {"save_dir": "elsewhere"},
                        },
                    ]
                }
            }
        ),
        encoding="utf-8",
    )
    args = [*TINY, "--config", str(loggers), *NO_MAPS, "--test", "false"]
    args += ["--trainer.enable_progress_bar", "false"]
    main([*args, "--trainer.max_epochs", "1"])
    [run] = (tmp_path / "my_runs" / "exp1").iterdir()
    assert (run / "config.yaml").is_file() and (run / "checkpoints" / "last.ckpt").is_file()
    assert list(run.glob("events.out.tfevents.*")) and not (tmp_path / "elsewhere").exists()
    # a run killed after its last checkpoint leaves events past it: the resume drops them
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(run)) as writer:
        writer.add_scalar("val/loss", 99.0, 10_000)
    main([*args, "--trainer.max_epochs", "2", "--ckpt_path", "last"])
    assert list((tmp_path / "my_runs" / "exp1").iterdir()) == [run]  # the same run went on
    rows = list(csv.DictReader((run / "csv" / "metrics.csv").open(encoding="utf-8")))
    # Lightning's CSVLogger would start its file anew on the resume: the first epoch's rows
    # are kept, and the second's follow them once
    assert [int(r["epoch"]) for r in rows if r.get("val/loss")] == [0, 1]
    steps = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert steps == sorted(set(steps)) and len(steps) > 1
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run), size_guidance={"scalars": 0})
    val_steps = [e.step for e in events.Reload().Scalars("val/loss")]
    assert len(val_steps) == 2 and val_steps == sorted(set(val_steps))


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")
def test_a_resume_whose_first_logger_is_the_users_csv_logger_stays_in_its_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """On a resume the user's CSVLogger becomes a ContinuingCSVLogger, a logger Lightning does
    not know: `Trainer.log_dir` took its save_dir, so config.yaml and the attention maps went
    into ``my_logs/`` beside the run, and the closing line named ``my_logs``."""
    monkeypatch.chdir(tmp_path)
    loggers = tmp_path / "loggers.yaml"
    csv_logger = {"class_path": "lightning.pytorch.loggers.CSVLogger"}
    loggers.write_text(
        yaml.safe_dump(
            {"trainer": {"logger": [csv_logger | {"init_args": {"save_dir": "my_logs"}}]}}
        ),
        encoding="utf-8",
    )
    args = [*TINY, "--config", str(loggers), "--test", "false"]
    args += ["--trainer.enable_progress_bar", "false"]
    main([*args, "--trainer.max_steps", "10"])
    [run] = (tmp_path / "my_logs" / "lightning_logs").iterdir()
    capsys.readouterr()
    main([*args, "--trainer.max_steps", "20", "--ckpt_path", "last"])
    out = capsys.readouterr().out
    assert out.rstrip().endswith(f"run dir: {run.relative_to(tmp_path)}"), out[-500:]
    assert [p.name for p in (tmp_path / "my_logs").iterdir()] == ["lightning_logs"]
    assert "max_steps: 20" in (run / "config.yaml").read_text(encoding="utf-8")
    assert list(run.glob("attention/*/*.png"))  # the maps in the run, not beside it


def test_the_test_phase_says_a_warning_on_its_sources_once_in_the_commands_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """The test split is read once per decoding (greedy, beam): a character the vocabulary
    lacks is said once, as every minitx command says its warnings (not bare, twice)."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for path in TOY_CORPUS_DIR.iterdir():
        text = path.read_text(encoding="utf-8")
        if path.name == "test_2016_flickr.de":  # a letter the toy train split never shows
            text = text.replace("\n", " ж\n", 1)
        (corpus / path.name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = [*TINY, *NO_MAPS, "--data.source", str(corpus), "--trainer.max_steps", "2"]
    main([*args, "--trainer.enable_progress_bar", "false", "--trainer.logger", "false"])
    err = capsys.readouterr().err
    unknown = [line for line in err.splitlines() if "read as <unk>" in line]
    decoded = [line for line in unknown if line.startswith("WARNING minitx.translator: ")]
    assert len(decoded) == 1, err[-2000:]
    assert decoded[0].startswith("WARNING minitx.translator: 1 of 10 sentences"), decoded
    prepared = [line for line in unknown if line.startswith("WARNING minitx.data.prepare: ")]
    assert len(prepared) == 1 and prepared[0].count("test: 1 of 10 pairs"), unknown
