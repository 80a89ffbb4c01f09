"""Export a minitx Transformer to CTranslate2 and translate with the exported model.

`export_ctranslate2(checkpoint, out_dir)` writes a CTranslate2 model directory built with
CTranslate2's own specification API (`ctranslate2.specs.TransformerSpec`): `model.bin`,
`config.json`, `shared_vocabulary.json`, plus the sentencepiece model the checkpoint carries
(`sentencepiece.model`) and `minitx.json` (the model config and language pair). The mapping:

- embeddings: source / target matrices, scaled by sqrt(d_model) when `scale_embeddings`;
  the position table (sinusoidal or learned, zeros for `none`) is stored as is, starting at
  position 0, as minitx adds it; `rotary` becomes CTranslate2's rotary embedding of every
  self-attention (whole head, halves rotated, base 10000; cross-attention unrotated);
- each attention: its LayerNorm, q/k/v projections fused as CTranslate2 expects (q, k, v for
  self-attention; q, then k and v for cross-attention), the output projection; the `dot`
  score sets `queries_scale = 1` (no 1/sqrt(Dh)), `bilinear` folds its matrix W into the
  query projection (q W per head) with `queries_scale = 1`;
- pre-LN (`norm_first`) or post-LN, with the final LayerNorm of each stack for pre-LN;
  LayerNorm epsilon 1e-5 (PyTorch's);
- the output projection (tied or not, no bias); CTranslate2 appends `</s>` to the source
  (`add_source_eos`) and starts the target with `<s>`, as minitx does.

The vocabulary is the sentencepiece pieces in id order, so ids match exactly (pad `<pad>` 0,
`<unk>` 1, `<s>` 2, `</s>` 3). What CTranslate2 cannot express is refused first
(`check_exportable`).

`ctranslate2` is an optional dependency (`pip install 'minitx[export]'`), imported only here,
inside the functions that need it. No Lightning.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from minitx import release
from minitx.decoding import DEFAULT_BATCH_SIZE, DecodingConfig
from minitx.errors import ConfigError, OutputError, check_whole_number, require_extra
from minitx.model import Transformer, TransformerConfig
from minitx.outputs import check_output_dir, written_whole
from minitx.tokenizer import Tokenizer
from minitx.translator import encode_sources
from minitx.vocab import BOS_PIECE, PAD_PIECE

if TYPE_CHECKING:
    import ctranslate2


SENTENCEPIECE_FILE = "sentencepiece.model"
"""The tokenizer in an exported directory (a plain sentencepiece model)."""
INFO_FILE = "minitx.json"
"""The minitx model config and language pair in an exported directory."""
OUTPUT_KIND = "ctranslate2"
"""What an exported directory's `minitx.outputs.MARKER` says it holds."""
_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH"}
"""minitx activation -> `ctranslate2.specs.common_spec.Activation` member (GELU is erf-exact)."""
_POSITIONS = ("sinusoidal", "learned", "none", "rotary")
"""Sinusoidal, learned and none are a table added to the embeddings (CTranslate2 adds a stored
table the same way); rotary is CTranslate2's sliced (not interleaved) rotary embedding of
every self-attention, base 10000, as minitx's."""
_QUERIES_SCALE = {"scaled_dot": None, "dot": 1.0, "bilinear": 1.0}
"""Score -> CTranslate2's `queries_scale` (None: its default 1/sqrt(Dh))."""
_FEATURE = "CTranslate2 export"


def check_exportable(config: TransformerConfig) -> None:
    """Refuse a model CTranslate2 cannot run exactly.

    Raises:
        ConfigError: a one-line message naming the setting and what CTranslate2 supports.
    """
    refusals = []
    if config.score not in _QUERIES_SCALE:
        refusals.append(
            f"score={config.score!r} (CTranslate2 computes dot-product scores only; "
            f"exportable: {', '.join(_QUERIES_SCALE)})"
        )
    if config.positional not in _POSITIONS:
        refusals.append(f"positional={config.positional!r} (exportable: {', '.join(_POSITIONS)})")
    elif config.positional == "rotary" and config.score == "bilinear":
        refusals.append(
            "score='bilinear' with positional='rotary' (the bilinear matrix acts on rotated "
            "queries, so it cannot be folded into the query projection; use scaled_dot or dot)"
        )
    if config.activation not in _ACTIVATIONS:
        refusals.append(f"activation={config.activation!r} (exportable: {', '.join(_ACTIVATIONS)})")
    if refusals:
        raise ConfigError("cannot export to CTranslate2: TransformerConfig." + "; ".join(refusals))


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).numpy().copy()


