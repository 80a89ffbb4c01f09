"""The tutorials (docs/tutorials/*.ipynb) run, top to bottom, as a reader runs them.

Each notebook is executed in a fresh Jupyter kernel (nbclient, as ``pytest --nbmake
docs/tutorials`` does) in a temporary directory; every claim in it is an ``assert`` in its
cells, so a notebook that drifts from the code fails here. The notebooks are committed without
outputs (the site and a reader's Jupyter show what the code gives now, never a stale copy),
and import only minitx's public names.
"""

from __future__ import annotations

import ast
import importlib
import json
import time
from pathlib import Path

import pytest
from helpers import REPO_DIR

TUTORIALS = sorted((REPO_DIR / "docs" / "tutorials").glob("*.ipynb"))
BUDGET_S = 60
"""What each notebook may take on a 2-core laptop CPU (3-17 s measured with one thread, on a
2-core machine busy with other work); the test fails only past 5x that."""


def code_cells(path: Path) -> list[dict]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [c for c in cells if c["cell_type"] == "code"]


def source(cell: dict) -> str:
    """A cell's text (stored as one string or as a list of lines)."""
    text = cell["source"]
    return "".join(text) if isinstance(text, list) else text


def test_there_are_tutorials() -> None:
    names = [p.name for p in TUTORIALS]
    assert names == [
        "01-attention-from-scratch.ipynb",
        "02-train-and-look.ipynb",
        "03-attention-vs-attributions.ipynb",
    ]


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorials_are_committed_without_outputs(path: Path) -> None:
    for cell in code_cells(path):
        assert cell["outputs"] == [] and cell["execution_count"] is None, (
            f"{path.name}: clear the outputs before committing (Jupyter: Edit > Clear outputs "
            "of all cells; or `jupyter nbconvert --clear-output --inplace`)"
        )


def public_imports(source: str) -> list[tuple[str, str]]:
    """(module, name) for every ``from minitx... import name`` in a cell (magics dropped)."""
    code = "\n".join(line for line in source.splitlines() if not line.startswith("%"))
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("minitx"):
            found += [(node.module, alias.name) for alias in node.names]
    return found


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorials_use_only_public_names(path: Path) -> None:
    imports = [pair for cell in code_cells(path) for pair in public_imports(source(cell))]
    assert imports, path.name
    for module_name, name in imports:
        module = importlib.import_module(module_name)
        public = getattr(module, "__all__", None)
        assert not name.startswith("_") and (public is None or name in public), (
            f"{path.name}: {module_name}.{name} is not public"
        )


@pytest.mark.slow
@pytest.mark.ci_step
@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    monkeypatch.delenv("MINITX_TUTORIAL_CHECKPOINT", raising=False)  # the notebook's own model
    # one thread, as the suite's other child processes (helpers.subprocess_env): tiny models
    # gain nothing from more, and spinning threads stall on a busy 2-core machine
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # the notebooks keep their runs in a tempfile.mkdtemp folder for the reader to look at:
    # under the test's own folder, not left in /tmp by every run of the suite
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        notebook,
        timeout=5 * BUDGET_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    start = time.perf_counter()
    client.execute()
    seconds = time.perf_counter() - start
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert not errors
    assert seconds < 5 * BUDGET_S, f"{path.name} took {seconds:.0f} s"


def test_notebook_links_become_site_links(caplog: pytest.LogCaptureFixture) -> None:
    """docs/hooks/notebook_links.py: a notebook's links to pages and notebooks by file path
    (what Jupyter follows) become the site's URLs; a link to a missing file is a warning, which
    fails `mkdocs build --strict`."""
    import importlib.util
    from types import SimpleNamespace

    mkdocs_files = pytest.importorskip("mkdocs.structure.files")
    path = REPO_DIR / "docs" / "hooks" / "notebook_links.py"
    spec = importlib.util.spec_from_file_location("minitx_docs_notebook_links", path)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)

    class NotebookFile(mkdocs_files.File):
        def is_documentation_page(self) -> bool:  # as mkdocs-jupyter makes notebooks pages
            return True

    def file(src: str) -> object:
        kind = NotebookFile if src.endswith(".ipynb") else mkdocs_files.File
        return kind(src, "docs", "site", use_directory_urls=True)

    notebook = file("tutorials/01-a.ipynb")
    files = mkdocs_files.Files([notebook, file("tutorials/02-b.ipynb"), file("guides/x.md")])
    page = SimpleNamespace(file=notebook)
    html = (
        '<a href="../guides/x.md#scale">a</a> <a href="02-b.ipynb">b</a> '
        '<a href="https://example.org/y.md">c</a> <a href="#here">d</a>'
    )
    assert hook.on_page_content(html, page, None, files) == (
        '<a href="../../guides/x/#scale">a</a> <a href="../02-b/">b</a> '
        '<a href="https://example.org/y.md">c</a> <a href="#here">d</a>'
    )
    with caplog.at_level("WARNING"):
        kept = hook.on_page_content('<a href="missing.md">m</a>', page, None, files)
    assert kept == '<a href="missing.md">m</a>'
    assert "tutorials/01-a.ipynb links to tutorials/missing.md" in caplog.text
    markdown_page = SimpleNamespace(file=file("guides/x.md"))
    assert hook.on_page_content(html, markdown_page, None, files) == html  # MkDocs' own job
