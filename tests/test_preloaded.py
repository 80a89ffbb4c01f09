"""tests/preloaded.py runs command lines as python would: the tests that use it rely on these
exit statuses and streams. Each case runs both ways, in a real `python` (without torch it
starts in a few hundredths of a second) and in a preloaded fork, and must end the same."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import subprocess_env
from preloaded import PreloadedProcess, run_python

PY = sys.executable

SCRIPT = """
import os, sys
print(sys.argv, os.path.basename(__file__), __name__, sys.path[0] == os.path.dirname(__file__))
"""

CASES = {
    "status, argv, cwd, stdin, both streams": (
        "import os, sys; print(sys.argv[1:], os.path.basename(os.getcwd()));"
        "print('to err', file=sys.stderr); print(input()); sys.exit(3)"
    ),
    "an exception: its traceback, status 1": "raise ValueError('broken')",
    "sys.exit(message): the message, status 1": "import sys; sys.exit('bye')",
    "sys.exit(None)": "import sys; print('x'); sys.exit(None)",
    "a closed standard output": "import sys; print('x'); sys.stdout.close()",
    "threads joined before atexit handlers": (
        "import atexit, threading, time; atexit.register(print, 'atexit');"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread done'))).start()"
    ),
    "the environment given, and only it": (
        "import os; print(os.environ.get('ONLY'), 'HOME' in os.environ)"
    ),
}


@pytest.mark.parametrize("code", CASES.values(), ids=CASES.keys())
def test_a_command_line_ends_as_in_a_real_python(code: str, tmp_path: Path) -> None:
    cmd = [PY, "-c", code, "a", "b"]
    env = {"ONLY": "this", "PYTHONIOENCODING": "utf-8", "PATH": "/usr/bin:/bin"}
    real = subprocess.run(
        cmd, cwd=tmp_path, env=env, input="typed\n", capture_output=True, text=True, timeout=60
    )
    forked = run_python(cmd, cwd=tmp_path, env=env, input="typed\n")
    assert (forked.returncode, forked.stdout) == (real.returncode, real.stdout)
    # Tracebacks name other frames (runpy, the helper): compare their first and last lines.
    real_err, forked_err = real.stderr.splitlines(), forked.stderr.splitlines()
    assert (forked_err[:1], forked_err[-1:]) == (real_err[:1], real_err[-1:])


def test_a_script_and_a_module_run_as_main(tmp_path: Path) -> None:
    script = tmp_path / "tool.py"
    script.write_text(SCRIPT, encoding="utf-8")
    cmd = [PY, str(script), "x"]
    real = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    forked = run_python(cmd, cwd=tmp_path)
    assert forked.stdout == real.stdout and "'x'] tool.py __main__ True" in real.stdout
    done = run_python([PY, "-m", "minitx.cli.translate", "--help"], env=subprocess_env())
    assert done.returncode == 0 and "usage:" in done.stdout and done.stderr == ""


def test_unbuffered_output_is_written_before_a_kill(tmp_path: Path) -> None:
    code = "import time; print('early'); open('printed', 'w').close(); time.sleep(60)"
    with PreloadedProcess([PY, "-c", code], cwd=tmp_path, env={"PYTHONUNBUFFERED": "1"}) as child:
        while child.poll() is None and not (tmp_path / "printed").exists():
            time.sleep(0.05)
        child.kill()
        assert child.wait(30) == -signal.SIGKILL
        assert child.output_so_far() == "early\n"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signals_end_the_child_as_they_end_python(sig: int, tmp_path: Path) -> None:
    code = "import time; open('started', 'w').close(); time.sleep(60)"
    with PreloadedProcess([PY, "-c", code], cwd=tmp_path) as child:
        while child.poll() is None and not (tmp_path / "started").exists():
            time.sleep(0.05)
        child.send_signal(sig)
        # 120 s: a loaded 2-core machine may take long to shut the child down; a signal
        # that did not stop it shows as status 0 after the 60 s sleep, not as a timeout
        _, err = child.communicate(timeout=120)
    assert child.returncode == -sig, err
    assert ("KeyboardInterrupt" in err) == (sig == signal.SIGINT)


SERVER_STARTED_IGNORING_CTRL_C = """
import signal, sys, time
from pathlib import Path
import preloaded

def main():
    preloaded.PRELOAD = ()  # nothing to import: the server starts in a blink
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker ignores Ctrl-C as the server starts
    with preloaded.PreloadedProcess([sys.executable, "-c", "print('first')"], env={}) as first:
        first.wait(60)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = "import time; open('started', 'w').close(); time.sleep(30)"
    with preloaded.PreloadedProcess([sys.executable, "-c", code], env={}) as child:
        while child.poll() is None and not Path("started").exists():
            time.sleep(0.05)
        child.send_signal(signal.SIGINT)
        child.wait(60)
    print(child.returncode)

if __name__ == "__main__":  # the fork server imports this file as the main module
    main()
"""


def test_ctrl_c_ends_the_child_even_if_the_server_started_ignoring_it(tmp_path: Path) -> None:
    """The fork server starts with the Ctrl-C handling of the moment (an interrupted
    Lightning fit leaves it ignored for a while): its children still stop on Ctrl-C, as a
    python started from a shell does (the child slept on, and the test waited its 60 s)."""
    script = tmp_path / "server.py"
    script.write_text(SERVER_STARTED_IGNORING_CTRL_C, encoding="utf-8")
    env = {**subprocess_env(), "PYTHONPATH": str(Path(__file__).resolve().parent)}
    done = subprocess.run(
        [PY, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == [str(-signal.SIGINT)], done.stdout + done.stderr


def test_anything_but_this_python_is_refused() -> None:
    with pytest.raises(ValueError, match="not `"):
        run_python(["python3", "-c", "pass"])
    with pytest.raises(ValueError, match="not `"):
        run_python([PY, "-u", "-c", "pass"])
