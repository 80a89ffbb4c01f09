"""Subword tokenizer: sentencepiece training, caching and loading, with fixed special ids.

One joint vocabulary serves source and target (the caller trains on both sides). The special
ids are fixed for the whole package: ``PAD_ID=0``, ``UNK_ID=1``, ``BOS_ID=2``, ``EOS_ID=3``.

A trained model is just bytes (``Tokenizer.model_bytes``), so checkpoints can carry it and
``Tokenizer(model_bytes)`` restores it. Pickling goes through the same bytes, which keeps the
tokenizer usable in ``datasets.Dataset.map`` (which hashes the function) and DataLoader
workers.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import time
import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal, get_args

import sentencepiece as spm

from minitx.errors import ConfigError, DataError, MissingFileError, VocabularyTooLargeError
from minitx.textio import write_bytes_atomic
from minitx.vocab import BOS_ID, BOS_PIECE, EOS_ID, EOS_PIECE, PAD_ID, PAD_PIECE, UNK_ID, UNK_PIECE

logger = logging.getLogger(__name__)


ModelType = Literal["unigram", "bpe"]
_MODEL_TYPES: tuple[str, ...] = get_args(ModelType)


class Tokenizer:
    """A sentencepiece model with the package's special ids (pad=0, unk=1, bos=2, eos=3).

    Build one with :meth:`train`, :meth:`load` or from model bytes. ``encode`` and
    ``decode`` work on batches and never add bos/eos themselves: the collate function adds
    them, and ``decode`` strips them (and everything after the first eos).

    Args:
        model_bytes: a serialized sentencepiece model (``ModelProto``).

    Raises:
        ValueError: when the bytes are not a sentencepiece model, or the model's special ids
            are not pad=0, unk=1, bos=2, eos=3.
    """

    def __init__(self, model_bytes: bytes) -> None:
        self._model_bytes = bytes(model_bytes)
        self._sp = _load_processor(self._model_bytes)

    # ------------------------------------------------------------------ construction
    @classmethod
    def train(
        cls,
        sentences: Iterable[str],
        *,
        vocab_size: int = 8000,
        model_type: ModelType = "unigram",
        cache_dir: str | os.PathLike[str] | None = None,
        cache_key: str | None = None,
        vocab_setting: str = "data.vocab_size",
    ) -> Tokenizer:
        """Train a sentencepiece model in memory (or load it from the cache).

        The vocabulary size is a hard limit: when the corpus is too small for ``vocab_size``
        pieces, a ``ValueError`` says the largest size sentencepiece can reach. (We do not use
        sentencepiece's ``hard_vocab_limit=False``, because then the real vocabulary size
        would silently differ from the configured one that the model is built with.)

        Args:
            sentences: training sentences; pass source and target sentences together for a
                joint vocabulary.
            vocab_size: number of pieces, special pieces included.
            cache_dir: when given, the model is stored as ``cache_dir/spm-{key}.model``, with
                its size and sha256 in ``spm-{key}.json``, and a later call with the same
                settings and data loads it instead of training. A cached model that does not
                match its record (a damaged file) is trained again, with a one-line warning.
            cache_key: a string identifying the training data (for example a corpus hash).
                When given, a cached model is found without reading `sentences` (which may
                then be a lazy iterable that does the reading); when ``None`` the sentences
                themselves are hashed.
            vocab_setting: what the errors call the setting that gives ``vocab_size`` (a
                config key, or a script's flag), so that they name what the user can change.

        Raises:
            ValueError: on bad arguments, no sentences, or a vocabulary size the data cannot
                support.
        """
        if model_type not in _MODEL_TYPES:
            raise ConfigError(f"model_type must be one of {_MODEL_TYPES}, got {model_type!r}.")
        if vocab_size < 5:
            raise ConfigError(
                f"{vocab_setting} must be at least 5 (4 special pieces + 1), got {vocab_size}."
            )
        settings: dict[str, Any] = {
            "vocab_size": vocab_size,
            "model_type": model_type,
            "sentencepiece": spm.__version__,
            "cache_format": _CACHE_FORMAT,
        }
        path = None
        if cache_dir is not None:
            if cache_key is None:  # the sentences themselves are the key
                sentences = _usable(sentences)
            path = Path(cache_dir) / _cache_name(settings, sentences, cache_key)
            cached = _read_cached(path)
            if cached is not None:  # found without reading a lazy `sentences` when keyed
                return cached
        sentences = _usable(sentences)

        start = time.perf_counter()
        model_bytes = _train_bytes(
            sentences, vocab_size=vocab_size, model_type=model_type, vocab_setting=vocab_setting
        )
        tokenizer = cls(model_bytes)
        logger.info(
            "Trained a %s tokenizer with %d pieces on %d sentences in %.1f s.",
            model_type,
            tokenizer.vocab_size,
            len(sentences),
            time.perf_counter() - start,
        )
        if path is not None:
            record = json.dumps(_record(model_bytes)).encode()
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(path.with_suffix(".json"), record)  # first: a model file
            write_bytes_atomic(path, model_bytes)  # without its record would read as damaged
            logger.info("Cached the tokenizer at %s.", path)
        return tokenizer

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Load a tokenizer from a ``.model`` file written by sentencepiece or :meth:`save`.

        Raises:
            FileNotFoundError: when ``path`` does not exist.
            ValueError: when the file is not a usable sentencepiece model.
        """
        path = Path(path)
        if not path.is_file():
            raise MissingFileError(f"tokenizer model not found: {path}")
        try:
            return cls(path.read_bytes())
        except ValueError as exc:
            raise DataError(f"{path}: {exc}") from exc

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model to ``path`` (loadable with :meth:`load` or plain sentencepiece)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, self._model_bytes)

    # ------------------------------------------------------------------ properties
    @property
    def model_bytes(self) -> bytes:
        """The serialized sentencepiece model (what checkpoints store)."""
        return self._model_bytes

    @property
    def vocab_size(self) -> int:
        """Number of pieces, special pieces included."""
        return self._sp.get_piece_size()

    # ------------------------------------------------------------------ encode / decode
    def encode(self, texts: list[str]) -> list[list[int]]:
        """One list of piece ids per sentence (no bos/eos added).

        Raises:
            TypeError: `texts` is one string, or holds something sentencepiece cannot read.
            ValueError: a sentence holds a lone surrogate, which UTF-8 cannot encode.
        """
        if isinstance(texts, str):
            raise TypeError("Tokenizer.encode takes a list of sentences; wrap one sentence in [].")
        texts = list(texts)
        try:
            return self._sp.encode(texts, out_type=int)
        except TypeError:  # sentencepiece's "List elements must be str or bytes", of strings
            for i, text in enumerate(texts):
                if not isinstance(text, str):
                    continue
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise ValueError(
                        f"sentence {i} holds {text[exc.start]!r} at character {exc.start}, a "
                        "lone surrogate, which is no character (bytes decoded with errors="
                        "'surrogateescape', or half of a UTF-16 pair); decode the bytes with "
                        "their real encoding, or with errors='replace'"
                    ) from None
            raise

    def unknown_characters(self, text: str) -> list[str]:
        """The characters of `text` the vocabulary lacks (encoded as ``<unk>``), each once, in
        order of first appearance: what a translation of `text` cannot see."""
        # One character at a time: a run of unknown characters is one <unk> piece, and
        # encoding applies the model's normalisation (a full-width letter may be known).
        # Spaces are asked too: the normalisation knows most, not all (U+0085 is unknown).
        # Composed first, as the normalisation (NFKC) composes them: a combining mark alone
        # may be unknown where the letter it makes with the one before it is known. NFC, not
        # NFKC: a character NFKC spells out ('㍿' as four) is named as it was typed.
        composed = unicodedata.normalize("NFC", text)
        return [ch for ch in dict.fromkeys(composed) if UNK_ID in self._sp.encode(ch, out_type=int)]

    def decode(self, ids: list[list[int]]) -> list[str]:
        """One sentence per id sequence (lists of ints, or the rows of a 2-D tensor of
        generated ids), each cut at its first eos; pad and bos ids are dropped."""
        sequences = [[int(i) for i in seq] for seq in ids]  # a tensor's rows too
        # sentencepiece drops the control pieces (pad, bos, eos) itself; the cut at the first
        # eos (generation pads or runs on after it) is ours.
        cut = [seq[: seq.index(EOS_ID)] if EOS_ID in seq else seq for seq in sequences]
        return self._sp.decode(cut)

    def id_to_piece(self, ids: list[int]) -> list[str]:
        """Map ids to their pieces (special ids map to ``<pad>``, ``<unk>``, ``<s>``, ``</s>``).

        Raises:
            ValueError: when an id is outside ``[0, vocab_size)``.
        """
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"ids {bad[:5]} are outside the vocabulary [0, {self.vocab_size}).")
        return [self._sp.id_to_piece(i) for i in ids]

    # ------------------------------------------------------------------ pickling / misc
    def __reduce__(self) -> tuple[type[Tokenizer], tuple[bytes]]:
        return Tokenizer, (self._model_bytes,)  # the processor is rebuilt from the bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tokenizer) and other._model_bytes == self._model_bytes

    def __hash__(self) -> int:
        return hash(self._model_bytes)

    def __repr__(self) -> str:
        return f"Tokenizer(vocab_size={self.vocab_size})"


