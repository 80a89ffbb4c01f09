"""Corpora shipped inside the package: `builtin:toy` works from any directory, and
MINITX_DATA_DIR (which replaces hub ids) never replaces it; an empty source is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from minitx.data import (
    BUILTIN_CORPORA,
    builtin_corpus_dir,
    load_parallel_corpus,
    resolve_data_source,
)
from minitx.data.datamodule import TranslationDataModule
from minitx.errors import MinitxError


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


@pytest.mark.parametrize("data_dir", [None, "corpora"])
@pytest.mark.parametrize("source", ["", "  "])
def test_an_empty_source_is_refused_not_read_as_the_current_directory(
    source: str, data_dir: str | None, monkeypatch: pytest.MonkeyPatch
):
    """Path("") is ".": an unset $DATA read the current directory as the corpus."""
    if data_dir is None:
        monkeypatch.delenv("MINITX_DATA_DIR", raising=False)
    else:
        monkeypatch.setenv("MINITX_DATA_DIR", data_dir)
    with pytest.raises(ValueError, match="is empty .*a shell variable may be unset"):
        resolve_data_source(source)
    with pytest.raises(ValueError, match="is empty"):  # before a run directory is made
        TranslationDataModule(source=source)


@pytest.mark.parametrize(
    ("kind", "error"), [("file", "DataError"), ("missing", "MissingFileError")]
)
def test_a_data_dir_variable_naming_no_directory_says_so(
    kind: str, error: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Was: "data source '/x/train.de' is a single file", without a word of where the path
    came from (nothing the user configured)."""
    path = tmp_path / "train.de"
    if kind == "file":
        path.write_text("Ein Hund.\n", encoding="utf-8")
    monkeypatch.setenv("MINITX_DATA_DIR", str(path))
    with pytest.raises(MinitxError, match=rf"^MINITX_DATA_DIR={path} .*or unset it$") as caught:
        resolve_data_source("bentrevett/multi30k")
    assert type(caught.value).__name__ == error
    assert resolve_data_source(str(tmp_path)) == str(tmp_path)  # a local source: not replaced
    monkeypatch.setenv("MINITX_DATA_DIR", str(tmp_path / "{split}.jsonl"))  # a pattern: kept
    assert resolve_data_source("bentrevett/multi30k") == str(tmp_path / "{split}.jsonl")


def test_an_unreachable_hub_dataset_names_the_files_of_its_own_language_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Was: German and English file names (train.de, ...) for any hub dataset offline."""
    import datasets

    from minitx.data import open_parallel_corpus
    from minitx.errors import SourceUnreachableError

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(SourceUnreachableError) as error:
        open_parallel_corpus("wmt/wmt16", "en", "ro")
    assert (
        "(e.g. train.en, train.ro, val.en, val.ro, test_2016_flickr.en, test_2016_flickr.ro,"
        in (str(error.value))
    )


@pytest.mark.parametrize(
    ("files", "said"),
    [
        (["dataset_dict.json"], "It holds a dataset saved with datasets' save_to_disk, which"),
        (["data/train-00000-of-00001.parquet"], "Parquet files are read through datasets: "),
        (["corpus.tsv"], "found splits [], languages []; files: [corpus.tsv]"),  # not a language
    ],
    ids=["save-to-disk", "parquet", "tsv"],
)
def test_a_directory_in_another_format_says_how_to_read_it(
    files: list[str], said: str, tmp_path: Path
) -> None:
    """Was: only the missing raw files, with 'tsv' among the languages found."""
    from minitx.data import open_parallel_corpus
    from minitx.errors import MissingFileError

    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}", encoding="utf-8")
    with pytest.raises(MissingFileError) as error:
        open_parallel_corpus(str(tmp_path), "de", "en")
    assert said in str(error.value)
