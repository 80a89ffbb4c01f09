"""Tests for minitx.tokenizer: special ids, batch encode/decode, pickling, caching, errors."""

from __future__ import annotations

import gzip
import io
import logging
import pickle
import re
import time
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from minitx import tokenizer as tokenizer_module
from minitx.errors import DataError
from minitx.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer


def _toy_sentences(toy_corpus_dir: Path) -> list[str]:
    lines = []
    for lang in ("de", "en"):
        lines += (toy_corpus_dir / f"train.{lang}").read_text(encoding="utf-8").splitlines()
    return lines


@pytest.fixture
def sentences(toy_corpus_dir: Path) -> list[str]:
    return _toy_sentences(toy_corpus_dir)


@pytest.fixture
def tok(sentences: list[str]) -> Tokenizer:
    return Tokenizer.train(sentences, vocab_size=150)


def test_special_ids(tok: Tokenizer) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert tok.id_to_piece([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert tok.vocab_size == 150


def test_encode_adds_no_specials_and_round_trips(tok: Tokenizer, sentences: list[str]) -> None:
    ids = tok.encode(sentences)
    assert len(ids) == len(sentences)
    assert all(seq and min(seq) > EOS_ID for seq in ids), "encode must not add pad/unk/bos/eos"
    assert tok.decode(ids) == sentences


def test_decode_drops_pad_bos_and_everything_after_eos(tok: Tokenizer) -> None:
    first, second = tok.encode(["ein mann fährt fahrrad .", "a dog sleeps ."])
    noisy = [BOS_ID, *first, EOS_ID, *second, PAD_ID, PAD_ID]
    padded = [BOS_ID, *second, PAD_ID]
    assert tok.decode([noisy, padded]) == ["ein mann fährt fahrrad .", "a dog sleeps ."]
    # tensors (e.g. generated ids) work too
    width = max(len(noisy), len(padded))
    tensor = torch.tensor([row + [PAD_ID] * (width - len(row)) for row in (noisy, padded)])
    assert tok.decode(tensor) == ["ein mann fährt fahrrad .", "a dog sleeps ."]


def test_unseen_characters_map_to_unk(tok: Tokenizer) -> None:
    (ids,) = tok.encode(["日本"])
    assert UNK_ID in ids


def test_encode_rejects_a_bare_string(tok: Tokenizer) -> None:
    with pytest.raises(TypeError, match="list of sentences"):
        tok.encode("ein mann")


def test_id_to_piece_range_check(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.id_to_piece([tok.vocab_size])


def test_pickle_and_bytes_round_trip(tok: Tokenizer, tmp_path: Path) -> None:
    text = ["zwei hunde spielen im schnee ."]
    copy = pickle.loads(pickle.dumps(tok))
    assert copy == tok and copy.model_bytes == tok.model_bytes
    assert copy.encode(text) == tok.encode(text)
    assert Tokenizer(tok.model_bytes).encode(text) == tok.encode(text)
    tok.save(tmp_path / "tok.model")
    assert Tokenizer.load(tmp_path / "tok.model").encode(text) == tok.encode(text)
    # plain sentencepiece can read the saved file
    sp = spm.SentencePieceProcessor(model_file=str(tmp_path / "tok.model"))
    assert sp.encode(text) == tok.encode(text)


def test_datasets_fingerprint_is_stable(tok: Tokenizer) -> None:
    """datasets hashes map functions; equal tokenizers must hash equal (cache hits)."""
    from datasets.fingerprint import Hasher

    assert Hasher.hash(tok) == Hasher.hash(pickle.loads(pickle.dumps(tok)))


def test_bpe_model(sentences: list[str]) -> None:
    bpe = Tokenizer.train(sentences, vocab_size=150, model_type="bpe")
    assert bpe.vocab_size == 150
    assert bpe.decode(bpe.encode(sentences[:5])) == sentences[:5]


def test_cache_hit_skips_training(
    sentences: list[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = Tokenizer.train(sentences, vocab_size=150, cache_dir=tmp_path)
    cached = list(tmp_path.glob("spm-*.model"))
    assert len(cached) == 1

    def no_training(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("trained again despite a cached model")

    monkeypatch.setattr(tokenizer_module, "_train_bytes", no_training)
    with caplog.at_level("INFO", logger="minitx.tokenizer"):
        second = Tokenizer.train(sentences, vocab_size=150, cache_dir=tmp_path)
    assert second == first
    assert "Loaded cached tokenizer" in caplog.text
    # other settings or other data are cache misses
    with pytest.raises(AssertionError, match="trained again"):
        Tokenizer.train(sentences, vocab_size=140, cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="trained again"):
        Tokenizer.train(sentences[:-1], vocab_size=150, cache_dir=tmp_path)
    # an explicit cache_key replaces the data hash
    monkeypatch.undo()
    keyed = Tokenizer.train(sentences, vocab_size=150, cache_dir=tmp_path, cache_key="toy-v1")
    monkeypatch.setattr(tokenizer_module, "_train_bytes", no_training)
    assert (
        Tokenizer.train(["other data"], vocab_size=150, cache_dir=tmp_path, cache_key="toy-v1")
        == keyed
    )


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_damaged_cached_tokenizer_is_trained_again(
    sentences: list[str], tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    """A cut-short or bit-flipped spm-*.model in the cache is not an error on every later
    run: one warning naming the file, the model trained again, the cache repaired."""
    first = Tokenizer.train(sentences, vocab_size=150, cache_dir=tmp_path)
    (model,) = tmp_path.glob("spm-*.model")
    data = bytearray(model.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 3]
    else:  # a flipped bit in a piece's text: still a parseable model, a different one
        data[data.index(first.id_to_piece([100])[0].encode())] ^= 1
    model.write_bytes(bytes(data))
    with caplog.at_level("INFO", logger="minitx.tokenizer"):
        second = Tokenizer.train(sentences, vocab_size=150, cache_dir=tmp_path)
    assert second == first
    notices = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(notices) == 1 and str(model) in notices[0] and "\n" not in notices[0]
    assert "training it again" in notices[0]
    caplog.clear()
    with caplog.at_level("INFO", logger="minitx.tokenizer"):
        assert Tokenizer.train(sentences, vocab_size=150, cache_dir=tmp_path) == first
    assert "Loaded cached tokenizer" in caplog.text and "WARNING" not in caplog.text


def test_vocab_too_large_is_a_clear_error(sentences: list[str]) -> None:
    with pytest.raises(ValueError, match=r"vocab_size=8000 is too large .* at most \d+ pieces"):
        Tokenizer.train(sentences, vocab_size=8000)


def test_vocab_too_small_is_a_clear_error_naming_the_smallest_that_trains(
    sentences: list[str],
) -> None:
    with pytest.raises(ValueError, match=r"vocab_size=10 is too small") as caught:
        Tokenizer.train(sentences, vocab_size=10)
    smallest = int(re.search(r"to (\d+) or more", str(caught.value)).group(1))
    Tokenizer.train(sentences, vocab_size=smallest)  # the size it names trains
    with pytest.raises(ValueError, match=r"is too small"):
        Tokenizer.train(sentences, vocab_size=smallest - 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model_type": "word"}, "model_type must be one of"),
        ({"vocab_size": 3}, "vocab_size must be at least 5"),
    ],
)
def test_bad_arguments(sentences: list[str], kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Tokenizer.train(sentences, **kwargs)


def test_no_sentences() -> None:
    with pytest.raises(ValueError, match="none holds more than white space"):
        Tokenizer.train(["", "  "], vocab_size=100)


def test_only_over_long_sentences_say_so(sentences: list[str]) -> None:
    """A corpus read as one line per side (one long line, or \\r line ends): sentencepiece
    skips it as too long and failed with its internal `[!sentences_.empty()]`."""
    one_line = " ".join(sentences * 40)
    with pytest.raises(DataError, match=r"all 1 are longer than sentencepiece's limit of 4,192"):
        Tokenizer.train([one_line], vocab_size=100)


def test_sentences_over_sentencepieces_limit_are_counted_not_passed_over(
    sentences: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """sentencepiece's trainer skips a sentence over 4,192 bytes without a word, and the log
    said the tokenizer trained on every sentence it was given."""
    long = [" ".join(sentences) * 2] * 3
    assert all(len(s.encode()) > 4192 for s in long)
    with caplog.at_level(logging.INFO, logger="minitx.tokenizer"):
        Tokenizer.train(sentences + long, vocab_size=100)
    n = len(sentences)
    assert f"3 of {n + 3} tokenizer training sentences are longer than 4,192 bytes" in caplog.text
    assert f"pieces on {n} sentences" in caplog.text


def test_garbage_bytes_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a sentencepiece model"):
        Tokenizer(b"certainly not a model")
    (tmp_path / "bad.model").write_bytes(gzip.compress(b"junk"))
    with pytest.raises(ValueError, match="bad.model.*not a sentencepiece model"):
        Tokenizer.load(tmp_path / "bad.model")
    with pytest.raises(FileNotFoundError, match="missing.model"):
        Tokenizer.load(tmp_path / "missing.model")


def test_model_with_other_special_ids_is_rejected(sentences: list[str]) -> None:
    writer = io.BytesIO()  # sentencepiece defaults: unk=0, bos=1, eos=2, no pad
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences), model_writer=writer, vocab_size=100, minloglevel=2
    )
    with pytest.raises(ValueError, match="special ids .* minitx needs"):
        Tokenizer(writer.getvalue())


@pytest.mark.multi30k
def test_multi30k_joint_unigram_8000_trains_quickly(multi30k_dir: Path) -> None:
    sentences = []
    for lang in ("de", "en"):
        plain = multi30k_dir / f"train.{lang}"
        raw = (
            plain.read_bytes()
            if plain.is_file()
            else gzip.decompress(Path(f"{plain}.gz").read_bytes())
        )
        sentences += raw.decode("utf-8").split("\n")[:29_000]
    assert len(sentences) == 58_000
    start = time.perf_counter()
    tok = Tokenizer.train(sentences, vocab_size=8000, model_type="unigram")
    seconds = time.perf_counter() - start
    assert seconds < 60, f"tokenizer training took {seconds:.1f} s"
    assert tok.vocab_size == 8000
    assert tok.decode(tok.encode(sentences[:100])) == sentences[:100]
    ids = tok.encode(sentences)
    unk_rate = sum(seq.count(UNK_ID) for seq in ids) / sum(map(len, ids))
    assert unk_rate == 0.0  # character_coverage=1.0 covers every training character
