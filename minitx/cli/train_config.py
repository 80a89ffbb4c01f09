"""`minitx-train`'s config: the packaged configs, and its checks before anything is built.

``--config NAME`` names a packaged config (`resolve_config_names`); a config file is checked as
YAML, key by key, before jsonargparse reads it (`check_config_sections`); the parsed values are
checked alone, without data, model or machine (`check_values`); and a parse error is one
``error:`` line (`OneLineErrorParser`). Each check exists because jsonargparse or Lightning
would otherwise end in a traceback, or read the value otherwise than the user meant, without a
word.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import sys
import types
import typing
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import yaml
from lightning.fabric.utilities.seed import max_seed_value, min_seed_value
from lightning.pytorch.cli import LightningArgumentParser

from minitx.cli.common import (
    EXIT_USER_ERROR,
    UsageError,
    with_negative_value_hint,
)
from minitx.errors import (
    ConfigError,
    debug_requested,
    is_whole_number,
)
from minitx.metrics import bleu_metric
from minitx.training.cadence import duration
from minitx.training.module import VALIDATION_METRICS

CONFIG_DIR = Path(str(resources.files("minitx") / "configs"))
"""The configs shipped with the package."""

DEFAULT_CONFIG = CONFIG_DIR / "multi30k_de_en.yaml"


def _non_finite(key: str, value: Any) -> Iterator[tuple[str, float]]:
    """The settings under `key` (a config namespace, list or value) that are a NaN or an
    infinite float, as (key, value)."""
    if isinstance(value, float):
        if not math.isfinite(value):
            yield key, value
    elif hasattr(value, "items"):  # a jsonargparse Namespace or a dict
        for name, item in value.items():
            yield from _non_finite(f"{key}.{name}" if key else str(name), item)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _non_finite(f"{key}[{index}]", item)


def check_finite_settings(config: Any) -> None:
    """Refuse a NaN or infinite number anywhere in the parsed config (``model.optim.lr: .nan``
    in a YAML file, ``--model.optim.lr=1e999``): no setting of minitx or Lightning means
    anything with one.

    Raises:
        ConfigError: naming the first such key.
    """
    for key, value in _non_finite("", config):
        raise ConfigError(f"{key}={value}: not a finite number; give a finite value")


def _admits_null(typehint: Any) -> bool:
    """Whether a setting of this type may be null (``Optional[...]``, ``Any``, a union with
    None)."""
    if typehint in (Any, type(None)):
        return True
    if typing.get_origin(typehint) in (typing.Union, types.UnionType):
        return any(_admits_null(arg) for arg in typing.get_args(typehint))
    return False


def check_no_null(parser: LightningArgumentParser, config: Any) -> None:
    """Refuse null for a setting whose type has no null (``run_name: null``, ``data.source: ~``
    in a config file): jsonargparse lets null through for text settings, which then fail deep
    inside with a TypeError. Linked settings are filled later (`LINKED_SETTINGS`).

    Raises:
        ConfigError: naming the first such key and the kind of value to give.
    """
    # jsonargparse keeps a typed key's type as _typehint; nested keys come flattened (data.source)
    for action in parser._actions:
        typehint = getattr(action, "_typehint", None)
        if typehint is None or action.dest.endswith(".help") or action.dest in LINKED_SETTINGS:
            continue
        if config.get(action.dest) is None and not _admits_null(typehint):
            raise ConfigError(f"{action.dest}=null: give {_kind(typehint)}")


def _kind(typehint: Any) -> str:
    """The kind of value a setting of this type takes, as an error line asks for it: 'text',
    'text or an Accelerator'."""
    if typing.get_origin(typehint) in (typing.Union, types.UnionType):
        return " or ".join(_kind(arg) for arg in typing.get_args(typehint))
    name = getattr(typehint, "__name__", str(typehint))
    return _KINDS.get(name, f"an {name}" if name[:1] in "AEIOU" else f"a {name}")


def check_budget_and_seed(config: Any) -> None:
    """Refuse a ``trainer.max_time`` Lightning cannot read and a seed out of range, before
    Lightning seeds or builds its Timer (each fails there with a traceback).

    Raises:
        ConfigError: naming the setting, the value and the forms it takes.
    """
    max_time = config.trainer.get("max_time")
    if max_time is not None:
        budget = duration(max_time)
        if budget.total_seconds() <= 0:
            raise ConfigError(
                f"trainer.max_time={max_time!r}: the budget must be longer than zero, or null"
            )
    seed = config.get("seed_everything")
    if isinstance(seed, int) and not isinstance(seed, bool):
        low, high = min_seed_value, max_seed_value  # what `seed_everything` takes
        if not low <= seed <= high:
            raise ConfigError(
                f"seed_everything={seed}: a seed lies in {low}..{high}; give one there, or "
                "true for a random one"
            )


def check_trainer_counts(config: Any) -> None:
    """Refuse the trainer settings Lightning's Trainer accepts but then fails on, or reads
    otherwise than a user meant: a count of zero it divides by inside the loop (a
    ZeroDivisionError after the run directory is written); a zero plan, a run that trains
    nothing; a negative gradient clip, by which torch scales the gradients (the run
    diverged); a negative ``log_every_n_steps`` (every step); a ``limit_test_batches``, which
    the test after fitting does not read; a spawning strategy; a ``val_check_interval``
    below one batch.

    Raises:
        ConfigError: naming the setting and the values it takes.
    """
    trainer = config.trainer
    for key in ("max_steps", "max_epochs"):  # Lightning's fit ended at once, with status 0
        if trainer.get(key) == 0:
            raise ConfigError(
                f"trainer.{key}=0 trains nothing; give at least 1, or -1 for no bound"
            )
    if trainer.get("limit_train_batches") == 0:  # the same: an empty run directory, status 0
        raise ConfigError(
            "trainer.limit_train_batches=0 trains nothing; give a number of batches (at least "
            "1), a fraction of an epoch in (0.0, 1.0], or null for all"
        )
    clip = trainer.get("gradient_clip_val")
    if clip is not None and clip < 0:  # torch would scale the gradients by a negative factor
        raise ConfigError(
            f"trainer.gradient_clip_val={clip:g}: give 0 or more (0 or null: no clipping)"
        )
    for key in ("accumulate_grad_batches", "check_val_every_n_epoch"):
        value = trainer.get(key)
        if is_whole_number(value) and value < 1:
            raise ConfigError(f"trainer.{key}={value}: give a whole number of at least 1")
    strategy = trainer.get("strategy")
    if isinstance(strategy, str) and "spawn" in strategy:  # ddp_spawn, ddp_spawn_find_...
        # its processes get the run pickled, and the command line's links do not pickle
        raise ConfigError(
            f"trainer.strategy={strategy}: minitx-train starts its processes with "
            "--trainer.strategy ddp (multi-node.md), not by spawning; use ddp"
        )
    every = trainer.get("log_every_n_steps")
    if is_whole_number(every) and every < 0:  # Lightning logged every step, without a word
        raise ConfigError(
            f"trainer.log_every_n_steps={every}: give a number of steps (at least 1), or 0 "
            "for no per-step curves"
        )
    limit = trainer.get("limit_test_batches")
    if limit is not None:  # 0 tested everything, and so did 1 batch
        raise ConfigError(
            f"trainer.limit_test_batches={limit}: the test after fitting decodes the whole test "
            "split (greedy and beam 5), outside Lightning's test loop; leave it out, and use "
            "--test false for no test, or minitx-evaluate --limit N on the checkpoint"
        )
    interval = trainer.get("val_check_interval")
    if is_whole_number(interval) and interval < 1:  # 0.0, a fraction, validates every batch
        raise ConfigError(
            f"trainer.val_check_interval={interval}: give a number of batches (at least 1), a "
            "fraction of an epoch in [0.0, 1.0] or a time 'DD:HH:MM:SS'"
        )


def _check_bleu_schedule(config: Any) -> None:
    """The best checkpoint watching val/bleu needs BLEU in every epoch it is chosen in.

    Raises:
        ConfigError: naming both settings.
    """
    every = config.model.validation.bleu_every_n_epochs
    checkpoint = config.checkpoint
    n_epochs = checkpoint.every_n_epochs  # None: every epoch, unless a step or time trigger
    if n_epochs is None:
        n_epochs = 0 if checkpoint.every_n_train_steps or checkpoint.train_time_interval else 1
    if checkpoint.monitor == "val/bleu" and (every <= 0 or n_epochs % every):
        raise ConfigError(
            f"model.validation.bleu_every_n_epochs={every} but checkpoint.monitor is val/bleu "
            f"every {n_epochs} epoch(s); set checkpoint.every_n_epochs to a multiple of "
            f"{every} (or monitor val/loss instead, with --checkpoint.mode min)"
        )


def _check_checkpoint(config: Any) -> None:
    """Refuse the ``checkpoint.*`` settings ModelCheckpoint refuses only with a traceback (a
    validation metric that is never logged: after the first epoch), and a mode that keeps the
    worst checkpoint as the best (``val/loss`` with ``max``): the test after fitting would score
    it, with no word said.

    Raises:
        ConfigError: naming the setting and the values it takes.
    """
    checkpoint = config.checkpoint
    if checkpoint.mode not in ("min", "max"):
        raise ConfigError(f"checkpoint.mode={checkpoint.mode!r}: give min or max")
    if checkpoint.save_top_k < -1:
        raise ConfigError(
            f"checkpoint.save_top_k={checkpoint.save_top_k}: give -1 (keep all), 0 (none) or more"
        )
    for key in ("every_n_epochs", "every_n_train_steps"):
        value = checkpoint.get(key)
        if value is not None and value < 0:
            raise ConfigError(f"checkpoint.{key}={value}: give 0 (never) or more, or null")
    monitor = checkpoint.monitor
    if (
        isinstance(monitor, str)
        and monitor.startswith("val/")
        and monitor not in VALIDATION_METRICS
    ):
        # Lightning's ModelCheckpoint would refuse it at the first save, after a whole epoch
        raise ConfigError(
            f"checkpoint.monitor={monitor}: validation logs {', '.join(VALIDATION_METRICS)}; "
            "monitor one of them"
        )
    better = VALIDATION_METRICS.get(monitor)
    if better is not None and checkpoint.mode != better:
        raise ConfigError(
            f"checkpoint.monitor={checkpoint.monitor} with checkpoint.mode={checkpoint.mode} keeps "
            f"the worst checkpoint as the best; set --checkpoint.mode {better}"
        )


def _check_bleu_language(config: Any) -> None:
    """BLEU of the target language can be scored (`minitx.metrics.bleu_metric`: Japanese and
    Korean need MeCab): refused now, not once the corpus is read and its tokenizer trained.

    Raises:
        ConfigError: naming what to install.
    """
    bleu_metric(language=config.data.tgt_lang)


def _check_splits(config: Any) -> None:
    """``data.splits`` must map train and validation (and test, which ``--test true``, the
    default, scores after fitting), and nothing else: refused now, not after the corpus is
    read, its tokenizer trained and every split tokenized.

    Raises:
        ConfigError: naming the keys and the settings.
    """
    splits = config.data.splits
    if splits is None:
        return
    needed = ("train", "validation", "test") if config.test else ("train", "validation")
    missing = [key for key in needed if key not in splits]
    unknown = sorted(set(splits) - {"train", "validation", "test"})
    problems = [f"has no {', '.join(map(repr, missing))}"] if missing else []
    if "test" in missing:
        problems[0] += ", which --test true (the default) scores after fitting"
    if unknown:
        problems.append(f"unknown keys {unknown}")
    if problems:
        raise ConfigError(
            f"data.splits {dict(splits)} {'; '.join(problems)}; map train, validation and test "
            "to file stems (test may be left out with --test false)"
        )


def _check_averaging(config: Any) -> None:
    """``averaging.filename`` must not name a checkpoint the run saves (``last.ckpt``, or a
    name ``checkpoint.filename`` makes): the average would silently replace it.

    Raises:
        ConfigError: naming both settings.
    """
    name = config.averaging.filename
    stem = name.removesuffix(".ckpt")
    checkpoint = config.checkpoint
    pattern = checkpoint.filename or "{epoch}-{step}"  # Lightning's default
    parts = re.split(r"\{([^}]*)\}", pattern)  # text, field, text, field, ...
    insert = checkpoint.get("auto_insert_metric_name", True)
    regex = "".join(
        re.escape(part)
        if i % 2 == 0
        else (re.escape(part.split(":")[0]) + "=" if insert else "") + ".*"
        for i, part in enumerate(parts)
    )
    if re.fullmatch(r"last(-v\d+)?", stem) or re.fullmatch(regex, stem):
        raise ConfigError(
            f"averaging.filename {name!r} names a checkpoint the run saves (last.ckpt, or "
            f"checkpoint.filename {pattern!r}): the average would replace it; give another "
            "name, such as averaged.ckpt"
        )


def resolve_config_names(args: list[str]) -> list[str]:
    """Replace `--config NAME` (or `-c NAME`) by the packaged config `NAME[.yaml]` when no such
    file exists, and move ``--print_config`` to the end.

    Raises:
        UsageError: a config file that is not UTF-8 text, such as a checkpoint given as
            ``--config`` (jsonargparse would end in a UnicodeDecodeError's traceback), or
            neither a file nor a packaged name (listing the names).
    """
    # jsonargparse prints the config parsed up to --print_config: last, it shows all of it
    printing = [a for a in args if a == "--print_config" or a.startswith("--print_config=")]
    out = [a for a in args if a not in printing] + printing
    for flag, value, index in _config_args(out):
        packaged = _packaged(value)
        path = Path(value).expanduser()  # as jsonargparse reads it: --config=~/my.yaml
        if not value.strip():  # jsonargparse: "Unexpected config:", naming nothing
            raise UsageError(
                f"{flag} {value!r}: empty (is a shell variable unset?); give a config file or "
                f"a packaged name ({packaged_names()})"
            )
        # no file of that name: a packaged config's, even beside a folder of that name (the
        # run family runs/tiny/ of `--config tiny`)
        if not path.is_file() and packaged is not None:
            out[index] = str(packaged) if out[index] == value else f"--config={packaged}"
        elif path.exists() and not path.is_file():  # jsonargparse: "Path is not a file"
            what = "a directory" if path.is_dir() else "a device or pipe"
            raise UsageError(
                f"{flag} {value}: {what}, not a config file; give a YAML file or a packaged "
                f"name ({packaged_names()})"
            )
        elif path.is_file():
            _check_config_text(flag, path)
        elif not path.exists() and value != "-" and not _yaml_text(value):
            # neither a file, standard input (-), nor a YAML text or URL: a mistyped name
            raise UsageError(
                f"{flag} {value}: no such file, nor a packaged config of that name; give a "
                f"config file or a packaged name ({packaged_names()})"
            )
    return out


def _packaged(name: str) -> Path | None:
    """The packaged config `name` (``tiny`` or ``tiny.yaml``) names, or None: a name with a
    folder in it, or of no packaged config."""
    packaged = CONFIG_DIR / (name if name.endswith(".yaml") else f"{name}.yaml")
    return packaged if "/" not in name and packaged.is_file() else None


def _yaml_text(value: str) -> bool:
    """Whether a config value is YAML text (or a URL), as jsonargparse reads it, not a path."""
    return any(c in value for c in "{}:\n")


def packaged_names() -> str:
    """The packaged configs' names, for messages: "long, multi30k_cs_en, ..., tiny"."""
    return ", ".join(sorted(p.stem for p in CONFIG_DIR.glob("*.yaml")))


def _config_args(args: list[str]) -> Iterator[tuple[str, str, int]]:
    """(flag, value, index of the value's item) of each ``--config``/``-c`` in `args`."""
    for i, arg in enumerate(args):
        if arg in ("-c", "--config") and i + 1 < len(args):
            yield arg, args[i + 1], i + 1
        elif arg.startswith("--config="):
            yield "--config", arg.split("=", 1)[1], i


def _check_config_text(flag: str, path: Path) -> None:
    try:
        path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{flag} {path}: not a YAML config (byte {exc.start} is not UTF-8 text); give a "
            f"config file or a packaged name ({packaged_names()}); "
            "to resume from a checkpoint, pass it as --ckpt_path"
        ) from None


