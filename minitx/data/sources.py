"""Which corpus a data source names, and opening it as streams (`open_parallel_corpus`) or
in memory (`load_parallel_corpus`).

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

import logging
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

import datasets

from minitx.data.streams import HubStream, JsonlStream, PairStream, RawFilesStream
from minitx.errors import ConfigError, DataError, MissingFileError, SourceUnreachableError

logger = logging.getLogger(__name__)

DATA_DIR_ENV = "MINITX_DATA_DIR"
"""Environment variable naming a local corpus directory that replaces hub sources."""

SOURCE_SETTING = "data.source (minitx-evaluate: --data)"
"""How the messages name the setting that chooses the data source, in each command."""

DEFAULT_SOURCE = "bentrevett/multi30k"
"""The default data source: the Multi30k hub copy (``MINITX_DATA_DIR`` replaces it), read by
`TranslationDataModule`, minitx-evaluate and the experiments when none is given."""
DEFAULT_SOURCE_LANGUAGES = ("de", "en")
"""The languages of `DEFAULT_SOURCE` (French and Czech are in the raw files only)."""

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
    ``./x``) is explicit and wins over the variable. Replacing any source but the default is
    a warning: ``corpora/europarl`` with a typo reads as a hub id too.

    Raises:
        ConfigError: an empty source (`check_data_source`).
        DataError: an unknown ``builtin:`` corpus; ``MINITX_DATA_DIR`` naming a file.
        MissingFileError: ``MINITX_DATA_DIR`` naming a local path that does not exist.
    """
    check_data_source(configured)
    if configured.startswith(BUILTIN_PREFIX):  # shipped with minitx: never overridden
        return str(builtin_corpus_dir(configured.removeprefix(BUILTIN_PREFIX)))
    override = os.environ.get(DATA_DIR_ENV, "").strip()
    if not override:
        return configured
    local = Path(configured).expanduser()
    if not is_hub_id(configured) or local.exists() or local.is_symlink():
        logger.info(
            "%s is set but the configured source %r is local; using it.", DATA_DIR_ENV, configured
        )
        return configured
    _check_data_dir_env(override)
    if configured == DEFAULT_SOURCE:
        logger.info(
            "%s=%s overrides the default data source %r.", DATA_DIR_ENV, override, configured
        )
    else:
        logger.warning(
            "%s=%s replaces the data source %r, read as a hub dataset id (no such local path); "
            "unset %s to use the hub dataset, or give a local path that exists",
            DATA_DIR_ENV,
            override,
            configured,
            DATA_DIR_ENV,
        )
    return override


def _check_data_dir_env(value: str) -> None:
    """Refuse a ``MINITX_DATA_DIR`` that names a file or a missing path, naming the variable:
    the error for the source it replaces would not say where the path came from."""
    where = Path(value).expanduser()
    if "{split}" in value or where.is_dir() or (is_hub_id(value) and not where.exists()):
        return  # a directory, a jsonl pattern, or a hub id: the source's own checks follow
    error, what = (DataError, "is not a directory") if where.exists() else (
        MissingFileError, "names no directory that exists"
    )  # fmt: skip
    raise error(
        f"{DATA_DIR_ENV}={value} {what}; point it at a directory of {{split}}.{{lang}}[.gz] "
        f"files (such as the multi30k/dataset repository's data/task1/raw), or unset it"
    )


def check_data_source(source: str) -> None:
    """Refuse an empty or blank source, which `Path` reads as the current directory (a shell
    variable such as $DATA unset).

    Raises:
        ConfigError: `source` has no text.
    """
    if not source.strip():
        raise ConfigError(
            f"the data source {source!r} is empty (data.source in training, --data in "
            "minitx-evaluate); give a directory of {split}.{lang}[.gz] files, a {split}.jsonl "
            "pattern, builtin:toy or a hub id (a shell variable may be unset)"
        )


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


HUB_OPTIONS: tuple[str, ...] = ("name", "revision", "data_dir")
"""The ``datasets.load_dataset`` arguments ``data.hub_options`` may set: the configuration
(``name``, e.g. ``de-en`` of ``wmt/wmt14``), a branch or commit (``revision``) and a folder of
the repository (``data_dir``)."""


