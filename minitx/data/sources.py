"""Reading parallel corpora: raw `{split}.{lang}[.gz]` directories, jsonl files, hub ids and
the corpora shipped with minitx (`builtin:toy`), into a `DatasetDict` with one
`translation` column. Invalid files (unequal line counts, bad UTF-8, missing splits) raise
errors that name the file and line.

Data sources (``source`` / ``data.source``), tried in this order:

- ``builtin:<name>``: a corpus inside the package (``builtin:toy``: minitx/data/toy);
- a pattern containing ``{split}``, e.g. ``corpus/{split}.jsonl``: jsonl files;
- an existing directory: raw parallel files ``{split}.{lang}`` or ``{split}.{lang}.gz`` (the
  Multi30k ``data/task1/raw`` layout), else ``{split}.jsonl[.gz]`` files;
- anything else shaped like a hub id (``name`` or ``owner/name``): ``datasets.load_dataset``.

jsonl records hold either a ``translation`` object (``{"translation": {"de": .., "en": ..}}``)
or flat language fields (``{"de": .., "en": ..}``).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import re
import zlib
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

import datasets

from minitx.errors import DataError, MissingFileError, SourceUnreachableError
from minitx.textio import decode_utf8

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


BUILTIN_PREFIX = "builtin:"
"""Prefix of the corpora shipped inside the package, e.g. ``builtin:toy``."""

BUILTIN_CORPORA: tuple[str, ...] = ("toy",)
"""Names of the shipped corpora (directories of minitx/data)."""


def resolve_data_source(configured: str) -> str:
    """Apply the ``MINITX_DATA_DIR`` override to a configured data source.

    ``builtin:<name>`` becomes the directory of that corpus inside the package. When
    ``MINITX_DATA_DIR`` is set (and non-empty) it replaces a configured *hub* source,
    such as the default ``bentrevett/multi30k``, so offline machines and CI train on local
    files without editing configs. A configured local path (an existing file or directory,
    a ``{split}`` pattern, or anything that cannot be a hub id such as ``/data/x`` or
    ``./x``) is explicit and wins over the variable.

    Args:
        configured: the source from the config (``data.source``).

    Returns:
        The source to load.
    """
    if configured.startswith(BUILTIN_PREFIX):  # shipped with minitx: never overridden
        return str(builtin_corpus_dir(configured.removeprefix(BUILTIN_PREFIX)))
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


def builtin_corpus_dir(name: str) -> Path:
    """Directory of a corpus shipped inside the package (``builtin:toy`` -> minitx/data/toy).

    Raises:
        ValueError: `name` is not one of `BUILTIN_CORPORA`.
    """
    if name not in BUILTIN_CORPORA:
        raise DataError(
            f"unknown builtin corpus {name!r}; minitx ships {list(BUILTIN_CORPORA)} "
            f"(use e.g. '{BUILTIN_PREFIX}toy')"
        )
    return Path(str(resources.files("minitx.data") / name))


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
        source: ``builtin:<name>``, a ``{split}`` jsonl pattern, a directory of raw
            ``{split}.{lang}[.gz]`` or ``{split}.jsonl[.gz]`` files, or a Hugging Face hub
            id (see the module docstring).
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
        raise DataError(f"src_lang and tgt_lang are both {src_lang!r}; they must differ.")
    langs = (src_lang, tgt_lang)
    if source.startswith(BUILTIN_PREFIX):
        source = str(builtin_corpus_dir(source.removeprefix(BUILTIN_PREFIX)))
    if "{split}" in source:
        return _load_jsonl(source, langs, dict(splits or MULTI30K_SPLITS))
    path = Path(source).expanduser()
    if path.is_dir():
        local_splits = dict(splits or MULTI30K_SPLITS)
        if _has_raw_files(path, local_splits, langs) or not _jsonl_files(path):
            return _load_raw_dir(path, langs, local_splits)
        return _load_jsonl(str(path / "{split}.jsonl"), langs, local_splits)
    if path.is_file():
        raise DataError(
            f"Data source {source!r} is a single file. Use a directory of {{split}}.{{lang}}[.gz] "
            f"files, or a pattern such as '{path.parent / '{split}.jsonl'}' for jsonl splits."
        )
    if not is_hub_id(source):
        raise MissingFileError(
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
        raise MissingFileError(
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
            raise DataError(
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
        raise DataError(f"{path}: cannot read the file ({exc}).") from exc
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
            raise MissingFileError(
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
            raise DataError(f"{path}: line {number} is not valid JSON ({exc.msg}).") from None
        pair = record.get("translation", record) if isinstance(record, dict) else None
        if not isinstance(pair, dict) or any(lang not in pair for lang in langs):
            fields = sorted(pair) if isinstance(pair, dict) else type(record).__name__
            raise DataError(
                f"{path}: line {number} has no {list(langs)} fields (found {fields}). Expected "
                f'{{"translation": {{"{langs[0]}": ..., "{langs[1]}": ...}}}} or flat '
                f'{{"{langs[0]}": ..., "{langs[1]}": ...}}.'
            )
        values = [pair[lang] for lang in langs]
        if not all(v is None or isinstance(v, str) for v in values):
            raise DataError(
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
        error = SourceUnreachableError if isinstance(exc, ConnectionError) else MissingFileError
        raise error(
            f"Could not load the Hugging Face hub dataset {source!r} "
            f"({type(exc).__name__}: {exc}); no local directory {source!r} exists either. "
            f"To use local files, set {DATA_DIR_ENV} or data.source to a directory of "
            "{split}.{lang}[.gz] files (e.g. train.de, train.en, val.de, val.en, "
            "test_2016_flickr.de, test_2016_flickr.en, as in the multi30k/dataset repository's "
            "data/task1/raw)."
        ) from exc
    if not isinstance(loaded, datasets.DatasetDict):
        raise DataError(f"Hub dataset {source!r} did not load as a DatasetDict of splits.")
    result = {}
    for split, name in splits.items():
        if name not in loaded:
            raise DataError(
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
            raise DataError(
                f"Hub dataset {source!r} split {name!r} has no language(s) {absent}; "
                f"its columns are {table.column_names}. Pick languages it has, or set "
                f"{DATA_DIR_ENV} or data.source to a directory of {{split}}.{{lang}}[.gz] files "
                "(Multi30k's French and Czech: the multi30k/dataset repository's data/task1/raw)."
            )
        data = table.select_columns(list(columns.values())).with_format("arrow")[:]
        src, tgt = (data.column(columns[lang]).to_pylist() for lang in langs)
        result[split] = _make_split(src, tgt, langs)
    logger.info(
        "Loaded %s from the hub dataset %s.", {k: len(v) for k, v in result.items()}, source
    )
    return datasets.DatasetDict(result)
