#!/usr/bin/env python
"""Speed figures for minitx, measured in one run (compare only numbers from the same run).

Sections (all by default; pick with --sections):
  train      full training step (forward, backward, AdamW) in target tokens/s: minitx vs
             torch.nn.Transformer (+ embeddings + output projection), same sizes, fp32 and bf16
             autocast, on token-bucketed batches of Multi30k-like lengths; A/B interleaved.
             Beside tokens/s: matmul GFLOP/s (minitx.flops: the FLOPs the batch's real
             lengths need) and MFU, that over a matmul peak measured here at the model's
             shapes, or over --peak-tflops, or on a GPU over the card's bf16 dense peak
             (GPU_BF16_PEAK_TFLOPS). bf16 only where the CPU has bf16 instructions (else it
             is emulated); on --device cuda fp32 and bf16.
  attention  the attention core: explicit weights path vs the fused kernel
             (F.scaled_dot_product_attention, flash and math backends), lengths 16..512.
  scores     (opt-in) the training step of the benchmark's model with each score function
             (scaled dot on the fused kernel; dot, additive, bilinear on the explicit path),
             same batches, taking turns: target tokens/s and the ratio to scaled dot.
  padding    (opt-in) the default config's training step on the same sentences batched with
             data.pad_multiple 8, 4 and 1 (taking turns): batches, target tokens per batch,
             batch shapes and the time of a first pass over them, target tokens/s. Give it
             Multi30k's size (--max-tokens 1024 --train-examples 29000): with few sentences
             the part-filled last batch of every exact-length bucket weighs too much.
  levers     (opt-in) the default config's training step (d_ff 512, dropout 0.1, fused AdamW,
             feed-forward on the real positions packed to a multiple of 64 rows, 8,000 pieces)
             against itself with one lever undone or changed: feed-forward on every padded
             position, on exactly the real ones, AdamW's loop over the parameters, a
             4,000-piece vocabulary; taking turns on the same sentences: target tokens/s and
             the ratio to the default.
  decode     greedy and beam search, with vs without the KV cache, in sentences/s, in each of
             --precisions (bf16: a bf16 copy of the model, as minitx-translate --bf16 decodes).
  budget     (opt-in) where a training run's time goes: --budget-config trained for
             --budget-time in a fresh process (`minitx-train`, Lightning's SimpleProfiler on),
             its fit time split into training steps, fetching batches, validation, attention
             maps, checkpoint writes, the other callbacks (logging) and the rest; updates made,
             the target tokens/s of the whole fit and of the training steps alone, and their
             ratio (the share of the budget that trains).

--device cuda runs the train and decode sections on the GPU (the others stay CPU-only).
  ct2        (opt-in, needs --checkpoint) the checkpoint exported to CTranslate2, float32 and
             int8 weights, vs minitx on the test split: sentences/s, BLEU, and the share of
             translations identical to minitx's, greedy and beam; needs minitx[export].
  data       (opt-in) data preparation at scale: for each --data-pairs N, a synthetic corpus of
             N training pairs (two sentences of --data's training split joined per side;
             its validation and test splits as they are) prepared with the default data
             settings in a fresh process: preparation time, pairs/s, peak RSS, cache size,
             time to the first training batch; then again from the cache, in another process.

    python scripts/benchmark.py                         # train, attention, decode: ~4 minutes here
    python scripts/benchmark.py --sections decode --checkpoint RUN.ckpt --data DIR
    python scripts/benchmark.py --sections ct2 --checkpoint RUN.ckpt --decode-sentences 1000
    python scripts/benchmark.py --sections scores      # ~3 minutes here
    python scripts/benchmark.py --sections padding --max-tokens 1024 --train-examples 29000
    python scripts/benchmark.py --sections levers --max-tokens 1024 --train-steps 60
    python scripts/benchmark.py --sections data       # 30k, 300k, 1M pairs: ~2 minutes here
    python scripts/benchmark.py --sections budget     # the default run: its 20 minutes and more
    python scripts/benchmark.py --sections data --data-pairs 5000000
    python scripts/benchmark.py --sections train decode --device cuda --max-tokens 8192
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import logging
import logging.handlers
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import move_data_to_device
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from minitx.attention import padding_mask, scaled_dot_product_attention
from minitx.cli.allocator import keep_freed_memory
from minitx.cli.common import (
    EXIT_USER_ERROR,
    OneLineArgumentParser,
    UsageError,
    check_device,
    positive_float,
    positive_int,
    report_user_error,
)
from minitx.data import TokenBucketBatchSampler, collate
from minitx.data.sources import DATA_DIR_ENV
from minitx.decoding import DEFAULT_BATCH_SIZE, DecodingConfig, beam_search, greedy_decode
from minitx.errors import ConfigError
from minitx.flops import training_flops
from minitx.hardware import cpu_has_fast_bf16
from minitx.model import SinusoidalPositionalEncoding, Transformer, TransformerConfig
from minitx.training import TranslationModule
from minitx.training.cadence import duration

GPU_BF16_PEAK_TFLOPS = {  # dense bf16 tensor-core peaks from NVIDIA's data sheets
    "H100 PCIe": 756.0,
    "H100": 989.4,  # SXM (HBM3); the H200 is the same chip
    "H200": 989.4,
    "A100": 312.0,
}
"""bf16 peak (TFLOP/s) by a part of the CUDA device name, searched in this order; the
train section's MFU on a GPU is measured against it unless --peak-tflops is given."""

SIZES = dict(  # the model of `--config long` (the default config's feed-forward is 512 wide)
    d_model=256, n_heads=4, n_encoder_layers=3, n_decoder_layers=3, d_ff=1024, vocab_size=8000
)
SMOKE_SIZES = dict(  # --smoke: a model small enough that every section runs in seconds
    d_model=32, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=64, vocab_size=200
)
SMOKE_DATA_PAIRS = 3_000
"""--smoke: the data section's corpora have at most this many pairs."""
ATTENTION_SHAPES = dict(tokens=4096, lengths=(16, 32, 64, 128, 256, 512))
"""The attention section's batches: B*T tokens at each length T."""
SMOKE_ATTENTION_SHAPES = dict(tokens=256, lengths=(16, 32))


# ------------------------------------------------------------------------------------ data


def _below(ids: np.ndarray, vocab_size: int) -> list[int]:
    """`ids` (all >= 4) folded into [4, vocab_size); unchanged where already below it."""
    return np.where(ids < vocab_size, ids, 4 + ids % (vocab_size - 4)).tolist()


