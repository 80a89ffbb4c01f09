"""The "explain" experiment: does the weight a head puts on a source piece say which piece the
translation depends on? Jain & Wallace (2019) found attention weights often at odds with
gradient attributions; Wiegreffe & Pinter (2019) answered that this depends on the model and
the test.

`explain` asks it of one trained checkpoint (``--checkpoint``, default: the default settings
trained within the budget, as "hard" does) on its own greedy translations of the test split:
the agreement of every decoder layer's and head's cross-attention with the attributions of
`minitx.attribution`, and what removing the most attended, the most attributed or a random
source piece does to the translation. The guide (docs/guides/experiments.md, "Measured: does
attention explain the translation?") says how each number is taken and what was found.
Writes ``<out>/explain/``: ``results.json``, ``results.md``, ``agreement.png``,
``removal.png`` and ``example.png``.
"""

from __future__ import annotations

import math
import random
import shlex
import time
from collections.abc import Sequence
from itertools import combinations
from pathlib import Path
from typing import Any

import torch

from minitx.attribution import (
    DEFAULT_IG_STEPS,
    METHODS,
    agreement,
    attribute,
    comparable,
)
from minitx.extras.experiments.definitions import EXPERIMENTS
from minitx.extras.experiments.report import fmt, write_report
from minitx.extras.experiments.runner import Settings, default_checkpoint, load_trained
from minitx.maps import pair_maps
from minitx.metrics import bleu_metric
from minitx.model import Transformer
from minitx.teacher_forcing import frame_pairs, target_log_probs, teacher_forced
from minitx.translator import Translator, encode_sources
from minitx.viz import ATTRIBUTION_LABELS

NAME = "explain"
MEAN = "mean"
"""The key of a layer's mean of heads (and, with layer "all", of every layer and head)."""


# ------------------------------------------------------------------------------- the model


def log_probabilities(
    model: Transformer, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], batch_size: int = 64
) -> list[float]:
    """Teacher-forced log-probability (nats) of each target (ids without bos/eos, eos
    predicted at the end) given its source (ids without eos)."""
    device = next(model.parameters()).device
    totals: list[float] = []
    with torch.inference_mode():
        for start in range(0, len(pairs), batch_size):
            batch = pairs[start : start + batch_size]
            src, tgt_in, labels = frame_pairs(batch, device)  # (B, S), (B, T)
            logits = teacher_forced(model, src, tgt_in).logits  # (B, T, V)
            totals += target_log_probs(logits, labels).sum(-1).tolist()  # padding adds 0
    return totals


# ------------------------------------------------------------------------------- measuring


class _Mean:
    """A running mean that skips NaN."""

    def __init__(self) -> None:
        self.total, self.count = 0.0, 0

    def add(self, value: float, weight: int = 1) -> None:
        if not math.isnan(value):
            self.total, self.count = self.total + value * weight, self.count + weight

    @property
    def value(self) -> float | None:
        return self.total / self.count if self.count else None


def attention_views(cross: torch.Tensor) -> dict[tuple[str, str], torch.Tensor]:
    """(layer, head) -> (T, S) for every head, each layer's mean of heads ("mean") and the
    mean of every layer and head (("all", "mean"), the alignment's weights)."""
    views = {}
    for layer in range(cross.size(0)):
        for head in range(cross.size(1)):
            views[(str(layer), str(head))] = cross[layer, head]
        views[(str(layer), MEAN)] = cross[layer].mean(0)
    views[("all", MEAN)] = cross.mean((0, 1))
    return views


def most_important(weights: torch.Tensor) -> int:
    """The source piece (index, eos excluded) with the largest total over the `comparable`
    rows of a (T, S) attention or attribution matrix."""
    return int(comparable(weights).sum(0).argmax())


