"""Run an experiment: train its variants within a time budget, probe them, collect results.

Each variant is one `minitx-train` process (`python -m minitx.cli.train`) on `RECIPE` (the
45-minute de->en recipe, `--config long`), with `Settings.config` on top of it when given (a
language pair, or `tiny` for a smoke run), then the variant's overrides, `trainer.max_time` set
to the budget and validation every `val_every` steps, so that BLEU is seen over training time.
Runs live under `<out>/runs/<key>/`, `key` a hash of everything that decides the run (config,
budget, overrides): a run that finished (or diverged) is reused, by this experiment or another
one with the same variant (the default settings appear in five experiments), so an interrupted
suite continues where it stopped. After training, the best checkpoint is probed
(`minitx.extras.experiments.probes`); the end-of-training test of minitx-train gives the test BLEU
(greedy and beam 5).
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import functools
import hashlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import torch

from minitx.errors import ConfigError, Terminated
from minitx.extras.experiments.definitions import EXPERIMENTS, Experiment, Variant
from minitx.extras.experiments.report import write_report

if TYPE_CHECKING:
    from minitx.translator import Translator

RESULT_FILE = "result.json"
"""Written into a run's directory when its training and probes are complete."""

REUSABLE = ("ok", "diverged")
"""Statuses of a finished run that a later call reuses; any other is trained again."""


@dataclass
class Settings:
    """How to run experiments.

    Attributes:
        out: the output directory (results, figures, runs).
        budget_minutes: training time per variant (`trainer.max_time`, validation included).
        max_steps: train each variant for this many optimizer steps instead (no time limit):
            the same work on any machine, where a time budget buys more steps on a faster one.
        config: a config on top of `RECIPE` (a path or a packaged name such as "tiny" or
            "multi30k_en_de"); None = `RECIPE` alone.
        val_every: validate (greedy BLEU) every this many training steps.
        probe_pairs: validation pairs read by the attention probes.
        overrides: `minitx-train` overrides applied to every variant first ("key=value").
        checkpoint: the trained model the "hard" experiment decodes (None: the default
            variant trained within the budget).
        seed: the seed of sampling probes (hard-sample, shuffled words).
    """

    out: Path = Path("experiments")
    budget_minutes: float = 8.0
    max_steps: int | None = None
    config: str | None = None
    val_every: int = 100
    probe_pairs: int = 100
    overrides: list[str] = field(default_factory=list)
    checkpoint: Path | None = None
    seed: int = 0


RECIPE = "long"
"""The packaged config every variant starts from: the 45-minute recipe, whose open-ended
inverse-square-root schedule suits a budget in minutes or steps (the default config's linear
decay is planned for its own 1,475 updates). The experiments' names and README's figures
("3x-lr" = lr 0.003, the default settings) are this recipe's."""


def base_configs(settings: Settings) -> list[str]:
    """The `--config` values every variant trains on, in order: `RECIPE`, then
    `settings.config` on top of it when given."""
    return [RECIPE, *([settings.config] if settings.config else [])]


def max_time(minutes: float) -> str:
    """`trainer.max_time` as DD:HH:MM:SS (at least one second)."""
    seconds = max(1, round(minutes * 60))
    days, hours = seconds // 86400, seconds // 3600 % 24  # Lightning takes two-digit hours
    return f"{days:02d}:{hours:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


TRAIN = [sys.executable, "-m", "minitx.cli.train"]
"""How a variant's `minitx-train` is started: with the Python that runs the experiment."""


def train_command(settings: Settings, variant: Variant, run_name: str) -> list[str]:
    """The `minitx-train` command line of one variant, as `TRAIN` starts it."""
    base = [arg for config in base_configs(settings) for arg in ("--config", config)]
    return [
        *TRAIN, *base,
        "--runs_dir", str(settings.out / "runs"),
        "--run_name", run_name,
        *_budget(settings),
        "--trainer.val_check_interval", str(settings.val_every),
        "--trainer.check_val_every_n_epoch", "null",
        "--trainer.enable_progress_bar", "false",
        *[f"--{item}" for item in settings.overrides],
        *variant.arguments(),
    ]  # fmt: skip


def _budget(settings: Settings) -> list[str]:
    """The trainer settings that bound a run by the budget: a config's max_epochs (tiny's 2,
    long's 16) would end it before its steps or minutes (--set can put it back)."""
    if settings.max_steps is not None:
        steps = ["--trainer.max_steps", str(settings.max_steps), "--trainer.max_epochs", "-1"]
        return [*steps, "--trainer.max_time", "null"]
    minutes = ["--trainer.max_time", max_time(settings.budget_minutes)]
    return [*minutes, "--trainer.max_epochs", "-1"]


