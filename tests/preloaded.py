"""Run ``python ...`` command lines in a fork of an interpreter that has imported torch,
Lightning and minitx's commands already.

Why: on 2 cores a fresh Python spends 6-9 s importing torch and Lightning before a command
does anything, and the suite runs dozens of commands as a user runs them (own process, own
exit status, output and signals at the file-descriptor level). A ``forkserver`` from
multiprocessing imports them once per test worker and forks a child for each command line; the
child then runs the script, module or ``-c`` code the way ``python`` would, and ends the way
python's shutdown does (threads joined, atexit handlers, streams flushed; 120 when that fails).

What a child does not see as a fresh interpreter would:
- messages printed while those modules were first imported;
- environment variables read at import time: torch's ``OMP_NUM_THREADS`` is applied by hand,
  ``PYTHONPATH`` is not (``sys.path`` is the test worker's, plus the script's folder);
- multiprocessing's own state: the child is a forkserver process, not a main process.
Tests of exactly that (no library chatter before an error line, ``--verbose``, Ctrl-C during the
imports, the exit-time flush to a full disk) and tests of the entry points themselves keep a
real ``subprocess``.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import multiprocessing.util  # its exit hook first: ours, registered later, runs before it
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path

PRELOAD = ("torch", "lightning", "minitx.cli.train", "minitx.cli.evaluate", "minitx.cli.translate")
"""Imported once by the fork server: what the commands under test import first."""


def fork_server() -> multiprocessing.context.ForkServerContext:
    """The ``forkserver`` context, its server preloading `PRELOAD` (multiprocessing has one
    server per process: `torch.multiprocessing.start_processes(..., start_method="forkserver")`
    forks from it too)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))  # read when the server starts, once
    return context


def _child_main(
    argv: list[str], cwd: str, env: dict[str, str], stdin: str, stdout: str, stderr: str | None
) -> None:
    """In the forked child: `python *argv` with the given working directory, environment and
    standard streams (file paths; `stderr` None: into stdout, like `stderr=STDOUT`)."""
    # Ctrl-C raises KeyboardInterrupt, as in a python started from a shell. The fork server
    # hands its children the Ctrl-C handling it inherited when it started: one started while
    # the worker ignored Ctrl-C (Lightning ignores it while it winds an interrupted fit down)
    # made every later child ignore it, and a suite run waited out a child's 60 s sleep.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _redirect_streams(env, stdin, stdout, stderr)
    multiprocessing.current_process().name = "MainProcess"
    with contextlib.suppress(RuntimeError):  # the default start method, as in a new process
        multiprocessing.set_start_method(None, force=True)
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        import torch  # preloaded: it read OMP_NUM_THREADS at import, in the server

        torch.set_num_threads(int(threads))
    status: int | str | None = 0
    try:
        _run_main(argv)
    except SystemExit as exc:
        status = exc.code
    except KeyboardInterrupt:  # as python does: the traceback, then killed by SIGINT
        sys.excepthook(*sys.exc_info())
        _shut_down()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    if status is not None and not isinstance(status, int):
        print(status, file=sys.stderr)  # sys.exit("message")
        status = 1
    os._exit(_shut_down() or (status or 0))


def _redirect_streams(env: dict[str, str], stdin: str, stdout: str, stderr: str | None) -> None:
    """Point file descriptors 0-2 at the given files and rebuild sys.stdin/out/err over them
    the way python does for files (PYTHONIOENCODING, PYTHONUNBUFFERED)."""
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
    encoding, _, errors = env.get("PYTHONIOENCODING", "utf-8").partition(":")
    unbuffered = env.get("PYTHONUNBUFFERED", "") not in ("", "0")

    def writer(fd: int, **options: object) -> io.TextIOWrapper:
        raw = io.FileIO(fd, "w", closefd=False)
        binary = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(binary, encoding, write_through=unbuffered, **options)

    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding, errors or None
    )
    sys.stdout = sys.__stdout__ = writer(1, errors=errors or "strict")
    sys.stderr = sys.__stderr__ = writer(2, errors="backslashreplace", line_buffering=True)


def _run_main(argv: list[str]) -> None:
    """`python -m MODULE ...`, `python -c CODE ...` or `python SCRIPT ...`."""
    import runpy

    if argv[0] == "-m":
        sys.argv = [argv[1], *argv[2:]]
        sys.path.insert(0, os.getcwd())
        # A preloaded module, which python -m would find fresh: runpy warns of that.
        found = f"'{re.escape(argv[1])}' found in sys.modules"
        warnings.filterwarnings("ignore", found, RuntimeWarning)
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


