"""`Translator`: a trained checkpoint -> translations and attention maps (the inference API).

`Translator.from_checkpoint(path)` needs nothing but the `.ckpt` (see `minitx.checkpoint`).
Every translation goes through `minitx.decoding.decode` with a `DecodingConfig`; the default
config (beam search, `DEFAULT_BEAM_SIZE`) is the one every minitx command uses.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from minitx.checkpoint import (
    CHECKPOINT_KEY,
    MODEL_PREFIX,
    CheckpointError,
    languages_of,
    load_checkpoint,
    model_from_checkpoint,
)
from minitx.decoding import DecodingConfig, Hypothesis, decode
from minitx.maps import AttentionMaps, teacher_forced_maps
from minitx.model import Transformer
from minitx.textio import quote_lines
from minitx.tokenizer import Tokenizer
from minitx.vocab import EOS_ID, PAD_ID

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with the number of sentences just finished (empty ones count too, first); over one
call of `Translator.translate` the numbers add up to the number of sentences."""

__all__ = [
    "CHECKPOINT_KEY",
    "MODEL_PREFIX",
    "CheckpointError",
    "Progress",
    "Translator",
    "load_checkpoint",
    "resolve_decoding",
    "teacher_forced_maps",
]


def resolve_decoding(decoding: DecodingConfig | None = None, **changes: Any) -> DecodingConfig:
    """`decoding` (default: `DecodingConfig()`) with `changes` applied.

    A `beam_size` change without a `strategy` picks greedy for 1 and beam search otherwise,
    so `beam_size=1` means greedy everywhere, as `--beam 1` does on the command line.
    """
    config = decoding or DecodingConfig()
    if "beam_size" in changes and "strategy" not in changes:
        changes["strategy"] = "greedy" if changes["beam_size"] == 1 else "beam"
    return config.replace(**changes) if changes else config