def multi30k_like_batches(
    n_examples: int,
    max_tokens: int,
    seed: int = 0,
    pad_multiple: int = 8,
    vocab_size: int | None = None,
) -> list[dict]:
    """Token-bucketed batches of random ids below `vocab_size` (default: SIZES') whose lengths
    follow Multi30k's (mean ~15 pieces), lengths padded up to a multiple of `pad_multiple`
    (`data.pad_multiple`). The lengths and batches depend on `seed` alone, not on
    `vocab_size`."""
    vocab_size = SIZES["vocab_size"] if vocab_size is None else vocab_size
    rng = np.random.default_rng(seed)
    src_len = np.clip(np.rint(rng.normal(15.2, 5.5, n_examples)), 3, 50).astype(int)
    tgt_len = np.clip(np.rint(src_len + rng.normal(-0.5, 2.5, n_examples)), 3, 50).astype(int)
    examples = [
        {
            "src_ids": _below(rng.integers(4, SIZES["vocab_size"], s), vocab_size),
            "tgt_ids": _below(rng.integers(4, SIZES["vocab_size"], t), vocab_size),
            "src_text": "",
            "tgt_text": "",
        }
        for s, t in zip(src_len, tgt_len, strict=True)
    ]
    lengths = np.maximum(src_len, tgt_len) + 1
    sampler = TokenBucketBatchSampler(
        lengths, max_tokens=max_tokens, pad_multiple=pad_multiple, shuffle=True, seed=seed
    )
    return [collate([examples[i] for i in batch], pad_multiple) for batch in sampler]


# ------------------------------------------------------------------------------------ train


class TorchTransformerBaseline(nn.Module):
    """torch.nn.Transformer with shared, scaled embeddings, sinusoidal positions, tied output."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        d = SIZES["d_model"]
        self.embed = nn.Embedding(SIZES["vocab_size"], d, padding_idx=0)
        self.positional = SinusoidalPositionalEncoding(d_model=d)
        self.dropout = nn.Dropout(dropout)
        with warnings.catch_warnings():  # pre-LN turns torch's nested-tensor path off: said
            warnings.filterwarnings("ignore", message="enable_nested_tensor is True")  # each run
            self.transformer = nn.Transformer(
                d,
                SIZES["n_heads"],
                SIZES["n_encoder_layers"],
                SIZES["n_decoder_layers"],
                SIZES["d_ff"],
                dropout,
                batch_first=True,
                norm_first=True,
            )
        self.output = nn.Linear(d, SIZES["vocab_size"], bias=False)
        self.output.weight = self.embed.weight

    def loss(self, batch: dict) -> torch.Tensor:
        src, tgt_in, tgt_out = batch["src"], batch["tgt_in"], batch["tgt_out"]
        scale = SIZES["d_model"] ** 0.5
        s = self.dropout(self.positional(self.embed(src) * scale))
        t = self.dropout(self.positional(self.embed(tgt_in) * scale))
        causal = nn.Transformer.generate_square_subsequent_mask(tgt_in.size(1), tgt_in.device)
        h = self.transformer(
            s,
            t,
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src == 0,
            memory_key_padding_mask=src == 0,
        )
        logits = self.output(h)
        return F.cross_entropy(
            logits.flatten(0, 1).float(), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1
        )


def bench_module(**transformer: object) -> TranslationModule:
    """minitx's TranslationModule at the benchmark's sizes (SIZES), dropout 0.1, in train mode;
    `transformer` overrides model settings (e.g. score="additive")."""
    sizes = {k: v for k, v in SIZES.items() if k != "vocab_size"}
    vocab = {"src_vocab_size": SIZES["vocab_size"], "tgt_vocab_size": SIZES["vocab_size"]}
    module = TranslationModule(transformer={**sizes, **vocab, "dropout": 0.1, **transformer})
    module.train()
    return module


def training_loss(module: TranslationModule) -> Callable[[dict], torch.Tensor]:
    """The loss `module` trains with, under its attention-kernel choice."""

    def loss(batch: dict) -> torch.Tensor:
        with module._sdpa_kernel():
            return module._losses(batch)[0]

    return loss


def bench_train(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    batches = multi30k_like_batches(args.train_examples, args.max_tokens)
    shapes = {_shape(b) for b in batches}
    minitx = bench_module().to(args.device)
    baseline = TorchTransformerBaseline().train().to(args.device)
    work = [_batch_work(minitx.model_config, b) for b in batches]  # (target tokens, FLOPs)
    batches = [move_data_to_device(b, args.device) for b in batches]
    print(
        f"\n== training step: {len(batches)} batches, {len(shapes)} shapes, "
        f"max_tokens {args.max_tokens}, "
        f"avg {statistics.mean(w[0] for w in work):.0f} target tokens/batch, "
        f"{sum(w[1] for w in work) / sum(w[0] for w in work) / 1e6:.1f} MFLOP per target token =="
    )

    def minitx_plain_loss(batch: dict) -> torch.Tensor:  # minitx model, the baseline's loss recipe
        logits = minitx.model(batch["src"], batch["tgt_in"])
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            batch["tgt_out"].flatten(),
            ignore_index=0,
            label_smoothing=0.1,
        )

    adamw = {"lr": 1e-4}
    contenders: dict[str, tuple[nn.Module, Callable, dict]] = {
        "minitx": (minitx, training_loss(minitx), adamw),
        "minitx, fused AdamW": (minitx, training_loss(minitx), {**adamw, "fused": True}),
        "minitx (full-logits loss)": (minitx, minitx_plain_loss, adamw),
        "torch.nn.Transformer": (baseline, baseline.loss, adamw),
    }
    given_peak = peak_flops(args)
    for precision in args.precisions:
        if given_peak is None:
            peak = matmul_peak(minitx.model_config, precision, args.repeats, device=args.device)
            what = "matmul peak at the model's shapes"
        else:
            peak, what = given_peak
        rate = _train_rates(contenders, batches, work, precision, args.train_steps, args.device)
        print(f"  {precision:5s} {what}: {peak / 1e9:7.1f} GFLOP/s")
        for name in contenders:
            tokens_per_s, flops_per_s = rate[name]
            print(
                f"  {precision:5s} {name:28s} {tokens_per_s:8.0f} target tokens/s "
                f"{flops_per_s / 1e9:7.1f} GFLOP/s  MFU {flops_per_s / peak:6.1%}"
            )
        torch_rate = rate["torch.nn.Transformer"][0]
        print(
            f"  {precision:5s} ratio minitx / torch.nn.Transformer = "
            f"{rate['minitx'][0] / torch_rate:.2f}x (fused AdamW: "
            f"{rate['minitx, fused AdamW'][0] / torch_rate:.2f}x; model alone, same loss: "
            f"{rate['minitx (full-logits loss)'][0] / torch_rate:.2f}x)"
        )


def peak_flops(args: argparse.Namespace) -> tuple[float, str] | None:
    """(FLOP/s, description) that MFU is measured against: --peak-tflops, else on a GPU the
    card's bf16 peak from GPU_BF16_PEAK_TFLOPS; None: measure a matmul peak here instead."""
    if args.peak_tflops is not None:
        return args.peak_tflops * 1e12, "peak given (--peak-tflops)"
    if torch.device(args.device).type == "cpu":  # "cpu:0" too
        return None
    name = torch.cuda.get_device_name(args.device)
    for part, tflops in GPU_BF16_PEAK_TFLOPS.items():
        if part in name:
            return tflops * 1e12, f"{name} bf16 dense peak (data sheet)"
    return None  # an unknown card: measure


