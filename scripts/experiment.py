#!/usr/bin/env python
"""The `minitx-experiment` command (see minitx/cli/experiment.py) as a script of the checkout:
`python scripts/experiment.py ARGS` runs it with the Python that runs the script (e.g.
`.venv/bin/python scripts/experiment.py`: no activated environment, no console script on
PATH needed). docs/cli.md lists these wrappers."""

import sys

from minitx.cli.experiment import main

if __name__ == "__main__":
    sys.exit(main())
