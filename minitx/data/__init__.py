"""The data layer: parallel corpora in, token-bucketed tensor batches out.

Training prepares a corpus of any size in bounded memory, each step a plain function that
tests can call on its own:

1. `open_parallel_corpus` (sources.py) opens every split as a `PairStream` (streams.py):
   raw files, jsonl or a hub dataset, read chunk by chunk.
2. `Tokenizer.train` (minitx/tokenizer.py) trains the joint tokenizer on the training split,
   or on a bounded, seeded sample of it (`sample_sentences`, sample.py); cached.
3. `prepare_split` (prepare.py) drops empty pairs, tokenizes and drops over-long training
   pairs in one pass per split, into a memory-mapped Arrow file with a checksum record
   (cache.py) that later runs and every DDP process reuse.
4. `TokenBucketBatchSampler` (batching.py) groups examples of equal padded length into
   batches of at most ``max_tokens`` padded tokens; `collate` pads them into tensors.

In memory, for evaluation sets and small corpora: `load_parallel_corpus` (a ``DatasetDict``
with one ``translation`` column) and `clean_pairs` (cleaning.py).

`TranslationDataModule` (datamodule.py) wires the steps together for Lightning; import it from
`minitx.data.datamodule`, as training does: the package itself stays free of Lightning, so that
the inference commands that read a corpus (minitx-evaluate) start without it. Nothing here
imports the model. The toy corpus (``builtin:toy``) lives in minitx/data/toy.
"""

from minitx.data.batching import (
    ResumableDataLoader,
    TokenBucketBatchSampler,
    collate,
    example_lengths,
    round_up,
)
from minitx.data.cleaning import clean_pairs, side_texts, usable_pairs
from minitx.data.prepare import prepare_split
from minitx.data.sample import sample_sentences
from minitx.data.sources import (
    BUILTIN_CORPORA,
    DATA_DIR_ENV,
    DEFAULT_SOURCE,
    HUB_SPLITS,
    MULTI30K_SPLITS,
    builtin_corpus_dir,
    describe_directory,
    load_parallel_corpus,
    local_stem,
    open_parallel_corpus,
    resolve_data_source,
    split_files,
)
from minitx.data.streams import PairStream

__all__ = [
    "BUILTIN_CORPORA",
    "DATA_DIR_ENV",
    "DEFAULT_SOURCE",
    "HUB_SPLITS",
    "MULTI30K_SPLITS",
    "PairStream",
    "ResumableDataLoader",
    "TokenBucketBatchSampler",
    "builtin_corpus_dir",
    "clean_pairs",
    "collate",
    "describe_directory",
    "example_lengths",
    "load_parallel_corpus",
    "local_stem",
    "split_files",
    "open_parallel_corpus",
    "prepare_split",
    "resolve_data_source",
    "round_up",
    "sample_sentences",
    "side_texts",
    "usable_pairs",
]