def explain(
    translator: Translator,
    sources: Sequence[str],
    references: Sequence[str],
    *,
    methods: Sequence[str] = METHODS,
    ig_steps: int = DEFAULT_IG_STEPS,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure agreement and removal (see the module docstring) on sentence pairs.

    Args:
        translator: the trained model and its tokenizer (its attention mode soft).
        methods: attribution methods, a subset of `METHODS`.
        ig_steps: quadrature nodes of integrated gradients.
        seed: the seed of the random removal.

    Returns:
        A JSON-ready dict: "sentences" (measured), "skipped" (an empty translation or a
        one-piece source: nothing to compare), "agreement" (one entry per method and
        attention: "layer" (a number or "all"), "head" (a number or "mean"), "spearman",
        "top1"), "between_methods", "chance_top1", "ig_delta" (mean and largest absolute
        completeness gap, nats), "removal" (one entry per choice of the removed piece:
        "removed", "delta_log_prob" (per target piece), "changed", "bleu", "same_as_attention"
        (how often it is the piece the mean attention picks)), "bleu" (the translations as
        they were) and "example" (one sentence's maps and attributions, for the figure).
    """
    model, tokenizer = translator.model, translator.tokenizer
    source_ids = encode_sources(tokenizer, sources, model.config.max_positions)
    start = time.perf_counter()
    translations = translator.translate_ids(source_ids, strategy="greedy")
    spearman: dict[tuple[str, str, str], _Mean] = {}
    top1: dict[tuple[str, str, str], _Mean] = {}
    between = {pair: (_Mean(), _Mean()) for pair in combinations(methods, 2)}
    chance, gaps, largest_gap = _Mean(), _Mean(), 0.0
    choices: dict[str, list[int | None]] = {}  # removal choice -> piece per sentence
    measured, example, example_fits = [], None, False
    rng = random.Random(seed)
    for i, (src_ids, tgt_ids) in enumerate(zip(source_ids, translations, strict=True)):
        if len(src_ids) < 2 or not tgt_ids:
            continue
        measured.append(i)
        maps = pair_maps(model, tokenizer, src_ids, tgt_ids)
        cross = torch.stack(maps.cross_attentions)  # (L, H, T, S)
        scores, _, delta = attribute(model, src_ids, tgt_ids, methods, ig_steps=ig_steps)
        views = attention_views(cross)
        rows = len(tgt_ids)  # comparable rows: the row predicting eos left out
        for method, matrix in scores.items():
            for (layer, head), weights in views.items():
                key = (method, layer, head)
                found = agreement(weights, matrix)
                spearman.setdefault(key, _Mean()).add(found["spearman"])
                top1.setdefault(key, _Mean()).add(found["top1"], rows)
        for (a, b), (rho, same) in between.items():
            found = agreement(scores[a], scores[b])
            rho.add(found["spearman"])
            same.add(found["top1"], rows)
        chance.add(1 / len(src_ids), rows)
        if delta is not None:
            gaps.add(float(delta.abs().mean()))
            largest_gap = max(largest_gap, float(delta.abs().max()))
        picks = {"attention: mean of layers and heads": most_important(views[("all", MEAN)])}
        for layer in range(cross.size(0)):
            picks[f"attention: layer {layer}, mean of heads"] = most_important(
                views[(str(layer), MEAN)]
            )
        for method, matrix in scores.items():
            picks[f"attribution: {ATTRIBUTION_LABELS[method]}"] = most_important(matrix)
        picks["a random piece"] = rng.randrange(len(src_ids))
        for name, piece in picks.items():
            choices.setdefault(name, []).append(piece)
        # The figure's sentence: the first of 6-14 pieces on both sides (readable at a glance),
        # else the first measured one, so that example.png is always written
        fits = 6 <= len(src_ids) <= 14 and 6 <= len(tgt_ids) <= 14
        if example is None or (fits and not example_fits):
            example_fits = fits
            example = {
                "index": i,
                "src_tokens": maps.src_tokens,
                "tgt_tokens": maps.tgt_tokens,
                "predicted_tokens": maps.predicted_tokens,
                "cross": cross.tolist(),
                "scores": {m: s.tolist() for m, s in scores.items()},
            }
        if len(measured) % 25 == 0:
            seconds = time.perf_counter() - start
            print(f"[{NAME}] {len(measured)} sentences measured ({seconds:.0f} s)", flush=True)
    print(f"[{NAME}] removing the chosen pieces and translating again", flush=True)
    refs = [references[i] for i in measured]
    originals = [translations[i] for i in measured]
    bleu = bleu_metric(language=translator.languages[1])
    before = log_probabilities(model, [(source_ids[i], translations[i]) for i in measured])
    baseline_bleu = bleu.corpus_score(tokenizer.decode(originals), [refs]).score
    attention_pick = choices.get("attention: mean of layers and heads", [])
    removal = []
    for name, pieces in choices.items():
        shortened = [
            [t for j, t in enumerate(source_ids[i]) if j != piece]
            for i, piece in zip(measured, pieces, strict=True)
        ]
        new = translator.translate_ids(shortened, strategy="greedy")
        after = log_probabilities(model, list(zip(shortened, originals, strict=True)))
        per_piece = [
            (a - b) / (len(t) + 1) for a, b, t in zip(after, before, originals, strict=True)
        ]
        removal.append(
            {
                "removed": name,
                "delta_log_prob": sum(per_piece) / len(per_piece),
                "changed": sum(n != o for n, o in zip(new, originals, strict=True)) / len(new),
                "bleu": bleu.corpus_score(tokenizer.decode(new), [refs]).score,
                "same_as_attention": sum(
                    p == q for p, q in zip(pieces, attention_pick, strict=True)
                )
                / len(pieces),
            }
        )
    return {
        "sentences": len(measured),
        "skipped": len(source_ids) - len(measured),
        "methods": list(methods),
        "ig_steps": ig_steps,
        "seconds": time.perf_counter() - start,
        "agreement": [
            {
                "method": method,
                "layer": layer,
                "head": head,
                "spearman": spearman[(method, layer, head)].value,
                "top1": top1[(method, layer, head)].value,
            }
            for (method, layer, head) in spearman
        ],
        "between_methods": [
            {"a": a, "b": b, "spearman": rho.value, "top1": same.value}
            for (a, b), (rho, same) in between.items()
        ],
        "chance_top1": chance.value,
        "ig_delta": {"mean_abs": gaps.value, "max_abs": largest_gap} if gaps.count else None,
        "bleu": baseline_bleu,
        "removal": removal,
        "example": example,
    }


# ------------------------------------------------------------------------------- the report


def _cell(summary: dict[str, Any], method: str, layer: str, head: str) -> dict[str, Any]:
    for entry in summary["agreement"]:
        if (entry["method"], entry["layer"], entry["head"]) == (method, layer, head):
            return entry
    raise KeyError((method, layer, head))


def _layers_heads(summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    layers = sorted({e["layer"] for e in summary["agreement"] if e["layer"] != "all"}, key=int)
    heads = sorted({e["head"] for e in summary["agreement"] if e["head"] != MEAN}, key=int)
    return layers, heads


def _ig_sentence(summary: dict[str, Any]) -> str:
    """How integrated gradients were computed, and how far they were from complete."""
    text = f" Integrated gradients: {summary['ig_steps']} Gauss-Legendre nodes"
    delta = summary.get("ig_delta")
    if delta and delta["mean_abs"] is not None:
        return text + (
            f", completeness gap {delta['mean_abs']:.3f} nats on average "
            f"(largest {delta['max_abs']:.3f})."
        )
    return text + "."


def markdown(summary: dict[str, Any]) -> str:
    """The results as markdown: the claim, the settings, the tables, the command."""
    layers, heads = _layers_heads(summary)
    lines = [
        f"## {NAME}",
        "",
        f"Claim: {summary['claim']}",
        "",
        f"`{summary['checkpoint']}`: {summary['sentences']} test sentences of "
        f"`{summary.get('data', '?')}` translated greedily "
        f"(of {summary['sentences'] + summary['skipped']} read; a one-piece source or an empty "
        f"translation is skipped), BLEU {summary['bleu']:.2f}."
        + (_ig_sentence(summary) if "ig" in summary["methods"] else ""),
        "",
        "### Attention against attributions",
        "",
        "Mean rank correlation (Spearman, per sentence) / top-1 agreement (share of target "
        "pieces), source eos and the row predicting eos left out. Top-1 by chance: "
        f"{fmt(summary['chance_top1'], percent=True)}.",
        "",
    ]
    header = ["attribution", "cross-attention", *(f"head {h}" for h in heads), "mean of heads"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method in summary["methods"]:
        for layer in layers:
            cells = [_cell(summary, method, layer, h) for h in [*heads, MEAN]]
            row = [f"{fmt(c['spearman'])} / {fmt(c['top1'], percent=True)}" for c in cells]
            label = ATTRIBUTION_LABELS[method]
            lines.append(f"| {label} | layer {layer} | " + " | ".join(row) + " |")
        every = _cell(summary, method, "all", MEAN)
        blanks = " | ".join("" for _ in heads)
        lines.append(
            f"| {ATTRIBUTION_LABELS[method]} | every layer (the alignment) | {blanks} | "
            f"{fmt(every['spearman'])} / {fmt(every['top1'], percent=True)} |"
        )
    if summary["between_methods"]:
        lines += ["", "The attribution methods against each other:", ""]
        lines += ["| methods | rank correlation | top-1 agreement |", "|---|---|---|"]
        for entry in summary["between_methods"]:
            lines.append(
                f"| {ATTRIBUTION_LABELS[entry['a']]} vs {ATTRIBUTION_LABELS[entry['b']]} | "
                f"{fmt(entry['spearman'])} | {fmt(entry['top1'], percent=True)} |"
            )
    lines += [
        "",
        "### Removing the most important source piece",
        "",
        "| removed piece | change in log-probability of the translation (nats per piece) | "
        "translations changed | BLEU | same piece as the mean attention |",
        "|---|---|---|---|---|",
        f"| none | 0 | 0% | {summary['bleu']:.2f} | |",
    ]
    for entry in summary["removal"]:
        lines.append(
            f"| {entry['removed']} | {entry['delta_log_prob']:+.3f} | "
            f"{fmt(entry['changed'], percent=True)} | {entry['bleu']:.2f} | "
            f"{fmt(entry['same_as_attention'], percent=True)} |"
        )
    lines += ["", f"Command: `{summary['command']}`"]
    return "\n".join(lines) + "\n"


def figures(directory: Path, summary: dict[str, Any]) -> list[Path]:
    """agreement.png, removal.png and example.png (see the module docstring)."""
    from matplotlib.figure import Figure  # not pyplot: the caller's backend stays as it was

    written: list[Path] = []
    layers, heads = _layers_heads(summary)
    methods = summary["methods"]
    columns = [*heads, MEAN]
    height = 2 * (1.3 + 0.4 * len(layers)) + 0.6
    fig = Figure(figsize=(3.6 * len(methods) + 0.8, height), layout="constrained")
    axes = fig.subplots(2, len(methods), squeeze=False)
    for col, method in enumerate(methods):
        for row, (key, title, vmin) in enumerate(
            [("spearman", "rank correlation", -1.0), ("top1", "top-1 agreement", 0.0)]
        ):
            ax = axes[row][col]
            grid = [[_cell(summary, method, layer, h)[key] for h in columns] for layer in layers]
            values = [[math.nan if v is None else v for v in r] for r in grid]
            image = ax.imshow(values, vmin=vmin, vmax=1.0, cmap="viridis", aspect="auto")
            for y, r in enumerate(values):
                for x, v in enumerate(r):
                    if not math.isnan(v):
                        dark = (v - vmin) / (1 - vmin) < 0.6  # the dark part of viridis
                        ax.text(x, y, f"{v:.2f}", ha="center", va="center", fontsize=7,
                                color="white" if dark else "black")  # fmt: skip
            every = _cell(summary, method, "all", MEAN)[key]
            ax.set_title(
                f"{ATTRIBUTION_LABELS[method]}\n{title} (every layer: {fmt(every)})", fontsize=8
            )
            ax.set_xticks(range(len(columns)), [*heads, "mean"], fontsize=7)
            ax.set_yticks(range(len(layers)), [f"layer {layer}" for layer in layers], fontsize=7)
            ax.set_xlabel("cross-attention head", fontsize=7)
            fig.colorbar(image, ax=ax, shrink=0.9).ax.tick_params(labelsize=7)
    fig.suptitle(
        "cross-attention against gradient attributions, per decoder layer and head", fontsize=10
    )
    path = directory / "agreement.png"
    fig.savefig(path, dpi=100)
    written.append(path)

    removal = summary["removal"]
    names = [entry["removed"].replace(": ", ":\n") for entry in removal]
    fig = Figure(figsize=(11, 4.2))
    axes = fig.subplots(1, 2)
    colours = ["tab:blue" if e["removed"].startswith("attention") else
               "tab:orange" if e["removed"].startswith("attribution") else "tab:gray"
               for e in removal]  # fmt: skip
    axes[0].barh(names, [e["delta_log_prob"] for e in removal], color=colours)
    axes[0].set_xlabel("change in log-probability of the translation (nats per piece)")
    axes[1].barh(names, [100 * e["changed"] for e in removal], color=colours)
    axes[1].set_xlabel("translations that change (%)")
    axes[1].set_yticks(range(len(names)), [""] * len(names))
    for ax in axes:
        ax.invert_yaxis()
        ax.tick_params(labelsize=7)
    fig.suptitle("removing the source piece with the most attention or attribution", fontsize=10)
    fig.tight_layout()
    path = directory / "removal.png"
    fig.savefig(path, dpi=100)
    written.append(path)

    example = summary.get("example")
    if example:
        from minitx.maps import AttentionMaps
        from minitx.viz import figures_for_attributions

        cross = torch.tensor(example["cross"])  # (L, H, T, S)
        maps = AttentionMaps(
            src_tokens=example["src_tokens"],
            tgt_tokens=example["tgt_tokens"],
            predicted_tokens=example["predicted_tokens"],
            encoder_attentions=(),
            decoder_attentions=(),
            cross_attentions=tuple(cross),
        )
        method = "ig" if "ig" in example["scores"] else next(iter(example["scores"]))
        scores = {method: torch.tensor(example["scores"][method])}
        fig = figures_for_attributions(maps, scores)[f"attribution/{method}"]
        path = directory / "example.png"
        fig.savefig(path, dpi=100)
        fig.clear()
        written.append(path)
    return written


def run_explain(
    settings: Settings,
    only: Sequence[str] | None = None,
    *,
    sentences: int | None = None,
    ig_steps: int = DEFAULT_IG_STEPS,
) -> dict[str, Any]:
    """`minitx-experiment explain`: measure a checkpoint (``settings.checkpoint``, else the
    default settings trained within the budget) on its test split and write the report.

    Args:
        settings: the experiment settings (checkpoint, out, seed; a budget only when no
            checkpoint is given).
        only: the attribution methods to compute (default: every one).
        sentences: read only the first this many test sentences (None: all).
        ig_steps: quadrature nodes of integrated gradients.
    """
    from minitx.evaluation import load_split

    experiment = EXPERIMENTS[NAME]
    methods = [v.name for v in experiment.variants if not only or v.name in only]
    checkpoint = settings.checkpoint or default_checkpoint(settings)
    translator, source, langs = load_trained(checkpoint)
    test = load_split(source, "test", *langs, sentences)
    print(f"[{NAME}] {len(test.sources)} test sentences of {checkpoint}", flush=True)
    summary = explain(
        translator,
        test.sources,
        test.references,
        methods=methods,
        ig_steps=ig_steps,
        seed=settings.seed,
    )
    # every flag the results depend on: the seed picks the random pieces removed
    command = f"minitx-experiment {NAME} --checkpoint {shlex.quote(str(checkpoint))}"
    command += f" --seed {settings.seed}"
    if sentences is not None:
        command += f" --sentences {sentences}"
    if only:
        command += " --variants " + " ".join(methods)
    command += f" --out {shlex.quote(str(settings.out))}"  # else the rerun wrote elsewhere
    summary = {
        "experiment": NAME,
        "claim": experiment.claim,
        "checkpoint": str(checkpoint),
        "data": source,  # the checkpoint's own training data: its test split is read
        "command": command,
        "languages": list(langs),
        **summary,
    }
    write_report(settings.out / NAME, summary, render=markdown, draw=figures)
    return summary


__all__ = ["explain", "log_probabilities", "markdown", "run_explain"]
