"""The one-way dependency direction of docs/ARCHITECTURE.md, checked on the source: every
import statement of every module is read (module level and inside functions)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from helpers import REPO_DIR

PACKAGE = REPO_DIR / "minitx"
CORE = (
    "attention",
    "positional",
    "layers",
    "model",
    "decoding",
    "registry",
    "vocab",
    "errors",
    "flops",
)
OPTIONAL_LIBRARIES = ("ctranslate2", "gradio", "bertviz", "selenium")
"""Extras: imported only inside the functions that need them (minitx.errors.require_extra)."""


def modules() -> dict[str, Path]:
    """'minitx.data.sources' -> its file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(REPO_DIR).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(path: Path) -> set[str]:
    """Every module name an import statement in `path` names (absolute imports only)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def top(name: str) -> str:
    return name.split(".")[0]


def minitx_part(name: str) -> str | None:
    """'minitx.data.sources' -> 'data'; None for other packages."""
    parts = name.split(".")
    return parts[1] if parts[0] == "minitx" and len(parts) > 1 else None


MODULES = modules()


def in_part(*parts: str) -> list[str]:
    return sorted(m for m in MODULES if minitx_part(m) in parts)


@pytest.mark.parametrize("module", in_part(*CORE))
def test_core_imports_only_torch_the_standard_library_and_the_core(module: str) -> None:
    for name in imports(MODULES[module]):
        allowed = top(name) in sys.stdlib_module_names or top(name) == "torch"
        assert allowed or minitx_part(name) in CORE, f"{module} imports {name}"


@pytest.mark.parametrize("module", in_part("data", "tokenizer"))
def test_data_never_imports_the_model(module: str) -> None:
    forbidden = {*CORE} - {"vocab", "registry", "errors"} | {"training", "translator", "viz", "cli"}
    for name in imports(MODULES[module]):
        assert minitx_part(name) not in forbidden, f"{module} imports {name}"


@pytest.mark.parametrize("module", in_part("training"))
def test_training_never_imports_the_inference_api(module: str) -> None:
    for name in imports(MODULES[module]):
        assert minitx_part(name) not in ("translator", "evaluation", "cli"), f"{module}: {name}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_training_data_module_and_cli_import_lightning(module: str) -> None:
    may = minitx_part(module) in ("training", "cli") or module == "minitx.data.datamodule"
    if not may:
        assert not {top(n) for n in imports(MODULES[module])} & {"lightning", "pytorch_lightning"}


@pytest.mark.parametrize("module", in_part("viz"))
def test_viz_works_on_maps_only(module: str) -> None:
    for name in imports(MODULES[module]):
        assert minitx_part(name) in (None, "viz", "maps"), f"{module} imports {name}"
        assert top(name) != "lightning"


@pytest.mark.parametrize("module", in_part("export"))
def test_export_never_imports_training_or_the_commands(module: str) -> None:
    for name in imports(MODULES[module]):
        assert minitx_part(name) not in ("training", "cli", "viz"), f"{module} imports {name}"


@pytest.mark.parametrize("module", in_part("demo"))
def test_demo_is_built_on_the_inference_api_only(module: str) -> None:
    for name in imports(MODULES[module]):
        part = minitx_part(name)
        assert part in (None, "translator", "decoding", "viz", "maps", "errors"), (
            f"{module} imports {name}"
        )
        assert top(name) not in ("lightning", "pytorch_lightning"), f"{module} imports {name}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_optional_libraries_are_imported_lazily(module: str) -> None:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    for node in tree.body:  # module level only; `if TYPE_CHECKING:` blocks are not executed
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        else:
            continue
        assert not {top(n) for n in names} & set(OPTIONAL_LIBRARIES), f"{module}: {names}"


def test_release_sits_beside_checkpoint() -> None:
    """Release files need the model, the tokenizer and the checkpoint reader; never
    Lightning, training, the inference API, the commands or the pictures."""
    allowed = {*CORE, "checkpoint", "tokenizer", "textio"}  # textio: atomic output files
    libraries = {"torch", "safetensors", "huggingface_hub", "yaml"}
    for name in imports(MODULES["minitx.release"]):
        part = minitx_part(name)
        if name == "minitx":  # the package itself, for __version__
            continue
        if part is None:
            assert top(name) in sys.stdlib_module_names or top(name) in libraries, name
        else:
            assert part in allowed, f"minitx.release imports {name}"


def test_alignment_reads_maps_only() -> None:
    """minitx.alignment works on attention maps: torch, the standard library and the pieces
    below the inference API (maps, vocab, errors), never the translator or the model."""
    for name in imports(MODULES["minitx.alignment"]):
        allowed = top(name) in sys.stdlib_module_names or top(name) == "torch"
        assert allowed or minitx_part(name) in ("maps", "vocab", "errors"), name


def test_averaging_sits_beside_checkpoint() -> None:
    """Checkpoint averaging needs torch, the model config and the checkpoint reader; never
    Lightning, training, the inference API or the commands (the callback and the command
    build on it, not the other way round)."""
    for name in imports(MODULES["minitx.averaging"]):
        part = minitx_part(name)
        if part is None:
            assert top(name) in sys.stdlib_module_names or top(name) == "torch", name
        else:
            assert part in {*CORE, "checkpoint", "textio"}, f"minitx.averaging imports {name}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_experiment_command_imports_the_experiments(module: str) -> None:
    """The experiments suite sits on top, beside the commands: it runs `minitx train` as a
    process and probes models through the inference API; nothing below depends on it."""
    if minitx_part(module) == "experiments" or module == "minitx.cli.experiment":
        return
    for name in imports(MODULES[module]):
        assert minitx_part(name) != "experiments", f"{module} imports {name}"


def test_experiments_never_import_lightning_or_training() -> None:
    """The runner starts training as a `minitx train` process: the suite never imports
    Lightning or the training code itself, so a variant's run is the user's run exactly."""
    for module in in_part("experiments"):
        for name in imports(MODULES[module]):
            assert top(name) not in ("lightning", "pytorch_lightning"), f"{module} imports {name}"
            assert minitx_part(name) != "training", f"{module} imports {name}"