def _set_linear(spec: Any, *linears: nn.Linear, fold: torch.Tensor | None = None) -> None:
    """Set a `LinearSpec` from one or several (fused, concatenated) `nn.Linear`s.

    `fold` (Dh, Dh): a bilinear score matrix W folded into the first linear, the queries:
    every head's rows become Wᵀ W_q,h and its bias Wᵀ b_h, so that (q W) kᵀ = q' kᵀ.
    """
    weights = [linear.weight.detach().float() for linear in linears]  # (out, in) each
    biases = [None if linear.bias is None else linear.bias.detach().float() for linear in linears]
    if fold is not None:
        d_head = fold.size(0)
        w = weights[0].view(-1, d_head, weights[0].size(1))  # (H, Dh, D)
        weights[0] = (fold.float().T @ w).reshape(weights[0].shape)
        if biases[0] is not None:
            biases[0] = (biases[0].view(-1, d_head) @ fold.float()).reshape(-1)
    spec.weight = _array(torch.cat(weights))
    if all(b is not None for b in biases):
        spec.bias = _array(torch.cat(biases))


def _set_norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma = _array(norm.weight)
    spec.beta = _array(norm.bias)


def _set_attention(spec: Any, attn: nn.Module, norm: nn.LayerNorm, score: str) -> None:
    """Fill a `MultiHeadAttentionSpec` from a minitx `MultiHeadAttention`, its sub-layer norm
    and the model's score."""
    _set_norm(spec.layer_norm, norm)
    fold = getattr(attn.score, "weight", None)  # the bilinear score's (Dh, Dh) matrix
    if len(spec.linear) == 2:  # self-attention: q, k and v in one fused projection, then out
        _set_linear(spec.linear[0], attn.q_proj, attn.k_proj, attn.v_proj, fold=fold)
    else:
        _set_linear(spec.linear[0], attn.q_proj, fold=fold)
        _set_linear(spec.linear[1], attn.k_proj, attn.v_proj)
    _set_linear(spec.linear[-1], attn.out_proj)
    if _QUERIES_SCALE[score] is not None:
        spec.queries_scale = np.float32(_QUERIES_SCALE[score])


def _position_table(model: Transformer) -> np.ndarray:
    """(max_positions, D) table that minitx adds to the scaled embeddings of position 0, 1, ..."""
    config, positional = model.config, model.positional
    if config.positional == "sinusoidal":
        return _array(positional.pe)
    if config.positional == "learned":
        return _array(positional.embedding.weight)
    return np.zeros((config.max_positions, config.d_model), dtype=np.float32)


def _set_stack(spec: Any, model: Transformer, *, decoder: bool) -> None:
    """Embeddings, positions, layers and final norm of the encoder or decoder spec."""
    config = model.config
    embedding = model.tgt_embed if decoder else model.src_embed
    embeddings = spec.embeddings if decoder else spec.embeddings[0]
    embeddings.weight = _array(embedding.weight)
    spec.scale_embeddings = config.scale_embeddings
    if hasattr(spec, "position_encodings"):
        spec.position_encodings.encodings = _position_table(model)
    if config.norm_first:
        _set_norm(spec.layer_norm, model.decoder_norm if decoder else model.encoder_norm)
    layers = model.decoder_layers if decoder else model.encoder_layers
    for layer_spec, layer in zip(spec.layer, layers, strict=True):
        self_norm = (layer.self_block if decoder else layer.attn_block).norm
        _set_attention(layer_spec.self_attention, layer.self_attn, self_norm, config.score)
        if decoder:
            cross_norm = layer.cross_block.norm
            _set_attention(layer_spec.attention, layer.cross_attn, cross_norm, config.score)
        _set_norm(layer_spec.ffn.layer_norm, layer.ff_block.norm)
        _set_linear(layer_spec.ffn.linear_0, layer.feed_forward.w1)
        _set_linear(layer_spec.ffn.linear_1, layer.feed_forward.w2)


