"""The core's command line: one module per command, each run as its console script
`minitx-NAME` (pyproject.toml's ``[project.scripts]``: `minitx-train`, `minitx-translate`,
`minitx-evaluate`, `minitx-visualize`, `minitx-export`, `minitx-average`). The extras'
commands (`minitx-ct2`, `minitx-demo`, `minitx-experiment`) live beside their extra, in
`minitx/extras/NAME/command.py`, and use `common.py` too, where the exit statuses of every
command are listed. Every console script enters through `launch.py`.
"""
