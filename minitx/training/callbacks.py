"""Lightning callbacks of minitx: attention maps, token throughput, stopping and saving on
Ctrl-C / SIGTERM, a validation of the final weights, progress (bar or plain lines), example
translations and the budget schedule's clock."""

from __future__ import annotations

import contextlib
import logging
import math
import shlex
import signal
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

import lightning as L
import matplotlib.image
import numpy as np
import torch
from lightning.pytorch.callbacks import RichProgressBar, Timer
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from minitx.data.batching import ResumableDataLoader
from minitx.errors import ConfigError, MinitxError
from minitx.maps import KINDS, AttentionMaps, attention_entropy, teacher_forced_maps
from minitx.textio import print_stop
from minitx.training.loggers import run_directory
from minitx.training.schedules import BudgetSchedule
from minitx.viz import figures_for_maps, update_figures_for_maps
from minitx.viz.common import check_kinds
from minitx.vocab import PAD_ID

logger = logging.getLogger(__name__)


class AttentionMapLogger(L.Callback):
    """Log attention heatmaps and per-head entropies for a few fixed validation sentences.

    Before training and then every `every_n_epochs` epochs, the sentences are teacher-forced
    with their reference, so that the axes stay the same from epoch to epoch; each layer and
    kind gets a figure (one panel per head plus their average) in TensorBoard (tag
    `attention/s{i}/{kind}/layer_{l}`) and as a PNG under `{log_dir}/attention/start/` (before
    the first update) or `{log_dir}/attention/epoch_{e:03d}/` (`step_{n}/` when the run stops
    inside the epoch, after update n), and per-head mean entropies as
    `attention_entropy/{kind}/layer_{l}/head_{h}`. A `fast_dev_run` logs none: Lightning turns
    the loggers off in that smoke run, and drawing the maps would take most of its time.

    Args:
        num_sentences: number of validation sentences to show; 0 logs no maps (a run timed
            for its speed, a test that looks at something else).
        every_n_epochs: log after every N training epochs (and once before training).
        kinds: attention kinds to log, a subset of ("encoder", "decoder", "cross").
        save_png: also write PNG files.
        max_pieces: the longest sentence drawn, in sentencepiece pieces with its eos (the
            source) or bos (the reference): longer validation sentences are passed over, so
            that the panels stay readable.
    """

    def __init__(
        self,
        num_sentences: int = 2,
        every_n_epochs: int = 3,
        kinds: tuple[str, ...] = KINDS,
        save_png: bool = True,
        max_pieces: int = 24,
    ) -> None:
        super().__init__()
        try:  # the check of the maps' drawing, here: an empty list failed at the fit's start
            kinds = check_kinds(kinds)
        except ValueError as exc:
            raise ConfigError(f"attention_maps.kinds: {exc}") from None
        if num_sentences < 0:
            raise ConfigError(
                f"attention_maps.num_sentences must be >= 0 (0 = no maps), got {num_sentences}"
            )
        if every_n_epochs < 1:
            raise ConfigError(f"attention_maps.every_n_epochs must be >= 1, got {every_n_epochs}")
        if max_pieces < 2:  # a sentence and its eos (or bos) take two pieces at the least
            raise ConfigError(f"attention_maps.max_pieces must be >= 2, got {max_pieces}")
        self.num_sentences, self.every_n_epochs = num_sentences, every_n_epochs
        self.kinds, self.save_png, self.max_pieces = kinds, save_png, max_pieces
        self._pairs: list[tuple[str, str]] | None = None
        # The figures of each sentence, built at the first log and refilled at the next ones:
        # the sentences and so the axes stay the same, and building a figure costs about as
        # much as drawing it. Their artists take 2 to 7 MB a figure (the default's 18: up to
        # ~130 MB); the pixels are let go after each log.
        self._figures: dict[int, dict[str, Figure]] = {}

    def _select_pairs(self, trainer: L.Trainer, tokenizer) -> list[tuple[str, str]]:
        sources, references = trainer.datamodule.texts("validation")
        pairs = []
        for src, ref in zip(sources, references, strict=True):
            lengths = (len(ids) + 1 for ids in tokenizer.encode([src, ref]))
            if max(lengths) <= self.max_pieces:
                pairs.append((src, ref))
            if len(pairs) == self.num_sentences:
                break
        if not pairs:
            logger.warning(
                "AttentionMapLogger: no validation sentence has <= %d pieces; nothing to log",
                self.max_pieces,
            )
        elif len(pairs) < self.num_sentences:
            logger.warning(
                "AttentionMapLogger: attention_maps.num_sentences asks for %d sentences, but "
                "only %d of the %d validation sentences have <= %d pieces "
                "(attention_maps.max_pieces): logging those",
                self.num_sentences,
                len(pairs),
                len(sources),
                self.max_pieces,
            )
        return pairs

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == 0:  # not again when resuming
            self._log(trainer, pl_module, tag="start")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if (trainer.current_epoch + 1) % self.every_n_epochs == 0:
            # A run its plan, its clock or a stop ends inside an epoch ends the epoch there:
            # those maps are of part of it, and the resume's epoch end would write over them.
            whole = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
            tag = f"epoch_{trainer.current_epoch:03d}" if whole else f"step_{trainer.global_step}"
            self._log(trainer, pl_module, tag=tag)

    @torch.no_grad()
    def _log(self, trainer: L.Trainer, pl_module: L.LightningModule, tag: str) -> None:
        if trainer.fast_dev_run or self.num_sentences == 0:
            return
        log_dir = run_directory(trainer)  # a collective under DDP: every rank must ask
        if not trainer.is_global_zero or pl_module.tokenizer is None:
            return
        tokenizer = pl_module.tokenizer
        if self._pairs is None:
            self._pairs = self._select_pairs(trainer, tokenizer)
        was_training = pl_module.training
        pl_module.eval()
        step = trainer.global_step
        scalars: dict[str, float] = {}
        try:
            for i, (src, ref) in enumerate(self._pairs):
                maps = teacher_forced_maps(pl_module.model, tokenizer, src, ref)
                for kind in self.kinds:
                    for layer, weights in enumerate(maps.layers(kind)):
                        for head, value in enumerate(attention_entropy(weights).tolist()):
                            key = f"attention_entropy/{kind}/layer_{layer}/head_{head}"
                            scalars[key] = scalars.get(key, 0.0) + value / len(self._pairs)
                self._write_figures(
                    trainer,
                    maps,
                    Path(log_dir or trainer.default_root_dir) / "attention" / tag,
                    i,
                    step,
                )
        finally:
            pl_module.train(was_training)
        for lg in trainer.loggers:
            lg.log_metrics(scalars, step=step)

    def _write_figures(
        self, trainer: L.Trainer, maps: AttentionMaps, out_dir: Path, index: int, step: int
    ) -> None:
        tensorboards = [
            lg.experiment for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)
        ]
        figures = self._figures.get(index)
        if figures is None:
            figures = self._figures[index] = figures_for_maps(maps, kinds=self.kinds)
        else:
            update_figures_for_maps(figures, maps)
        for name, fig in figures.items():  # name: "cross/layer_0"
            # Drawn once, for TensorBoard and the PNG file alike: add_figure and savefig
            # would each draw it again. A new canvas each time: the last one's pixel buffer
            # (megabytes per figure) goes with it, not kept between logs.
            canvas = FigureCanvasAgg(fig)
            canvas.draw()
            rgba = np.asarray(canvas.buffer_rgba())  # (H, W, 4) at the figure's dpi
            for tb in tensorboards:
                tag = f"attention/s{index}/{name}"
                tb.add_image(tag, rgba[..., :3], global_step=step, dataformats="HWC")
            if self.save_png:
                out_dir.mkdir(parents=True, exist_ok=True)
                path = out_dir / f"s{index}_{name.replace('/layer_', '_layer')}.png"
                matplotlib.image.imsave(path, rgba)


