"""Settings of the training module, grouped: optimisation and validation.

The model's own settings are `minitx.model.TransformerConfig`; decoding settings are
`minitx.decoding.DecodingConfig`. Each setting is defined once, here or there, and the YAML
configs use the same names (`model.transformer.*`, `model.optim.*`, `model.validation.*`).
The defaults are the default recipe's (`minitx-train` without a `--config`); the packaged
YAML configs list only what they change.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from minitx.decoding import DecodingConfig
from minitx.errors import ConfigError
from minitx.training.schedules import SCHEDULES

SDPA_BACKENDS: tuple[str, ...] = ("auto", "explicit", "flash", "math", "default")
"""Choices of `TranslationModule`'s `sdpa_backend` (`model.sdpa_backend`)."""


@dataclass
class OptimConfig:
    """How the model is trained.

    Attributes:
        label_smoothing: label-smoothing epsilon of the training loss.
        lr: peak learning rate (reached at the end of warm-up).
        warmup_steps: optimizer steps of linear warm-up to the peak rate `lr`.
        schedule: the rate after warm-up, a name in `minitx.training.schedules.SCHEDULES`:
            "budget" (the default), "linear", "cosine" or "inverse_sqrt" (the training guide,
            "Learning-rate schedule").
        total_steps: the optimizer step at which a decaying schedule (`needs_total_steps`)
            reaches zero by steps, warm-up included; 0 = the run's plan (Lightning's
            `estimated_stepping_batches`).
        weight_decay: AdamW decoupled weight decay, applied to the weight matrices of linear
            layers only (not to embeddings, biases, norms or score parameters). 0.1 beat none
            on the validation split at equal updates (docs: Results, "How the budget recipe
            was chosen").
        betas: AdamW betas.
        fused: AdamW's fused kernel (`torch.optim.AdamW(fused=True)`: one kernel for all
            parameters instead of a loop over them), on CPU and GPU alike: 20% more target
            tokens/s on a bf16 CPU, 5% in fp32 (docs: Speed). False = PyTorch's own choice (a
            loop over the parameters on CPU, grouped ``foreach`` kernels on GPU).
        skip_bad_batches: opt-in tolerance, as fairseq has: skip up to this many batches
            whose loss or gradient norm is NaN or infinite (no update; each one logged and
            counted in ``train/skipped_batches``); the next one stops the run. 0 (default):
            the first one stops it. Single-process training only.
    """

    label_smoothing: float = 0.1
    lr: float = 1.5e-3
    warmup_steps: int = 100
    schedule: str = "budget"
    total_steps: int = 0
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.98)
    fused: bool = True
    skip_bad_batches: int = 0

    def __post_init__(self) -> None:
        self.betas = tuple(self.betas)
        if self.skip_bad_batches < 0:
            raise ConfigError(
                f"OptimConfig.skip_bad_batches must be >= 0, got {self.skip_bad_batches}"
            )
        SCHEDULES.check(self.schedule, where="OptimConfig.schedule")
        if self.total_steps < 0:
            raise ConfigError(
                f"OptimConfig.total_steps must be >= 0 (0 = the run's planned steps), "
                f"got {self.total_steps}"
            )
        if self.total_steps and not SCHEDULES[self.schedule].needs_total_steps:
            decaying = tuple(name for name in SCHEDULES if SCHEDULES[name].needs_total_steps)
            raise ConfigError(
                f"OptimConfig.total_steps={self.total_steps} applies to the "
                f"{_join(decaying, 'and')} schedules only; set model.optim.schedule "
                f"{_join(decaying, 'or')}, or total_steps 0"
            )
        if 0 < self.total_steps <= self.warmup_steps:
            raise ConfigError(
                f"OptimConfig.total_steps={self.total_steps} must be larger than "
                f"warmup_steps={self.warmup_steps}: the decay starts after the warm-up"
            )
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ConfigError(
                f"OptimConfig.label_smoothing must be in [0, 1), got {self.label_smoothing}"
            )
        if not all(0.0 <= beta < 1.0 for beta in self.betas):  # AdamW's ValueError, at fit start
            raise ConfigError(f"OptimConfig.betas must each lie in [0, 1), got {list(self.betas)}")
        if self.lr <= 0 or self.warmup_steps < 0 or self.weight_decay < 0:
            raise ConfigError(
                "OptimConfig: lr must be > 0, warmup_steps and weight_decay >= 0, got "
                f"lr={self.lr}, warmup_steps={self.warmup_steps}, weight_decay={self.weight_decay}"
            )


def _join(names: tuple[str, ...], word: str) -> str:
    """("a", "b", "c"), "or" -> "a, b or c"."""
    return f" {word} ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


@dataclass
class ValidationConfig:
    """What validation measures besides the loss.

    Attributes:
        validations_per_run: about N validations spread over the run's budget, and one where
            it ends (the training guide, "When validation runs"). 0 = Lightning's cadence,
            which also applies where the run sets ``trainer.check_val_every_n_epoch`` or
            ``trainer.val_check_interval`` itself. minitx-train turns it into the trainer's
            settings (`minitx.training.cadence.validation_cadence`); a Trainer built by hand
            sets its own cadence, and this value goes unread.
        bleu_every_n_epochs: translate the validation set and compute BLEU/chrF every N epochs
            (and always in the last epoch and in a validation that ends the run early, at
            ``trainer.max_steps`` or ``max_time``); 0 disables it.
        decoding: how validation translates. Greedy by default: BLEU after every epoch
            stays cheap; the end-of-training test reports beam search too.
        log_examples: in each validation that translates, show this many (source, reference,
            hypothesis) triples, the first of the validation set: in TensorBoard (TEXT tab,
            ``val/examples``) and in the training output. 0 disables them.
    """

    validations_per_run: int = 10
    bleu_every_n_epochs: int = 1
    decoding: DecodingConfig = field(default_factory=partial(DecodingConfig, strategy="greedy"))
    log_examples: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.decoding, dict):
            self.decoding = DecodingConfig.from_dict(self.decoding)
        for name in ("log_examples", "validations_per_run", "bleu_every_n_epochs"):
            value = getattr(self, name)
            if value < 0:
                raise ConfigError(f"ValidationConfig.{name} must be >= 0, got {value}")
