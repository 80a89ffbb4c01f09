"""`Translator`: a trained checkpoint -> translations and attention maps (the inference API).

It loads through `minitx.release.load` and decodes through `minitx.decoding.generate`, as
the commands, the demo and the experiments do; sources are framed by `minitx.vocab`, as in
training, and alignments and maps come from `minitx.teacher_forcing`'s one pass.
"""

from __future__ import annotations

import copy
import logging
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import torch

from minitx import hard_attention, release
from minitx.alignment import Alignment, AlignmentConfig, align, combine_cross_attention
from minitx.attribution import (
    DEFAULT_IG_STEPS,
    METHODS,
    Attributions,
    check_methods,
    teacher_forced_attributions,
)
from minitx.decoding import (
    DEFAULT_BATCH_SIZE,
    MAX_DECODER_ROWS,
    DecodingConfig,
    Hypothesis,
    generate,
)
from minitx.errors import ConfigError, check_whole_number, is_whole_number
from minitx.hard_attention import (
    check_attention_mode,
    check_attention_scope,
    check_attention_seed,
)
from minitx.maps import AttentionMaps, teacher_forced_maps
from minitx.model import Transformer
from minitx.release import Release
from minitx.teacher_forcing import frame_pairs, length_batches, teacher_forced
from minitx.textio import quote_characters, quote_lines, sentence_list
from minitx.tokenizer import Tokenizer
from minitx.vocab import EOS_ID, PAD_ID, UNK_ID, UNK_PIECE, frame_source, pad

logger = logging.getLogger(__name__)

Progress = Callable[[int], None]
"""Called with the number of sentences just finished (empty ones count too, first); over one
call of `Translator.translate` the numbers add up to the number of sentences."""


def _check_batching(batch_size: object, progress: object) -> None:
    """Refuse a bad `batch_size` or `progress` before any sentence is read: they failed only
    after the encoding's warnings, or (`progress`) once the first batch was decoded.

    Raises:
        ConfigError: `batch_size` is not a whole number >= 1.
        TypeError: `progress` is neither None nor callable.
    """
    check_whole_number("batch_size", batch_size, 1)
    if progress is not None and not callable(progress):
        raise TypeError(
            f"progress must be a function called with the sentences done, or None; got {progress!r}"
        )


def encode_sources(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    max_positions: int,
    first_line: int = 1,
    *,
    lines: Sequence[int] | None = None,
    use: str = "translated",
) -> list[list[int]]:
    """Source ids per sentence (no eos), as a model with `max_positions` positions reads them.

    A sentence longer than the model's positions is cut to fit (the rest is not `use`d, e.g.
    translated), counted and logged with its line number (`first_line` is the number of the
    first sentence, the next ones following it; or `lines` gives each sentence's, e.g. the
    file lines of a corpus's usable pairs); so is a sentence with characters the vocabulary
    lacks (read as ``<unk>``). The `Translator` and the CTranslate2 export read their sources
    this way, and `Translator.align` both sides of its pairs.

    Raises:
        TypeError: when `sentences` is one string (its characters would be the sentences), or
            holds something other than strings.
        ConfigError: `first_line` is not a whole number >= 1.
        ValueError: both `first_line` and `lines`, or a number of `lines` other than the
            sentences'.
    """
    check_whole_number("first_line", first_line, 1)  # a line number, as the warnings print it
    texts = [s.strip() for s in sentence_list(sentences)]
    if lines is None:
        lines = range(first_line, first_line + len(texts))
    elif first_line != 1:  # one of them would be left out without a word
        raise ValueError("give first_line or lines, not both")
    elif len(lines) != len(texts):
        raise ValueError(f"{len(lines)} line numbers for {len(texts)} sentences")
    ids = tokenizer.encode(texts)
    limit = max_positions - 1  # eos takes one source position
    too_long = [i for i, seq in enumerate(ids) if len(seq) > limit]
    if too_long:
        logger.warning(
            "%d of %d sentences have more than %d pieces, the model's limit "
            "(max_positions - 1): %s their first %d pieces only (%s)",
            len(too_long),
            len(ids),
            limit,
            use,
            limit,
            quote_lines([lines[i] for i in too_long]),
        )
        for i in too_long:
            ids[i] = ids[i][:limit]
    unknown = [i for i, seq in enumerate(ids) if UNK_ID in seq]
    if unknown:
        lacking = tokenizer.unknown_characters("".join(texts[i] for i in unknown))  # each once
        logger.warning(
            "%d of %d sentences hold characters the model's vocabulary lacks, read as %s: %s (%s)",
            len(unknown),
            len(ids),
            UNK_PIECE,
            quote_characters(lacking),
            quote_lines([lines[i] for i in unknown]),
        )
    return ids


