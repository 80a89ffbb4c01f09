"""`minitx-train` (also `python scripts/train.py`): train a Transformer with `LightningCLI`.

What it adds to LightningCLI (the training guide, docs/guides/training.md, tells the user's
side): the packaged default config and `--config NAME`; one directory per run,
`{runs_dir}/{run_name}/{version}` (`claim_run_dir`); the minitx callbacks and loggers;
`--ckpt_path last`; exit statuses 130 / 143 after Ctrl-C / SIGTERM, once `last.ckpt` is saved;
the test-split scores of the best checkpoint after fitting (`_test`); quiet libraries unless
``--verbose`` (`set_verbosity`), so that the first line of a failed run is its ``error:`` line.
"""

from __future__ import annotations

import difflib
import functools
import logging
import math
import os
import random
import re
import shlex
import shutil
import signal
import sys
import time
import types
import typing
import warnings
from collections.abc import Iterable, Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import lightning as L
import torch
import yaml
from lightning.fabric.plugins import CheckpointIO
from lightning.fabric.utilities.seed import max_seed_value, min_seed_value
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException

from minitx.checkpoint import CHECKPOINT_KEY, check_minitx_checkpoint, read_checkpoint, seed_of
from minitx.cli.common import (
    EXIT_SIGINT,
    EXIT_SIGTERM,
    EXIT_USER_ERROR,
    UsageError,
    check_stdout,
    check_writable_dir,
    datasets_progress_bars,
    each_warning_once,
    hub_verbosity,
    no_room_for_output,
    reader_gone,
    report_user_error,
    show_library_warnings,
    sigterm_raises,
    stop_said,
    with_negative_value_hint,
    work_begins,
)
from minitx.data.datamodule import TranslationDataModule
from minitx.decoding import DecodingConfig
from minitx.errors import (
    ConfigError,
    MinitxError,
    Terminated,
    debug_requested,
    is_whole_number,
)
from minitx.outputs import RUN_STAMP, claim_run_dir, hold_run_dir, release_run_dirs
from minitx.textio import print_stop, write_text_atomic
from minitx.training import (
    AttentionMapLogger,
    CheckpointAveraging,
    CheckpointOnInterrupt,
    MinitxProgressBar,
    PlainProgress,
    TokenThroughput,
    TranslationModule,
    ValidateAtEnd,
    ValidationExamples,
)
from minitx.training.cadence import duration, validation_cadence
from minitx.training.callbacks import (
    BudgetClock,
    budget_schedules,
    train_time_elapsed,
    train_time_remaining,
)
from minitx.training.checkpoint_io import AtomicCheckpointIO
from minitx.training.loggers import (
    TEST_PREFIX,
    ContinuingCSVLogger,
    continuing_loggers,
    purge_step,
    run_directory,
)
from minitx.training.module import VALIDATION_METRICS
from minitx.training.precision import resolve_precision
from minitx.training.resume import MovedRunCheckpoints, RandomState
from minitx.training.schedules import BudgetSchedule

if TYPE_CHECKING:
    from minitx.evaluation import Split

logger = logging.getLogger(__name__)

CONFIG_DIR = Path(str(resources.files("minitx") / "configs"))
"""The configs shipped with the package."""
DEFAULT_CONFIG = CONFIG_DIR / "multi30k_de_en.yaml"

LIBRARY_LOGGERS = ("lightning.pytorch", "lightning.fabric")


def set_verbosity(verbose: bool) -> None:
    """Quiet the libraries' chatter, or (`verbose`) let it through.

    Quiet: Lightning's loggers at WARNING, huggingface_hub's (the retries of a hub download)
    at ERROR, and no datasets progress bars where standard error is not a terminal (in a log
    file they are carriage-return frames). Verbose: Lightning's INFO lines, huggingface_hub's
    warnings, the datasets progress bars, and minitx's own INFO lines (data preparation,
    tokens/s per epoch) on standard error.
    """
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    hub_verbosity(verbose)
    datasets_progress_bars(verbose)
    log = logging.getLogger("minitx")
    show_library_warnings()  # in every command's format; `each_warning_once` filters it
    if verbose:
        log.setLevel(logging.INFO)
    elif log.level == logging.INFO:  # left by a verbose run before, in this process
        log.setLevel(logging.WARNING)


def _non_finite(key: str, value: Any) -> Iterator[tuple[str, float]]:
    """The settings under `key` (a config namespace, list or value) that are a NaN or an
    infinite float, as (key, value)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield key, value
    elif hasattr(value, "items"):  # a jsonargparse Namespace or a dict
        for name, item in value.items():
            yield from _non_finite(f"{key}.{name}" if key else str(name), item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite(f"{key}[{index}]", item)


def check_finite(config: Any) -> None:
    """Refuse a NaN or infinite number anywhere in the parsed config (``model.optim.lr: .nan``
    in a YAML file, ``--model.optim.lr=1e999``): no setting of minitx or Lightning means
    anything with one.

    Raises:
        ConfigError: naming the first such key.
    """
    for key, value in _non_finite("", config):
        raise ConfigError(f"{key}={value}: not a finite number; give a finite value")


def _admits_null(typehint: Any) -> bool:
    """Whether a setting of this type may be null (``Optional[...]``, ``Any``, a union with
    None)."""
    if typehint in (Any, type(None)):
        return True
    if typing.get_origin(typehint) in (typing.Union, types.UnionType):
        return any(_admits_null(arg) for arg in typing.get_args(typehint))
    return False


def check_no_null(parser: LightningArgumentParser, config: Any) -> None:
    """Refuse null for a setting whose type has no null (``run_name: null``, ``data.source: ~``
    in a config file): jsonargparse lets null through for text settings, which then fail deep
    inside with a TypeError. Linked settings are filled later (`LINKED_SETTINGS`).

    Raises:
        ConfigError: naming the first such key and the kind of value to give.
    """
    # jsonargparse keeps a typed key's type as _typehint; nested keys come flattened (data.source)
    for action in parser._actions:
        typehint = getattr(action, "_typehint", None)
        if typehint is None or action.dest.endswith(".help") or action.dest in LINKED_SETTINGS:
            continue
        if config.get(action.dest) is None and not _admits_null(typehint):
            raise ConfigError(f"{action.dest}=null: give {_kind(typehint)}")


def _kind(typehint: Any) -> str:
    """The kind of value a setting of this type takes, as an error line asks for it: 'text',
    'text or an Accelerator'."""
    if typing.get_origin(typehint) in (typing.Union, types.UnionType):
        return " or ".join(_kind(arg) for arg in typing.get_args(typehint))
    name = getattr(typehint, "__name__", str(typehint))
    return _KINDS.get(name, f"an {name}" if name[:1] in "AEIOU" else f"a {name}")


def check_budget_and_seed(config: Any) -> None:
    """Refuse a ``trainer.max_time`` Lightning cannot read and a seed out of range, before
    Lightning seeds or builds its Timer (each fails there with a traceback).

    Raises:
        ConfigError: naming the setting, the value and the forms it takes.
    """
    max_time = config.trainer.get("max_time")
    if max_time is not None:
        budget = duration(max_time)
        if budget.total_seconds() <= 0:
            raise ConfigError(
                f"trainer.max_time={max_time!r}: the budget must be longer than zero, or null"
            )
    seed = config.get("seed_everything")
    if isinstance(seed, int) and not isinstance(seed, bool):
        low, high = min_seed_value, max_seed_value  # what `seed_everything` takes
        if not low <= seed <= high:
            raise ConfigError(
                f"seed_everything={seed}: a seed lies in {low}..{high}; give one there, or "
                "true for a random one"
            )


def random_seed() -> int:
    """The seed ``--seed_everything true`` asks for: drawn at random (Lightning 2.6 takes 0),
    and said with how to repeat the run; the processes Lightning starts for DDP (they have a
    ``LOCAL_RANK``) read the first one's from ``PL_GLOBAL_SEED``, which it sets for them."""
    inherited = os.environ.get("PL_GLOBAL_SEED", "")
    if "LOCAL_RANK" in os.environ and inherited.isdigit():
        return int(inherited)
    seed = random.SystemRandom().randint(0, 2**31 - 1)
    print(
        f"note: seed_everything true: the seed drawn is {seed} (--seed_everything {seed} "
        "repeats the run)",
        file=sys.stderr,
    )
    return seed