def describe_budget(settings: Settings) -> str:
    """ "8 minutes" or "300 steps" of training per variant."""
    if settings.max_steps is not None:
        return f"{settings.max_steps} steps"
    return f"{settings.budget_minutes:g} minutes"


def run_key(settings: Settings, variant: Variant) -> str:
    """A short hash of everything that decides a training run: the settings, the configs'
    text (an edited config file trains again), and what relative paths and the corpus's
    location depend on (the working directory, ``MINITX_DATA_DIR``)."""
    decisive: dict[str, Any] = {
        "config": settings.config,
        "config_text": [_config_digest(config) for config in base_configs(settings)],
        "cwd": os.getcwd(),
        "data_dir": os.environ.get("MINITX_DATA_DIR"),
        "budget": settings.budget_minutes,
        "val_every": settings.val_every,
        "overrides": settings.overrides,
        "variant": variant.arguments(),
    }
    if settings.max_steps is not None:  # a budget in steps instead of minutes
        decisive["budget"], decisive["max_steps"] = None, settings.max_steps
    return hashlib.sha1(json.dumps(decisive, sort_keys=True).encode()).hexdigest()[:10]


def _config_digest(config: str) -> str:
    """The sha1 of a `--config` value's text: a file's, else the packaged config's of that
    name ("" when neither exists: minitx-train refuses it)."""
    path = Path(config).expanduser()
    if not path.is_file():
        name = config if config.endswith(".yaml") else f"{config}.yaml"
        path = Path(str(resources.files("minitx") / "configs" / name))
    return hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else ""


def read_metrics(run_dir: Path) -> list[dict[str, str]]:
    """The rows of a run's `csv/metrics.csv` ([] when absent)."""
    path = run_dir / "csv" / "metrics.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def _values(rows: list[dict[str, str]], key: str) -> list[tuple[int, float]]:
    return [(int(r["step"]), float(r[key])) for r in rows if r.get(key)]


def summarise_metrics(rows: list[dict[str, str]]) -> dict[str, Any]:
    """BLEU over training time and the run's figures, from its metrics rows."""
    clock = dict(_values(rows, "time/fit_seconds"))
    curve = [
        {"step": step, "minutes": clock[step] / 60 if step in clock else None, "bleu": bleu}
        for step, bleu in _values(rows, "val/bleu")
    ]

    def last(key: str) -> float | None:
        values = _values(rows, key)
        return values[-1][1] if values else None

    def mean(key: str) -> float | None:
        values = [v for _, v in _values(rows, key)]
        return sum(values) / len(values) if values else None

    steps = max((int(r["step"]) for r in rows if r.get("step")), default=0)
    train_seconds = sum(v for _, v in _values(rows, "train/epoch_seconds"))  # no validation
    return {
        "val_bleu_curve": curve,
        "best_val_bleu": max((p["bleu"] for p in curve), default=None),
        "test_bleu_greedy": last("test/bleu_greedy"),
        "test_bleu_beam5": last("test/bleu_beam5"),
        "test_chrf_greedy": last("test/chrf_greedy"),
        "tokens_per_sec": mean("train/tokens_per_sec_step"),
        "ms_per_step": 1000 * train_seconds / steps if steps and train_seconds else None,
        "steps": steps,
    }


def best_checkpoint(run_dir: Path) -> Path | None:
    """The best-BLEU checkpoint ModelCheckpoint kept (else last.ckpt, else None)."""
    found = sorted((run_dir / "checkpoints").glob("epoch*-bleu*.ckpt"))

    def bleu(path: Path) -> float:
        match = re.search(r"bleu(\d+(?:\.\d+)?)", path.name)
        return float(match.group(1)) if match else -math.inf

    if found:
        return max(found, key=bleu)
    last = run_dir / "checkpoints" / "last.ckpt"
    return last if last.is_file() else None


def _status(returncode: int, log: str) -> str:
    if returncode == 0:
        return "ok"
    errors = [line for line in log.splitlines() if line.startswith("error:")]
    if any("diverg" in line.lower() for line in errors):
        return "diverged"
    last = errors[-1] if errors else (log.strip().splitlines() or [""])[-1][-200:]
    return f"failed (exit {returncode}): {last}"


