#!/usr/bin/env python
"""The `minitx-translate` command (see minitx/cli/translate.py), runnable from a checkout as
`python scripts/translate.py` so that the commands in README.md work either way."""

import sys

from minitx.cli.translate import main

if __name__ == "__main__":
    sys.exit(main())
