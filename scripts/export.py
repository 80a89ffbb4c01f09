#!/usr/bin/env python
"""The `minitx-export` command (see minitx/cli/export.py) as a script of the checkout:
`python scripts/export.py ARGS` runs it with the Python that runs the script (e.g.
`.venv/bin/python scripts/export.py`: no activated environment, no console script on
PATH needed). docs/cli.md lists these wrappers."""

import sys

from minitx.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