def check_config_sections(args: list[str], parser: LightningArgumentParser) -> dict[str, str]:
    """Refuse a config file that is not valid YAML, is empty, or gives a section (``model``,
    ``model.transformer``, ``trainer``, ...) a value that is not a mapping of its keys.

    jsonargparse ends such a file in a traceback, or, for ``model: {transformer: 3}``, drops
    the section without a word and trains the default model.

    A key whose default in `parser` is a (jsonargparse) Namespace is a section; the defaults
    are built only when a config file is given (a tenth of a second, not every start).

    Returns:
        The user's config files' settings that no later flag or file replaced: dotted key ->
        "--config FILE" (`with_source` names the file in an error about the key).

    Raises:
        UsageError: naming the file, the key and what to write instead.
    """
    defaults: list[Any] = []  # built once, at the first file
    set_at: dict[int, tuple[str, set[str]]] = {}  # the file's item -> (its flag, its keys)
    for flag, value, index in _config_args(args):
        path = Path(value)
        if path.is_file():  # else jsonargparse reports a missing file (or parses inline YAML)
            keys = _check_config_file(f"{flag} {path}", path, parser, defaults, [])
            at = index if args[index].startswith("--config=") else index - 1  # the flag's item
            _check_flags_before(args[:at], keys, flag, value)
            # a packaged config's values are valid: an error is of what the user changed
            set_at[index] = ("" if path.parent == CONFIG_DIR else f"{flag} {value}", keys)
    sources: dict[str, str] = {}  # in command-line order: the last setter wins
    for i, arg in enumerate(args):
        if i in set_at:
            where, keys = set_at[i]
            sources |= dict.fromkeys(keys, where)
        elif (key := _flag_key(arg)) is not None:
            sources |= {k: "" for k in sources if _within(k, key)}
            sources[key] = ""
    return {key: where for key, where in sources.items() if where}


