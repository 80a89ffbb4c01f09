#!/usr/bin/env python
"""The `minitx-average` command (see minitx/cli/average.py) as a script of the checkout:
`python scripts/average.py ARGS` runs it with the Python that runs the script (e.g.
`.venv/bin/python scripts/average.py`: no activated environment, no console script on
PATH needed). docs/cli.md lists these wrappers."""

import sys

from minitx.cli.average import main

if __name__ == "__main__":
    sys.exit(main())
