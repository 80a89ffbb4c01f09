"""Parallel corpora, cleaning, tokenization and length-bucketed batching for translation.

The pipeline, each step a plain function that tests can call on its own:

1. :func:`load_parallel_corpus` reads a corpus into a ``DatasetDict`` (splits ``train``,
   ``validation``, ``test``) with one ``translation`` column ``{src_lang: ..., tgt_lang: ...}``.
2. :func:`clean_pairs` drops pairs with an empty side (every split), counting and logging them.
3. :func:`tokenize_corpus` adds ``src_ids``/``tgt_ids`` (no bos/eos) and their lengths,
   cached on disk; :func:`filter_long_pairs` drops over-long *training* pairs (counted).
4. :class:`TokenBucketBatchSampler` groups examples of equal padded length into batches of at
   most ``max_tokens`` padded tokens; :func:`collate` pads them into tensors.

:class:`TranslationDataModule` wires the steps together for Lightning.

Data sources (``source`` / ``data.source``), tried in this order:

- a pattern containing ``{split}``, e.g. ``corpus/{split}.jsonl``: jsonl files;
- an existing directory: raw parallel files ``{split}.{lang}`` or ``{split}.{lang}.gz`` (the
  Multi30k ``data/task1/raw`` layout), else ``{split}.jsonl[.gz]`` files;
- anything else shaped like a hub id (``name`` or ``owner/name``): ``datasets.load_dataset``.

jsonl records hold either a ``translation`` object (``{"translation": {"de": .., "en": ..}}``)
or flat language fields (``{"de": .., "en": ..}``).

Distributed training: the batch sampler shards itself (each rank gets its own batches), so
Lightning must not inject a ``DistributedSampler``: use ``Trainer(use_distributed_sampler=False)``.
Lightning raises a ``TypeError`` saying so if you forget.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import os
import re
import time
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from minitx.textio import decode_utf8
from minitx.tokenizer import BOS_ID, EOS_ID, PAD_ID, ModelType, Tokenizer, hash_texts

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "MINITX_DATA_DIR"
"""Environment variable naming a local corpus directory that replaces hub sources."""

MULTI30K_SPLITS: Mapping[str, str] = {
    "train": "train",
    "validation": "val",
    "test": "test_2016_flickr",
}
"""Split name -> file stem for local corpora (the Multi30k raw layout)."""

HUB_SPLITS: Mapping[str, str] = {"train": "train", "validation": "validation", "test": "test"}
"""Split name -> hub split for hub datasets."""

_MAX_EXAMPLES = 5  # line numbers quoted in skip warnings
_TOKENIZED_FORMAT = "1"  # bump when the tokenized columns change, to invalidate caches

Counts = dict[str, dict[str, int]]


# =============================================================================== sources
def resolve_data_source(configured: str) -> str:
    """Apply the ``MINITX_DATA_DIR`` override to a configured data source.

    When ``MINITX_DATA_DIR`` is set (and non-empty) it replaces a configured *hub* source,
    such as the default ``bentrevett/multi30k``, so offline machines and CI train on local
    files without editing configs. A configured local path (an existing file or directory,
    a ``{split}`` pattern, or anything that cannot be a hub id such as ``/data/x`` or
    ``./x``) is explicit and wins over the variable.

    Args:
        configured: the source from the config (``data.source``).

    Returns:
        The source to load.
    """
    override = os.environ.get(DATA_DIR_ENV, "").strip()
    if not override:
        return configured
    if not is_hub_id(configured) or Path(configured).expanduser().exists():
        logger.info(
            "%s is set but the configured source %r is local; using it.", DATA_DIR_ENV, configured
        )
        return configured
    logger.info(
        "%s=%s overrides the configured data source %r.", DATA_DIR_ENV, override, configured
    )
    return override


def is_hub_id(source: str) -> bool:
    """Whether `source` has the form of a Hugging Face hub id: ``name`` or ``owner/name``."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", source) is not None


