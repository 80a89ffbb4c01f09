"""`Translator`: a trained checkpoint -> translations and attention maps (the inference API).

A minitx checkpoint is self-contained: the Lightning checkpoint's `minitx` entry carries the
model config and the sentencepiece model bytes, so `Translator.from_checkpoint(path)` needs
nothing else. Loading uses `torch.load(weights_only=True)`: no code from the file is executed.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path

import torch

from minitx.decoding import beam_search, greedy_decode
from minitx.maps import AttentionMaps
from minitx.model import Transformer, TransformerConfig
from minitx.tokenizer import Tokenizer

CHECKPOINT_KEY = "minitx"
"""Key of the inference payload in a checkpoint (written by `TranslationModule.on_save_checkpoint`)."""

MODEL_PREFIX = "model."
"""Prefix of the Transformer's parameters in the LightningModule's state dict."""


class CheckpointError(ValueError):
    """A file that is not a usable minitx checkpoint (missing, truncated, foreign)."""


def load_checkpoint(path: str | Path) -> dict:
    """Read a checkpoint safely (`weights_only=True`) and check that it is a minitx one.

    Raises:
        FileNotFoundError: no file at `path`.
        CheckpointError: unreadable (truncated / not a torch file), holds non-data objects, or
            lacks the minitx payload (e.g. a checkpoint of another project).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path} (pass the .ckpt written under <run dir>/checkpoints/)")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "Weights only load failed" in str(exc):
            raise CheckpointError(
                f"{path}: refused to load: the file holds objects other than tensors and plain data, "
                f"and loading them could execute code; a minitx checkpoint never does. Details: {str(exc).splitlines()[0]}"
            ) from exc
        raise CheckpointError(f"{path}: not a readable minitx checkpoint (truncated, corrupt or another kind of file): {exc}") from exc
    except Exception as exc:  # torch raises KeyError, RuntimeError, EOFError, ... for damaged files
        raise CheckpointError(
            f"{path}: not a readable minitx checkpoint (truncated, corrupt or another kind of file): {type(exc).__name__}: {exc}"
        ) from exc
    payload = checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None
    if not isinstance(payload, dict) or "model_config" not in payload or "tokenizer" not in payload or "state_dict" not in checkpoint:
        raise CheckpointError(
            f"{path}: not a minitx checkpoint: it lacks the '{CHECKPOINT_KEY}' entry with the model config "
            "and tokenizer, or the 'state_dict' (checkpoints written by scripts/train.py have both)"
        )
    return checkpoint