def transformer_spec(model: Transformer, tokenizer: Tokenizer) -> ctranslate2.specs.TransformerSpec:
    """The CTranslate2 `TransformerSpec` of a minitx model, weights and vocabulary set
    (not yet validated, optimised or saved).

    Raises:
        ConfigError: the model uses a setting CTranslate2 cannot express (`check_exportable`),
            or its vocabulary sizes differ from the tokenizer's.
        MissingExtraError: ctranslate2 is not installed.
    """
    config = model.config
    check_exportable(config)
    if {config.src_vocab_size, config.tgt_vocab_size} != {tokenizer.vocab_size}:
        raise ConfigError(
            f"cannot export to CTranslate2: the model's vocabularies (src {config.src_vocab_size}, "
            f"tgt {config.tgt_vocab_size}) differ from the tokenizer's {tokenizer.vocab_size} "
            "pieces; export needs the tokenizer the model was trained with"
        )
    ct2 = require_extra("ctranslate2", "export", _FEATURE)
    common_spec, transformer = ct2.specs.common_spec, ct2.specs.transformer_spec
    common = dict(
        pre_norm=config.norm_first,
        activation=common_spec.Activation[_ACTIVATIONS[config.activation]],
    )
    rotary = config.positional == "rotary"
    if rotary:  # all of each head, halves rotated (not interleaved)
        common.update(rotary_dim=0, rotary_interleave=False)
    encoder = transformer.TransformerEncoderSpec(config.n_encoder_layers, config.n_heads, **common)
    decoder = transformer.TransformerDecoderSpec(config.n_decoder_layers, config.n_heads, **common)
    if rotary:  # the decoder spec has no position table with rotary; the encoder spec keeps one
        delattr(encoder, "position_encodings")
    spec = transformer.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = model.encoder_layers[0].attn_block.norm.eps
    spec.config.add_source_eos = True  # minitx appends eos to every source
    spec.config.decoder_start_token = BOS_PIECE
    with torch.no_grad():
        _set_stack(spec.encoder, model, decoder=False)
        _set_stack(spec.decoder, model, decoder=True)
        spec.decoder.projection.weight = _array(model.output.weight)
    vocabulary = tokenizer.id_to_piece(list(range(tokenizer.vocab_size)))
    spec.register_source_vocabulary(vocabulary)
    spec.register_target_vocabulary(vocabulary)
    return spec