def load_parallel_corpus(
    source: str,
    src_lang: str,
    tgt_lang: str,
    *,
    splits: Mapping[str, str] | None = None,
) -> datasets.DatasetDict:
    """Load a parallel corpus as a ``DatasetDict`` with one ``translation`` column.

    Args:
        source: a ``{split}`` jsonl pattern, a directory of raw ``{split}.{lang}[.gz]`` or
            ``{split}.jsonl[.gz]`` files, or a Hugging Face hub id (see the module docstring).
        src_lang: source language code, e.g. ``"de"``.
        tgt_lang: target language code, e.g. ``"en"``.
        splits: split name -> file stem / hub split. ``None`` means :data:`MULTI30K_SPLITS`
            for local files and :data:`HUB_SPLITS` for hub datasets.

    Returns:
        A ``DatasetDict`` with the keys of ``splits``, rows in file order.

    Raises:
        ValueError: unequal line counts, invalid UTF-8 or JSON, a jsonl record or hub
            dataset without the split or language asked for.
        FileNotFoundError: a local path that does not exist, or missing ``{split}.{lang}`` /
            jsonl files (the message lists the splits, languages and files that were found).
        ConnectionError: the hub could not be reached (the message says how to use local files).
    """
    if src_lang == tgt_lang:
        raise ValueError(f"src_lang and tgt_lang are both {src_lang!r}; they must differ.")
    langs = (src_lang, tgt_lang)
    if "{split}" in source:
        return _load_jsonl(source, langs, dict(splits or MULTI30K_SPLITS))
    path = Path(source).expanduser()
    if path.is_dir():
        local_splits = dict(splits or MULTI30K_SPLITS)
        if _has_raw_files(path, local_splits, langs) or not _jsonl_files(path):
            return _load_raw_dir(path, langs, local_splits)
        return _load_jsonl(str(path / "{split}.jsonl"), langs, local_splits)
    if path.is_file():
        raise ValueError(
            f"Data source {source!r} is a single file. Use a directory of {{split}}.{{lang}}[.gz] "
            f"files, or a pattern such as '{path.parent / '{split}.jsonl'}' for jsonl splits."
        )
    if not is_hub_id(source):
        raise FileNotFoundError(
            f"Data source directory not found: {path.resolve()} (from {source!r}). Point "
            f"data.source or {DATA_DIR_ENV} at a directory of {{split}}.{{lang}}[.gz] files."
        )
    return _load_hub(source, langs, dict(splits or HUB_SPLITS))


def _make_split(
    src: Sequence[str | None], tgt: Sequence[str | None], langs: tuple[str, str]
) -> datasets.Dataset:
    """Rows of (src, tgt) text as a ``Dataset`` with a ``translation`` column."""
    src_lang, tgt_lang = langs
    rows = [{src_lang: s or "", tgt_lang: t or ""} for s, t in zip(src, tgt, strict=True)]
    features = datasets.Features({"translation": datasets.Translation(languages=list(langs))})
    return datasets.Dataset.from_dict({"translation": rows}, features=features)


# ------------------------------------------------------------------------------ raw files
_RAW_NAME = re.compile(r"(?P<stem>.+)\.(?P<lang>[A-Za-z][A-Za-z_-]*?)(?P<gz>\.gz)?")


def _raw_file(directory: Path, stem: str, lang: str) -> Path | None:
    for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def _has_raw_files(directory: Path, splits: Mapping[str, str], langs: Sequence[str]) -> bool:
    return any(_raw_file(directory, stem, lang) for stem in splits.values() for lang in langs)


def _jsonl_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))


def _describe_dir(directory: Path) -> str:
    """What a corpus directory holds: raw splits, languages and file names (for errors)."""
    names = sorted(p.name for p in directory.iterdir() if p.is_file())
    found_splits: set[str] = set()
    found_langs: set[str] = set()
    for name in names:
        match = _RAW_NAME.fullmatch(name)
        if match and match["lang"] not in ("jsonl", "json", "txt", "md"):
            found_splits.add(match["stem"])
            found_langs.add(match["lang"])
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} files)" if len(names) > 20 else "")
    return f"found splits {sorted(found_splits)}, languages {sorted(found_langs)}; files: [{shown}]"


def _load_raw_dir(
    directory: Path, langs: tuple[str, str], splits: Mapping[str, str]
) -> datasets.DatasetDict:
    """Read ``{stem}.{lang}[.gz]`` line-aligned files for every split."""
    missing = [
        f"{stem}.{lang}[.gz]"
        for stem in splits.values()
        for lang in langs
        if _raw_file(directory, stem, lang) is None
    ]
    if missing:
        raise FileNotFoundError(
            f"Missing corpus files in {directory}: {', '.join(missing)} (wanted splits "
            f"{dict(splits)} for languages {list(langs)}); {_describe_dir(directory)}. Set "
            "data.splits / data.src_lang / data.tgt_lang to match the files."
        )
    result = {}
    for split, stem in splits.items():
        src_path, tgt_path = (_raw_file(directory, stem, lang) for lang in langs)
        assert src_path is not None and tgt_path is not None
        src, tgt = _read_lines(src_path), _read_lines(tgt_path)
        if len(src) != len(tgt):
            raise ValueError(
                f"Split {split!r}: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}; "
                "parallel files must be line-aligned (one sentence pair per line)."
            )
        result[split] = _make_split(src, tgt, langs)
    logger.info("Loaded %s from %s.", {k: len(v) for k, v in result.items()}, directory)
    return datasets.DatasetDict(result)


def _read_text(path: Path) -> str:
    """Read a (possibly gzipped) UTF-8 file; errors name the file and the 1-based line."""
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    except (OSError, EOFError, zlib.error) as exc:
        raise ValueError(f"{path}: cannot read the file ({exc}).") from exc
    return decode_utf8(raw, str(path))


