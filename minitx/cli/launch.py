"""The console scripts' entry points (pyproject.toml's ``[project.scripts]``).

A command's module imports torch and Lightning, and its parser imports more: seconds on a
small CPU. A Ctrl-C in those seconds would end in a traceback through the libraries' imports,
so each entry point starts its command under a guard that ends as a Ctrl-C during the work
does: one line and exit status 130 (143 for a SIGTERM, whose default ended the process
unsaid). The guard stays until the command's work begins
(`common.work_begins`, called by `common.run_cli` and by training's entry), so it covers
the parser's imports too.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from functools import partial

from minitx.cli.allocator import keep_freed_memory
from minitx.cli.common import stop_while_starting

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("minitx.cli.train", "run"),
    "translate": ("minitx.cli.translate", "main"),
    "evaluate": ("minitx.cli.evaluate", "main"),
    "visualize": ("minitx.cli.visualize", "main"),
    "export": ("minitx.cli.export", "main"),
    "average": ("minitx.cli.average", "main"),
    # The extras' commands, by name only: nothing of an extra is imported before it runs.
    "ct2": ("minitx.extras.ctranslate2.command", "main"),
    "demo": ("minitx.extras.demo.command", "main"),
    "experiment": ("minitx.extras.experiments.command", "main"),
}
"""``minitx-NAME`` -> (the module of its command, the function that runs it)."""


def launch(name: str) -> int:
    """Import the command ``minitx-NAME``, run it and return what it returns (the exit
    status); 130 (143) and one line on standard error when Ctrl-C (SIGTERM) comes before its
    work begins (the imports, building and parsing its command line)."""
    if sys.stderr is None:  # closed (2>&-): its messages are dropped, the work goes on
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 (open for the process's life)
    keep_freed_memory()  # a step's tensors reuse the last step's pages (allocator.py)
    module, function = COMMANDS[name]
    guard = threading.current_thread() is threading.main_thread()  # where signals are handled
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {signum: signal.signal(signum, stop_while_starting) for signum in stops if guard}
    try:
        return getattr(importlib.import_module(module), function)()
    finally:
        for signum, handler in previous.items():
            if signal.getsignal(signum) is stop_while_starting:
                # None: a handler not set from Python; Python's own stands in
                python_own = (
                    signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL
                )
                signal.signal(signum, handler or python_own)


# The console scripts, one per command: `minitx-train` is `launch("train")`, and so on.
train = partial(launch, "train")
translate = partial(launch, "translate")
evaluate = partial(launch, "evaluate")
visualize = partial(launch, "visualize")
export = partial(launch, "export")
average = partial(launch, "average")
ct2 = partial(launch, "ct2")
demo = partial(launch, "demo")
experiment = partial(launch, "experiment")
