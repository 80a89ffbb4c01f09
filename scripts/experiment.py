#!/usr/bin/env python
"""The `minitx-experiment` command (see minitx/cli/experiment.py), runnable from a checkout as
`python scripts/experiment.py` so that the commands in README.md work either way."""

import sys

from minitx.cli.experiment import main

if __name__ == "__main__":
    sys.exit(main())