def _read_lines(path: Path) -> list[str]:
    """Lines of a text file, split on ``\\n`` only (so counts match ``wc -l``), ``\\r`` removed."""
    lines = _read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


# ---------------------------------------------------------------------------------- jsonl
def _load_jsonl(
    pattern: str, langs: tuple[str, str], splits: Mapping[str, str]
) -> datasets.DatasetDict:
    """Read ``pattern.format(split=stem)`` (or its ``.gz``) for every split."""
    result = {}
    for split, stem in splits.items():
        path = Path(pattern.format(split=stem)).expanduser()
        if not path.is_file() and Path(f"{path}.gz").is_file():
            path = Path(f"{path}.gz")
        if not path.is_file():
            parent = path.parent
            found = [p.name for p in _jsonl_files(parent)] if parent.is_dir() else []
            raise FileNotFoundError(
                f"Missing jsonl file for split {split!r}: {path}; found in {parent}: {found}. "
                "Set data.splits to map train/validation/test to the file stems."
            )
        src, tgt = _read_jsonl_pairs(path, langs)
        result[split] = _make_split(src, tgt, langs)
    logger.info("Loaded %s from %s.", {k: len(v) for k, v in result.items()}, pattern)
    return datasets.DatasetDict(result)


def _read_jsonl_pairs(path: Path, langs: tuple[str, str]) -> tuple[list[str], list[str]]:
    src: list[str] = []
    tgt: list[str] = []
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: line {number} is not valid JSON ({exc.msg}).") from None
        pair = record.get("translation", record) if isinstance(record, dict) else None
        if not isinstance(pair, dict) or any(lang not in pair for lang in langs):
            fields = sorted(pair) if isinstance(pair, dict) else type(record).__name__
            raise ValueError(
                f"{path}: line {number} has no {list(langs)} fields (found {fields}). Expected "
                f'{{"translation": {{"{langs[0]}": ..., "{langs[1]}": ...}}}} or flat '
                f'{{"{langs[0]}": ..., "{langs[1]}": ...}}.'
            )
        values = [pair[lang] for lang in langs]
        if not all(v is None or isinstance(v, str) for v in values):
            raise ValueError(
                f"{path}: line {number}: {list(langs)} values must be strings, got {values!r}."
            )
        src.append(values[0])
        tgt.append(values[1])
    return src, tgt


# ------------------------------------------------------------------------------------ hub
def _load_hub(
    source: str, langs: tuple[str, str], splits: Mapping[str, str]
) -> datasets.DatasetDict:
    """Load a hub dataset and convert it to the ``translation`` layout."""
    try:
        loaded = datasets.load_dataset(source)
    except OSError as exc:  # ConnectionError, DatasetNotFoundError (a FileNotFoundError), ...
        error = ConnectionError if isinstance(exc, ConnectionError) else FileNotFoundError
        raise error(
            f"Could not load the Hugging Face hub dataset {source!r} "
            f"({type(exc).__name__}: {exc}); no local directory {source!r} exists either. "
            f"To use local files, set {DATA_DIR_ENV} or data.source to a directory of "
            "{split}.{lang}[.gz] files (e.g. train.de, train.en, val.de, val.en, "
            "test_2016_flickr.de, test_2016_flickr.en, as in the multi30k/dataset repository's "
            "data/task1/raw)."
        ) from exc
    if not isinstance(loaded, datasets.DatasetDict):
        raise ValueError(f"Hub dataset {source!r} did not load as a DatasetDict of splits.")
    result = {}
    for split, name in splits.items():
        if name not in loaded:
            raise ValueError(
                f"Hub dataset {source!r} has no split {name!r} (found {sorted(loaded)}); set "
                "data.splits to map train/validation/test to its split names."
            )
        table = loaded[name]
        if "translation" in table.column_names:
            table = table.select_columns(["translation"]).flatten()
            columns = {lang: f"translation.{lang}" for lang in langs}
        else:
            columns = {lang: lang for lang in langs}
        absent = [lang for lang, col in columns.items() if col not in table.column_names]
        if absent:
            raise ValueError(
                f"Hub dataset {source!r} split {name!r} has no language(s) {absent}; "
                f"its columns are {table.column_names}."
            )
        data = table.select_columns(list(columns.values())).with_format("arrow")[:]
        src, tgt = (data.column(columns[lang]).to_pylist() for lang in langs)
        result[split] = _make_split(src, tgt, langs)
    logger.info(
        "Loaded %s from the hub dataset %s.", {k: len(v) for k, v in result.items()}, source
    )
    return datasets.DatasetDict(result)