def check_languages(src_lang: str, tgt_lang: str) -> None:
    """Refuse a pair of one language twice, before anything is read.

    Raises:
        ConfigError: `src_lang` equals `tgt_lang`.
    """
    if src_lang == tgt_lang:
        raise ConfigError(
            f"src_lang and tgt_lang are both {src_lang!r}: give two different languages "
            "(data.src_lang and data.tgt_lang in training, --src-lang and --tgt-lang in "
            "minitx-evaluate)"
        )


def open_parallel_corpus(
    source: str,
    src_lang: str,
    tgt_lang: str,
    *,
    splits: Mapping[str, str] | None = None,
    hub_options: Mapping[str, str] | None = None,
) -> dict[str, PairStream]:
    """Open every split of a parallel corpus as a `PairStream`, without reading it.

    Files, splits and languages are checked here, so a corpus that cannot be read fails
    before any work is done; the content (UTF-8, JSON, line counts) is checked as the
    streams are read.

    Args:
        source: a data source, as listed in this module's docstring and docs/guides/data.md.
        splits: split name -> file stem / hub split. ``None`` means :data:`MULTI30K_SPLITS`
            for local files (or each split's own name where only its files are there:
            `local_stem`) and :data:`HUB_SPLITS` for hub datasets.
        hub_options: more ``datasets.load_dataset`` arguments for a hub id (the keys of
            :data:`HUB_OPTIONS`), e.g. ``{"name": "de-en"}``.

    Returns:
        split name -> stream, in the order of ``splits``.

    Raises:
        ConfigError: the same language twice (`check_languages`).
        DataError: a single file as the source, a hub dataset without the split or language
            asked for, unknown ``hub_options``.
        MissingFileError: a local path that does not exist, or missing ``{split}.{lang}`` /
            jsonl files (the message lists the splits, languages and files that were found).
        SourceUnreachableError: the hub could not be reached (the message says how to use
            local files).
    """
    check_languages(src_lang, tgt_lang)
    langs = (src_lang, tgt_lang)
    if source.startswith(BUILTIN_PREFIX):
        source = str(builtin_corpus_dir(source.removeprefix(BUILTIN_PREFIX)))
    local = "{split}" in source or Path(source).expanduser().is_dir()
    if local and hub_options:  # e.g. a hub recipe's config pointed at a local copy
        logger.warning(
            "data.hub_options %s are for hub datasets; the local source %r does not use them.",
            dict(hub_options),
            source,
        )
    if splits is None and local:
        splits = {split: local_stem(source, split, langs) for split in MULTI30K_SPLITS}
    if "{split}" in source:
        return _open_jsonl(source, langs, dict(splits or MULTI30K_SPLITS))
    path = Path(source).expanduser()
    if path.is_dir():
        local_splits = dict(splits or MULTI30K_SPLITS)
        raw = (_raw_file(path, stem, lang) for stem in local_splits.values() for lang in langs)
        if any(raw) or not _jsonl_files(path):
            return _open_raw_dir(path, langs, local_splits)
        return _open_jsonl(str(path / "{split}.jsonl"), langs, local_splits)
    if path.is_symlink() and not path.exists():  # else read as a hub id, after its retries
        raise MissingFileError(
            f"data source {source!r} is a symbolic link to nothing that can be read (a loop, or "
            f"its target {os.readlink(path)!r} is gone); point it at the corpus directory"
        )
    if path.exists() and not path.is_dir():  # a file, /dev/null, a pipe
        kind = "a single file" if path.is_file() else "not a directory"
        raise DataError(
            f"data source {source!r} is {kind}. Use a directory of {{split}}.{{lang}}[.gz] "
            f"files, or a pattern such as '{path.parent / '{split}.jsonl'}' for jsonl splits."
        )
    if not is_hub_id(source):
        raise MissingFileError(
            f"data source directory not found: {path.resolve()} (from {source!r}). Point "
            f"{SOURCE_SETTING} or {DATA_DIR_ENV} at a directory of {{split}}.{{lang}}[.gz] files."
        )
    absent = [lang for lang in langs if lang not in DEFAULT_SOURCE_LANGUAGES]
    if source == DEFAULT_SOURCE and not hub_options and absent:  # no download to find it out
        raise DataError(
            f"the hub copy of Multi30k ({DEFAULT_SOURCE}) holds German and English only, not "
            f"{', '.join(absent)}. Set {DATA_DIR_ENV} (or {SOURCE_SETTING}) to a directory of raw "
            f"files such as train.{absent[0]}, val.{absent[0]}, test_2016_flickr.{absent[0]} "
            "(the multi30k/dataset repository's data/task1/raw)."
        )
    return _open_hub(source, langs, dict(splits or HUB_SPLITS), dict(hub_options or {}))


