"""Tests for minitx.data: loading and validation, cleaning, bucketing, collate, DataModule."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import pickle
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import datasets
import huggingface_hub
import lightning as L
import numpy as np
import pytest
import torch

from minitx import data as data_module
from minitx import tokenizer as tokenizer_module
from minitx.data import (
    DATA_DIR_ENV,
    ResumableDataLoader,
    TokenBucketBatchSampler,
    clean_pairs,
    collate,
    load_parallel_corpus,
    resolve_data_source,
    round_up,
)
from minitx.data.datamodule import TranslationDataModule
from minitx.errors import ConfigError, DataError, MissingFileError
from minitx.tokenizer import BOS_ID, EOS_ID, PAD_ID

SPLIT_FILES = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
TOY_SIZES = {"train": 60, "validation": 10, "test": 10}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _write_corpus(directory: Path, pairs: dict[str, tuple[list[str], list[str]]]) -> Path:
    """Write raw ``{stem}.de`` / ``{stem}.en`` files; ``pairs`` maps split -> (de, en) lines."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, (de, en) in pairs.items():
        stem = SPLIT_FILES[split]
        (directory / f"{stem}.de").write_text("".join(f"{s}\n" for s in de), encoding="utf-8")
        (directory / f"{stem}.en").write_text("".join(f"{s}\n" for s in en), encoding="utf-8")
    return directory


def _copy_toy(toy_corpus_dir: Path, directory: Path) -> Path:
    shutil.copytree(toy_corpus_dir, directory)
    return directory


# ================================================================================ loading
def test_load_raw_directory(toy_corpus_dir: Path) -> None:
    corpus = load_parallel_corpus(str(toy_corpus_dir), "de", "en")
    assert {split: len(ds) for split, ds in corpus.items()} == TOY_SIZES
    assert corpus["train"].column_names == ["translation"]
    de, en = _lines(toy_corpus_dir / "val.de"), _lines(toy_corpus_dir / "val.en")
    assert [row["translation"] for row in corpus["validation"]] == [
        {"de": s, "en": t} for s, t in zip(de, en, strict=True)
    ]


def test_load_gzip_crlf_and_bom(toy_corpus_dir: Path, tmp_path: Path) -> None:
    for path in toy_corpus_dir.iterdir():
        text = path.read_text(encoding="utf-8")
        if path.name == "train.de":
            text = "\ufeff" + text.replace("\n", "\r\n")  # BOM + Windows line ends
        (tmp_path / f"{path.name}.gz").write_bytes(gzip.compress(text.encode("utf-8")))
    plain = load_parallel_corpus(str(toy_corpus_dir), "de", "en")
    zipped = load_parallel_corpus(str(tmp_path), "de", "en")
    for split in TOY_SIZES:
        assert zipped[split]["translation"][:] == plain[split]["translation"][:]


def test_language_direction_is_configurable(toy_corpus_dir: Path) -> None:
    corpus = load_parallel_corpus(str(toy_corpus_dir), "en", "de")
    assert corpus["train"][0]["translation"] == {
        "en": _lines(toy_corpus_dir / "train.en")[0],
        "de": _lines(toy_corpus_dir / "train.de")[0],
    }
    with pytest.raises(ConfigError, match="both 'de': give two different languages"):
        load_parallel_corpus(str(toy_corpus_dir), "de", "de")


def test_mismatched_line_counts_name_both_files(toy_corpus_dir: Path, tmp_path: Path) -> None:
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    en = _lines(directory / "val.en")
    (directory / "val.en").write_text("\n".join(en[:-2]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as info:
        load_parallel_corpus(str(directory), "de", "en")
    message = str(info.value)
    assert "val.de" in message and "10 lines" in message
    assert "val.en" in message and "has 8" in message
    assert "'validation'" in message


def test_missing_split_lists_what_was_found(toy_corpus_dir: Path, tmp_path: Path) -> None:
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    for lang in ("de", "en"):
        (directory / f"test_2016_flickr.{lang}").unlink()
    with pytest.raises(FileNotFoundError) as info:
        load_parallel_corpus(str(directory), "de", "en")
    message = str(info.value)
    assert "test_2016_flickr.de[.gz]" in message
    assert "found splits ['train', 'val']" in message
    assert "languages ['de', 'en']" in message
    assert "train.de" in message  # the files that are there
    # only the test split missing: how to train without one (what the message says works)
    assert "a corpus without a test split: data.splits '{train: STEM, validation: STEM}'" in message
    corpus = load_parallel_corpus(
        str(directory), "de", "en", splits={"train": "train", "validation": "val"}
    )
    assert sorted(corpus) == ["train", "validation"]


def test_missing_language_lists_languages_found(toy_corpus_dir: Path) -> None:
    with pytest.raises(FileNotFoundError) as info:
        load_parallel_corpus(str(toy_corpus_dir), "de", "fr")
    message = str(info.value)
    assert "train.fr[.gz]" in message and "val.fr[.gz]" in message
    assert "languages ['de', 'en']" in message
    assert "without a test split" not in message  # more than the test split is missing


def test_splits_named_by_their_own_names_need_no_data_splits(
    toy_corpus_dir: Path, tmp_path: Path
) -> None:
    """train/validation/test files read as the three splits (they were refused until
    data.splits named them, while minitx-evaluate read test.de); Multi30k's names win where
    both are there."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    for lang in ("de", "en"):
        (directory / f"val.{lang}").rename(directory / f"validation.{lang}")
        (directory / f"test_2016_flickr.{lang}").rename(directory / f"test.{lang}")
    corpus = load_parallel_corpus(str(directory), "de", "en")
    assert {split: len(ds) for split, ds in corpus.items()} == TOY_SIZES
    first = corpus["validation"][0]["translation"]["de"]
    assert first == _lines(toy_corpus_dir / "val.de")[0]
    (directory / "val.de").write_text("x\n" * 10)
    (directory / "val.en").write_text("y\n" * 10)
    assert load_parallel_corpus(str(directory), "de", "en")["validation"][0]["translation"] == {
        "de": "x",
        "en": "y",
    }


def test_a_broken_link_is_named_not_read_as_a_hub_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``corpora/loop`` looks like a hub id: it waited for the hub's retries, then said no hub
    dataset was there; with MINITX_DATA_DIR set it was replaced by that corpus without a word."""
    monkeypatch.chdir(tmp_path)
    Path("corpora").mkdir()
    Path("corpora/loop").symlink_to("loop")
    Path("corpora/gone").symlink_to("/nonexistent/corpus")
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "elsewhere"))
    for link in ("corpora/loop", "corpora/gone"):
        assert resolve_data_source(link) == link
        with pytest.raises(
            MissingFileError, match="is a symbolic link to nothing that can be read"
        ):
            load_parallel_corpus(link, "de", "en")