def export_model(
    model: Transformer,
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike[str],
    *,
    quantization: str | None = None,
    force: bool = False,
    languages: tuple[str | None, str | None] = (None, None),
) -> Path:
    """Write `model` as a CTranslate2 model directory, the sentencepiece model beside it.

    Args:
        out_dir: the directory to write; written under a temporary name, then renamed.
        quantization: weight type, one CTranslate2 accepts
            (`ctranslate2.specs.model_spec.ACCEPTED_MODEL_TYPES`; None: float32).
        force: replace `out_dir` when it exists; only a directory minitx wrote (holding
            `minitx.outputs.MARKER`, written into every export, and no file added since) or an
            empty one is replaced (`minitx.outputs.check_output_dir`).
        languages: (source, target) codes, recorded in `minitx.json`.

    Returns:
        `out_dir` as a Path.

    Raises:
        ConfigError: a setting CTranslate2 cannot express, or an unknown `quantization`.
        OutputError: `out_dir` exists and `force` is False, or is not safe to replace (the
            current directory or its parent, or one minitx did not write).
        MissingExtraError: ctranslate2 is not installed.
    """
    out = Path(out_dir)
    _check_quantization(quantization)
    check_output_dir(out, force=force, kind=OUTPUT_KIND)
    spec = transformer_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    with written_whole(out, OUTPUT_KIND) as tmp:
        spec.save(str(tmp))
        tokenizer.save(tmp / SENTENCEPIECE_FILE)
        info = {
            "format": "minitx-ctranslate2",
            "model_config": model.config.to_dict(),
            "src_lang": languages[0],
            "tgt_lang": languages[1],
            "quantization": quantization or "float32",
        }
        (tmp / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return out


def _check_quantization(quantization: str | None) -> None:
    """Refuse a `quantization` (None: float32) that is no weight type CTranslate2 accepts.

    Raises:
        ConfigError: an unknown `quantization`.
        MissingExtraError: ctranslate2 is not installed.
    """
    ct2 = require_extra("ctranslate2", "export", _FEATURE)
    accepted = ct2.specs.model_spec.ACCEPTED_MODEL_TYPES
    if quantization is not None and quantization not in accepted:
        raise ConfigError(
            f"unknown CTranslate2 quantization {quantization!r}; choose from {', '.join(accepted)}"
        )


def export_ctranslate2(
    checkpoint: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    quantization: str | None = None,
    force: bool = False,
) -> Path:
    """Convert a minitx model into a CTranslate2 model directory (see `export_model`).

    Args:
        checkpoint: a `.ckpt`, a release directory or a hub repo id, loaded as every command
            loads one (`minitx.release.load`).
        quantization: weight type (see `export_model`; None: float32).
        force: replace `out_dir` when it exists (see `export_model`).

    Raises:
        MissingFileError, CheckpointError: the model is missing or not a usable one.
        OutputError: as `export_model`, `out_dir` holds `checkpoint`, or lies inside a
            release directory (`minitx.release.enclosing_release`).
        ConfigError, MissingExtraError: as `export_model`.
    """
    _check_quantization(quantization)  # fail before loading anything, and before --out's check
    # the inputs, before loading
    if (outer := release.enclosing_release(Path(out_dir))) is not None:
        raise OutputError(
            f"--out {out_dir} lies inside the release {outer}; give a directory outside it"
        )
    check_output_dir(out_dir, inputs=[checkpoint], force=force, kind=OUTPUT_KIND)
    loaded = release.load(checkpoint)
    return export_model(
        loaded.model.eval(),
        loaded.tokenizer,
        out_dir,
        quantization=quantization,
        force=force,
        languages=loaded.languages,
    )


DEVICES = ("cpu", "cuda", "auto")
"""The devices `Ct2Translator` takes, as CTranslate2 names them."""


def _check_translator_settings(
    ct2: Any, device: object, compute_type: object, intra_threads: object
) -> None:
    """Refuse the settings of a `Ct2Translator` that CTranslate2 cannot use on this machine.

    Raises:
        ConfigError: naming the argument and what to give.
    """
    check_whole_number("intra_threads", intra_threads, 0)
    if device not in DEVICES:
        raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    gpus = ct2.get_cuda_device_count()
    if device == "cuda" and gpus == 0:
        raise ConfigError("device='cuda': CTranslate2 finds no CUDA device here; use 'cpu'")
    on = "cuda" if device == "cuda" or (device == "auto" and gpus > 0) else "cpu"
    types = ["default", "auto", *sorted(ct2.get_supported_compute_types(on))]
    if compute_type not in types:
        raise ConfigError(
            f"compute_type {compute_type!r} is not one CTranslate2 runs on {on} here; choose "
            f"from {', '.join(types)}"
        )


class Ct2Translator:
    """Translate with an exported directory the way minitx's `Translator` does: same
    tokenisation, input cut at max_positions - 1 pieces, pad and bos never generated, eos
    allowed at the first step, length cap a·|src| + b per sentence (greedy output is then
    identical up to floating point). Beam search is CTranslate2's own, whose length penalty is
    score / length^alpha (minitx: GNMT's ((5 + length) / 6)^alpha), so beam outputs may differ.

    Args:
        model_dir: a directory written by `export_ctranslate2`.
        device: "cpu", "cuda" or "auto".
        compute_type: CTranslate2's compute type ("default": the stored weight type).
        intra_threads: threads per translation (0: CTranslate2's default).

    Raises:
        ConfigError: a `device`, `compute_type` or `intra_threads` CTranslate2 cannot use here
            (it raised a TypeError or RuntimeError that named no argument).
        FileNotFoundError: `model_dir` lacks the files an export writes.
        MissingExtraError: ctranslate2 is not installed.
    """

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        *,
        device: str = "cpu",
        compute_type: str = "default",
        intra_threads: int = 0,
    ) -> None:
        ct2 = require_extra("ctranslate2", "export", _FEATURE)
        _check_translator_settings(ct2, device, compute_type, intra_threads)
        directory = Path(model_dir)
        for name in ("model.bin", SENTENCEPIECE_FILE, INFO_FILE):
            if not (directory / name).is_file():
                raise FileNotFoundError(
                    2,
                    f"not a minitx CTranslate2 export (no {name}; write one with minitx-ct2)",
                    str(directory),
                )
        info = json.loads((directory / INFO_FILE).read_text(encoding="utf-8"))
        self.max_positions: int = info["model_config"]["max_positions"]
        self.tokenizer = Tokenizer.load(directory / SENTENCEPIECE_FILE)
        # CTranslate2 sets the process's OpenMP thread count as it starts, and torch shares it:
        # keep torch's, or every torch computation after this one runs on other threads.
        torch_threads = torch.get_num_threads()
        self.translator = ct2.Translator(
            str(directory), device=device, compute_type=compute_type, intra_threads=intra_threads
        )
        torch.set_num_threads(torch_threads)
        pieces = self.tokenizer.id_to_piece(list(range(self.tokenizer.vocab_size)))
        self._ids = {piece: i for i, piece in enumerate(pieces)}

    def translate(
        self,
        sentences: Sequence[str],
        beam_size: int = DecodingConfig.beam_size,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        alpha: float = DecodingConfig.alpha,
        max_len_a: float = DecodingConfig.max_len_a,
        max_len_b: int = DecodingConfig.max_len_b,
    ) -> list[str]:
        """Translate sentences; "" for an empty one, results in input order.

        Args:
            beam_size: 1 = greedy.
            batch_size: sentences per batch (CTranslate2 sorts them by length).
            alpha: length-penalty exponent, passed to CTranslate2 (its formula, see above).
            max_len_a: length cap a·|src| + b generated tokens (eos included), |src|
                counting the eos, as in `minitx.decoding.DecodingConfig`: the factor a.
            max_len_b: that cap's constant b.
        """
        # minitx's own checks of these settings: CTranslate2 aborts the process on some (beam -1)
        decoding = DecodingConfig(
            beam_size=beam_size, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b
        )
        decoding.check_beam_fits(self.tokenizer.vocab_size)
        check_whole_number("batch_size", batch_size, 1)
        # pieces (unknown ones as <unk>), cut as minitx cuts them; CTranslate2 appends eos
        ids = encode_sources(self.tokenizer, sentences, self.max_positions)
        sources = [self.tokenizer.id_to_piece(seq) for seq in ids]
        todo = [i for i, pieces in enumerate(sources) if pieces]
        out = [""] * len(sentences)
        if not todo:
            return out
        caps = {
            i: min(
                max(int((len(sources[i]) + 1) * max_len_a) + max_len_b, 1), self.max_positions - 1
            )
            for i in todo
        }
        results = self.translator.translate_batch(
            [sources[i] for i in todo],
            max_batch_size=batch_size,
            beam_size=beam_size,
            length_penalty=alpha,
            max_input_length=0,  # cut above, as minitx does
            max_decoding_length=max(caps.values()),
            min_decoding_length=0,  # eos may come first, as in minitx
            suppress_sequences=[[PAD_PIECE], [BOS_PIECE]],  # never generated by minitx
        )
        hypotheses = [
            [self._ids[p] for p in r.hypotheses[0]][: caps[i]]
            for i, r in zip(todo, results, strict=True)
        ]
        for i, text in zip(todo, self.tokenizer.decode(hypotheses), strict=True):
            out[i] = text
        return out


__all__ = [
    "INFO_FILE",
    "SENTENCEPIECE_FILE",
    "Ct2Translator",
    "check_exportable",
    "export_ctranslate2",
    "export_model",
    "transformer_spec",
]