class Translator:
    """Translate with a trained Transformer.

    Args:
        model: the Transformer (moved to `device`, set to eval mode).
        tokenizer: the joint sentencepiece tokenizer it was trained with.
        device: "cpu", "cuda", ...
        bf16: run the model under bfloat16 autocast (faster on CPUs with bf16 units and GPUs).
    """

    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, device: str | torch.device = "cpu", bf16: bool = False) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.bf16 = bf16
        self.languages: tuple[str | None, str | None] = (None, None)
        """(source, target) language codes the model was trained on, when the checkpoint says."""

    @classmethod
    def from_checkpoint(cls, path: str | Path, *, device: str | torch.device = "cpu", bf16: bool = False) -> Translator:
        """Build a Translator from a `.ckpt` file alone (see `load_checkpoint` for errors)."""
        checkpoint = load_checkpoint(path)
        payload = checkpoint[CHECKPOINT_KEY]
        try:
            config = TransformerConfig.from_dict(payload["model_config"])
            tokenizer = Tokenizer.from_bytes(payload["tokenizer"])
            model = Transformer(config)
        except (ValueError, TypeError, RuntimeError, AttributeError) as exc:
            raise CheckpointError(f"{path}: damaged minitx checkpoint: {type(exc).__name__}: {exc}") from exc
        state = {k[len(MODEL_PREFIX) :]: v for k, v in checkpoint["state_dict"].items() if k.startswith(MODEL_PREFIX)}
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            raise CheckpointError(f"{path}: damaged minitx checkpoint: the weights do not match the stored model config: {exc}") from exc
        translator = cls(model, tokenizer, device=device, bf16=bf16)
        data = payload.get("data") or {}
        translator.languages = (data.get("src_lang"), data.get("tgt_lang"))
        return translator

    def _autocast(self):
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if self.bf16 else nullcontext()

    def _batches(self, ids: list[list[int]], batch_size: int) -> list[list[int]]:
        """Indices of non-empty sentences, sorted by length, cut into batches."""
        order = sorted((i for i, seq in enumerate(ids) if seq), key=lambda i: len(ids[i]))
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def _src_tensor(self, ids: list[list[int]]) -> torch.Tensor:
        """(B, S) right-padded source ids with eos appended."""
        width = max(len(seq) for seq in ids) + 1
        src = torch.full((len(ids), width), self.tokenizer.pad_id, dtype=torch.long)
        for row, seq in enumerate(ids):
            src[row, : len(seq) + 1] = torch.tensor(seq + [self.tokenizer.eos_id])
        return src.to(self.device)

    @torch.inference_mode()
    def translate_n_best(
        self,
        sentences: Sequence[str],
        *,
        beam_size: int = 5,
        n_best: int = 1,
        alpha: float = 1.0,
        batch_size: int = 64,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        use_cache: bool = True,
    ) -> list[list[tuple[str, float]]]:
        """Beam search; for each sentence its `n_best` (translation, score) pairs, best first.

        An empty (or whitespace-only) sentence gets `[("", 0.0)]`.
        """
        ids = self.tokenizer.encode([s.strip() for s in sentences])
        results: list[list[tuple[str, float]]] = [[("", 0.0)] for _ in sentences]
        for batch in self._batches(ids, batch_size):
            with self._autocast():
                hyps = beam_search(
                    self.model,
                    self._src_tensor([ids[i] for i in batch]),
                    beam_size=beam_size,
                    n_best=n_best,
                    alpha=alpha,
                    max_len_a=max_len_a,
                    max_len_b=max_len_b,
                    use_cache=use_cache,
                )
            for i, sentence_hyps in zip(batch, hyps, strict=True):
                texts = self.tokenizer.decode([h.tokens for h in sentence_hyps])
                results[i] = [(text, h.score) for text, h in zip(texts, sentence_hyps, strict=True)]
        return results

    @torch.inference_mode()
    def translate(
        self,
        sentences: Sequence[str],
        *,
        beam_size: int = 1,
        alpha: float = 1.0,
        batch_size: int = 64,
        max_len_a: float = 1.5,
        max_len_b: int = 10,
        use_cache: bool = True,
    ) -> list[str]:
        """Translate sentences (batched, sorted by length internally); results in input order.

        `beam_size=1` is greedy decoding; larger values use beam search (best hypothesis).
        Empty sentences translate to "".
        """
        if beam_size > 1:
            n_best = self.translate_n_best(
                sentences, beam_size=beam_size, alpha=alpha, batch_size=batch_size, max_len_a=max_len_a, max_len_b=max_len_b, use_cache=use_cache
            )
            return [hyps[0][0] for hyps in n_best]
        ids = self.tokenizer.encode([s.strip() for s in sentences])
        results = [""] * len(sentences)
        for batch in self._batches(ids, batch_size):
            with self._autocast():
                out = greedy_decode(self.model, self._src_tensor([ids[i] for i in batch]), max_len_a=max_len_a, max_len_b=max_len_b, use_cache=use_cache)
            for i, text in zip(batch, self.tokenizer.decode(out.tolist()), strict=True):
                results[i] = text
        return results

    @torch.inference_mode()
    def attention(self, sentence: str, *, translation: str | None = None, beam_size: int = 1) -> AttentionMaps:
        """Attention maps of the model translating `sentence`.

        The sentence is translated first (greedy or beam search) or `translation` is used
        (e.g. a reference); then one teacher-forced pass over those pieces with
        `need_weights=True` collects every map. `tgt_tokens` are the decoder inputs: bos
        followed by the generated pieces exactly as decoded (not re-tokenised text).
        """
        target: str | list[int] = translation if translation is not None else self._generate_ids(sentence, beam_size)
        return teacher_forced_maps(self.model, self.tokenizer, sentence, target)

    def _generate_ids(self, sentence: str, beam_size: int) -> list[int]:
        """Generated target ids for one sentence, without eos and padding."""
        src_ids = self.tokenizer.encode([sentence.strip()])[0]
        if not src_ids:
            raise ValueError("attention maps need a non-empty source sentence")
        src = self._src_tensor([src_ids])
        with self._autocast():
            if beam_size > 1:
                ids = beam_search(self.model, src, beam_size=beam_size)[0][0].tokens
            else:
                ids = greedy_decode(self.model, src)[0].tolist()
        eos = self.tokenizer.eos_id
        return ids[: ids.index(eos)] if eos in ids else [i for i in ids if i != self.tokenizer.pad_id]


@torch.inference_mode()
def teacher_forced_maps(model: Transformer, tokenizer: Tokenizer, source: str, target: str | list[int]) -> AttentionMaps:
    """Every attention map of `model` reading `source` with `target` (text, or target ids
    without bos/eos) as decoder input.

    One sentence at a time, so no padding appears on the axes. Source pieces end with eos;
    target pieces (the decoder inputs) start with bos.

    Raises:
        ValueError: when the source is empty.
    """
    src_ids = tokenizer.encode([source.strip()])[0] + [tokenizer.eos_id]
    if len(src_ids) == 1:
        raise ValueError("attention maps need a non-empty source sentence")
    target_ids = tokenizer.encode([target.strip()])[0] if isinstance(target, str) else list(target)
    tgt_ids = [tokenizer.bos_id] + target_ids
    device = next(model.parameters()).device
    out = model(torch.tensor([src_ids], device=device), torch.tensor([tgt_ids], device=device), need_weights=True)

    def first(maps: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return tuple(m[0].float().cpu() for m in maps)  # drop the batch axis: (H, Tq, Tk)

    return AttentionMaps(
        src_tokens=tokenizer.id_to_piece(src_ids),
        tgt_tokens=tokenizer.id_to_piece(tgt_ids),
        encoder_attentions=first(out.encoder_attentions),
        decoder_attentions=first(out.decoder_attentions),
        cross_attentions=first(out.cross_attentions),
    )
