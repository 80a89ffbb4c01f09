"""tests/preloaded.py runs command lines as python would: the tests that use it rely on these
exit statuses and streams."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

from helpers import subprocess_env
from preloaded import PreloadedProcess, run_python

PY = sys.executable


def test_status_streams_argv_and_working_directory(tmp_path: Path) -> None:
    code = "import os, sys; print(sys.argv[1:], os.getcwd()); print('to err', file=sys.stderr)"
    code += "; print(input()); sys.exit(3)"
    done = run_python([PY, "-c", code, "a", "b"], cwd=tmp_path, input="typed\n")
    assert done.returncode == 3
    assert done.stdout == f"['a', 'b'] {tmp_path}\ntyped\n" and done.stderr == "to err\n"


def test_an_exception_is_a_traceback_and_status_1_and_a_module_runs_as_main() -> None:
    done = run_python([PY, "-c", "raise ValueError('broken')"])
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback") and "ValueError: broken" in done.stderr
    done = run_python([PY, "-m", "minitx.cli.translate", "--help"], env=subprocess_env())
    assert done.returncode == 0 and "usage:" in done.stdout and done.stderr == ""


def test_the_environment_is_the_one_given_and_a_full_disk_is_status_120() -> None:
    done = run_python([PY, "-c", "import os; print(os.environ.get('ONLY'), len(os.environ))"],
                      env={"ONLY": "this"})  # fmt: skip
    assert done.stdout == "this 1\n"
    done = run_python([PY, "-c", "print('x' * 100)"], stdout="/dev/full")
    assert done.returncode == 120 and "No space left on device" in done.stderr


def test_signals_end_the_child_as_they_end_python(tmp_path: Path) -> None:
    code = "import time; open('started', 'w').close(); time.sleep(60)"
    for sig, status in ((signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, -signal.SIGINT)):
        (tmp_path / "started").unlink(missing_ok=True)
        child = PreloadedProcess([PY, "-c", code], cwd=tmp_path)
        try:
            while child.poll() is None and not (tmp_path / "started").exists():
                time.sleep(0.05)
            child.send_signal(sig)
            _, err = child.communicate(timeout=30)
        finally:
            child.kill()
        assert child.returncode == status, err
        assert ("KeyboardInterrupt" in err) == (sig == signal.SIGINT)
