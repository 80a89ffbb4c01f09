"""scripts/benchmark.py --sections budget: the split of a training run's time sums what the
profiler records once each (nested actions are not counted twice), and the section runs a
real (tiny) training run end to end and prints every share."""

from __future__ import annotations

import importlib.util

import pytest
from helpers import PYTHON, SCRIPTS_DIR, subprocess_env
from preloaded import run_python

spec = importlib.util.spec_from_file_location("benchmark", SCRIPTS_DIR / "benchmark.py")
benchmark = importlib.util.module_from_spec(spec)
spec.loader.exec_module(benchmark)


def test_budget_split_counts_each_second_once() -> None:
    actions = {
        "Total": 100.0,
        "run_training_epoch": 90.0,  # holds everything below: never summed
        "run_training_batch": 60.0,
        "[LightningModule]TranslationModule.optimizer_step": 59.0,  # inside a training step
        "[_TrainingEpochLoop].train_dataloader_next": 2.0,
        "[Strategy]SingleDeviceStrategy.validation_step": 12.0,
        "[_EvaluationLoop].val_next": 1.0,
        "save_checkpoint": 3.0,
        "[Callback]ModelCheckpoint{'monitor': 'val/bleu'}.on_validation_end": 2.5,  # a write
        "[Callback]ConfigInCheckpoint.on_save_checkpoint": 0.5,  # inside a write
        "[Callback]AttentionMapLogger.on_validation_end": 4.0,
        "[Callback]TokenThroughput.on_train_batch_end": 0.25,
    }
    split = benchmark.budget_split(actions)
    assert split == {
        "checkpoint writes": 3.0,
        "training steps": 60.0,
        "fetching batches": 2.0,
        "attention maps": 4.0,
        "validation": 13.0,
        "logging (other callbacks)": 0.25,
    }


@pytest.mark.slow
def test_budget_section_trains_and_prints_every_share(tmp_path) -> None:
    env = {**subprocess_env(), "OMP_NUM_THREADS": "1"}
    env.pop("MINITX_DATA_DIR", None)  # the tiny config trains on the toy corpus
    command = [
        PYTHON, str(SCRIPTS_DIR / "benchmark.py"), "--sections", "budget",
        "--budget-config", "tiny", "--budget-time", "00:00:00:10",
    ]  # fmt: skip
    done = run_python(command, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = {line.strip().split("  ")[0]: line for line in done.stdout.splitlines()}
    for share in [*benchmark.budget_split({}), "the rest (setup, the loop)"]:
        assert share in lines, done.stdout
    training_seconds = float(lines["training steps"].split()[-2])
    assert training_seconds > 0, done.stdout
    assert "the share that trains" in done.stdout
