#!/usr/bin/env python
"""The `minitx-evaluate` command (see minitx/cli/evaluate.py) as a script of the checkout:
`python scripts/evaluate.py ARGS` runs it with the Python that runs the script (e.g.
`.venv/bin/python scripts/evaluate.py`: no activated environment, no console script on
PATH needed). docs/cli.md lists these wrappers."""

import sys

from minitx.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