def load_parallel_corpus(
    source: str,
    src_lang: str,
    tgt_lang: str,
    *,
    splits: Mapping[str, str] | None = None,
    hub_options: Mapping[str, str] | None = None,
) -> datasets.DatasetDict:
    """Load a parallel corpus into memory as a ``DatasetDict`` with one ``translation`` column.

    For evaluation sets and small corpora; training reads large ones as streams
    (:func:`open_parallel_corpus`, which takes the same arguments and raises the same errors)
    straight into the tokenized cache.

    Returns:
        A ``DatasetDict`` with the keys of ``splits``, rows in file order.

    Raises:
        DataError: also unequal line counts, invalid UTF-8 or JSON in a file, found as it
            is read.
    """
    streams = open_parallel_corpus(
        source, src_lang, tgt_lang, splits=splits, hub_options=hub_options
    )
    features = datasets.Features({"translation": datasets.Translation([src_lang, tgt_lang])})
    result = {}
    for split, stream in streams.items():
        rows = [
            {src_lang: s, tgt_lang: t}
            for chunk in stream.chunks()
            for s, t in zip(chunk.src, chunk.tgt, strict=True)
        ]
        result[split] = datasets.Dataset.from_dict({"translation": rows}, features=features)
    logger.info("Loaded %s from %s.", {k: len(v) for k, v in result.items()}, source)
    return datasets.DatasetDict(result)


# ------------------------------------------------------------------------------ raw files
_RAW_NAME = re.compile(r"(?P<stem>.+?)\.(?P<lang>[A-Za-z][A-Za-z_-]*?)(?P<gz>\.gz)?")


def local_stem(source: str, split: str, langs: tuple[str, str]) -> str:
    """The file stem of `split` in a local corpus (a directory, or a ``{split}`` jsonl
    pattern): Multi30k's (`MULTI30K_SPLITS`: val, test_2016_flickr) where its files are there,
    else the split's own name (validation.de, test.jsonl) where those are, else Multi30k's,
    whose missing files the error then lists."""
    multi30k = MULTI30K_SPLITS.get(split, split)

    def there(stem: str) -> bool:
        if "{split}" in source:
            return _plain_or_gz(Path(source.format(split=stem)).expanduser()) is not None
        directory = Path(source).expanduser()
        raw = all(_raw_file(directory, stem, lang) for lang in langs)
        return raw or _plain_or_gz(directory / f"{stem}.jsonl") is not None

    return multi30k if there(multi30k) or not there(split) else split


def split_files(source: str, stem: str, langs: tuple[str, str]) -> list[Path]:
    """The local files that hold the split of file stem `stem` (`local_stem`) in `source` (a
    directory, or a ``{split}`` jsonl pattern): those the loader reads, so that an output may
    sit beside them; none for a hub id, or where they are missing."""
    if "{split}" in source:
        files = [_plain_or_gz(Path(source.format(split=stem)).expanduser())]
    else:
        directory = Path(source).expanduser()
        files = [_raw_file(directory, stem, lang) for lang in langs]
        files.append(_plain_or_gz(directory / f"{stem}.jsonl"))
    return [path for path in files if path is not None]


def _plain_or_gz(path: Path) -> Path | None:
    """`path`, else its ``.gz`` twin, whichever is a file first; None when neither is."""
    return next((p for p in (path, Path(f"{path}.gz")) if p.is_file()), None)


def _not_a_file(path: Path) -> str:
    """`` (a directory)`` or `` (not a regular file)`` where `path` exists but is no file the
    corpus can be read from ("missing" alone would contradict ``ls``); else ""."""
    if path.is_dir():
        return " (a directory)"
    return " (not a regular file)" if path.exists() or path.is_symlink() else ""


