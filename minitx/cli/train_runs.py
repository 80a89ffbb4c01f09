"""Where a `minitx-train` run goes, and what a resume goes on from.

A run's directory is ``{runs_dir}/{run_name}/{version}``: a new run claims a fresh version
(`shared_version`, the same in every DDP process), ``--ckpt_path last`` takes the family's
newest ``last.ckpt`` (`last_run_checkpoint`), and a resume from a run's own ``last.ckpt`` goes on
in that run's directory (`own_run_version`); the resume's own checks are the command's
(`minitx.cli.train`).
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

from minitx.checkpoint import read_checkpoint
from minitx.errors import is_whole_number
from minitx.outputs import RUN_STAMP, claim_run_dir


def last_run_checkpoint(run_root: Path) -> Path | None:
    """Newest `{run_root}/*/checkpoints/last.ckpt`."""
    found = sorted(run_root.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


_VERSION_ENV = "MINITX_RUN_VERSION"
"""Hands rank 0's run directory name to the DDP worker processes it launches."""


def _is_last_of_a_run(checkpoint: Path) -> bool:
    """Whether `checkpoint` is a run's ``RUN_ROOT/VERSION/checkpoints/last.ckpt``."""
    return checkpoint.name == "last.ckpt" and checkpoint.parent.name == "checkpoints"


def own_run_version(checkpoint: Path, run_root: Path) -> str | None:
    """The run directory name (version) of `checkpoint` when it is the last.ckpt of one of
    `run_root`'s runs (``run_root/VERSION/checkpoints/last.ckpt``): resuming from it by path
    goes on in that run's directory, as ``--ckpt_path last`` does. Any other checkpoint (an
    earlier best one, say) starts a new run directory: going on in its own would cut that
    run's later history."""
    run_dir = checkpoint.parent.parent
    if not _is_last_of_a_run(checkpoint) or run_dir.parent.resolve() != run_root.resolve():
        return None  # another run family's checkpoint: this run gets a directory of its own
    return run_dir.name


def elsewhere_note(checkpoint: Path, run_dir: Path, *, own_loggers: bool = False) -> str | None:
    """The note for a resume from another runs directory's last.ckpt (a job started in
    another working directory, say), which goes on in the new `run_dir`: the settings that
    continue the checkpoint's own run in its directory instead (`own_loggers`: the first
    logger's, which name the run directory then)."""
    family = Path(os.path.abspath(checkpoint)).parent.parent.parent  # RUNS_DIR/RUN_NAME
    if not _is_last_of_a_run(checkpoint) or not family.name:
        return None
    runs_dir, run_name = shlex.quote(str(family.parent)), shlex.quote(family.name)
    settings = (
        f"set the first logger's save_dir to {runs_dir} and its name to {run_name}"
        if own_loggers
        else f"add --runs_dir {runs_dir} --run_name {run_name}"
    )
    return (
        f"{checkpoint} is the last checkpoint of a run in {family}, not of this run's "
        f"runs_dir/run_name: this run goes on from it in a new directory, {run_dir}; "
        f"to continue that run in its own directory, {settings}"
    )


def shared_version(run_root: Path) -> str:
    """A new run's directory name, claimed by rank 0 and the same in every DDP process.

    Lightning starts the other ranks as copies of this command after rank 0 has parsed it;
    they inherit rank 0's environment, so rank 0 publishes its choice there. A rank that was
    not started by rank 0 (torchrun, SLURM) claims nothing: rank 0's directory is the one
    Lightning broadcasts to every rank for logs and checkpoints.
    """
    if launch_rank() != 0:
        return os.environ.get(_VERSION_ENV) or time.strftime(RUN_STAMP)
    version = claim_run_dir(run_root).name
    os.environ[_VERSION_ENV] = version
    return version


def launch_rank() -> int:
    """This process's global rank as the launchers set it (0 when launched alone).

    torchrun sets RANK and SLURM sets SLURM_PROCID. A manual multi-node launch (Lightning's
    own launcher on every node: NODE_RANK or GROUP_RANK, MASTER_ADDR, MASTER_PORT) sets no
    global rank before Lightning starts; there it is NODE_RANK x the processes per node +
    LOCAL_RANK. The processes per node (``trainer.devices``) are not known yet, so
    LOCAL_WORLD_SIZE stands in, else 1: the value may be off, but it is 0 exactly for the
    first process of node 0, which is all that callers ask.
    """
    for name in ("RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    node = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0"))
    local = os.environ.get("LOCAL_RANK", "0")
    per_node = os.environ.get("LOCAL_WORLD_SIZE", "1")
    if not (node.isdigit() and local.isdigit() and per_node.isdigit()):
        return 0
    return int(node) * max(1, int(per_node)) + int(local)


def checkpoint_step(checkpoint: Path) -> int | None:
    """The global step a Lightning checkpoint was saved at (None when unreadable)."""
    try:
        state = read_checkpoint(checkpoint, mmap=True)
    except (OSError, ValueError):  # the resume refuses a damaged checkpoint itself, in one line
        return None
    step = state.get("global_step", 0)
    return int(step) if is_whole_number(step) else None  # a damaged one: refused at the resume
