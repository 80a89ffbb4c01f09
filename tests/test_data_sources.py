"""Corpora shipped inside the package: `builtin:toy` works from any directory, and
MINITX_DATA_DIR (which replaces hub ids) never replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from minitx.data import (
    BUILTIN_CORPORA,
    builtin_corpus_dir,
    load_parallel_corpus,
    resolve_data_source,
)


def test_builtin_toy_loads_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    corpus = load_parallel_corpus("builtin:toy", "de", "en")
    assert {split: len(corpus[split]) for split in corpus} == {
        "train": 60,
        "validation": 10,
        "test": 10,
    }
    assert builtin_corpus_dir("toy").is_dir() and "toy" in BUILTIN_CORPORA
    assert Path(resolve_data_source("builtin:toy")) == builtin_corpus_dir("toy")


def test_data_dir_variable_does_not_replace_a_builtin_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("MINITX_DATA_DIR", str(tmp_path))
    assert Path(resolve_data_source("builtin:toy")) == builtin_corpus_dir("toy")
    assert resolve_data_source("bentrevett/multi30k") == str(tmp_path)  # a hub id: replaced


def test_unknown_builtin_corpus_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown builtin corpus 'wmt'; minitx ships \['toy'\]"):
        load_parallel_corpus("builtin:wmt", "de", "en")
    with pytest.raises(ValueError, match="unknown builtin corpus"):
        resolve_data_source("builtin:wmt")


def test_one_language_twice_is_a_config_error_naming_the_settings(tmp_path: Path) -> None:
    """The loader and the data module refuse it with one message (two copies said "they must
    differ", as two error types, naming no setting)."""
    from minitx.data.datamodule import TranslationDataModule
    from minitx.data.sources import open_parallel_corpus
    from minitx.errors import ConfigError

    for make in (
        lambda: open_parallel_corpus(str(tmp_path), "de", "de"),
        lambda: TranslationDataModule(source=str(tmp_path), src_lang="de", tgt_lang="de"),
    ):
        with pytest.raises(ConfigError, match="both 'de': give two different languages"):
            make()