# ---------------------------------------------------------------------- helpers
SPM_MAX_SENTENCE_BYTES = 4192
"""sentencepiece's trainer skips longer sentences: its `max_sentence_length` default, left as it
is (set explicitly, it would be written into every tokenizer model and change its bytes)."""


def _train_bytes(
    sentences: list[str], *, vocab_size: int, model_type: str, vocab_setting: str
) -> bytes:
    """Run the sentencepiece trainer in memory and return the model bytes."""
    writer = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=writer,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=1.0,  # every character seen in training gets a piece
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_piece=PAD_PIECE,
            unk_piece=UNK_PIECE,
            bos_piece=BOS_PIECE,
            eos_piece=EOS_PIECE,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,  # sentencepiece's own INFO chatter goes to stderr otherwise
        )
    except RuntimeError as exc:
        raise _training_error(exc, vocab_size, len(sentences), vocab_setting) from exc
    return writer.getvalue()


def _training_error(
    exc: RuntimeError, vocab_size: int, n_sentences: int, vocab_setting: str
) -> ValueError:
    """Turn a sentencepiece trainer failure into an actionable ``ValueError`` that names
    `vocab_setting` where the size is to change."""
    message = str(exc)
    too_high = re.search(r"Vocabulary size too high \((\d+)\).*<= (\d+)", message)
    if too_high:
        return VocabularyTooLargeError(
            f"{vocab_setting}={vocab_size} is too large for this corpus ({n_sentences} "
            f"sentences): sentencepiece can build at most {too_high.group(2)} pieces. Set "
            f"{vocab_setting} to {too_high.group(2)} or less.",
            sentences=n_sentences,
        )
    too_low = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", message)
    if too_low:
        return ConfigError(
            f"{vocab_setting}={vocab_size} is too small: the corpus's characters and the "
            f"special pieces need {too_low.group(2)}. Set {vocab_setting} to "
            f"{too_low.group(2)} or more."
        )
    if "sentences_.empty()" in message:  # `_usable` left out the over-long: normalized away
        return DataError(
            f"sentencepiece found no sentence to learn from among the {n_sentences} it was "
            "given: each is empty once normalized (only characters it drops, such as "
            "zero-width spaces)"
        )
    return DataError(f"sentencepiece training failed: {message}")


