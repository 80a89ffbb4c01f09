#!/usr/bin/env python
"""The `minitx-translate` command (see minitx/cli/translate.py) as a script of the checkout:
`python scripts/translate.py ARGS` runs it with the Python that runs the script (e.g.
`.venv/bin/python scripts/translate.py`: no activated environment, no console script on
PATH needed). docs/cli.md lists these wrappers."""

import sys

from minitx.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
