#!/usr/bin/env python
"""The `minitx-evaluate` command (see minitx/cli/evaluate.py), runnable from a checkout as
`python scripts/evaluate.py` so that the commands in README.md work either way."""

import sys

from minitx.cli.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
