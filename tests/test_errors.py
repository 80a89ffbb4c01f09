"""User errors are told from bugs by their type alone (`minitx.errors`), wherever they are
raised: every `MinitxError` becomes one ``error:`` line and exit status 2 at the command
boundary; anything else keeps its traceback. The errors page lists exactly these types."""

from __future__ import annotations

import io
import re
import sys

import pytest
from helpers import REPO_DIR

import minitx.errors
from minitx.cli.common import EXIT_USER_ERROR, run_cli
from minitx.errors import MinitxError

ERRORS_PAGE = REPO_DIR / "docs" / "guides" / "errors.md"


def user_error_types() -> list[type[MinitxError]]:
    """`MinitxError` and every subclass minitx defines."""
    found, todo = [], [MinitxError]
    while todo:
        cls = todo.pop()
        if cls.__module__.startswith("minitx"):
            found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


def _raise(error: BaseException):
    def run(_args: object) -> int:
        raise error

    return run


@pytest.mark.parametrize("cls", user_error_types(), ids=lambda c: c.__name__)
def test_every_user_error_is_one_line_and_status_2(
    cls: type[MinitxError], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(minitx.errors.DEBUG_ENV, raising=False)
    message = "data/train.de: line 3 is bad;\n  re-encode it"
    assert run_cli(_raise(cls(message)), object()) == EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert err == "error: data/train.de: line 3 is bad; re-encode it\n"


def test_the_training_command_reports_them_the_same_way(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from minitx.cli import train

    monkeypatch.setattr(
        train, "_train_and_test", _raise(minitx.errors.DataError("corpus: no 'train' split"))
    )
    with pytest.raises(SystemExit) as info:
        train.main([])
    assert info.value.code == EXIT_USER_ERROR
    assert capsys.readouterr().err == "error: corpus: no 'train' split\n"


def test_ctrl_c_is_status_130_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    """One line in a log; on a terminal after a line break, as the terminal echoed ^C."""
    assert run_cli(_raise(KeyboardInterrupt()), object()) == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C): stopped before the end\n"
    # a command that goes on where it stopped says so (minitx-experiment)
    assert run_cli(_raise(KeyboardInterrupt()), object(), resumes="; run it again") == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C): stopped before the end; run it again\n"


def test_a_stop_line_on_a_terminal_starts_on_a_fresh_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with capsys.disabled():
        terminal = io.StringIO()
        terminal.isatty = lambda: True
        monkeypatch.setattr(sys, "stderr", terminal)
        assert run_cli(_raise(KeyboardInterrupt()), object()) == 130
        assert terminal.getvalue() == "\ninterrupted (Ctrl-C): stopped before the end\n"


@pytest.mark.parametrize("error", [ValueError("x"), KeyError("y"), RuntimeError("z")])
def test_anything_else_is_a_bug_with_its_traceback(error: Exception) -> None:
    with pytest.raises(type(error)):
        run_cli(_raise(error), object())


def test_debug_env_keeps_the_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(minitx.errors.DEBUG_ENV, "1")
    with pytest.raises(minitx.errors.ConfigError):
        run_cli(_raise(minitx.errors.ConfigError("n_heads")), object())


def test_the_errors_page_lists_every_user_error_type() -> None:
    """docs/guides/errors.md has a table row `| `Name` | ... |` for each type, and no other."""
    listed = set(re.findall(r"^\| `(\w+Error)` \|", ERRORS_PAGE.read_text(), flags=re.M))
    assert listed == {cls.__name__ for cls in user_error_types()}


def test_no_user_error_is_recognised_by_where_it_was_raised() -> None:
    """The old mechanism (the innermost frame's file path) is gone for good."""
    source = (REPO_DIR / "minitx" / "cli" / "common.py").read_text()
    assert "extract_tb" not in source and "_raised_by_data_layer" not in source
