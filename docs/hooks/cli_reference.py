"""MkDocs hook: the command-line reference, taken from the commands' own parsers.

A page line ``<!-- cli-help: NAME -->`` becomes the ``--help`` text of NAME in a code block
(indented as the line is, so that it can sit inside an admonition), where NAME is a
console script of pyproject.toml's ``[project.scripts]`` (``minitx-translate``) or a script
of the checkout (``scripts/benchmark.py``). The usage text is written once, in the parsers;
the site shows it, and tests/test_docs.py checks every flag the docs and README mention
against it. The build fails on an unknown NAME, and when the page that holds the
placeholders (``cli.md``) leaves out a console script.

The same functions serve the test: ``help_text(name)`` and ``flags(name)``, and
``command_of(words)`` maps a command line's first words to NAME.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import re
import runpy
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"^([ \t]*)<!-- cli-help: (\S+) -->$", re.MULTILINE)
REFERENCE_PAGE = "cli.md"
WIDTH = "100"
"""Help text width (argparse reads COLUMNS), the same on every machine."""


def console_scripts() -> dict[str, str]:
    """``[project.scripts]`` of pyproject.toml: name -> ``module:function``."""
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[project\.scripts\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
    if section is None:
        raise RuntimeError("pyproject.toml has no [project.scripts] table")
    return dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.:]+)"', section.group(1), re.M))


def scripts() -> dict[str, str]:
    """Scripts of the checkout with a parser of their own: ``scripts/NAME.py`` -> path.

    A script that only wraps a command (``from minitx.cli.launch import NAME``) is that
    command (see `wrapped_commands`), not an entry of its own.
    """
    return {
        f"scripts/{path.name}": str(path)
        for path in sorted((REPO / "scripts").glob("*.py"))
        if "argparse" in path.read_text(encoding="utf-8")
    }


def wrapped_commands() -> dict[str, str]:
    """``scripts/NAME.py`` wrappers -> the console script they run (``minitx-train``)."""
    commands = console_scripts()
    out = {}
    for path in sorted((REPO / "scripts").glob("*.py")):
        found = re.search(r"^from minitx\.cli\.launch import (\w+)$", path.read_text("utf-8"), re.M)
        if found and f"minitx-{found.group(1)}" in commands:
            out[f"scripts/{path.name}"] = f"minitx-{found.group(1)}"
    return out


def command_module(name: str) -> str:
    """The module of the command that console script NAME runs: pyproject.toml names its
    entry in the launcher (``minitx.cli.launch:train``), whose `COMMANDS` names the module."""
    from minitx.cli.launch import COMMANDS

    return COMMANDS[name.removeprefix("minitx-")][0]


def names() -> list[str]:
    """Every NAME a placeholder may use: console scripts, then parser-owning scripts."""
    return [*console_scripts(), *scripts()]


@contextlib.contextmanager
def _as_program(argv0: str):
    """Run with ``sys.argv[0]`` = argv0 (argparse's program name) and a fixed help width."""
    saved_argv, saved_columns = sys.argv[:], os.environ.get("COLUMNS")
    sys.argv[:] = [argv0]
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        sys.argv[:] = saved_argv
        if saved_columns is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved_columns


def _printed_help(call) -> str:
    """What `call` prints to standard output before it exits (``--help`` exits with 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            call()
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"--help exited with status {exc.code}") from None
    return out.getvalue()


@functools.cache
def help_text(name: str) -> str:
    """The ``--help`` text of NAME, as its users see it (paths of this checkout removed)."""
    commands = console_scripts()
    if name in commands:
        module_name = command_module(name)
        with _as_program(name):
            module = importlib.import_module(module_name)
            if hasattr(module, "build_parser"):  # the argparse commands
                parser = module.build_parser()
                parser.prog = name
                text = parser.format_help()
            else:  # minitx-train: LightningCLI builds its parser while it parses
                text = _printed_help(lambda: module.main(["--help"]))
    elif name in scripts():
        path = scripts()[name]
        with _as_program(Path(path).name):
            sys.argv.append("--help")
            text = _printed_help(lambda: runpy.run_path(path, run_name="__main__"))
    else:
        raise KeyError(f"unknown command {name!r}; known: {', '.join(names())}")
    # the packaged configs' absolute path (minitx-train's default config file)
    package_dir = str(REPO / "minitx")
    return text.replace(package_dir, "<site-packages>/minitx").rstrip() + "\n"


_OPTION_LINE = re.compile(r"^\s{2,}(-[^\s].*?)(?:\s{2,}|$)")
_FLAG = re.compile(r"(?:^|,\s)(--?[A-Za-z][\w.+-]*)")


@functools.cache
def flags(name: str) -> frozenset[str]:
    """The option strings NAME accepts, read from its help's option lines
    (``  -c CONFIG, --config CONFIG``); ``--trainer.devices+`` counts as ``--trainer.devices``."""
    found = set()
    for line in help_text(name).splitlines():
        match = _OPTION_LINE.match(line)
        if match:
            found.update(flag.rstrip("+") for flag in _FLAG.findall(match.group(1)))
    return frozenset(found)


def command_of(words: list[str]) -> tuple[str, int] | None:
    """The NAME a command line's words start, and how many words name it, or None:
    ``minitx-x`` -> ``minitx-x``; ``python scripts/x.py`` -> its command (the wrapper
    ``scripts/train.py``: ``minitx-train``) or ``scripts/x.py``."""
    commands, wrapped, own = console_scripts(), wrapped_commands(), scripts()
    head = words[0] if words else ""
    if head in commands:
        return head, 1
    if head in ("python", "python3") and len(words) > 1:
        script = words[1].removeprefix("./")
        if script in wrapped:
            return wrapped[script], 2
        if script in own:
            return script, 2
    return None


# ---- the MkDocs hook


def on_page_markdown(markdown: str, page, config, files) -> str:
    """Replace each ``<!-- cli-help: NAME -->`` line by NAME's help in a code block, indented
    as the placeholder is."""
    from mkdocs.exceptions import PluginError

    used = set()

    def replace(match: re.Match) -> str:
        indent, name = match.group(1), match.group(2)
        try:
            text = help_text(name)
        except KeyError as exc:
            raise PluginError(f"{page.file.src_uri}: {exc.args[0]}") from None
        used.add(name)
        block = f"```text\n{text}```"
        return "\n".join(indent + line if line else line for line in block.splitlines())

    out = PLACEHOLDER.sub(replace, markdown)
    if page.file.src_uri == REFERENCE_PAGE:
        missing = [name for name in console_scripts() if name not in used]
        if missing:
            raise PluginError(f"{REFERENCE_PAGE} has no cli-help placeholder for {missing}")
    return out