def _flag_key(arg: str) -> str | None:
    """The dotted key a command-line item sets (``--model.optim.lr=3`` -> model.optim.lr), or
    None for a value, a ``--config`` or ``--print_config``."""
    if not arg.startswith("--") or arg.startswith(("--config", "--print_config")):
        return None
    return _without_init_args(arg[2:].split("=", 1)[0])


def _within(key: str, section: str) -> bool:
    """Whether the dotted `key` is `section` or one of its keys."""
    return key == section or key.startswith(f"{section}.")


def with_source(message: str, sources: dict[str, str]) -> str:
    """`message` with the config file that set its setting (the dotted key it begins with, or
    every key it sets of the section it begins with) when one file of the user's did:
    jsonargparse's and the checks' messages name the key, not where its value came from."""
    named = re.match(r"([a-z_]\w*(?:\.\w+)+|[a-z_]\w*)[=:]", message)
    if named is None:
        return message
    key = named.group(1)
    files = {where for k, where in sources.items() if _within(k, key)}
    return f"{message} (set in {files.pop()})" if len(files) == 1 else message


def _check_flags_before(earlier: list[str], keys: set[str], flag: str, value: str) -> None:
    """Refuse a flag given before a config file that sets its key again: the command line is
    read in order, so the file's value won and the flag was lost without a word. A section's
    flag (``--attention_maps '{kinds: [cross]}'``) loses only the keys the file sets, which
    jsonargparse merges: those are not known here, and it passes.

    Raises:
        UsageError: naming the flag, the file (as its packaged name where it is one) and the
            order to write.
    """
    for arg in earlier:
        key = _flag_key(arg)
        if key is not None and any(_within(key, k) for k in keys):
            shown = Path(value).stem if Path(value).parent == CONFIG_DIR else value
            raise UsageError(
                f"--{key} comes before {flag} {shown}, which sets {key} again and wins (the "
                f"command line is read in order); put --{key} after {flag} {shown}"
            )