def _raw_file(directory: Path, stem: str, lang: str) -> Path | None:
    return _plain_or_gz(directory / f"{stem}.{lang}")


def _say_which_is_read(path: Path) -> None:
    """A plain file is read before its ``.gz`` twin; say so, as the two may differ (a file
    unpacked, then edited)."""
    if path.suffix != ".gz" and Path(f"{path}.gz").is_file():
        logger.warning(
            "Both %s and %s.gz are in %s: reading %s (remove one to choose).",
            path.name,
            path.name,
            path.parent,
            path.name,
        )


def _jsonl_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))


WITHOUT_TEST = (  # training reads every split of data.splits, --test false or not
    " (a corpus without a test split: data.splits '{train: STEM, validation: STEM}' and "
    "--test false)"
)
"""How a corpus without a usable test split trains, for the errors that find none."""

NOT_LANGUAGES = ("jsonl", "json", "txt", "md", "tsv", "csv", "parquet", "arrow")
"""File extensions that name a format, not a language (``corpus.tsv`` is no side of a pair)."""


def _other_format_hint(directory: Path) -> str:
    """For the missing-files error: how to read a directory in a format minitx does not read
    from a path, a saved Hugging Face dataset or Parquet files."""
    if any((directory / name).is_file() for name in ("dataset_dict.json", "state.json")):
        return (
            " It holds a dataset saved with datasets' save_to_disk, which minitx does not read: "
            "write each split with Dataset.to_json('DIR/{split}.jsonl') and give data.source "
            "'DIR/{split}.jsonl'."
        )
    # two levels at most (the hub's layout: data/*.parquet): never a walk of a whole tree
    found = next(directory.glob("*.parquet"), None) or next(directory.glob("*/*.parquet"), None)
    if found is not None:
        return (
            " Parquet files are read through datasets: data.source parquet and data.hub_options "
            f"'{{data_dir: {found.parent.resolve()}}}' (the folder that holds them)."
        )
    return ""


def describe_directory(directory: Path) -> str:
    """What a corpus directory holds: raw splits, languages and file names (for errors); a
    ``.gz`` is read as a compression suffix (test.de.gz: split test, language de)."""
    names = sorted(p.name for p in directory.iterdir() if p.is_file())
    found_splits: set[str] = set()
    found_langs: set[str] = set()
    for name in names:
        match = _RAW_NAME.fullmatch(name)
        if match and match["lang"] not in NOT_LANGUAGES:
            found_splits.add(match["stem"])
            found_langs.add(match["lang"])
    shown = ", ".join(names[:20]) + (f", ... ({len(names)} files)" if len(names) > 20 else "")
    return f"found splits {sorted(found_splits)}, languages {sorted(found_langs)}; files: [{shown}]"


def _open_raw_dir(
    directory: Path, langs: tuple[str, str], splits: Mapping[str, str]
) -> dict[str, PairStream]:
    """Streams of the line-aligned ``{stem}.{lang}[.gz]`` files of every split."""
    missing = [
        (split, f"{stem}.{lang}[.gz]{_not_a_file(directory / f'{stem}.{lang}')}")
        for split, stem in splits.items()
        for lang in langs
        if _raw_file(directory, stem, lang) is None
    ]
    if missing:
        names = [name for _, name in missing]
        without_test = WITHOUT_TEST if {split for split, _ in missing} == {"test"} else ""
        raise MissingFileError(
            f"missing corpus files in {directory}: {', '.join(names)} (wanted splits "
            f"{dict(splits)} for languages {list(langs)}); {describe_directory(directory)}. Set "
            f"data.splits / data.src_lang / data.tgt_lang to match the files{without_test}."
            f"{_other_format_hint(directory)}"
        )
    streams: dict[str, PairStream] = {}
    for split, stem in splits.items():
        src_path, tgt_path = (_raw_file(directory, stem, lang) for lang in langs)
        assert src_path is not None and tgt_path is not None
        for path in (src_path, tgt_path):
            _say_which_is_read(path)
        streams[split] = RawFilesStream(split, src_path, tgt_path)
    return streams