# ============================================================================== cleaning
def side_texts(dataset: datasets.Dataset, lang: str) -> list[str]:
    """The ``lang`` side of a dataset's ``translation`` column, in row order (read via Arrow)."""
    flat = dataset.select_columns(["translation"]).flatten().with_format("arrow")[:]
    return flat.column(f"translation.{lang}").to_pylist()


def _column(dataset: datasets.Dataset, name: str) -> np.ndarray:
    """A numeric column as a numpy array (honours ``select`` index mappings)."""
    return dataset.select_columns([name]).with_format("arrow")[:].column(name).to_numpy()


def _log_skips(split: str, reason: str, lines: Sequence[int], total: int) -> None:
    if len(lines) == 0:
        return
    shown = ", ".join(str(n) for n in lines[:_MAX_EXAMPLES])
    more = ", ..." if len(lines) > _MAX_EXAMPLES else ""
    logger.warning(
        "%s: skipped %d of %d pairs %s (lines %s%s).", split, len(lines), total, reason, shown, more
    )


def clean_pairs(
    corpus: datasets.DatasetDict,
    src_lang: str,
    tgt_lang: str,
    *,
    max_chars: int | None = None,
    length_filter_splits: Collection[str] = ("train",),
) -> tuple[datasets.DatasetDict, Counts]:
    """Drop unusable sentence pairs, counting and logging every skip.

    A ``line`` column (1-based row number, i.e. the file line for raw files) is added so that
    later steps can still name the lines they drop.

    Args:
        corpus: output of :func:`load_parallel_corpus`.
        src_lang: source language key.
        tgt_lang: target language key.
        max_chars: drop pairs with a side longer than this many characters, only in
            ``length_filter_splits``; ``None`` disables the check.
        length_filter_splits: splits where over-long pairs may be dropped. Evaluation splits
            keep every non-empty pair, so BLEU is computed over the full test set.

    Returns:
        The cleaned corpus, and per split ``{"empty": n, "too_long": m}`` skip counts.
    """
    cleaned = {}
    counts: Counts = {}
    for split, dataset in corpus.items():
        src, tgt = side_texts(dataset, src_lang), side_texts(dataset, tgt_lang)
        empty = [
            i
            for i, (s, t) in enumerate(zip(src, tgt, strict=True))
            if not s.strip() or not t.strip()
        ]
        too_long: list[int] = []
        if max_chars is not None and split in length_filter_splits:
            empty_set = set(empty)
            too_long = [
                i
                for i, (s, t) in enumerate(zip(src, tgt, strict=True))
                if i not in empty_set and max(len(s), len(t)) > max_chars
            ]
        _log_skips(split, "with an empty side", [i + 1 for i in empty], len(dataset))
        _log_skips(
            split, f"longer than max_chars={max_chars}", [i + 1 for i in too_long], len(dataset)
        )
        dataset = dataset.add_column("line", np.arange(1, len(dataset) + 1, dtype=np.int64))
        if empty or too_long:
            dropped = set(empty) | set(too_long)
            dataset = dataset.select([i for i in range(len(dataset)) if i not in dropped])
        cleaned[split] = dataset
        counts[split] = {"empty": len(empty), "too_long": len(too_long)}
    return datasets.DatasetDict(cleaned), counts


# ========================================================================== tokenization
class _TokenizeBatch:
    """``Dataset.map`` function: text pair -> src/tgt ids and lengths (picklable)."""

    def __init__(self, tokenizer: Tokenizer, src_lang: str, tgt_lang: str) -> None:
        self.tokenizer = tokenizer
        self.src_lang = src_lang
        self.tgt_lang = tgt_lang

    def __call__(self, batch: dict[str, list[Any]]) -> dict[str, list[Any]]:
        src = [pair[self.src_lang] for pair in batch["translation"]]
        tgt = [pair[self.tgt_lang] for pair in batch["translation"]]
        src_ids, tgt_ids = self.tokenizer.encode(src), self.tokenizer.encode(tgt)
        return {
            "src_text": src,
            "tgt_text": tgt,
            "src_ids": src_ids,
            "tgt_ids": tgt_ids,
            "src_len": [len(ids) for ids in src_ids],
            "tgt_len": [len(ids) for ids in tgt_ids],
        }


