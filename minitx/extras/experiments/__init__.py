"""The experiments suite: the claims made about attention, measured on minitx's own runs.

`EXPERIMENTS` (definitions.py) names each claim and its variants; `run_experiment`
(runner.py) trains the variants within a time budget, probes them (probes.py) and writes a
results table, JSON and figures (report.py). The command is `minitx-experiment`
(command.py). This package builds on the training command and the inference API; nothing
else in minitx imports it.
"""

from minitx.extras.experiments.definitions import EXPERIMENTS, Experiment, Variant
from minitx.extras.experiments.runner import Settings, run_experiment

__all__ = ["EXPERIMENTS", "Experiment", "Settings", "Variant", "run_experiment"]
