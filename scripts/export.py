#!/usr/bin/env python
"""The `minitx-export` command (see minitx/cli/export.py), runnable from a checkout as
`python scripts/export.py` so that the commands in README.md work either way."""

import sys

from minitx.cli.export import main

if __name__ == "__main__":
    sys.exit(main())