def _load_processor(model_bytes: bytes) -> spm.SentencePieceProcessor:
    """Load model bytes into a processor and check the special ids."""
    try:
        sp = spm.SentencePieceProcessor(model_proto=model_bytes)
    except (RuntimeError, TypeError) as exc:
        raise DataError(
            f"not a sentencepiece model ({len(model_bytes)} bytes could not be parsed)."
        ) from exc
    expected = {"pad": PAD_ID, "unk": UNK_ID, "bos": BOS_ID, "eos": EOS_ID}
    found = {"pad": sp.pad_id(), "unk": sp.unk_id(), "bos": sp.bos_id(), "eos": sp.eos_id()}
    if found != expected:
        raise DataError(
            f"the sentencepiece model has special ids {found}; minitx needs {expected}. "
            "Train it with Tokenizer.train (or spm_train --pad_id=0 --unk_id=1 --bos_id=2 "
            "--eos_id=3)."
        )
    return sp


_CACHE_FORMAT = 2
"""Bump when cached tokenizer files change layout (2: with a checksum record beside them)."""


def _record(model_bytes: bytes) -> dict[str, Any]:
    """The checksum record of a cached model, ``spm-{key}.json`` beside ``spm-{key}.model``."""
    return {"bytes": len(model_bytes), "sha256": hashlib.sha256(model_bytes).hexdigest()}


