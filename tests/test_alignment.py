"""minitx.alignment: hard alignments from cross-attention, on handcrafted maps (where the right
answer is known) and on the tiny checkpoint (bounds, coverage, batched == one sentence)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import (
    SCRIPTS_DIR,
    TOY_TEST_REFERENCES,
    TOY_TEST_SOURCES,
    parse_alignment,
    subprocess_env,
)

from minitx.alignment import (
    Alignment,
    AlignmentConfig,
    align,
    combine_cross_attention,
    format_alignment,
    word_index,
)
from minitx.decoding import DecodingConfig
from minitx.errors import ConfigError
from minitx.maps import AttentionMaps
from minitx.translator import Translator
from minitx.vocab import EOS_PIECE

# "ein Mann fährt" -> "a man rides": 3 source words in 4 pieces, 3 target words in 4 pieces.
SRC = ["▁ein", "▁Mann", "▁fähr", "t", "</s>"]
TGT_IN = ["<s>", "▁a", "▁man", "▁ri", "des"]  # decoder inputs; row t predicts TGT_IN[t + 1]


def one_hot_rows(columns: list[int], width: int) -> torch.Tensor:
    """(T, S) map whose row t puts 0.7 on `columns[t]` and spreads the rest evenly."""
    rows = torch.full((len(columns), width), 0.3 / (width - 1))
    rows[torch.arange(len(columns)), columns] = 0.7
    return rows


def alignment_from_maps(maps: AttentionMaps, config: AlignmentConfig) -> Alignment:
    """The alignment of one sentence pair from its maps, without the source eos column and
    the row predicting the target eos: what `Translator.translate_with_alignment` gives."""
    weights = combine_cross_attention(maps.cross_attentions, config)  # (T, S)
    src = maps.src_tokens[:-1] if maps.src_tokens[-1:] == [EOS_PIECE] else maps.src_tokens
    tgt = maps.predicted_tokens
    tgt = tgt[:-1] if tgt[-1:] == [EOS_PIECE] else tgt
    return align(weights, src, tgt, config.unit)


def handcrafted_maps() -> AttentionMaps:
    """Two decoder layers of two heads. Last layer, head average: the row predicting "▁a"
    looks at "▁ein", "▁man" at "▁Mann", "▁ri" and "des" at "t" and "▁fähr", the eos row at
    "</s>". Its head 1 alone, and layer 0, disagree."""
    width = len(SRC)
    last_h0 = one_hot_rows([0, 1, 3, 2, 4], width)
    last_h1 = one_hot_rows([0, 4, 3, 2, 4], width)  # "▁man" row -> eos column in this head
    first = one_hot_rows([2, 2, 0, 0, 4], width)
    cross = (torch.stack([first, first]), torch.stack([last_h0, last_h1]))  # (H, T, S) per layer
    return AttentionMaps(
        src_tokens=SRC,
        tgt_tokens=TGT_IN,
        encoder_attentions=(torch.eye(width)[None],),
        decoder_attentions=(torch.eye(len(TGT_IN))[None],) * 2,
        cross_attentions=cross,
    )


def test_handcrafted_maps_align_each_output_piece_with_the_row_predicting_it() -> None:
    maps = handcrafted_maps()
    last = AlignmentConfig(layer=-1)  # the mean of layers is tested below
    pieces = alignment_from_maps(maps, AlignmentConfig(layer=-1, unit="piece"))
    # "▁a"-0, "▁man"-1, "▁ri"-3, "des"-2; the eos row and the eos column are left out (the
    # head average of the "▁man" row ties "▁Mann" with "</s>": the eos column never wins)
    assert pieces == [(0, 0), (1, 1), (3, 2), (2, 3)]
    words = alignment_from_maps(maps, last)  # last layer, mean of heads, words
    assert words == [(0, 0), (1, 1), (2, 2)]  # "rides" <- "fährt"
    assert format_alignment(words) == "0-0 1-1 2-2"


def test_eos_column_never_wins_and_head_and_layer_are_selectable() -> None:
    maps = handcrafted_maps()
    # head 1 alone puts the most weight of the "▁man" row on eos: the next best source piece
    # is taken instead (as fairseq does).
    head1 = alignment_from_maps(maps, AlignmentConfig(head=1, unit="piece"))
    assert len(head1) == 4 and all(s < 4 for s, _ in head1)
    assert alignment_from_maps(maps, AlignmentConfig(layer=0, unit="piece")) == [
        (2, 0),
        (2, 1),
        (0, 2),
        (0, 3),
    ]
    assert alignment_from_maps(maps, AlignmentConfig(layer=-2, unit="piece")) == (
        alignment_from_maps(maps, AlignmentConfig(layer=0, unit="piece"))
    )
    mean = combine_cross_attention(maps.cross_attentions, AlignmentConfig(layer=None))
    expected = torch.stack(maps.cross_attentions).mean(0).mean(0)
    torch.testing.assert_close(mean, expected)
    head = combine_cross_attention(maps.cross_attentions, AlignmentConfig(layer=1, head=0))
    torch.testing.assert_close(head, maps.cross_attentions[1][0])


def test_word_alignment_aggregates_pieces() -> None:
    """A target word's rows are averaged and a source word's columns summed: the word with
    the most attention mass wins even when a single piece of another word is larger."""
    src = ["▁das", "▁Fahr", "rad", "▁rot"]
    tgt = ["▁the", "▁bi", "cycle"]
    weights = torch.tensor(
        [
            [0.9, 0.0, 0.0, 0.1],
            [0.0, 0.3, 0.3, 0.4],  # "rot" is the largest piece, "Fahrrad" the largest word
            [0.0, 0.5, 0.2, 0.3],
        ]
    )
    assert align(weights, src, tgt, "piece") == [(0, 0), (3, 1), (1, 2)]
    assert align(weights, src, tgt, "word") == [(0, 0), (1, 1)]
    assert align(weights, src, [], "word") == [] and align(weights[:0], [], tgt[:0]) == []
    for unit in ("piece", "word"):  # fewer columns than source pieces: was pairs that never
        with pytest.raises(ValueError, match="align: 3 attention columns for 4 source pieces"):
            align(weights[:, :3], src, tgt, unit)  # named the last piece, or a matmul error
    with pytest.raises(ValueError, match=r"align: weights \(4,\): give one \(T, S'\) map"):
        align(weights[0], src, tgt[:1])


def test_word_index() -> None:
    assert word_index(["▁A", "▁man", "▁rid", "es", "▁", "2", "."]) == [0, 1, 2, 2, 3, 3, 3]
    assert word_index(["ab", "▁c", "▁"]) == [0, 1, 1]  # no leading mark; a trailing bare mark
    assert word_index(["▁"]) == [None] and word_index([]) == []
    assert word_index(["▁", "<unk>", "in"]) == [0, 0, 0]  # source: unk is inside "Ein"
    assert word_index(["▁a", "<unk>", "in"], unk_is_word=True) == [0, 1, 2]  # "a ⁇ in"


def test_format_alignment() -> None:
    pairs = [(0, 0), (3, 1), (12, 2)]
    assert format_alignment(pairs) == "0-0 3-1 12-2"
    assert parse_alignment(format_alignment(pairs)) == pairs
    assert format_alignment([]) == ""


def test_alignment_config_errors() -> None:
    with pytest.raises(ConfigError, match="unit"):
        AlignmentConfig(unit="char")
    for config in (AlignmentConfig(layer=2), AlignmentConfig(layer=-3), AlignmentConfig(head=4)):
        with pytest.raises(ConfigError, match="does not exist"):
            config.check(n_layers=2, n_heads=4)
    AlignmentConfig(layer=-2, head=-4).check(n_layers=2, n_heads=4)
    # the mean by the name each caller gives it, and one layer as one
    with pytest.raises(ConfigError) as caught:
        AlignmentConfig(layer=5).check(n_layers=1, n_heads=4)
    assert str(caught.value) == (
        "alignment layer 5 does not exist: the model has 1 decoder layer (use -1..0, or their "
        "mean: --alignment-layer mean, or AlignmentConfig(layer=None) in Python)"
    )


# ------------------------------------------------------------------ on the tiny checkpoint
@pytest.fixture(scope="module")
def translator(tiny_checkpoint: Path) -> Translator:
    return Translator.from_pretrained(tiny_checkpoint)


SENTENCES = [TOY_TEST_SOURCES[0], "", TOY_TEST_SOURCES[3], "Ærøskøbing 42 ☃ !", "ein mann"]


@pytest.mark.parametrize("unit", ["word", "piece"])
def test_translate_with_alignment_bounds_and_coverage(translator: Translator, unit: str) -> None:
    config = AlignmentConfig(unit=unit)
    greedy = DecodingConfig(strategy="greedy")
    results = translator.translate_with_alignment(SENTENCES, greedy, alignment=config, batch_size=2)
    assert [r[0][0] for r in results] == translator.translate(SENTENCES, greedy)
    for source, hyps in zip(SENTENCES, results, strict=True):
        assert len(hyps) == 1
        text, _, pairs = hyps[0]
        if not source:
            assert pairs == []
            continue
        if unit == "word":
            n_src = len(source.split())
            # every target word exactly once, in order
            assert [t for _, t in pairs] == list(range(len(text.split()))), (text, pairs)
        else:
            n_src = len(translator.tokenizer.encode([source])[0])
            targets = [t for _, t in pairs]
            assert targets == list(range(len(targets)))  # one pair per generated piece
        assert all(0 <= s < n_src for s, _ in pairs), (source, pairs)
        assert parse_alignment(format_alignment(pairs)) == pairs


def test_batched_alignment_equals_the_maps_of_one_sentence(translator: Translator) -> None:
    """The batched teacher-forced pass gives what `Translator.attention` shows."""
    decoding = DecodingConfig(beam_size=3)
    config = AlignmentConfig(unit="piece", layer=None)
    sentences = [s for s in SENTENCES if s]
    batched = translator.translate_with_alignment(
        sentences, decoding, alignment=config, batch_size=8
    )
    for sentence, hyps in zip(sentences, batched, strict=True):
        maps = translator.attention(sentence, decoding=decoding)
        assert hyps[0][2] == alignment_from_maps(maps, config)


def test_n_best_and_sampled_translations_are_aligned(translator: Translator) -> None:
    results = translator.translate_with_alignment(
        SENTENCES[:1], DecodingConfig(strategy="sample", n_best=3, seed=1)
    )
    assert len(results[0]) == 3
    for text, _, pairs in results[0]:
        assert [t for _, t in pairs] == list(range(len(text.split())))


def test_align_given_translations(translator: Translator) -> None:
    sources, references = list(TOY_TEST_SOURCES[:4]), list(TOY_TEST_REFERENCES[:4])
    alignments = translator.align(sources + [""], references + ["a dog"], batch_size=3)
    assert alignments[-1] == []
    for source, reference, pairs in zip(sources, references, alignments[:-1], strict=True):
        assert [t for _, t in pairs] == list(range(len(reference.split())))
        assert all(0 <= s < len(source.split()) for s, _ in pairs)
    with pytest.raises(ConfigError, match="does not exist"):
        translator.align(sources, references, alignment=AlignmentConfig(layer=5))


def test_align_cuts_an_over_long_pair_and_says_so(
    translator: Translator, caplog: pytest.LogCaptureFixture
) -> None:
    limit = translator.model.config.max_positions - 1
    huge = " ".join(["mann"] * (limit + 50))  # more pieces than the model has positions
    with caplog.at_level("WARNING", logger="minitx.translator"):
        alignments = translator.align([TOY_TEST_SOURCES[0], huge], [TOY_TEST_REFERENCES[0], "a"])
    assert len(alignments) == 2 and all(0 <= s < limit for s, _ in alignments[1])
    assert "1 of 2 sentences have more than" in caplog.text
    assert "aligned their first" in caplog.text and "(line 2)" in caplog.text


def test_align_refuses_lists_of_other_lengths_or_one_string_before_reading_them(
    translator: Translator, caplog: pytest.LogCaptureFixture
) -> None:
    """The lengths and types are checked first: the sources' warnings (here, characters the
    vocabulary lacks) no longer come before the error, which is the same either way round."""
    sources = ["ein mann ж", TOY_TEST_SOURCES[1]]
    with caplog.at_level("WARNING"):
        with pytest.raises(ValueError, match="align: 2 sources but 1 translations"):
            translator.align(sources, ["a man"])
        with pytest.raises(TypeError, match="give a list of translations"):
            translator.align(sources, "a man")
    assert caplog.records == []


def test_the_alignment_layers_script_scores_every_layer_and_head(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """scripts/alignment_layers.py: one row per layer's mean, the mean of all and each head;
    a character the vocabulary lacks is said once per side, not once per layer and head."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    pairs = {"de": "Ein Mann mit einem roten Hut ж .\nZwei Hunde im Schnee .\n",
             "en": "A man in a red hat .\nTwo dogs in the snow .\n"}  # fmt: skip
    for lang, text in pairs.items():
        (corpus / f"test.{lang}").write_text(text, encoding="utf-8")
    script = str(SCRIPTS_DIR / "alignment_layers.py")
    proc = subprocess.run(
        [sys.executable, script, str(tiny_checkpoint), str(corpus)],
        capture_output=True, text=True, env=subprocess_env(), timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    config = Translator.from_pretrained(tiny_checkpoint).model.config
    layers, heads = config.n_decoder_layers, config.n_heads
    rows = [line.split() for line in proc.stdout.splitlines()[1:]]
    assert len(rows) == layers + 1 + layers * heads, proc.stdout
    assert all(0 <= float(row[-1]) <= 1 for row in rows)
    plural = "s" if layers > 1 else ""
    assert proc.stdout.startswith(
        f"6 lexicon pairs in 2 sentences; {layers} decoder layer{plural} x"
    )
    unknown = [line for line in proc.stderr.splitlines() if "read as <unk>" in line]
    assert len(unknown) == len(set(unknown)) == 2, proc.stderr[-2000:]  # sources, references
