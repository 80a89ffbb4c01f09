"""Write an experiment's results: `results.json`, a markdown table and PNG figures.

Figures (matplotlib, Agg): `bleu_over_time.png` (validation BLEU against training minutes,
or steps for a budget in steps; one line per variant), `entropy_per_layer.png` (mean
attention entropy per layer, one panel per attention kind, trained models), and per
experiment: `max_weight.png` (scale: the largest weight of each attention row, at
initialisation and trained), `head_entropy.png` (heads: each head's entropy),
`word_order.png` (position: BLEU on ordered and shuffled sources), `hard_attention.png`
(hard: BLEU per attention mode).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from minitx.extras.experiments.definitions import EXPERIMENTS
from minitx.outputs import MARKER, check_output_dir, written_whole


def fmt(value: Any, digits: int = 2, *, percent: bool = False) -> str:
    """A table cell: "–" for a missing or NaN value, a float to `digits` places (or as a
    whole percentage), anything else as it prints."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if percent:
        return f"{100 * value:.0f}%"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _mean(stats: dict[str, Any] | None, key: str) -> float | None:
    """Mean of one statistic over every attention layer of a probe result."""
    if not stats or not stats.get("layers"):
        return None
    values = [layer[key] for layer in stats["layers"] if not math.isnan(layer[key])]
    return sum(values) / len(values) if values else None


def _attention(variant: dict[str, Any], when: str) -> dict[str, Any] | None:
    return (variant.get("attention") or {}).get(when)


Column = tuple[str, Callable[[dict[str, Any]], str]]

COMMON: list[Column] = [
    ("variant", lambda v: f"`{v['name']}`"),
    ("status", lambda v: v["status"].split(":")[0]),
    ("best val BLEU", lambda v: fmt(v.get("best_val_bleu"))),
    ("test BLEU greedy", lambda v: fmt(v.get("test_bleu_greedy"))),
    ("test BLEU beam 5", lambda v: fmt(v.get("test_bleu_beam5"))),
    ("steps", lambda v: fmt(v.get("steps"))),
    ("ms/step", lambda v: fmt(v.get("ms_per_step"), 0)),
    ("target tokens/s", lambda v: fmt(v.get("tokens_per_sec"), 0)),
]


def _trained_mean(key: str, digits: int = 2) -> Callable[[dict[str, Any]], str]:
    return lambda v: fmt(_mean(_attention(v, "trained"), key), digits)


def _shuffled_bleu(variant: dict[str, Any]) -> str:
    return fmt((variant.get("word_order") or {}).get("shuffled_bleu"))


EXTRA: dict[str, list[Column]] = {
    "scale": [
        ("logit std init → trained", lambda v: _pair(v, "logit_std")),
        ("mean max weight init → trained", lambda v: _pair(v, "max_weight")),
        ("grad norm at q, k init → trained", lambda v: _pair(v, "grad_norm", 4)),
    ],
    "position": [("test BLEU shuffled words", _shuffled_bleu)],
    "heads": [
        ("mean entropy (nats)", _trained_mean("entropy")),
        ("head divergence (JS, nats)", _trained_mean("head_divergence", 3)),
    ],
    "scores": [("mean entropy (nats)", _trained_mean("entropy"))],
}

HARD: list[Column] = [
    ("variant", lambda v: f"`{v['name']}`"),
    ("test BLEU greedy", lambda v: fmt(v["test_bleu_greedy"])),
    ("chrF", lambda v: fmt(v["test_chrf_greedy"])),
    ("sentences/s", lambda v: fmt(v["sentences_per_sec"], 1)),
]


def _pair(variant: dict[str, Any], key: str, digits: int = 2) -> str:
    start = _mean(_attention(variant, "init"), key)
    end = _mean(_attention(variant, "trained"), key)
    return f"{fmt(start, digits)} → {fmt(end, digits)}"


