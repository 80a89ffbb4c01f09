"""minitx: a mini Transformer for machine translation with an explicit attention core."""

__version__ = "0.1.0"
