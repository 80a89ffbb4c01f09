"""The one-way dependency direction of docs/ARCHITECTURE.md.

The rules are import-linter contracts in pyproject.toml (``[tool.importlinter]``); this file
runs them in-process, as ``lint-imports`` does, and shows that they are live (a copy of the
package with a forbidden import breaks them). What import-linter cannot express is checked
here on the source: that the allow-lists ("X imports only Y") name every other part of
minitx and every third-party package it imports, and that optional libraries are imported
only inside functions.
"""

from __future__ import annotations

import ast
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest
from helpers import REPO_DIR
from importlinter.api import read_configuration
from importlinter.cli import lint_imports

PACKAGE = REPO_DIR / "minitx"
PYPROJECT = REPO_DIR / "pyproject.toml"
CORE = {
    "attention",
    "kv_cache",
    "scores",
    "positional",
    "activations",
    "dropout",
    "model",
    "decoding",
}
CORE |= {"model_config", "model_outputs", "hard_attention", "packing", "flops", "registry", "vocab"}
CORE |= {"errors", "hardware"}  # the bottom of the layers: torch and the standard library only
OPTIONAL_LIBRARIES = ("ctranslate2", "gradio", "bertviz", "selenium")
"""Extras: imported only inside the functions that need them (minitx.errors.require_extra)."""
LIGHTNING = ("lightning", "pytorch_lightning")

ALLOW_LISTS: dict[str, tuple[set[str] | None, set[str] | None]] = {
    "core-torch-only": (None, {"torch"}),  # the rest of minitx: the exhaustive layers contract
    "viz-maps-only": ({"maps"}, None),
    "demo-inference-api-only": ({"translator", "decoding", "maps", "viz", "errors"}, None),
    "release-beside-checkpoint": (
        {*CORE, "checkpoint", "tokenizer", "textio", "outputs"},
        {"torch", "safetensors", "huggingface_hub", "yaml"},
    ),
    "alignment-maps-only": ({"maps", "vocab", "errors"}, {"torch"}),
    "averaging-beside-checkpoint": ({*CORE, "checkpoint", "textio", "outputs"}, {"torch"}),
}
"""Contract id -> (the parts of minitx its modules may import, the third-party packages they
may import; the standard library always). A forbidden contract can only list what is
forbidden, so its `forbidden_modules` must name everything else; None: that side is no
allow-list."""


@pytest.fixture(scope="module")
def contracts() -> dict[str, dict]:
    """The contracts of pyproject.toml by id."""
    options = read_configuration(str(PYPROJECT))["contracts_options"]
    return {contract["id"]: contract for contract in options}


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    """minitx's import graph, third-party packages squashed to their top-level name."""
    return grimp.build_graph("minitx", include_external_packages=True, cache_dir=None)


def third_party(graph: grimp.ImportGraph) -> set[str]:
    """Top-level names of the third-party packages minitx imports."""
    return {
        module
        for module in graph.modules
        if module.split(".")[0] not in ("minitx", *sys.stdlib_module_names)
    }


