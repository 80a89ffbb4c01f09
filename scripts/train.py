#!/usr/bin/env python
"""Train a translation Transformer: `python scripts/train.py` (Multi30k de->en by default).

The same command as `minitx-train` (see `minitx/cli/train.py`), as a script of the checkout:
it runs with the Python that runs it, no activated environment or console script on PATH
needed (README.md's quick start uses it). Examples:
    python scripts/train.py                                      # default config
    python scripts/train.py --config configs/multi30k_en_de.yaml # other direction
    python scripts/train.py --config tiny                        # packaged config by name
    python scripts/train.py --ckpt_path last                     # resume the newest run
    python scripts/train.py --print_config                       # show the resolved config

Offline: point the data at local raw files with MINITX_DATA_DIR=/path/to/multi30k.
"""

from minitx.cli.train import main

if __name__ == "__main__":
    main()
