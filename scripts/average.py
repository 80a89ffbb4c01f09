#!/usr/bin/env python
"""The `minitx-average` command (see minitx/cli/average.py), runnable from a checkout as
`python scripts/average.py` so that the commands in README.md work either way."""

import sys

from minitx.cli.average import main

if __name__ == "__main__":
    sys.exit(main())
