#!/usr/bin/env python
"""The `minitx-visualize` command (see minitx/cli/visualize.py), runnable from a checkout as
`python scripts/visualize_attention.py` so that the commands in README.md work either way."""

import sys

from minitx.cli.visualize import main

if __name__ == "__main__":
    sys.exit(main())
