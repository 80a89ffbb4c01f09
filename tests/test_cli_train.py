"""The training command (minitx-train): configs, run directories, logging, checkpoints,
resume, interrupts, precision, DDP.

Fast: everything trains the tiny config on the toy corpus (minitx/data/toy); the smoke-fit
tests share the session's one tiny run (conftest.py).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from helpers import CONFIG_DIR, REPO_DIR, TINY_CONFIG, TOY_CORPUS_DIR, TinyRun
from lightning.pytorch.callbacks import Callback

from minitx.checkpoint import CHECKPOINT_KEY, load_checkpoint
from minitx.cli.train import build_cli, main
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


@pytest.mark.parametrize("name", ["tiny", "multi30k_en_de", "multi30k_de_en"])
def test_packaged_config_by_name(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--config", name, "--trainer.logger", "false"])
    expected = yaml.safe_load((CONFIG_DIR / f"{name}.yaml").read_text())
    assert cli.config.run_name == expected["run_name"]


def test_run_name_alone_names_the_run_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--config", "tiny", "--run_name", "mine", "--runs_dir", "out"])
    tb, csv_logger = cli.trainer.loggers
    assert Path(tb.log_dir).parent == Path("out") / "mine"
    assert Path(csv_logger.log_dir) == Path(tb.log_dir) / "csv"


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
    assert cli.config.model.transformer.d_model == defaults["model"]["transformer"]["d_model"]
    assert cli.config.trainer.precision == defaults["trainer"]["precision"]


def test_en_de_config_flips_the_direction(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = str(CONFIG_DIR / "multi30k_en_de.yaml")
    cli = build_cli(["--config", config, "--trainer.logger", "false"])
    assert (cli.config.data.src_lang, cli.config.data.tgt_lang) == ("en", "de")


def test_dotted_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(
        [
            "--trainer.max_epochs",
            "3",
            "--model.transformer.dropout",
            "0.25",
            "--trainer.logger",
            "false",
        ]
    )
    assert cli.trainer.max_epochs == 3
    assert cli.model.model.config.dropout == 0.25


@pytest.mark.parametrize(
    "section,key",
    [
        ("model", "d_modle"),
        ("model:\n  transformer", "d_modle"),
        ("data", "vocab"),
        ("trainer", "max_epoch"),
    ],
)
def test_unknown_config_keys_fail(
    section: str,
    key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"{section}:\n  {key}: 3\n")
    with pytest.raises(SystemExit) as exc:
        build_cli(["--config", str(bad)])
    assert exc.value.code != 0
    assert key in capsys.readouterr().err


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
    train_loss = logged(rows, "train/loss")
    assert train_loss[-1] < train_loss[0]
    assert (tiny_run.run_dir / "config.yaml").is_file()
    for name in ("greedy", "beam5"):  # the end-of-training test: greedy and the default beam
        hypotheses = (tiny_run.run_dir / f"test_hypotheses_{name}.txt").read_text().splitlines()
        assert len(hypotheses) == 10


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
            "s0_cross_layer_0.png",
            "s0_decoder_layer_0.png",
            "s0_encoder_layer_0.png",
        ]
        assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


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
    translator = Translator.from_checkpoint(best[0])
    assert translator.tokenizer.vocab_size == 120
    assert translator.tokenizer.model_bytes == payload["tokenizer"]


# ---------------------------------------------------------------------------- resume, interrupt


class RecordLr(Callback):
    """Remembers the learning rate at the start of fitting."""

    def __init__(self) -> None:
        self.lrs: list[float] = []

    def on_train_start(self, trainer, pl_module) -> None:
        self.lrs.append(trainer.optimizers[0].param_groups[0]["lr"])


def test_resume_last_continues_at_the_saved_step_epoch_and_lr(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    common = TINY + ["--trainer.enable_progress_bar", "false", "--test", "false"]
    first = main(common + ["--trainer.max_epochs", "1"])
    steps_per_epoch = first.trainer.global_step
    first.trainer.loggers[1].experiment.log_metrics({"train/loss": 9.0}, step=10**6)
    first.trainer.loggers[1].save()  # a row logged after the checkpoint: dropped on resume
    assert steps_per_epoch > 0
    (run_dir,) = run_dirs(tmp_path)
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    saved_lr = saved["lr_schedulers"][0]["_last_lr"][0]

    second = build_cli(common + ["--trainer.max_epochs", "2", "--ckpt_path", "last"])
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


def test_resume_last_without_a_previous_run_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="no .*last.ckpt to resume from"):
        build_cli(TINY + ["--ckpt_path", "last"])


@pytest.mark.parametrize(
    ("sig", "status", "reason"),
    [(signal.SIGTERM, 143, "SIGTERMException"), (signal.SIGINT, 130, "KeyboardInterrupt")],
    ids=["SIGTERM", "SIGINT"],
)
def test_a_signal_leaves_a_usable_last_checkpoint_and_a_nonzero_status(
    sig: int, status: int, reason: str, tmp_path: Path
) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), *TINY, "--trainer.max_epochs", "100000",
        "--trainer.enable_progress_bar", "false", "--test", "false",
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not list(
            (tmp_path / "runs").glob("tiny/*/checkpoints/epoch*.ckpt")
        ):
            time.sleep(0.2)  # wait until training is well under way (first epoch done)
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    (last,) = list((tmp_path / "runs").glob("tiny/*/checkpoints/last.ckpt"))
    assert f"training interrupted ({reason})" in out
    assert proc.returncode == status, out[-2000:]  # not 0: the run did not finish
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["global_step"] > 0
    assert Translator.from_checkpoint(last).translate(["ein mann ."])[0] is not None


# ---------------------------------------------------------------------------- precision, DDP


def test_bf16_mixed_trains_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cli = main(
        TINY
        + ["--trainer.precision", "bf16-mixed", "--trainer.max_epochs", "1"]
        + ["--trainer.enable_progress_bar", "false", "--test", "false"]
    )
    assert cli.trainer.precision == "bf16-mixed"
    (run_dir,) = run_dirs(tmp_path)
    assert torch.isfinite(torch.tensor(logged(metrics(run_dir), "val/loss"))).all()


def test_ddp_two_cpu_processes(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [
        sys.executable, str(REPO / "scripts" / "train.py"), *TINY,
        "--trainer.strategy", "ddp", "--trainer.devices", "2", "--trainer.accelerator", "cpu",
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false", "--test", "false",
    ]  # fmt: skip
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "distributed_backend=gloo" in result.stdout + result.stderr
    (run_dir,) = run_dirs(tmp_path)
    assert (run_dir / "checkpoints" / "last.ckpt").is_file()
    assert logged(metrics(run_dir), "val/bleu")


def test_default_comments_in_the_yaml_match_the_code() -> None:
    """Each `key: value  # meaning (default)` line of the model groups names the default the
    code really has, so the documentation cannot drift from the dataclasses."""
    from dataclasses import fields

    from minitx.model import TransformerConfig
    from minitx.training import OptimConfig, ValidationConfig

    groups = {
        "transformer": TransformerConfig(),
        "optim": OptimConfig(),
        "validation": ValidationConfig(),
        "decoding": ValidationConfig().decoding,
    }
    checked, group = 0, None
    for line in (CONFIG_DIR / "multi30k_de_en.yaml").read_text().splitlines():
        match = re.match(r"^\s+(\w+):\s*(.*?)\s*(?:#(.*))?$", line)
        if not match:
            group = None
            continue
        key, _, comment = match.groups()
        if key in groups:
            group = key
            continue
        found = re.search(r"\(([^()]*)\)\s*$", comment or "")
        if group is None or found is None or key not in {f.name for f in fields(groups[group])}:
            continue
        default = getattr(groups[group], key)
        documented = yaml.safe_load(found.group(1))
        expected = list(default) if isinstance(default, tuple) else default
        assert documented == expected, (
            f"{group}.{key}: YAML says ({found.group(1)}), code {default}"
        )
        checked += 1
    assert checked >= 20


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
        Translator.from_checkpoint(path)


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
    proc = subprocess.Popen([sys.executable, "-c", KILLED_DURING_SAVE, str(path), str(marker)])
    try:
        deadline = time.time() + 120
        while not marker.exists() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), "the save never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["step"] == 1 and torch.equal(checkpoint["w"], torch.ones(1000))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (["--model.transformer.d_ff", "256"], r"model config differs .*d_ff: 128 -> 256"),
        (["--data.vocab_size", "100"], r"model config differs"),
        (["--data.source", "{other_corpus}"], r"tokenizer .* differs"),
    ],
    ids=["model", "vocabulary", "corpus"],
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
    with pytest.raises(SystemExit) as exit_info:
        main(common + ["--trainer.max_epochs", "2", "--ckpt_path", "last", *change])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"error: cannot resume: .*" + message, err), err[-2000:]


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
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.search(message, errors[0], re.I), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
