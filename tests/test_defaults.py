"""One source for each default: the code's defaults are the default recipe.

`minitx-train` without a `--config` resolves to the dataclass and constructor defaults, key
by key, for the model, optimisation, validation, data and minitx callback groups; the
default YAML repeats none of them; `Transformer(TransformerConfig())` is the model the
command builds; and the packaged configs' comments say what keys mean, not what was
measured.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers import CONFIG_DIR

from minitx.cli.train import build_cli
from minitx.data.datamodule import TranslationDataModule
from minitx.model import Transformer, TransformerConfig
from minitx.training import (
    AttentionMapLogger,
    CheckpointAveraging,
    OptimConfig,
    TranslationModule,
    ValidationConfig,
)

pytestmark = pytest.mark.filterwarnings("ignore:LightningCLI's args parameter")


def plain(value: Any) -> Any:
    """Tuples as lists (YAML and jsonargparse have lists only), recursively."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    return value


def constructor_defaults(cls: type, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """`cls.__init__`'s arguments with a default, by name."""
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {
        p.name: p.default
        for p in parameters
        if p.default is not inspect.Parameter.empty and p.name not in skip
    }


def flat(tree: dict, prefix: str = "") -> dict[str, Any]:
    """{"a.b": value} for every leaf of a nested dict."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.fixture(scope="module")
def resolved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The default config as `minitx-train --print_config` resolves it, as a plain dict."""
    import os

    cwd = Path.cwd()
    os.chdir(tmp_path_factory.mktemp("defaults"))
    try:
        return build_cli(["--trainer.logger", "false"]).config.as_dict()
    finally:
        os.chdir(cwd)


def code_defaults() -> dict[str, dict[str, Any]]:
    """Each minitx config group's defaults as the code defines them."""
    return {
        "model.transformer": asdict(TransformerConfig()),  # vocab sizes: from data.vocab_size
        "model.optim": asdict(OptimConfig()),
        "model.validation": asdict(ValidationConfig()),
        "model": constructor_defaults(TranslationModule, ("transformer", "optim", "validation")),
        # max_positions: linked from model.transformer.max_positions when instantiated
        "data": constructor_defaults(TranslationDataModule, ("max_positions",)),
        "attention_maps": constructor_defaults(AttentionMapLogger),
        "averaging": constructor_defaults(CheckpointAveraging),
    }


def group(config: dict[str, Any], name: str) -> dict[str, Any]:
    """The keys of `config`'s group `name` (dotted), without the groups nested in it
    (`model.validation.decoding` is one value: a `DecodingConfig` field)."""
    for part in name.split("."):
        config = config[part]
    nested = {"model": ("transformer", "optim", "validation")}.get(name, ())
    return {k: v for k, v in config.items() if k not in nested}


@pytest.mark.parametrize("name", sorted(code_defaults()))
def test_the_resolved_default_config_is_the_code_defaults_key_by_key(
    name: str, resolved: dict[str, Any]
) -> None:
    expected = plain(code_defaults()[name])
    actual = plain(group(resolved, name))
    assert sorted(actual) == sorted(expected), f"{name}: other keys than the code's"
    differ = {k: (actual[k], expected[k]) for k in expected if actual[k] != expected[k]}
    assert not differ, f"{name}: resolved (config, code default) differ: {differ}"


def test_the_default_yaml_repeats_no_code_default() -> None:
    """The default config sets no model or minitx callback key and, of the data keys, only
    the corpus it reads: everything else is the code's default."""
    default = yaml.safe_load((CONFIG_DIR / "multi30k_de_en.yaml").read_text())
    for section in ("model", "attention_maps", "averaging", "seed_everything", "runs_dir"):
        assert section not in default, section
    assert set(default["data"]) == {"source", "src_lang", "tgt_lang"}


def test_transformer_defaults_are_the_model_minitx_train_builds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cli = build_cli(["--trainer.logger", "false"])
    assert cli.model.model_config == TransformerConfig()
    model = Transformer(TransformerConfig())
    built = cli.model.model
    assert model.config.d_ff == 512 and model.config.dropout == 0.1  # the 20-minute recipe's
    assert [(n, p.shape) for n, p in model.named_parameters()] == [
        (n, p.shape) for n, p in built.named_parameters()
    ]
    widths = {m.w1.out_features for m in model.modules() if hasattr(m, "w1")}
    assert widths == {512}
    dropouts = {m.p for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert 0.1 in dropouts and dropouts <= {0.0, 0.1}  # attention, activation: off


def test_the_default_module_and_data_are_the_recipe_without_the_command() -> None:
    """Used from Python, the module and the data module train the default recipe too."""
    module = TranslationModule()
    assert module.model_config == TransformerConfig()
    optim = module.optim
    assert (optim.lr, optim.warmup_steps, optim.schedule) == (0.0015, 100, "budget")
    assert module.sdpa_backend == "auto"
    data = TranslationDataModule()
    assert (data.hparams.max_tokens, data.hparams.eval_max_tokens) == (1024, 8192)


MEASURED = [
    re.compile(r"BLEU\s*\d|\d\s*(val |test )?BLEU", re.IGNORECASE),  # "39.55 test BLEU"
    re.compile(r"[+-]\d+(\.\d+)?\s*(val|test|BLEU|%)"),  # "+2.6 val BLEU"
    re.compile(r"\d+(\.\d+)?\s*%"),  # "25% more updates"
    re.compile(r"\b20\d\d-\d\d-\d\d\b"),  # a date
    re.compile(r"\[[^\]]*\]\s*$"),  # "[0.0]": a value repeated in brackets
]


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_config_comments_say_what_keys_mean_not_what_was_measured(path: Path) -> None:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        comment = line.split("#", 1)[1] if "#" in line else ""
        for pattern in MEASURED:
            assert not pattern.search(comment), f"{path.name}:{number}: {line.strip()}"