def _without_init_args(key: str) -> str:
    """A dotted key as its value is set: ``trainer.logger.init_args.save_dir`` and
    ``trainer.logger.save_dir`` (jsonargparse takes both) are one setting."""
    return ".".join(part for part in key.split(".") if part != "init_args")


def _check_config_file(
    where: str, path: Path, parser: LightningArgumentParser, defaults: list[Any], seen: list[Path]
) -> set[str]:
    """`check_config_sections` for one file, and for each file its ``config:`` key includes
    (jsonargparse reads them relative to the including file's folder); returns the dotted
    keys they set."""
    if path.resolve() in seen:
        chain = " -> ".join(str(p) for p in [*seen, path.resolve()])
        raise UsageError(f"{where}: the config files include each other ({chain}); remove one")
    try:
        settings = yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeys)
    except _KeyTwice as twice:
        raise UsageError(
            f"{where}: {twice}, and YAML would keep only the second: write it once"
        ) from None
    except yaml.YAMLError as exc:  # jsonargparse's message names no file
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
        tab = "'\\t'" in problem  # PyYAML writes the character escaped
        fix = "indent with spaces, not tabs" if tab else "check the brackets, quotes and indents"
        raise UsageError(
            f"{where}: not valid YAML ({problem}{at}); {fix}, and write 'key: value' pairs"
        ) from None
    if settings is None:
        raise UsageError(
            f"{where}: the file holds no settings (it is empty or all comments); give keys "
            "such as 'trainer: {max_steps: 100}', or leave out this --config"
        )
    if not defaults:
        defaults.append(parser.get_defaults())
    _check_sections(where, settings, defaults[0], "")
    keys = _dotted_keys(settings) - {"config"}
    inner = _included_file(where, path, settings.get("config"))
    if inner is None:
        return keys
    included = _check_config_file(
        f"{inner} (included by {path})", inner, parser, defaults, [*seen, path.resolve()]
    )
    # jsonargparse reads the include, then puts back each of this file's top-level keys
    # whole: a section both set keeps this file's keys alone
    sections = {key for key, value in settings.items() if isinstance(value, dict)}
    lost = sorted(k for k in included - keys if k.split(".")[0] in sections)
    if lost:
        section = lost[0].split(".")[0]
        raise UsageError(
            f"{where}: it sets {section} keys and includes {inner}, whose {lost[0]} would be "
            f"lost (a section of the including file replaces the included one's whole); set "
            f"them in one file, or give both: --config {inner} --config {path}"
        )
    return keys | included


