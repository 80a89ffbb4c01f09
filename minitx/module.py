"""`TranslationModule`: the LightningModule that trains a `Transformer` for translation.

It is thin on purpose: the loop, precision, clipping, checkpointing, logging and DDP are the
Trainer's. It owns the loss (label-smoothed cross-entropy without padding), AdamW with the
inverse-square-root ("Noam") warm-up schedule, and the validation metrics: loss, perplexity,
and corpus BLEU / chrF of greedy translations.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel
from torchmetrics import MeanMetric
from torchmetrics.text import CHRFScore, SacreBLEUScore

from minitx.decoding import greedy_decode
from minitx.model import Transformer, TransformerConfig
from minitx.translator import CHECKPOINT_KEY


class InverseSqrtSchedule:
    """Learning-rate factor of Vaswani et al. (2017, §5.3), normalised to peak at 1.0.

    factor(step) = min(step / warmup, sqrt(warmup / step)): linear warm-up, then 1/sqrt decay.
    A class (not a lambda) so the scheduler state is plain data in checkpoints.
    """

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = max(1, warmup_steps)

    def __call__(self, step: int) -> float:
        step = max(1, step)
        return min(step / self.warmup_steps, math.sqrt(self.warmup_steps / step))


class TranslationModule(L.LightningModule):
    """Train a Transformer on batches from `minitx.data.TranslationDataModule`.

    Args:
        vocab_size: joint vocabulary size (linked from the data config by `scripts/train.py`).
        d_model, n_heads, n_encoder_layers, n_decoder_layers, d_ff, dropout, attention_dropout,
            activation_dropout, activation, norm_first, positional, score, share_embeddings, tie_output,
            scale_embeddings, max_positions: the `TransformerConfig` fields of the same names.
        label_smoothing: label-smoothing epsilon of the training loss.
        lr: peak learning rate (reached at the end of warm-up).
        warmup_steps: optimizer steps of linear warm-up.
        weight_decay: AdamW decoupled weight decay (not applied to biases, norms, embeddings).
        betas: AdamW betas.
        bleu_every_n_epochs: translate the validation set and compute BLEU/chrF every N epochs
            (and always in the last epoch); 0 disables it.
        max_len_a, max_len_b: decoding length cap a·|src| + b for validation translations.
        sdpa_backend: kernel behind `F.scaled_dot_product_attention` in training steps:
            "flash", "math", "default" (PyTorch's choice) or "auto" = "math" on CPU under bf16
            autocast (there the fused flash backward is about 2x slower than the math one for
            sequences up to 128 tokens, see scripts/benchmark.py), else "default".
    """

    def __init__(
        self,
        vocab_size: int = 8000,
        d_model: int = 256,
        n_heads: int = 4,
        n_encoder_layers: int = 3,
        n_decoder_layers: int = 3,
        d_ff: int = 1024,
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        activation: str = "relu",
        norm_first: bool = True,
        positional: str = "sinusoidal",
        score: str = "scaled_dot",
        share_embeddings: bool = True,
        tie_output: bool = True,
        scale_embeddings: bool = True,
        max_positions: int = 1024,
        label_smoothing: float = 0.1,
        lr: float = 1e-3,
        warmup_steps: int = 1000,
        weight_decay: float = 0.0,
        betas: tuple[float, float] = (0.9, 0.98),
        bleu_every_n_epochs: int = 1,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        sdpa_backend: str = "auto",
    ) -> None:
        super().__init__()
        if sdpa_backend not in ("auto", "flash", "math", "default"):
            raise ValueError(f"sdpa_backend={sdpa_backend!r}; choose 'auto', 'flash', 'math' or 'default'")
        self.save_hyperparameters()
        self.model_config = TransformerConfig(
            src_vocab_size=vocab_size,
            tgt_vocab_size=vocab_size,
            d_model=d_model,
            n_heads=n_heads,
            n_encoder_layers=n_encoder_layers,
            n_decoder_layers=n_decoder_layers,
            d_ff=d_ff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            activation_dropout=activation_dropout,
            activation=activation,
            norm_first=norm_first,
            positional=positional,
            max_positions=max_positions,
            score=score,
            share_embeddings=share_embeddings,
            tie_output=tie_output,
            scale_embeddings=scale_embeddings,
        )
        self.model = Transformer(self.model_config)
        self.val_loss = MeanMetric()
        self.val_nll = MeanMetric()
        self.val_bleu = SacreBLEUScore(tokenize="13a", lowercase=False)
        self.val_chrf = CHRFScore()
        self.tokenizer = None  # set from the datamodule in `setup`; needed for BLEU and checkpoints

    # ---------------------------------------------------------------- wiring

    def setup(self, stage: str) -> None:
        self._check_bleu_schedule()
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if datamodule is not None and getattr(datamodule, "tokenizer", None) is not None:
            self.tokenizer = datamodule.tokenizer
            if self.tokenizer.vocab_size != self.hparams.vocab_size:
                raise ValueError(
                    f"model vocab_size={self.hparams.vocab_size} but the tokenizer has {self.tokenizer.vocab_size} pieces; "
                    "set model.vocab_size to the tokenizer's size (scripts/train.py links it to data.vocab_size)"
                )

    def _check_bleu_schedule(self) -> None:
        """A checkpoint callback watching val/bleu needs BLEU in every epoch it runs in."""
        every = self.hparams.bleu_every_n_epochs
        if self._trainer is None:
            return
        for cb in self.trainer.checkpoint_callbacks:
            if getattr(cb, "monitor", None) == "val/bleu" and (every <= 0 or cb._every_n_epochs % every):
                raise ValueError(
                    f"model.bleu_every_n_epochs={every} but a ModelCheckpoint monitors val/bleu every "
                    f"{cb._every_n_epochs} epoch(s); set that callback's every_n_epochs to a multiple of {every} "
                    "(or monitor val/loss instead)"
                )

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Make the checkpoint self-contained: model config and tokenizer travel inside it."""
        payload = checkpoint.setdefault(CHECKPOINT_KEY, {})
        payload["model_config"] = self.model_config.to_dict()
        if self.tokenizer is not None:
            payload["tokenizer"] = self.tokenizer.model_bytes
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is not None:
            payload["data"] = {"src_lang": datamodule.hparams.get("src_lang"), "tgt_lang": datamodule.hparams.get("tgt_lang")}

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Logits (B, T, V) for source ids (B, S) and decoder inputs (B, T)."""
        return self.model(src, tgt_in)

    # ---------------------------------------------------------------- loss

    def _losses(self, batch: dict[str, Any]) -> tuple[Tensor, Tensor, Tensor]:
        """(label-smoothed loss, plain NLL, number of target tokens), both losses per token."""
        enc = self.model.encode(batch["src"])
        states = self.model.decoder_states(batch["tgt_in"], enc.memory, enc.src_mask).states  # (B, T, D)
        target = batch["tgt_out"]  # (B, T)
        real = target != self.model_config.pad_id
        # Project only real target positions: the (N, V) logits are the largest tensors of a step.
        log_probs = torch.log_softmax(self.model.output(states[real]).float(), dim=-1)  # (N, V)
        nll = -log_probs.gather(-1, target[real][:, None]).squeeze(-1)  # (N,)
        # Label smoothing as in F.cross_entropy: mix the one-hot target with a uniform one.
        eps = self.hparams.label_smoothing
        loss = ((1.0 - eps) * nll - eps * log_probs.mean(-1)).mean()
        return loss, nll.detach().mean(), real.sum()

    def _sdpa_kernel(self) -> contextlib.AbstractContextManager:
        """The attention-kernel choice for a training step (see `sdpa_backend`)."""
        choice = self.hparams.sdpa_backend
        if choice == "auto":
            on_cpu_bf16 = self.device.type == "cpu" and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
            choice = "math" if on_cpu_bf16 else "default"
        if choice == "default":
            return contextlib.nullcontext()
        return sdpa_kernel(SDPBackend.MATH if choice == "math" else SDPBackend.FLASH_ATTENTION)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> Tensor:
        with self._sdpa_kernel():
            loss, _, n_tokens = self._losses(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=int(n_tokens))
        self.log("train/tokens", n_tokens.float(), reduce_fx="sum", on_step=False, on_epoch=True, batch_size=1)
        return loss

    # ---------------------------------------------------------------- validation

    def _bleu_this_epoch(self) -> bool:
        every = self.hparams.bleu_every_n_epochs
        if every <= 0 or self.tokenizer is None:
            return False
        last = self.trainer.max_epochs is not None and self.current_epoch + 1 >= self.trainer.max_epochs
        return (self.current_epoch + 1) % every == 0 or last or self.trainer.sanity_checking

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        loss, nll, n_tokens = self._losses(batch)
        self.val_loss.update(loss, weight=n_tokens)
        self.val_nll.update(nll, weight=n_tokens)
        if self._bleu_this_epoch():
            hypotheses = self.translate_ids(batch["src"])
            references = [[ref] for ref in batch["tgt_text"]]
            self.val_bleu.update(hypotheses, references)
            self.val_chrf.update(hypotheses, references)

    def on_validation_epoch_end(self) -> None:
        nll = self.val_nll.compute()
        self.log("val/loss", self.val_loss.compute(), prog_bar=True)
        self.log("val/ppl", torch.exp(nll))
        self.val_loss.reset()
        self.val_nll.reset()
        if self._bleu_this_epoch():
            self.log("val/bleu", self.val_bleu.compute() * 100, prog_bar=True)
            self.log("val/chrf", self.val_chrf.compute() * 100)
            self.val_bleu.reset()
            self.val_chrf.reset()

    def translate_ids(self, src: Tensor) -> list[str]:
        """Greedy translations (detokenised strings) of a batch of source ids."""
        ids = greedy_decode(self.model, src, max_len_a=self.hparams.max_len_a, max_len_b=self.hparams.max_len_b)
        return self.tokenizer.decode(ids.tolist())

    # ---------------------------------------------------------------- optimisation

    def configure_optimizers(self) -> dict[str, Any]:
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (decay if p.dim() > 1 and "embed" not in name else no_decay).append(p)
        groups = [
            {"params": decay, "weight_decay": self.hparams.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=self.hparams.lr, betas=tuple(self.hparams.betas), eps=1e-9)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, InverseSqrtSchedule(self.hparams.warmup_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