def train_variant(settings: Settings, experiment: Experiment, variant: Variant) -> dict[str, Any]:
    """Train one variant (or reuse the finished run with the same settings) and take the
    experiment's probes that it lacks; its result dict."""
    key = run_key(settings, variant)
    family = settings.out / "runs" / key  # by key only: equal settings share one run
    done = family / RESULT_FILE
    result = json.loads(done.read_text()) if done.is_file() else None
    trained = result is None or result["status"] not in REUSABLE
    if trained:
        if family.exists():
            shutil.rmtree(family)  # an unfinished or failed attempt: train again
        family.mkdir(parents=True)
        result = _train(settings, experiment, variant, family, key)
        if result["status"] != "ok":  # a result, in the table; said here too, not only there
            print(f"[{experiment.name}] {variant.name}: {result['status']}", flush=True)
    else:  # an earlier call's (an interrupted `all` goes on here), or another variant's
        print(f"[{experiment.name}] {variant.name}: reuses the finished run {family}", flush=True)
    # the figures are always read from the run's own CSV (a reused run gets the current form)
    result.update(summarise_metrics(read_metrics(family / result["run_dir"])))
    if trained:
        done.write_text(json.dumps(result, indent=1))
    probe_settings = {"pairs": settings.probe_pairs, "seed": settings.seed}
    if result.get("probe_settings") != probe_settings:
        result["probes"], result["probe_settings"] = [], probe_settings  # measured otherwise
    missing = [name for name in experiment.probes if name not in result["probes"]]
    if missing and result["checkpoint"]:
        print(f"[{experiment.name}] {variant.name}: probing ({', '.join(missing)})", flush=True)
        result.update(probe(settings, missing, family / result["checkpoint"]))
        result["probes"] += missing
        done.write_text(json.dumps(result, indent=1))
    return {**result, "name": variant.name, "overrides": variant.overrides}


def _train(
    settings: Settings, experiment: Experiment, variant: Variant, family: Path, key: str
) -> dict[str, Any]:
    """Run minitx-train for one variant into `family`; the result without figures or
    probes."""
    command = train_command(settings, variant, key)
    print(
        f"[{experiment.name}] {variant.name}: training for {describe_budget(settings)} "
        f"(log: {family / 'train.log'})",
        flush=True,
    )
    start = time.perf_counter()
    with (family / "train.log").open("w") as log:
        returncode = run_training(command, log)
    wall = time.perf_counter() - start
    if returncode == 130:  # Ctrl-C: no result; the next call retrains
        raise KeyboardInterrupt
    if returncode == 143:  # SIGTERM
        raise Terminated
    log_text = (family / "train.log").read_text(errors="replace")
    runs = sorted(p for p in family.iterdir() if p.is_dir())
    if returncode == 2 and not runs:  # refused before it trained: the variant, or the input?
        _check_shared_settings(settings, family)
    run_dir = runs[-1] if runs else family
    checkpoint = best_checkpoint(run_dir)
    return {
        "command": " ".join(["minitx-train", *command[len(TRAIN) :]]),  # as a user types it
        "status": _status(returncode, log_text),
        "wall_minutes": wall / 60,
        "run_dir": str(run_dir.relative_to(family)),  # relative: `--out` may move
        "checkpoint": str(checkpoint.relative_to(family)) if checkpoint else None,
        "probes": [],
    }


def run_training(command: list[str], log: IO[str]) -> int:
    """Run a variant's `command` (minitx-train) with its output into `log`; its exit status.

    minitx-train runs in a session of its own, and each stop reaches it through this process,
    once (`_stops_passed_on`): it finishes the update, saves last.ckpt, removes its temporary
    files and exits 130 or 143, which this waits for. Why: in the runner's process group, a
    SIGTERM to the runner alone (`kill PID`, a scheduler) left it training with no parent;
    and `subprocess.run` killed it a quarter second after Ctrl-C, half-way through its save.
    On Linux a runner that ends without passing a stop on (SIGKILL, the OOM killer) sends it
    a SIGTERM all the same (`_stop_with_parent`), else it trained on with no parent.
    """
    stop_with_parent = None
    if sys.platform.startswith("linux"):  # prctl looked up here: no dlopen in the forked child
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        stop_with_parent = functools.partial(_stop_with_parent, prctl, os.getpid())
    with subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=stop_with_parent,
    ) as process:
        with _stops_passed_on(process):
            return process.wait()