def check_trainer_counts(config: Any) -> None:
    """Refuse the trainer settings Lightning's Trainer accepts but then fails on, or reads
    otherwise than a user meant: a count of zero it divides by inside the loop (a
    ZeroDivisionError after the run directory is written); a zero plan, a run that trains
    nothing; a negative gradient clip, by which torch scales the gradients (the run
    diverged); a negative ``log_every_n_steps`` (every step); a ``limit_test_batches``, which
    the test after fitting does not read; a spawning strategy; a ``val_check_interval``
    below one batch.

    Raises:
        ConfigError: naming the setting and the values it takes.
    """
    trainer = config.trainer
    for key in ("max_steps", "max_epochs"):  # Lightning's fit ended at once, with status 0
        if trainer.get(key) == 0:
            raise ConfigError(
                f"trainer.{key}=0 trains nothing; give at least 1, or -1 for no bound"
            )
    if trainer.get("limit_train_batches") == 0:  # the same: an empty run directory, status 0
        raise ConfigError(
            "trainer.limit_train_batches=0 trains nothing; give a number of batches (at least "
            "1), a fraction of an epoch in (0.0, 1.0], or null for all"
        )
    clip = trainer.get("gradient_clip_val")
    if clip is not None and clip < 0:  # torch would scale the gradients by a negative factor
        raise ConfigError(
            f"trainer.gradient_clip_val={clip:g}: give 0 or more (0 or null: no clipping)"
        )
    for key in ("accumulate_grad_batches", "check_val_every_n_epoch"):
        value = trainer.get(key)
        if is_whole_number(value) and value < 1:
            raise ConfigError(f"trainer.{key}={value}: give a whole number of at least 1")
    strategy = trainer.get("strategy")
    if isinstance(strategy, str) and "spawn" in strategy:  # ddp_spawn, ddp_spawn_find_...
        # its processes get the run pickled, and the command line's links do not pickle
        raise ConfigError(
            f"trainer.strategy={strategy}: minitx-train starts its processes with "
            "--trainer.strategy ddp (multi-node.md), not by spawning; use ddp"
        )
    every = trainer.get("log_every_n_steps")
    if is_whole_number(every) and every < 0:  # Lightning logged every step, without a word
        raise ConfigError(
            f"trainer.log_every_n_steps={every}: give a number of steps (at least 1), or 0 "
            "for no per-step curves"
        )
    limit = trainer.get("limit_test_batches")
    if limit is not None:  # 0 tested everything, and so did 1 batch
        raise ConfigError(
            f"trainer.limit_test_batches={limit}: the test after fitting decodes the whole test "
            "split (greedy and beam 5), outside Lightning's test loop; leave it out, and use "
            "--test false for no test, or minitx-evaluate --limit N on the checkpoint"
        )
    interval = trainer.get("val_check_interval")
    if is_whole_number(interval) and interval < 1:  # 0.0, a fraction, validates every batch
        raise ConfigError(
            f"trainer.val_check_interval={interval}: give a number of batches (at least 1), a "
            "fraction of an epoch in [0.0, 1.0] or a time 'DD:HH:MM:SS'"
        )


class ConfigInCheckpoint(SaveConfigCallback):
    """Write the resolved config to the run directory and into every checkpoint.

    ``config.yaml`` is replaced atomically (`write_text_atomic`), never left half-written.
    """

    @functools.cached_property
    def config_text(self) -> str:
        """The resolved config as YAML, dumped once: it is fixed by the time the fit starts, and
        a dump takes a tenth of a second, a large share of a small run's checkpoint writes."""
        return self.parser.dump(self.config, skip_none=False)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = run_directory(trainer)  # a collective under DDP: every rank asks
        if trainer.is_global_zero and self.save_to_log_dir and log_dir is not None:
            Path(log_dir).mkdir(parents=True, exist_ok=True)  # no logger: default_root_dir
            write_text_atomic(Path(log_dir) / self.config_filename, self.config_text)
        self.already_saved = trainer.strategy.broadcast(True)

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint.setdefault(CHECKPOINT_KEY, {})["train_config"] = self.config_text


def _check_bleu_schedule(config: Any) -> None:
    """The best checkpoint watching val/bleu needs BLEU in every epoch it is chosen in.

    Raises:
        ConfigError: naming both settings.
    """
    every = config.model.validation.bleu_every_n_epochs
    checkpoint = config.checkpoint
    n_epochs = checkpoint.every_n_epochs  # None: every epoch, unless a step or time trigger
    if n_epochs is None:
        n_epochs = 0 if checkpoint.every_n_train_steps or checkpoint.train_time_interval else 1
    if checkpoint.monitor == "val/bleu" and (every <= 0 or n_epochs % every):
        raise ConfigError(
            f"model.validation.bleu_every_n_epochs={every} but checkpoint.monitor is val/bleu "
            f"every {n_epochs} epoch(s); set checkpoint.every_n_epochs to a multiple of "
            f"{every} (or monitor val/loss instead, with --checkpoint.mode min)"
        )


def _check_checkpoint(config: Any) -> None:
    """Refuse the ``checkpoint.*`` settings ModelCheckpoint refuses only with a traceback (a
    validation metric that is never logged: after the first epoch), and a mode that keeps the
    worst checkpoint as the best (``val/loss`` with ``max``): the test after fitting would score
    it, with no word said.

    Raises:
        ConfigError: naming the setting and the values it takes.
    """
    checkpoint = config.checkpoint
    if checkpoint.mode not in ("min", "max"):
        raise ConfigError(f"checkpoint.mode={checkpoint.mode!r}: give min or max")
    if checkpoint.save_top_k < -1:
        raise ConfigError(
            f"checkpoint.save_top_k={checkpoint.save_top_k}: give -1 (keep all), 0 (none) or more"
        )
    for key in ("every_n_epochs", "every_n_train_steps"):
        value = checkpoint.get(key)
        if value is not None and value < 0:
            raise ConfigError(f"checkpoint.{key}={value}: give 0 (never) or more, or null")
    monitor = checkpoint.monitor
    if (
        isinstance(monitor, str)
        and monitor.startswith("val/")
        and monitor not in VALIDATION_METRICS
    ):
        # Lightning's ModelCheckpoint would refuse it at the first save, after a whole epoch
        raise ConfigError(
            f"checkpoint.monitor={monitor}: validation logs {', '.join(VALIDATION_METRICS)}; "
            "monitor one of them"
        )
    better = VALIDATION_METRICS.get(monitor)
    if better is not None and checkpoint.mode != better:
        raise ConfigError(
            f"checkpoint.monitor={checkpoint.monitor} with checkpoint.mode={checkpoint.mode} keeps "
            f"the worst checkpoint as the best; set --checkpoint.mode {better}"
        )


def _check_splits(config: Any) -> None:
    """``data.splits`` must map train and validation (and test, which ``--test true``, the
    default, scores after fitting), and nothing else: refused now, not after the corpus is
    read, its tokenizer trained and every split tokenized.

    Raises:
        ConfigError: naming the keys and the settings.
    """
    splits = config.data.splits
    if splits is None:
        return
    needed = ("train", "validation", "test") if config.test else ("train", "validation")
    missing = [key for key in needed if key not in splits]
    unknown = sorted(set(splits) - {"train", "validation", "test"})
    problems = [f"has no {', '.join(map(repr, missing))}"] if missing else []
    if "test" in missing:
        problems[0] += ", which --test true (the default) scores after fitting"
    if unknown:
        problems.append(f"unknown keys {unknown}")
    if problems:
        raise ConfigError(
            f"data.splits {dict(splits)} {'; '.join(problems)}; map train, validation and test "
            "to file stems (test may be left out with --test false)"
        )


def _check_averaging(config: Any) -> None:
    """``averaging.filename`` must not name a checkpoint the run saves (``last.ckpt``, or a
    name ``checkpoint.filename`` makes): the average would silently replace it.

    Raises:
        ConfigError: naming both settings.
    """
    name = config.averaging.filename
    stem = name.removesuffix(".ckpt")
    checkpoint = config.checkpoint
    pattern = checkpoint.filename or "{epoch}-{step}"  # Lightning's default
    parts = re.split(r"\{([^}]*)\}", pattern)  # text, field, text, field, ...
    insert = checkpoint.get("auto_insert_metric_name", True)
    regex = "".join(
        re.escape(part)
        if i % 2 == 0
        else (re.escape(part.split(":")[0]) + "=" if insert else "") + ".*"
        for i, part in enumerate(parts)
    )
    if re.fullmatch(r"last(-v\d+)?", stem) or re.fullmatch(regex, stem):
        raise ConfigError(
            f"averaging.filename {name!r} names a checkpoint the run saves (last.ckpt, or "
            f"checkpoint.filename {pattern!r}): the average would replace it; give another "
            "name, such as averaged.ckpt"
        )


