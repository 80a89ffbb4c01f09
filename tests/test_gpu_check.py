"""scripts/gpu_check.sh: its CPU dry run goes through every step and writes the summary, so
the GPU check is known to work before a GPU is lent; and it refuses bad command lines."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import PYTHON, SCRIPTS_DIR, subprocess_env

SCRIPT = SCRIPTS_DIR / "gpu_check.sh"
SECTIONS = [
    "== steps ==",
    "== setup ==",
    "== cuda tests ==",
    "== benchmark ==",
    "== benchmark, larger batches ==",
    "== default run ==",
]
STEPS = ["setup", "cuda_tests", "bench", "bench_large", "train"]


def run_script(*args: str) -> subprocess.CompletedProcess:
    env = {**subprocess_env(), "PYTHON": PYTHON}
    env.pop("MINITX_DATA_DIR", None)  # the dry run trains on the toy corpus
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
def test_cpu_dry_run_runs_every_step_and_writes_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = run_script("--cpu-dry-run", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.txt").read_text(encoding="utf-8")
    positions = [summary.find(section) for section in SECTIONS]
    assert -1 not in positions and positions == sorted(positions), summary
    for step in STEPS:
        assert f"{step}: ok" in summary, summary
        assert (out / f"{step}.log").is_file()
    assert "skipped" in summary  # no CUDA here: the cuda tests ran and skipped
    assert "ratio minitx / torch.nn.Transformer" in summary
    assert "with KV cache" in summary
    assert "updates: 10" in summary
    assert "validation after update 10: BLEU" in summary
    assert "test/bleu_greedy: " in summary and "test/bleu_beam5: " in summary
    assert (out / "train" / "metrics.csv").is_file()


def run_failing_dry_run(out: Path, **env: str) -> subprocess.CompletedProcess:
    """The dry run with a Python that always fails (`false`): every step it runs fails."""
    return subprocess.run(
        ["bash", str(SCRIPT), str(out), "--cpu-dry-run"],
        capture_output=True,
        text=True,
        env={**subprocess_env(), "PYTHON": "false", "OMP_NUM_THREADS": "1", **env},
        timeout=120,
    )


def test_a_failing_step_makes_the_exit_status_one(tmp_path: Path) -> None:
    """A step that fails is reported, the others still run, and the script ends with 1."""
    out = tmp_path / "out"
    done = run_failing_dry_run(out)
    assert done.returncode == 1, done.stdout + done.stderr
    steps = (out / "steps.txt").read_text(encoding="utf-8")
    for step in STEPS:
        assert f"{step}: FAILED" in steps, steps
    assert "failed steps: setup cuda_tests bench bench_large train" in done.stderr


def test_gpu_check_steps_runs_only_the_steps_named(tmp_path: Path) -> None:
    """GPU_CHECK_STEPS reruns chosen steps (what a lent GPU's last minutes allow); the others
    are reported as skipped, not as passed."""
    out = tmp_path / "out"
    done = run_failing_dry_run(out, GPU_CHECK_STEPS="setup bench")
    assert done.returncode == 1, done.stdout + done.stderr
    steps = (out / "steps.txt").read_text(encoding="utf-8").splitlines()
    assert [line.split(":")[0] for line in steps] == STEPS
    for line in steps:
        ran = line.split(":")[0] in ("setup", "bench")
        assert ("FAILED" in line) == ran and ("skipped" in line) == (not ran), line
    assert "failed steps: setup bench" in done.stderr


def test_an_unknown_step_in_gpu_check_steps_exits_2(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": "false", "GPU_CHECK_STEPS": "setup train_fast"}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: GPU_CHECK_STEPS names 'train_fast'; the steps are: ")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [[], ["--cpu-dry-run"], ["out", "--gpu"], ["--prepare", "x"]])
def test_bad_command_lines_exit_2(args: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHON": "false"},
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: usage: ")