def _stop_with_parent(prctl: Callable[..., int], parent: int) -> None:
    """In the child, before it runs its command: the kernel sends it a SIGTERM when `parent`
    ends (Linux's PR_SET_PDEATHSIG, through libc's `prctl`); if `parent` has ended already,
    now."""
    pr_set_pdeathsig = 1  # <linux/prctl.h>
    prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent:  # it ended between the fork and the prctl
        os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def _stops_passed_on(process: subprocess.Popen) -> Iterator[None]:
    """While in the block, a Ctrl-C (SIGINT), a SIGTERM or a closed terminal (SIGHUP, passed
    on as a SIGTERM) is sent on to `process` instead of stopping this one; the same signal
    again stops it at once (minitx-train's own rule). The handlers from before come back."""
    if threading.current_thread() is not threading.main_thread():  # no handlers but there
        yield
        return
    said = False

    def pass_on(signum: int, frame: object) -> None:
        nonlocal said
        sent = signal.SIGINT if signum == signal.SIGINT else signal.SIGTERM
        what = "Ctrl-C" if sent == signal.SIGINT else "SIGTERM"
        if not said:
            print(
                f"{what}: minitx-train stops after its update ({what} again: at once)", flush=True
            )
            said = True
        process.send_signal(sent)

    stops = [signal.SIGINT, signal.SIGTERM, *([signal.SIGHUP] if hasattr(signal, "SIGHUP") else [])]
    with contextlib.ExitStack() as handlers_back:
        for signum in stops:
            previous = signal.signal(signum, pass_on)
            if previous is not None:  # None: set outside Python, nothing to put back
                handlers_back.callback(signal.signal, signum, previous)
        yield


def _check_shared_settings(settings: Settings, family: Path) -> None:
    """Raise `ConfigError` when minitx-train refuses what every variant shares (the configs,
    `--set`) as it parses them alone: each variant would be refused the same way, so the
    refusal is the user's error, not a result. `--print_config` checks the keys, their types
    and the config files and writes nothing; a refusal it cannot see (3 heads of a 64-wide
    model, a corpus out of reach) stays a result in the variant's table row."""
    shared = train_command(settings, Variant("shared"), family.name) + ["--print_config"]
    proc = subprocess.run(shared, capture_output=True, text=True, check=False)
    if proc.returncode != 2:  # 2: minitx-train's refusal; a crash is the variant's result
        return
    shutil.rmtree(family, ignore_errors=True)  # nothing trained; the error line says why
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    line = errors[-1].removeprefix("error: ") if errors else " ".join(proc.stderr.split())[-300:]
    raise ConfigError(
        f"minitx-train refused the settings every variant shares: {line}; fix --config or "
        "--set (nothing was trained with them)"
    )


def probe(settings: Settings, probes: list[str], checkpoint: Path) -> dict[str, Any]:
    """The named probes on a trained checkpoint (and the model at initialisation)."""
    from minitx.evaluation import evaluate, load_split
    from minitx.extras.experiments.probes import attention_statistics, shuffled_sources
    from minitx.model import Transformer

    translator, source, langs = load_trained(checkpoint)
    found: dict[str, Any] = {}
    if "attention" in probes:
        pairs = load_split(source, "validation", *langs, settings.probe_pairs)
        torch.manual_seed(settings.seed)
        initial = Transformer(translator.model.config).eval()
        found["attention"] = {
            "init": attention_statistics(
                initial, translator.tokenizer, pairs.sources, pairs.references
            ),
            "trained": attention_statistics(
                translator.model, translator.tokenizer, pairs.sources, pairs.references
            ),
        }
    if "word_order" in probes:
        test = load_split(source, "test", *langs, None)
        shuffled = shuffled_sources(test.sources, settings.seed)
        normal = evaluate(translator, test.sources, test.references, strategy="greedy")
        scrambled = evaluate(translator, shuffled, test.references, strategy="greedy")
        found["word_order"] = {"bleu": normal.bleu, "shuffled_bleu": scrambled.bleu}
    return found


def decode_variants(
    settings: Settings, name: str, variants: list[Variant], checkpoint: Path
) -> tuple[list[dict], str]:
    """The "hard" experiment: each variant decodes the test split of `checkpoint`'s own data
    (greedy) with its attention mode. Returns the rows and that data source."""
    from minitx.evaluation import evaluate, load_split

    translator, source, langs = load_trained(checkpoint)
    test = load_split(source, "test", *langs, None)
    # the data and languages named: minitx-evaluate's defaults are Multi30k's, not the model's
    scored = f"--data {shlex.quote(source)} --src-lang {langs[0]} --tgt-lang {langs[1]}"
    results = []
    for variant in variants:
        mode, scope = variant.overrides["attention"], variant.overrides["scope"]
        translator.set_attention(mode, scope=scope, seed=settings.seed)
        print(
            f"[{name}] {variant.name}: decoding {len(test.sources)} sentences",
            flush=True,
        )
        scores = evaluate(translator, test.sources, test.references, strategy="greedy")
        results.append(
            {
                "name": variant.name,
                "overrides": variant.overrides,
                "command": (
                    f"minitx-evaluate --checkpoint {shlex.quote(str(checkpoint))} {scored} "
                    f"--beam 1 --attention {mode}"
                    + (f" --hard-attention-scope {scope}" if mode != "soft" else "")
                    + (f" --seed {settings.seed}" if mode == "hard-sample" else "")
                ),
                "status": "ok",
                "test_bleu_greedy": scores.bleu,
                "test_chrf_greedy": scores.chrf,
                "sentences_per_sec": scores.sentences_per_second,
            }
        )
    translator.set_attention("soft")
    return results, source