class Translator:
    """Translate with a trained Transformer.

    Args:
        model: the Transformer (moved to `device`, set to eval mode).
        tokenizer: the joint sentencepiece tokenizer it was trained with.
        device: "cpu", "cuda", ...
        bf16: run the model under bfloat16 autocast (faster on CPUs with bf16 units and GPUs).
        languages: (source, target) language codes, when known.
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        *,
        device: str | torch.device = "cpu",
        bf16: bool = False,
        languages: tuple[str | None, str | None] = (None, None),
    ) -> None:
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.bf16 = bf16
        self.languages = languages
        """(source, target) language codes the model was trained on, when the checkpoint says."""

    @classmethod
    def from_checkpoint(
        cls, path: str | Path, *, device: str | torch.device = "cpu", bf16: bool = False
    ) -> Translator:
        """Build a Translator from a `.ckpt` file alone.

        Raises:
            FileNotFoundError: no such file.
            CheckpointError: not a usable minitx checkpoint (see `minitx.checkpoint`).
        """
        checkpoint = load_checkpoint(path)
        model, tokenizer = model_from_checkpoint(checkpoint, path)
        languages = languages_of(checkpoint)
        return cls(model, tokenizer, device=device, bf16=bf16, languages=languages)

    def _autocast(self) -> AbstractContextManager:
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _batches(self, ids: list[list[int]], batch_size: int) -> list[list[int]]:
        """Indices of non-empty sentences, sorted by length, cut into batches."""
        order = sorted((i for i, seq in enumerate(ids) if seq), key=lambda i: len(ids[i]))
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    def _src_tensor(self, ids: list[list[int]]) -> torch.Tensor:
        """(B, S) right-padded source ids with eos appended."""
        width = max(len(seq) for seq in ids) + 1
        src = torch.full((len(ids), width), PAD_ID, dtype=torch.long)
        for row, seq in enumerate(ids):
            src[row, : len(seq) + 1] = torch.tensor(seq + [EOS_ID])
        return src.to(self.device)

    def _hypotheses(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig,
        batch_size: int,
        progress: Progress | None = None,
    ) -> list[list[Hypothesis] | None]:
        """Hypotheses per sentence (None for an empty sentence), in input order.

        A sentence longer than the model's positions is cut to fit (the rest is not
        translated), counted and logged with its line numbers; every other line is unaffected.
        `progress` hears of the empty sentences first, then of each batch once it is decoded.
        """
        ids = self.tokenizer.encode([s.strip() for s in sentences])
        limit = self.model.config.max_positions - 1  # eos takes one source position
        too_long = [i for i, seq in enumerate(ids) if len(seq) > limit]
        if too_long:
            logger.warning(
                "%d of %d sentences have more than %d pieces, the model's limit "
                "(max_positions - 1): translated their first %d pieces only (lines %s)",
                len(too_long),
                len(ids),
                limit,
                limit,
                quote_lines([i + 1 for i in too_long]),
            )
            for i in too_long:
                ids[i] = ids[i][:limit]
        results: list[list[Hypothesis] | None] = [None] * len(sentences)
        batches = self._batches(ids, batch_size)
        report = progress or (lambda done: None)
        empty = len(ids) - sum(len(batch) for batch in batches)
        if empty:
            report(empty)
        for batch in batches:
            with self._autocast():
                hyps = decode(self.model, self._src_tensor([ids[i] for i in batch]), decoding)
            for i, sentence_hyps in zip(batch, hyps, strict=True):
                results[i] = sentence_hyps
            report(len(batch))
        return results

    @torch.inference_mode()
    def translate_n_best(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig | None = None,
        *,
        batch_size: int = 64,
        progress: Progress | None = None,
        **changes: Any,
    ) -> list[list[tuple[str, float]]]:
        """For each sentence its `n_best` (translation, score) pairs, best first.

        Args:
            sentences: source sentences.
            decoding: decoding settings (default `DecodingConfig()`).
            batch_size: sentences per batch (sorted by length internally).
            progress: called with the number of sentences finished, after each batch.
            **changes: `DecodingConfig` fields to override, e.g. `beam_size=5, n_best=3`.

        An empty (or whitespace-only) sentence gets `[("", 0.0)]`.
        """
        config = resolve_decoding(decoding, **changes)
        out: list[list[tuple[str, float]]] = []
        for hyps in self._hypotheses(sentences, config, batch_size, progress):
            if hyps is None:
                out.append([("", 0.0)])
                continue
            texts = self.tokenizer.decode([h.tokens for h in hyps])
            out.append([(text, h.score) for text, h in zip(texts, hyps, strict=True)])
        return out

    @torch.inference_mode()
    def translate(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig | None = None,
        *,
        batch_size: int = 64,
        progress: Progress | None = None,
        **changes: Any,
    ) -> list[str]:
        """Translate sentences; results in input order, "" for an empty sentence.

        Args:
            sentences: source sentences.
            decoding: decoding settings (default `DecodingConfig()`: beam search).
            batch_size: sentences per batch (sorted by length internally).
            progress: called with the number of sentences finished, after each batch.
            **changes: `DecodingConfig` fields to override, e.g. `beam_size=1` for greedy.
        """
        config = resolve_decoding(decoding, **changes).replace(n_best=1)
        results = self.translate_n_best(sentences, config, batch_size=batch_size, progress=progress)
        return [hyps[0][0] for hyps in results]

    @torch.inference_mode()
    def attention(
        self,
        sentence: str,
        *,
        translation: str | None = None,
        decoding: DecodingConfig | None = None,
        **changes: Any,
    ) -> AttentionMaps:
        """Attention maps of the model translating `sentence`.

        The sentence is translated first (with `decoding`, default `DecodingConfig()`) or
        `translation` is used (e.g. a reference); then one teacher-forced pass over those
        pieces with `need_weights=True` collects every map. `tgt_tokens` are the decoder
        inputs: bos followed by the generated pieces exactly as decoded (not re-tokenised).
        """
        if translation is not None:
            return teacher_forced_maps(self.model, self.tokenizer, sentence, translation)
        config = resolve_decoding(decoding, **changes).replace(n_best=1)
        if not sentence.strip():
            raise ValueError("attention maps need a non-empty source sentence")
        hyps = self._hypotheses([sentence], config, batch_size=1)[0]
        ids = hyps[0].tokens if hyps else []
        ids = [i for i in ids if i not in (EOS_ID, PAD_ID)]
        return teacher_forced_maps(self.model, self.tokenizer, sentence, ids)