def test_custom_split_names(toy_corpus_dir: Path) -> None:
    corpus = load_parallel_corpus(
        str(toy_corpus_dir), "de", "en", splits={"train": "train", "test": "val"}
    )
    assert {split: len(ds) for split, ds in corpus.items()} == {"train": 60, "test": 10}


@pytest.mark.parametrize("compressed", [False, True])
def test_invalid_utf8_names_file_and_line(
    toy_corpus_dir: Path, tmp_path: Path, compressed: bool
) -> None:
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    lines = _lines(directory / "train.de")
    raw = (
        "\n".join(lines[:2]).encode()
        + "\nein m\u00e4dchen\n".encode("latin-1")
        + "\n".join(lines[3:]).encode()
    )
    (directory / "train.de").unlink()
    name = "train.de.gz" if compressed else "train.de"
    (directory / name).write_bytes(gzip.compress(raw) if compressed else raw)
    with pytest.raises(ValueError, match=rf"{name}: line 3 is not valid UTF-8"):
        load_parallel_corpus(str(directory), "de", "en")


def test_utf16_corpus_file_is_refused_not_read_as_nul_laden_text(
    toy_corpus_dir: Path, tmp_path: Path
) -> None:
    """An ASCII-only side saved as UTF-16 decodes as UTF-8 without error; its NUL bytes say
    what it is."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    path = directory / "train.en"
    path.write_bytes(path.read_text(encoding="utf-8").encode("utf-16-le"))
    with pytest.raises(ValueError, match=r"train\.en: line 1 is not UTF-8 text \(a NUL byte"):
        load_parallel_corpus(str(directory), "de", "en")


def test_carriage_return_line_ends_are_named(toy_corpus_dir: Path, tmp_path: Path) -> None:
    """A file with \\r-only line ends read as one long pair, then "skipped 1 of 1 pairs
    longer than max_len"."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    text = (directory / "val.en").read_text(encoding="utf-8")
    (directory / "val.en").write_text(text.replace("\n", "\r"), encoding="utf-8", newline="")
    with pytest.raises(DataError, match=r"val\.en: no \\n in the text, .*tr '\\r' '\\n' <"):
        load_parallel_corpus(str(directory), "de", "en")
    (directory / "val.en").write_text(text.replace(" ", " \r ", 1), encoding="utf-8")
    load_parallel_corpus(str(directory), "de", "en")  # a stray \r inside a line is text


def test_french_from_the_hub_copy_of_multi30k_is_refused_before_any_download(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hub copy holds de and en only: offline that was 30 s of retries and a message about
    the hub, online a download, then "no language(s) ['fr']"."""
    monkeypatch.delenv("MINITX_DATA_DIR", raising=False)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("downloaded"))
    with pytest.raises(DataError, match=r"German and English only, not fr\. Set MINITX_"):
        load_parallel_corpus("bentrevett/multi30k", "fr", "en")


def test_corrupt_gzip_is_a_clear_error(toy_corpus_dir: Path, tmp_path: Path) -> None:
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    (directory / "val.en").unlink()
    (directory / "val.en.gz").write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(ValueError, match=r"val\.en\.gz: cannot read the gzip file"):
        load_parallel_corpus(str(directory), "de", "en")


def test_a_plain_file_beside_its_gz_twin_is_read_and_named(
    toy_corpus_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """train.de wins over train.de.gz (a file unpacked, then edited); the log says so."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    (directory / "val.en.gz").write_bytes(gzip.compress(b"other\n" * 3))
    with caplog.at_level("WARNING", logger="minitx.data.sources"):
        corpus = load_parallel_corpus(str(directory), "de", "en")
    assert corpus["validation"]["translation"][0]["en"] == _lines(directory / "val.en")[0]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"Both val.en and val.en.gz are in {directory}: reading val.en (remove one to choose)."
    ]


def test_directory_without_corpus_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(FileNotFoundError, match=r"missing corpus files .*notes\.txt"):
        load_parallel_corpus(str(tmp_path), "de", "en")


