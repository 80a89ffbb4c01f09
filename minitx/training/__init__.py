"""Training: the LightningModule, its grouped settings, the LR schedule and the callbacks
(checkpoint averaging among them).

Imports the model, the data layer, decoding and viz; never the inference API
(`minitx.translator`), so training code cannot depend on how models are served.
"""

from minitx.errors import DivergenceError, ResumeMismatchError
from minitx.training.averaging import CheckpointAveraging
from minitx.training.callbacks import (
    AttentionMapLogger,
    CheckpointOnInterrupt,
    MinitxProgressBar,
    PlainProgress,
    TokenThroughput,
    ValidateAtEnd,
    ValidationExamples,
)
from minitx.training.config import OptimConfig, ValidationConfig
from minitx.training.module import TranslationModule

__all__ = [
    "AttentionMapLogger",
    "CheckpointAveraging",
    "CheckpointOnInterrupt",
    "DivergenceError",
    "MinitxProgressBar",
    "OptimConfig",
    "PlainProgress",
    "ResumeMismatchError",
    "TokenThroughput",
    "TranslationModule",
    "ValidateAtEnd",
    "ValidationConfig",
    "ValidationExamples",
]
