"""README.md and the documentation pages agree with the code.

- README.md stays a page people read: at most 300 lines, and no run history in it.
- Every flag that README.md or a page under docs/ gives a command (`minitx-translate --beam 1`,
  `python scripts/train.py --config long`, `minitx-evaluate --json f`) exists in that
  command's parser. The flags are read from the command's own `--help`, by the functions the
  documentation site's command-line reference is generated with (docs/hooks/cli_reference.py),
  so the usage text is written once: in the parsers.
- The commands are run one way, as their console scripts `minitx-NAME` (training also as
  `python scripts/train.py`): no page names the removed doors (`minitx NAME`, `python -m
  minitx NAME`, the scripts/ wrappers of the other commands).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
MAX_README_LINES = 300


def _load_cli_reference():
    path = ROOT / "docs" / "hooks" / "cli_reference.py"
    spec = importlib.util.spec_from_file_location("minitx_docs_cli_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cli = _load_cli_reference()

# Run history and words that mean nothing to a reader; the removed `quick` config.
BANNED = {
    "session": re.compile(r"\bsessions?\b", re.I),
    "issue number": re.compile(r"\bissues?\s*#?\d", re.I),
    "stop number": re.compile(r"\bstop\s+\d", re.I),
    "this machine": re.compile(r"\bthis machine\b", re.I),
    "the removed quick config": re.compile(r"--config[ =]quick\b|\bquick\.yaml\b|\$Q\d"),
    "the removed umbrella command": re.compile(
        r"-m minitx\b(?!\.)|\bminitx (train|translate|evaluate|visualize|ct2|export|average|demo"
        r"|experiment)\b|\bminitx <|\bcli/main\.py"
    ),
    "a removed scripts/ wrapper": re.compile(
        r"\bscripts/(translate|evaluate|export|average|experiment|visualize_attention)\.py"
    ),
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_INLINE = re.compile(r"`([^`]+)`")
_SEPARATORS = re.compile(r"\|\||&&|[|;()]|\$\(")
_COMMENT = re.compile(r"(^|\s)#.*$")
_FLAG = re.compile(r"--?[A-Za-z][\w.+-]*")


def code_snippets(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every line of a fenced code block and of every inline code span
    (a span may wrap over lines)."""
    snippets, prose, in_fence = [], [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            in_fence = not in_fence
            prose.append("")
        elif in_fence:
            snippets.append((number, line))
            prose.append("")
        else:
            prose.append(line)
    joined = "\n".join(prose)
    for match in _INLINE.finditer(joined):
        number = joined.count("\n", 0, match.start()) + 1
        snippets.append((number, " ".join(match.group(1).split())))
    return snippets


def command_flags(snippet: str) -> list[tuple[str, str]]:
    """(command, flag) for each flag given to a minitx command in a line of shell."""
    found = []
    for segment in _SEPARATORS.split(_COMMENT.sub("", snippet)):
        try:
            words = shlex.split(segment)
        except ValueError:  # an unbalanced quote in prose
            words = segment.split()
        for start in range(len(words)):
            command = cli.command_of(words[start:])
            if command is None:
                continue
            name, used = command
            for word in words[start + used :]:
                flag = word.split("=", 1)[0]
                if _FLAG.fullmatch(flag):  # not a value such as -1, nor an arrow
                    found.append((name, flag))
            break
    return found


def mentions() -> list[tuple[str, int, str, str]]:
    """(page, line, command, flag) for every flag the pages give a command."""
    out = []
    for page in PAGES:
        for number, snippet in code_snippets(page.read_text(encoding="utf-8")):
            for name, flag in command_flags(snippet):
                out.append((str(page.relative_to(ROOT)), number, name, flag))
    return out


def test_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines; keep it <= 300"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_run_history_words(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    hits = [
        f"{page.name}:{text.count(chr(10), 0, m.start()) + 1}: {what}: {m.group(0)!r}"
        for what, pattern in BANNED.items()
        for m in pattern.finditer(text)
    ]
    assert not hits, "\n".join(hits)


def test_every_command_has_help() -> None:
    """Every console script and parser-owning script builds its help (the site shows it)."""
    names = cli.names()
    assert "minitx-train" in names and "scripts/benchmark.py" in names
    for name in names:
        text = cli.help_text(name)
        assert text.startswith("usage:"), f"{name}: {text[:80]!r}"
        assert "--help" in cli.flags(name), name


def test_documented_flags_exist() -> None:
    found = mentions()
    commands = {name for _, _, name, _ in found}
    # the scan itself must work: the README and guides give flags to these commands
    assert len(found) > 100, f"only {len(found)} flags found in the docs"
    assert {"minitx-train", "minitx-translate", "minitx-evaluate"} <= commands, commands
    unknown = [
        f"{page}:{line}: {name} {flag}"
        for page, line, name, flag in found
        if flag not in cli.flags(name) and flag not in ("-h", "--help")
    ]
    assert not unknown, "flags that the command's parser does not have:\n" + "\n".join(unknown)


def test_scan_finds_flags() -> None:
    """The scanner attributes flags to the right command (a self-check of the test)."""
    assert command_flags("cat a.de | minitx-translate --checkpoint X --beam 1  # --nope") == [
        ("minitx-translate", "--checkpoint"),
        ("minitx-translate", "--beam"),
    ]
    assert command_flags("minitx-evaluate --json=f --beam 1 5") == [
        ("minitx-evaluate", "--json"),
        ("minitx-evaluate", "--beam"),
    ]
    assert command_flags("python scripts/train.py --trainer.max_steps -1") == [
        ("minitx-train", "--trainer.max_steps")
    ]
    assert command_flags("MINITX_DATA_DIR=d python scripts/benchmark.py --sections ct2") == [
        ("scripts/benchmark.py", "--sections")
    ]
    assert code_snippets("a `minitx-train\n--config long` b\n```\nminitx-demo --port 1\n```\n") == [
        (4, "minitx-demo --port 1"),
        (1, "minitx-train --config long"),
    ]
