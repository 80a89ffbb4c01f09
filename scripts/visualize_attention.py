#!/usr/bin/env python
"""The `minitx-visualize` command (see minitx/cli/visualize.py) as a script of the checkout:
`python scripts/visualize_attention.py ARGS` runs it with the Python that runs the script (e.g.
`.venv/bin/python scripts/visualize_attention.py`: no activated environment, no console script on
PATH needed). docs/cli.md lists these wrappers."""

import sys

from minitx.cli.visualize import main

if __name__ == "__main__":
    sys.exit(main())