class TokenThroughput(L.Callback):
    """Log training speed: target tokens per second and seconds per epoch.

    Each epoch `train/tokens_per_sec` (under DDP, of every process together) and
    `train/epoch_seconds` (from the epoch's start to its last update, validations excluded:
    not the epoch-end work after it, such as drawing attention maps); every
    `log_every_n_steps` steps `train/tokens_per_sec_step` (the logging process's own
    batches); and after each validation `time/fit_seconds` (validation included, as
    `trainer.max_time` counts), so that scores can be plotted over training time, a resumed
    run's clock going on from its checkpoint's. An epoch resumed inside gets no epoch figures
    (its start was not seen). Lightning's `ThroughputMonitor` can count tokens too (its
    ``length_fn``), but over a sliding window of batches only, under its own metric names,
    with no epoch or fit-time figures, which the experiment reports and the progress line read.
    """

    def __init__(self) -> None:
        super().__init__()
        self._epoch_started = False
        self._epoch_start = self._window_start = 0.0
        self._epoch_tokens = self._window_tokens = 0
        self._val_seconds = 0.0
        self._val_start = 0.0
        self._trained_until = 0.0  # the epoch's last update: its end, less validations before
        self._fit_start = 0.0
        self._fit_seconds_before = 0.0  # a resumed run's, from its checkpoint
        self.last_tokens_per_sec: float | None = None  # of the last finished epoch

    def state_dict(self) -> dict[str, float]:
        return {"fit_seconds": time.perf_counter() - self._fit_start}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._fit_seconds_before = float(state_dict.get("fit_seconds", 0.0))

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Lightning restores the callbacks' states before this hook
        self._fit_start = time.perf_counter() - self._fit_seconds_before

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._window_start = time.perf_counter()  # resumed inside an epoch: no epoch start

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._epoch_started = True
        self._epoch_start = self._window_start = time.perf_counter()
        self._epoch_tokens = self._window_tokens = 0
        self._val_seconds = 0.0

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._trained_until = time.perf_counter() - self._val_seconds
        tokens = int((batch["tgt_out"] != PAD_ID).sum())
        self._epoch_tokens += tokens
        self._window_tokens += tokens
        every = trainer.log_every_n_steps  # 0: no per-step logging, as Lightning reads it
        if every and (batch_idx + 1) % every == 0:
            now = time.perf_counter()
            pl_module.log(
                "train/tokens_per_sec_step",
                self._window_tokens / (now - self._window_start),
                prog_bar=True,
            )
            self._window_start, self._window_tokens = now, 0

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._val_start = time.perf_counter()

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if fitting:  # logged like, and at the step of, the val/ metrics
            seconds = time.perf_counter() - self._fit_start
            pl_module.log("time/fit_seconds", seconds, sync_dist=True)  # DDP: the mean clock

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seconds = time.perf_counter() - self._val_start
        self._val_seconds += seconds
        self._window_start += seconds  # a validation inside the window is no training time

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._epoch_started:  # resumed inside the epoch: its start is not known here
            return
        seconds = self._trained_until - self._epoch_start
        # Under DDP the processes' tokens together (each counted its own batches); one
        # process alone: its own count
        tokens = trainer.strategy.reduce(
            torch.tensor(float(self._epoch_tokens), device=pl_module.device), reduce_op="sum"
        )
        metrics = {
            "train/epoch_seconds": seconds,
            "train/tokens_per_sec": float(tokens) / max(seconds, 1e-9),
        }
        self.last_tokens_per_sec = metrics["train/tokens_per_sec"]
        for lg in trainer.loggers:
            lg.log_metrics(metrics, step=trainer.global_step)
        logger.info(
            "epoch %d: %.1f s training, %.0f target tokens/s",
            trainer.current_epoch,
            seconds,
            metrics["train/tokens_per_sec"],
        )