def _included_file(where: str, path: Path, name: Any) -> Path | None:
    """The file a config file's ``config:`` key includes: one path, relative to the including
    file's folder (jsonargparse follows no other value: a list was dropped without a word, a
    number ended in a traceback). None: no include (no key, or null), or settings written
    inline (``config: "{trainer: {max_steps: 3}}"``), which jsonargparse reads itself.

    Raises:
        UsageError: naming the including file, the value and what to give instead.
    """
    if name is None:
        return None
    if not isinstance(name, str) or not name.strip():
        raise UsageError(
            f"{where}: config: {name!r}: give the path of one YAML file to include, relative "
            "to this file's folder; to read several files, give --config once for each"
        )
    inner = path.parent / Path(name).expanduser()  # an absolute `name` stays itself
    if inner.is_file():
        return inner
    if not inner.exists() and _yaml_text(name):  # read as --config reads it
        return None
    what = "a directory" if inner.is_dir() else "no such file"
    hint = (
        f"; a packaged config is read from the command line: --config {name} --config {path}"
        if _packaged(name) is not None
        else ""
    )
    raise UsageError(
        f"{where}: config: {name}: {what} ({inner}); give the path of a YAML file, relative to "
        f"this file's folder{hint}"
    )


def _dotted_keys(settings: Any, prefix: str = "") -> set[str]:
    """The keys a config's mapping sets, each as its flag names it: {"model.optim.lr", ...}
    (an ``init_args`` level adds no part, as `_without_init_args` reads a flag)."""
    if not isinstance(settings, dict):
        return {prefix.rstrip(".")} if prefix else set()
    return {
        k
        for key, value in settings.items()
        for k in _dotted_keys(value, prefix if key == "init_args" else f"{prefix}{key}.")
    }