# ---------------------------------------------------------------------------------- jsonl
def _open_jsonl(
    pattern: str, langs: tuple[str, str], splits: Mapping[str, str]
) -> dict[str, PairStream]:
    """Streams of ``pattern.format(split=stem)`` (or its ``.gz``) for every split."""
    streams: dict[str, PairStream] = {}
    for split, stem in splits.items():
        path = Path(pattern.format(split=stem)).expanduser()
        path = _plain_or_gz(path) or path  # when neither is there: named below
        _say_which_is_read(path)
        if not path.is_file():
            parent = path.parent
            found = [p.name for p in _jsonl_files(parent)] if parent.is_dir() else []
            text = (  # a {split}.tsv pattern found "[]" in a folder of files
                ""
                if path.name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))
                else "; a data.source pattern with {split} names jsonl files: for "
                "{split}.{lang} text files, give their directory instead"
            )
            raise MissingFileError(
                f"missing jsonl file for split {split!r}: {path}; the jsonl files in {parent}: "
                f"{found or 'none'}. Set data.splits to map train/validation/test to the file "
                f"stems{text}."
            )
        streams[split] = JsonlStream(split, path, langs)
    return streams


# ------------------------------------------------------------------------------------ hub
def _open_hub(
    source: str, langs: tuple[str, str], splits: Mapping[str, str], options: dict[str, str]
) -> dict[str, PairStream]:
    """Load (download once, then from the ``datasets`` cache) a hub dataset; a stream of the
    language columns of every split."""
    unknown = sorted(set(options) - set(HUB_OPTIONS))
    if unknown:
        raise DataError(
            f"data.hub_options: unknown keys {unknown} for the hub dataset {source!r}; "
            f"known keys are {list(HUB_OPTIONS)} (arguments of datasets.load_dataset)."
        )
    described = source + "".join(f" {k}={v}" for k, v in sorted(options.items()))
    try:
        loaded = datasets.load_dataset(source, **options)  # no split asked: a DatasetDict
    except OSError as exc:  # ConnectionError, DatasetNotFoundError (a FileNotFoundError), ...
        error = SourceUnreachableError if isinstance(exc, ConnectionError) else MissingFileError
        # `export MINITX_DATA_DIR=$DIR` with DIR unset: set, but to nothing, so not applied
        empty = f" ({DATA_DIR_ENV} is set but empty: is a shell variable unset?)"
        # the files this language pair needs (the example was German and English for any)
        files = ", ".join(f"{stem}.{lang}" for stem in MULTI30K_SPLITS.values() for lang in langs)
        raise error(
            f"Could not load the Hugging Face hub dataset {described!r} "
            f"({type(exc).__name__}: {exc}); no local directory {source!r} exists either. "
            f"To use local files, set {DATA_DIR_ENV}"
            f"{empty if DATA_DIR_ENV in os.environ else ''} or {SOURCE_SETTING} to a directory of "
            f"{{split}}.{{lang}}[.gz] files (e.g. {files}, as in the multi30k/dataset "
            "repository's data/task1/raw; other names: data.splits)."
        ) from exc
    streams: dict[str, PairStream] = {}
    for split, name in splits.items():
        if name not in loaded:
            raise DataError(
                f"hub dataset {described!r} has no split {name!r} (found {sorted(loaded)}); set "
                "data.splits to map train/validation/test to its split names."
            )
        table, prefix = loaded[name], ""
        if "translation" in table.column_names:
            table, prefix = table.select_columns(["translation"]).flatten(), "translation."
        absent = [lang for lang in langs if prefix + lang not in table.column_names]
        if absent:
            raise DataError(
                f"hub dataset {described!r} split {name!r} has no language(s) {absent}; "
                f"its columns are {table.column_names}. Pick languages it has, or set "
                f"{DATA_DIR_ENV} or {SOURCE_SETTING} to a directory of {{split}}.{{lang}}[.gz] "
                "files (Multi30k's French and Czech: the multi30k/dataset repository's "
                "data/task1/raw)."
            )
        columns = [prefix + lang for lang in langs]
        streams[split] = HubStream(split, table, columns, f"{described} [{name}]")
    return streams