def _shut_down() -> int:
    """Python's way out: join the other threads, run the atexit handlers, flush the open
    standard streams. 120 when a flush fails (reported, as python reports it), else 0. Files
    the command left open and unflushed are not finalised (the child ends with os._exit)."""
    threading._shutdown()  # what the interpreter calls first on its way out
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "closed", True):
            continue
        try:
            stream.flush()
        except (OSError, ValueError) as exc:
            with contextlib.suppress(OSError, ValueError):
                print(f"Exception ignored in: {stream!r}\n{exc!r}", file=sys.__stderr__)
            return 120
    return 0


def _text(path: Path) -> str:
    """What the child wrote, as text (UTF-8, as `subprocess_env` asks); carriage returns kept
    (progress-bar frames show)."""
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


_LIVE: set[PreloadedProcess] = set()


@atexit.register
def _kill_the_forgotten() -> None:
    """A child still running when the worker ends (a failed test did not get to kill it):
    multiprocessing would wait for it; kill it instead."""
    for process in list(_LIVE):
        process.close()


class PreloadedProcess:
    """A started ``python ...`` command line in a forked child (a `subprocess.Popen` subset:
    `args`, `pid`, `poll`, `wait`, `communicate`, `send_signal`, `kill`, `returncode`; negative
    when a signal ended it). A context manager: on leaving, `close`. Standard output goes to a
    captured file, or is appended to the file `stdout` names."""

    def __init__(
        self,
        cmd: list[str],
        *,
        cwd: Path | str | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
        merge_stderr: bool = False,
        stdout: Path | None = None,
    ) -> None:
        if cmd[0] != sys.executable or cmd[1] not in ("-m", "-c") and cmd[1].startswith("-"):
            raise ValueError(f"not `{sys.executable} [-m MODULE | -c CODE | SCRIPT] ...`: {cmd}")
        if not Path(cwd or ".").is_dir():
            raise NotADirectoryError(f"cwd: {cwd}")
        self.args = cmd
        self.returncode: int | None = None
        self._dir = Path(tempfile.mkdtemp(prefix="minitx-preloaded-"))
        try:
            (self._dir / "stdin").write_text(input or "", encoding="utf-8")
            # `stdout`: appended to, as the shell's `>> FILE` (the child's /dev/stdout is it)
            self._stdout = self._dir / "stdout" if stdout is None else Path(stdout)
            self._stderr = None if merge_stderr else self._dir / "stderr"
            for path in (self._stdout, self._stderr):
                if path is not None:
                    path.touch()
            self._process = fork_server().Process(
                target=_child_main,
                args=(
                    list(cmd[1:]),
                    str(Path(cwd or ".").resolve()),
                    dict(os.environ if env is None else env),
                    str(self._dir / "stdin"),
                    str(self._stdout),
                    None if self._stderr is None else str(self._stderr),
                ),
            )
            self._process.start()
        except BaseException:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self.pid: int = self._process.pid
        _LIVE.add(self)

    def __enter__(self) -> PreloadedProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Wait for the end, then standard output and error as text ('' for error merged into
        output)."""
        self.wait(timeout)
        err = "" if self._stderr is None else _text(self._stderr)
        return self.output_so_far(), err

    def output_so_far(self) -> str:
        """Standard output as written so far (with error, when merged)."""
        return _text(self._stdout)

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)
        self._process.join(10)

    def close(self) -> None:
        """Kill the child if it still runs, and remove its captured output."""
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)
        _LIVE.discard(self)


def run_python(
    cmd: list[str],
    *,
    cwd: Path | str | None = None,
    env: dict[str, str] | None = None,
    input: str | None = None,
    timeout: float = 300,
    stdout: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Like ``subprocess.run(cmd, capture_output=True, text=True)`` for ``cmd = [sys.executable,
    ...]``, in a preloaded fork; `stdout`: a file to append standard output to instead."""
    with PreloadedProcess(cmd, cwd=cwd, env=env, input=input, stdout=stdout) as process:
        out, err = process.communicate(timeout)
    return subprocess.CompletedProcess(cmd, process.returncode, out, err)