class _KeyTwice(Exception):
    """A mapping of a config file gives one key twice."""


class _UniqueKeys(yaml.SafeLoader):
    """`yaml.SafeLoader` that refuses a key given twice in one mapping, which PyYAML (and so
    jsonargparse) resolves to the last one without a word."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[str, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: its keys may be redone
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, str):  # a `? [a, b]` key is no setting: jsonargparse says so
                continue
            line = key_node.start_mark.line + 1
            if key in lines:
                raise _KeyTwice(f"key {key!r} is given twice (lines {lines[key]} and {line})")
            lines[key] = line
        return super().construct_mapping(node, deep=deep)


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """'; did you mean PREFIX+KEY?' for the key of `known` closest to a misspelt `word`
    (difflib's ratio), or '' when none is close."""
    close = difflib.get_close_matches(word, sorted(known), n=1)
    return f"; did you mean {prefix}{close[0]}?" if close else ""


def _check_sections(where: str, settings: Any, defaults: Any, prefix: str) -> None:
    if not isinstance(settings, dict):
        if not prefix:
            raise UsageError(
                f"{where}: the file holds {type(settings).__name__} {settings!r}, not a mapping "
                "of settings; write keys such as 'trainer: {max_steps: 100}'"
            )
        keys = prefix.rstrip(".").split(".")
        child = next(iter(defaults.keys()), "key").split(".")[0]
        example = "".join(f"{k}: {{" for k in keys) + f"{child}: ..." + "}" * len(keys)
        shown = "empty" if settings is None else repr(settings)
        raise UsageError(
            f"{where}: {prefix.rstrip('.')} is {shown}, but it is a section of settings, not a "
            f"value; write its keys below it, as in '{example}'"
        )
    if prefix and ("class_path" in settings or "init_args" in settings):
        # jsonargparse's form of a class's settings: its init_args are the section's keys
        settings = settings.get("init_args") if isinstance(settings.get("init_args"), dict) else {}
    for key, value in settings.items():
        if f"{prefix}{key}" in LINKED_SETTINGS:
            raise UsageError(
                f"{where}: {prefix}{key} is set from {LINKED_SETTINGS[f'{prefix}{key}']}; set "
                "that instead"
            )
        if isinstance(key, str) and key not in defaults:  # else jsonargparse names no file
            known = {k.split(".")[0] for k in defaults.keys() if not k.startswith("_")}
            hint = did_you_mean(key, known, prefix)
            raise UsageError(
                f"{where}: {prefix}{key} is not a setting{hint}  "
                f"({train_command()} --help lists every key)"
            )
        default = defaults.get(key) if isinstance(key, str) else None
        if isinstance(default, type(defaults)):  # a section: a (jsonargparse) Namespace
            _check_sections(where, value, default, f"{prefix}{key}.")


class OneLineErrorParser(LightningArgumentParser):
    """The command-line parser, with a parse error as one ``error: ...`` line (exit status 2)
    instead of a 120-line usage dump; ``MINITX_DEBUG=1`` keeps jsonargparse's report."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or debug_requested():
            super().error(message, ex)
        one_line = " ".join(str(message).split())
        one_line = self._section_message(one_line) or _choices_message(one_line)
        one_line = with_negative_value_hint(one_line)
        one_line = with_source(one_line, getattr(self, "sources", {}))
        one_line += self._did_you_mean(message)
        print(f"error: {one_line}  ({train_command()} --help lists every key)", file=sys.stderr)
        raise SystemExit(EXIT_USER_ERROR)

    def _section_message(self, message: str) -> str | None:
        """jsonargparse's refusal of a value given to a section (``--data DIR``,
        ``--model.transformer 3``), which it reads as the path of a YAML file of the
        section's keys: said as that, with the key the value was probably meant for."""
        refused = re.match(
            r"Parser key \"([\w.]+)\": Unable to load config (['\"])(.*?)\2", message
        )
        if refused is None:
            return None
        section, value = refused.group(1), refused.group(3)
        if Path(value).is_file():
            return (
                f"--{section} {value}: the file does not hold a mapping of {section}'s keys; "
                f"write them as 'key: value' lines"
            )
        # --data DIR is the likely slip (minitx-evaluate takes --data): name data.source
        example = f"--data.source {value or 'DIR'}" if section == "data" else f"--{section}.KEY"
        return (
            f"--{section} {value!r}: {section} is a section of settings, not a value; set its "
            f"keys, as in {example}, or give a YAML file of them"
        )

    def _did_you_mean(self, message: str) -> str:
        """'; did you mean --KEY?' for the first unrecognized --flag that is close to a key,
        as a config file's misspelt key gets (`_check_sections`); else ''."""
        unknown = re.match(r"unrecognized arguments: (.*)", str(message))
        flags = re.findall(r"(?:^|\s)(--[^\s=]+)", unknown.group(1)) if unknown else []
        if not flags:  # the defaults take a tenth of a second to build: only for a hint
            return ""
        keys = [f"--{key}" for key in self.get_defaults().keys() if not key.startswith("_")]
        return next((hint for flag in flags if (hint := did_you_mean(flag, keys))), "")


