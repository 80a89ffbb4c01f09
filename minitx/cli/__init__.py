"""The core's command line: one module per command, each run as its console script
`minitx-NAME` (pyproject.toml's ``[project.scripts]``: `minitx-train`, `minitx-translate`,
`minitx-evaluate`, `minitx-visualize`, `minitx-export`, `minitx-average`). The extras'
commands (`minitx-ct2`, `minitx-demo`, `minitx-experiment`) live beside their extra, in
`minitx/extras/NAME/command.py`, and use `common.py` too.

Exit codes of every command: 0 ok, 2 user error (one line `error: ...`), 130 interrupted,
1 a bug in minitx (with its traceback).
"""