def test_a_split_file_that_is_no_file_is_said_to_be_what_it_is(
    toy_corpus_dir: Path, tmp_path: Path
) -> None:
    """val.de as a directory, or a link to a device, was reported "missing", which ``ls``
    contradicts."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    (directory / "val.de").unlink()
    (directory / "val.de").mkdir()
    (directory / "val.en").unlink()
    (directory / "val.en").symlink_to("/dev/null")
    with pytest.raises(FileNotFoundError) as caught:
        load_parallel_corpus(str(directory), "de", "en")
    said = str(caught.value)
    assert "val.de[.gz] (a directory), val.en[.gz] (not a regular file)" in said, said


def test_missing_local_path(tmp_path: Path) -> None:
    """The fix names the setting of each command (evaluate's is --data, not data.source)."""
    with pytest.raises(FileNotFoundError, match="data source directory not found") as caught:
        load_parallel_corpus(str(tmp_path / "nope"), "de", "en")
    assert "Point data.source (minitx-evaluate: --data) or MINITX_DATA_DIR at" in str(caught.value)


def _toy_records(toy_corpus_dir: Path, stem: str, nested: bool) -> list[dict]:
    de, en = _lines(toy_corpus_dir / f"{stem}.de"), _lines(toy_corpus_dir / f"{stem}.en")
    pairs = [{"de": s, "en": t} for s, t in zip(de, en, strict=True)]
    return [{"translation": p, "id": i} if nested else {**p, "id": i} for i, p in enumerate(pairs)]


@pytest.mark.parametrize("nested", [True, False])
def test_jsonl_directory_and_pattern(toy_corpus_dir: Path, tmp_path: Path, nested: bool) -> None:
    for split, stem in SPLIT_FILES.items():
        records = _toy_records(toy_corpus_dir, stem, nested)
        lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        (tmp_path / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    splits = {s: s for s in SPLIT_FILES}
    raw = load_parallel_corpus(str(toy_corpus_dir), "de", "en")
    from_dir = load_parallel_corpus(str(tmp_path), "de", "en", splits=splits)
    from_pattern = load_parallel_corpus(str(tmp_path / "{split}.jsonl"), "de", "en", splits=splits)
    for split in TOY_SIZES:
        assert from_dir[split]["translation"][:] == raw[split]["translation"][:]
        assert from_pattern[split]["translation"][:] == raw[split]["translation"][:]


def test_jsonl_errors_name_file_and_line(tmp_path: Path) -> None:
    good = json.dumps({"translation": {"de": "ein hund .", "en": "a dog ."}})
    (tmp_path / "train.jsonl").write_text(f"{good}\n{{broken\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"train\.jsonl: line 2 is not valid JSON \([^)]*\)\.$"):
        load_parallel_corpus(str(tmp_path / "{split}.jsonl"), "de", "en", splits={"train": "train"})
    (tmp_path / "train.de").write_text("ein hund .\n", encoding="utf-8")  # text, not jsonl
    with pytest.raises(ValueError, match=r"with \{split\} names jsonl files: if these are \{"):
        load_parallel_corpus(str(tmp_path / "{split}.de"), "de", "en", splits={"train": "train"})
    (tmp_path / "train.jsonl").write_text(
        f'{good}\n{{"de": "ein hund .", "fr": "un chien ."}}\n', encoding="utf-8"
    )
    with pytest.raises(
        ValueError, match=r"line 2 has no \['de', 'en'\] fields \(found \['de', 'fr'\]\)"
    ):
        load_parallel_corpus(str(tmp_path / "{split}.jsonl"), "de", "en", splits={"train": "train"})
    for record, found in (('{"translation": "x"}', "str"), ("[1, 2]", "list")):  # said "dict"
        (tmp_path / "train.jsonl").write_text(f"{good}\n{record}\n", encoding="utf-8")
        with pytest.raises(
            ValueError, match=rf"line 2 has no \['de', 'en'\] fields \(found {found}\)"
        ):
            load_parallel_corpus(
                str(tmp_path / "{split}.jsonl"), "de", "en", splits={"train": "train"}
            )
    with pytest.raises(
        FileNotFoundError, match=r"split 'validation'.*jsonl files in .*: \['train\.jsonl'\]"
    ):
        load_parallel_corpus(
            str(tmp_path / "{split}.jsonl"), "de", "en", splits={"validation": "dev"}
        )
    # a tsv pattern: "found in DIR: []" beside the folder's files
    with pytest.raises(FileNotFoundError, match=r"names jsonl files: for \{split\}\.\{lang\} text"):
        load_parallel_corpus(str(tmp_path / "{split}.tsv"), "de", "en", splits={"train": "train"})
    # kept the last value, or one of the two pairs, without a word
    for record, message in (
        ('{"de": "hallo", "de": "gruss", "en": "hi"}', "line 2 gives the key 'de' twice; JSON"),
        (
            '{"translation": {"de": "A", "en": "B"}, "de": "C", "en": "D"}',
            r"line 2 has both a translation object and flat \['de', 'en'\] fields; keep one",
        ),
        ('{"translation": {"de": "A", "de": "C", "en": "B"}}', "line 2 gives the key 'de' twice"),
    ):
        (tmp_path / "train.jsonl").write_text(f"{good}\n{record}\n", encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            load_parallel_corpus(
                str(tmp_path / "{split}.jsonl"), "de", "en", splits={"train": "train"}
            )


def test_a_lone_surrogate_in_jsonl_names_its_file_and_line(tmp_path: Path) -> None:
    """A JSON escape such as \\udc80 decodes to half a UTF-16 pair: a traceback naming no file
    in the evaluation splits, and sentencepiece's "Unable to cast" in the training split."""
    emoji = '{"de": "ein hund \\ud83d\\ude00", "en": "a dog"}'  # a whole pair: one character
    lone = '{"de": "ein hund", "en": "a \\udc80 dog"}'
    (tmp_path / "train.jsonl").write_text(f"{emoji}\n{lone}\n", encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"train\.jsonl: line 2: the en text holds a lone surrogate \('\\udc80'"
    ):
        load_parallel_corpus(str(tmp_path / "{split}.jsonl"), "de", "en", splits={"train": "train"})
    (tmp_path / "train.jsonl").write_text(f"{emoji}\n", encoding="utf-8")
    corpus = load_parallel_corpus(
        str(tmp_path / "{split}.jsonl"), "de", "en", splits={"train": "train"}
    )
    assert corpus["train"]["translation"][0]["de"] == "ein hund \N{GRINNING FACE}"


def test_hub_offline_error_says_what_was_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    # HF_HUB_OFFLINE is read at import time, so patch the parsed flags too.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    start = time.perf_counter()
    with pytest.raises(ConnectionError) as info:
        load_parallel_corpus("minitx-tests/no-such-dataset", "de", "en")
    assert time.perf_counter() - start < 10
    message = str(info.value)
    assert "'minitx-tests/no-such-dataset'" in message
    assert DATA_DIR_ENV in message and "data.source" in message and "{split}.{lang}[.gz]" in message
    assert "set but empty" not in message
    # `export MINITX_DATA_DIR=$DIR` with DIR unset: the variable is set, to nothing
    monkeypatch.setenv(DATA_DIR_ENV, "")
    with pytest.raises(
        ConnectionError, match=f"set {DATA_DIR_ENV} \\({DATA_DIR_ENV} is set but empty"
    ):
        load_parallel_corpus("minitx-tests/no-such-dataset", "de", "en")


def test_hub_layouts_are_converted(monkeypatch: pytest.MonkeyPatch) -> None:
    flat = datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict({"en": ["a dog ."], "de": ["ein hund ."]})
            for split in ("train", "validation", "test")
        }
    )
    nested = datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(
                {"translation": [{"de": "ein hund .", "en": "a dog ."}]}
            )
        }
    )
    loaded = {"owner/flat": flat, "owner/nested": nested}
    monkeypatch.setattr(datasets, "load_dataset", lambda source, *a, **k: loaded[source])
    corpus = load_parallel_corpus("owner/flat", "de", "en")
    assert sorted(corpus) == ["test", "train", "validation"]
    assert corpus["train"][0] == {"translation": {"de": "ein hund .", "en": "a dog ."}}
    corpus = load_parallel_corpus("owner/nested", "de", "en", splits={"train": "train"})
    assert corpus["train"][0] == {"translation": {"de": "ein hund .", "en": "a dog ."}}
    with pytest.raises(ValueError, match=r"no split 'validation' \(found \['train'\]\)"):
        load_parallel_corpus("owner/nested", "de", "en")
    with pytest.raises(ValueError, match=r"no language\(s\) \['fr'\]") as info:
        load_parallel_corpus("owner/flat", "fr", "en")
    assert DATA_DIR_ENV in str(info.value) and "data/task1/raw" in str(info.value)


