"""Corpora larger than memory: streamed reading, the tokenizer's bounded sample, one
tokenization per split into a memory-mapped cache that later runs reuse, and the IWSLT'14 /
WMT'14 configs on local stand-ins of their hub datasets.

Everything runs on the toy corpus (minitx/data/toy) or a few hundred generated lines; the
figures at scale come from `python scripts/benchmark.py --sections data`.
"""

from __future__ import annotations

import gzip
import logging
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
from helpers import CONFIG_DIR, TOY_CORPUS_DIR

from minitx import textio
from minitx import tokenizer as tokenizer_module
from minitx.cli.train import build_cli
from minitx.data import (
    DATA_DIR_ENV,
    clean_pairs,
    load_parallel_corpus,
    side_texts,
)
from minitx.data import sources as sources_module
from minitx.data.datamodule import TranslationDataModule
from minitx.data.sample import sample_sentences
from minitx.data.sources import open_parallel_corpus
from minitx.errors import DataError, VocabularyTooLargeError
from minitx.textio import iter_lines, quote_lines
from minitx.tokenizer import Tokenizer

TOY_TRAIN = 60


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _corpus_with_gaps(directory: Path) -> Path:
    """The toy corpus with an empty training line (3) and an empty validation side (5)."""
    shutil.copytree(TOY_CORPUS_DIR, directory)
    for name, index in (("train.de", 2), ("val.en", 4)):
        lines = _lines(directory / name)
        lines[index] = "  "
        (directory / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return directory


def _count_encoded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Record how many sentences each `Tokenizer.encode` call gets."""
    calls: list[int] = []
    encode = Tokenizer.encode

    def counting(self: Tokenizer, texts: list[str]) -> list[list[int]]:
        calls.append(len(texts))
        return encode(self, texts)

    monkeypatch.setattr(Tokenizer, "encode", counting)
    return calls


# ================================================================================ streams
@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_lines_read_in_blocks_as_the_whole_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Block boundaries anywhere (inside a multi-byte character, a CRLF, the BOM) change
    nothing: lines split on \\n only, \\r removed, a BOM dropped at the start only."""
    monkeypatch.setattr(textio, "READ_BYTES", block)
    text = "\ufeffeins\r\nzwei\x0bdrei\n\nüber\u2028straße\r\n\ufeffvier"
    path = tmp_path / "x.de"
    path.write_bytes(text.encode("utf-8"))
    assert list(iter_lines(path)) == ["eins", "zwei\x0bdrei", "", "über\u2028straße", "\ufeffvier"]


def test_lines_of_a_gzip_file_are_read_whatever_its_name(tmp_path: Path) -> None:
    """One reader for every text file: gzip is known by its first bytes, as minitx-translate's
    --input knows it (a corpus file was decompressed only when named .gz, and a plain text
    file named .gz was refused as a damaged gzip file)."""
    lines = ["eins", "zwei", "über"]
    packed, plain = tmp_path / "packed.de", tmp_path / "plain.de.gz"
    packed.write_bytes(gzip.compress("\n".join(lines).encode("utf-8")))
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert list(iter_lines(packed)) == lines == list(iter_lines(plain))
    with pytest.raises(DataError, match=r"is a directory; give a text file, one sentence per"):
        list(iter_lines(tmp_path))


def test_a_line_without_end_is_refused_at_the_limit_not_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file without newlines (a device such as /dev/zero, binary data) was read whole,
    until memory ran out: the reader stops at the limit, naming the line."""
    monkeypatch.setattr(textio, "READ_BYTES", 64)
    monkeypatch.setattr(textio, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "long.de"
    path.write_text("kurz\n" + "a" * 1001 + "\n", encoding="utf-8")
    lines = iter_lines(path)
    assert next(lines) == "kurz"
    with pytest.raises(
        DataError, match=r"long\.de: line 2 runs past 1,000 bytes without a newline"
    ):
        next(lines)
    path.write_text("kurz\n" + "a" * 1000 + "\n", encoding="utf-8")  # at the limit: read
    assert list(iter_lines(path)) == ["kurz", "a" * 1000]


def test_unequal_sides_are_found_while_streaming(tmp_path: Path) -> None:
    directory = tmp_path / "c"
    shutil.copytree(TOY_CORPUS_DIR, directory)
    (directory / "train.en").write_text("\n".join(_lines(directory / "train.en")[:-2]) + "\n")
    streams = open_parallel_corpus(str(directory), "de", "en")
    with pytest.raises(DataError, match=r"train\.de has 60 lines but .*train\.en has 58"):
        list(streams["train"].chunks(chunk_size=7))


# ================================================================= the tokenizer's sample
def test_a_corpus_within_the_sample_trains_on_every_sentence_in_order(tmp_path: Path) -> None:
    """Below the limit the tokenizer sees exactly what it saw before sampling existed: the
    cleaned source side, then the target side (so Multi30k's tokenizer is unchanged)."""
    directory = _corpus_with_gaps(tmp_path / "c")
    corpus = load_parallel_corpus(str(directory), "de", "en")
    cleaned, _ = clean_pairs(corpus, "de", "en")
    expected = side_texts(cleaned["train"], "de") + side_texts(cleaned["train"], "en")
    train = open_parallel_corpus(str(directory), "de", "en")["train"]
    for limit in (None, len(expected), 10**6):
        assert list(sample_sentences(train, limit, seed=0, chunk_size=7)) == expected


def test_a_larger_corpus_trains_on_a_bounded_seeded_sample(tmp_path: Path) -> None:
    train = open_parallel_corpus(str(TOY_CORPUS_DIR), "de", "en")["train"]
    de, en = (_lines(TOY_CORPUS_DIR / f"train.{lang}") for lang in ("de", "en"))
    first = list(sample_sentences(train, 50, seed=0, chunk_size=7))
    assert len(first) == 50 and len(set(first)) == 50
    assert list(sample_sentences(train, 50, seed=0, chunk_size=13)) == first  # chunking: no effect
    assert list(sample_sentences(train, 50, seed=1)) != first
    sources = [s for s in first if s in de]
    assert first == sources + [s for s in en if s in first]  # source side first, file order
    assert sources == [s for s in de if s in sources]
    # uniform over both sides: over many seeds every sentence is drawn about 50/120 of the time
    drawn = np.zeros(2 * TOY_TRAIN)
    everything = de + en
    for seed in range(200):
        for s in sample_sentences(train, 50, seed=seed):
            drawn[everything.index(s)] += 1
    assert 0.25 < drawn.min() / 200 and drawn.max() / 200 < 0.6


def test_the_datamodule_trains_the_tokenizer_on_the_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[list[str]] = []
    train_bytes = tokenizer_module._train_bytes

    def recording(sentences: list[str], **kwargs: object) -> bytes:
        seen.append(list(sentences))
        return train_bytes(sentences, **kwargs)

    monkeypatch.setattr(tokenizer_module, "_train_bytes", recording)
    for limit in (100, None):
        dm = TranslationDataModule(
            source=str(TOY_CORPUS_DIR), vocab_size=120, cache_dir=None, tokenizer_sample=limit
        )
        dm.setup()
    assert [len(s) for s in seen] == [100, 2 * TOY_TRAIN]
    with pytest.raises(ValueError, match="tokenizer_sample must be >= 1"):
        TranslationDataModule(tokenizer_sample=0)


def test_a_vocabulary_too_large_for_the_sample_names_the_sample() -> None:
    """Where the sample, not the corpus, sets the limit on the pieces, raising
    data.tokenizer_sample is a fix too, and the message says so; for the whole split it is not."""
    for limit, names_sample in ((10, True), (None, False)):
        dm = TranslationDataModule(
            source=str(TOY_CORPUS_DIR), vocab_size=2000, cache_dir=None, tokenizer_sample=limit
        )
        with pytest.raises(VocabularyTooLargeError, match="vocab_size=2000 is too large") as info:
            dm.setup()
        assert ("raise data.tokenizer_sample (10," in str(info.value)) is names_sample


# ====================================================================== streamed, cached
def test_preparation_never_holds_the_corpus_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training reads the corpus as streams into Arrow files it memory-maps: neither the
    in-memory loader nor a Python-built dataset is involved."""

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the corpus was loaded into memory")

    monkeypatch.setattr(sources_module, "load_parallel_corpus", refused)
    monkeypatch.setattr(datasets.Dataset, "from_dict", refused)
    cache = tmp_path / "cache"
    dm = TranslationDataModule(source=str(TOY_CORPUS_DIR), vocab_size=150, cache_dir=str(cache))
    dm.setup()
    assert dm.dataset is not None
    for split, dataset in dm.dataset.items():
        (mapped,) = dataset.cache_files  # memory-mapped from the cache, nothing in RAM
        assert Path(mapped["filename"]).parent == cache and split in mapped["filename"]
    assert next(iter(dm.train_dataloader()))["src"].ndim == 2


def test_each_split_is_tokenized_once_then_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    encoded = _count_encoded(monkeypatch)
    settings = dict(source=str(TOY_CORPUS_DIR), vocab_size=150, cache_dir=str(tmp_path / "c"))
    first = TranslationDataModule(**settings)
    first.setup()
    assert sum(encoded) == 2 * (60 + 10 + 10)  # every sentence of every split, once
    encoded.clear()
    for _ in range(2):  # the next run, another DDP process: they map the same files
        again = TranslationDataModule(**settings)
        with caplog.at_level(logging.INFO, logger="minitx"):
            again.setup()
        assert encoded == []
        assert again.dataset["train"][:] == first.dataset["train"][:]
    assert "Trained a" not in caplog.text and caplog.text.count("loading tokenized data") == 6


@pytest.mark.parametrize("max_positions", [None, 16])
def test_the_streamed_pass_equals_the_in_memory_steps(
    tmp_path: Path, max_positions: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    """Cleaning, tokenizing, dropping over-long training pairs and cutting over-long
    evaluation pairs in one pass give the rows, counts and warnings of the separate steps
    (the length rules spelled out here: eos / bos make a side one token longer)."""
    directory = _corpus_with_gaps(tmp_path / "c")
    dm = TranslationDataModule(
        source=str(directory),
        vocab_size=150,
        max_len=16,
        cache_dir=str(tmp_path / "cache"),
        max_positions=max_positions,
    )
    with caplog.at_level(logging.WARNING, logger="minitx"):
        dm.setup()
    streamed_log = list(caplog.messages)
    caplog.clear()
    assert dm.tokenizer is not None and dm.dataset is not None
    with caplog.at_level(logging.WARNING, logger="minitx"):
        cleaned, skipped = clean_pairs(load_parallel_corpus(str(directory), "de", "en"), "de", "en")
    expected_log = list(caplog.messages)
    columns = ["line", "src_text", "tgt_text", "src_ids", "tgt_ids", "src_len", "tgt_len"]
    for split in skipped:
        rows = []
        for row in cleaned[split].to_list():  # each kept pair encoded on its own
            src, tgt = row["translation"]["de"], row["translation"]["en"]
            src_ids, tgt_ids = dm.tokenizer.encode([src, tgt])
            values = [row["line"], src, tgt, src_ids, tgt_ids, len(src_ids), len(tgt_ids)]
            rows.append(dict(zip(columns, values, strict=True)))
        too_long = [row for row in rows if max(row["src_len"], row["tgt_len"]) + 1 > 16]
        if split == "train":
            rows = [row for row in rows if row not in too_long]
            skipped[split]["too_long"] = len(too_long)
            lines = quote_lines([row["line"] for row in too_long])
            expected_log.append(
                f"train: skipped {len(too_long)} of {len(cleaned[split])} pairs longer than "
                f"max_len=16 tokens ({lines})."
            )
        elif max_positions is not None:
            cut = [
                row["line"]
                for row in rows
                if max(row["src_len"], row["tgt_len"]) + 1 > max_positions
            ]
            skipped[split]["truncated"] = len(cut)
            for row in rows:
                for side in ("src", "tgt"):
                    row[f"{side}_ids"] = row[f"{side}_ids"][: max_positions - 1]
                    row[f"{side}_len"] = len(row[f"{side}_ids"])
            if cut:
                expected_log.append(
                    f"{split}: {len(cut)} of {len(rows)} pairs are longer than the model's "
                    f"max_positions={max_positions}; their ids are cut to fit for the loss, "
                    f"their texts stay whole for BLEU ({quote_lines(cut)})."
                )
        assert dm.dataset[split].select_columns(columns).to_list() == rows
    assert dm.skipped == skipped
    assert skipped["train"]["empty"] == 1 and skipped["train"]["too_long"] > 0
    if max_positions is not None:
        assert skipped["validation"]["truncated"] + skipped["test"]["truncated"] > 0
    assert sorted(streamed_log) == sorted(expected_log)  # the same warnings


# ======================================================================= benchmark configs
HUB_CONFIGS = {
    "iwslt14_de_en": (
        "bbaaaa/iwslt14-de-en",
        {"revision": "refs/convert/parquet", "data_dir": "de-en"},
        ("de", "en"),
    ),
    "wmt14_en_de": ("wmt/wmt14", {"name": "de-en"}, ("en", "de")),
}


def _hub_stand_in(directory: Path) -> dict[str, str]:
    """The toy corpus as the hub serves these datasets: Parquet files of one `translation`
    column of {de, en}, splits train / validation / test."""
    corpus = load_parallel_corpus(str(TOY_CORPUS_DIR), "de", "en")
    directory.mkdir()
    files = {}
    for split, dataset in corpus.items():
        files[split] = str(directory / f"{split}-00000-of-00001.parquet")
        dataset.to_parquet(files[split])
    return files


@pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")  # pytest's own argv
@pytest.mark.parametrize("config", sorted(HUB_CONFIGS))
def test_the_benchmark_configs_load_their_hub_dataset(
    config: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--config iwslt14_de_en` / `wmt14_en_de` ask `datasets.load_dataset` for the real
    repository, configuration and branch; a local stand-in with the same columns answers."""
    source, options, (src, tgt) = HUB_CONFIGS[config]
    files = _hub_stand_in(tmp_path / "hub")
    asked: list[tuple[str, dict]] = []
    load_dataset = datasets.load_dataset

    def stand_in(path: str, **kwargs: str) -> datasets.DatasetDict:
        asked.append((path, kwargs))
        return load_dataset("parquet", data_files=files, cache_dir=str(tmp_path / "hf"))

    monkeypatch.setattr(datasets, "load_dataset", stand_in)
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--config", config, "--trainer.logger", "false", "--data.vocab_size", "150"])
    dm = cli.datamodule
    hparams = dm.hparams
    assert (hparams.source, hparams.hub_options, hparams.src_lang, hparams.tgt_lang) == (
        source,
        options,
        src,
        tgt,
    )
    dm.setup("fit")
    assert asked == [(source, options)]
    assert {split: len(ds) for split, ds in dm.dataset.items()} == {
        "train": TOY_TRAIN,
        "validation": 10,
        "test": 10,
    }
    assert dm.texts("test")[0] == _lines(TOY_CORPUS_DIR / f"test_2016_flickr.{src}")
    assert next(iter(dm.train_dataloader()))["src"].shape[0] >= 1
    expected = yaml_model(config)
    assert cli.model.model_config.d_model == expected["d_model"] == 512


def yaml_model(config: str) -> dict:
    import yaml

    return yaml.safe_load((CONFIG_DIR / f"{config}.yaml").read_text())["model"]["transformer"]


def test_unknown_hub_options_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("loaded"))
    with pytest.raises(DataError, match=r"unknown keys \['split'\].*known keys are"):
        open_parallel_corpus("wmt/wmt14", "en", "de", hub_options={"split": "train"})


def test_hub_options_on_a_local_source_are_reported_not_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    options = {"revision": "refs/convert/parquet"}
    with caplog.at_level(logging.WARNING, logger=sources_module.__name__):
        open_parallel_corpus(str(TOY_CORPUS_DIR), "de", "en")
        assert not caplog.records
        streams = open_parallel_corpus(str(TOY_CORPUS_DIR), "de", "en", hub_options=options)
    assert "train" in streams
    assert [r.getMessage() for r in caplog.records] == [
        f"data.hub_options {options} are for hub datasets; the local source "
        f"{str(TOY_CORPUS_DIR)!r} does not use them."
    ]