def markdown(summary: dict[str, Any]) -> str:
    """The experiment as markdown: claim, settings, the table, the commands."""
    name = summary["experiment"]
    hard = summary["budget"] is None
    columns = HARD if hard else COMMON + EXTRA.get(name, [])
    lines = [f"## {name}", "", f"Claim: {summary['claim']}", ""]
    if hard:
        data = f" of `{summary['data']}`" if summary.get("data") else ""
        lines.append(f"Decoding `{summary['checkpoint']}` (test split{data}, greedy).")
    else:
        extra = " ".join(f"`--{o}`" for o in summary["overrides"])
        lines.append(
            f"Each variant: {summary['budget']} of training on "
            f"{summary['config']}{' with ' + extra if extra else ''}, same seed and data."
        )
    lines += ["", "| " + " | ".join(c for c, _ in columns) + " |"]
    lines.append("|" + "---|" * len(columns))
    for variant in summary["variants"]:
        lines.append("| " + " | ".join(cell(variant) for _, cell in columns) + " |")
    lines += ["", "Commands:", ""]
    lines += [f"- `{v['name']}`: `{v['command']}`" for v in summary["variants"]]
    failed = [v for v in summary["variants"] if v["status"] not in ("ok",)]
    for variant in failed:
        lines.append(f"- `{variant['name']}` {variant['status']}")
    return "\n".join(lines) + "\n"


def budget_in_steps(summary: dict[str, Any]) -> bool:
    """Whether the variants trained for a number of steps (`--steps`), not minutes."""
    return str(summary.get("budget") or "").endswith(" steps")  # runner.describe_budget


def bleu_curve(variant: dict[str, Any], by_steps: bool) -> tuple[list[float], list[float]]:
    """A variant's validation BLEU against training steps or minutes. A budget in steps plots
    against steps: minutes of runs started at different times also measure the machine's
    drift, and every variant got the same steps."""
    points = variant.get("val_bleu_curve", [])
    if by_steps:  # a validation's row carries its last step's 0-based index: steps done - 1
        return [p["step"] + 1 for p in points], [p["bleu"] for p in points]
    timed = [p for p in points if p["minutes"] is not None]
    return [p["minutes"] for p in timed], [p["bleu"] for p in timed]


def figures(directory: Path, summary: dict[str, Any]) -> list[Path]:
    """The experiment's PNG figures (see the module docstring)."""
    from matplotlib.figure import Figure

    from minitx.viz import KIND_LABELS

    variants = summary["variants"]
    name = summary["experiment"]
    written: list[Path] = []

    def subplots(*grid: int, figsize: tuple[float, float], **kwargs: Any) -> tuple[Figure, Any]:
        # A Figure of its own, not pyplot's: the caller's backend (a notebook's) stays as it was.
        fig = Figure(figsize=figsize)
        return fig, fig.subplots(*grid, **kwargs)

    def save(fig: Figure, file: str) -> None:
        fig.tight_layout()
        fig.savefig(directory / file, dpi=100)
        written.append(directory / file)

    if summary["budget"] is None:  # hard attention: BLEU per mode
        fig, ax = subplots(figsize=(6, 3.5))
        ax.bar([v["name"] for v in variants], [v["test_bleu_greedy"] for v in variants])
        ax.set_ylabel("test BLEU (greedy)")
        ax.set_title("hard attention at inference")
        ax.tick_params(axis="x", rotation=30)
        save(fig, "hard_attention.png")
        return written

    by_steps = budget_in_steps(summary)
    fig, ax = subplots(figsize=(6, 4))
    for variant in variants:
        x, y = bleu_curve(variant, by_steps)
        if x:
            ax.plot(x, y, "o-", label=variant["name"])
    ax.set_xlabel("training steps" if by_steps else "training minutes (validation included)")
    ax.set_ylabel("validation BLEU (greedy)")
    ax.set_title(f"{name}: BLEU over training")
    if ax.lines:  # no curve when every variant failed: matplotlib warns of an empty legend
        ax.legend()
    save(fig, "bleu_over_time.png")

    probed = [v for v in variants if _attention(v, "trained")]
    if probed:
        fig, axes = subplots(1, 3, figsize=(11, 3.5), sharey=True)
        for ax, kind in zip(axes, KIND_LABELS, strict=True):
            for variant in probed:
                layers = [x for x in _attention(variant, "trained")["layers"] if x["kind"] == kind]
                ax.plot([x["layer"] for x in layers], [x["entropy"] for x in layers], "o-",
                        label=variant["name"])  # fmt: skip
            ax.set_title(KIND_LABELS[kind])
            ax.set_xlabel("layer")
            ax.xaxis.get_major_locator().set_params(integer=True)
        axes[0].set_ylabel("mean row entropy (nats)")
        axes[0].legend(fontsize="small")
        save(fig, "entropy_per_layer.png")

    if name == "scale" and probed:
        fig, axes = subplots(1, 2, figsize=(10, 3.5), sharey=True)
        for ax, when in zip(axes, ("init", "trained"), strict=True):
            for variant in probed:
                values = [w for ws in _attention(variant, when)["max_weights"].values() for w in ws]
                ax.hist(values, bins=20, range=(0, 1), histtype="step", label=variant["name"])
            ax.set_title(f"largest weight of each row ({when})")
            ax.set_xlabel("max attention weight")
        axes[0].set_ylabel("rows")
        axes[-1].legend()
        save(fig, "max_weight.png")

    if name == "heads" and probed:
        fig, ax = subplots(figsize=(7, 3.5))
        for variant in probed:
            layers = _attention(variant, "trained")["layers"]
            heads = [h for layer in layers for h in layer["head_entropy"]]
            ax.plot(range(len(heads)), heads, ".", label=variant["name"])
        ax.set_xlabel("head (every layer and attention, in order)")
        ax.set_ylabel("mean row entropy (nats)")
        ax.legend()
        save(fig, "head_entropy.png")

    if name == "position":
        ordered = [v for v in variants if v.get("word_order")]
        if ordered:
            fig, ax = subplots(figsize=(6, 3.5))
            x = range(len(ordered))
            ax.bar([i - 0.2 for i in x], [v["word_order"]["bleu"] for v in ordered], 0.4,
                   label="source as written")  # fmt: skip
            ax.bar([i + 0.2 for i in x], [v["word_order"]["shuffled_bleu"] for v in ordered], 0.4,
                   label="source words shuffled")  # fmt: skip
            ax.set_xticks(list(x), [v["name"] for v in ordered])
            ax.set_ylabel("test BLEU (greedy)")
            ax.legend()
            save(fig, "word_order.png")
    return written