def test_resolve_data_source(
    toy_corpus_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    assert resolve_data_source("bentrevett/multi30k") == "bentrevett/multi30k"
    data_dir = tmp_path / "multi30k"
    data_dir.mkdir()
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    with caplog.at_level(logging.INFO, logger="minitx.data"):
        assert resolve_data_source("bentrevett/multi30k") == str(data_dir)
    assert "overrides" in caplog.text and "bentrevett/multi30k" in caplog.text
    assert all(record.levelno == logging.INFO for record in caplog.records)  # the expected use
    caplog.clear()
    # any other hub id it replaces is said at the default verbosity: a mistyped local path
    # reads as one ("corpora/europarl": owner and name)
    with caplog.at_level(logging.WARNING, logger="minitx.data"):
        assert resolve_data_source("corpora/europarl") == str(data_dir)
    (record,) = caplog.records
    assert record.getMessage() == (
        f"MINITX_DATA_DIR={data_dir} replaces the data source 'corpora/europarl', read as a "
        "hub dataset id (no such local path); unset MINITX_DATA_DIR to use the hub dataset, or "
        "give a local path that exists"
    )
    # an explicit local source wins over the variable
    assert resolve_data_source(str(toy_corpus_dir)) == str(toy_corpus_dir)
    assert resolve_data_source("corpus/{split}.jsonl") == "corpus/{split}.jsonl"


# =============================================================================== cleaning
def test_clean_pairs_counts_every_skip(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    train_de = ["ein hund .", "", "eine katze .", "zwei männer .", "ein kind .", "x" * 50]
    train_en = ["a dog .", "a cat .", "a cat .", "   ", "a child .", "y"]
    val_de, val_en = ["ein hund .", "", "y" * 50], ["a dog .", "", "z"]
    directory = _write_corpus(
        tmp_path / "c", {"train": (train_de, train_en), "validation": (val_de, val_en)}
    )
    corpus = load_parallel_corpus(
        str(directory), "de", "en", splits={"train": "train", "validation": "val"}
    )
    with caplog.at_level(logging.WARNING, logger="minitx.data"):
        cleaned, counts = clean_pairs(corpus, "de", "en")
    assert counts == {
        "train": {"empty": 2, "too_long": 0},
        "validation": {"empty": 1, "too_long": 0},
    }
    for split in counts:
        assert len(cleaned[split]) + sum(counts[split].values()) == len(corpus[split])
    assert cleaned["train"]["line"][:] == [1, 3, 5, 6]
    assert cleaned["validation"]["line"][:] == [1, 3]
    assert "train: skipped 2 of 6 pairs with an empty side (lines 2, 4)" in caplog.text
    assert "validation: skipped 1 of 3 pairs with an empty side (line 2)" in caplog.text


@pytest.mark.parametrize(
    "invisible",
    ["\u200b", "\ufeff", "\u200e \u200f", "\u00a0\u3000", "\x01"],
    ids=["zero-width-space", "byte-order-mark", "direction-marks", "wide-spaces", "control"],
)
def test_a_side_of_invisible_characters_is_an_empty_side(invisible: str) -> None:
    """sentencepiece's normalization drops control and format characters: a side of only
    those was kept and encoded to no piece, so the model learned to translate into nothing,
    and the pair was not counted as skipped."""
    from minitx.data import usable_pairs

    src = ["ein hund .", "ein hund .", invisible, "\u200bein hund\u200b"]
    tgt = [invisible, "a dog .", "a dog .", "a dog ."]
    assert usable_pairs(src, tgt) == [1, 3]


# ============================================================================== batching
def _padded_len(lengths: np.ndarray, batch: list[int], multiple: int) -> int:
    return round_up(int(lengths[batch].max()), multiple)


@pytest.mark.parametrize(("max_tokens", "pad_multiple"), [(64, 8), (256, 8), (100, 1), (512, 16)])
def test_bucket_batches_respect_budget_and_cover_everything(
    max_tokens: int, pad_multiple: int
) -> None:
    lengths = np.random.default_rng(0).integers(1, 60, size=500)
    sampler = TokenBucketBatchSampler(
        lengths, max_tokens=max_tokens, pad_multiple=pad_multiple, shuffle=True
    )
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        padded = _padded_len(lengths, batch, pad_multiple)
        assert padded % pad_multiple == 0
        assert len(batch) * padded <= max_tokens or (len(batch) == 1 and padded > max_tokens)
        # one padded length per batch: no example is padded beyond its rounded length
        assert {round_up(int(n), pad_multiple) for n in lengths[batch]} == {padded}
    shapes = {(len(b), _padded_len(lengths, b, pad_multiple)) for b in batches}
    buckets = len({round_up(int(n), pad_multiple) for n in lengths})
    assert len(shapes) <= 2 * buckets  # full batches + one remainder per bucket


def test_over_long_examples_get_their_own_batch(caplog: pytest.LogCaptureFixture) -> None:
    lengths = np.array([5, 100, 6, 7, 90, 4])
    with caplog.at_level(logging.WARNING, logger="minitx.data"):
        sampler = TokenBucketBatchSampler(lengths, max_tokens=32)
    batches = list(sampler)
    assert [1] in batches and [4] in batches
    assert sorted(i for b in batches for i in b) == list(range(6))
    assert "2 examples are longer than max_tokens=32" in caplog.text


def test_shuffle_is_seeded_per_epoch() -> None:
    lengths = np.random.default_rng(1).integers(1, 40, size=300)

    def order(seed: int, epoch: int, shuffle: bool = True) -> list[list[int]]:
        sampler = TokenBucketBatchSampler(lengths, max_tokens=128, shuffle=shuffle, seed=seed)
        sampler.set_epoch(epoch)
        return list(sampler)

    assert order(0, 0) == order(0, 0)  # same seed + epoch: same batches
    assert order(0, 0) != order(0, 1)  # a new epoch reshuffles
    assert order(0, 0) != order(1, 0)
    first, second = order(0, 0), order(0, 1)
    assert sorted(map(sorted, first)) != sorted(map(sorted, second))  # batch contents change too
    assert order(0, 0, shuffle=False) == order(5, 3, shuffle=False)  # unshuffled: fixed order
    fixed = order(0, 0, shuffle=False)
    assert [i for b in fixed for i in b] == sorted(
        range(300), key=lambda i: (round_up(int(lengths[i]), 8), i)
    )


def test_lightning_reaches_set_epoch_through_sampler_attribute() -> None:
    sampler = TokenBucketBatchSampler([3, 4, 5], max_tokens=64, shuffle=True)
    sampler.sampler.set_epoch(7)  # what Lightning's fit loop calls
    assert sampler.epoch == 7


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_resumed_loader_serves_the_rest_of_its_epoch(
    num_workers: int, caplog: pytest.LogCaptureFixture
) -> None:
    """What Lightning does on a resume inside an epoch: state_dict() from the stopped loader,
    load_state_dict() on a new one, set_epoch, iterate: the epoch's other batches, in order.
    A state of another epoch, or of other batches (max_tokens changed), starts the epoch."""
    lengths = np.random.default_rng(4).integers(1, 40, size=120)

    def loader() -> ResumableDataLoader:
        sampler = TokenBucketBatchSampler(lengths, max_tokens=128, shuffle=True, seed=1)
        sampler.set_epoch(3)
        return ResumableDataLoader(
            list(range(120)), batch_sampler=sampler, collate_fn=list, num_workers=num_workers,
            persistent_workers=num_workers > 0,
        )  # fmt: skip

    whole = list(loader())
    stopped = loader()
    batches = iter(stopped)
    served = [next(batches) for _ in range(5)]
    state = stopped.state_dict()
    assert state == {"epoch": 3, "served": 5, "batches": len(whole), "replicas": 1}
    resumed = loader()
    resumed.load_state_dict(state)
    assert served + list(resumed) == whole and resumed.served == len(whole)
    assert list(resumed) == whole  # the next iteration: a whole epoch again

    n = len(whole)
    for other, going_on in (
        ({"epoch": 2}, None),
        ({"batches": n + 1}, n - 5),  # Lightning's count of 5 ends the epoch at the new n
        ({"batches": n + 9, "served": n + 3}, n),  # past the new n: it never ends the epoch
    ):
        caplog.clear()
        again = loader()
        again.load_state_dict({**state, **other})
        with caplog.at_level(logging.WARNING, logger="minitx.data"):
            assert list(again) == whole
        said = f"the epoch goes on with the first {going_on} of its new batches"
        assert (said in caplog.text) == (going_on is not None), caplog.text


@pytest.mark.parametrize("num_replicas", [2, 3, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_ddp_shards_are_disjoint_equal_and_covering(num_replicas: int, shuffle: bool) -> None:
    lengths = np.random.default_rng(2).integers(1, 50, size=157)
    shards = []
    for rank in range(num_replicas):
        sampler = TokenBucketBatchSampler(
            lengths, max_tokens=128, shuffle=shuffle, seed=3, num_replicas=num_replicas, rank=rank
        )
        sampler.set_epoch(2)
        shards.append(list(sampler))
        assert len(shards[-1]) == len(sampler)
    assert len({len(shard) for shard in shards}) == 1
    indices = [i for shard in shards for batch in shard for i in batch]
    assert sorted(indices) == list(range(157))  # disjoint and covering
    for shard in shards:
        for batch in shard:
            assert len(batch) * _padded_len(lengths, batch, 8) <= 128


def test_ddp_with_only_single_example_batches_repeats_rather_than_drops() -> None:
    lengths = np.array([50, 60, 70])  # each longer than max_tokens: three single batches
    shards = [
        list(TokenBucketBatchSampler(lengths, max_tokens=16, num_replicas=2, rank=rank))
        for rank in (0, 1)
    ]
    assert len(shards[0]) == len(shards[1]) == 2
    assert {i for shard in shards for b in shard for i in b} == {0, 1, 2}
    one = [
        list(TokenBucketBatchSampler([5], max_tokens=16, num_replicas=2, rank=r)) for r in (0, 1)
    ]
    assert one == [[[0]], [[0]]]  # fewer examples than ranks: every rank still gets a batch


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lengths": [], "max_tokens": 8}, "non-empty"),
        ({"lengths": [0, 3], "max_tokens": 8}, "lengths must be >= 1"),
        ({"lengths": [3], "max_tokens": 0}, "max_tokens and pad_multiple"),
        ({"lengths": [3, 4], "max_tokens": 8, "num_replicas": 2, "rank": 2}, "rank must be in"),
    ],
)
def test_sampler_argument_errors(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TokenBucketBatchSampler(**kwargs)


def test_collate_shapes_specials_and_padding() -> None:
    examples = [
        {"src_ids": [10, 11, 12], "tgt_ids": [20, 21], "src_text": "a b c", "tgt_text": "x y"},
        {"src_ids": list(range(4, 13)), "tgt_ids": [22], "src_text": "long", "tgt_text": "z"},
    ]
    batch = collate(examples, pad_multiple=8)
    assert batch["src"].shape == (2, 16)  # 9 + eos = 10 -> 16
    assert batch["tgt_in"].shape == batch["tgt_out"].shape == (2, 8)  # bos + 2 = 3 -> 8
    assert all(batch[k].dtype == torch.long for k in ("src", "tgt_in", "tgt_out"))
    assert batch["src"][0, :5].tolist() == [10, 11, 12, EOS_ID, PAD_ID]
    assert batch["src"][1, :10].tolist() == [*range(4, 13), EOS_ID]
    assert batch["tgt_in"][0, :4].tolist() == [BOS_ID, 20, 21, PAD_ID]
    assert batch["tgt_out"][0, :4].tolist() == [20, 21, EOS_ID, PAD_ID]
    assert batch["tgt_in"][1, :3].tolist() == [BOS_ID, 22, PAD_ID]
    assert batch["tgt_out"][1, :3].tolist() == [22, EOS_ID, PAD_ID]
    # teacher forcing: where tgt_in has tokens after bos, tgt_out has them one step earlier
    real = batch["tgt_in"][:, 1:] != PAD_ID
    assert torch.equal(batch["tgt_in"][:, 1:][real], batch["tgt_out"][:, :-1][real])
    assert (batch["src"] != PAD_ID).sum().item() == 4 + 10
    assert (batch["tgt_out"] != PAD_ID).sum().item() == 3 + 2
    assert batch["src_text"] == ["a b c", "long"] and batch["tgt_text"] == ["x y", "z"]
    exact = collate(examples, pad_multiple=1)
    assert exact["src"].shape == (2, 10) and exact["tgt_in"].shape == (2, 3)
    with pytest.raises(ValueError, match="empty batch"):
        collate([])


# ============================================================================ datamodule
@pytest.fixture
def toy_dm(toy_corpus_dir: Path, tmp_path: Path) -> TranslationDataModule:
    dm = TranslationDataModule(
        source=str(toy_corpus_dir), vocab_size=150, max_tokens=64, cache_dir=str(tmp_path / "cache")
    )
    dm.setup("fit")
    return dm


def test_the_warning_of_over_long_examples_names_the_split_and_its_setting(
    toy_dm: TranslationDataModule, caplog: pytest.LogCaptureFixture
) -> None:
    """Evaluation batches take data.eval_max_tokens: the warning named max_tokens (another
    value) and no split, so a user raised the wrong setting."""
    toy_dm.hparams.eval_max_tokens = 8
    with caplog.at_level(logging.WARNING, logger="minitx.data"):
        toy_dm.val_dataloader()
        toy_dm.train_dataloader()
    assert "longer than the validation split's data.eval_max_tokens=8 (padded)" in caplog.text
    assert "the train split's" not in caplog.text  # its max_tokens, 64, holds every pair


def test_datamodule_setup_on_toy_corpus(
    toy_dm: TranslationDataModule, toy_corpus_dir: Path
) -> None:
    assert toy_dm.tokenizer is not None and toy_dm.tokenizer.vocab_size == 150
    assert toy_dm.dataset is not None
    assert {split: len(ds) for split, ds in toy_dm.dataset.items()} == TOY_SIZES
    assert toy_dm.skipped == {split: {"empty": 0, "too_long": 0} for split in TOY_SIZES}
    src, tgt = toy_dm.texts("test")
    assert src == _lines(toy_corpus_dir / "test_2016_flickr.de")
    assert tgt == _lines(toy_corpus_dir / "test_2016_flickr.en")
    row = toy_dm.dataset["train"][0]
    assert toy_dm.tokenizer.decode([row["src_ids"]]) == [row["src_text"]]
    assert row["src_len"] == len(row["src_ids"]) and row["line"] == 1


def test_datamodule_batches(toy_dm: TranslationDataModule) -> None:
    train = toy_dm.train_dataloader()
    batches = list(train)
    assert len(batches) == len(train)
    assert sum(len(b["src_text"]) for b in batches) == TOY_SIZES["train"]
    for batch in batches:
        for key in ("src", "tgt_in", "tgt_out"):
            rows, width = batch[key].shape
            assert width % 8 == 0 and rows * width <= 64
        assert (batch["tgt_in"][:, 0] == BOS_ID).all()
    for split, loader in (
        ("validation", toy_dm.val_dataloader()),
        ("test", toy_dm.test_dataloader()),
    ):
        served = [s for batch in loader for s in batch["src_text"]]
        assert Counter(served) == Counter(toy_dm.texts(split)[0])
        assert served == [s for batch in loader for s in batch["src_text"]]  # fixed order
    assert (
        pickle.loads(pickle.dumps(train.collate_fn))(toy_dm.dataset["train"].select([0, 1]))[
            "src"
        ].shape[0]
        == 2
    )


def test_datamodule_caches_tokenizer_and_tokenized_data(
    toy_dm: TranslationDataModule,
    toy_corpus_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def no_training(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("tokenizer trained again")

    monkeypatch.setattr(tokenizer_module, "_train_bytes", no_training)
    again = TranslationDataModule(**toy_dm.hparams)
    with caplog.at_level(logging.INFO, logger="minitx.data"):
        again.setup("fit")
    assert again.tokenizer == toy_dm.tokenizer
    assert caplog.text.count("loading tokenized data") == 3
    assert again.dataset is not None and again.dataset["train"][:] == toy_dm.dataset["train"][:]


def test_max_len_skips_training_pairs_only(
    toy_corpus_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dm = TranslationDataModule(
        source=str(toy_corpus_dir), vocab_size=150, max_len=10, cache_dir=None
    )
    with caplog.at_level(logging.WARNING, logger="minitx.data"):
        dm.setup()
    assert dm.dataset is not None
    skipped = dm.skipped["train"]["too_long"]
    assert 0 < skipped < TOY_SIZES["train"]
    assert len(dm.dataset["train"]) + skipped == TOY_SIZES["train"]
    assert (
        max(np.maximum(dm.dataset["train"]["src_len"][:], dm.dataset["train"]["tgt_len"][:])) + 1
        <= 10
    )
    assert len(dm.dataset["validation"]) == 10 and len(dm.dataset["test"]) == 10
    assert dm.skipped["validation"] == dm.skipped["test"] == {"empty": 0, "too_long": 0}
    assert (
        f"train: skipped {skipped} of 60 pairs longer than max_len=10 tokens (lines " in caplog.text
    )


def test_datamodule_counts_empty_lines(toy_corpus_dir: Path, tmp_path: Path) -> None:
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    lines = _lines(directory / "val.en")
    lines[4] = "  "
    (directory / "val.en").write_text("\n".join(lines) + "\n", encoding="utf-8")
    dm = TranslationDataModule(source=str(directory), vocab_size=150, cache_dir=None)
    dm.setup()
    assert dm.skipped["validation"] == {"empty": 1, "too_long": 0}
    src, tgt = dm.texts("validation")
    assert len(src) == 9 and lines[4] not in tgt


@pytest.mark.parametrize("content", ["", "\n" * 10], ids=["empty-files", "blank-lines"])
@pytest.mark.parametrize("stem", ["val", "test_2016_flickr"])
def test_a_split_with_no_pair_is_named_with_its_files(
    content: str, stem: str, toy_corpus_dir: Path, tmp_path: Path
) -> None:
    """Refused while the data is prepared, naming the files (the error came when the loader
    was asked for, after the training split's notices, and named neither file nor fix); an
    empty test split says how to train without one (training reads it, --test false or not)."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    for lang in ("de", "en"):
        (directory / f"{stem}.{lang}").write_text(content, encoding="utf-8")
    dm = TranslationDataModule(source=str(directory), vocab_size=150, cache_dir=None)
    skipped = "10 empty" if content else "none, the files are empty"
    split = "validation" if stem == "val" else "test"
    message = (
        rf"'{split}' split \(.*{stem}.de and .*{stem}.en\) has no pair to use \(skipped: {skipped}"
    )
    with pytest.raises(DataError, match=message) as error:
        dm.setup()
    assert ("--test false" in str(error.value)) == (split == "test")


@pytest.mark.parametrize("content", ["", " \n\t\n"], ids=["empty-files", "blank-lines"])
def test_a_training_split_with_no_pair_is_named_with_its_files(
    content: str, toy_corpus_dir: Path, tmp_path: Path
) -> None:
    """It trains the tokenizer first: sentencepiece's refusal ("Tokenizer.train got no
    (non-empty) sentences") named neither the files nor the fix."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    for lang in ("de", "en"):
        (directory / f"train.{lang}").write_text(content, encoding="utf-8")
    dm = TranslationDataModule(source=str(directory), vocab_size=150, cache_dir=tmp_path / "c")
    message = r"'train' split \(.*train.de and .*train.en\) has no pair to train the tokenizer"
    with pytest.raises(DataError, match=message):
        dm.setup()


@pytest.mark.parametrize(
    ("name", "said"), [("corpus.txt", "is a single file."), ("/dev/null", "is not a directory.")]
)
def test_a_data_source_that_is_no_directory_says_what_it_is(
    name: str, said: str, tmp_path: Path
) -> None:
    """/dev/null was "data source directory not found", though it is there."""
    path = tmp_path / name  # an absolute name stays as it is
    if not path.exists():
        path.write_text("ein Hund\n", encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"data source '{path}' {said}")):
        load_parallel_corpus(str(path), "de", "en")


def test_datamodule_uses_env_override_for_hub_default(
    toy_corpus_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(toy_corpus_dir))
    dm = TranslationDataModule(vocab_size=150, cache_dir=None)  # default source: the hub
    dm.setup()
    assert dm.texts("validation")[0] == _lines(toy_corpus_dir / "val.de")


def test_datamodule_argument_errors(toy_corpus_dir: Path) -> None:
    with pytest.raises(ConfigError, match="both 'en': give two different languages"):
        TranslationDataModule(src_lang="en", tgt_lang="en")
    for setting, value, bound in [
        ("max_tokens", 0, ">= 1"),
        ("pad_multiple", 0, ">= 1"),
        ("eval_max_tokens", 0, ">= 1 or null"),
        ("max_len", 1, ">= 2"),
        ("num_workers", -1, ">= 0"),
    ]:  # each named as the config and the command line name it
        with pytest.raises(ConfigError, match=rf"^data\.{setting} must be {bound}, got {value}"):
            TranslationDataModule(**{setting: value})
    for seed in (-3, 2**64):  # numpy's sample and torch's generator failed with a traceback
        with pytest.raises(
            ConfigError, match=rf"^data\.seed={seed}: a seed lies in 0\.\.{2**64 - 1}"
        ):
            TranslationDataModule(seed=seed)
    TranslationDataModule(seed=2**64 - 1)
    dm = TranslationDataModule(
        source=str(toy_corpus_dir), vocab_size=150, cache_dir=None, splits={"train": "train"}
    )
    with pytest.raises(DataError, match=r"No 'validation' split; this DataModule has \['train'\]"):
        dm.val_dataloader()


# ======================================================================= cache integrity
def _cached_train_file(dm: TranslationDataModule) -> Path:
    (path,) = Path(dm.hparams.cache_dir).glob("tokenized-*-train.arrow")
    return path


def _rewrite_with_token_id(path: Path, value: int) -> None:
    """Rewrite a cached Arrow file with the first source id of row 0 set to `value`: what a
    flipped bit in a token id does (pyarrow here, in the test only)."""
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.BufferReader(path.read_bytes())).read_all()
    index = table.schema.get_field_index("src_ids")
    field = table.schema.field(index)
    rows = table.column(index).to_pylist()
    rows[0][0] = value
    table = table.set_column(index, field, pa.array(rows, type=field.type))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def _reload_with_notice(
    dm: TranslationDataModule, expected: dict, path: Path, caplog: pytest.LogCaptureFixture
) -> tuple[TranslationDataModule, str]:
    """A new DataModule on the damaged cache: it must say so in one line naming the file,
    rebuild it, and serve the `expected` training rows; the run after it is silent. Returns
    it and the notice."""
    again = TranslationDataModule(**dm.hparams)
    with caplog.at_level(logging.WARNING, logger="minitx"):
        again.setup("fit")
    notices = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(notices) == 1, notices
    assert str(path) in notices[0] and "rebuilding" in notices[0] and "\n" not in notices[0]
    assert again.dataset is not None and again.dataset["train"][:] == expected
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="minitx"):
        TranslationDataModule(**dm.hparams).setup("fit")
    assert caplog.records == []
    return again, notices[0]


def _edit_record(path: Path, change) -> None:
    record_file = path.with_suffix(".json")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    change(record)
    record_file.write_text(json.dumps(record), encoding="utf-8")


def test_a_truncated_cache_file_is_rebuilt_with_a_notice(
    toy_dm: TranslationDataModule, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: 'Expected to be able to read N bytes ...' naming neither file nor fix, on every
    later run."""
    path, expected = _cached_train_file(toy_dm), toy_dm.dataset["train"][:]
    toy_dm.dataset = None  # it maps the file this test damages in place
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    _, notice = _reload_with_notice(toy_dm, expected, path, caplog)
    assert "cut short" in notice


def test_a_flipped_token_id_is_caught_at_load(
    toy_dm: TranslationDataModule, caplog: pytest.LogCaptureFixture
) -> None:
    """Was: loaded silently, then an IndexError deep in the embedding mid-epoch."""
    path, expected = _cached_train_file(toy_dm), toy_dm.dataset["train"][:]
    toy_dm.dataset = None  # it maps the file this test damages in place
    _rewrite_with_token_id(path, 60_000)
    again, _ = _reload_with_notice(toy_dm, expected, path, caplog)
    served = [int(i) for batch in again.train_dataloader() for i in batch["src"].flatten()]
    assert max(served) < again.tokenizer.vocab_size


def test_token_ids_out_of_range_are_caught_even_with_a_matching_checksum(
    toy_dm: TranslationDataModule, caplog: pytest.LogCaptureFixture
) -> None:
    """The ids themselves are checked at load, not only the file's checksum."""
    path, expected = _cached_train_file(toy_dm), toy_dm.dataset["train"][:]
    toy_dm.dataset = None  # it maps the file this test damages in place
    _rewrite_with_token_id(path, 60_000)
    resealed = {
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    _edit_record(path, lambda record: record.update(resealed))
    _, notice = _reload_with_notice(toy_dm, expected, path, caplog)
    assert "src_ids from 0 to 60000, outside the tokenizer's vocabulary [0, 150)" in notice


RECORD_DAMAGE = {
    "not-json": (
        lambda path: path.with_suffix(".json").write_text("{", encoding="utf-8"),
        "unreadable (JSONDecodeError",
    ),
    "foreign-record": (
        lambda path: _edit_record(path, lambda r: r.pop("format")),
        "has no usable record",
    ),
    "other-vocabulary": (
        lambda path: _edit_record(path, lambda r: r.update(vocab_size=r["vocab_size"] + 1)),
        "was written for a vocabulary of 151, not 150",
    ),
    "other-row-count": (
        lambda path: _edit_record(path, lambda r: r.update(rows=r["rows"] + 1)),
        "rows but its record says",
    ),
}


@pytest.mark.parametrize("damage", sorted(RECORD_DAMAGE))
def test_a_cache_whose_record_does_not_fit_is_rebuilt_with_a_notice(
    damage: str, toy_dm: TranslationDataModule, caplog: pytest.LogCaptureFixture
) -> None:
    """The record beside a cached split (format, size, sha256, rows, vocabulary) is checked
    before the file is trusted."""
    path, expected = _cached_train_file(toy_dm), toy_dm.dataset["train"][:]
    toy_dm.dataset = None
    change, message = RECORD_DAMAGE[damage]
    change(path)
    _, notice = _reload_with_notice(toy_dm, expected, path, caplog)
    assert message in notice, notice


class _RecordingModule(L.LightningModule):
    """Just enough of a LightningModule to see what the dataloader serves each epoch."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.seen: dict[int, list[str]] = {}

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        self.seen.setdefault(self.current_epoch, []).extend(batch["src_text"])
        return self.weight * batch["src"].float().mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_lightning_reshuffles_every_epoch(toy_dm: TranslationDataModule) -> None:
    module = _RecordingModule()
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=3,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, datamodule=toy_dm)
    assert sorted(module.seen) == [0, 1, 2]
    for epoch in module.seen.values():
        assert sorted(epoch) == sorted(toy_dm.texts("train")[0])
    assert module.seen[0] != module.seen[1] != module.seen[2]
    assert trainer.train_dataloader.batch_sampler.epoch == 2


# ============================================================================== multi30k
@pytest.mark.multi30k
def test_multi30k_loads_every_pair(multi30k_dir: Path) -> None:
    corpus = load_parallel_corpus(str(multi30k_dir), "de", "en")
    assert {split: len(ds) for split, ds in corpus.items()} == {
        "train": 29000,
        "validation": 1014,
        "test": 1000,
    }
    cleaned, counts = clean_pairs(corpus, "de", "en")
    for split in corpus:
        assert len(cleaned[split]) + sum(counts[split].values()) == len(corpus[split])
    assert counts == {
        split: {"empty": 0, "too_long": 0} for split in corpus
    }  # Multi30k has no empty lines


@pytest.mark.multi30k
def test_multi30k_datamodule(multi30k_dir: Path, tmp_path: Path) -> None:
    dm = TranslationDataModule(source=str(multi30k_dir), cache_dir=str(tmp_path), max_tokens=4096)
    dm.setup("fit")
    assert dm.tokenizer is not None and dm.tokenizer.vocab_size == 8000
    assert dm.dataset is not None
    sizes = {split: len(ds) + sum(dm.skipped[split].values()) for split, ds in dm.dataset.items()}
    assert sizes == {"train": 29000, "validation": 1014, "test": 1000}
    assert len(dm.dataset["test"]) == 1000  # evaluation splits keep every pair
    sampler = dm.train_dataloader().batch_sampler
    lengths = data_module.example_lengths(dm.dataset["train"])
    shapes = set()
    for batch in sampler:
        padded = _padded_len(lengths, batch, 8)
        assert len(batch) * padded <= 4096
        shapes.add((len(batch), padded))
    assert len(shapes) <= 20


def test_characters_the_vocabulary_lacks_are_counted_per_split(
    toy_corpus_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A character the tokenizer never saw (here: not in the train split; in a large corpus:
    missed by data.tokenizer_sample) is read as <unk>; data preparation said nothing of it,
    while inference counts and names such characters."""
    directory = _copy_toy(toy_corpus_dir, tmp_path / "corpus")
    val = directory / "val.de"
    lines = _lines(val)
    lines[2] += " ж"  # line 3
    lines[6] += " Ω"  # line 7
    val.write_text("".join(f"{s}\n" for s in lines), encoding="utf-8")
    dm = TranslationDataModule(source=str(directory), vocab_size=150, cache_dir=tmp_path / "c")
    for attempt in ("built", "from the cache"):  # the cache record keeps the count
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="minitx.data"):
            dm.setup("fit")
        said = [r.getMessage() for r in caplog.records if "vocabulary lacks" in r.getMessage()]
        assert said == [
            "validation: 2 of 10 pairs hold characters the vocabulary lacks, read as <unk>: "
            "'ж' 'Ω' (lines 3, 7); the tokenizer learns its characters from "
            "data.tokenizer_sample sentences of the train split (null: all of them)"
        ], attempt
        dm = TranslationDataModule(source=str(directory), vocab_size=150, cache_dir=tmp_path / "c")
