"""The command line: `minitx-train`, `minitx-translate`, `minitx-evaluate`,
`minitx-visualize`, `minitx-export` (console scripts), also reachable as
`python -m minitx <command>`.

Exit codes of every command: 0 ok, 2 user error (one line `error: ...`), 130 interrupted,
1 a bug in minitx (with its traceback).
"""
