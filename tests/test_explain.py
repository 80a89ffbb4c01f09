"""`minitx-experiment explain`: attention against gradient attributions on a trained checkpoint
(minitx/extras/experiments/explain.py), on the tiny model trained on the toy corpus."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import matplotlib
import pytest

from minitx.attribution import METHODS, attribute
from minitx.extras.experiments import EXPERIMENTS
from minitx.extras.experiments.explain import log_probabilities, markdown


def test_the_experiment_is_defined_by_its_methods() -> None:
    explain = EXPERIMENTS["explain"]
    assert not explain.trains and explain.probes == ()
    assert [v.name for v in explain.variants] == list(METHODS)
    assert list(EXPERIMENTS)[-1] == "explain"  # `all` runs it last, after the training ones


def test_greedy_translate_ids_and_log_probabilities_agree_with_the_inference_api(
    tiny_checkpoint: Path,
) -> None:
    from minitx.translator import Translator

    translator = Translator.from_pretrained(tiny_checkpoint)
    sources = ["ein mann fährt fahrrad .", "", "zwei hunde spielen im schnee ."]
    ids = translator.tokenizer.encode(sources)
    translations = translator.translate_ids(ids, strategy="greedy", batch_size=2)
    assert translations[1] == []
    assert translator.tokenizer.decode(translations) == translator.translate(sources, beam_size=1)
    pairs = [(ids[0], translations[0]), (ids[2], translations[2])]
    batched = log_probabilities(translator.model, pairs, batch_size=2)
    for (src, tgt), value in zip(pairs, batched, strict=True):
        _, alone, _ = attribute(translator.model, src, tgt, ["saliency"])  # one pair, unpadded
        assert value == pytest.approx(float(alone.sum()), abs=1e-4)


def test_the_command_writes_tables_and_figures(tiny_checkpoint: Path, tmp_path: Path) -> None:
    from minitx.extras.experiments.command import main

    out = tmp_path / "exp"
    args = ["explain", "--checkpoint", str(tiny_checkpoint), "--out", str(out)]
    backend = matplotlib.get_backend()
    matplotlib.use("svg")  # the caller's own backend (a notebook's), which the figures keep
    try:
        assert main([*args, "--sentences", "6", "--seed", "3", "--variants", "saliency", "ig"]) == 0
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(backend)
    summary = json.loads((out / "explain" / "results.json").read_text())
    assert summary["sentences"] + summary["skipped"] == 6
    assert summary["methods"] == ["saliency", "ig"]
    # the seed picks the random pieces removed: the command was written without it, and
    # without --out, so that running it again wrote into ./experiments
    assert summary["command"].endswith(
        f"--seed 3 --sentences 6 --variants saliency ig --out {shlex.quote(str(out))}"
    )
    assert "Integrated gradients: " in markdown(summary)
    assert "Integrated gradients" not in markdown({**summary, "methods": ["saliency"]})
    from minitx.translator import Translator

    config = Translator.from_pretrained(tiny_checkpoint).model.config
    layers, heads = config.n_decoder_layers, config.n_heads
    per_method = layers * (heads + 1) + 1  # every head, each layer's mean, every layer's mean
    assert len(summary["agreement"]) == 2 * per_method
    for entry in summary["agreement"]:
        assert -1 <= entry["spearman"] <= 1 and 0 <= entry["top1"] <= 1
    assert [(e["a"], e["b"]) for e in summary["between_methods"]] == [("saliency", "ig")]
    assert 0 < summary["chance_top1"] < 1
    removed = [entry["removed"] for entry in summary["removal"]]
    assert removed == [
        "attention: mean of layers and heads",
        *(f"attention: layer {layer}, mean of heads" for layer in range(layers)),
        "attribution: saliency (gradient)",
        "attribution: integrated gradients",
        "a random piece",
    ]
    assert summary["removal"][0]["same_as_attention"] == 1.0
    for entry in summary["removal"]:
        assert entry["delta_log_prob"] == pytest.approx(entry["delta_log_prob"])  # not NaN
        assert 0 <= entry["changed"] <= 1
    table = (out / "explain" / "results.md").read_text()
    assert "## explain" in table and "| integrated gradients | layer 0 |" in table
    assert " test sentences of `builtin:toy` translated greedily" in table  # its own data
    assert "### Removing the most important source piece" in table
    for png in ("agreement.png", "removal.png"):
        assert (out / "explain" / png).stat().st_size > 1000, png
    assert "## explain" in (out / "README.md").read_text()


def test_command_checks_sentences(capsys: pytest.CaptureFixture) -> None:
    from minitx.extras.experiments.command import main

    with pytest.raises(SystemExit) as exit_info:  # refused by the parser, as argparse does
        main(["explain", "--sentences", "0"])
    assert exit_info.value.code == 2
    assert "argument --sentences: must be at least 1, got 0" in capsys.readouterr().err


def test_the_example_figure_falls_back_to_a_sentence_outside_the_readable_lengths(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    from minitx.extras.experiments.explain import explain, figures
    from minitx.translator import Translator

    translator = Translator.from_pretrained(tiny_checkpoint)
    sources = ["ein mann .", "mann ."]  # under 6 pieces: none of 6-14 on both sides
    assert all(len(ids) < 6 for ids in translator.tokenizer.encode(sources))
    summary = explain(translator, sources, ["a man .", "a man ."], methods=["saliency"])
    assert summary["sentences"] >= 1
    assert summary["example"]["index"] == 0  # the first measured sentence stands in
    written = figures(tmp_path, summary)
    assert tmp_path / "example.png" in written and (tmp_path / "example.png").stat().st_size > 1000