def _sync(device: str | torch.device) -> None:
    """Wait for the GPU's queued work, so that a clock read after it measures the work."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _batch_work(config: TransformerConfig, batch: dict) -> tuple[int, int]:
    """(real target tokens, training-step matmul FLOPs) of a batch (see minitx.flops)."""
    src_lengths = (batch["src"] != 0).sum(-1).tolist()
    tgt_lengths = (batch["tgt_out"] != 0).sum(-1).tolist()
    return sum(tgt_lengths), training_flops(config, src_lengths, tgt_lengths)


def matmul_peak(
    config: TransformerConfig, precision: str, repeats: int, n: int = 2048, device: str = "cpu"
) -> float:
    """FLOP/s of plain matrix products of the model's own shapes, n rows each, weighted as a
    training step uses them: the best a step could do if it were matmuls only."""
    d, f, v = config.d_model, config.d_ff, config.tgt_vocab_size
    layers = config.n_encoder_layers + config.n_decoder_layers
    shapes = [  # (inner, outer, times per forward pass)
        (d, 3 * d, layers),  # fused q, k, v of self-attention
        (d, d, layers + 2 * config.n_decoder_layers),  # out projections, cross q
        (d, 2 * d, config.n_decoder_layers),  # cross k, v
        (d, f, layers),
        (f, d, layers),
        (d, v, 1),  # output layer
    ]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    flops = seconds = 0.0
    for inner, outer, times in shapes:
        a = torch.randn(n, inner, dtype=dtype, device=device)
        b = torch.randn(inner, outer, dtype=dtype, device=device)
        seconds += times * _time(lambda a=a, b=b: a @ b, repeats, device) / 1e3
        flops += times * 2 * n * inner * outer
    return flops / seconds


def _shape(batch: dict) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(source shape, target shape) of a batch: what a kernel is built for."""
    return tuple(batch["src"].shape), tuple(batch["tgt_in"].shape)


def _one_per_shape(batches: list[dict]) -> list[dict]:
    """One batch of each shape, in the order the shapes first appear."""
    return list({_shape(b): b for b in batches}.values())