def write_report(
    directory: Path,
    summary: dict[str, Any],
    *,
    render: Callable[[dict[str, Any]], str] = markdown,
    draw: Callable[[Path, dict[str, Any]], list[Path]] = figures,
) -> list[Path]:
    """Write results.json, results.md (`render`) and the figures (`draw`) as the directory
    `directory`, whole, replacing an earlier call's; the paths written.

    Raises:
        OutputError: `directory` holds files it did not write (`check_results_dir`, checked
            here too: an experiment can run for hours after the command's first check).
    """
    check_results_dir(directory)
    with written_whole(directory, RESULTS_KIND) as tmp:
        (tmp / "results.json").write_text(json.dumps(summary, indent=1))
        (tmp / "results.md").write_text(render(summary))
        written = [tmp / "results.json", tmp / "results.md", *draw(tmp, summary)]
    return [directory / path.relative_to(tmp) for path in written]


RESULTS_KIND = "minitx-experiment results"
"""What an experiment's results directory holds, in its `minitx.outputs.MARKER`."""


def check_results_dir(directory: Path, flag: str = "--out") -> None:
    """Refuse an experiment's results directory that holds files it did not write (the
    user's): `write_report` replaces the directory whole. One written before the directories
    were marked (no `MARKER`) is taken when it holds only what `write_report` writes, with
    its own experiment's results.json."""
    files = list(directory.iterdir()) if directory.is_dir() else []
    if files and not (directory / MARKER).exists():
        try:  # an older minitx-experiment's: results.json, results.md and figures only
            summary = json.loads((directory / "results.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = None
        ours = {"results.json", "results.md"}
        if (
            isinstance(summary, dict)
            and summary.get("experiment") == directory.name
            and all(p.is_file() and (p.name in ours or p.suffix == ".png") for p in files)
        ):
            return
    check_output_dir(
        directory, force=True, flag=flag, kind=RESULTS_KIND, replacer="minitx-experiment"
    )


INDEX_HEADING = "# What attention does, measured\n"
"""The first line of the index `write_index` writes: how the command tells its own README.md."""


def write_index(out: Path) -> Path:
    """`<out>/README.md`: every experiment's results table written so far, in suite order."""
    parts = [INDEX_HEADING, "Written by `minitx-experiment`.\n"]
    for name in EXPERIMENTS:
        table = out / name / "results.md"
        if table.is_file():
            parts.append(table.read_text())
            parts += [
                f"![{name}]({name}/{png.name})\n" for png in sorted((out / name).glob("*.png"))
            ]
    index = out / "README.md"
    out.mkdir(parents=True, exist_ok=True)
    index.write_text("\n".join(parts))
    return index


__all__ = [
    "INDEX_HEADING",
    "RESULTS_KIND",
    "check_results_dir",
    "figures",
    "fmt",
    "markdown",
    "write_index",
    "write_report",
]
