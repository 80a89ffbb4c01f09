"""Training across machines with Lightning's own launcher, on one host: two "nodes" of one
process each, started as docs/guides/multi-node.md says (`--trainer.num_nodes 2`, and on each
node MASTER_ADDR, MASTER_PORT, NODE_RANK), talking gloo over localhost.

The callback below runs inside the training processes (class_path
``test_multinode.RecordBatches``, this directory on their PYTHONPATH).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from helpers import REPO_DIR, TINY_CONFIG, TOY_CORPUS_DIR, subprocess_env
from preloaded import PreloadedProcess

from minitx.cli import train as train_cli
from minitx.cli.train_config import check_launcher
from minitx.cli.train_runs import launch_rank

TESTS_DIR = Path(__file__).resolve().parent


class RecordBatches(L.Callback):
    """Writes, per process, the training pairs of every batch it saw and its final weights.

    Args:
        out_dir: where ``rank{global_rank}.json`` and ``weights{global_rank}.pt`` go.
    """

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.pairs: list[list[str]] = []

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: dict, batch_idx: int
    ) -> None:
        self.pairs += [[s, t] for s, t in zip(batch["src_text"], batch["tgt_text"], strict=True)]

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        rank = trainer.global_rank
        seen = {
            "global_rank": rank,
            "node_rank": trainer.node_rank,
            "local_rank": trainer.local_rank,
            "world_size": trainer.world_size,
            "pairs": self.pairs,
        }
        (self.out_dir / f"rank{rank}.json").write_text(json.dumps(seen), encoding="utf-8")
        torch.save(pl_module.state_dict(), self.out_dir / f"weights{rank}.pt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.ci_step  # two training processes: the suite's DDP step (pyproject.toml)
def test_two_nodes_on_localhost_see_disjoint_batches_and_end_equal(tmp_path: Path) -> None:
    extra = tmp_path / "record.yaml"
    extra.write_text(
        "trainer:\n"
        "  callbacks:\n"
        "    - class_path: test_multinode.RecordBatches\n"
        f"      init_args: {{out_dir: {json.dumps(str(tmp_path))}}}\n",
        encoding="utf-8",
    )
    command = [
        sys.executable, str(REPO_DIR / "scripts" / "train.py"),
        "--config", str(TINY_CONFIG), "--config", str(extra),
        "--trainer.strategy", "ddp", "--trainer.accelerator", "cpu",
        "--trainer.num_nodes", "2", "--trainer.devices", "1",
        "--trainer.max_epochs", "1", "--trainer.enable_progress_bar", "false",
        "--test", "false", "--runs_dir", str(tmp_path / "runs"),
    ]  # fmt: skip
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR), env["PYTHONPATH"]])
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "MINITX_RUN_VERSION"):
        env.pop(name, None)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE="2")
    nodes, outputs = [], []
    with contextlib.ExitStack() as started:
        for node in (0, 1):
            nodes.append(
                started.enter_context(
                    PreloadedProcess(
                        command, cwd=tmp_path, env={**env, "NODE_RANK": str(node)},
                        merge_stderr=True,
                    )
                )
            )  # fmt: skip
            time.sleep(1.2)  # node 1 starts in another second: it must still write no directory
        for node in nodes:
            outputs.append(node.communicate(timeout=240)[0])
    for node, output in zip(nodes, outputs, strict=True):
        assert node.returncode == 0, output[-4000:]

    seen = [json.loads((tmp_path / f"rank{r}.json").read_text(encoding="utf-8")) for r in (0, 1)]
    assert [(s["global_rank"], s["node_rank"], s["local_rank"]) for s in seen] == [
        (0, 0, 0),
        (1, 1, 0),
    ]
    assert {s["world_size"] for s in seen} == {2}
    first, second = ({tuple(pair) for pair in s["pairs"]} for s in seen)
    assert first and second and not first & second  # disjoint shares of the epoch
    toy = [
        (TOY_CORPUS_DIR / f"train.{lang}").read_text(encoding="utf-8").splitlines()
        for lang in ("de", "en")
    ]
    every = Counter(zip(*toy, strict=True))
    assert Counter(tuple(p) for s in seen for p in s["pairs"]) == every  # each pair once

    weights = [torch.load(tmp_path / f"weights{r}.pt", weights_only=True) for r in (0, 1)]
    assert weights[0].keys() == weights[1].keys()
    for name, tensor in weights[0].items():
        assert torch.equal(tensor, weights[1][name]), name
    assert len(list((tmp_path / "runs" / "tiny").iterdir())) == 1  # one run directory


@pytest.mark.parametrize(
    ("env", "zero"),
    [
        ({}, True),
        ({"NODE_RANK": "0"}, True),
        ({"NODE_RANK": "1"}, False),  # node 1's first process: LOCAL_RANK unset, not rank 0
        ({"NODE_RANK": "1", "LOCAL_RANK": "0"}, False),
        ({"GROUP_RANK": "2"}, False),
        ({"NODE_RANK": "0", "LOCAL_RANK": "1"}, False),
        ({"RANK": "0", "NODE_RANK": "1"}, True),  # torchrun's global rank wins
        ({"SLURM_PROCID": "3"}, False),
    ],
)
def test_only_the_first_process_of_node_0_is_rank_zero(
    env: dict[str, str], zero: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("RANK", "SLURM_PROCID", "LOCAL_RANK", "NODE_RANK", "GROUP_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert (launch_rank() == 0) is zero


def test_several_nodes_without_a_launcher_are_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """Was: `--trainer.num_nodes 2` on one machine, with nothing naming node 0, printed
    nothing and waited for the other node, ignoring SIGTERM and Ctrl-C."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MINITX_DEBUG", raising=False)
    for name in ("MASTER_ADDR", "SLURM_NTASKS", "RANK", "LSB_JOBID"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        train_cli.main(["--config", str(TINY_CONFIG), "--trainer.num_nodes", "2"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: trainer.num_nodes=2, and nothing says where node 0 is" in err
    assert err.count("\n") == 1 and not (tmp_path / "runs").exists()
    check_launcher(SimpleNamespace(trainer={"num_nodes": 1}))  # one node needs none
    # a cluster plugin is Lightning's to read: it may be the environment that connects them
    check_launcher(SimpleNamespace(trainer={"num_nodes": 2, "plugins": ["cluster"]}))
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")  # Lightning's own launcher's variables
    check_launcher(SimpleNamespace(trainer={"num_nodes": 2}))