def lint() -> int:
    """Run every contract of pyproject.toml in this process, as ``lint-imports`` does; its
    exit status (the report goes to standard output).

    import-linter configures logging with `logging.config.dictConfig`, which disables every
    logger that exists already (minitx's among them); they are enabled again afterwards, so
    that later tests still see minitx's log records.
    """
    loggers = [
        lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    disabled = {lg: lg.disabled for lg in loggers}
    try:
        return lint_imports(config_filename=str(PYPROJECT), no_cache=True, no_logo=True)
    finally:
        for lg, was in disabled.items():
            lg.disabled = was


def lint_copy(root: Path, contract_ids: list[str]) -> tuple[dict[str, int], str]:
    """Lint the copy of minitx (and pyproject.toml) in `root`, in a child process there, so
    that the copy is the `minitx` linted: each contract's exit status, and the report."""
    code = (
        "from importlinter.cli import lint_imports\n"
        f"for cid in {contract_ids!r}:\n"
        "    status = lint_imports(limit_to_contracts=(cid,), no_cache=True, no_logo=True)\n"
        "    print(f'@@ {cid} {status}')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    marks = [line.split() for line in proc.stdout.splitlines() if line.startswith("@@ ")]
    return {cid: int(status) for _, cid, status in marks}, proc.stdout


def test_every_import_linter_contract_is_kept(capsys: pytest.CaptureFixture) -> None:
    status = lint()
    report = capsys.readouterr().out
    assert status == 0, f"lint-imports found broken contracts:\n{report}"
    assert " BROKEN" not in report and "0 broken" in report


def test_contracts_cover_the_documented_rules(contracts: dict[str, dict]) -> None:
    """The layers contract places every module (exhaustive) in the documented order."""
    layers = contracts["layers"]
    assert str(layers["exhaustive"]).lower() == "true"
    order = [layer.replace(" ", "") for layer in layers["layers"]]
    assert order.index("extras") < order.index("cli") < order.index("training|evaluation")
    assert order.index("training|evaluation") < order.index("translator")
    assert order[-7:] == [
        "model",
        "model_config|model_outputs|hard_attention|packing",
        "scores|positional|activations|dropout",
        "attention",
        "kv_cache",
        "registry",
        "errors|vocab|hardware",
    ]
    expected = {
        "layers",
        "core-imports-no-extra",
        "no-library-imports-cli",
        "acyclic",
        "core-torch-only",
        "data-never-the-model",
        "training-never-inference-api",
        "lightning",
        "inference-commands-without-lightning",
        "matplotlib",
        "export-never-training",
        "extras-independent",
        "experiments-never-training",
        *ALLOW_LISTS,
    }
    assert expected <= set(contracts)


@pytest.mark.parametrize("contract_id", sorted(ALLOW_LISTS))
def test_allow_lists_forbid_everything_else(
    contract_id: str, contracts: dict[str, dict], graph: grimp.ImportGraph
) -> None:
    """A new part of minitx or a new third-party package must be placed in each allow-list
    contract: allowed here, or forbidden in pyproject.toml."""
    allowed_parts, allowed_packages = ALLOW_LISTS[contract_id]
    contract = contracts[contract_id]
    forbidden = set(contract["forbidden_modules"])
    own = {source.split(".")[1] for source in contract["source_modules"]}
    missing: set[str] = set()
    if allowed_parts is not None:
        parts = {child.split(".")[1] for child in graph.find_children("minitx")}
        missing |= {f"minitx.{part}" for part in parts - allowed_parts - own}
        assert not forbidden & {f"minitx.{part}" for part in allowed_parts}, contract_id
    if allowed_packages is not None:
        missing |= third_party(graph) - allowed_packages
        assert not forbidden & allowed_packages, contract_id
    assert not missing - forbidden, (
        f"pyproject.toml, contract {contract_id!r}: add {sorted(missing - forbidden)} to its "
        "forbidden_modules (or, if the rule allows them, to ALLOW_LISTS in this file and to "
        "docs/ARCHITECTURE.md)"
    )


def test_the_lightning_contract_protects_every_lightning_package(
    contracts: dict[str, dict], graph: grimp.ImportGraph
) -> None:
    """import-linter refuses a package that nothing imports, so pytorch_lightning is listed
    only once something imports it; then it must be."""
    present = set(LIGHTNING) & third_party(graph)
    assert present <= set(contracts["lightning"]["protected_modules"])


def modules() -> dict[str, Path]:
    """'minitx.data.sources' -> its file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO_DIR).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_optional_libraries_are_imported_lazily(module: str) -> None:
    """import-linter sees an import, not where it sits: module-level imports of an optional
    library are refused here (`if TYPE_CHECKING:` blocks are not executed)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in tree.body:  # module level only
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        assert not {n.split(".")[0] for n in names} & set(OPTIONAL_LIBRARIES), f"{module}: {names}"


BREAKAGES = {
    "library imports a command": (
        "minitx/extras/experiments/runner.py",
        "from minitx.cli.evaluate import load_split\n",
        ["no-library-imports-cli"],
        "minitx.extras.experiments.runner -> minitx.cli.evaluate",
    ),
    "the core imports an extra": (
        "minitx/training/__init__.py",
        "import minitx.extras.ctranslate2.export\n",
        ["core-imports-no-extra", "layers"],
        "minitx.training -> minitx.extras.ctranslate2.export",
    ),
    "an extra imports another": (
        "minitx/extras/demo/page.py",
        "import minitx.extras.ctranslate2.export\n",
        ["extras-independent"],
        "minitx.extras.demo.page -> minitx.extras.ctranslate2.export",
    ),
    "a cycle": (
        "minitx/decoding/config.py",
        "import minitx.decoding.strategies\n",
        ["acyclic"],
        "No cycles are allowed in minitx.decoding",
    ),
    "an inference command imports training/": (
        "minitx/cli/common.py",
        "from minitx.training.precision import resolve_precision\n",
        ["inference-commands-without-lightning"],
        "minitx.cli.common -> minitx.training.precision",
    ),
    "the core imports numpy": (
        "minitx/model.py",
        "import numpy\n",
        ["core-torch-only"],
        "minitx.model -> numpy",
    ),
}
"""Case -> (file of the copy, the line appended to it, the contracts it breaks, what the
report says)."""


@pytest.mark.parametrize("case", sorted(BREAKAGES))
def test_a_forbidden_import_breaks_its_contract(case: str, tmp_path: Path) -> None:
    """The check is live: a copy of the package with one forbidden import fails the lint of
    exactly the contracts it breaks, naming the import; the unchanged copy passes them."""
    path, line, broken_ids, detail = BREAKAGES[case]
    shutil.copytree(PACKAGE, tmp_path / "minitx", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    kept_id = "export-never-training"  # a contract none of the cases breaks
    before, report = lint_copy(tmp_path, [*broken_ids, kept_id])
    assert set(before.values()) == {0}, report
    target = tmp_path / path
    target.write_text(target.read_text(encoding="utf-8") + line, encoding="utf-8")
    after, report = lint_copy(tmp_path, [*broken_ids, kept_id])
    assert after == {**dict.fromkeys(broken_ids, 1), kept_id: 0}, report
    assert detail in report, report