class ValidationExamples(L.Callback):
    """Show the example translations of each validation (Joey NMT style): the module's
    `validation_examples` go to TensorBoard as text (``val/examples``) and are printed at the
    end of the training epoch, after `PlainProgress`'s line when that callback comes first (as
    ``minitx-train`` orders them)."""

    def __init__(self) -> None:
        self._pending: str | None = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        examples = getattr(pl_module, "validation_examples", None)
        if trainer.sanity_checking or not trainer.is_global_zero or not examples:
            return
        decoding = pl_module.validation.decoding.describe()
        lines = [
            f"validation examples, epoch {trainer.current_epoch + 1} "
            f"(step {trainer.global_step}, {decoding}):"
        ]
        for i, (source, reference, hypothesis) in enumerate(examples, 1):
            lines.append(f"  {i}. source:     {source}")
            lines.append(f"     reference:  {reference}")
            lines.append(f"     hypothesis: {hypothesis}")
        block = "\n".join(lines)
        for lg in trainer.loggers:
            if isinstance(lg, TensorBoardLogger):  # indented: a literal (code) block in markdown
                text = "\n".join("    " + line for line in block.splitlines())
                lg.experiment.add_text("val/examples", text, global_step=trainer.global_step)
        pl_module.validation_examples = []  # shown once
        if trainer.state.fn == TrainerFn.FITTING:
            self._pending = block
        else:  # trainer.validate(): no epoch line to wait for
            print(block, flush=True)

    def _show_pending(self) -> None:
        if self._pending is not None:
            print(self._pending, flush=True)
            self._pending = None

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._show_pending()  # after the epoch's line

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        self._show_pending()  # a validation inside the epoch: after its own line

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        # A stop right after the validation, not an error: standard output's own (a reader
        # gone) would be raised again here, and the callbacks after this one (the checkpoint
        # saved on a stop) would not run.
        if isinstance(exception, KeyboardInterrupt | SIGTERMException):
            with contextlib.suppress(OSError):
                self._show_pending()