def _last_run_checkpoint(run_root: Path) -> Path | None:
    """Newest `{run_root}/*/checkpoints/last.ckpt`."""
    found = sorted(run_root.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


_VERSION_ENV = "MINITX_RUN_VERSION"
"""Hands rank 0's run directory name to the DDP worker processes it launches."""


def _is_last_of_a_run(checkpoint: Path) -> bool:
    """Whether `checkpoint` is a run's ``RUN_ROOT/VERSION/checkpoints/last.ckpt``."""
    return checkpoint.name == "last.ckpt" and checkpoint.parent.name == "checkpoints"


def _own_run_version(checkpoint: Path, run_root: Path) -> str | None:
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


def _shared_version(run_root: Path) -> str:
    """A new run's directory name, claimed by rank 0 and the same in every DDP process.

    Lightning starts the other ranks as copies of this command after rank 0 has parsed it;
    they inherit rank 0's environment, so rank 0 publishes its choice there. A rank that was
    not started by rank 0 (torchrun, SLURM) claims nothing: rank 0's directory is the one
    Lightning broadcasts to every rank for logs and checkpoints.
    """
    if _rank() != 0:
        return os.environ.get(_VERSION_ENV) or time.strftime(RUN_STAMP)
    version = claim_run_dir(run_root).name
    os.environ[_VERSION_ENV] = version
    return version


def _rank() -> int:
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


def _global_step(checkpoint: Path) -> int | None:
    """The global step a Lightning checkpoint was saved at (None when unreadable)."""
    try:
        state = read_checkpoint(checkpoint, mmap=True)
    except (OSError, ValueError):  # the resume refuses a damaged checkpoint itself, in one line
        return None
    step = state.get("global_step", 0)
    return int(step) if is_whole_number(step) else None  # a damaged one: refused at the resume


def resolve_config_names(args: list[str]) -> list[str]:
    """Replace `--config NAME` (or `-c NAME`) by the packaged config `NAME[.yaml]` when no such
    file exists, and move ``--print_config`` to the end.

    Raises:
        UsageError: a config file that is not UTF-8 text, such as a checkpoint given as
            ``--config`` (jsonargparse would end in a UnicodeDecodeError's traceback), or
            neither a file nor a packaged name (listing the names).
    """
    # jsonargparse prints the config parsed up to --print_config: last, it shows all of it
    printing = [a for a in args if a == "--print_config" or a.startswith("--print_config=")]
    out = [a for a in args if a not in printing] + printing
    for flag, value, index in _config_args(out):
        packaged = CONFIG_DIR / (value if value.endswith(".yaml") else f"{value}.yaml")
        path = Path(value).expanduser()  # as jsonargparse reads it: --config=~/my.yaml
        if not value.strip():  # jsonargparse: "Unexpected config:", naming nothing
            raise UsageError(
                f"{flag} {value!r}: empty (is a shell variable unset?); give a config file or "
                f"a packaged name ({_packaged_names()})"
            )
        # no file of that name: a packaged config's, even beside a folder of that name (the
        # run family runs/tiny/ of `--config tiny`)
        if not path.is_file() and "/" not in value and packaged.is_file():
            out[index] = str(packaged) if out[index] == value else f"--config={packaged}"
        elif path.exists() and not path.is_file():  # jsonargparse: "Path is not a file"
            what = "a directory" if path.is_dir() else "a device or pipe"
            raise UsageError(
                f"{flag} {value}: {what}, not a config file; give a YAML file or a packaged "
                f"name ({_packaged_names()})"
            )
        elif path.is_file():
            _check_config_text(flag, path)
        elif not path.exists() and value != "-" and not any(c in value for c in "{}:\n"):
            # neither a file, standard input (-), nor a YAML text or URL: a mistyped name
            raise UsageError(
                f"{flag} {value}: no such file, nor a packaged config of that name; give a "
                f"config file or a packaged name ({_packaged_names()})"
            )
    return out


def _packaged_names() -> str:
    """The packaged configs' names, for messages: "long, multi30k_cs_en, ..., tiny"."""
    return ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))


def _config_args(args: list[str]) -> Iterator[tuple[str, str, int]]:
    """(flag, value, index of the value's item) of each ``--config``/``-c`` in `args`."""
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            yield arg, args[i + 1], i + 1
        elif arg.startswith("--config="):
            yield "--config", arg.split("=", 1)[1], i


def _check_config_text(flag: str, path: Path) -> None:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{flag} {path}: not a YAML config (byte {exc.start} is not UTF-8 text); give a "
            f"config file or a packaged name ({_packaged_names()}); "
            "to resume from a checkpoint, pass it as --ckpt_path"
        ) from None


def check_config_sections(args: list[str], parser: LightningArgumentParser) -> None:
    """Refuse a config file that is not valid YAML, is empty, or gives a section (``model``,
    ``model.transformer``, ``trainer``, ...) a value that is not a mapping of its keys.

    jsonargparse ends such a file in a traceback, or, for ``model: {transformer: 3}``, drops
    the section without a word and trains the default model.

    A key whose default in `parser` is a (jsonargparse) Namespace is a section; the defaults
    are built only when a config file is given (a tenth of a second, not every start).

    Raises:
        UsageError: naming the file, the key and what to write instead.
    """
    defaults: list[Any] = []  # built once, at the first file
    for flag, value, index in _config_args(args):
        path = Path(value)
        if path.is_file():  # else jsonargparse reports a missing file (or parses inline YAML)
            keys = _check_config_file(f"{flag} {path}", path, parser, defaults, [])
            at = index if args[index].startswith("--config=") else index - 1  # the flag's item
            _check_flags_before(args[:at], keys, flag, value)


def _check_flags_before(earlier: list[str], keys: set[str], flag: str, value: str) -> None:
    """Refuse a flag given before a config file that sets its key again: the command line is
    read in order, so the file's value won and the flag was lost without a word. A section's
    flag (``--attention_maps '{kinds: [cross]}'``) loses only the keys the file sets, which
    jsonargparse merges: those are not known here, and it passes.

    Raises:
        UsageError: naming the flag, the file (as its packaged name where it is one) and the
            order to write.
    """
    for arg in earlier:
        if not arg.startswith("--") or arg.startswith(("--config", "--print_config")):
            continue
        key = _without_init_args(arg[2:].split("=", 1)[0])
        if any(k == key or key.startswith(f"{k}.") for k in keys):
            shown = Path(value).stem if Path(value).parent == CONFIG_DIR else value
            raise UsageError(
                f"--{key} comes before {flag} {shown}, which sets {key} again and wins (the "
                f"command line is read in order); put --{key} after {flag} {shown}"
            )


def _without_init_args(key: str) -> str:
    """A dotted key as its value is set: ``trainer.logger.init_args.save_dir`` and
    ``trainer.logger.save_dir`` (jsonargparse takes both) are one setting."""
    return ".".join(part for part in key.split(".") if part != "init_args")


def _check_config_file(
    where: str, path: Path, parser: LightningArgumentParser, defaults: list[Any], seen: list[Path]
) -> set[str]:
    """`check_config_sections` for one file, and for each file its ``config:`` key includes
    (jsonargparse reads them relative to the including file's folder); returns the dotted
    keys they set."""
    if path.resolve() in seen:
        chain = " -> ".join(str(p) for p in [*seen, path.resolve()])
        raise UsageError(f"{where}: the config files include each other ({chain}); remove one")
    try:
        settings = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)
    except _KeyTwice as twice:
        raise UsageError(
            f"{where}: {twice}, and YAML would keep only the second: write it once"
        ) from None
    except yaml.YAMLError as exc:  # jsonargparse's message names no file
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        raise UsageError(
            f"{where}: not valid YAML ({problem}{at}); indent with spaces, not tabs, and write "
            "'key: value' pairs"
        ) from None
    if settings is None:
        raise UsageError(
            f"{where}: the file holds no settings (it is empty or all comments); give keys "
            "such as 'trainer: {max_steps: 100}', or leave out this --config"
        )
    if not defaults:
        defaults.append(parser.get_defaults())
    _check_sections(where, settings, defaults[0], "")
    keys = _dotted_keys(settings)
    included = settings.get("config") if isinstance(settings, dict) else None
    for name in included if isinstance(included, list) else [included]:
        if isinstance(name, str) and (path.parent / name).is_file():
            inner = path.parent / name  # an absolute `name` stays itself
            keys |= _check_config_file(
                f"{inner} (included by {path})", inner, parser, defaults, [*seen, path.resolve()]
            )
    return keys - {"config"}


def _dotted_keys(settings: Any, prefix: str = "") -> set[str]:
    """The keys a config's mapping sets, each as its flag names it: {"model.optim.lr", ...}
    (an ``init_args`` level adds no part, as `_without_init_args` reads a flag)."""
    if not isinstance(settings, dict):
        return {prefix.rstrip(".")} if prefix else set()
    return {
        k
        for key, value in settings.items()
        for k in _dotted_keys(value, prefix if key == "init_args" else f"{prefix}{key}.")
    }


class _KeyTwice(Exception):
    """A mapping of a config file gives one key twice."""