_KINDS = {
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "str": "text",
    "NoneType": "null",
    "dict[str, str]": "a mapping {name: text, ...}",
}
"""How a setting's type is asked for in an error line (jsonargparse names Python's classes)."""


def _choices_message(message: str) -> str:
    """jsonargparse's refusal of a value outside a union of literals (``trainer.precision``)
    lists each subtype's type and error, then the value: said as the value and its choices.
    Its refusal of ``nan`` for a float is said as a NaN's (``.nan``) is, and a value of the
    wrong type (``<class 'int'>``, a union of such) as the kind of value to give."""
    nan = re.fullmatch(
        r"Parser key \"([\w.]+)\": Expected a <class 'float'>\. Got value: "
        r"(nan|[+-]?inf(?:inity)?)",
        message,
        re.I,
    )
    if nan:  # YAML reads 'nan' as text: only '.nan' is the float, refused by check_values
        return f"{nan.group(1)}={nan.group(2)}: not a finite number; give a finite value"
    typed = re.fullmatch(
        r"Parser key \"([\w.]+)\": Expected a <class '(\w+)'>\. Got value: (.*)", message
    )
    if typed and typed.group(2) == "tuple":  # kinds: [cross], betas: [0.9, 0.98]
        key, given = typed.group(1), typed.group(3)
        return f"{key}={given}: give a list in brackets, as in --{key} '[{given}, ...]'"
    if typed and typed.group(2) in _KINDS:  # Python's class names are not what a user types
        given = "null" if typed.group(3) == "None" else typed.group(3)  # as YAML writes it
        return f"{typed.group(1)}={given}: give {_KINDS[typed.group(2)]}"
    key = re.match(r'Parser key "([\w.]+)": Does not validate against any of the Union', message)
    given = re.search(r"Given value: (.*)$", message)
    literals = re.findall(r"Subtypes: \[(.*?)\] Errors:", message)
    if not (key and given and literals):
        return message
    subtypes = re.findall(r"dict\[str, str\]|<class '\w+'>", literals[0])
    words = [_KINDS.get(re.sub(r"<class '(\w+)'>", r"\1", t)) for t in subtypes]
    if subtypes and ", ".join(subtypes) == literals[0] and all(words):  # types, no literals
        return f"{key.group(1)}={given.group(1)}: give {' or '.join(map(str, words))}"
    choices = re.findall(r"typing\.Literal\[(.*?)\]", literals[0])
    others = re.sub(r"typing\.Literal\[.*?\]|<class 'NoneType'>|[, ]", "", literals[0])
    if not choices or others:  # a type beside the literals (an int, a class): not a choice
        return message
    # one of each as typed on the command line: 64 and '64' are both 64
    values = [v.strip().strip("'") for group in choices for v in group.split(",")]
    values = list(dict.fromkeys(values)) + (["null"] if "NoneType" in literals[0] else [])
    return f"{key.group(1)}={given.group(1)}: give one of {', '.join(values)}"