def tokenize_corpus(
    corpus: datasets.DatasetDict,
    tokenizer: Tokenizer,
    src_lang: str,
    tgt_lang: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> datasets.DatasetDict:
    """Tokenize every split with ``Dataset.map(batched=True)``.

    The ``translation`` column is replaced by ``src_text``, ``tgt_text``, ``src_ids``,
    ``tgt_ids`` (no bos/eos), ``src_len`` and ``tgt_len``; other columns (``line``) stay.

    Args:
        corpus: the corpus, usually after :func:`clean_pairs`.
        tokenizer: the (joint) tokenizer.
        src_lang: source language key.
        tgt_lang: target language key.
        cache_dir: when given, each split is stored as an Arrow file named by a hash of the
            tokenizer and the split's contents, and reloaded on the next call.

    Returns:
        The tokenized corpus.
    """
    function = _TokenizeBatch(tokenizer, src_lang, tgt_lang)
    model_hash = hashlib.sha256(tokenizer.model_bytes).hexdigest()
    result = {}
    for split, dataset in corpus.items():
        cache_file = None
        key = None
        if cache_dir is not None:
            parts = [
                _TOKENIZED_FORMAT,
                model_hash,
                src_lang,
                tgt_lang,
                split,
                str(dataset.column_names),
            ]
            parts += [hash_texts(side_texts(dataset, lang)) for lang in (src_lang, tgt_lang)]
            if "line" in dataset.column_names:
                parts.append(hashlib.sha256(_column(dataset, "line").tobytes()).hexdigest())
            key = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            cache_file = str(Path(cache_dir) / f"tokenized-{key}-{split}.arrow")
            if os.path.exists(cache_file):
                logger.info("%s: loading tokenized data from %s.", split, cache_file)
        result[split] = dataset.map(
            function,
            batched=True,
            batch_size=1000,
            remove_columns=["translation"],
            cache_file_name=cache_file,
            new_fingerprint=key,
            desc=f"Tokenizing {split}",
        )
    return datasets.DatasetDict(result)


def filter_long_pairs(
    tokenized: datasets.DatasetDict,
    max_len: int,
    *,
    splits: Collection[str] = ("train",),
) -> tuple[datasets.DatasetDict, dict[str, int]]:
    """Drop pairs whose model-side length exceeds ``max_len``, in ``splits`` only.

    A pair fits when ``src_len + 1 <= max_len`` and ``tgt_len + 1 <= max_len``: the lengths
    the model sees once eos (source, target output) or bos (target input) is added. Other
    splits keep every pair; over-long ones there are only counted in an INFO log line.

    Args:
        tokenized: output of :func:`tokenize_corpus`.
        max_len: maximum sequence length in tokens, bos/eos included.
        splits: splits to filter (by default only ``train``).

    Returns:
        The filtered corpus and, per split in ``splits``, the number of pairs dropped.
    """
    if max_len < 2:
        raise ValueError(f"max_len must be at least 2 (one token plus bos/eos), got {max_len}.")
    result = {}
    dropped: dict[str, int] = {}
    for split, dataset in tokenized.items():
        longest = example_lengths(dataset)
        too_long = np.flatnonzero(longest > max_len)
        if split not in splits:
            if len(too_long):
                logger.info(
                    "%s: %d pairs are longer than max_len=%d; evaluation splits keep them.",
                    split,
                    len(too_long),
                    max_len,
                )
            result[split] = dataset
            continue
        lines = (
            _column(dataset, "line")[too_long] if "line" in dataset.column_names else too_long + 1
        )
        _log_skips(split, f"longer than max_len={max_len} tokens", lines.tolist(), len(dataset))
        if len(too_long):
            dataset = dataset.select(np.flatnonzero(longest <= max_len))
        result[split] = dataset
        dropped[split] = len(too_long)
    return datasets.DatasetDict(result), dropped


def example_lengths(dataset: datasets.Dataset) -> np.ndarray:
    """Per-example batching length: ``max(src_len + 1, tgt_len + 1)`` (eos / bos included)."""
    if len(dataset) == 0:
        return np.zeros(0, dtype=np.int64)
    return np.maximum(_column(dataset, "src_len"), _column(dataset, "tgt_len")) + 1


# ============================================================================== batching
def round_up(length: int, multiple: int) -> int:
    """``length`` rounded up to a multiple of ``multiple``."""
    return -(-length // multiple) * multiple


class _EpochHook:
    """Forwards ``set_epoch`` to a batch sampler.

    Lightning's fit loop calls ``set_epoch`` on ``dataloader.sampler`` and on
    ``dataloader.batch_sampler.sampler``, never on the batch sampler itself (Lightning 2.6,
    ``lightning.fabric.utilities.data._set_sampler_epoch``). The batch sampler exposes this
    object as its ``sampler`` attribute so that the loop reaches it.
    """

    def __init__(self, owner: TokenBucketBatchSampler) -> None:
        self._owner = owner

    def set_epoch(self, epoch: int) -> None:
        self._owner.set_epoch(epoch)


class TokenBucketBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples with at most ``max_tokens`` padded tokens each.

    Every length is rounded up to a multiple of ``pad_multiple``; examples with the same
    rounded length form a bucket and are cut into batches of ``max_tokens // length``
    examples, so ``batch_size * padded_length <= max_tokens``. Batch shapes therefore come
    from a small fixed set (one full size and one remainder per bucket), which matters on CPU
    bf16 where oneDNN builds a kernel per new shape. An example longer than ``max_tokens``
    gets a batch of its own; nothing is dropped.

    With ``shuffle=True`` the examples within each bucket and the order of the batches are
    shuffled from ``(seed, epoch)``: call :meth:`set_epoch` every epoch (Lightning does it,
    through the ``sampler`` attribute). With ``shuffle=False`` the order is fixed: buckets
    from short to long, file order inside a bucket.

    Distributed: with ``num_replicas > 1`` each rank yields a disjoint share of the batches,
    the same number on every rank (when the batch count does not divide evenly, the largest
    batches are halved until it does; see :func:`_even_out`). Construct the sampler after the process group is
    initialised (Lightning's ``*_dataloader`` hooks are) and train with
    ``Trainer(use_distributed_sampler=False)``.

    Args:
        lengths: per-example lengths, e.g. :func:`example_lengths`.
        max_tokens: upper bound on ``batch_size * padded_length``.
        pad_multiple: lengths are rounded up to a multiple of this.
        shuffle: shuffle within buckets and the batch order, per epoch.
        seed: base seed for shuffling (the same on every rank).
        num_replicas: number of ranks; default: the ``torch.distributed`` world size, else 1.
        rank: this rank; default: the ``torch.distributed`` rank, else 0.
    """

    def __init__(
        self,
        lengths: Sequence[int] | np.ndarray,
        *,
        max_tokens: int,
        pad_multiple: int = 8,
        shuffle: bool = False,
        seed: int = 0,
        num_replicas: int | None = None,
        rank: int | None = None,
    ) -> None:
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.ndim != 1 or len(lengths) == 0:
            raise ValueError("lengths must be a non-empty 1-D sequence of example lengths.")
        if lengths.min() < 1:
            raise ValueError(f"lengths must be >= 1, got a minimum of {lengths.min()}.")
        if max_tokens < 1 or pad_multiple < 1:
            raise ValueError(
                f"max_tokens and pad_multiple must be >= 1, got {max_tokens} and {pad_multiple}."
            )
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}.")
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if num_replicas is None:
            num_replicas = torch.distributed.get_world_size() if distributed else 1
        if rank is None:
            rank = torch.distributed.get_rank() if distributed else 0
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}.")

        self.max_tokens = max_tokens
        self.pad_multiple = pad_multiple
        self.shuffle = shuffle
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.sampler = _EpochHook(self)
        self._padded = -(-lengths // pad_multiple) * pad_multiple

        over = int((self._padded > max_tokens).sum())
        if over:
            logger.warning(
                "%d examples are longer than max_tokens=%d (padded); each gets a batch of its own.",
                over,
                max_tokens,
            )
        total = len(self._all_batches(None))
        self._num_batches = total // num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the shuffle (same value on every rank)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return self._num_batches

    def __iter__(self) -> Iterator[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch]) if self.shuffle else None
        batches = self._all_batches(rng)
        for batch in batches[self.rank :: self.num_replicas]:
            yield batch.tolist()

    def _all_batches(self, rng: np.random.Generator | None) -> list[np.ndarray]:
        """All batches of one epoch (every rank), evened out to a multiple of num_replicas."""
        batches: list[np.ndarray] = []
        for padded_length in np.unique(self._padded):
            indices = np.flatnonzero(self._padded == padded_length)
            if rng is not None:
                indices = rng.permutation(indices)
            size = max(1, self.max_tokens // int(padded_length))
            batches.extend(indices[start : start + size] for start in range(0, len(indices), size))
        batches = _even_out(batches, self.num_replicas)
        if rng is not None:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches


def _even_out(batches: list[np.ndarray], num_replicas: int) -> list[np.ndarray]:
    """Halve the largest batches until the batch count is a multiple of ``num_replicas``.

    Halving keeps every example exactly once and each batch within ``max_tokens``. Only when
    every batch holds a single example is that impossible; then the first batches are
    repeated (as ``DistributedSampler`` does) so the ranks stay in step, with a warning.
    """
    batches = list(batches)
    while len(batches) % num_replicas:
        largest = max(range(len(batches)), key=lambda i: len(batches[i]))
        if len(batches[largest]) < 2:
            extra = num_replicas - len(batches) % num_replicas
            logger.warning(
                "Cannot split %d single-example batches evenly over %d ranks; repeating %d "
                "of them this epoch.",
                len(batches),
                num_replicas,
                extra,
            )
            return batches + batches[:extra]
        half = len(batches[largest]) // 2
        batch = batches[largest]
        batches[largest : largest + 1] = [batch[:half], batch[half:]]
    return batches


def collate(examples: Sequence[Mapping[str, Any]], pad_multiple: int = 8) -> dict[str, Any]:
    """Pad a list of tokenized examples into model-ready tensors.

    Args:
        examples: rows with ``src_ids``, ``tgt_ids``, ``src_text`` and ``tgt_text``.
        pad_multiple: padded lengths are rounded up to a multiple of this.

    Returns:
        ``src`` (B, S) = src_ids + [eos]; ``tgt_in`` (B, T) = [bos] + tgt_ids;
        ``tgt_out`` (B, T) = tgt_ids + [eos]; all ``torch.long``, padded with ``PAD_ID`` (0) to
        lengths rounded up to ``pad_multiple``; plus ``src_text`` and ``tgt_text``, the raw
        strings (for BLEU).
    """
    if not examples:
        raise ValueError("collate got an empty batch.")
    src_rows = [list(ex["src_ids"]) + [EOS_ID] for ex in examples]
    tgt_in_rows = [[BOS_ID] + list(ex["tgt_ids"]) for ex in examples]
    tgt_out_rows = [list(ex["tgt_ids"]) + [EOS_ID] for ex in examples]
    src_len = round_up(max(map(len, src_rows)), pad_multiple)
    tgt_len = round_up(max(map(len, tgt_in_rows)), pad_multiple)
    return {
        "src": _pad(src_rows, src_len),  # (B, S)
        "tgt_in": _pad(tgt_in_rows, tgt_len),  # (B, T)
        "tgt_out": _pad(tgt_out_rows, tgt_len),  # (B, T)
        "src_text": [ex["src_text"] for ex in examples],
        "tgt_text": [ex["tgt_text"] for ex in examples],
    }


def _pad(rows: list[list[int]], length: int) -> torch.Tensor:
    return torch.tensor([row + [PAD_ID] * (length - len(row)) for row in rows], dtype=torch.long)


# ============================================================================ datamodule
class TranslationDataModule(L.LightningDataModule):
    """Corpus -> tokenizer -> token-bucketed batches, for Lightning (or plain loops).

    ``setup()`` loads the corpus (through :func:`resolve_data_source`), drops empty pairs
    (every split) and over-long training pairs, trains or loads the cached joint tokenizer
    and tokenizes (cached too). It works without a Trainer: ``dm.setup("fit")`` then
    ``dm.train_dataloader()``. After setup: ``dm.tokenizer``, ``dm.dataset`` (the tokenized
    ``DatasetDict``) and ``dm.skipped`` (per split ``{"empty": n, "too_long": m}``).

    Batches are dicts from :func:`collate`. Training batches are reshuffled every epoch
    (Lightning calls ``set_epoch`` through the sampler); evaluation batches come in a fixed
    order. For multi-device training pass ``Trainer(use_distributed_sampler=False)``: the
    batch sampler shards itself.

    Args:
        source: hub id, directory of ``{split}.{lang}[.gz]`` / ``{split}.jsonl`` files, or a
            ``{split}`` jsonl pattern; ``MINITX_DATA_DIR`` replaces a hub id.
        src_lang: source language code.
        tgt_lang: target language code.
        splits: split name -> file stem / hub split (None: Multi30k raw names for local
            files, train/validation/test for the hub).
        vocab_size: joint sentencepiece vocabulary size (a hard limit; too large errors).
        tokenizer_type: sentencepiece model type, ``unigram`` or ``bpe``.
        max_tokens: training batch budget, batch_size x padded length.
        max_len: longest training sequence in tokens (bos/eos included); longer training
            pairs are skipped and counted, evaluation splits keep everything.
        pad_multiple: pad lengths up to a multiple of this (keeps batch shapes few).
        num_workers: DataLoader worker processes.
        cache_dir: directory for the tokenizer and tokenized data caches (None: no cache).
        seed: shuffling seed.
        eval_max_tokens: batch budget for validation/test (None: same as max_tokens).
    """

    def __init__(
        self,
        source: str = "bentrevett/multi30k",
        src_lang: str = "de",
        tgt_lang: str = "en",
        splits: dict[str, str] | None = None,
        vocab_size: int = 8000,
        tokenizer_type: ModelType = "unigram",
        max_tokens: int = 4096,
        max_len: int = 128,
        pad_multiple: int = 8,
        num_workers: int = 0,
        cache_dir: str | None = ".cache/minitx",
        seed: int = 0,
        eval_max_tokens: int | None = None,
    ) -> None:
        super().__init__()
        if src_lang == tgt_lang:
            raise ValueError(f"src_lang and tgt_lang are both {src_lang!r}; they must differ.")
        for name, value in (("max_tokens", max_tokens), ("pad_multiple", pad_multiple)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}.")
        if eval_max_tokens is not None and eval_max_tokens < 1:
            raise ValueError(f"eval_max_tokens must be >= 1 or None, got {eval_max_tokens}.")
        if max_len < 2:
            raise ValueError(f"max_len must be >= 2, got {max_len}.")
        if num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}.")
        self.save_hyperparameters()
        self.source = source
        self.src_lang = src_lang
        self.tgt_lang = tgt_lang
        self.splits = splits
        self.vocab_size = vocab_size
        self.tokenizer_type = tokenizer_type
        self.max_tokens = max_tokens
        self.max_len = max_len
        self.pad_multiple = pad_multiple
        self.num_workers = num_workers
        self.cache_dir = cache_dir
        self.seed = seed
        self.eval_max_tokens = eval_max_tokens
        self.tokenizer: Tokenizer | None = None
        self.dataset: datasets.DatasetDict | None = None
        self.skipped: Counts = {}
        self._prepared: tuple[Tokenizer, datasets.DatasetDict, Counts] | None = None

    # -------------------------------------------------------------------------- setup
    def prepare_data(self) -> None:
        """Fill the caches (hub download, tokenizer, tokenized data); Lightning runs it once per node.

        The result is also kept for :meth:`setup` in this process; other processes build from
        the caches in their own ``setup``.
        """
        self._prepared = self._build()

    def setup(self, stage: str | None = None) -> None:
        """Load everything (from the caches when :meth:`prepare_data` ran). Idempotent."""
        if self.dataset is None:
            built, self._prepared = self._prepared or self._build(), None
            self.tokenizer, self.dataset, self.skipped = built

    def _build(self) -> tuple[Tokenizer, datasets.DatasetDict, Counts]:
        start = time.perf_counter()
        source = resolve_data_source(self.source)
        corpus = load_parallel_corpus(source, self.src_lang, self.tgt_lang, splits=self.splits)
        if "train" not in corpus:
            raise ValueError(
                f"The corpus has no 'train' split (found {sorted(corpus)}); it trains the tokenizer."
            )
        cleaned, skipped = clean_pairs(corpus, self.src_lang, self.tgt_lang)
        train = cleaned["train"]
        tokenizer = Tokenizer.train(
            side_texts(train, self.src_lang) + side_texts(train, self.tgt_lang),
            vocab_size=self.vocab_size,
            model_type=self.tokenizer_type,
            cache_dir=self.cache_dir,
        )
        tokenized = tokenize_corpus(
            cleaned, tokenizer, self.src_lang, self.tgt_lang, cache_dir=self.cache_dir
        )
        tokenized, too_long = filter_long_pairs(tokenized, self.max_len, splits=("train",))
        for split, count in too_long.items():
            skipped[split]["too_long"] += count
        logger.info(
            "Data ready in %.1f s: %s pairs (skipped: %s).",
            time.perf_counter() - start,
            {split: len(ds) for split, ds in tokenized.items()},
            skipped,
        )
        return tokenizer, tokenized, skipped

    # -------------------------------------------------------------------- dataloaders
    def train_dataloader(self) -> DataLoader:
        """Shuffled token-bucket batches of the training split."""
        loader = self._loader("train", shuffle=True, max_tokens=self.max_tokens)
        if self.trainer is not None:
            loader.batch_sampler.set_epoch(self.trainer.current_epoch)
        return loader

    def val_dataloader(self) -> DataLoader:
        """Validation batches in a fixed order (every pair, none dropped)."""
        return self._loader(
            "validation", shuffle=False, max_tokens=self.eval_max_tokens or self.max_tokens
        )

    def test_dataloader(self) -> DataLoader:
        """Test batches in a fixed order (every pair, none dropped)."""
        return self._loader(
            "test", shuffle=False, max_tokens=self.eval_max_tokens or self.max_tokens
        )

    def _loader(self, split: str, *, shuffle: bool, max_tokens: int) -> DataLoader:
        dataset = self._split(split)
        sampler = TokenBucketBatchSampler(
            example_lengths(dataset),
            max_tokens=max_tokens,
            pad_multiple=self.pad_multiple,
            shuffle=shuffle,
            seed=self.seed,
        )
        return DataLoader(
            dataset,
            batch_sampler=sampler,
            collate_fn=functools.partial(collate, pad_multiple=self.pad_multiple),
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
        )

    def _split(self, split: str) -> datasets.Dataset:
        self.setup()
        assert self.dataset is not None
        if split not in self.dataset:
            raise KeyError(
                f"No {split!r} split; this DataModule has {sorted(self.dataset)} (see data.splits)."
            )
        if len(self.dataset[split]) == 0:
            raise ValueError(
                f"The {split!r} split is empty after cleaning (skipped: {self.skipped.get(split)})."
            )
        return self.dataset[split]

    def texts(self, split: str) -> tuple[list[str], list[str]]:
        """All source sentences and references of a split, in file order.

        These are exactly the pairs the split's dataloader serves (for evaluation splits:
        every non-empty pair), so BLEU over them covers the full set.
        """
        dataset = self._split(split)
        data = dataset.select_columns(["src_text", "tgt_text"]).with_format("arrow")[:]
        return data.column("src_text").to_pylist(), data.column("tgt_text").to_pylist()
