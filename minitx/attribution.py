"""Gradient attributions: how much each source piece contributes to each predicted piece.

Attention weights say where a head looked, not whether the prediction *depends* on it (Jain &
Wallace, 2019; Wiegreffe & Pinter, 2019); the usual comparison is a gradient attribution over
the input embeddings. For one (source, translation) pair read teacher-forced, each method
gives a (T, S) matrix on the axes of cross-attention (`minitx.maps.AttentionMaps.axes`):
entry (t, s) is the contribution of source piece s (eos included) to f_t, the
log-probability of the piece predicted at position t.

Methods (`METHODS`), each first a (T, S, D) attribution over the source embeddings e (the
embedding rows, before scaling and positions):

- "saliency": the gradient df_t/de (Simonyan et al., 2014).
- "ixg", input x gradient: e * df_t/de (Shrikumar et al., 2017).
- "ig", integrated gradients (Sundararajan et al., 2017): (e - e0) times the mean gradient
  on the straight path from e0 = 0 (padding's embedding; positions are still added) to e,
  by Gauss-Legendre quadrature. Its entries sum to f_t(e) - f_t(e0) up
  to the quadrature error (`Attributions.ig_delta`).

Captum computes them; this module adapts the model to it (`_log_prob_function`: the source
embeddings in, the T log-probabilities out). A piece's score is the L2 norm of its D values
(inseq's default aggregation), each row divided by its sum, like attention rows. Only the
source side is attributed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from minitx.errors import ConfigError, check_whole_number
from minitx.teacher_forcing import frame_pairs, pair_ids, target_log_probs, teacher_forced

if TYPE_CHECKING:
    from minitx.model import Transformer
    from minitx.tokenizer import Tokenizer


METHODS: tuple[str, ...] = ("saliency", "ixg", "ig")
"""Attribution methods: gradient norm, input x gradient, integrated gradients."""

DEFAULT_IG_STEPS = 16
"""Gauss-Legendre nodes of integrated gradients. The completeness gap (`Attributions.ig_delta`)
shrinks fast with more nodes along a smooth path; ReLU's kinks slow that down: on the default
model after 300 updates, 16 nodes left 0.02 nats per row on average (0.16 at most, against
log-probability changes of several nats)."""

MAX_IG_STEPS = 1000
"""The most Gauss-Legendre nodes: the nodes' own computation (numpy's `leggauss`) takes memory
growing with their square, 75 GiB for 100,000 (Captum's default is 50)."""


def check_ig_steps(ig_steps: int) -> None:
    """Refuse a node count for integrated gradients that is not a whole number in
    1..`MAX_IG_STEPS`.

    Raises:
        ConfigError: naming ``ig_steps`` and the value.
    """
    check_whole_number("ig_steps", ig_steps, 1)
    if ig_steps > MAX_IG_STEPS:
        raise ConfigError(f"ig_steps must be at most {MAX_IG_STEPS}, got {ig_steps}")


def check_methods(methods: Sequence[str]) -> tuple[str, ...]:
    """The methods as a tuple, each once, in the order given.

    Raises:
        TypeError: one string (its letters would be the methods).
        ConfigError: an unknown method, or none.
    """
    if isinstance(methods, str):
        raise TypeError(f"give a list of methods, e.g. [{methods!r}], not one string")
    chosen = tuple(dict.fromkeys(methods))
    unknown = [m for m in chosen if m not in METHODS]
    if unknown or not chosen:
        raise ConfigError(
            f"unknown attribution method(s) {unknown or '(none given)'}; choose from "
            f"{', '.join(METHODS)}"
        )
    return chosen


@dataclass
class Attributions:
    """Gradient attributions of one translation (see the module docstring).

    Attributes:
        src_tokens: source pieces, length S (eos included): the columns.
        tgt_tokens: decoder input pieces, length T (bos first).
        predicted_tokens: the piece each decoder position predicts, length T: the rows.
        scores: method -> (T, S) attributions, rows non-negative and summing to 1.
        log_probs: (T,) the attributed function: log-probability of each predicted piece.
        ig_delta: (T,) completeness gap of integrated gradients (sum of its signed
            attributions minus f_t(e) - f_t(0)), when "ig" was computed.
    """

    src_tokens: list[str]
    tgt_tokens: list[str]
    predicted_tokens: list[str]
    scores: dict[str, Tensor]
    log_probs: Tensor
    ig_delta: Tensor | None = None

    def __post_init__(self) -> None:
        shape = (len(self.predicted_tokens), len(self.src_tokens))
        for method, matrix in self.scores.items():
            if tuple(matrix.shape) != shape:
                raise ValueError(
                    f"Attributions: {method} has shape {tuple(matrix.shape)}, expected "
                    f"(T={shape[0]}, S={shape[1]}) for the tokens"
                )

    def axes(self) -> tuple[list[str], list[str]]:
        """(row labels, column labels): the predicted pieces and the source pieces, as
        `AttentionMaps.axes("cross")`."""
        return self.predicted_tokens, self.src_tokens

    def without_last_position(self) -> Attributions:
        """These attributions less the last row, the one of eos: for a translation that
        decoding cut at its length cap (as `AttentionMaps.without_last_position`). Each row
        is the gradient of its own piece's log-probability, so the others are unchanged."""
        if len(self.tgt_tokens) < 2:
            raise ValueError("Attributions: one row, none to keep without it")
        return replace(
            self,
            tgt_tokens=self.tgt_tokens[:-1],
            predicted_tokens=self.predicted_tokens[:-1],
            scores={method: matrix[:-1] for method, matrix in self.scores.items()},
            log_probs=self.log_probs[:-1],
            ig_delta=None if self.ig_delta is None else self.ig_delta[:-1],
        )


# ------------------------------------------------------------------------ the gradients


def _log_prob_function(
    model: Transformer, src: Tensor, tgt_in: Tensor, targets: Tensor
) -> Callable[[Tensor], Tensor]:
    """f(e): (N, S, D) source embeddings -> (N, T) log p(targets[t] | source, tgt_in[:t+1]).

    The embeddings replace the output of the source embedding lookup (a forward hook that
    recognises the source ids tensor, so a matrix shared with the target side is unaffected);
    the model's scaling, positions and every layer then run as usual: the teacher-forced
    pass of `minitx.teacher_forcing`.
    """

    def f(embeddings: Tensor) -> Tensor:
        n = embeddings.size(0)
        ids = src.expand(n, -1)  # (N, S): the padding mask and the hook's key

        def swap(module: torch.nn.Module, args: tuple, output: Tensor) -> Tensor | None:
            return embeddings if args[0] is ids else None

        handle = model.src_embed.register_forward_hook(swap)
        try:
            logits = teacher_forced(model, ids, tgt_in.expand(n, -1)).logits  # (N, T, V)
        finally:
            handle.remove()
        return target_log_probs(logits, targets.expand(n, -1))  # (N, T)

    return f


@torch.inference_mode(False)  # gradients, also when the caller runs in inference mode
def gradient_attributions(
    model: Transformer,
    src: Tensor,
    tgt_in: Tensor,
    targets: Tensor,
    methods: Sequence[str] = METHODS,
    *,
    ig_steps: int = DEFAULT_IG_STEPS,
) -> tuple[dict[str, Tensor], Tensor, Tensor | None]:
    """Attributions of every method over every embedding dimension, before aggregation.

    Args:
        model: the Transformer, in eval mode (dropout would make the gradients random).
        src: (S,) source ids, eos last.
        tgt_in: (T,) decoder inputs, bos first.
        targets: (T,) the piece each position predicts (the attributed log-probabilities).

    Returns:
        method -> (T, S, D) signed attributions; the (T,) log-probabilities f(e); and, for
        "ig", the (T,) completeness gap (sum of its attributions - (f(e) - f(0))), else None.

    Raises:
        ConfigError: an unknown method, or `ig_steps` < 1 or > `MAX_IG_STEPS`.
    """
    # Imported here, not with the module: every translate and evaluate imports this module
    # through the translator, and Captum's import alone takes about 0.6 s.
    from captum.attr import InputXGradient, IntegratedGradients, Saliency

    methods = check_methods(methods)
    check_ig_steps(ig_steps)
    n_rows = targets.size(0)
    f = _log_prob_function(model, src[None], tgt_in[None], targets[None])
    with torch.no_grad():
        e = model.src_embed(src[None])  # (1, S, D)
        log_probs = f(e)[0]  # (T,)
    # One copy of e per predicted piece: row t is attributed to its own f_t (Captum's
    # per-example target), so every row comes out of one batched pass.
    inputs = e.repeat(n_rows, 1, 1).requires_grad_()  # (T, S, D)
    rows = list(range(n_rows))  # the target of each input row
    out: dict[str, Tensor] = {}
    delta = None
    with torch.enable_grad():  # also inside a caller's no_grad
        if "saliency" in methods:
            out["saliency"] = Saliency(f).attribute(inputs, target=rows, abs=False)
        if "ixg" in methods:
            out["ixg"] = InputXGradient(f).attribute(inputs, target=rows)
        if "ig" in methods:
            out["ig"], delta = IntegratedGradients(f).attribute(
                inputs,
                target=rows,
                n_steps=ig_steps,
                method="gausslegendre",
                internal_batch_size=n_rows,  # one path node of every row at a time
                return_convergence_delta=True,
            )
    return {m: out[m].detach() for m in methods}, log_probs, delta


def aggregate(attributions: Tensor) -> Tensor:
    """(T, S, D) attributions -> (T, S) scores: the L2 norm over D, each row divided by its
    sum (a row of zeros stays zeros)."""
    norms = attributions.float().norm(dim=-1)  # (T, S)
    total = norms.sum(-1, keepdim=True)
    return torch.where(total > 0, norms / total.clamp_min(1e-30), torch.zeros_like(norms))


@torch.inference_mode(False)
def attribute(
    model: Transformer,
    src_ids: Sequence[int],
    tgt_ids: Sequence[int],
    methods: Sequence[str] = METHODS,
    *,
    ig_steps: int = DEFAULT_IG_STEPS,
) -> tuple[dict[str, Tensor], Tensor, Tensor | None]:
    """Row-normalised (T, S) attributions of a pair given as ids (`gradient_attributions`,
    with `model` in eval mode for the call, then back as it was).

    Args:
        src_ids: source ids without eos (eos is appended: S = len + 1).
        tgt_ids: target ids without bos or eos: the decoder reads bos + tgt_ids and predicts
            tgt_ids + eos (T = len + 1).

    Returns:
        method -> (T, S) scores (rows sum to 1), on the CPU in float32; the (T,)
        log-probabilities; the (T,) integrated-gradients completeness gap or None.
    """
    device = next(model.parameters()).device
    framed = frame_pairs([(src_ids, tgt_ids)], device)  # (1, S), (1, T), (1, T)
    src, tgt_in, targets = (rows[0] for rows in framed)  # (S,), (T,), (T,)
    was_training = model.training
    model.eval()
    try:
        raw, log_probs, delta = gradient_attributions(
            model, src, tgt_in, targets, methods, ig_steps=ig_steps
        )
    finally:
        model.train(was_training)
    scores = {m: aggregate(a).cpu() for m, a in raw.items()}
    return scores, log_probs.float().cpu(), None if delta is None else delta.float().cpu()


def teacher_forced_attributions(
    model: Transformer,
    tokenizer: Tokenizer,
    source: str,
    target: str | Sequence[int],
    methods: Sequence[str] = METHODS,
    *,
    ig_steps: int = DEFAULT_IG_STEPS,
) -> Attributions:
    """The attributions of `model` reading `source` with `target` (text, or ids without bos
    or eos) as decoder input: the counterpart of `minitx.maps.teacher_forced_maps`, on the
    same pieces and axes, and with the same cut of a side longer than the model's positions.

    Raises:
        EmptyInputError: when the source has no piece (a `ValueError`).
        ConfigError: an unknown method.
    """
    src_ids, tgt_ids = pair_ids(model, tokenizer, source, target, "attributions")
    scores, log_probs, delta = attribute(model, src_ids, tgt_ids, methods, ig_steps=ig_steps)
    src, tgt_in, labels = frame_pairs([(src_ids, tgt_ids)])  # (1, S), (1, T), (1, T)
    return Attributions(
        src_tokens=tokenizer.id_to_piece(src[0].tolist()),
        tgt_tokens=tokenizer.id_to_piece(tgt_in[0].tolist()),
        predicted_tokens=tokenizer.id_to_piece(labels[0].tolist()),
        scores=scores,
        log_probs=log_probs,
        ig_delta=delta,
    )


# ------------------------------------------------------------------------ agreement


def average_ranks(x: Tensor) -> Tensor:
    """Ranks (1-based) of the entries of each row of (..., K), ties sharing their mean rank."""
    below = (x.unsqueeze(-2) < x.unsqueeze(-1)).sum(-1)  # (..., K): entries smaller than x_i
    equal = (x.unsqueeze(-2) == x.unsqueeze(-1)).sum(-1)  # x_i itself included
    return below.double() + (equal.double() + 1) / 2


def rank_correlation(a: Tensor, b: Tensor) -> Tensor:
    """Spearman's rank correlation between matching rows of a and b (..., K).

    Returns:
        (...,) float64: the Pearson correlation of the rows' average ranks; NaN for a row
        with fewer than two entries or with all entries equal in a or in b.
    """
    if a.shape != b.shape:
        raise ValueError(f"rank_correlation: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    ra, rb = average_ranks(a), average_ranks(b)
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    denominator = (ra.pow(2).sum(-1) * rb.pow(2).sum(-1)).sqrt()
    return torch.where(
        denominator > 0, (ra * rb).sum(-1) / denominator.clamp_min(1e-300), torch.nan
    )


def top1_agreement(a: Tensor, b: Tensor) -> Tensor:
    """Whether matching rows of a and b (..., K) have their largest entry at the same key
    (the first of equal largest entries): (...,) bool."""
    if a.shape != b.shape:
        raise ValueError(f"top1_agreement: shapes {tuple(a.shape)} and {tuple(b.shape)} differ")
    return a.argmax(-1) == b.argmax(-1)


def comparable(matrix: Tensor) -> Tensor:
    """A (T, S) cross-attention or attribution matrix without the column of the source eos
    and the row that predicts the target eos (the last of each), as alignments leave them
    out: what `agreement` compares."""
    return matrix[..., :-1, :-1]


def agreement(a: Tensor, b: Tensor) -> dict[str, float]:
    """How two (T, S) matrices of one sentence agree, over `comparable` rows and columns.

    Returns:
        "spearman": mean rank correlation over the rows where it is defined (NaN when none
        is); "top1": the fraction of rows whose largest entry is at the same source piece;
        "rows": the rows compared.
    """
    a, b = comparable(a), comparable(b)
    rows = a.size(-2) if a.size(-1) > 0 else 0
    if rows == 0:
        return {"spearman": float("nan"), "top1": float("nan"), "rows": 0}
    rho = rank_correlation(a, b)
    defined = rho[~torch.isnan(rho)]
    return {
        "spearman": float(defined.mean()) if defined.numel() else float("nan"),
        "top1": float(top1_agreement(a, b).double().mean()),
        "rows": rows,
    }