class CheckpointOnInterrupt(L.Callback):
    """Stop between two updates on Ctrl-C or SIGTERM, not inside a validation; save
    `last.ckpt` (also on an error). What a user sees: the training guide, "Resuming".

    The first signal is noted and handed to Lightning's own SIGTERM handling once the current
    update (or validation) is done, so the history and checkpoints are complete and a resume
    redoes nothing: Lightning alone would cut a validation short on SIGTERM, and Python on
    Ctrl-C. Lightning puts its SIGTERM handler around ours after on_fit_start, so ours goes
    back in front of it when training starts. `stop_signal` tells ``minitx-train`` which
    signal it was (exit status 130 or 143).

    Under DDP each process notes its own signal (a Ctrl-C reaches them all, each at its own
    moment), and wherever the stop may be handed over the processes first agree on it in one
    collective (`_noted`): all stop after the same update and save `last.ckpt` together. A
    process stopping alone (Python's KeyboardInterrupt, or Lightning's SIGTERM check, which
    reads each process's own flag) left the others waiting in another collective: a hang,
    or a crash without a checkpoint. A second signal is not acted on there: only together
    can the processes stop.

    Once the stop is under way (handed over, a second signal acted on, or the checkpoint being
    saved), further signals are noted in one line and ignored: all that is left is logging
    the last row and writing `last.ckpt`, and a signal there cut the write short (a traceback,
    exit status 1) or lost the row of an update the checkpoint holds. Once `last.ckpt` is
    written the handlers from before the fit are back, unless `ignore_after_stop`: a command
    whose process ends after the fit (``minitx-train``, which then puts back its own) keeps
    ignoring them through Lightning's teardown too.
    """

    def __init__(self, *, ignore_after_stop: bool = False) -> None:
        self.ignore_after_stop = ignore_after_stop
        self.stop_signal: int | None = None  # the first Ctrl-C (SIGINT) or SIGTERM of the fit
        self._handed_over = False
        self._passing = False  # `_hand_over` is calling Lightning's handler, which calls ours
        self._previous: dict[int, Any] = {}  # the handlers to put back after the fit
        self._lightning_sigterm: Any = None  # Lightning's SIGTERM handler, once ours is in front
        self._validating = False  # inside a validation of the fit (not the sanity check)
        self._cut: int | None = None  # a second signal inside one: acted on after its batch
        self._stopping = False  # the stop under way: further signals are ignored
        self._said_stopping = False
        self._distributed = False  # several processes (DDP): they stop together
        self._speaks = True  # the process that says so: the first (global rank 0)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.stop_signal, self._handed_over, self._lightning_sigterm = None, False, None
        self._validating, self._cut = False, None
        self._stopping, self._said_stopping = False, False
        self._distributed, self._speaks = trainer.world_size > 1, trainer.is_global_zero
        main_thread = threading.current_thread() is threading.main_thread()
        if main_thread:  # signal handlers: main thread only
            for signum in (signal.SIGINT, signal.SIGTERM):
                self._previous[signum] = signal.signal(signum, self._note_signal)

    def on_sanity_check_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._in_front()  # Lightning's handler is in place by now: under DDP it broadcasts

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._in_front()

    def _in_front(self) -> None:
        """Put our SIGTERM handler in front of Lightning's. Lightning's, which wraps ours,
        marks the stop at once: it ended a validation after its current batch, and the
        history never got that validation's scores; under DDP it broadcasts, a collective,
        from inside the handler of one process. Ours hands the stop on when it is time."""
        current = signal.getsignal(signal.SIGTERM)
        if self._previous and callable(current) and current != self._note_signal:
            self._lightning_sigterm = current
            signal.signal(signal.SIGTERM, self._note_signal)

    def _note_signal(self, signum: int, frame: Any) -> None:
        if self._passing:
            return
        if self._stopping or (self._distributed and self.stop_signal is not None):
            if not self._said_stopping and self._speaks:
                self._said_stopping = True
                print_stop("already stopping (kill -9 ends at once)")
            return
        if self.stop_signal is not None and self._validating and self._cut is None:
            # After the batch, not inside the validation step: stopped there, Lightning's
            # resume ran the validation's remaining number of batches, from its loader's start,
            # and logged their scores as the validation's. Cut between two batches, the resume
            # leaves it out (the training guide, "Resuming").
            self._cut = signum
            return
        if self.stop_signal is not None:  # the second one (a third in a validation): stop now
            self._stopping = True
            _raise_for(signum)
        self.stop_signal = signum
        what = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
        then = f"a second {what} stops at once"
        then = "every process stops there" if self._distributed else then
        if self._speaks:
            print_stop(f"{what}: stopping after this update or validation ({then})")

    def _hand_over(self, *, after_logging: bool) -> None:
        """Stop the fit for a noted signal, the checkpoint then saved by `on_exception`.

        `after_logging`: at the end of an update, whose metrics Lightning logs after this
        hook: Lightning's SIGTERM handler is called, and Lightning stops the fit once that row
        is logged. Otherwise (at a validation's end, its scores logged) it stops now, with
        Lightning's exception for it. Under DDP every process hands over at the same point
        (`_noted`), as Lightning's handler broadcasts the stop, a collective.
        """
        if self.stop_signal is None or self._handed_over:
            return
        self._handed_over = self._stopping = True
        lightning = self._lightning_sigterm
        if not (after_logging and lightning is not None):
            raise SIGTERMException
        self._passing = True
        try:
            lightning(signal.SIGTERM, None)  # Lightning notes the stop; ours, inside it, passes
        finally:
            self._passing = False

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _noted(self, trainer: L.Trainer) -> bool:
        """Whether a stop signal is noted and not yet handed over. Under DDP: by any process,
        and then the same one in every process (a collective: every process asks at the same
        point of the fit)."""
        if self._handed_over:
            return False
        if not self._distributed:
            return self.stop_signal is not None
        agreed = _agreed_stop(trainer, self.stop_signal)
        if agreed is None:  # a signal noted during the collective waits for the next point
            return False
        self.stop_signal = agreed
        return True

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # Not at an epoch's end, where a validation may follow (handed over after it, or after
        # the next epoch's first update), nor at the run's end (on_train_end stops then), nor
        # inside an accumulation of gradients (they are not saved: the update would be lost).
        epoch_end = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        updated = (batch_idx + 1) % trainer.accumulate_grad_batches == 0
        if updated and not epoch_end and not _run_ends_here(trainer) and self._noted(trainer):
            self._hand_over(after_logging=True)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validating = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking

    def on_validation_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        if self._cut is not None:
            self._stopping = True
            _raise_for(self._cut)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._validating = False
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if fitting and not _run_ends_here(trainer) and self._noted(trainer):
            # Lightning runs the checkpoint callbacks last (and, at an epoch's end, saves in
            # on_train_epoch_end): this validation's best checkpoint is saved before the stop,
            # which skips the hooks after this one.
            for callback in trainer.checkpoint_callbacks:
                callback.on_validation_end(trainer, pl_module)
                if trainer.fit_loop.epoch_loop.batch_progress.is_last_batch:
                    callback.on_train_epoch_end(trainer, pl_module)
            self._hand_over(after_logging=False)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._noted(trainer):  # during the run's last validation, say
            self._stopping = True
            if self._distributed:  # Lightning would end the other processes by SIGKILL
                raise SIGTERMException
            _raise_for(self.stop_signal)

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._restore_handlers()

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._stopping = True  # a signal now would cut the checkpoint's write short
        try:
            self._save_last(trainer, pl_module, exception)
        finally:
            if not self.ignore_after_stop:  # the process goes on: its handlers are back
                self._stopping = False
                self._restore_handlers()

    def _save_last(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        """Save `last.ckpt` for a fit that `exception` ended, and say how to resume."""
        callback = trainer.checkpoint_callback
        if callback is None or callback.dirpath is None or trainer.global_step == 0:
            return
        weights = pl_module.parameters()
        if not all(bool(torch.isfinite(p).all()) for p in weights):  # diverged: keep the old one
            logger.error(
                "weights are not finite: last.ckpt left as it was (%s)", type(exception).__name__
            )
            return
        # A step that raised (an error, a second Ctrl-C) had its batch handed over but not
        # trained: counted as served, the resume would skip it. Lightning resumes after the
        # epoch's processed batches (their steps done); the loader is set to the same count.
        loader = trainer.train_dataloader
        if isinstance(loader, ResumableDataLoader):
            loader.keep_untrained(trainer.fit_loop.epoch_loop.batch_progress.current.processed)
        path = Path(callback.dirpath) / "last.ckpt"
        trainer.save_checkpoint(path, weights_only=False)  # the full state, to resume from
        if not trainer.is_global_zero:  # under DDP every process saves (a collective), one says
            return
        if isinstance(exception, MinitxError):  # e.g. divergence: resuming would repeat it
            logger.warning("training stopped: saved %s (the weights before this step)", path)
            return
        reason = type(exception).__name__
        if isinstance(exception, KeyboardInterrupt | SIGTERMException):
            # a Ctrl-C is handed to Lightning as a SIGTERM: the signal says what stopped it
            signals = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM"}
            reason = signals.get(self.stop_signal or 0, reason)
        logger.warning(
            "training interrupted (%s): saved %s; to resume, run the same command with "
            "--ckpt_path %s added",  # that path: `last` would take a later run of the family
            reason,
            path,
            shlex.quote(str(path)),
        )


def _agreed_stop(trainer: L.Trainer, signum: int | None) -> int | None:
    """The stop signal any process of the run has noted (SIGTERM over Ctrl-C), or None: the
    same in every process. A collective: every process calls it at the same point."""
    noted = torch.tensor([signum or 0], device=trainer.strategy.root_device)
    agreed = int(trainer.strategy.reduce(noted, reduce_op="max").item())
    return agreed or None


def _raise_for(signum: int) -> NoReturn:
    """Stop the fit at once for a Ctrl-C (SIGINT) or a SIGTERM."""
    raise KeyboardInterrupt if signum == signal.SIGINT else SIGTERMException


class ValidateAtEnd(L.Callback):
    """Validate the final weights of a run whose end is not a validation point of its own
    (``max_steps`` inside an epoch, or a last epoch between two validations), so that the best
    checkpoint and the test can pick them (with a decay to zero, the run's best).

    It requests the stop at that step through ``trainer.should_stop``, as Lightning's `Timer`
    does for ``max_time``; Lightning then validates before it ends.
    """

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any, **kwargs: Any) -> None:
        epoch_end = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        per_epoch = trainer.check_val_every_n_epoch is not None and trainer.val_check_interval == 1
        if not (epoch_end and per_epoch) and _run_ends_here(trainer):  # else Lightning validates
            trainer.should_stop = True