def _read_cached(path: Path) -> Tokenizer | None:
    """The cached tokenizer at `path` when it matches its checksum record; None when there is
    none, or (with a one-line warning) when the file is damaged: the caller trains again."""
    if not path.is_file():
        return None
    try:
        model_bytes = path.read_bytes()
        record = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))
        if record != _record(model_bytes):
            raise DataError(f"{len(model_bytes)} bytes that do not match its checksum record")
        tokenizer = Tokenizer(model_bytes)
    except (OSError, ValueError) as exc:  # json and DataError are ValueErrors
        logger.warning("%s: a damaged cached tokenizer (%s); training it again.", path, exc)
        return None
    logger.info("Loaded cached tokenizer %s (no training needed).", path)
    return tokenizer


def _usable(sentences: Iterable[str]) -> list[str]:
    """The sentences with more than white space, up to sentencepiece's length limit (a list:
    iterated once more to train). The trainer would skip a longer one without a word, and
    the counts said would include it: it is left out here, counted and logged.

    Raises:
        DataError: there are none.
    """
    usable = [s for s in sentences if s and not s.isspace()]
    fits = [s for s in usable if len(s.encode("utf-8", "surrogatepass")) <= SPM_MAX_SENTENCE_BYTES]
    if len(fits) < len(usable):
        logger.warning(
            "%d of %d tokenizer training sentences are longer than %s bytes, sentencepiece's "
            "limit: the tokenizer learns from the other %d (a character only those hold is "
            "read as <unk>)",
            len(usable) - len(fits),
            len(usable),
            f"{SPM_MAX_SENTENCE_BYTES:,}",
            len(fits),
        )
    if not fits:
        raise DataError(
            "Tokenizer.train got no sentences to train on: "
            + (
                f"all {len(usable)} are longer than sentencepiece's limit of "
                f"{SPM_MAX_SENTENCE_BYTES:,} bytes. Is the training corpus one sentence per "
                "line, with \\n line ends (not a single long line, nor \\r alone)?"
                if usable
                else "none holds more than white space."
            )
        )
    return fits


def _cache_name(settings: dict[str, Any], sentences: Iterable[str], cache_key: str | None) -> str:
    """``spm-{key}.model``: a short hash of the training settings and the data (the caller's
    ``cache_key``, else the sentences themselves)."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode())
    if cache_key is not None:
        digest.update(b"key:" + cache_key.encode())
    else:
        for text in sentences:  # each with its length: order and boundaries matter
            encoded = text.encode("utf-8", "surrogatepass")
            digest.update(len(encoded).to_bytes(8, "little"))
            digest.update(encoded)
    return f"spm-{digest.hexdigest()[:16]}.model"
