#!/usr/bin/env python
"""Train a translation Transformer: `python scripts/train.py`, the same command as
`minitx-train` (`minitx/cli/train.py`; its flags and examples: docs/guides/training.md), as a
script of the checkout: it runs with the Python that runs it, no activated environment or
console script on PATH needed (README.md's quick start uses it).
"""

from minitx.cli.launch import train

if __name__ == "__main__":
    raise SystemExit(train())