def _run_ends_here(trainer: L.Trainer) -> bool:
    """Whether the fit ends after the current step (a stop requested, ``max_steps`` reached, or
    the last batch of the last epoch)."""
    max_epochs = trainer.max_epochs
    last_epoch = max_epochs is not None and 0 < max_epochs <= trainer.current_epoch + 1
    last_batch = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    max_steps_reached = 0 <= trainer.max_steps <= trainer.global_step
    return trainer.should_stop or max_steps_reached or (last_epoch and last_batch)


def train_time_remaining(trainer: L.Trainer) -> float | None:
    """Seconds left of `trainer.max_time` in training (negative once spent); None without it."""
    timer = _max_time_timer(trainer)
    return timer.time_remaining("train") if timer else None


def train_time_elapsed(trainer: L.Trainer) -> float | None:
    """Seconds of training so far on `trainer.max_time`'s clock; None without `max_time`."""
    timer = _max_time_timer(trainer)
    return timer.time_elapsed("train") if timer else None


def _max_time_timer(trainer: L.Trainer) -> Timer | None:
    return next((cb for cb in trainer.callbacks if isinstance(cb, Timer)), None)  # Lightning's


def _clock(seconds: float) -> str:
    """``m:ss``, or ``h:mm:ss`` from an hour on."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class PlainProgress(L.Callback):
    """One plain line per epoch on standard output, for logs that are not a terminal (a bar
    there leaves only its last frame); what it holds: the training guide, "The run directory".

    A validation inside an epoch gets a line too, marked "validation", and the epoch's own
    line is left out when it would repeat that step. The time left is the pace of the steps so
    far over the steps left, capped by ``max_time``; an unset bound (-1) is not shown, nor a
    ``max_steps`` that ``max_epochs`` reaches first: ``epoch 3 | step 250/300``.
    """

    def __init__(self) -> None:
        self._start = 0.0
        self._first_step = 0
        self._validation_line_step = -1  # the step of the last "validation" line printed
        self._validated_step = -1  # the step of the last validation in this fit

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()
        self._first_step = trainer.global_step  # > 0 for a resumed run

    def line(self, trainer: L.Trainer, within_epoch: bool = False) -> str:
        """The line for the epoch that just ended (`within_epoch`: for a validation inside
        the epoch, ``trainer.val_check_interval``, marked "validation")."""
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        epoch, step = trainer.current_epoch, trainer.global_step
        max_epochs, max_steps = trainer.max_epochs or -1, trainer.max_steps
        planned = trainer.estimated_stepping_batches  # max_steps, or fewer where epochs end first
        parts = [  # a bound of -1 means none: no "/-1"
            f"epoch {epoch + 1}" + (f"/{max_epochs}" if max_epochs > 0 else ""),
            f"step {step}" + (f"/{max_steps}" if 0 < max_steps <= planned else ""),
        ]
        if within_epoch:
            parts[0] += " validation"
        if "train/loss" in metrics:
            parts.append(f"train loss {metrics['train/loss']:.3f}")
        names = (("val/loss", "val loss", 3), ("val/ppl", "ppl", 2), ("val/bleu", "BLEU", 2))
        names += (("val/chrf", "chrF", 2),)
        if step == self._validated_step:  # else the figures are an earlier validation's
            parts += [f"{label} {metrics[key]:.{d}f}" for key, label, d in names if key in metrics]
        throughput = [cb for cb in trainer.callbacks if isinstance(cb, TokenThroughput)]
        if throughput and throughput[0].last_tokens_per_sec is not None:
            parts.append(f"{throughput[0].last_tokens_per_sec:,.0f} tok/s")
        elapsed = time.perf_counter() - self._start
        # Steps left by max_epochs or max_steps, whichever ends first (inf: neither bounds it).
        steps_left = trainer.estimated_stepping_batches - step
        left = elapsed / max(step - self._first_step, 1) * max(steps_left, 0)
        remaining = train_time_remaining(trainer)
        if remaining is not None:
            left = min(left, max(remaining, 0.0))
        eta = _clock(left) if math.isfinite(left) else "unbounded"
        if step == self._first_step and steps_left > 0:  # resumed, no step timed yet
            eta = "unknown"
        # The budget's clock where there is one: a resume restores it, so a resumed run's
        # line shows the run's training time, not this process's.
        clock = train_time_elapsed(trainer)
        parts.append(f"elapsed {_clock(elapsed if clock is None else clock)}, ETA {eta}")
        return " | ".join(parts)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        repeat = trainer.global_step == self._validation_line_step  # same step, same figures
        if trainer.is_global_zero and not trainer.sanity_checking and not repeat:
            print(self.line(trainer), flush=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        within = not trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if fitting:
            self._validated_step = trainer.global_step
        if fitting and within and trainer.is_global_zero:  # the epoch's own line comes later
            print(self.line(trainer, within_epoch=True), flush=True)
            self._validation_line_step = trainer.global_step


class MinitxProgressBar(RichProgressBar):
    """Lightning's rich progress bar without ``v_num``: the last four characters of the first
    logger's version, for minitx runs a timestamp's tail or ``_csv``, which mean nothing in a
    bar (the run directory is printed at the end of training instead)."""

    def get_metrics(
        self, trainer: L.Trainer, pl_module: L.LightningModule
    ) -> dict[str, int | str | float | dict[str, float]]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


def budget_schedules(trainer: L.Trainer) -> list[BudgetSchedule]:
    """The `BudgetSchedule`s among the trainer's learning-rate schedules."""
    found = []
    for config in trainer.lr_scheduler_configs:
        for factor in getattr(config.scheduler, "lr_lambdas", []):
            if isinstance(factor, BudgetSchedule):
                found.append(factor)
    return found


