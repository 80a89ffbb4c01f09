"""Run ``python ...`` command lines in a fork of an interpreter that has imported torch,
Lightning and minitx's commands already.

Why: on 2 cores a fresh Python spends 6-9 s importing torch and Lightning before a command
does anything, and the suite runs dozens of commands as a user runs them (own process, own
exit status, output and signals at the file-descriptor level). A ``forkserver`` from
multiprocessing imports them once per test worker in a clean interpreter (no pytest state)
and forks a child for each command line; the child then runs the script, module or ``-c`` code
the way ``python`` would.

What a child does not see: messages printed while those modules were first imported, and
environment variables that they read at import time (torch's ``OMP_NUM_THREADS`` is applied by
hand). Tests of exactly that (no library chatter before an error line, ``--verbose``) and tests
of the entry points themselves keep a real ``subprocess``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import types
import warnings
from pathlib import Path

PRELOAD = ("torch", "lightning", "minitx.cli.train", "minitx.cli.evaluate", "minitx.cli.translate")
"""Imported once by the fork server: what the commands under test import first."""

_context: multiprocessing.context.ForkServerContext | None = None


def fork_server() -> multiprocessing.context.ForkServerContext:
    """The ``forkserver`` context, its server preloading `PRELOAD` (multiprocessing has one
    server per process: `torch.multiprocessing.start_processes(..., start_method="forkserver")`
    forks from it too)."""
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(list(PRELOAD))
    return _context


def _run_python(
    argv: list[str], cwd: str, env: dict[str, str], stdin: str, stdout: str, stderr: str | None
) -> None:
    """In the forked child: `python *argv` with the given working directory, environment and
    standard streams (file paths; `stderr` None: into stdout, like `stderr=STDOUT`)."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    for fd, path, mode in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY | os.O_APPEND)):
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    if stderr is None:
        os.dup2(1, 2)
    else:
        opened = os.open(stderr, os.O_WRONLY | os.O_APPEND)
        os.dup2(opened, 2)
        os.close(opened)
    encoding = env.get("PYTHONIOENCODING", "utf-8")
    unbuffered = env.get("PYTHONUNBUFFERED", "") not in ("", "0")
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding
    )
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding, write_through=unbuffered
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    import torch  # preloaded: read OMP_NUM_THREADS at import, in the server

    if env.get("OMP_NUM_THREADS", "").isdigit():
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    try:
        _run_main(argv)
    except KeyboardInterrupt:  # as python does: the traceback, then killed by SIGINT
        sys.excepthook(*sys.exc_info())
        _finish()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except SystemExit:
        _finish()
        raise
    except BaseException:
        sys.excepthook(*sys.exc_info())
        _finish()
        sys.exit(1)
    _finish()


def _run_main(argv: list[str]) -> None:
    """`python -m MODULE ...`, `python -c CODE ...` or `python SCRIPT ...`."""
    import runpy

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, os.getcwd())
        # The module is preloaded, which python -m would not know: runpy says so.
        warnings.filterwarnings("ignore", "'.*' found in sys.modules", RuntimeWarning)
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path.insert(0, "")
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.argv = list(argv)
        sys.path.insert(0, str(Path(argv[0]).resolve().parent))
        runpy.run_path(argv[0], run_name="__main__")


def _finish() -> None:
    """What the interpreter does on the way out: atexit handlers (logging's flush among
    them), then the standard streams flushed; one that cannot be is reported and makes the
    status 120, as python's own shutdown does."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError, ValueError):
                print(f"Exception ignored in: {stream!r}\n{exc!r}", file=sys.__stderr__)
            os._exit(120)


def _text(path: Path) -> str:
    """What the child wrote, as text; carriage returns kept (progress-bar frames show)."""
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        return f.read()


class PreloadedProcess:
    """A started ``python ...`` command line in a forked child (a `subprocess.Popen` subset:
    `pid`, `poll`, `wait`, `communicate`, `send_signal`, `kill`, `returncode`; negative
    when a signal ended it)."""

    def __init__(
        self,
        cmd: list[str],
        *,
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
        stdout: str | Path | None = None,
        merge_stderr: bool = False,
    ) -> None:
        if Path(cmd[0]).resolve() != Path(sys.executable).resolve():
            raise ValueError(f"not a python command line: {cmd[0]!r}")
        self._dir = Path(tempfile.mkdtemp(prefix="minitx-preloaded-"))
        stdin = self._dir / "stdin"
        stdin.write_text(input or "", encoding="utf-8")
        self._stdout = Path(stdout) if stdout is not None else self._dir / "stdout"
        self._stderr = None if merge_stderr else self._dir / "stderr"
        for path in (self._stdout, self._stderr):
            if path is not None and path.parent == self._dir:
                path.touch()
        self._process = fork_server().Process(
            target=_run_python,
            args=(
                list(cmd[1:]),
                str(cwd or os.getcwd()),
                dict(os.environ if env is None else env),
                str(stdin),
                str(self._stdout),
                None if self._stderr is None else str(self._stderr),
            ),
        )
        self._process.start()
        self.pid: int = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(str(self._process.name), timeout or 0)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end, then standard output and error as text ('' for error merged into
        output, and for output sent to a device such as /dev/full)."""
        self.wait(timeout)
        err = "" if self._stderr is None else _text(self._stderr)
        return self.output_so_far(), err

    def output_so_far(self) -> str:
        return _text(self._stdout) if self._stdout.is_file() else ""

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """Kill the child if it still runs, and remove its captured output."""
        self.send_signal(signal.SIGKILL)
        self._process.join(10)
        shutil.rmtree(self._dir, ignore_errors=True)


def run_python(
    cmd: list[str],
    *,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
    stdout: str | Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Like ``subprocess.run(cmd, capture_output=True, text=True)`` for ``cmd = [sys.executable,
    ...]``, in a preloaded fork; `stdout`: a file path to write standard output to instead
    (then ``.stdout`` is what that file holds, or '' for a device)."""
    process = PreloadedProcess(cmd, cwd=cwd, env=env, input=input, stdout=stdout)
    try:
        out, err = process.communicate(timeout)
    finally:
        process.kill()
    return subprocess.CompletedProcess(cmd, process.returncode, out, err)
