"""The training command line behind `scripts/train.py`, built on `LightningCLI`.

What it adds to LightningCLI:
- the default config `configs/multi30k_de_en.yaml` (found next to the package, not in the
  working directory); `--config other.yaml` replaces it, dotted flags override single keys;
- one directory per run, `{save_dir}/{name}/{version}` (version: a timestamp), holding the first
  logger's files, the other loggers' (in subdirectories such as `csv/`), the checkpoints, the resolved config and the attention images;
- `--ckpt_path last` resumes the newest run of the same name, in its own directory;
- Ctrl-C / SIGTERM write `last.ckpt` before exiting (see `CheckpointOnInterrupt`);
- after fitting, the best checkpoint is reloaded through the inference API and scored on the
  test split (sacreBLEU with its signature).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities.exceptions import SIGTERMException

from minitx.data import TranslationDataModule
from minitx.evaluation import evaluate
from minitx.module import TranslationModule
from minitx.translator import CHECKPOINT_KEY, Translator

logger = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "multi30k_de_en.yaml"


class CheckpointOnInterrupt(L.Callback):
    """Save `last.ckpt` when training is interrupted (Ctrl-C, SIGTERM, or an error).

    In a single process Lightning notices SIGTERM only at the end of an epoch; this callback
    checks after every batch, so a stop request is honoured within one step. (Under DDP,
    Lightning already checks every batch on all ranks.)
    """

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if trainer.received_sigterm and trainer.world_size == 1:
            raise SIGTERMException

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        callback = trainer.checkpoint_callback
        if callback is None or callback.dirpath is None or trainer.global_step == 0:
            return
        path = Path(callback.dirpath) / "last.ckpt"
        trainer.save_checkpoint(path)
        logger.warning("training interrupted (%s): saved %s; resume with --ckpt_path last", type(exception).__name__, path)


class ConfigInCheckpoint(SaveConfigCallback):
    """Write the resolved config to the run directory and into every checkpoint."""

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        text = self.parser.dump(self.config, skip_none=False)
        checkpoint.setdefault(CHECKPOINT_KEY, {})["train_config"] = text


def _loggers(config: Any) -> list[Any]:
    loggers = config.trainer.logger
    if loggers in (None, False, True):
        return []
    return loggers if isinstance(loggers, list) else [loggers]


def _last_run_checkpoint(run_root: Path) -> Path | None:
    """Newest `{run_root}/*/checkpoints/last.ckpt`."""
    found = sorted(run_root.glob("*/checkpoints/last.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def _new_version(run_root: Path) -> str:
    """A timestamp, with a counter when a run of that second exists already."""
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    version, n = stamp, 1
    while (run_root / version).exists():
        n += 1
        version = f"{stamp}_{n}"
    return version


class MinitxCLI(LightningCLI):
    """LightningCLI with minitx's links, run directories and resume logic."""

    def add_arguments_to_parser(self, parser: Any) -> None:
        parser.link_arguments("data.vocab_size", "model.vocab_size")
        parser.add_argument("--ckpt_path", type=str | None, default=None, help="resume from this checkpoint; 'last' = newest run of this name")
        parser.add_argument("--test", type=bool, default=True, help="after fitting, score the best checkpoint on the test split")
        parser.add_argument("--test_beam_size", type=int, default=1, help="beam size for that test score (1 = greedy)")

    def before_instantiate_classes(self) -> None:
        config = self.config
        loggers = _loggers(config)
        version = None
        self.resume_path: str | None = config.ckpt_path
        if loggers:
            first = loggers[0].init_args
            run_root = Path(first.save_dir) / (first.name or "")
            if config.ckpt_path == "last":
                last = _last_run_checkpoint(run_root)
                if last is None:
                    raise FileNotFoundError(f"--ckpt_path last: no {run_root}/*/checkpoints/last.ckpt to resume from")
                version, self.resume_path = last.parent.parent.name, str(last)
            version = version or first.version or _new_version(run_root)
            first.version = version
            for lg in loggers[1:]:  # the others write into subdirectories of the run directory
                lg.init_args.save_dir = str(run_root / version)
                lg.init_args.name = ""
                lg.init_args.version = lg.class_path.rsplit(".", 1)[-1].lower().removesuffix("logger")
        self.run_version = version


def build_cli(args: list[str] | None = None) -> MinitxCLI:
    """Parse `args` (default: sys.argv) over the default config and instantiate everything."""
    return MinitxCLI(
        TranslationModule,
        TranslationDataModule,
        run=False,
        save_config_callback=ConfigInCheckpoint,
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"default_config_files": [str(DEFAULT_CONFIG)]},
        seed_everything_default=0,
        trainer_defaults={"callbacks": [CheckpointOnInterrupt()]},
        args=args,
    )


def main(args: list[str] | None = None) -> MinitxCLI:
    """Parse the command line, train, and (unless `--test false`) score on the test split."""
    cli = build_cli(args)
    trainer = cli.trainer
    start = time.perf_counter()
    trainer.fit(cli.model, datamodule=cli.datamodule, ckpt_path=cli.resume_path)
    minutes = (time.perf_counter() - start) / 60
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    run_dir = trainer.log_dir  # a collective under DDP: every rank must ask
    if trainer.is_global_zero:
        print(f"fit finished in {minutes:.1f} min; best checkpoint: {best or '(none)'}; run dir: {run_dir}")
    if cli.config.test and best and trainer.is_global_zero:
        translator = Translator.from_checkpoint(best, device=cli.model.device)
        sources, references = cli.datamodule.texts("test")
        result = evaluate(translator, sources, references, beam_size=cli.config.test_beam_size)
        hyp_path = Path(run_dir) / f"test_hypotheses_beam{cli.config.test_beam_size}.txt"
        hyp_path.write_text("\n".join(result.hypotheses) + "\n", encoding="utf-8")
        print(f"test ({len(sources)} sentences, beam {cli.config.test_beam_size}): {result.summary()}")
        print(f"hypotheses written to {hyp_path}")
    return cli
