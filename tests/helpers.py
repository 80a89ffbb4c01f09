"""Helpers shared by the tests (constants, the tiny training run, subprocess settings).

The fixtures that use them live in conftest.py; test modules import the constants from here.
"""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = REPO_DIR / "scripts"
CONFIG_DIR = REPO_DIR / "minitx" / "configs"
TINY_CONFIG = CONFIG_DIR / "tiny.yaml"
TOY_CORPUS_DIR = REPO_DIR / "minitx" / "data" / "toy"
TOY_TEST_SOURCES = (TOY_CORPUS_DIR / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
TOY_TEST_REFERENCES = (
    (TOY_CORPUS_DIR / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
)


@dataclass(frozen=True)
class TinyRun:
    """A finished `configs/tiny.yaml` training run.

    Attributes:
        run_dir: the run directory (`runs/tiny/<version>`).
        checkpoint: its `checkpoints/last.ckpt`.
        best_checkpoint: the best-BLEU checkpoint that `ModelCheckpoint` kept.
        global_step: the trainer's step count when fitting ended.
        max_epochs: epochs trained.
    """

    run_dir: Path
    checkpoint: Path
    best_checkpoint: Path
    global_step: int
    max_epochs: int


NO_MAPS = ("--attention_maps.num_sentences", "0")
"""Train without attention maps: for tests of something else (resume, cadence, schedules), in
whose tiny runs drawing the maps took about half the time (6.2 s of an 11.7 s `train_tiny`
on a Zen 3). test_cli_train tests the maps."""


def train_tiny(
    workdir: Path,
    *,
    max_epochs: int = 6,
    test: bool = True,
    maps: bool = True,
    extra: tuple[str, ...] = (),
) -> TinyRun:
    """Train the tiny config on the toy corpus inside `workdir` (runs/ is written under the CWD);
    `extra`: more command-line arguments; `test`: score the test split after fitting; `maps`:
    draw the attention maps (`NO_MAPS` when not)."""
    from minitx.cli.train import main

    previous_cwd, previous_env = Path.cwd(), dict(os.environ)
    os.chdir(workdir)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message="LightningCLI's args parameter"
            )  # pytest's argv
            cli = main(
                [
                    "--config", str(TINY_CONFIG),
                    "--trainer.default_root_dir", str(workdir),
                    "--trainer.max_epochs", str(max_epochs),
                    "--trainer.enable_progress_bar", "false",
                    "--test", "true" if test else "false",
                    *(() if maps else NO_MAPS),
                    *extra,
                ]
            )  # fmt: skip
    finally:
        os.chdir(previous_cwd)
        os.environ.clear()  # Lightning sets PL_GLOBAL_SEED & co.; keep other tests unaffected
        os.environ.update(previous_env)
    found = sorted(workdir.glob("runs/tiny/*/checkpoints/last.ckpt"))
    assert len(found) == 1, f"expected one last.ckpt under {workdir}/runs/tiny, found {found}"
    best = Path(cli.trainer.checkpoint_callback.best_model_path)
    return TinyRun(
        run_dir=found[0].parent.parent,
        checkpoint=found[0],
        best_checkpoint=best if best.is_absolute() else workdir / best,
        global_step=cli.trainer.global_step,
        max_epochs=max_epochs,
    )


def parse_alignment(text: str) -> list[tuple[int, int]]:
    """The (source, target) pairs of a Pharaoh alignment ("0-0 1-2"), as minitx-translate
    --align writes them."""
    return [(int(s), int(t)) for s, t in (pair.split("-") for pair in text.split())]


def subprocess_env() -> dict[str, str]:
    """Environment for child Python processes: one thread, the repository importable."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_DIR), env.get("PYTHONPATH", "")) if p)
    env["PYTHONIOENCODING"] = "utf-8"
    return env


PYTHON = sys.executable


def command_module(name: str) -> str:
    """The module of the command that the console script ``minitx-NAME`` runs (``python -m``
    runs it the same way): minitx.cli.NAME for the core's commands, an extra's ``command``
    module."""
    from minitx.cli.launch import COMMANDS

    return COMMANDS[name][0]