def load_trained(checkpoint: Path) -> tuple[Translator, str, tuple[str, str]]:
    """The model of `checkpoint`, the data source and (source, target) languages it was trained
    on, from the training config the checkpoint carries; the default Multi30k source and
    minitx-evaluate's default languages (de, en) for what it does not say."""
    from minitx.data import DEFAULT_SOURCE
    from minitx.release import data_source
    from minitx.translator import Translator

    translator = Translator.from_pretrained(checkpoint)
    source = data_source(translator.train_config) or DEFAULT_SOURCE
    src_lang, tgt_lang = translator.languages
    return translator, source, (src_lang or "de", tgt_lang or "en")


def run_experiment(name: str, settings: Settings, only: list[str] | None = None) -> dict[str, Any]:
    """Run one experiment (only the variants named in `only`, when given) and write its
    results (`<out>/<name>/results.json`, `results.md`, figures); returns the results."""
    experiment = EXPERIMENTS[name]
    variants = [v for v in experiment.variants if not only or v.name in only]
    if experiment.trains:
        results = [train_variant(settings, experiment, v) for v in variants]
        checkpoint = data = None
    else:
        checkpoint = settings.checkpoint or default_checkpoint(settings)
        results, data = decode_variants(settings, name, variants, checkpoint)
    if only:  # the other rows of an earlier call with the same settings stay
        results = _merged(settings.out / name / "results.json", results, experiment, settings)
    summary = {
        "experiment": name,
        "claim": experiment.claim,
        "budget": describe_budget(settings) if experiment.trains else None,
        "config": " + ".join(base_configs(settings)),
        "overrides": settings.overrides,
        "checkpoint": str(checkpoint) if checkpoint else None,
        "data": data,
        "settings": {k: str(v) for k, v in asdict(settings).items()},
        "variants": results,
    }
    write_report(settings.out / name, summary)
    return summary


def _merged(
    path: Path, results: list[dict], experiment: Experiment, settings: Settings
) -> list[dict]:
    """`results` merged into the variants of an earlier `results.json`, by name, in the
    experiment's order, when that file was written with the same settings (`--out` aside);
    else its other rows are left out, and said so: the table's header states one budget and
    one config for every row."""
    earlier = json.loads(path.read_text()) if path.is_file() else {}
    ours = {k: str(v) for k, v in asdict(settings).items() if k != "out"}
    theirs = {k: v for k, v in earlier.get("settings", {}).items() if k != "out"}
    same = theirs == ours
    kept = earlier.get("variants", []) if same else []
    new = {v["name"] for v in results}
    dropped = [v["name"] for v in earlier.get("variants", []) if not same and v["name"] not in new]
    if dropped:
        print(
            f"[{experiment.name}] left out of the table, run with other settings: "
            f"{', '.join(dropped)} (run them again with these settings to compare)",
            flush=True,
        )
    by_name = {v["name"]: v for v in kept} | {v["name"]: v for v in results}
    return [by_name[v.name] for v in experiment.variants if v.name in by_name]


def default_checkpoint(settings: Settings) -> Path:
    """The best checkpoint of the default settings trained within the budget (trained now
    unless a finished run exists): what "hard" decodes without `--checkpoint`."""
    base = Experiment("default", "", (Variant("default"),), (), True)
    result = train_variant(settings, base, base.variants[0])
    if not result.get("checkpoint"):
        raise ConfigError(
            f"hard: the default run wrote no checkpoint ({result['status']}); "
            "pass a trained model with --checkpoint"
        )
    return settings.out / "runs" / run_key(settings, base.variants[0]) / result["checkpoint"]


__all__ = [
    "Settings",
    "best_checkpoint",
    "max_time",
    "run_experiment",
    "summarise_metrics",
    "train_command",
]