def train_command() -> str:
    """How the user started training, for hints: ``python scripts/train.py`` or
    ``minitx-train`` (also for ``python -m minitx.cli.train``, whose name is train.py too)."""
    started = Path(sys.argv[0])
    return f"python {started}" if started.parent.name == "scripts" else "minitx-train"


LINKED_SETTINGS = {
    "model.transformer.src_vocab_size": "data.vocab_size",
    "model.transformer.tgt_vocab_size": "data.vocab_size",
    "data.max_positions": "model.transformer.max_positions",
}
"""The settings `MinitxCLI.add_arguments_to_parser` links to another, by the one they come
from: a config file that sets them is refused (jsonargparse would replace the value)."""


def check_launcher(config: Any) -> None:
    """Refuse several nodes that nothing connects: without a launcher Lightning detects
    (torchrun, SLURM, LSF, MPI), a cluster plugin or ``MASTER_ADDR``, node 0 waited for the
    others in silence, deaf to Ctrl-C.

    Raises:
        UsageError: naming the ways to start the nodes.
    """
    from lightning.fabric.plugins.environments import (
        LSFEnvironment,
        MPIEnvironment,
        SLURMEnvironment,
        TorchElasticEnvironment,
    )

    trainer = config.trainer
    if (
        (trainer.get("num_nodes") or 1) == 1
        or trainer.get("plugins")
        or "MASTER_ADDR" in os.environ
    ):
        return  # a plugin may be the cluster's environment: Lightning reads it
    launchers = (TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment)
    if not any(env.detect() for env in launchers):
        raise UsageError(
            f"trainer.num_nodes={trainer.get('num_nodes')}, and nothing says where node 0 is: "
            "on every node, set MASTER_ADDR, MASTER_PORT and NODE_RANK, or start it with "
            "torchrun, SLURM or mpirun (the multi-node guide); on one machine, use "
            "--trainer.devices N"
        )


def _check_run_settings(config: Any) -> None:
    """Refuse an empty ``ckpt_path``, ``runs_dir`` or ``run_name`` (a shell variable unset: the
    run landed in ./RUN_NAME or runs/) and a ``run_name`` outside ``runs_dir``.

    Raises:
        UsageError: naming the flag and what to give.
    """
    if config.ckpt_path is not None and not str(config.ckpt_path).strip():
        raise UsageError(
            "--ckpt_path is empty; give a checkpoint file or 'last' (a shell variable such "
            "as $CKPT may be unset), or leave --ckpt_path out to start a new run"
        )
    for key, default in (("runs_dir", "runs"), ("run_name", "run")):
        if not str(config[key]).strip():  # else the run lands in ./RUN_NAME or runs/
            raise UsageError(
                f"--{key} is empty; give a directory name (a shell variable may be unset), "
                f"or leave --{key} out for the default ({default!r}, or the config's)"
            )
    name = os.path.normpath(config.run_name)
    if os.path.isabs(name) or name.split(os.sep)[0] in (".", ".."):
        raise UsageError(  # the run would land beside the run families, or outside runs_dir
            f"--run_name {config.run_name}: give a name inside runs_dir, such as my_run"
        )


def check_values(parser: LightningArgumentParser, config: Any) -> None:
    """The checks of a parsed config's values alone, with neither the data, the model nor
    the machine: a run makes them as soon as it has parsed its command line, and
    ``--print_config`` before it prints."""
    check_no_null(parser, config)
    check_budget_and_seed(config)
    check_finite_settings(config)
    check_trainer_counts(config)
    _check_checkpoint(config)
    _check_bleu_schedule(config)
    _check_splits(config)
    _check_bleu_language(config)
    _check_averaging(config)
    _check_run_settings(config)


def config_message(exc: ConfigError) -> ConfigError:
    """`exc` with the config classes named by their YAML keys (``model.transformer.n_heads``)."""
    text = str(exc)
    for cls, key in _CONFIG_KEYS.items():
        text = text.replace(f"{cls}.", f"{key}.").replace(f"{cls}:", f"{key}:")
    for linked, given in LINKED_SETTINGS.items():  # the setting the user gave, not its copy
        text = text.replace(linked, given)
    return ConfigError(text)


_CONFIG_KEYS = {
    "TransformerConfig": "model.transformer",
    "OptimConfig": "model.optim",
    "ValidationConfig": "model.validation",
    "DecodingConfig": "model.validation.decoding",
    "CheckpointAveraging": "averaging",
}
