"""`minitx-train` (also `python scripts/train.py`): train a Transformer with `LightningCLI`.

What it adds to LightningCLI (the training guide, docs/guides/training.md, tells the user's
side): the packaged default config and `--config NAME`; one directory per run,
`{runs_dir}/{run_name}/{version}` (`claim_run_dir`); the minitx callbacks and loggers;
`--ckpt_path last`; exit statuses 130 / 143 after Ctrl-C / SIGTERM, once `last.ckpt` is saved;
the test-split scores of the best checkpoint after fitting (`_test`); quiet libraries unless
``--verbose`` (`set_verbosity`), so that the first line of a failed run is its ``error:`` line.

Its config's checks before anything is built are in `train_config.py`; where a run's
directory is, and which ``last.ckpt`` a resume takes, in `train_runs.py`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import random
import shlex
import shutil
import signal
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
import yaml
from lightning.fabric.plugins import CheckpointIO
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
    work_begins,
)
from minitx.cli.train_config import (
    DEFAULT_CONFIG,
    OneLineErrorParser,
    check_config_sections,
    check_launcher,
    check_values,
    config_message,
    packaged_names,
    resolve_config_names,
    with_source,
)
from minitx.cli.train_runs import (
    checkpoint_step,
    elsewhere_note,
    last_run_checkpoint,
    launch_rank,
    own_run_version,
    shared_version,
)
from minitx.data.datamodule import TranslationDataModule
from minitx.decoding import DecodingConfig
from minitx.errors import (
    ConfigError,
    MinitxError,
    Terminated,
    is_whole_number,
)
from minitx.outputs import hold_run_dir, release_run_dirs
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
from minitx.training.precision import resolve_precision
from minitx.training.resume import MovedRunCheckpoints, RandomState
from minitx.training.schedules import BudgetSchedule

if TYPE_CHECKING:
    from minitx.evaluation import Split

logger = logging.getLogger(__name__)

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


def _is_rate_monitor(callback: Any) -> bool:
    """Whether a configured callback (a class_path entry, or an object) is a LearningRateMonitor."""
    name = callback.get("class_path") if hasattr(callback, "get") else type(callback).__name__
    return str(name).endswith("LearningRateMonitor")


def _raised_in_lightning(exc: BaseException) -> bool:
    """Whether the innermost frame of `exc`'s traceback is Lightning's code."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and tb.tb_frame.f_globals.get("__name__", "").startswith("lightning.")


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
            f"a YAML config file, or a packaged config's name: {packaged_names()}; given "
            "more than once, later ones override earlier ones"
        )
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_lightning_class_args(AttentionMapLogger, "attention_maps")
        parser.add_lightning_class_args(CheckpointAveraging, "averaging")

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, then quiet the libraries unless ``--verbose`` (before the seed is set: its
        message is Lightning's first line)."""
        given = sys.argv[1:] if args is None else list(args)
        # which config file set what: an error about a setting names the file it came from
        self.sources = parser.sources = check_config_sections(given, parser)
        printed = [a for a in given if a == "--print_config" or a.startswith("--print_config=")]
        if printed:
            # jsonargparse prints inside its parse, before any value is checked: a config it
            # printed (lr nan, max_time "bad") would then be refused by the run
            with self.naming_sources():
                check_values(parser, parser.parse_args([a for a in given if a not in printed]))
        super().parse_arguments(parser, args)
        # as given: Lightning replaces true by the seed it chooses (which may differ at a resume)
        self.seed_given = self.config.get("seed_everything")
        set_verbosity(bool(self.config.get("verbose")))
        with self.naming_sources():
            check_values(parser, self.config)
        if self.seed_given is True:
            self.config["seed_everything"] = random_seed()

    @contextlib.contextmanager
    def naming_sources(self) -> Iterator[None]:
        """A setting's error, raised inside, with the config file that set it (`with_source`)."""
        try:
            yield
        except (ConfigError, UsageError) as exc:
            if type(exc) not in (ConfigError, UsageError):  # a subclass keeps its own fields
                raise
            raise type(exc)(with_source(str(config_message(exc)), self.sources)) from exc

    def instantiate_classes(self) -> None:
        with self.naming_sources():  # the model's and data's own checks of their settings
            super().instantiate_classes()

    def before_instantiate_classes(self) -> None:
        config = self.config
        check_launcher(config)
        # a ~ the shell left (quoted, or from a config file): TensorBoard's logger read it as
        # the home directory, the CSV logger and the checkpoints as a folder named ~ here
        config.runs_dir = os.path.expanduser(config.runs_dir)
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
            last = last_run_checkpoint(run_root)
            if last is None:
                raise UsageError(
                    f"--ckpt_path last: no {run_root}/*/checkpoints/last.ckpt to resume from; "
                    "check run_name and runs_dir, or start a new run without --ckpt_path"
                )
            self.resume_path = str(last)
        version = None
        if self.resume_path is not None:
            version = own_run_version(Path(self.resume_path), run_root)
            if version is not None:  # its metrics and events are cut back to its step
                self.resume_step = checkpoint_step(Path(self.resume_path))
        elsewhere = self.resume_path is not None and version is None
        if explicit:
            version = version or first.version or shared_version(run_root)
            first.version = version
            for lg in loggers[1:]:  # the others write into subdirectories of the run directory
                lg.init_args.save_dir = str(run_root / version)
                lg.init_args.name = ""
                lg.init_args.version = (
                    lg.class_path.rsplit(".", 1)[-1].lower().removesuffix("logger")
                )
        check_writable_dir(run_root, "the run directory", "runs_dir (or the logger's save_dir)")
        self.run_root, self.run_version = run_root, version or shared_version(run_root)
        self.default_loggers = not explicit and not no_logger
        self.own_loggers = explicit
        run_dir = run_root / self.run_version
        # without a logger Lightning writes into default_root_dir: the run's own directory
        self.root_dir = run_dir if no_logger else None
        if elsewhere:
            self.resume_note = elsewhere_note(Path(config.ckpt_path), run_dir, own_loggers=explicit)
        if launch_rank() == 0 and run_dir.is_dir():  # DDP: rank 0 holds it for every process
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


TEST_METRICS = ("bleu", "bleu_lowercase", "chrf")
"""Scores of the end-of-training test logged to every logger as ``test/<score>_<decoding>``."""


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
        if launch_rank() > 0 and _peer_gone(exc):
            # rank 0 stopped first and said why in one line; this process's traceback (from
            # the collective it was waiting in) would bury that line
            raise SystemExit(EXIT_USER_ERROR) from None
        exc = config_message(exc) if isinstance(exc, ConfigError) else no_room_for_output(exc)
        status = report_user_error(exc)
        if status is None:
            raise
        raise SystemExit(status) from None
    finally:
        release_run_dirs()  # the training is over: another process may resume it (and the


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


def _unconnected(exc: BaseException, trainer: L.Trainer) -> bool:
    """Whether `exc` is the first process of a DDP run failing to open the processes' meeting
    point (``MASTER_ADDR:MASTER_PORT``), before any of them has connected."""
    first = trainer.world_size > 1 and launch_rank() == 0
    met = torch.distributed.is_available() and torch.distributed.is_initialized()
    return first and not met and type(exc).__name__ == "DistNetworkError"


def _connect_message(exc: BaseException) -> str:
    """The error line for `_unconnected`: the address and port, and what to change."""
    address = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = os.environ.get("MASTER_PORT", "")  # set by Lightning if not by the user
    if "EADDRINUSE" in str(exc):
        return (
            f"MASTER_PORT {port} is in use on this machine (another program, or another run): "
            "set MASTER_PORT to a free port"
        )
    return (
        f"the training processes cannot meet at MASTER_ADDR {address}, MASTER_PORT {port} "
        f"({_first_line(exc)}); set MASTER_ADDR to an address of this machine and "
        "MASTER_PORT to a free port (the multi-node guide)"
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
                if launch_rank() == 0:  # Lightning restores in silence: say what goes on from where
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
    alone = trainer.world_size == 1  # under DDP: several processes, which stop together
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
            except RuntimeError as exc:
                if not _unconnected(exc, trainer):
                    raise
                # the processes it started would wait for it (gloo: 30 minutes); they have
                # done nothing yet
                launcher = trainer.strategy.launcher
                if launcher is not None:
                    launcher.kill(signal.SIGKILL)
                _remove_unstarted_run(cli, collective=False)
                raise UsageError(_connect_message(exc)) from None
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
            if trainer.global_step in (0, resumed_at) and (alone or launch_rank() == 0):
                _stopped_before_training(what, cli, alone=alone)
            raise SystemExit(status) from None
        raise
    minutes = (time.perf_counter() - start) / 60
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    run_dir = run_directory(trainer)  # a collective under DDP: every rank must ask
    if trainer.is_global_zero:
        note = _epochs_note(trainer) + _time_budget_note(trainer)  # max_epochs, then the clock
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
    fill = int(global_step * budget / elapsed_s)
    rounded = fill // 25 * 25  # a round number, unless that falls to the plan just done (or 0)
    fill = rounded if rounded > global_step else fill
    if fill <= global_step:
        return ""
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
    before = _saved_settings(checkpoint)
    if before is None:
        return ""
    now = _flat(yaml.safe_load(cli.parser.dump(cli.config, skip_none=False)))
    # keys in both: a checkpoint of an earlier minitx lacks the settings added since
    return "; ".join(
        f"{key} {before[key]} -> {now[key]}"
        for key in sorted(before.keys() & now.keys())
        if before[key] != now[key] and key != "ckpt_path"
    )


def _saved_settings(checkpoint: Mapping[str, Any]) -> dict[str, Any] | None:
    """The settings `checkpoint`'s run was trained with, as dotted keys (`_flat`); None when
    it carries no readable training config."""
    saved = checkpoint[CHECKPOINT_KEY].get("train_config")
    if not isinstance(saved, str):
        return None
    try:
        return _flat(yaml.safe_load(saved))
    except yaml.YAMLError:
        return None


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
    _check_resumed_budget(cli, state, path)
    if (state.get(CHECKPOINT_KEY) or {}).get("tokenizer") is not None:
        cli.datamodule.setup("fit")
        cli.model.tokenizer = cli.datamodule.tokenizer
        cli.model.check_resume(state)
    return state


def _check_resumed_budget(cli: MinitxCLI, state: Mapping[str, Any], path: Path) -> None:
    """Refuse a ``trainer.max_time`` below both the training time the checkpoint's run has
    spent and that run's own budget: Lightning trained nothing, and the last updates stayed
    unvalidated, with exit status 0. The run's own budget, spent (a finished run resumed for
    its test), passes.

    Raises:
        UsageError: naming both budgets and the time spent.
    """
    given = cli.config.trainer.get("max_time")
    timer = (state.get("callbacks") or {}).get("Timer") or {}
    spent = (timer.get("time_elapsed") or {}).get("train")
    own = (_saved_settings(state) or {}).get("trainer.max_time")
    if given is None or own is None or not isinstance(spent, (int, float)):
        return
    try:
        own_budget = duration(own).total_seconds()
    except ConfigError:  # a damaged record: the resume's other checks decide
        return
    budget = duration(given).total_seconds()
    if budget < spent and budget < own_budget:
        raise UsageError(
            f"--ckpt_path {path}: its run has trained for {spent:.0f} s of its "
            f"trainer.max_time {own}, more than --trainer.max_time {given}; resume with its own "
            f"budget ({own}) or a longer one, or null, or start a new run"
        )


def run() -> int:
    """Console-script entry (`minitx-train`): train, then exit with status 0."""
    # Its imports are done; a Ctrl-C in the seconds LightningCLI takes to parse and prepare
    # the data is then one the training handles (a KeyboardInterrupt, status 130).
    work_begins()
    main()
    return 0


if __name__ == "__main__":
    sys.exit(run())
