"""Checkpoints never run code: training's resume reads them weights-only on every torch.

torch before 2.6 unpickles anything by default, and Lightning's own loader passes torch's
default on. A crafted `.ckpt` given to `--ckpt_path` must be refused in one line, and the
code inside it must never run, whichever torch is installed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from helpers import PYTHON, SCRIPTS_DIR, subprocess_env
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from preloaded import run_python

from minitx.checkpoint import CHECKPOINT_KEY, load_checkpoint
from minitx.errors import CheckpointError
from minitx.training.checkpoint_io import AtomicCheckpointIO


class CreatesFile:
    """Unpickling this object creates the file at `path`: a live code-execution payload."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def crafted_checkpoint(real: Path, path: Path, marker: Path) -> Path:
    """A copy of a real resumable checkpoint with a payload that writes `marker` when loaded."""
    content = dict(torch.load(real, weights_only=True))
    content["x"] = CreatesFile(marker)
    torch.save(content, path)
    return path


@pytest.fixture
def old_torch_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """`torch.load` as torch 2.5 has it: `weights_only` left unset means full unpickling."""
    real_load = torch.load

    def load(*args, weights_only=None, **kwargs):
        return real_load(*args, weights_only=bool(weights_only), **kwargs)

    monkeypatch.setattr(torch, "load", load)


def test_lightning_loader_runs_the_payload_under_an_old_torch_default(
    tiny_checkpoint: Path, tmp_path: Path, old_torch_default: None
) -> None:
    """The control: the simulated old default is live, and Lightning's loader trusts it."""
    marker = tmp_path / "marker"
    evil = crafted_checkpoint(tiny_checkpoint, tmp_path / "evil.ckpt", marker)
    TorchCheckpointIO().load_checkpoint(evil)
    assert marker.exists()


def test_training_reads_checkpoints_weights_only_under_an_old_torch_default(
    tiny_checkpoint: Path, tmp_path: Path, old_torch_default: None
) -> None:
    marker = tmp_path / "marker"
    evil = crafted_checkpoint(tiny_checkpoint, tmp_path / "evil.ckpt", marker)
    with pytest.raises(CheckpointError, match="refused to load"):
        AtomicCheckpointIO().load_checkpoint(evil)
    with pytest.raises(CheckpointError, match="refused to load") as caught:
        load_checkpoint(evil)  # the inference commands' reader
    assert not marker.exists()
    # the message names what the file would import, and not torch's advice to turn the check off
    assert re.search(r"plain data \([\w.]+\), and loading them", str(caught.value))
    assert "weights_only" not in str(caught.value)


def test_training_plugin_reads_a_real_checkpoint(tiny_checkpoint: Path) -> None:
    state = AtomicCheckpointIO().load_checkpoint(tiny_checkpoint)
    assert "optimizer_states" in state and CHECKPOINT_KEY in state


def test_resume_from_a_crafted_checkpoint_is_one_line_and_runs_nothing(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "marker"
    evil = crafted_checkpoint(tiny_checkpoint, tmp_path / "evil.ckpt", marker)
    result = run_python(
        [PYTHON, str(SCRIPTS_DIR / "train.py"), "--config", "tiny", "--ckpt_path", str(evil)],
        cwd=tmp_path,
        env=subprocess_env(),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "refused to load" in lines[0]
    assert "evil.ckpt" in lines[0]
    assert not marker.exists()
    assert not list(tmp_path.glob("runs/*/*"))  # refused before a run directory is written


def test_a_release_given_as_a_checkpoint_is_named_as_one(tmp_path: Path) -> None:
    """Was "checkpoint is a directory", or, for its weights, "truncated, corrupt or another
    kind of file" (a resume, or minitx-average, given minitx-export's output)."""
    from minitx.checkpoint import read_checkpoint

    (tmp_path / "model.safetensors").write_bytes(b"{}")
    for path, what in (
        (tmp_path, "a release directory"),
        (tmp_path / "model.safetensors", "the weights of a release"),
    ):
        with pytest.raises(
            CheckpointError,
            match=f"is {what} \\(minitx-export writes them\\), "
            "not a .ckpt checkpoint: a release holds the weights only",
        ):
            read_checkpoint(path)
