"""`python -m minitx <command> ...`: see minitx/cli/main.py."""

import sys

from minitx.cli.main import main

sys.exit(main())
