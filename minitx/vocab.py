"""Special token ids: the single source for the tokenizer, batching, model and decoding.

The sentencepiece models minitx trains reserve these ids (`minitx.tokenizer`), `collate`
pads with `PAD_ID`, and the model and decoders read them from here. Standard library only.
"""

from __future__ import annotations

PAD_ID = 0
"""Padding; never attended to, never generated."""
UNK_ID = 1
"""Unknown piece."""
BOS_ID = 2
"""Beginning of sentence: the first decoder input."""
EOS_ID = 3
"""End of sentence: appended to every source, ends every target."""

PAD_PIECE = "<pad>"
UNK_PIECE = "<unk>"
BOS_PIECE = "<s>"
EOS_PIECE = "</s>"
