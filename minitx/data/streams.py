"""A corpus split as a stream of sentence-pair chunks, read in bounded memory.

Every reader of a parallel corpus (raw ``{split}.{lang}[.gz]`` files, jsonl files, a hub
dataset) opens a split as a `PairStream` without reading it, so missing files, splits and
languages are reported before any work; the in-memory loader
(`minitx.data.load_parallel_corpus`) collects the same chunks.

Lines are split on ``\\n`` only (so counts match ``wc -l``), a trailing ``\\r`` is removed and
a byte-order mark at the start of a file is dropped; a missing value (jsonl ``null``, a hub
``None``) reads as an empty sentence.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets

from minitx.errors import DataError
from minitx.textio import READ_BYTES, iter_lines

CHUNK_PAIRS = 20_000
"""Pairs per chunk: large enough for fast batch tokenization, small enough to stay a few MB."""


@dataclass(frozen=True)
class PairChunk:
    """Consecutive pairs of a split.

    Attributes:
        start: 0-based row of the first pair in the split (its line is ``start + 1`` in a raw
            file).
        src: source sentences.
        tgt: target sentences, as many as `src`.
    """

    start: int
    src: list[str]
    tgt: list[str]


class PairStream(ABC):
    """One split of a parallel corpus, read chunk by chunk.

    Attributes:
        split: the split's name (``train``, ``validation``, ``test``).
    """

    split: str

    @functools.cached_property
    def fingerprint(self) -> str:
        """A hex digest of the split's content (changes whenever the pairs may change);
        computed once per stream (for files: one read of their bytes)."""
        return self._content_digest()

    @property
    @abstractmethod
    def location(self) -> str:
        """Where the split is read from, for messages: its files, or the hub dataset."""

    @abstractmethod
    def _content_digest(self) -> str:
        """The digest behind `fingerprint`."""

    @abstractmethod
    def chunks(self, chunk_size: int = CHUNK_PAIRS) -> Iterator[PairChunk]:
        """The split's pairs in order, at most `chunk_size` per chunk.

        Raises:
            DataError: a file cannot be read or decoded, or its sides differ in length; the
                message names the file and, where it helps, the line.
        """


def sha256_file(path: Path, digest: Any = None) -> Any:
    """`digest` (a new sha256 when None) updated with a file's bytes as stored (gzip files
    are not decompressed), read in blocks: never memory-mapped, never whole."""
    digest = hashlib.sha256() if digest is None else digest
    with open(path, "rb") as file:
        while block := file.read(READ_BYTES):
            digest.update(block)
    return digest


def _sha256_files(paths: Sequence[Path], extra: str) -> str:
    """A sha256 of `extra`, then each file's name and bytes."""
    digest = hashlib.sha256(extra.encode())
    for path in paths:
        digest.update(f"\0{path.name}\0".encode())
        sha256_file(path, digest)
    return digest.hexdigest()


def _chunked(pairs: Iterator[tuple[str, str]], chunk_size: int) -> Iterator[PairChunk]:
    """Consecutive `pairs` in chunks of at most `chunk_size`."""
    start = 0
    while batch := list(itertools.islice(pairs, chunk_size)):
        src, tgt = zip(*batch, strict=True)
        yield PairChunk(start, list(src), list(tgt))
        start += len(batch)


# ------------------------------------------------------------------------------ raw files
class RawFilesStream(PairStream):
    """A split stored as two line-aligned text files, ``{stem}.{src}`` and ``{stem}.{tgt}``
    (each optionally ``.gz``)."""

    def __init__(self, split: str, src_path: Path, tgt_path: Path) -> None:
        self.split = split
        self.src_path = src_path
        self.tgt_path = tgt_path

    @property
    def location(self) -> str:
        return f"{self.src_path} and {self.tgt_path}"

    def _content_digest(self) -> str:
        return _sha256_files([self.src_path, self.tgt_path], "raw")

    def chunks(self, chunk_size: int = CHUNK_PAIRS) -> Iterator[PairChunk]:
        return _chunked(self._pairs(), chunk_size)

    def _pairs(self) -> Iterator[tuple[str, str]]:
        pairs = itertools.zip_longest(iter_lines(self.src_path), iter_lines(self.tgt_path))
        for row, (s, t) in enumerate(pairs):
            if s is None or t is None:  # one file ended first: count the other's lines
                longer = row + 1 + sum(1 for _ in pairs)
                n_src, n_tgt = (row, longer) if s is None else (longer, row)
                raise DataError(
                    f"split {self.split!r}: {self.src_path} has {_lines(n_src)} but "
                    f"{self.tgt_path} has {n_tgt}; parallel files must be line-aligned (one "
                    "sentence pair per line)."
                )
            yield s, t


def _lines(n: int) -> str:
    return f"{n} line" if n == 1 else f"{n} lines"