class _UniqueKeys(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping, which PyYAML (and so
    jsonargparse) resolves to the last one without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be redone
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):  # a `? [a, b]` key is no setting: jsonargparse says so
                continue
            line = key_node.start_mark.line + 1
            if key in lines:
                raise _KeyTwice(f"key {key!r} is given twice (lines {lines[key]} and {line})")
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """'; did you mean PREFIX+KEY?' for the key of `known` closest to a misspelt `word`
    (difflib's ratio), or '' when none is close."""
    close = difflib.get_close_matches(word, sorted(known), n=1)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def _check_sections(where: str, settings: Any, defaults: Any, prefix: str) -> None:
    if not isinstance(settings, dict):
        if not prefix:
            raise UsageError(
                f"{where}: the file holds {type(settings).__name__} {settings!r}, not a mapping "
                "of settings; write keys such as 'trainer: {max_steps: 100}'"
            )
        keys = prefix.rstrip(".").split(".")
        child = next(iter(defaults.keys()), "key").split(".")[0]
        example = "".join(f"{k}: {{" for k in keys) + f"{child}: ..." + "}" * len(keys)
        shown = "empty" if settings is None else repr(settings)
        raise UsageError(
            f"{where}: {prefix.rstrip('.')} is {shown}, but it is a section of settings, not a "
            f"value; write its keys below it, as in '{example}'"
        )
    if prefix and ("class_path" in settings or "init_args" in settings):
        # jsonargparse's form of a class's settings: its init_args are the section's keys
        settings = settings.get("init_args") if isinstance(settings.get("init_args"), dict) else {}
    for key, value in settings.items():
        if f"{prefix}{key}" in LINKED_SETTINGS:
            raise UsageError(
                f"{where}: {prefix}{key} is set from {LINKED_SETTINGS[f'{prefix}{key}']}; set "
                "that instead"
            )
        if isinstance(key, str) and key not in defaults:  # else jsonargparse names no file
            known = {k.split(".")[0] for k in defaults.keys() if not k.startswith("_")}
            hint = did_you_mean(key, known, prefix)
            raise UsageError(
                f"{where}: {prefix}{key} is not a setting{hint}  "
                f"({_command()} --help lists every key)"
            )
        default = defaults.get(key) if isinstance(key, str) else None
        if isinstance(default, type(defaults)):  # a section: a (jsonargparse) Namespace
            _check_sections(where, value, default, f"{prefix}{key}.")


def _is_rate_monitor(callback: Any) -> bool:
    """Whether a configured callback (a class_path entry, or an object) is a LearningRateMonitor."""
    name = callback.get("class_path") if hasattr(callback, "get") else type(callback).__name__
    return str(name).endswith("LearningRateMonitor")


class OneLineErrorParser(LightningArgumentParser):
    """The command-line parser, with a parse error as one ``error: ...`` line (exit status 2)
    instead of a 120-line usage dump; ``MINITX_DEBUG=1`` keeps jsonargparse's report."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or debug_requested():
            super().error(message, ex)
        one_line = " ".join(str(message).split())
        one_line = self._section_message(one_line) or _choices_message(one_line)
        one_line = with_negative_value_hint(one_line)
        one_line += self._did_you_mean(message)
        print(f"error: {one_line}  ({_command()} --help lists every key)", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)

    def _section_message(self, message: str) -> str | None:
        """jsonargparse's refusal of a value given to a section (``--data DIR``,
        ``--model.transformer 3``), which it reads as the path of a YAML file of the
        section's keys: said as that, with the key the value was probably meant for."""
        refused = re.match(
            r"Parser key \"([\w.]+)\": Unable to load config (['\"])(.*?)\2", message
        )
        if refused is None:
            return None
        section, value = refused.group(1), refused.group(3)
        if Path(value).is_file():
            return (
                f"--{section} {value}: the file does not hold a mapping of {section}'s keys; "
                f"write them as 'key: value' lines"
            )
        # --data DIR is the likely slip (minitx-evaluate takes --data): name data.source
        example = f"--data.source {value or 'DIR'}" if section == "data" else f"--{section}.KEY"
        return (
            f"--{section} {value!r}: {section} is a section of settings, not a value; set its "
            f"keys, as in {example}, or give a YAML file of them"
        )

    def _did_you_mean(self, message: str) -> str:
        """'; did you mean --KEY?' for the first unrecognized --flag that is close to a key,
        as a config file's misspelt key gets (`_check_sections`); else ''."""
        unknown = re.match(r"unrecognized arguments: (.*)", str(message))
        flags = re.findall(r"(?:^|\s)(--[^\s=]+)", unknown.group(1)) if unknown else []
        if not flags:  # the defaults take a tenth of a second to build: only for a hint
            return ""
        keys = [f"--{key}" for key in self.get_defaults().keys() if not key.startswith("_")]
        return next((hint for flag in flags if (hint := did_you_mean(flag, keys))), "")


_KINDS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "str": "text",
    "NoneType": "null",
    "dict[str, str]": "a mapping {name: text, ...}",
}
"""How a setting's type is asked for in an error line (jsonargparse names Python's classes)."""


def _choices_message(message: str) -> str:
    """jsonargparse's refusal of a value outside a union of literals (``trainer.precision``)
    lists each subtype's type and error, then the value: said as the value and its choices.
    Its refusal of ``nan`` for a float is said as a NaN's (``.nan``) is, and a value of the
    wrong type (``<class 'int'>``, a union of such) as the kind of value to give."""
    nan = re.fullmatch(
        r"Parser key \"([\w.]+)\": Expected a <class 'float'>\. Got value: "
        r"(nan|[+-]?inf(?:inity)?)",
        message,
        re.I,
    )
    if nan:  # YAML reads 'nan' as text: only '.nan' is the float, which check_finite refuses
        return f"{nan.group(1)}={nan.group(2)}: not a finite number; give a finite value"
    typed = re.fullmatch(
        r"Parser key \"([\w.]+)\": Expected a <class '(\w+)'>\. Got value: (.*)", message
    )
    if typed and typed.group(2) in _KINDS:  # Python's class names are not what a user types
        given = "null" if typed.group(3) == "None" else typed.group(3)  # as YAML writes it
        return f"{typed.group(1)}={given}: give {_KINDS[typed.group(2)]}"
    key = re.match(r'Parser key "([\w.]+)": Does not validate against any of the Union', message)
    given = re.search(r"Given value: (.*)$", message)
    literals = re.findall(r"Subtypes: \[(.*?)\] Errors:", message)
    if not (key and given and literals):
        return message
    subtypes = re.findall(r"dict\[str, str\]|<class '\w+'>", literals[0])
    words = [_KINDS.get(re.sub(r"<class '(\w+)'>", r"\1", t)) for t in subtypes]
    if subtypes and ", ".join(subtypes) == literals[0] and all(words):  # types, no literals
        return f"{key.group(1)}={given.group(1)}: give {' or '.join(map(str, words))}"
    choices = re.findall(r"typing\.Literal\[(.*?)\]", literals[0])
    others = re.sub(r"typing\.Literal\[.*?\]|<class 'NoneType'>|[, ]", "", literals[0])
    if not choices or others:  # a type beside the literals (an int, a class): not a choice
        return message
    # one of each as typed on the command line: 64 and '64' are both 64
    values = [v.strip().strip("'") for group in choices for v in group.split(",")]
    values = list(dict.fromkeys(values)) + (["null"] if "NoneType" in literals[0] else [])
    return f"{key.group(1)}={given.group(1)}: give one of {', '.join(values)}"


def _raised_in_lightning(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is Lightning's code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_globals.get("__name__", "").startswith("lightning.")


def _command() -> str:
    """How the user started training, for hints: ``python scripts/train.py`` or
    ``minitx-train`` (also for ``python -m minitx.cli.train``, whose name is train.py too)."""
    started = Path(sys.argv[0])
    return f"python {started}" if started.parent.name == "scripts" else "minitx-train"


class NotesAtFitStart(L.Callback):
    """Print ``note: ...`` lines (e.g. the precision chosen instead of the configured one) when
    fitting starts, after the data is ready: a run that fails before, on its data or
    settings, shows its ``error:`` line first."""

    def __init__(self, notes: list[str]) -> None:
        self.notes = list(notes)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            for note in self.notes:
                print(f"note: {note}", file=sys.stderr, flush=True)
        self.notes = []


LINKED_SETTINGS = {
    "model.transformer.src_vocab_size": "data.vocab_size",
    "model.transformer.tgt_vocab_size": "data.vocab_size",
    "data.max_positions": "model.transformer.max_positions",
}
"""The settings `MinitxCLI.add_arguments_to_parser` links to another, by the one they come
from: a config file that sets them is refused (jsonargparse would replace the value)."""


def check_launcher(config: Any) -> None:
    """Refuse several nodes that nothing connects: without a launcher Lightning detects
    (torchrun, SLURM, LSF, MPI), a cluster plugin or ``MASTER_ADDR``, node 0 waited for the
    others in silence, deaf to Ctrl-C.

    Raises:
        UsageError: naming the ways to start the nodes.
    """
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    trainer = config.trainer
    if (
        (trainer.get("num_nodes") or 1) == 1
        or trainer.get("plugins")
        or "MASTER_ADDR" in os.environ
    ):
        return  # a plugin may be the cluster's environment: Lightning reads it
    launchers = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)
    if not any(env.detect() for env in launchers):
        raise UsageError(
            f"trainer.num_nodes={trainer.get('num_nodes')}, and nothing says where node 0 is: "
            "on every node, set MASTER_ADDR, MASTER_PORT and NODE_RANK, or start it with "
            "torchrun, SLURM or mpirun (the multi-node guide); on one machine, use "
            "--trainer.devices N"
        )