def _training_step(
    loss_fn: Callable[[dict], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    batch: dict,
    autocast: torch.autocast | nullcontext,
) -> None:
    """One training step: the loss under `autocast`, backward, an optimizer step, gradients
    cleared."""
    with autocast:
        loss = loss_fn(batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _train_rates(
    contenders: dict,
    batches: list[dict],
    work: list[tuple[int, int]],
    precision: str,
    steps: int,
    device: str = "cpu",
) -> dict[str, tuple[float, float]]:
    """(target tokens/s, matmul FLOP/s) of each contender on `device` (where the contenders
    and batches are); every batch shape is run once first (bf16 builds kernels per shape),
    then the contenders take turns on the same batches."""
    bf16 = torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    autocast = bf16 if precision == "bf16" else nullcontext()
    optimizers = {
        name: torch.optim.AdamW(m.parameters(), **options)
        for name, (m, _, options) in contenders.items()
    }

    def step(name: str, batch: dict) -> None:
        _training_step(contenders[name][1], optimizers[name], batch, autocast)

    for batch in _one_per_shape(batches):
        for name in contenders:
            step(name, batch)
    seconds = dict.fromkeys(contenders, 0.0)
    for i in range(steps):
        batch = batches[i % len(batches)]
        for name in contenders:
            _sync(device)
            start = time.perf_counter()
            step(name, batch)
            _sync(device)
            seconds[name] += time.perf_counter() - start
    tokens = sum(work[i % len(batches)][0] for i in range(steps))
    flops = sum(work[i % len(batches)][1] for i in range(steps))
    return {name: (tokens / s, flops / s) for name, s in seconds.items()}


def bench_scores(args: argparse.Namespace) -> None:
    """One training step per score function, the rest of the model the benchmark's (SIZES)."""
    torch.manual_seed(0)
    batches = multi30k_like_batches(args.train_examples, args.max_tokens)[: args.score_batches]
    contenders: dict[str, tuple[nn.Module, Callable, dict]] = {}
    for score in ("scaled_dot", "dot", "additive", "bilinear"):
        module = bench_module(score=score)
        contenders[score] = (module, training_loss(module), {"lr": 1e-4})
    work = [_batch_work(contenders["scaled_dot"][0].model_config, b) for b in batches]
    print(
        f"\n== score functions, training step of the benchmark's model: {len(batches)} batches, "
        f"max_tokens {args.max_tokens}; scaled_dot runs the fused kernel, the others the "
        "explicit path (dot = scaled dot's explicit path without the scale) =="
    )
    for precision in args.precisions:
        rate = _train_rates(contenders, batches, work, precision, args.train_steps)
        base = rate["scaled_dot"][0]
        for name, (tokens_per_s, _) in rate.items():
            print(
                f"  {precision:5s} {name:11s} {tokens_per_s:8.0f} target tokens/s  "
                f"{1e3 * sum(w[0] for w in work) / len(work) / tokens_per_s:7.0f} ms/step  "
                f"{tokens_per_s / base:5.2f}x scaled_dot"
            )


def bench_padding(args: argparse.Namespace) -> None:
    """The default config's training step on the same sentences batched with each
    `data.pad_multiple`."""
    multiples = (8, 4, 1)
    batches = {
        m: multi30k_like_batches(args.train_examples, args.max_tokens, pad_multiple=m)
        for m in multiples
    }
    torch.manual_seed(0)
    module = bench_module(d_ff=512, dropout=0.0)  # the default config's model, no dropout masks
    print(
        f"\n== padding: the default's training step (d_ff 512, no dropout) on "
        f"{args.train_examples} sentence pairs, max_tokens {args.max_tokens}, lengths rounded "
        f"up to a multiple of {', '.join(map(str, multiples))}; first pass = every batch "
        "shape once =="
    )
    config = module.model_config
    tokens = {m: [_batch_work(config, b)[0] for b in own] for m, own in batches.items()}
    for precision in args.precisions:
        first_pass, rate = _padding_rates(module, batches, tokens, precision, args.train_steps)
        for m in multiples:
            n_shapes, seconds = first_pass[m]
            per_batch = statistics.mean(tokens[m])
            print(
                f"  {precision:5s} pad_multiple {m}: {len(batches[m]):4d} batches, "
                f"{per_batch:4.0f} target tokens/batch, {n_shapes:4d} shapes (first pass "
                f"{seconds:5.1f} s), {rate[m]:6.0f} target tokens/s, "
                f"{rate[m] / rate[multiples[0]]:4.2f}x pad_multiple {multiples[0]}"
            )


def _padding_rates(
    module: TranslationModule,
    batches: dict[int, list[dict]],
    tokens: dict[int, list[int]],
    precision: str,
    steps: int,
) -> tuple[dict[int, tuple[int, float]], dict[int, float]]:
    """Per pad multiple: (batch shapes, seconds of one step on each shape), then target
    tokens/s over `steps` steps of its own batches (`tokens`: each batch's target tokens),
    the multiples taking turns."""
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else nullcontext()
    loss_fn = training_loss(module)
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)
    first_pass = {}
    for m, own in batches.items():  # bf16 builds kernels per shape: time that once
        shapes = _one_per_shape(own)
        start = time.perf_counter()
        for batch in shapes:
            _training_step(loss_fn, optimizer, batch, autocast)
        first_pass[m] = (len(shapes), time.perf_counter() - start)
    seconds = dict.fromkeys(batches, 0.0)
    for i in range(steps):
        for m, own in batches.items():
            start = time.perf_counter()
            _training_step(loss_fn, optimizer, own[i % len(own)], autocast)
            seconds[m] += time.perf_counter() - start
    done = {m: sum(tokens[m][i % len(own)] for i in range(steps)) for m, own in batches.items()}
    return first_pass, {m: done[m] / seconds[m] for m in batches}


def bench_levers(args: argparse.Namespace) -> None:
    """The default config's training step against itself with one speed lever changed."""
    small_vocab = 4000
    torch.manual_seed(0)
    default = bench_module(d_ff=512)  # the default config's model: dropout 0.1, 8,000 pieces
    torch.manual_seed(0)
    sizes = {"src_vocab_size": small_vocab, "tgt_vocab_size": small_vocab}
    small = bench_module(d_ff=512, **sizes)
    batches = multi30k_like_batches(args.train_examples, args.max_tokens)
    small_batches = multi30k_like_batches(
        args.train_examples, args.max_tokens, vocab_size=small_vocab
    )
    packed_loss = training_loss(default)

    def changed(owner: object, name: str, value: object) -> Callable[[dict], torch.Tensor]:
        """The default's loss with `owner.name` = value for the step, then put back: e.g.
        `Transformer.pack_rows` (0: no packing) or `sdpa_backend` ("math": PyTorch's math
        kernel instead of the written-out attention under bf16 on a CPU)."""

        def loss(batch: dict) -> torch.Tensor:
            before = getattr(owner, name)
            setattr(owner, name, value)
            try:
                return packed_loss(batch)
            finally:
                setattr(owner, name, before)

        return loss

    small_loss = training_loss(small)
    position = {id(b): i for i, b in enumerate(batches)}

    def small_vocab_loss(batch: dict) -> torch.Tensor:  # the same sentences, ids below 4,000
        return small_loss(small_batches[position[id(batch)]])

    fused = {"lr": 1e-4, "fused": True}
    contenders: dict[str, tuple[nn.Module, Callable, dict]] = {
        "default": (default, packed_loss, fused),
        "feed-forward on padded rows": (default, changed(default.model, "pack_rows", 0), fused),
        "packed rows, exact count": (default, changed(default.model, "pack_rows", 1), fused),
        "AdamW's loop (fused false)": (default, packed_loss, {"lr": 1e-4}),
        "fused attention, math kernel": (default, changed(default, "sdpa_backend", "math"), fused),
        f"vocabulary {small_vocab}": (small, small_vocab_loss, fused),
    }
    work = [_batch_work(default.model_config, b) for b in batches]
    real = sum(int((b["src"] != 0).sum()) + int((b["tgt_in"] != 0).sum()) for b in batches)
    positions = sum(b["src"].numel() + b["tgt_in"].numel() for b in batches)
    print(
        f"\n== levers: the default config's training step, {len(batches)} batches, max_tokens "
        f"{args.max_tokens}, {1 - real / positions:.0%} of source and target positions padding =="
    )
    for precision in args.precisions:
        rate = _train_rates(contenders, batches, work, precision, args.train_steps)
        base = rate["default"][0]
        for name, (tokens_per_s, _) in rate.items():
            print(
                f"  {precision:5s} {name:28s} {tokens_per_s:8.0f} target tokens/s  "
                f"{tokens_per_s / base:5.2f}x default"
            )


# ------------------------------------------------------------------------------------ attention


def _time(fn: Callable[[], object], repeats: int, device: str = "cpu") -> float:
    """Median milliseconds of `fn` after two warm-up calls (its work on `device` done)."""
    fn()
    fn()
    samples = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def bench_attention(args: argparse.Namespace) -> None:
    tokens = ATTENTION_SHAPES["tokens"]
    print(f"\n== attention core: B*T = {tokens} tokens, 4 heads of 64; median ms per call ==")
    print(
        f"  {'dtype':5s} {'T':>4s} | {'explicit':>9s} {'fused':>9s} (forward) | "
        f"{'explicit':>9s} {'flash':>9s} {'math':>9s} (forward+backward)"
    )
    for dtype in (torch.bfloat16, torch.float32):
        for t in ATTENTION_SHAPES["lengths"]:
            fwd, both = _attention_times(dtype, t, tokens, args.repeats)
            name = "bf16" if dtype == torch.bfloat16 else "fp32"
            print(
                f"  {name:5s} {t:4d} | {fwd[0]:9.2f} {fwd[1]:9.2f}           | "
                f"{both[0]:9.2f} {both[1]:9.2f} {both[2]:9.2f}"
            )


def _attention_times(
    dtype: torch.dtype, t: int, tokens: int, repeats: int
) -> tuple[list[float], list[float]]:
    """([explicit, fused] forward ms, [explicit, flash, math] forward+backward ms) at length t,
    in a batch of about `tokens` tokens."""
    b = max(1, tokens // t)
    q, k, v = (torch.randn(b, 4, t, 64, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, 4, t, 64, dtype=dtype)
    ids = torch.ones(b, t, dtype=torch.long)
    ids[: b // 2, t - t // 4 :] = 0  # half the batch padded by a quarter
    mask = padding_mask(ids)

    def explicit() -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, mask)[0]

    def fused() -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)

    with torch.no_grad():
        fwd = [_time(explicit, repeats), _time(fused, repeats)]
    both = [_time(lambda: explicit().backward(grad), repeats)]
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        with sdpa_kernel(backend):
            both.append(_time(lambda: fused().backward(grad), repeats))
    return fwd, both


# ------------------------------------------------------------------------------------ data


def synthesize_corpus(args: argparse.Namespace, n_pairs: int, directory: Path) -> None:
    """`n_pairs` training pairs, each side two sentences of --data's training split joined
    (seeded), and --data's validation and test splits, as raw files in `directory`."""
    from minitx.data import load_parallel_corpus, resolve_data_source

    src, tgt = args.src_lang, args.tgt_lang
    corpus = load_parallel_corpus(resolve_data_source(args.data), src, tgt)
    directory.mkdir(parents=True, exist_ok=True)
    stems = {"train": "train", "validation": "val", "test": "test_2016_flickr"}
    for split in ("validation", "test"):
        pairs = corpus[split]["translation"]
        for lang in (src, tgt):
            text = "".join(pair[lang] + "\n" for pair in pairs)
            (directory / f"{stems[split]}.{lang}").write_text(text, encoding="utf-8")
    pairs = corpus["train"]["translation"]
    sides = [[pair[lang] for pair in pairs] for lang in (src, tgt)]
    rng = random.Random(0)
    with (
        open(directory / f"train.{src}", "w", encoding="utf-8") as src_file,
        open(directory / f"train.{tgt}", "w", encoding="utf-8") as tgt_file,
    ):
        for _ in range(n_pairs):
            i, j = rng.randrange(len(pairs)), rng.randrange(len(pairs))
            src_file.write(f"{sides[0][i]} {sides[0][j]}\n")
            tgt_file.write(f"{sides[1][i]} {sides[1][j]}\n")


def prepare_child(corpus: str, cache: str) -> None:
    """The measured process: prepare `corpus` with the default data settings and draw the
    first training batch; prints one line of JSON (times, peak RSS in MB)."""
    from minitx.data.datamodule import TranslationDataModule

    records = logging.handlers.BufferingHandler(capacity=1_000_000)  # keeps minitx's records
    logging.getLogger("minitx").addHandler(records)
    logging.getLogger("minitx").setLevel(logging.INFO)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.perf_counter()
    dm = TranslationDataModule(
        source=corpus, cache_dir=cache, max_positions=TransformerConfig().max_positions
    )
    dm.setup("fit")
    prepared = time.perf_counter()
    batch = next(iter(dm.train_dataloader()))
    first_batch = time.perf_counter()
    trained = [r for r in records.buffer if r.getMessage().startswith("Trained a ")]
    print(
        json.dumps(
            {
                "prepare_s": prepared - start,
                "first_batch_s": first_batch - prepared,
                "tokenizer_s": trained[0].args[3] if trained else 0.0,
                "tokenizer_sentences": trained[0].args[2] if trained else 0,
                "train_pairs": len(dm.dataset["train"]),
                "batch_shape": list(batch["src"].shape),
                "rss_imports_mb": rss_before,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "cpu_s": sum(os.times()[:2]),
            }
        )
    )


def _run_child(corpus: Path, cache: Path) -> dict:
    command = [sys.executable, __file__, "--data-child", str(corpus), str(cache)]
    env = {**os.environ, "MINITX_DATA_DIR": ""}  # the synthetic corpus, nothing else
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    said = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    if done.returncode == EXIT_USER_ERROR and said:  # the corpus, not a bug: its one line
        raise UsageError(
            f"data section, {corpus.name}: {said[-1].removeprefix('error: ')} (the default "
            "data settings need a larger --data-pairs)"
        )
    if done.returncode != 0:
        raise SystemExit(f"data section: the preparation process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def bench_data(args: argparse.Namespace) -> None:
    """Preparation time, pairs/s, peak RSS, cache size and time to the first batch of
    synthetic corpora of --data-pairs pairs, cold and from the cache."""
    print(
        f"\n== data preparation: N synthetic {args.src_lang}-{args.tgt_lang} training pairs (two "
        f"{args.data} sentences joined per side), the default data settings, a fresh process "
        "per run (its peak RSS, imports included); cold, then warm (from the cache) =="
    )
    print(
        "          N | cold: prepare s  pairs/s | tokenizer s (sentences) | rest s  pairs/s | "
        "peak RSS MB  cache MB  first batch s | warm: prepare s  peak RSS MB"
    )
    root = Path(args.data_workdir or tempfile.mkdtemp(prefix="minitx-bench-data-"))
    try:
        for n_pairs in args.data_pairs:
            corpus, cache = root / f"corpus-{n_pairs}", root / f"cache-{n_pairs}"
            shutil.rmtree(cache, ignore_errors=True)
            synthesize_corpus(args, n_pairs, corpus)
            cold = _run_child(corpus, cache)
            size = sum(f.stat().st_size for f in cache.iterdir()) / 1e6
            warm = _run_child(corpus, cache)
            rest = cold["prepare_s"] - cold["tokenizer_s"]  # reading, tokenizing, writing
            print(
                f"  {n_pairs:>9,d} | {cold['prepare_s']:15.1f} "
                f"{n_pairs / cold['prepare_s']:8.0f} | "
                f"{cold['tokenizer_s']:11.1f} ({cold['tokenizer_sentences']:>9,d}) | "
                f"{rest:6.1f} {n_pairs / rest:8.0f} | {cold['peak_rss_mb']:11.0f} {size:9.0f} "
                f"{cold['first_batch_s']:14.2f} | {warm['prepare_s']:15.1f} "
                f"{warm['peak_rss_mb']:12.0f}",
                flush=True,
            )
            if not args.data_workdir:
                shutil.rmtree(corpus)
                shutil.rmtree(cache)
    finally:
        if not args.data_workdir:
            shutil.rmtree(root, ignore_errors=True)
    print(f"  (peak RSS right after the imports: {cold['rss_imports_mb']:.0f} MB)")


def check_workdir(parser: argparse.ArgumentParser, flag: str, folder: Path) -> None:
    """A work folder the section can write in, made now: else one line naming `flag`, before
    any section runs (an OSError after the section's header named only the path)."""
    if folder.exists() and not folder.is_dir():
        parser.error(f"{flag} {folder}: not a folder; give a folder the benchmark can write in")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        writable = os.access(folder, os.W_OK | os.X_OK)
    except OSError as exc:
        parser.error(f"{flag} {folder}: {exc.strerror}; give a folder the benchmark can write in")
    if not writable:
        parser.error(f"{flag} {folder}: not writable; give a folder the benchmark can write in")


# ------------------------------------------------------------------------------------ budget

BUDGET_GROUPS = (  # profiler action -> share of the budget; the first matching rule wins
    ("checkpoint writes", lambda a: a == "save_checkpoint"),
    ("training steps", lambda a: a == "run_training_batch"),
    ("fetching batches", lambda a: a.endswith("train_dataloader_next") or ".batch_to_device" in a),
    ("attention maps", lambda a: a.startswith("[Callback]AttentionMapLogger.")),
    ("validation", lambda a: "validation" in a or a.endswith("val_next")),
)
"""How the budget section names what Lightning's SimpleProfiler records. Only actions that
do not nest in one another are summed: a training step (`run_training_batch`) holds the
forward, backward and optimizer hooks; a checkpoint write (`save_checkpoint`) holds the
`on_save_checkpoint` hooks, so the checkpoint callbacks' own hooks are left out below."""


def _profiled_actions(report: Path) -> dict[str, float]:
    """Total seconds by action from a SimpleProfiler report (its table's rows; `Total` is
    the profiler's whole run, setup included)."""
    totals = {}
    for line in report.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and cells[0] != "Action":
            totals[cells[0]] = float(cells[3])
    return totals


def budget_split(actions: dict[str, float]) -> dict[str, float]:
    """Seconds by share of the budget (`BUDGET_GROUPS`; the other callbacks' hooks count as
    logging), from the profiler's totals by action."""
    names = [name for name, _ in BUDGET_GROUPS] + ["logging (other callbacks)"]
    split = dict.fromkeys(names, 0.0)
    for action, seconds in actions.items():
        if action.startswith("[Callback]") and (
            "ModelCheckpoint" in action or action.endswith(".on_save_checkpoint")
        ):
            continue  # their time is the checkpoint writes, counted once as save_checkpoint
        name = next((name for name, rule in BUDGET_GROUPS if rule(action)), None)
        if name is None and action.startswith("[Callback]"):
            name = "logging (other callbacks)"
        if name is not None:
            split[name] += seconds
    return split


def bench_budget(args: argparse.Namespace) -> None:
    """Train --budget-config for --budget-time in a fresh process with Lightning's
    SimpleProfiler and print where the fit's time went."""
    print(
        f"\n== the budget: --config {args.budget_config} for {args.budget_time} (a fresh "
        "process, Lightning's SimpleProfiler; the test decoding after the fit not run) =="
    )
    # The run's folder is its working directory: paths given from here are made absolute.
    work = Path(args.budget_workdir or tempfile.mkdtemp(prefix="minitx-bench-budget-")).resolve()
    config = args.budget_config  # a file, or a packaged config's name
    config = str(Path(config).resolve()) if Path(config).is_file() else config
    env = dict(os.environ)
    if env.get(DATA_DIR_ENV):
        env[DATA_DIR_ENV] = os.path.abspath(env[DATA_DIR_ENV])
    try:
        work.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable, str(Path(__file__).with_name("train.py")),
            "--config", config,
            "--trainer.max_time", args.budget_time,
            "--trainer.enable_progress_bar", "false",
            "--trainer.profiler", "lightning.pytorch.profilers.SimpleProfiler",
            "--trainer.profiler.dirpath", str(work),
            "--trainer.profiler.filename", "profile",
            "--test", "false",
        ]  # fmt: skip
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
        if done.returncode != 0:  # its own error line last; 2: it refused a setting
            print(f"budget section: the training run failed:\n{done.stderr[-3000:]}", end="",
                  file=sys.stderr)  # fmt: skip
            raise SystemExit(done.returncode if done.returncode > 0 else 1)
        _print_budget(work)
    finally:
        if not args.budget_workdir:
            shutil.rmtree(work, ignore_errors=True)


def _print_budget(work: Path) -> None:
    """The budget section's figures, from the run in `work`: its metrics and its profile."""
    # the newest run's: a --budget-workdir used before holds earlier runs, found in any order
    metrics = max((work / "runs").rglob("metrics.csv"), key=lambda path: path.stat().st_mtime)
    rows = list(csv.DictReader(metrics.open(encoding="utf-8")))
    tokens = sum(float(r["train/tokens"]) for r in rows if r.get("train/tokens"))
    updates = max(int(r["step"]) for r in rows if r.get("step")) + 1
    bleu = [float(r["val/bleu"]) for r in rows if r.get("val/bleu")]
    actions = _profiled_actions(work / "fit-profile.txt")
    fit_s = actions["Total"]  # the profiler's clock: from setup to the end of the fit
    split = budget_split(actions)
    rest = fit_s - sum(split.values())
    validated = f"{len(bleu)} validations, last val BLEU {bleu[-1]:.2f}" if bleu else "no BLEU"
    print(
        f"  {updates:,d} updates, {tokens:,.0f} target tokens in {fit_s:.0f} s of fit; {validated}"
    )
    print("  share of the fit            seconds      %")
    for name, seconds in [*split.items(), ("the rest (setup, the loop)", rest)]:
        print(f"  {name:<28} {seconds:8.1f} {100 * seconds / fit_s:6.1f}")
    step_rate, fit_rate = tokens / split["training steps"], tokens / fit_s
    print(
        f"  target tokens/s: {fit_rate:,.0f} over the whole fit, {step_rate:,.0f} in the "
        f"training steps alone; ratio {fit_rate / step_rate:.2f} (the share that trains)"
    )


# ------------------------------------------------------------------------------------ decode


def _test_split(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The (source, reference) pairs of the first --decode-sentences lines of the test split."""
    from minitx.evaluation import load_split

    split = load_split(args.data, "test", args.src_lang, args.tgt_lang, args.decode_sentences)
    return split.sources, split.references


def _decode_inputs(args: argparse.Namespace) -> tuple[Transformer, list[torch.Tensor], str]:
    if args.checkpoint:
        from minitx.translator import Translator, encode_sources
        from minitx.vocab import frame_source, pad

        translator = Translator.from_pretrained(args.checkpoint)
        sources, _ = _test_split(args)
        # as the Translator reads them: cut to the model's positions, eos added, right-padded
        ids = encode_sources(translator.tokenizer, sources, translator.model.config.max_positions)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        batches = [
            pad([frame_source(ids[i]) for i in order[j : j + args.decode_batch]])
            for j in range(0, len(order), args.decode_batch)
        ]
        return translator.model, batches, f"{len(sources)} test sentences, trained model"
    torch.manual_seed(0)
    cfg = {k: v for k, v in SIZES.items() if k != "vocab_size"}
    model = Transformer(
        TransformerConfig(
            src_vocab_size=SIZES["vocab_size"], tgt_vocab_size=SIZES["vocab_size"], **cfg
        )
    ).eval()
    rng = np.random.default_rng(0)
    lengths = np.sort(
        np.clip(np.rint(rng.normal(15.2, 5.5, args.decode_sentences)), 3, 50).astype(int)
    )
    batches = []
    for j in range(0, len(lengths), args.decode_batch):
        chunk = lengths[j : j + args.decode_batch]
        src = torch.zeros(len(chunk), int(chunk.max()) + 1, dtype=torch.long)
        for row, n in enumerate(chunk):
            src[row, :n] = torch.from_numpy(rng.integers(4, SIZES["vocab_size"], n))
            src[row, n] = 3
        batches.append(src)
    return (
        model,
        batches,
        f"{args.decode_sentences} random sentences, untrained model (decodes to the length cap)",
    )


def bench_decode(args: argparse.Namespace) -> None:
    model, batches, what = _decode_inputs(args)
    model = model.to(args.device)
    batches = [b.to(args.device) for b in batches]
    n = sum(len(b) for b in batches)
    print(
        f"\n== decoding: {what}, batches of {args.decode_batch}, on {args.device}; sentences/s =="
    )
    for precision in args.precisions:
        # bf16 as minitx-translate --bf16 decodes: a bf16 copy of the model under autocast
        decoder = model if precision == "fp32" else copy.deepcopy(model).to(torch.bfloat16)
        autocast = torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16)
        with torch.inference_mode(), autocast if precision == "bf16" else nullcontext():
            for name, beam in {"greedy": 1, f"beam {args.beam}": args.beam}.items():
                decode = greedy_decode if beam == 1 else beam_search
                rate = {}
                for cache in (True, False):
                    decoding = DecodingConfig(beam_size=beam, use_cache=cache)
                    _sync(args.device)
                    start = time.perf_counter()
                    for src in batches:
                        decode(decoder, src, decoding)
                    _sync(args.device)
                    rate[cache] = n / (time.perf_counter() - start)
                print(
                    f"  {precision:5s} {name:8s} with KV cache {rate[True]:7.1f} | without "
                    f"{rate[False]:7.1f} | speed-up {rate[True] / rate[False]:.2f}x"
                )


# ------------------------------------------------------------------------------------ ct2


def bench_ct2(args: argparse.Namespace) -> None:
    from minitx.evaluation import score
    from minitx.extras.ctranslate2.export import Ct2Translator, export_model
    from minitx.translator import Translator

    translator = Translator.from_pretrained(args.checkpoint)
    sources, references = _test_split(args)
    torch.set_num_threads(args.ct2_threads)  # the same number of threads for both runtimes
    print(
        f"\n== CTranslate2 vs minitx: {len(sources)} test sentences, batches of "
        f"{args.decode_batch}, {args.ct2_threads} threads each; sentences/s, BLEU, "
        "translations identical to minitx's (fp32) =="
    )
    with tempfile.TemporaryDirectory() as tmp:
        contenders: dict[str, Callable[[list[str], int], list[str]]] = {
            "minitx": lambda sents, beam: translator.translate(
                sents, beam_size=beam, batch_size=args.decode_batch
            )
        }
        if cpu_has_fast_bf16():  # the opt-in --bf16 of minitx-translate, where it is native
            in_bf16 = Translator.from_pretrained(args.checkpoint, bf16=True)
            contenders["minitx bf16"] = lambda sents, beam: in_bf16.translate(
                sents, beam_size=beam, batch_size=args.decode_batch
            )
        for quantization in ("float32", "int8"):
            directory = export_model(
                translator.model, translator.tokenizer, f"{tmp}/{quantization}",
                quantization=quantization,
            )  # fmt: skip
            ct2 = Ct2Translator(directory, intra_threads=args.ct2_threads)
            contenders[f"ct2 {quantization}"] = lambda sents, beam, ct2=ct2: ct2.translate(
                sents, beam, batch_size=args.decode_batch
            )
        # Each contender's runs (greedy, then beam) come before the next contender's first:
        # CTranslate2's thread pool, once started, slowed the torch runs after it in the same
        # process (beam 5: 83 against 115 sentences/s alone, Xeon AMX, 2026-11-26), while
        # CTranslate2 runs at the same pace after torch as alone.
        decodings = {1: "greedy", args.beam: f"beam {args.beam}"}
        rows: dict[int, list[str]] = {beam: [] for beam in decodings}
        outputs: dict[tuple[str, int], list[str]] = {}
        for name, translate in contenders.items():
            for beam, label in decodings.items():
                translate(sources[:16], beam)  # warm-up, not timed
                start = time.perf_counter()
                outputs[name, beam] = translate(sources, beam)
                rate = len(sources) / (time.perf_counter() - start)
                bleu = score(outputs[name, beam], references).bleu
                same = sum(
                    a == b
                    for a, b in zip(outputs[name, beam], outputs["minitx", beam], strict=True)
                ) / len(sources)
                rows[beam].append(
                    f"  {label:8s} {name:12s} {rate:8.1f} sentences/s | BLEU {bleu:6.2f} | "
                    f"identical to minitx {100 * same:5.1f}%"
                )
        print("\n".join(row for beam in decodings for row in rows[beam]))


SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "train": bench_train,
    "attention": bench_attention,
    "decode": bench_decode,
    "scores": bench_scores,
    "padding": bench_padding,
    "levers": bench_levers,
    "ct2": bench_ct2,
    "data": bench_data,
    "budget": bench_budget,
}
"""The --sections choices, in the order of the module docstring."""


def mkl_code_path() -> str | None:
    """The code path MKL's matrix products take on this CPU, as MKL's verbose mode names it
    ("Intel(R) Advanced Vector Extensions 2 (Intel(R) AVX2) enabled", or "Intel(R)
    Architecture" for its generic kernels). None where torch has no MKL, where MKL refuses
    verbose mode, where the user asked for MKL_VERBOSE (whose setting this would end), or
    where MKL says nothing: it names its code path once per process, at its first verbose call.

    MKL chooses by CPU vendor: on an AMD CPU it runs its generic kernels, about half the rate
    of its AVX2 ones for 64 to 320 rows (docs/results.md, "AMD CPUs: MKL's generic kernels").
    """
    if not torch.backends.mkl.is_available() or os.environ.get("MKL_VERBOSE"):
        return None
    sys.stdout.flush()  # what Python holds goes out before the descriptor is swapped
    with tempfile.TemporaryFile() as caught:
        saved = os.dup(1)  # MKL writes to the process's standard output, below Python
        try:
            os.dup2(caught.fileno(), 1)
            with torch.backends.mkl.verbose(torch.backends.mkl.VERBOSE_ON):
                torch.mm(torch.ones(64, 64), torch.ones(64, 64))
        except (AssertionError, RuntimeError):  # MKL refused verbose mode
            return None
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        caught.seek(0)
        text = caught.read().decode(errors="replace")
    return parse_mkl_code_path(text)


def parse_mkl_code_path(verbose: str) -> str | None:
    """The processor branch of MKL's verbose header ("... for Intel(R) 64 architecture BRANCH
    processors, Lnx ..."; on AMX CPUs "... architecture BRANCH, Lnx ...", without the word),
    or None when `verbose` has none."""
    for line in verbose.splitlines():
        head, found, tail = line.partition(" architecture ")
        branch = re.match(r"(.+?)(?: processors)?, (?:Lnx|Win|Mac)\b", tail)
        if found and head.startswith("MKL_VERBOSE") and branch:
            return branch[1]
    return None


def clock_time(text: str) -> str:
    """argparse ``type=`` of --budget-time: a ``trainer.max_time`` above zero, read as the
    training reads it (`duration`), here before any section runs."""
    try:
        seconds = duration(text).total_seconds()
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return text


PRECISION_SECTIONS = ("train", "decode", "scores", "padding", "levers")
"""The sections that measure each of --precisions."""


def main() -> None:
    parser = OneLineArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sections",
        nargs="+",
        default=["train", "attention", "decode"],
        choices=SECTIONS,
        help="sections to run (default: train attention decode; scores, padding, levers, ct2, "
        "data and budget are opt-in)",
    )
    parser.add_argument(
        "--device",
        default="cpu",
        help="where the train and decode sections run: cpu, cuda or cuda:N (default: cpu)",
    )
    parser.add_argument(
        "--precisions",
        nargs="+",
        choices=["fp32", "bf16"],
        help=f"the precisions of the {', '.join(PRECISION_SECTIONS)} sections (default: fp32, "
        "and bf16 on a GPU or where the CPU has bf16 instructions)",
    )
    parser.add_argument(
        "--peak-tflops",
        type=positive_float,
        help="train section: the FLOP/s (in TFLOP/s) that MFU is measured against (default: "
        "the card's bf16 peak on a known GPU, else a matmul peak measured here)",
    )
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=2048,
        help="token budget per training batch (--config long: 2048; the default config: 1024)",
    )
    parser.add_argument(
        "--train-examples",
        type=positive_int,
        default=3000,
        help="synthetic sentence pairs to batch",
    )
    parser.add_argument(
        "--train-steps",
        type=positive_int,
        default=20,
        help="timed steps per contender and precision",
    )
    parser.add_argument(
        "--score-batches",
        type=positive_int,
        default=8,
        help="scores section: distinct batches, each run once per contender before timing",
    )
    parser.add_argument(
        "--repeats", type=positive_int, default=5, help="timed calls per attention measurement"
    )
    parser.add_argument(
        "--checkpoint",
        help="decode with this trained model on the test split (else: untrained model)",
    )
    parser.add_argument(
        "--data",
        default="bentrevett/multi30k",
        help="corpus for --checkpoint and the data section's sentences (MINITX_DATA_DIR applies)",
    )
    parser.add_argument("--src-lang", default="de")
    parser.add_argument("--tgt-lang", default="en")
    parser.add_argument("--decode-sentences", type=positive_int, default=128)
    parser.add_argument("--decode-batch", type=positive_int, default=DEFAULT_BATCH_SIZE)
    parser.add_argument("--beam", type=positive_int, default=5)
    parser.add_argument(
        "--ct2-threads",
        type=positive_int,
        default=2,
        help="ct2 section: threads of both runtimes (torch, CTranslate2 intra_threads)",
    )
    parser.add_argument(
        "--data-pairs",
        type=positive_int,
        nargs="+",
        default=[30_000, 300_000, 1_000_000],
        help="data section: training pairs of each synthetic corpus",
    )
    parser.add_argument(
        "--data-workdir",
        help="data section: keep the corpora and caches here (default: a temporary directory)",
    )
    parser.add_argument(
        "--budget-config",
        default="multi30k_de_en",
        help="budget section: the config trained (default: the default config)",
    )
    parser.add_argument(
        "--budget-time",
        type=clock_time,
        default="00:00:20:00",
        help="budget section: its --trainer.max_time, DD:HH:MM:SS (default: the default's 20 min)",
    )
    parser.add_argument(
        "--budget-workdir",
        help="budget section: keep the run (checkpoints, logs, profile) here (default: a "
        "temporary directory, removed)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a tiny model instead of the benchmark's, data corpora of at most "
        f"{SMOKE_DATA_PAIRS:,} pairs and small attention batches: checks that the sections "
        "run (the figures mean nothing)",
    )
    parser.add_argument("--data-child", nargs=2, help=argparse.SUPPRESS)  # the measured process
    args = parser.parse_args()
    if args.data_child:
        prepare_child(*args.data_child)
        return
    if args.precisions and not set(args.sections) & set(PRECISION_SECTIONS):
        parser.error(  # else measured without a word in the precision each section uses
            f"--precisions applies to the {', '.join(PRECISION_SECTIONS)} sections, none of "
            f"which is in --sections {' '.join(args.sections)}"
        )
    if "ct2" in args.sections and not args.checkpoint:
        parser.error("--sections ct2 needs --checkpoint (a trained model to export)")
    check_device(parser, args)  # a device torch does not know, or CUDA on a machine without
    on_gpu = torch.device(args.device).type == "cuda"
    if on_gpu and set(args.sections) - {"train", "decode"}:
        parser.error(f"--device {args.device!r} runs the train and decode sections only")
    for flag, folder, section in (
        ("--data-workdir", args.data_workdir, "data"),
        ("--budget-workdir", args.budget_workdir, "budget"),
    ):
        if folder is not None and section in args.sections:
            check_workdir(parser, flag, Path(folder))
    if args.smoke:
        SIZES.update(SMOKE_SIZES)
        ATTENTION_SHAPES.update(SMOKE_ATTENTION_SHAPES)
        args.data_pairs = sorted({min(n, SMOKE_DATA_PAIRS) for n in args.data_pairs})
    if args.precisions is None:
        args.precisions = ["fp32", "bf16"] if on_gpu or cpu_has_fast_bf16() else ["fp32"]
    kept = keep_freed_memory()  # as every minitx command does: its figures are theirs
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU capability "
        f"{torch.backends.cpu.get_cpu_capability()}, native bf16: {cpu_has_fast_bf16()}, "
        f"freed memory kept: {kept}"
    )
    if not on_gpu and (path := mkl_code_path()) is not None:
        generic = "Architecture" in path  # MKL's kernels for a CPU it does not know as Intel's
        hint = " (MKL's generic kernels: see docs/guides/speed.md, AMD CPUs)" if generic else ""
        print(f"MKL code path: {path}{hint}")
    if on_gpu:
        print(f"device {args.device}: {torch.cuda.get_device_name(args.device)}")
    start = time.perf_counter()
    for section in args.sections:
        SECTIONS[section](args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a user error (no data, a bad checkpoint) is one line, status 2
        status = report_user_error(exc)
        if status is None:
            raise
        sys.exit(status)