# ---------------------------------------------------------------------------------- jsonl
class JsonlStream(PairStream):
    """A split stored as one jsonl file: a ``translation`` object or flat language fields
    per line. A blank line is an empty pair, skipped and counted as any empty pair is, so that
    rows are the file's lines (an evaluation's hypotheses line up with them)."""

    def __init__(self, split: str, path: Path, langs: tuple[str, str]) -> None:
        self.split = split
        self.path = path
        self.langs = langs

    @property
    def location(self) -> str:
        return str(self.path)

    def _content_digest(self) -> str:
        # a blank line was once dropped unseen: such a file's rows have changed since
        return _sha256_files([self.path], f"jsonl {self.langs}, a blank line an empty pair")

    def chunks(self, chunk_size: int = CHUNK_PAIRS) -> Iterator[PairChunk]:
        lines = enumerate(iter_lines(self.path), start=1)
        pairs = (self._pair(line, number) if line.strip() else ("", "") for number, line in lines)
        return _chunked(pairs, chunk_size)

    def _pair(self, line: str, number: int) -> tuple[str, str]:
        langs = self.langs
        try:
            record = json.loads(line, object_pairs_hook=_unique_keys)
        except _KeyTwice as twice:  # json keeps the last one without a word
            raise DataError(
                f"{self.path}: line {number} gives the key {twice} twice; JSON would keep only "
                "the second: write it once"
            ) from None
        except json.JSONDecodeError as exc:
            hint = (  # a {split} pattern reads jsonl only: say so where the name suggests text
                ""
                if self.path.name.endswith((".jsonl", ".jsonl.gz", ".json", ".json.gz"))
                else "; a data.source pattern with {split} names jsonl files: if these are "
                "{split}.{lang} text files, give their directory instead"
            )
            raise DataError(
                f"{self.path}: line {number} is not valid JSON ({exc.msg}){hint}."
            ) from None
        if isinstance(record, dict) and "translation" in record and set(langs) & set(record):
            raise DataError(  # which one is the pair?
                f"{self.path}: line {number} has both a translation object and flat "
                f"{sorted(set(langs) & set(record))} fields; keep one of them"
            )
        pair = record.get("translation", record) if isinstance(record, dict) else None
        if not isinstance(pair, dict) or any(lang not in pair for lang in langs):
            shown = pair if isinstance(record, dict) else record  # {"translation": "x"}: str
            fields = sorted(shown) if isinstance(shown, dict) else type(shown).__name__
            raise DataError(
                f"{self.path}: line {number} has no {list(langs)} fields (found {fields}). "
                f'Expected {{"translation": {{"{langs[0]}": ..., "{langs[1]}": ...}}}} or flat '
                f'{{"{langs[0]}": ..., "{langs[1]}": ...}}.'
            )
        values = [pair[lang] for lang in langs]
        if not all(v is None or isinstance(v, str) for v in values):
            raise DataError(
                f"{self.path}: line {number}: {list(langs)} values must be strings, got {values!r}."
            )
        if "\\ud" in line.lower():  # only a JSON escape can make a lone surrogate
            for lang, value in zip(langs, values, strict=True):
                try:
                    (value or "").encode("utf-8")
                except UnicodeEncodeError as exc:
                    raise DataError(
                        f"{self.path}: line {number}: the {lang} text holds a lone surrogate "
                        f"({value[exc.start]!r} at character {exc.start + 1}, half of a UTF-16 "
                        "pair written as a JSON escape), which no tokenizer reads; write the "
                        "character itself, or both halves of its pair"
                    ) from None
        return values[0] or "", values[1] or ""


class _KeyTwice(Exception):
    """A JSON object of a jsonl line gives one key twice (the key is the message)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """`json.loads`'s object_pairs_hook: the object as a dict, or `_KeyTwice`."""
    record = dict(pairs)
    if len(record) < len(pairs):  # rare: look for the key only then
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _KeyTwice(repr(key))
            seen.add(key)
    return record


# ------------------------------------------------------------------------------------ hub
class HubStream(PairStream):
    """A split of a hub dataset (memory-mapped by ``datasets``): its source and target
    `columns` (the language columns, or those of a flattened ``translation`` column)."""

    def __init__(
        self, split: str, table: datasets.Dataset, columns: Sequence[str], where: str
    ) -> None:
        self.split = split
        self.src_column, self.tgt_column = columns
        self.table = table.select_columns([self.src_column, self.tgt_column])
        self.where = where

    @property
    def location(self) -> str:
        return self.where

    def _content_digest(self) -> str:
        # datasets' own fingerprint of the split: a hash of the downloaded data's identity
        # (repository revision, configuration, files), the same on every load of that data.
        identity: dict[str, Any] = {
            "fingerprint": getattr(self.table, "_fingerprint", None),
            "rows": len(self.table),
            "columns": [self.src_column, self.tgt_column],
            "where": self.where,
        }
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def chunks(self, chunk_size: int = CHUNK_PAIRS) -> Iterator[PairChunk]:
        start = 0
        for batch in self.table.iter(batch_size=chunk_size):
            src = [s or "" for s in batch[self.src_column]]
            tgt = [t or "" for t in batch[self.tgt_column]]
            yield PairChunk(start, src, tgt)
            start += len(src)