class BudgetClock(L.Callback):
    """Tells each `BudgetSchedule` the time on `trainer.max_time`'s clock (Lightning's
    `Timer`) after every update, and logs the run's progress through its budget as
    ``train/budget`` (0 to 1); nothing for other schedules."""

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        """Tell the time just before the update: Lightning steps the schedulers right after
        it (before ``on_train_batch_end``), so the next update's rate reads this time."""
        self._tell(trainer, trainer.global_step + 1)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """A resumed run: tell its budget before the first update, whose rate is set from the
        schedule before it (`TranslationModule.on_train_start`, after this hook). The
        checkpoint's schedule holds the budget of the run that wrote it: resumed with a longer
        ``max_time``, the first update took the old plan's rate (0 once that was spent)."""
        if trainer.global_step > 0:
            self._tell(trainer, trainer.global_step)

    def _tell(self, trainer: L.Trainer, step: int) -> None:
        schedules = budget_schedules(trainer)
        if not schedules:
            return
        elapsed, remaining = train_time_elapsed(trainer), train_time_remaining(trainer)
        budget = None if elapsed is None or remaining is None else elapsed + remaining
        # Every process reads rank 0's clock: under DDP the replicas must use the same rate.
        elapsed, budget = trainer.strategy.broadcast((elapsed, budget))
        for schedule in schedules:
            schedule.tell(step, elapsed or 0.0, budget)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, *args: Any, **kwargs: Any
    ) -> None:
        schedules = budget_schedules(trainer)
        if not schedules:
            return
        progress = schedules[0].budget_progress(trainer.global_step)  # 0.0 in the warm-up
        pl_module.log("train/budget", progress, on_step=True, on_epoch=False)