DEVICE_TYPES = ("cpu", "cuda", "mps")
"""The device types minitx runs on (torch knows more, such as meta, which holds no values)."""


def usable_device(device: str | torch.device) -> torch.device:
    """`device` as a `torch.device`, checked: a type minitx runs on (`DEVICE_TYPES`) that this
    machine has (torch's own errors come later and deeper: an AssertionError for CUDA in a
    CPU build, failures at the first tensor on "meta").

    Raises:
        ConfigError: saying what is wrong and what to choose.
    """
    runs_on = f"minitx runs on {', '.join(DEVICE_TYPES)} (e.g. cuda:1)"
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):  # torch's message lists its internal types too
        raise ConfigError(f"not a device torch knows; {runs_on}") from None
    if device.type not in DEVICE_TYPES:
        raise ConfigError(f"{runs_on}, not {device.type}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("CUDA is not available on this machine")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise ConfigError(
            f"this machine has {torch.cuda.device_count()} CUDA device(s), numbered from 0"
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("MPS is not available on this machine")
    return device


def _alignment_config(alignment: AlignmentConfig | None) -> AlignmentConfig:
    """An `alignment` argument: None is `AlignmentConfig()`; a dict is a TypeError saying so
    (it was an AttributeError inside)."""
    if alignment is None:
        return AlignmentConfig()
    if not isinstance(alignment, AlignmentConfig):
        raise TypeError(
            f"alignment must be an AlignmentConfig or None, not {type(alignment).__name__}; "
            "e.g. alignment=AlignmentConfig(layer=0)"
        )
    return alignment


def _without_specials(tokens: Sequence[int]) -> list[int]:
    """A hypothesis' ids without eos and padding: the pieces exactly as decoded."""
    return [t for t in tokens if t not in (EOS_ID, PAD_ID)]


class Translator:
    """Translate with a trained Transformer.

    Args:
        model: the Transformer (moved to `device`, set to eval mode).
        tokenizer: the joint sentencepiece tokenizer it was trained with.
        bf16: run the model under bfloat16 autocast, and decode with a copy of it in bfloat16
            (faster on CPUs with bf16 units and GPUs; the copy takes half the model's memory,
            and its residual stream is bf16 too); `model` keeps its fp32 weights.
        train_config: the resolved training config (YAML text), when known; `save_pretrained`
            passes it on.
        attention_mode: one of `minitx.hard_attention.ATTENTION_MODES`, for translations,
            alignments and attention maps (which then show the one-hot rows used).
        attention_scope: where a hard mode applies, one of
            `minitx.hard_attention.HARD_ATTENTION_SCOPES`.
        attention_seed: seed of "hard-sample": each call of a translating method starts its
            draws afresh from it, so the same call gives the same output.

    Raises:
        TypeError: `model` is not a minitx `Transformer`.
        ConfigError: `bf16` is not a bool, `device` cannot be used, or an attention setting
            is unknown.
    """

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        *,
        device: str | torch.device = "cpu",
        bf16: bool = False,
        languages: tuple[str | None, str | None] = (None, None),
        train_config: str | None = None,
        attention_mode: str = "soft",
        attention_scope: str = "cross",
        attention_seed: int = 0,
    ) -> None:
        if not isinstance(model, Transformer):  # else torch's AttributeError from `.to`
            raise TypeError(
                f"model must be a minitx Transformer, got {type(model).__name__}; to load a "
                "checkpoint or a release, use Translator.from_pretrained(path)"
            )
        if not isinstance(bf16, bool):  # a string such as "no" is truthy: it turned bf16 on
            raise ConfigError(f"bf16 must be True or False, got {bf16!r}")
        try:
            self.device = usable_device(device)
        except ConfigError as exc:
            raise ConfigError(f"device {device!r}: {exc}") from None
        self.model = model.to(self.device).eval()
        self.tokenizer = tokenizer
        self.bf16 = bf16
        self._bf16_copy: tuple[Transformer, Transformer] | None = None  # (of, copy): `_decoder`
        self.languages = languages
        """(source, target) language codes the model was trained on, when the checkpoint says."""
        self.train_config = train_config
        self.evaluation: dict[str, Any] | None = None  # a release's scores (from_pretrained)
        self.set_attention(attention_mode, scope=attention_scope, seed=attention_seed)

    def set_attention(self, mode: str = "soft", *, scope: str = "cross", seed: int = 0) -> None:
        """Use attention mode `mode` in the attentions of `scope` from now on (see the
        constructor's `attention_mode`, `attention_scope` and `attention_seed`): a
        `ConfigError` for an unknown mode or scope comes here, before any translation."""
        check_attention_mode(mode)
        check_attention_scope(scope)
        check_attention_seed(seed)
        self.attention_mode, self.attention_scope, self.attention_seed = mode, scope, seed

    def _attention_context(self, model: Transformer | None = None) -> AbstractContextManager:
        """`model` (default `self.model`) with this Translator's attention mode, for one
        translating call."""
        model = self.model if model is None else model
        return hard_attention.attention_mode(
            model, self.attention_mode, scope=self.attention_scope, seed=self.attention_seed
        )

    def _decoder(self) -> Transformer:
        """The model that decodes: `model` itself, or with `bf16` a copy of it in bf16, since
        autocast alone casts every weight at every decoding step (docs/results.md: 1.06-1.12x
        the beam search's speed, 1.3-1.4x greedy's). The copy is built once per `model`; its
        weights are refreshed from `model` at every call (about 5 ms), so they are never stale.
        """
        if not self.bf16:
            return self.model
        if self._bf16_copy is None or self._bf16_copy[0] is not self.model:
            self._bf16_copy = (self.model, copy.deepcopy(self.model).to(torch.bfloat16))
        decoder = self._bf16_copy[1]
        decoder.load_state_dict(self.model.state_dict())  # casts into the bf16 tensors
        return decoder

    @classmethod
    def from_pretrained(
        cls,
        source: str | Path,
        *,
        revision: str | None = None,
        device: str | torch.device = "cpu",
        bf16: bool = False,
    ) -> Translator:
        """Build a Translator from a `.ckpt` file, a release directory or a hub repo id
        ("owner/name") at `revision`, through `minitx.release.load`: a local path wins; a repo
        id is fetched with `huggingface_hub.snapshot_download` (its cache serves later calls
        offline). `device` and `bf16` are the constructor's.

        Raises:
            MissingFileError: no such local path, and not a repo id (a `FileNotFoundError`);
                or `source` is empty.
            CheckpointError: damaged files, or the download failed (the message says how to
                use a local directory instead).
        """
        loaded = release.load(source, revision=revision)
        translator = cls(
            loaded.model,
            loaded.tokenizer,
            device=device,
            bf16=bf16,
            languages=loaded.languages,
            train_config=loaded.train_config,
        )
        translator.evaluation = loaded.evaluation  # a release's scores: save_pretrained keeps them
        return translator

    def save_pretrained(
        self, directory: str | Path, *, evaluation: dict[str, Any] | None = None
    ) -> list[Path]:
        """Write a release directory (weights, config, tokenizer, model card); see
        `minitx.release.save_pretrained`. Returns the written files."""
        loaded = Release(
            self.model, self.tokenizer, self.languages, self.train_config, self.evaluation
        )
        return release.save_pretrained(loaded, directory, evaluation=evaluation)

    def push_to_hub(
        self,
        repo_id: str,
        *,
        token: str | None = None,
        private: bool = False,
        evaluation: dict[str, Any] | None = None,
    ) -> str:
        """Write a release directory to a temporary place and upload it to the hub model repo
        `repo_id` (created when absent) with `huggingface_hub.HfApi`. Returns the commit URL."""
        with tempfile.TemporaryDirectory(prefix="minitx-release-") as tmp:
            self.save_pretrained(tmp, evaluation=evaluation)
            return release.push_to_hub(tmp, repo_id, token=token, private=private)

    def _autocast(self) -> AbstractContextManager:
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return nullcontext()

    def _decode(
        self,
        ids: Sequence[Sequence[int]],
        decoding: DecodingConfig,
        batch_size: int,
        progress: Progress | None = None,
    ) -> list[list[Hypothesis] | None]:
        """Hypotheses per sentence of source ids (None for an empty one), in input order.
        `progress` hears of the empty sentences first, then of each batch once it is decoded.
        """
        results: list[list[Hypothesis] | None] = [None] * len(ids)
        # Each sentence is `width` decoder rows (beams, samples): fewer sentences at once
        # where a batch of them would pass MAX_DECODER_ROWS, whole sentences always.
        batch_size = max(1, min(batch_size, MAX_DECODER_ROWS // decoding.width))
        batches = length_batches(ids, batch_size)
        report = progress or (lambda done: None)
        empty = len(ids) - sum(len(batch) for batch in batches)
        if empty:
            report(empty)
        model = self._decoder()
        with self._attention_context(model):
            for batch in batches:
                with self._autocast():
                    src = pad([frame_source(ids[i]) for i in batch], device=self.device)  # (B, S)
                    hyps = generate(model, src, decoding)
                for i, sentence_hyps in zip(batch, hyps, strict=True):
                    results[i] = sentence_hyps
                report(len(batch))
        return results

    def _alignments(
        self,
        pairs: list[tuple[list[int], list[int]]],
        config: AlignmentConfig,
        batch_size: int,
    ) -> list[Alignment]:
        """Alignment of each (source ids, target ids) pair (no eos on either side) from a
        batched teacher-forced pass: row t of the cross-attention predicts target piece t."""
        config.check(self.model.config.n_decoder_layers, self.model.config.n_heads)
        out: list[Alignment] = [[] for _ in pairs]
        aligned = [src if tgt else [] for src, tgt in pairs]  # an empty side: no alignment
        for batch in length_batches(aligned, batch_size):
            src, tgt_in, _ = frame_pairs([pairs[i] for i in batch], self.device)  # (B, S), (B, T)
            with self._autocast(), self._attention_context():
                forced = teacher_forced(self.model, src, tgt_in, weights="decoder")
            weights = combine_cross_attention(forced.cross_attentions, config).cpu()  # (B, T, S)
            for row, i in enumerate(batch):
                src_ids, tgt_ids = pairs[i]
                out[i] = align(
                    weights[row],
                    self.tokenizer.id_to_piece(src_ids),
                    self.tokenizer.id_to_piece(tgt_ids),
                    config.unit,
                )
        return out

    def _texts(self, results: list[list[Hypothesis] | None]) -> list[list[tuple[str, float]]]:
        """(translation, score) of each hypothesis of each sentence; `[("", 0.0)]` for an
        empty sentence."""
        out: list[list[tuple[str, float]]] = []
        for hyps in results:
            if hyps is None:
                out.append([("", 0.0)])
            else:
                texts = self.tokenizer.decode([h.tokens for h in hyps])
                out.append([(text, h.score) for text, h in zip(texts, hyps, strict=True)])
        return out

    @torch.inference_mode()
    def translate_n_best(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        first_line: int = 1,
        lines: Sequence[int] | None = None,
        progress: Progress | None = None,
        **changes: Any,
    ) -> list[list[tuple[str, float]]]:
        """For each sentence its `n_best` (translation, score) pairs, best first.

        Args:
            decoding: decoding settings (default `DecodingConfig()`).
            batch_size: sentences per batch (sorted by length internally); fewer where their
                beams or samples would pass `MAX_DECODER_ROWS` decoder rows.
            first_line: the line number of the first sentence, for warnings.
            lines: or the line number of each sentence (a corpus's usable pairs).
            progress: called with the number of sentences finished, after each batch.
            **changes: `DecodingConfig` fields to override, e.g. `beam_size=5, n_best=3`,
                or `strategy="sample", n_best=4, top_p=0.9, seed=1` for four samples. A
                `beam_size` without a `strategy` also picks the strategy, greedy for 1 and
                beam search above, whatever `decoding`'s (`DecodingConfig.with_changes`).

        An empty (or whitespace-only) sentence gets `[("", 0.0)]`.
        """
        config = DecodingConfig.from_arguments(decoding, **changes)
        _check_batching(batch_size, progress)
        positions = self.model.config.max_positions
        ids = encode_sources(self.tokenizer, sentences, positions, first_line, lines=lines)
        return self._texts(self._decode(ids, config, batch_size, progress))

    @torch.inference_mode()
    def translate(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        first_line: int = 1,
        lines: Sequence[int] | None = None,
        progress: Progress | None = None,
        **changes: Any,
    ) -> list[str]:
        """Translate sentences; results in input order, "" for an empty sentence. The arguments
        are `translate_n_best`'s; e.g. `beam_size=1` for greedy, `strategy="sample",
        temperature=0.7, seed=3` for one sample (the default `DecodingConfig()`: beam search).
        Each result is the best of the sentence's `n_best` hypotheses: with sampling and
        `n_best=4`, the best-scoring of 4 samples; with beam search, the best beam at any n_best.
        """
        results = self.translate_n_best(
            sentences,
            decoding,
            batch_size=batch_size,
            first_line=first_line,
            lines=lines,
            progress=progress,
            **changes,
        )
        return [hyps[0][0] for hyps in results]

    @torch.inference_mode()
    def translate_ids(
        self,
        ids: Sequence[Sequence[int]],
        decoding: DecodingConfig | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        **changes: Any,
    ) -> list[list[int]]:
        """Translate sources given as ids: the best translation of each (of `n_best`, as in
        `translate`), as the target piece ids exactly as decoded (not re-tokenised; no bos,
        eos or padding), in input order; [] for an empty source. What `translate` decodes,
        before the tokenizer makes text. `ids` are source piece ids without eos, each at most
        `max_positions - 1` long (as `encode_sources` gives them); the other arguments are
        `translate_n_best`'s.
        """
        config = DecodingConfig.from_arguments(decoding, **changes)
        _check_batching(batch_size, None)
        self._check_source_ids(ids)
        results = self._decode(ids, config, batch_size)
        return [[] if hyps is None else _without_specials(hyps[0].tokens) for hyps in results]

    def _check_source_ids(self, ids: Sequence[Sequence[int]]) -> None:
        """Refuse ids the model cannot read, naming the first (the embedding's IndexError
        and the positions' "raise max_positions" said neither which nor what to do)."""
        vocab, limit = self.model.config.src_vocab_size, self.model.config.max_positions - 1
        for i, seq in enumerate(ids):
            # A tensor's or an array's rows would fail later as ambiguous truth values.
            if not isinstance(seq, (list, tuple)) or not all(is_whole_number(t) for t in seq):
                raise TypeError(
                    f"source {i} is {seq!r}: give a list of sources, each a list of piece ids "
                    "(ints): ids.tolist() for a 2-D tensor or array, [ids] for one source; for "
                    "text, use translate()"
                )
            bad = next((t for t in seq if not 0 <= t < vocab), None)
            if bad is not None:
                raise ValueError(
                    f"source {i}: id {bad} is not a piece of this model's vocabulary (0 to "
                    f"{vocab - 1}); encode text with translator.tokenizer, or use translate()"
                )
            if len(seq) > limit:
                raise ValueError(
                    f"source {i} has {len(seq)} ids; this model reads at most {limit} "
                    "(max_positions - 1): cut it, or use translate(), which cuts and says so"
                )

    @torch.inference_mode()
    def translate_with_alignment(
        self,
        sentences: Sequence[str],
        decoding: DecodingConfig | None = None,
        *,
        alignment: AlignmentConfig | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        first_line: int = 1,
        progress: Progress | None = None,
        **changes: Any,
    ) -> list[list[tuple[str, float, Alignment]]]:
        """`translate_n_best` (the same arguments) plus each translation's alignment to its
        source.

        Args:
            alignment: which cross-attention aligns and what the indices count (default
                `AlignmentConfig()`: mean of the decoder layers and heads, words); see
                `minitx.alignment`.

        Returns:
            For each sentence its `n_best` (translation, score, alignment) triples, best
            first; an alignment is a list of (source index, target index) pairs, one per
            target word (or piece), over the whitespace words of the (normalised) source and
            of the translation. An empty sentence gets `[("", 0.0, [])]`.
        """
        config = DecodingConfig.from_arguments(decoding, **changes)
        _check_batching(batch_size, progress)
        ids = encode_sources(self.tokenizer, sentences, self.model.config.max_positions, first_line)
        results = self._decode(ids, config, batch_size, progress)
        pairs = [
            (ids[i], _without_specials(h.tokens))
            for i, hyps in enumerate(results)
            for h in hyps or []
        ]
        alignments = iter(self._alignments(pairs, _alignment_config(alignment), batch_size))
        return [
            [(text, score, [] if hyps is None else next(alignments)) for text, score in texts]
            for hyps, texts in zip(results, self._texts(results), strict=True)
        ]

    @torch.inference_mode()
    def align(
        self,
        sources: Sequence[str],
        translations: Sequence[str],
        *,
        alignment: AlignmentConfig | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> list[Alignment]:
        """Align given translations (e.g. references) to their sources: the model reads each
        pair teacher-forced and its cross-attention aligns them (see `translate_with_alignment`).

        Both sides are cut to the model's positions (counted and logged, as in `translate`);
        an empty side gives no pairs.
        """
        _check_batching(batch_size, None)
        # Both lists checked and counted before encoding, whose warnings would come first.
        sources, translations = sentence_list(sources), sentence_list(translations, "translation")
        if len(sources) != len(translations):
            raise ValueError(f"align: {len(sources)} sources but {len(translations)} translations")
        positions = self.model.config.max_positions
        src_ids = encode_sources(self.tokenizer, sources, positions, use="aligned")
        tgt_ids = encode_sources(self.tokenizer, translations, positions, use="aligned")
        pairs = list(zip(src_ids, tgt_ids, strict=True))
        return self._alignments(pairs, _alignment_config(alignment), batch_size)

    def _target(
        self,
        sentence: str,
        translation: str | None,
        decoding: DecodingConfig | None,
        changes: dict[str, Any],
    ) -> tuple[str | list[int], bool]:
        """What `attention` and `attributions` read: `translation`, or else the pieces of the
        model's own translation of `sentence` exactly as decoded (no eos); and whether the
        last position predicts the eos that ends it, False when decoding stopped at its
        length cap. An empty `sentence` translates to no pieces; `minitx.teacher_forcing.
        pair_ids` then refuses it."""
        for name, value in (("sentence", sentence), ("translation", translation)):
            if not isinstance(value, str) and not (name == "translation" and value is None):
                raise TypeError(
                    f"{name} is {type(value).__name__} {value!r}: attention and attributions "
                    "read one sentence (and its translation), each a string"
                )
        if translation is not None:
            return translation, True
        config = DecodingConfig.from_arguments(decoding, **changes)
        ids = encode_sources(self.tokenizer, [sentence], self.model.config.max_positions)
        with torch.inference_mode():
            (hypotheses,) = self._decode(ids, config, batch_size=1)
        if hypotheses is None:  # an empty sentence
            return [], True
        best = hypotheses[0].tokens
        return _without_specials(best), EOS_ID in best

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
        Under a hard `attention_mode` both passes use it and the maps of its scope show
        one-hot rows: for "hard-argmax" the rows that produced the translation; for
        "hard-sample" the teacher-forced pass draws afresh (from the same seed), so its rows
        need not be the draws that produced it.
        """
        target, ends = self._target(sentence, translation, decoding, changes)
        with self._attention_context():
            maps = teacher_forced_maps(self.model, self.tokenizer, sentence, target)
        # cut at the length cap: the last position predicted no eos, and its row would say so
        return maps if ends else maps.without_last_position()

    def attributions(
        self,
        sentence: str,
        *,
        translation: str | None = None,
        methods: Sequence[str] = METHODS,
        ig_steps: int = DEFAULT_IG_STEPS,
        decoding: DecodingConfig | None = None,
        **changes: Any,
    ) -> Attributions:
        """Gradient attributions of the model translating `sentence`: how much each source
        piece contributes to each predicted piece (see `minitx.attribution`).

        The sentence is translated first (with `decoding`, default `DecodingConfig()`) or
        `translation` is used, exactly as `attention` does, so that the same call of both
        gives matrices on the same axes: `Attributions.scores[method]` (T, S) beside
        `AttentionMaps.cross_attentions` (H, T, S). The gradients are taken in fp32 (no
        bf16 autocast) with this Translator's attention mode.

        Args:
            methods: a subset of `minitx.attribution.METHODS` ("saliency", "ixg", "ig").
            ig_steps: quadrature nodes of integrated gradients.

        Raises:
            ValueError: an empty sentence.
            ConfigError: an unknown method.
        """
        methods = check_methods(methods)
        target, ends = self._target(sentence, translation, decoding, changes)
        with self._attention_context():
            found = teacher_forced_attributions(
                self.model, self.tokenizer, sentence, target, methods, ig_steps=ig_steps
            )
        return found if ends else found.without_last_position()  # as `attention`
