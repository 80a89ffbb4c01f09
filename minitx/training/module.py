"""`TranslationModule`: the LightningModule that trains a `Transformer` for translation.

It is thin on purpose: the loop, precision, clipping, checkpointing, logging and DDP are the
Trainer's. It owns the loss, AdamW and its schedule, the attention kernel of training steps
and the validation metrics (loss, perplexity, corpus BLEU / chrF).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import Any

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torchmetrics import MeanMetric

from minitx.checkpoint import (
    CHECKPOINT_KEY,
    languages_of,
    model_config_differences,
    write_payload,
)
from minitx.decoding import generate
from minitx.errors import (
    CheckpointError,
    ConfigError,
    DivergenceError,
    ResumeMismatchError,
    check_known_keys,
    is_whole_number,
)
from minitx.metrics import bleu_metric, corpus_scores
from minitx.model import PACK_ROWS, Transformer, TransformerConfig
from minitx.tokenizer import Tokenizer
from minitx.training.config import SDPA_BACKENDS, OptimConfig, ValidationConfig
from minitx.training.schedules import SCHEDULES, make_schedule
from minitx.vocab import PAD_ID

logger = logging.getLogger(__name__)


def _coerce(value: Any, cls: type) -> Any:
    """Accept a config dataclass or a plain mapping of its fields (a misspelt key is named,
    with the known ones, not a TypeError about a keyword)."""
    if isinstance(value, Mapping):
        if cls is TransformerConfig:  # which also reads the older checkpoints' keys
            return TransformerConfig.from_dict(dict(value))
        check_known_keys(cls.__name__, value, (f.name for f in fields(cls)))
        return cls(**value)
    return value


_DEFAULTS = (TransformerConfig(), OptimConfig(), ValidationConfig())
"""Default argument values (never mutated; typed defaults let the CLI expand each group)."""

VALIDATION_METRICS = {"val/loss": "min", "val/ppl": "min", "val/bleu": "max", "val/chrf": "max"}
"""The metrics `TranslationModule.on_validation_epoch_end` logs, each with the direction in
which it improves: what a ``checkpoint.monitor`` of validation may name, and its ``mode``."""


class TranslationModule(L.LightningModule):
    """Train a Transformer on batches from `minitx.data.datamodule.TranslationDataModule`.

    Args:
        transformer: the model's settings; its vocabulary sizes are linked to
            `data.vocab_size` by the training command.
        optim: loss, optimiser and schedule settings.
        validation: BLEU/chrF schedule and the decoding used for it.
        sdpa_backend: the attention behind the loss: PyTorch's fused
            `F.scaled_dot_product_attention` with its "flash", "math" or "default" (PyTorch's
            choice) kernel in training steps; "explicit", minitx's written-out
            `scaled_dot_product_attention`, in training and validation steps; or "auto":
            "explicit" on a CPU under bf16 autocast, where it is the fastest at Multi30k's
            lengths (the speed guide), else "default". A runtime choice, not part of the
            model's config.
        pack_rows: `Transformer.pack_rows` (0 = no packing); a runtime choice like
            `sdpa_backend`: it changes results only by rounding and dropout masks.

    The settings groups accept their dataclass or a plain dict of its fields (missing
    fields: defaults).
    """

    def __init__(
        self,
        transformer: TransformerConfig = _DEFAULTS[0],
        optim: OptimConfig = _DEFAULTS[1],
        validation: ValidationConfig = _DEFAULTS[2],
        sdpa_backend: str = "auto",
        pack_rows: int = PACK_ROWS,
    ) -> None:
        super().__init__()
        self.model_config: TransformerConfig = _coerce(transformer, TransformerConfig)
        if sdpa_backend not in SDPA_BACKENDS:
            raise ConfigError(f"model.sdpa_backend={sdpa_backend!r}; choose one of {SDPA_BACKENDS}")
        self.sdpa_backend = sdpa_backend
        if pack_rows < 0:
            raise ConfigError(f"model.pack_rows must be >= 0 (0 = no packing), got {pack_rows}")
        self.optim: OptimConfig = _coerce(optim, OptimConfig)
        self.validation: ValidationConfig = _coerce(validation, ValidationConfig)
        # Plain data only, so that checkpoints load with weights_only=True.
        self.save_hyperparameters(
            {
                "transformer": self.model_config.to_dict(),
                "optim": asdict(self.optim),
                "validation": asdict(self.validation),
                "sdpa_backend": self.sdpa_backend,
                "pack_rows": pack_rows,
            }
        )
        self.model = Transformer(self.model_config)
        self.model.pack_rows = pack_rows
        self.val_loss = MeanMetric()
        self.val_nll = MeanMetric()
        # The validation translations and their references, scored at the end of the
        # validation by sacreBLEU itself, as the test set is (minitx-evaluate): torchmetrics'
        # chrF took 6.4 s for 1,000 sentences where sacreBLEU takes 0.2 s, and gave another value.
        self.val_pairs: list[tuple[str, str]] = []
        self.tokenizer = None  # set from the datamodule in `setup`; needed for BLEU and checkpoints
        self.validation_examples: list[tuple[str, str, str]] = []
        """(source, reference, hypothesis) of the first `validation.log_examples` validation
        pairs, from the last validation that translated (see `ValidationExamples`)."""
        self._skipped_batches = 0  # bad batches skipped so far (OptimConfig.skip_bad_batches)

    # ---------------------------------------------------------------- wiring

    def _attached_trainer(self) -> L.Trainer | None:
        """The trainer running this module; None outside a fit (a module used on its own)."""
        try:
            return self.trainer
        except RuntimeError:  # Lightning's answer for a module not attached to a Trainer
            return None

    def setup(self, stage: str) -> None:
        trainer = self._attached_trainer()
        if self.optim.skip_bad_batches and trainer is not None and trainer.world_size > 1:
            raise ConfigError(
                "model.optim.skip_bad_batches works in single-process training only (a rank "
                "that skips a batch would leave the others waiting); set it to 0 for DDP"
            )
        if stage == TrainerFn.FITTING:  # a BLEU tokenizer it lacks, before the first update
            bleu_metric(language=(self._languages() or (None, None))[1])
        theirs = getattr(getattr(trainer, "datamodule", None), "tokenizer", None)
        if theirs is None and self.tokenizer is None and stage == TrainerFn.FITTING:
            raise ConfigError(  # BLEU, the maps and the checkpoint's tokenizer were left out
                "TranslationModule has no tokenizer: fit it with datamodule="
                "TranslationDataModule(...), or set module.tokenizer first (validation BLEU, "
                "attention maps and checkpoints that translate need it)"
            )
        if theirs is not None:
            if self.tokenizer is not None and self.tokenizer.model_bytes != theirs.model_bytes:
                raise ConfigError(  # a checkpoint's or an earlier fit's: ids mean other pieces
                    "this model's tokenizer (from its checkpoint or an earlier fit) differs "
                    "from the data module's, whose ids would mean other pieces: give the data "
                    "module the same data settings (source, languages, vocab_size, "
                    "tokenizer_type)"
                )
            self.tokenizer = theirs
            sizes = {self.model_config.src_vocab_size, self.model_config.tgt_vocab_size}
            if sizes != {self.tokenizer.vocab_size}:
                raise ValueError(
                    f"the model's vocabulary sizes {sorted(sizes)} differ from the tokenizer's "
                    f"{self.tokenizer.vocab_size} pieces; minitx-train links "
                    "model.transformer.src_vocab_size/tgt_vocab_size to data.vocab_size"
                )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Refuse to resume from a checkpoint this run cannot continue (`check_resume`,
        `check_training_state`).

        A decaying schedule ends where this run's plan ends, not the checkpoint's (a run
        resumed with more epochs decays over them), and AdamW's kernel is this run's
        `optim.fused`: the saved values would win.
        """
        self.check_resume(checkpoint, self._languages())  # another model's: said first
        saved = (checkpoint.get(CHECKPOINT_KEY) or {}).get("tokenizer")
        if self.tokenizer is None and saved is not None:  # load_from_checkpoint: it decodes
            try:
                self.tokenizer = Tokenizer(saved)
            except (ValueError, TypeError, RuntimeError) as exc:  # as model_from_checkpoint
                raise CheckpointError(f"damaged minitx checkpoint: its tokenizer: {exc}") from exc
        trainer = self._attached_trainer()  # a resume; not load_from_checkpoint nor a test
        if trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            self.check_training_state(checkpoint)
        for optimizer_state in checkpoint.get("optimizer_states", []):
            for group in optimizer_state.get("param_groups", []):
                group["fused"] = True if self.optim.fused else None
        for scheduler_state in checkpoint.get("lr_schedulers", []):
            for schedule_state in scheduler_state.get("lr_lambdas", []):
                if isinstance(schedule_state, dict):
                    schedule_state.pop("total_steps", None)

    def check_resume(
        self,
        checkpoint: dict[str, Any],
        languages: tuple[str | None, str | None] | None = None,
    ) -> None:
        """Refuse to resume from `checkpoint` (a Lightning checkpoint's dict) when its model
        config, its `RESUME_KEEPS` optimizer settings, its languages (this run's `languages`,
        (source, target), when given) or (once this module has one) its tokenizer differ from
        this run's.

        Raises:
            ResumeMismatchError: naming what differs.
        """
        problems = []  # all of them in one error: fixing one, a user would meet the next
        payload = checkpoint.get(CHECKPOINT_KEY) or {}
        saved = payload.get("model_config")
        if saved is not None:
            differ = model_config_differences(TransformerConfig.from_dict(saved), self.model_config)
            if differ:
                problems.append(f"the checkpoint's model config differs from this run's ({differ})")
        saved_optim = (checkpoint.get("hyper_parameters") or {}).get("optim")
        if isinstance(saved_optim, dict):
            current_optim = asdict(self.optim)
            changed = [
                f"model.optim.{key} {saved_optim[key]!r} -> {current_optim[key]!r}"
                for key in self.RESUME_KEEPS
                if key in saved_optim
                and _as_plain(saved_optim[key]) != _as_plain(current_optim[key])
            ]
            if changed:
                problems.append(
                    f"this run has other optimizer settings ({'; '.join(changed)}) than the "
                    "checkpoint, whose optimizer state and schedule carry its own"
                )
        # One joint tokenizer serves both directions, so its check below passes a swap.
        saved_languages = languages_of(checkpoint) if payload else (None, None)
        if None not in saved_languages and languages is not None and saved_languages != languages:
            problems.append(
                f"the checkpoint translates {'->'.join(saved_languages)}, this run "
                f"{'->'.join(map(str, languages))} (--data.src_lang {saved_languages[0]} "
                f"--data.tgt_lang {saved_languages[1]} are the checkpoint's)"
            )
        if problems:
            raise ResumeMismatchError(
                f"cannot resume: {'; and '.join(problems)}; resume with the checkpoint's "
                "settings, or start a new run (--run_name) to train with these"
            )
        tokenizer = payload.get("tokenizer")
        if tokenizer is not None and self.tokenizer is not None:
            if tokenizer != self.tokenizer.model_bytes:
                raise ResumeMismatchError(
                    "cannot resume: this run's tokenizer (trained on its corpus and settings: "
                    "data.source, languages, vocab_size, tokenizer_type) differs from the "
                    "checkpoint's, so its token ids would mean other pieces; resume with the "
                    "checkpoint's data settings or start a new run (--run_name)"
                )

    def check_training_state(
        self, checkpoint: Mapping[str, Any], where: str = "the checkpoint"
    ) -> None:
        """Refuse a checkpoint whose training state (Lightning's entries: the weights, counters,
        loops, callbacks, optimizer and schedule) is not whole, before Lightning restores it: a
        damaged entry ended in a traceback deep in the restore (weights that do not fit this
        model among them), a missing loop state restarted the update count at 0, an empty
        optimizer state was silently skipped, and AdamW moments of another shape crashed the
        process (the fused kernel trusts them to have their parameter's shape).

        `where` names the file in the message.

        Raises:
            CheckpointError: naming the first damaged entry.
        """
        shapes = {name: tuple(tensor.shape) for name, tensor in self.state_dict().items()}
        problem = _training_state_problem(checkpoint, self.parameter_groups(), shapes)
        if problem is not None:
            raise CheckpointError(
                f"cannot resume from {where}: {problem}; resume from another checkpoint "
                "of the run, or start a new run"
            )

    RESUME_KEEPS = ("lr", "warmup_steps", "schedule", "betas", "weight_decay")
    """`OptimConfig` settings a resumed run takes from its checkpoint (the optimizer's state and
    the schedule's carry them), so a different value on the command line is refused."""

    def on_train_start(self) -> None:
        """Set each parameter group's rate from the schedule at the current step: a resumed
        run restores the rate its checkpoint was saved with, not its new plan's."""
        for config in self.trainer.lr_scheduler_configs:
            scheduler = config.scheduler
            if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
                continue
            step, factors = scheduler.last_epoch, scheduler.lr_lambdas
            lrs = [base * f(step) for base, f in zip(scheduler.base_lrs, factors, strict=True)]
            for group, lr in zip(scheduler.optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr

    def _current_lr(self) -> float:
        trainer = self._attached_trainer()
        if trainer is None or not trainer.optimizers:
            return float("nan")
        return float(trainer.optimizers[0].param_groups[0]["lr"])

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Make the checkpoint self-contained: model config and tokenizer travel inside it.

        Raises:
            DivergenceError: a weight is NaN or infinite; such a checkpoint is never written.
        """
        bad = [name for name, p in self.model.named_parameters() if not torch.isfinite(p).all()]
        if bad:
            raise DivergenceError(
                f"refusing to write a checkpoint at step {self.global_step}: {len(bad)} weight "
                f"tensors hold NaN or inf (e.g. {bad[0]}); the earlier checkpoints are kept"
            )
        write_payload(
            checkpoint,
            model_config=self.model_config,
            tokenizer=self.tokenizer,
            languages=self._languages(),
        )

    def _languages(self) -> tuple[str | None, str | None] | None:
        """(source, target) language codes of the data this module trains on; None outside
        a fit with a data module."""
        return self.datamodule_languages(getattr(self._attached_trainer(), "datamodule", None))

    @staticmethod
    def datamodule_languages(
        datamodule: L.LightningDataModule | None,
    ) -> tuple[str | None, str | None] | None:
        """(source, target) language codes a data module reads (its `src_lang` and `tgt_lang`
        hyperparameters, None each where it has none); None without a data module."""
        if datamodule is None:
            return None
        hparams = getattr(datamodule, "hparams", None) or {}  # a data module of one's own
        return hparams.get("src_lang"), hparams.get("tgt_lang")

    # ---------------------------------------------------------------- loss

    def _losses(self, batch: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
        """(label-smoothed loss, plain NLL, number of target tokens), both losses per token."""
        # Asking for the attention weights runs the written-out attention (the maps go unused).
        explicit = self._attention() == "explicit"
        enc = self.model.encode(batch["src"], need_weights=explicit)
        states = self.model.decoder_states(
            batch["tgt_in"], enc.memory, enc.src_mask, need_weights=explicit
        ).states  # (B, T, D)
        target = batch["tgt_out"]  # (B, T)
        real = target != PAD_ID
        # Project only real target positions: the (N, V) logits are the largest tensors of a step.
        # In fp32; dtype= reads bf16 logits straight into the fp32 kernel, without a copy first.
        logits = self.model.output(states[real])  # (N, V)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=torch.float32)
        nll = -log_probs.gather(-1, target[real][:, None]).squeeze(-1)  # (N,)
        # Label smoothing as in F.cross_entropy: mix the one-hot target with a uniform one.
        eps = self.optim.label_smoothing
        loss = ((1.0 - eps) * nll - eps * log_probs.mean(-1)).mean()
        return loss, nll.detach().mean(), real.sum()

    def _attention(self) -> str:
        """The attention of this step: `sdpa_backend`, with "auto" resolved."""
        if self.sdpa_backend != "auto":
            return self.sdpa_backend
        on_cpu_bf16 = (
            self.device.type == "cpu"
            and torch.is_autocast_enabled("cpu")
            and torch.get_autocast_dtype("cpu") == torch.bfloat16
        )
        return "explicit" if on_cpu_bf16 else "default"

    def _sdpa_kernel(self) -> contextlib.AbstractContextManager:
        """The fused kernel's backend for a training step (see `sdpa_backend`)."""
        choice = self._attention()
        if choice in ("default", "explicit"):
            return contextlib.nullcontext()
        return sdpa_kernel(SDPBackend.MATH if choice == "math" else SDPBackend.FLASH_ATTENTION)

    def _bad_batch(self, what: str) -> None:
        """A batch gave a non-finite `what`: skip it while `skip_bad_batches` allows, else stop.

        Raises:
            DivergenceError: no skips left (the default allows none).
        """
        if self._skipped_batches < self.optim.skip_bad_batches:
            self._skipped_batches += 1
            logger.warning(
                "step %d: %s; batch skipped, no update (%d of at most %d, "
                "model.optim.skip_bad_batches)",
                self.global_step,
                what,
                self._skipped_batches,
                self.optim.skip_bad_batches,
            )
            return
        allowed = self.optim.skip_bad_batches
        skipped = f" after skipping {allowed} bad batches" if allowed else ""
        raise DivergenceError(
            f"training diverged at step {self.global_step}{skipped}: {what} "
            f"(learning rate {self._current_lr():.3g}); start a new run with a lower "
            "model.optim.lr or more model.optim.warmup_steps (a resumed run keeps the "
            "checkpoint's peak rate and warm-up); no checkpoint holds non-finite weights"
        )

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor | None:
        with self._sdpa_kernel():
            loss, _, n_tokens = self._losses(batch)
        if not torch.isfinite(loss):
            self._bad_batch(f"the loss is {loss.item()}")
            return None  # skipped: Lightning then runs no backward and the optimizer no update
        self.log("train/loss", loss, prog_bar=True, batch_size=int(n_tokens))
        self.log(
            "train/tokens",
            n_tokens.float(),
            reduce_fx="sum",
            on_step=False,
            on_epoch=True,
            batch_size=1,
            sync_dist=True,  # under DDP: every process's tokens, not the logging one's share
        )
        return loss

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip as the Trainer is configured, and catch a non-finite gradient norm before the
        optimizer applies it (see `OptimConfig.skip_bad_batches`).

        A skipped batch leaves every gradient unset, so the optimizer updates nothing.
        """
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            norm = torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)  # as Lightning does
        else:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            # The norm of all gradients as one vector (torch 2.5, our floor, has no get_total_norm)
            norm = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g) for g in grads])
            )
        self.log("train/grad_norm", norm, on_step=True, on_epoch=False, batch_size=1)
        if not torch.isfinite(norm):
            self._bad_batch(f"the gradient norm is {norm.item()}")
            for p in params:
                p.grad = None

    def on_train_epoch_end(self) -> None:
        if self.optim.skip_bad_batches:
            self.log("train/skipped_batches", float(self._skipped_batches), batch_size=1)

    # ---------------------------------------------------------------- validation

    def _bleu_this_epoch(self) -> bool:
        every = self.validation.bleu_every_n_epochs
        if every <= 0 or self.tokenizer is None:
            return False
        trainer = self.trainer
        last = (  # the last epoch, or a validation that ends the run (max_steps, max_time)
            (trainer.max_epochs is not None and 0 < trainer.max_epochs <= self.current_epoch + 1)
            or (trainer.max_steps > 0 and self.global_step >= trainer.max_steps)
            or trainer.should_stop
        )
        return (self.current_epoch + 1) % every == 0 or last or trainer.sanity_checking

    def on_validation_epoch_start(self) -> None:
        if self._bleu_this_epoch():
            self.validation_examples = []
            self.val_pairs = []

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss, nll, n_tokens = self._losses(batch)
        self.val_loss.update(loss, weight=n_tokens)
        self.val_nll.update(nll, weight=n_tokens)
        if self._bleu_this_epoch():
            hypotheses = self.translate_ids(batch["src"])
            self.val_pairs += zip(hypotheses, batch["tgt_text"], strict=True)
            wanted = self.validation.log_examples - len(self.validation_examples)
            triples = zip(batch["src_text"], batch["tgt_text"], hypotheses, strict=True)
            self.validation_examples += list(triples)[: max(wanted, 0)]

    def on_validation_epoch_end(self) -> None:
        # Under DDP every process holds the same values (the metrics gather their shares in
        # compute(), the translations are gathered): sync_dist averages equal numbers, and
        # says so to Lightning, which otherwise warns once per metric.
        nll = self.val_nll.compute()
        self.log("val/loss", self.val_loss.compute(), prog_bar=True, sync_dist=True)
        self.log("val/ppl", torch.exp(nll), sync_dist=True)
        self.val_loss.reset()
        self.val_nll.reset()
        if self._bleu_this_epoch():
            hypotheses, references = self._all_val_pairs()
            languages = self._languages() or (None, None)
            scores = corpus_scores(hypotheses, references, language=languages[1])
            self.log("val/bleu", scores.bleu.score, prog_bar=True, sync_dist=True)
            self.log("val/chrf", scores.chrf.score, sync_dist=True)
            self.val_pairs = []

    def _all_val_pairs(self) -> tuple[list[str], list[str]]:
        """(hypotheses, references) of the whole validation set: under DDP each process
        translated its share, so the shares are gathered (every process scores them all and
        logs the same value)."""
        pairs = self.val_pairs
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            shares: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(shares, pairs)
            pairs = [pair for share in shares for pair in share]
        return [hyp for hyp, _ in pairs], [ref for _, ref in pairs]

    def translate_ids(self, src: Tensor) -> list[str]:
        """Translations (detokenised strings) of a batch of source ids (B, S), decoded as
        `validation.decoding` says, in eval mode (a module fresh from `load_from_checkpoint`
        is in training mode; its mode is restored after)."""
        training = self.model.training
        self.model.eval()
        try:
            hypotheses = generate(self.model, src, self.validation.decoding)
        finally:
            self.model.train(training)
        return self.tokenizer.decode([hyps[0].tokens for hyps in hypotheses])

    # ---------------------------------------------------------------- optimisation

    def parameter_groups(self) -> list[dict[str, Any]]:
        """AdamW groups: weight matrices of linear layers decay; embeddings, biases, norms and
        everything else do not. Chosen by module type; a tied output matrix is the embedding."""
        linear_weights = {
            id(m.weight) for m in self.model.modules() if isinstance(m, torch.nn.Linear)
        }
        embeddings = {
            id(m.weight) for m in self.model.modules() if isinstance(m, torch.nn.Embedding)
        }
        decay, no_decay = [], []
        for p in self.model.parameters():  # module order: the same groups on every run
            is_decayed = id(p) in linear_weights and id(p) not in embeddings
            (decay if is_decayed else no_decay).append(p)
        return [
            {"params": decay, "weight_decay": self.optim.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]

    def _schedule_steps(self) -> tuple[int, int | None]:
        """(warm-up, total) optimizer steps of the schedule; total: where a decaying one
        reaches zero (`optim.total_steps`, else the plan), None for an open-ended one.

        A plan no longer than the warm-up (a quick `--trainer.max_steps 20` try) warms up over
        a tenth of it instead, so that the rate still rises and decays within the run.
        """
        o = self.optim
        if not SCHEDULES[o.schedule].needs_total_steps:
            return o.warmup_steps, None
        if o.total_steps:
            return o.warmup_steps, o.total_steps
        planned = self.trainer.estimated_stepping_batches
        if not math.isfinite(planned):
            raise ConfigError(
                f"model.optim.schedule {o.schedule!r} decays to zero at the last planned step, "
                "but the run has no planned length (trainer.max_time bounds it, but plans no "
                "number of steps); set trainer.max_epochs or trainer.max_steps, or "
                "model.optim.total_steps"
            )
        planned = int(planned)
        if planned > o.warmup_steps:
            return o.warmup_steps, planned
        warmup = max(1, planned // 10)
        logger.warning(
            "the run plans %d optimizer steps, not more than model.optim.warmup_steps (%d): "
            "warming up over %d steps instead (a tenth of the plan)",
            planned,
            o.warmup_steps,
            warmup,
        )
        return warmup, max(planned, warmup + 1)

    def configure_optimizers(self) -> dict[str, Any]:
        o = self.optim
        fused = {"fused": True} if o.fused else {}  # else PyTorch's default implementation
        optimizer = torch.optim.AdamW(
            self.parameter_groups(), lr=o.lr, betas=tuple(o.betas), eps=1e-9, **fused
        )
        warmup, total = self._schedule_steps()
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, make_schedule(o.schedule, warmup, total)
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


def _training_state_problem(
    checkpoint: Mapping[str, Any],
    groups: list[dict[str, Any]],
    shapes: Mapping[str, tuple[int, ...]],
) -> str | None:
    """What is damaged in `checkpoint`'s training state, or None: the entries Lightning reads
    on resume, each of the type Lightning writes; the weights those of the module (`shapes`,
    name -> shape); the optimizer state one AdamW over `groups`
    (`TranslationModule.parameter_groups`) wrote, its tensors the shape of their parameters."""
    weights = checkpoint.get("state_dict")
    if not isinstance(weights, Mapping):
        return "it has no 'state_dict' of weights"
    missing, extra = sorted(shapes.keys() - weights.keys()), sorted(weights.keys() - shapes)
    if missing or extra:  # Lightning's strict load ended in a traceback, after the run began
        return f"its weights {'lack' if missing else 'have an unknown'} {(missing or extra)[0]!r}"
    for name, shape in shapes.items():
        saved = weights[name]
        if not isinstance(saved, Tensor) or tuple(saved.shape) != shape:
            held = tuple(saved.shape) if isinstance(saved, Tensor) else type(saved).__name__
            return f"its weight {name!r} is {held}, this model's {shape}"
    for key in ("epoch", "global_step"):
        if key in checkpoint and not is_whole_number(checkpoint[key]):
            return f"its {key!r} is {checkpoint[key]!r}, not a whole number"
    loops = checkpoint.get("loops")  # without it, Lightning counted the updates from 0 again
    if not isinstance(loops, Mapping) or not isinstance(loops.get("fit_loop"), Mapping):
        return "its 'loops' entry has no 'fit_loop' state"
    counters = loops["fit_loop"].get("epoch_progress", {})
    counters = counters.get("current", {}) if isinstance(counters, Mapping) else None
    if not isinstance(counters, Mapping) or not all(map(is_whole_number, counters.values())):
        return "its fit loop's 'epoch_progress' is not a mapping of counters"
    callbacks = checkpoint.get("callbacks", {})
    if not isinstance(callbacks, Mapping) or not all(
        isinstance(v, Mapping) for v in callbacks.values()
    ):
        return "its 'callbacks' entry is not a mapping of callback states"
    schedulers = checkpoint.get("lr_schedulers")  # one: `configure_optimizers`' LambdaLR
    if not isinstance(schedulers, list) or len(schedulers) != 1:
        return "it does not hold the state of one learning-rate schedule ('lr_schedulers')"
    if not isinstance(schedulers[0], Mapping):
        return "its 'lr_schedulers' entry is not a list of schedule states"
    optimizers = checkpoint.get("optimizer_states")
    if not isinstance(optimizers, list) or len(optimizers) != 1:
        return "it does not hold the state of one optimizer ('optimizer_states')"
    saved = optimizers[0]
    saved_groups = saved.get("param_groups") if isinstance(saved, Mapping) else None
    if (
        not isinstance(saved_groups, list)
        or not isinstance(saved.get("state"), Mapping)
        or len(saved_groups) != len(groups)
        or not all(
            isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in saved_groups
        )
    ):
        return f"its optimizer state is not AdamW's over {len(groups)} parameter groups"
    for number, (group, ours) in enumerate(zip(saved_groups, groups, strict=True)):
        if len(group["params"]) != len(ours["params"]):
            return (
                f"its optimizer's parameter group {number} has {len(group['params'])} "
                f"parameters, this model's {len(ours['params'])}"
            )
        for index, param in zip(group["params"], ours["params"], strict=True):
            moments = saved["state"].get(index, {})
            if not isinstance(moments, Mapping):
                return f"its optimizer state of parameter {index} is not a mapping"
            for name, value in moments.items():
                if name == "step" and _is_step_count(value):
                    continue
                if not isinstance(value, Tensor) or not value.is_floating_point():
                    return f"its optimizer's {name!r} of parameter {index} is not a float tensor"
                if value.shape != param.shape:  # the moments: the fused kernel trusts this
                    return (
                        f"its optimizer's {name!r} of parameter {index} has shape "
                        f"{tuple(value.shape)}, the parameter {tuple(param.shape)}"
                    )
    return None


def _is_step_count(value: Any) -> bool:
    """AdamW's `step`: a 0-d float tensor, or a number (older torch)."""
    if isinstance(value, Tensor):
        return value.dim() == 0 and value.is_floating_point()
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_plain(value: Any) -> Any:
    """Lists and tuples alike (betas come back from a checkpoint as a list)."""
    return list(value) if isinstance(value, (list, tuple)) else value