def check_values(parser: LightningArgumentParser, config: Any) -> None:
    """The checks of a parsed config's values alone, with neither the data, the model nor
    the machine: a run makes them as soon as it has parsed its command line, and
    ``--print_config`` before it prints."""
    check_no_null(parser, config)
    check_budget_and_seed(config)
    check_finite(config)
    check_trainer_counts(config)
    _check_checkpoint(config)
    _check_bleu_schedule(config)
    _check_splits(config)
    _check_averaging(config)


class MinitxCLI(LightningCLI):
    """LightningCLI with minitx's links, run directories, callbacks and resume logic."""

    def add_arguments_to_parser(self, parser: Any) -> None:
        # The targets of these links are LINKED_SETTINGS.
        parser.link_arguments("data.vocab_size", "model.transformer.src_vocab_size")
        parser.link_arguments("data.vocab_size", "model.transformer.tgt_vocab_size")
        parser.link_arguments(  # the data module cuts evaluation pairs to the model's length
            "model.model_config",
            "data.max_positions",
            compute_fn=lambda config: config.max_positions,
            apply_on="instantiate",
        )
        parser.add_argument(
            "--run_name",
            type=str,
            default="run",
            help="run family: {runs_dir}/{run_name}/<timestamp>",
        )
        parser.add_argument("--runs_dir", type=str, default="runs", help="root of all runs")
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help="resume from this checkpoint; 'last' = the newest run of this run_name",
        )
        parser.add_argument(
            "--test",
            type=bool,
            default=True,
            help="after fitting, score the best checkpoint on the test split (greedy and beam)",
        )
        parser.add_argument(
            "-v",
            "--verbose",
            action="store_true",
            help="show the libraries' messages too: Lightning's INFO lines (seed, accelerators, "
            "model summary), the datasets progress bars, minitx's INFO lines",
        )
        config = next(a for a in parser._actions if "--config" in a.option_strings)
        config.help = (  # jsonargparse's help names no packaged config (resolve_config_names)
            f"a YAML config file, or a packaged config's name: {_packaged_names()}; given "
            "more than once, later ones override earlier ones"
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(AttentionMapLogger, "attention_maps")
        parser.add_lightning_class_args(CheckpointAveraging, "averaging")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then quiet the libraries unless ``--verbose`` (before the seed is set: its
        message is Lightning's first line)."""
        given = sys.argv[1:] if args is None else list(args)
        check_config_sections(given, parser)
        printed = [a for a in given if a == "--print_config" or a.startswith("--print_config=")]
        if printed:
            # jsonargparse prints inside its parse, before any value is checked: a config it
            # printed (lr nan, max_time "bad") would then be refused by the run
            check_values(parser, parser.parse_args([a for a in given if a not in printed]))
        super().parse_arguments(parser, args)
        # as given: Lightning replaces true by the seed it chooses (which may differ at a resume)
        self.seed_given = self.config.get("seed_everything")
        set_verbosity(bool(self.config.get("verbose")))
        check_values(parser, self.config)
        if self.seed_given is True:
            self.config["seed_everything"] = random_seed()

    def before_instantiate_classes(self) -> None:
        config = self.config
        check_launcher(config)
        if config.ckpt_path is not None and not str(config.ckpt_path).strip():
            raise UsageError(
                "--ckpt_path is empty; give a checkpoint file or 'last' (a shell variable such "
                "as $CKPT may be unset), or leave --ckpt_path out to start a new run"
            )
        for key, default in (("runs_dir", "runs"), ("run_name", "run")):
            if not str(config[key]).strip():  # else the run lands in ./RUN_NAME or runs/
                raise UsageError(
                    f"--{key} is empty; give a directory name (a shell variable may be unset), "
                    f"or leave --{key} out for the default ({default!r}, or the config's)"
                )
        # a ~ the shell left (quoted, or from a config file): TensorBoard's logger read it as
        # the home directory, the CSV logger and the checkpoints as a folder named ~ here
        config.runs_dir = os.path.expanduser(config.runs_dir)
        name = os.path.normpath(config.run_name)
        if os.path.isabs(name) or name.split(os.sep)[0] in (".", ".."):
            raise UsageError(  # the run would land beside the run families, or outside runs_dir
                f"--run_name {config.run_name}: give a name inside runs_dir, such as my_run"
            )
        self.resume_path: str | None = config.ckpt_path
        self.resume_note: str | None = None  # printed at fit start
        self.run_version: str | None = None
        self.resume_step: int | None = None
        self.logger_note: str | None = None  # printed at fit start
        no_logger = config.trainer.logger in (False, [])
        if no_logger:
            callbacks = config.trainer.get("callbacks") or []
            kept = [c for c in callbacks if not _is_rate_monitor(c)]
            if len(kept) < len(callbacks):  # Lightning refuses it once the fit starts
                config.trainer.callbacks = kept
                self.logger_note = (
                    "trainer.logger false: LearningRateMonitor left out (it logs to a logger)"
                )
        explicit = not no_logger and config.trainer.logger not in (None, True)
        if explicit:  # the user's loggers: the first one names the run directory
            loggers = config.trainer.logger
            loggers = loggers if isinstance(loggers, list) else [loggers]
            first = loggers[0].init_args
            run_root = Path(first.save_dir) / (first.name or "")
        else:
            run_root = Path(config.runs_dir) / config.run_name
        if config.ckpt_path == "last":
            last = _last_run_checkpoint(run_root)
            if last is None:
                raise UsageError(
                    f"--ckpt_path last: no {run_root}/*/checkpoints/last.ckpt to resume from; "
                    "check run_name and runs_dir, or start a new run without --ckpt_path"
                )
            self.resume_path = str(last)
        version = None
        if self.resume_path is not None:
            version = _own_run_version(Path(self.resume_path), run_root)
            if version is not None:  # its metrics and events are cut back to its step
                self.resume_step = _global_step(Path(self.resume_path))
        elsewhere = self.resume_path is not None and version is None
        if explicit:
            version = version or first.version or _shared_version(run_root)
            first.version = version
            for lg in loggers[1:]:  # the others write into subdirectories of the run directory
                lg.init_args.save_dir = str(run_root / version)
                lg.init_args.name = ""
                lg.init_args.version = (
                    lg.class_path.rsplit(".", 1)[-1].lower().removesuffix("logger")
                )
        check_writable_dir(run_root, "the run directory", "runs_dir (or the logger's save_dir)")
        self.run_root, self.run_version = run_root, version or _shared_version(run_root)
        self.default_loggers = not explicit and not no_logger
        self.own_loggers = explicit
        run_dir = run_root / self.run_version
        # without a logger Lightning writes into default_root_dir: the run's own directory
        self.root_dir = run_dir if no_logger else None
        if elsewhere:
            self.resume_note = elsewhere_note(Path(config.ckpt_path), run_dir, own_loggers=explicit)
        if _rank() == 0 and run_dir.is_dir():  # DDP: rank 0 holds it for every process
            hold_run_dir(run_dir)

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        """The trainer, with the default loggers (TensorBoard + CSV in one run directory) and
        the rich progress bar (unless `trainer.enable_progress_bar` is false)."""
        trainer_config = self.config_init.get("trainer") or {}
        precision, note = resolve_precision(
            kwargs.get("precision", trainer_config.get("precision")),
            kwargs.get("accelerator", trainer_config.get("accelerator")),
        )
        notes = []
        if note is not None:
            notes.append(note)
            kwargs["precision"] = precision
        notes += [n for n in (self.resume_note, self.logger_note) if n is not None]
        summary = trainer_config.get("enable_model_summary")
        if summary is None:  # Lightning's layer table (FLOPs 0 without an example input)
            kwargs["enable_model_summary"] = bool(self.config.get("verbose"))
        elif summary:  # asked for: shown even without --verbose
            logging.getLogger("lightning.pytorch.callbacks.model_summary").setLevel(logging.INFO)
        plain = not sys.stdout.isatty()  # a log file: one line per epoch, no bar frames
        if trainer_config.get("enable_progress_bar") is not False:
            configured = trainer_config.get("callbacks") or []
            if plain:
                kwargs["enable_progress_bar"] = False
            elif not any(isinstance(cb, ProgressBar) for cb in configured):
                kwargs["callbacks"] = [*configured, MinitxProgressBar()]
        plugins = kwargs.get("plugins", trainer_config.get("plugins")) or []
        plugins = plugins if isinstance(plugins, list) else [plugins]
        if not any(isinstance(p, CheckpointIO) for p in plugins):  # checkpoints written whole
            kwargs["plugins"] = [*plugins, AtomicCheckpointIO()]
        if getattr(self, "default_loggers", False):
            run_dir = self.run_root / self.run_version
            kwargs["logger"] = [
                TensorBoardLogger(
                    save_dir=str(self.run_root.parent),
                    name=self.run_root.name,
                    version=self.run_version,
                    default_hp_metric=False,
                    **({"purge_step": purge_step(self.resume_step)} if self.resume_step else {}),
                ),
                ContinuingCSVLogger(
                    save_dir=str(run_dir), name="", version="csv", resume_step=self.resume_step
                ),
            ]
        elif getattr(self, "own_loggers", False) and self.resume_step is not None:
            built = trainer_config["logger"]
            configured = self.config.trainer.logger
            configured = configured if isinstance(configured, list) else [configured]
            kwargs["logger"] = continuing_loggers(
                built if isinstance(built, list) else [built],
                [lg.init_args.as_dict() for lg in configured],
                self.resume_step,
            )
        if getattr(self, "root_dir", None) is not None:  # no logger (trainer.logger false)
            kwargs["default_root_dir"] = str(self.root_dir)
        cadence = self._validation_cadence(trainer_config)
        kwargs.update(cadence)
        per_run, max_steps = (
            self.model.validation.validations_per_run,
            trainer_config.get("max_steps", -1),
        )
        step_bound = isinstance(cadence.get("val_check_interval"), int)  # by max_steps
        if step_bound and max_steps < per_run:  # else fewer validations than asked, silently
            notes.append(
                f"model.validation.validations_per_run ({per_run}) is above trainer.max_steps "
                f"({max_steps}): the run validates after each of its {max_steps} updates"
            )
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except MinitxError:
            raise
        except (MisconfigurationException, ValueError, TypeError, ImportError) as exc:
            # Lightning's checks; an ImportError: a precision or strategy's library missing
            if isinstance(exc, TypeError | ImportError) and not _raised_in_lightning(exc):
                raise  # a TypeError of ours is a bug: its traceback (Lightning's: devices 0,1)
            reason = _first_line(exc)
            raise ConfigError(
                f"a trainer setting Lightning refuses: {reason} (the trainer.* settings: "
                "minitx-train --help)"
            ) from exc
        trainer.callbacks.append(NotesAtFitStart(notes))
        if plain:  # last, so that TokenThroughput has measured the epoch already
            trainer.callbacks.append(PlainProgress())
        trainer.callbacks.append(ValidationExamples())  # its block follows the epoch line
        # After them (Lightning runs the checkpoint callbacks last): a stop at a validation's
        # end comes once that validation's progress line and examples are printed.
        stops = [cb for cb in trainer.callbacks if isinstance(cb, CheckpointOnInterrupt)]
        trainer.callbacks = [cb for cb in trainer.callbacks if cb not in stops] + stops
        return trainer

    def _validation_cadence(self, trainer_config: Any) -> dict[str, Any]:
        """Lightning's settings for ``model.validation.validations_per_run``
        (`validation_cadence`), unless the run sets Lightning's cadence itself
        (``val_check_interval``, ``check_val_every_n_epoch``), has no validation
        (``limit_val_batches`` 0: Lightning then saves checkpoints at each epoch's end) or is
        a ``fast_dev_run``."""
        own = trainer_config.get("val_check_interval") is not None
        own = own or trainer_config.get("check_val_every_n_epoch", 1) != 1
        own = own or bool(trainer_config.get("fast_dev_run"))  # Lightning's own short run
        if own or trainer_config.get("limit_val_batches") == 0:
            return {}
        return validation_cadence(
            self.model.validation.validations_per_run,
            trainer_config.get("max_steps", -1),
            trainer_config.get("max_epochs"),
            trainer_config.get("max_time"),
            trainer_config.get("accumulate_grad_batches", 1),
            one_process=_one_process(trainer_config),
        )


def _one_process(trainer_config: Any) -> bool:
    """Whether the trainer settings ask for exactly one training process (one device, one
    node); ``devices: auto`` may mean several."""
    devices = trainer_config.get("devices", "auto")
    one_device = devices in (1, "1") or (isinstance(devices, (list, tuple)) and len(devices) == 1)
    return one_device and (trainer_config.get("num_nodes") or 1) == 1


def build_cli(args: list[str] | None = None) -> MinitxCLI:
    """Parse `args` (default: sys.argv) over the default config and instantiate everything."""
    if args is None:  # LightningCLI reads sys.argv itself (and warns when given both)
        sys.argv[1:] = resolve_config_names(sys.argv[1:])
    else:
        args = resolve_config_names(args)
    return MinitxCLI(
        TranslationModule,
        TranslationDataModule,
        run=False,
        parser_class=OneLineErrorParser,
        save_config_callback=ConfigInCheckpoint,
        parser_kwargs={"default_config_files": [str(DEFAULT_CONFIG)]},
        seed_everything_default=0,
        trainer_defaults={
            "callbacks": [
                ModelCheckpoint(filename="last", save_top_k=1, enable_version_counter=False),
                MovedRunCheckpoints(),
                RandomState(),
                TokenThroughput(),
                # the process ends after the fit; _train_and_test puts its handlers back
                CheckpointOnInterrupt(ignore_after_stop=True),
                ValidateAtEnd(),
                BudgetClock(),
            ]
        },
        args=args,
    )


def _config_message(exc: ConfigError) -> ConfigError:
    """`exc` with the config classes named by their YAML keys (``model.transformer.n_heads``)."""
    text = str(exc)
    for cls, key in _CONFIG_KEYS.items():
        text = text.replace(f"{cls}.", f"{key}.").replace(f"{cls}:", f"{key}:")
    for linked, given in LINKED_SETTINGS.items():  # the setting the user gave, not its copy
        text = text.replace(linked, given)
    return ConfigError(text)


TEST_METRICS = ("bleu", "bleu_lowercase", "chrf")
"""Scores of the end-of-training test logged to every logger as ``test/<score>_<decoding>``."""

_CONFIG_KEYS = {
    "TransformerConfig": "model.transformer",
    "OptimConfig": "model.optim",
    "ValidationConfig": "model.validation",
    "DecodingConfig": "model.validation.decoding",
    "CheckpointAveraging": "averaging",
}


def main(args: list[str] | None = None) -> MinitxCLI:
    """Parse the command line, train, and (unless `--test false`) score on the test split.

    Returns the CLI object (trainer, model, datamodule), which tests inspect. Ends the
    process (`SystemExit`) with status 2 and one ``error: ...`` line for a user error (config,
    corpus, paths, divergence, a resume that does not match, a full disk under standard
    output), 130 after Ctrl-C, 143 after SIGTERM and 141 when the reader of standard
    output has gone (all three after saving last.ckpt); bugs keep their traceback.
    """
    try:
        return _train_and_test(args)
    except BrokenPipeError:  # `minitx-train | head -1`: last.ckpt is saved, the reader gone
        raise SystemExit(reader_gone()) from None
    except Exception as exc:
        if _rank() > 0 and _peer_gone(exc):
            # rank 0 stopped first and said why in one line; this process's traceback (from
            # the collective it was waiting in) would bury that line
            raise SystemExit(EXIT_USER_ERROR) from None
        exc = _config_message(exc) if isinstance(exc, ConfigError) else no_room_for_output(exc)
        status = report_user_error(exc)
        if status is None:
            raise
        raise SystemExit(status) from None
    finally:
        release_run_dirs()  # the training is over: another process may resume it (and the
        # directory of a run refused before it wrote anything goes)


def _peer_gone(exc: BaseException) -> bool:
    """Whether `exc` is a collective of this run failing because another of its processes
    has exited (gloo: "Connection closed by peer" or "... reset by peer"; torch's
    DistNetworkError)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    if type(exc).__name__ == "DistNetworkError":
        return True
    text = str(exc)
    return isinstance(exc, RuntimeError) and any(
        sign in text for sign in ("Connection closed by peer", "Connection reset by peer")
    )


def _first_line(exc: BaseException) -> str:
    """The first line of a library's error message (its name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _remove_unstarted_run(cli: MinitxCLI, *, collective: bool = True) -> None:
    """Remove the new run directory minitx claimed for a fit that made no update: not a
    resumed run's, nor one the user's own logger names. A `collective` under DDP: every rank
    calls it; else the first process alone, the others ended."""
    ours = getattr(cli, "default_loggers", False) and cli.resume_path is None
    if not collective:
        if ours:
            shutil.rmtree(cli.run_root / cli.run_version, ignore_errors=True)
        return
    log_dir = run_directory(cli.trainer)
    if cli.trainer.is_global_zero and ours and log_dir:
        shutil.rmtree(log_dir, ignore_errors=True)


def _stopped_before_training(
    what: str, cli: MinitxCLI | None = None, *, alone: bool = True
) -> None:
    """Say that a stop (`what`: its signal) came before the first update, so nothing was
    trained; once the fit has begun (`cli` given), remove its new run directory too (under
    DDP, not `alone`, once Lightning has ended the other processes)."""
    if cli is not None:
        _remove_unstarted_run(cli, collective=alone)
    print_stop(f"{what} before training began: nothing was trained")


def _train_and_test(args: list[str] | None) -> MinitxCLI:
    check_stdout()
    resumed_at = 0  # the update the fit starts from
    try:
        with sigterm_raises():  # the fit installs its own handlers (CheckpointOnInterrupt)
            cli = build_cli(args)
            if cli.resume_path:
                state = _check_resume(cli, Path(cli.resume_path))
                resumed_at = int(state.get("global_step", 0))
                if _rank() == 0:  # Lightning restores in silence: say what goes on from where
                    print(f"resuming from {cli.resume_path} at update {resumed_at:,}", flush=True)
                    changed = _changed_settings(cli, state)
                    if changed:  # config.yaml will hold them as if the run began with them
                        print(
                            f"note: resuming with settings other than its run's: {changed}",
                            file=sys.stderr,
                            flush=True,
                        )
                del state  # memory-mapped: the file must not stay open while the run saves
    except KeyboardInterrupt as exc:  # while parsing or checking a resume (fit handles its
        # own); `Terminated`: e.g. a scheduler's SIGTERM while a resume checks its checkpoint
        what, status = stop_said(isinstance(exc, Terminated))
        _stopped_before_training(what)
        raise SystemExit(status) from None
    trainer = cli.trainer
    for callback in trainer.checkpoint_callbacks:  # set explicitly (checkpoint.dirpath)
        if callback.dirpath:
            check_writable_dir(
                Path(callback.dirpath), "the checkpoint directory", "checkpoint.dirpath"
            )
    start = time.perf_counter()
    alone = trainer.world_size == 1  # under DDP, Lightning handles the signals on every rank
    try:
        # Until CheckpointOnInterrupt sets its handlers (on_fit_start, after the data is
        # prepared), or under DDP Lightning its own (the processes started), a SIGTERM raises
        # Terminated, as above: else it ended the process unsaid, and the other processes
        # waited for it.
        with warnings.catch_warnings(), sigterm_raises(until_replaced=not alone):
            # Lightning 2.6 builds pytree leaves in a way torch 2.13 deprecates: harmless, and
            # it would open every training log.
            warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)`")
            # resuming writes into its run's checkpoint directory, not empty by design
            warnings.filterwarnings("ignore", message=r"Checkpoint directory .* is not empty")
            if trainer.limit_val_batches == 0:  # no validation, no scores: said at the end
                warnings.filterwarnings("ignore", message=r".*could not find the monitored key")
            if cli.resume_path is not None and cli.resume_step is None:
                # a resume from another run's checkpoint goes on in a new directory by design
                warnings.filterwarnings("ignore", message=r"The dirpath has changed from")
            # a bad batch skipped on purpose (model.optim.skip_bad_batches), logged in our words
            warnings.filterwarnings("ignore", message=r"`training_step` returned `None`")
            try:
                trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.resume_path)
            except ValueError as exc:  # checked by Lightning once it has counted the batches
                if "val_check_interval" not in str(exc):
                    raise
                _remove_unstarted_run(cli)  # every rank: a collective under DDP
                reason = " ".join(str(exc).split()).replace("`val_check_interval` ", "", 1)
                raise ConfigError(
                    f"trainer.val_check_interval {reason} (on the command line: "
                    "--trainer.check_val_every_n_epoch null)"
                ) from None
            except MisconfigurationException as exc:  # e.g. limit_train_batches 0.001 of 23
                if trainer.global_step != resumed_at:
                    raise
                _remove_unstarted_run(cli)
                raise ConfigError(
                    f"a trainer setting Lightning refuses: {_first_line(exc)} (the trainer.* "
                    "settings: minitx-train --help)"
                ) from None
    except SIGTERMException:  # a bare SystemExit: it would end the process with status 0
        stops = [c.stop_signal for c in trainer.callbacks if isinstance(c, CheckpointOnInterrupt)]
        ctrl_c = signal.SIGINT in stops  # a Ctrl-C that Lightning handled as a SIGTERM
        raise SystemExit(EXIT_SIGINT if ctrl_c else EXIT_SIGTERM) from None
    except SystemExit as exc:  # Lightning ends a Ctrl-C interrupted fit with sys.exit(1)
        if trainer.interrupted and exc.code == 1:
            # `Terminated`: our SIGTERM, a KeyboardInterrupt that Lightning caught as one
            what, status = stop_said(isinstance(exc.__context__, Terminated))
            # while the data was prepared, or under DDP while the processes started (the
            # first process alone: Lightning has ended the others, no collective is left)
            if trainer.global_step in (0, resumed_at) and (alone or _rank() == 0):
                _stopped_before_training(what, cli, alone=alone)
            raise SystemExit(status) from None
        raise
    minutes = (time.perf_counter() - start) / 60
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    run_dir = run_directory(trainer)  # a collective under DDP: every rank must ask
    if trainer.is_global_zero:
        note = _time_budget_note(trainer) or _epochs_note(trainer)
        print(
            f"fit finished in {minutes:.1f} min{note}; "
            f"best checkpoint: {best or '(none)'}; run dir: {run_dir or '(none)'}"
        )
    averaging = next((c for c in trainer.callbacks if isinstance(c, CheckpointAveraging)), None)
    averaged = averaging.written if averaging else None
    if (
        averaging
        and averaging.last_n
        and not averaged
        and cli.resume_path
        and trainer.is_global_zero
    ):
        if trainer.global_step == resumed_at:  # a finished run resumed: what it wrote then
            averaged = averaging.written_at_the_end(trainer)
        if not averaged:
            print(
                f"note: no averaged checkpoint of this run's end (averaging.last_n "
                f"{averaging.last_n}: it averages the epochs a run trains since it started or "
                "resumed, and this one trained none); the test takes the best checkpoint",
                file=sys.stderr,
            )
    tested = averaged or best  # what the user would ship: the average when averaging is on
    callback = trainer.checkpoint_callback  # the run's last.ckpt, where it saved one
    last = Path(callback.dirpath) / "last.ckpt" if callback and callback.dirpath else None
    last = last if last is not None and last.is_file() else None
    if cli.config.test and not tested and trainer.is_global_zero:
        fix = f"; minitx-evaluate --checkpoint {last} scores the last weights" if last else ""
        print(
            "note: no test: no best checkpoint was kept (checkpoint.save_top_k 0, or no "
            f"validation ran){fix}",
            file=sys.stderr,
        )
    if cli.config.test and tested and trainer.is_global_zero:
        which = f"averaged checkpoint {averaged}" if averaged else "best checkpoint"
        try:
            with sigterm_raises():  # else SIGTERM's default ended the process unsaid
                _test(cli, Path(tested), which, Path(run_dir))
        except KeyboardInterrupt as exc:  # `Terminated` for a SIGTERM
            what, status = stop_said(isinstance(exc, Terminated))
            # that path, as a stopped fit says it: `last` would take a later run of the family
            again = shlex.quote(str(last)) if last else "last"
            print_stop(
                f"test {what}: the training is finished and saved; the same command with "
                f"--ckpt_path {again} runs the test again"
            )
            raise SystemExit(status) from None
    return cli


def _test(cli: MinitxCLI, checkpoint: Path, which: str, run_dir: Path) -> None:
    """Score `checkpoint` on the test split with greedy decoding and the default beam search:
    ``test.<decoding>.hyp`` in `run_dir` (one line per line of the split's files, empty for a
    pair that was not scored, as minitx-evaluate writes it) and ``test/<score>_<decoding>``
    in every logger."""
    from minitx.cli.evaluate import aligned_lines
    from minitx.evaluation import evaluate  # the inference API, used only after training
    from minitx.translator import Translator

    trainer = cli.trainer
    translator = Translator.from_pretrained(checkpoint, device=cli.model.device)
    split = _test_split(cli.datamodule)
    unscored = split.n_lines - len(split.sources)
    note = f"; {unscored} of {split.n_lines} lines not scored: an empty side" if unscored else ""
    print(f"test ({len(split.sources)} sentences{note}), {which}:")
    scores: dict[str, float] = {}
    with each_warning_once():  # the sources are read once per decoding
        for decoding in (DecodingConfig(strategy="greedy"), DecodingConfig()):
            result = evaluate(
                translator, split.sources, split.references, decoding, lines=split.lines
            )
            hyp_path = run_dir / f"test.{decoding.file_tag}.hyp"  # as minitx-evaluate names it
            write_text_atomic(hyp_path, aligned_lines(split, result.hypotheses))
            print(f"  {result.summary()}")
            print(f"  hypotheses written to {hyp_path}")
            figures = result.as_dict()
            tag = decoding.file_tag
            scores |= {f"{TEST_PREFIX}{key}_{tag}": figures[key] for key in TEST_METRICS}
    # All at once: a test stopped between its decodings logs nothing, and the resume's test
    # logs each score once.
    for lg in trainer.loggers:  # beside the validation curves, in every logger
        lg.log_metrics(scores, step=trainer.global_step)
        lg.save()


def _test_split(datamodule: TranslationDataModule) -> Split:
    """The test split the data module serves, as minitx-evaluate's `Split`: its pairs, and the
    line of each in the split's files (pairs with an empty side are not among them)."""
    from minitx.evaluation import Split

    sources, references = datamodule.texts("test")
    lines = [int(n) for n in datamodule.dataset["test"]["line"]]
    skipped = dict(datamodule.skipped.get("test") or {})
    dropped = skipped.get("empty", 0) + skipped.get("too_long", 0)  # "truncated" pairs stay
    n_lines = max(len(lines) + dropped, max(lines, default=0))
    return Split(sources, references, lines, n_lines, skipped, str(datamodule.hparams.source))


UNUSED_BUDGET_NOTE = 0.1
"""The share of `trainer.max_time` a finished plan must leave unused to get a note."""


def time_budget_note(
    remaining_s: float | None,
    elapsed_s: float | None,
    global_step: int,
    planned: float,
    steps_per_epoch: int = 0,
    max_epochs: int | None = None,
) -> str:
    """The end-of-fit note on the run's plan against `trainer.max_time`, or an empty string:
    that the cap cut the plan short (Lightning's own last line names whichever limit its loop
    checks first, e.g. "`max_epochs=3` reached" after a cut inside epoch 3), or, when the plan
    left more than `UNUSED_BUDGET_NOTE` of the cap unused (a faster machine than the plan was
    made on), the flags of a plan that would fill it at this run's pace."""
    if remaining_s is None:
        return ""
    if remaining_s <= 0:
        if global_step >= planned:
            return ""
        plan = f" of {int(planned):,} planned" if math.isfinite(planned) else ""
        return f", stopped by trainer.max_time after {global_step:,}{plan} updates"
    budget = remaining_s + (elapsed_s or 0.0)
    if global_step < planned or not elapsed_s or remaining_s <= UNUSED_BUDGET_NOTE * budget:
        return ""  # stopped early (e.g. early stopping), or the plan used the budget
    fill = int(global_step * budget / elapsed_s) // 25 * 25
    flags = f"--trainer.max_steps {fill}"
    if max_epochs is not None and 0 < max_epochs * steps_per_epoch < fill:
        flags += f" --trainer.max_epochs {math.ceil(fill / steps_per_epoch)}"
    # whole minutes for the usual budgets, two decimals for a short one (0.25 min, not 0)
    minutes = f"{budget / 60:.2f}".rstrip("0").rstrip(".")
    return (
        f", the plan done with {remaining_s / 60:.1f} of trainer.max_time's {minutes} "
        f"min left (about {fill:,} updates would fill it: {flags})"
    )


def _time_budget_note(trainer: L.Trainer) -> str:
    remaining = train_time_remaining(trainer)
    if remaining is None:
        return ""  # no max_time
    planned = trainer.estimated_stepping_batches
    batches = trainer.num_training_batches  # inf for a dataset of unknown length
    steps_per_epoch = (
        math.ceil(batches / trainer.accumulate_grad_batches) if math.isfinite(batches) else 0
    )
    max_epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
    elapsed, step = train_time_elapsed(trainer), trainer.global_step
    note = time_budget_note(remaining, elapsed, step, planned, steps_per_epoch, max_epochs)
    return note + clock_note(budget_schedules(trainer), step)


def _epochs_note(trainer: L.Trainer) -> str:
    """The end-of-fit note that ``trainer.max_epochs`` ended the run before its step plan
    (``trainer.max_steps``), or an empty string. Lightning ends it without a word; so does a
    resume that raises max_steps of a run its plan ended inside an epoch, which Lightning
    counts as a whole one (the training guide, "Resuming")."""
    max_steps, max_epochs, step = trainer.max_steps, trainer.max_epochs, trainer.global_step
    if max_steps is None or max_steps < 0 or max_epochs is None or max_epochs < 0:
        return ""
    if step >= max_steps or trainer.current_epoch < max_epochs:
        return ""  # the plan done, or another stop (early stopping, say)
    return (
        f", stopped by trainer.max_epochs ({max_epochs}) after {step:,} of trainer.max_steps' "
        f"{max_steps:,} updates (a larger max_epochs trains on)"
    )


def clock_note(schedules: list[BudgetSchedule], global_step: int) -> str:
    """How to repeat a run whose rate the clock set (`BudgetSchedule`), step for step, or an
    empty string when the steps led throughout (the run is then deterministic for a seed)."""
    led = max((s.clock_led_steps for s in schedules), default=0)
    if not led:
        return ""
    return (
        f"; the clock set the rate of {led:,} of its {global_step:,} updates, so a rerun may "
        f"differ: to repeat a run of this length deterministically, use --trainer.max_steps "
        f"{global_step} --trainer.max_time null"
    )


def _changed_settings(cli: MinitxCLI, checkpoint: Mapping[str, Any]) -> str:
    """The settings of this run that differ from those its `checkpoint` was trained with,
    ``key old -> new`` joined by "; " (``ckpt_path`` and keys only one of them has aside), or
    "" when it carries no training config. Said at the resume: config.yaml then holds them as
    if the run had begun with them."""
    saved = checkpoint[CHECKPOINT_KEY].get("train_config")
    if not isinstance(saved, str):
        return ""
    try:
        before = _flat(yaml.safe_load(saved))
    except yaml.YAMLError:
        return ""
    now = _flat(yaml.safe_load(cli.parser.dump(cli.config, skip_none=False)))
    # keys in both: a checkpoint of an earlier minitx lacks the settings added since
    return "; ".join(
        f"{key} {before[key]} -> {now[key]}"
        for key in sorted(before.keys() & now.keys())
        if before[key] != now[key] and key != "ckpt_path"
    )


def _flat(settings: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping of settings as dotted keys: {"a": {"b": 1}} -> {"a.b": 1}."""
    if not isinstance(settings, dict):
        return {prefix.rstrip("."): settings} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        flat.update(_flat(value, f"{prefix}{key}."))
    return flat


def _check_resume(cli: MinitxCLI, path: Path) -> dict[str, Any]:
    """Refuse a resume before anything in the run directory is written: from a weights-only
    checkpoint (no optimizer state to continue with), or from one of another model, optimizer
    settings or tokenizer (`TranslationModule.check_resume`). The tokenizer check needs this
    run's tokenizer: the data is prepared here, once (the fit then finds it ready). Returns
    the checkpoint, read (memory-mapped) once for these checks.

    Raises:
        CheckpointError: not a minitx checkpoint (`check_minitx_checkpoint`), or a damaged
            training state (`TranslationModule.check_training_state`).
        UsageError: another seed_everything, a weights-only checkpoint, or one written in a
            later epoch than ``trainer.max_epochs`` or after more updates than
            ``trainer.max_steps``.
        ResumeError: another model config, tokenizer or optimizer settings.
    """
    state = read_checkpoint(path, mmap=True)  # a crafted or damaged file: one line, here
    check_minitx_checkpoint(state, path)  # unchecked, the resume skipped the checks below
    if "optimizer_states" not in state:
        raise UsageError(
            f"--ckpt_path {path}: a weights-only checkpoint (no optimizer state, e.g. written by "
            "minitx-average) cannot resume training; resume from a last.ckpt, or start a new run"
        )
    saved_seed, seed = seed_of(state), cli.seed_given  # true: no seed to compare
    if saved_seed is not None and is_whole_number(seed) and int(seed) != int(saved_seed):
        raise UsageError(  # the run's records (config.yaml, checkpoints) would name two seeds
            f"cannot resume with another seed_everything ({saved_seed} -> {seed}): a resumed "
            "run goes on from its checkpoint's weights, data order and random state; leave "
            f"it out (or give {saved_seed}), or start a new run (--run_name)"
        )
    # another model or optimizer settings first: its optimizer state cannot fit this model
    cli.model.check_resume(state, TranslationModule.datamodule_languages(cli.datamodule))
    cli.model.check_training_state(state, f"--ckpt_path {path}")  # before it is read below
    # Lightning refuses this only after the run directory has its new config and logs. Its
    # epoch on resume is the epochs the loop had processed (one more than the file's "epoch"
    # when it was written at an epoch's end); "epoch" alone where the file does not say.
    progress = state.get("loops", {}).get("fit_loop", {}).get("epoch_progress", {})
    epochs = progress.get("current", {}).get("processed", state.get("epoch", 0))
    max_epochs = cli.trainer.max_epochs
    if max_epochs not in (None, -1) and epochs > max_epochs:
        raise UsageError(
            f"--ckpt_path {path}: its run had gone through {epochs} epochs, more than "
            f"--trainer.max_epochs {max_epochs}; resume with --trainer.max_epochs {epochs} or "
            "more (the run's own setting, if it was larger), or start a new run"
        )
    steps, max_steps = state.get("global_step", 0), cli.trainer.max_steps
    if max_steps not in (None, -1) and steps > max_steps:  # Lightning: trains nothing, status 0
        raise UsageError(
            f"--ckpt_path {path}: its run had made {steps} updates, more than "
            f"--trainer.max_steps {max_steps}; resume with --trainer.max_steps {steps} or more "
            "(the run's own setting, if it was larger), or start a new run"
        )
    if (state.get(CHECKPOINT_KEY) or {}).get("tokenizer") is not None:
        cli.datamodule.setup("fit")
        cli.model.tokenizer = cli.datamodule.tokenizer
        cli.model.check_resume(state)
    return state


def run() -> int:
    """Console-script entry (`minitx-train`): train, then exit with status 0."""
    # Its imports are done; a Ctrl-C in the seconds LightningCLI takes to parse and prepare
    # the data is then one the training handles (a KeyboardInterrupt, status 130).
    work_begins()
    main()
    return 0


if __name__ == "__main__":
    sys.exit(run())
