"""The data layer: parallel corpora in, token-bucketed tensor batches out.

The pipeline, each step a plain function that tests can call on its own:

1. `load_parallel_corpus` (sources.py) reads a corpus into a ``DatasetDict`` (splits
   ``train``, ``validation``, ``test``) with one ``translation`` column.
2. `clean_pairs` (cleaning.py) drops pairs with an empty side (every split), counting and
   logging them.
3. `tokenize_corpus` (tokenization.py) adds ``src_ids``/``tgt_ids`` (no bos/eos) and their
   lengths, cached on disk; `filter_long_pairs` drops over-long *training* pairs (counted).
4. `TokenBucketBatchSampler` (batching.py) groups examples of equal padded length into
   batches of at most ``max_tokens`` padded tokens; `collate` pads them into tensors.

`TranslationDataModule` (datamodule.py) wires the steps together for Lightning. Nothing here
imports the model. The toy corpus (``builtin:toy``) lives in minitx/data/toy.
"""

from minitx.data.batching import TokenBucketBatchSampler, collate, round_up
from minitx.data.cleaning import Counts, clean_pairs, side_texts
from minitx.data.datamodule import TranslationDataModule
from minitx.data.sources import (
    BUILTIN_CORPORA,
    BUILTIN_PREFIX,
    DATA_DIR_ENV,
    HUB_SPLITS,
    MULTI30K_SPLITS,
    builtin_corpus_dir,
    is_hub_id,
    load_parallel_corpus,
    resolve_data_source,
)
from minitx.data.tokenization import (
    example_lengths,
    filter_long_pairs,
    tokenize_corpus,
    truncate_long_pairs,
)

__all__ = [
    "BUILTIN_CORPORA",
    "BUILTIN_PREFIX",
    "DATA_DIR_ENV",
    "HUB_SPLITS",
    "MULTI30K_SPLITS",
    "Counts",
    "TokenBucketBatchSampler",
    "TranslationDataModule",
    "builtin_corpus_dir",
    "clean_pairs",
    "collate",
    "example_lengths",
    "filter_long_pairs",
    "is_hub_id",
    "load_parallel_corpus",
    "resolve_data_source",
    "round_up",
    "side_texts",
    "tokenize_corpus",
    "truncate_long_pairs",
]
