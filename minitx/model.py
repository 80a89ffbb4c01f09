"""The encoder–decoder Transformer (Vaswani et al., 2017) built from minitx's attention core."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import torch
from torch import Tensor, nn

from minitx.attention import (
    SCORES,
    KVCache,
    MultiHeadAttention,
    check_attention_mode,
    padding_mask,
)
from minitx.errors import ConfigError, check_known_keys
from minitx.layers import ACTIVATIONS, DecoderLayer, EncoderLayer, real_rows
from minitx.positional import POSITIONAL_ENCODINGS, make_positional_encoding
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID

_LEGACY_ID_KEYS = {"pad_id": PAD_ID, "bos_id": BOS_ID, "eos_id": EOS_ID}
"""Special ids that checkpoints written before minitx.vocab carried in the model config."""


HARD_ATTENTION_SCOPES = ("cross", "all")
"""Which attentions `Transformer.attention_mode` switches: the decoder's cross-attention only,
or every attention (encoder self, decoder self and cross)."""

PACK_ROWS = 64
"""`Transformer.pack_rows` by default: feed-forward sub-layers on the real positions, topped up
to a multiple of 64 rows (5% more target tokens/s in fp32 on Multi30k's batches, docs: Speed)."""


def check_attention_scope(scope: str) -> None:
    """Raise `ConfigError` unless `scope` is one of `HARD_ATTENTION_SCOPES`."""
    if scope not in HARD_ATTENTION_SCOPES:
        choices = ", ".join(HARD_ATTENTION_SCOPES)
        raise ConfigError(f"unknown attention scope {scope!r}; choose one of {choices}")


def _heads_hint(d_model: int, n_heads: int) -> str:
    """Valid nearby choices: head counts dividing d_model, and d_model values for n_heads
    that keep the head width even (rotary positions need that; sinusoidal ones an even d_model).
    """
    heads = [h for h in range(1, 2 * n_heads + 3) if d_model % h == 0]
    nearest = sorted(heads, key=lambda h: (abs(h - n_heads), h))[:2]
    step = 2 * n_heads
    below, above = (d_model // step) * step, (d_model // step + 1) * step
    widths = [w for w in (below, above) if w > 0]
    return f"choose n_heads from {sorted(nearest)} or d_model from {widths}"


@dataclass
class TransformerConfig:
    """Hyper-parameters of a `Transformer`; validated on construction.

    The defaults are the model of the default recipe, the one `minitx-train` builds without a
    `--config` (`minitx/configs/multi30k_de_en.yaml` repeats none of them), so
    `Transformer(TransformerConfig())` is that model.

    Attributes:
        src_vocab_size: source vocabulary size.
        tgt_vocab_size: target vocabulary size (equal to the source one when embeddings are shared).
        d_model: model width D.
        n_heads: attention heads H (D must be divisible by H).
        n_encoder_layers: encoder depth.
        n_decoder_layers: decoder depth.
        d_ff: feed-forward inner width (the paper's base model: 4 x d_model).
        dropout: dropout on embeddings and sub-layer outputs (the paper's P_drop, 0.1 there too).
        attention_dropout: dropout on attention weights.
        activation_dropout: dropout on the feed-forward hidden layer (off by default, as in
            the paper).
        activation: feed-forward activation, a name in `minitx.layers.ACTIVATIONS`.
        norm_first: pre-LN (True, default) or post-LN (False, the original paper).
        positional: a name in `minitx.positional.POSITIONAL_ENCODINGS` ("sinusoidal",
            "learned", "rotary", "none").
        max_positions: longest sequence the positional encoding covers.
        score: attention score function, a name in `minitx.attention.SCORES`.
        share_embeddings: one embedding matrix for source and target (joint vocabulary).
        tie_output: the output projection reuses the target embedding matrix.
        scale_embeddings: multiply embeddings by sqrt(d_model).

    The special token ids (pad, bos, eos) are not settings: they come from `minitx.vocab`.
    """

    src_vocab_size: int = 8000
    tgt_vocab_size: int = 8000
    d_model: int = 256
    n_heads: int = 4
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    d_ff: int = 512
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = True
    positional: str = "sinusoidal"
    max_positions: int = 1024
    score: str = "scaled_dot"
    share_embeddings: bool = True
    tie_output: bool = True
    scale_embeddings: bool = True

    pad_id: ClassVar[int] = PAD_ID
    bos_id: ClassVar[int] = BOS_ID
    eos_id: ClassVar[int] = EOS_ID

    def __post_init__(self) -> None:
        positive = (
            "src_vocab_size",
            "tgt_vocab_size",
            "d_model",
            "n_heads",
            "d_ff",
            "max_positions",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(
                    f"TransformerConfig.{name} must be positive, got {getattr(self, name)}"
                )
        for name in ("n_encoder_layers", "n_decoder_layers"):
            if getattr(self, name) < 1:
                raise ConfigError(
                    f"TransformerConfig.{name} must be at least 1, got {getattr(self, name)}"
                )
        if self.d_model % self.n_heads:
            raise ConfigError(
                f"TransformerConfig: d_model ({self.d_model}) must be divisible by n_heads "
                f"({self.n_heads}); {_heads_hint(self.d_model, self.n_heads)}"
            )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(
                    f"TransformerConfig.{name} must be in [0, 1), got {getattr(self, name)}"
                )
        registries = {
            "activation": ACTIVATIONS,
            "positional": POSITIONAL_ENCODINGS,
            "score": SCORES,
        }
        for name, registry in registries.items():
            registry.check(getattr(self, name), where=f"TransformerConfig.{name}")
        try:
            POSITIONAL_ENCODINGS[self.positional].check_config(
                d_model=self.d_model, n_heads=self.n_heads
            )
        except ValueError as exc:
            raise ConfigError(f"TransformerConfig: {exc}") from None
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError(
                f"TransformerConfig: share_embeddings needs equal vocabularies, got src "
                f"{self.src_vocab_size} and tgt {self.tgt_vocab_size}; set share_embeddings=False "
                "for separate vocabularies"
            )
        smallest = min(self.src_vocab_size, self.tgt_vocab_size)
        if smallest <= max(_LEGACY_ID_KEYS.values()):
            raise ConfigError(
                f"TransformerConfig: vocabularies must be larger than the special ids "
                f"(pad {PAD_ID}, bos {BOS_ID}, eos {EOS_ID}), got {smallest}"
            )

    def to_dict(self) -> dict:
        """Plain dict (for checkpoints and hyper-parameter logging)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TransformerConfig:
        """Inverse of `to_dict`; unknown keys are an error."""
        values = dict(values)
        for key, expected in _LEGACY_ID_KEYS.items():  # older checkpoints stored the fixed ids
            if key in values and values.pop(key) != expected:
                raise ConfigError(
                    f"TransformerConfig: {key} must be {expected} (minitx.vocab), got {values}"
                )
        check_known_keys("TransformerConfig", values, (f.name for f in fields(cls)))
        return cls(**values)


@dataclass
class EncoderOutput:
    """memory (B, S, D), src_mask (B, 1, 1, S) and, when asked, one (B, H, S, S) map per layer."""

    memory: Tensor
    src_mask: Tensor
    attentions: tuple[Tensor, ...] | None = None


@dataclass
class DecoderOutput:
    """Decoder results.

    Attributes:
        states: (B, T, D) final decoder states (after the last LayerNorm).
        logits: (B, T, V) next-token logits; None from `Transformer.decoder_states`.
        self_attentions: when asked, one (B, H, T, T') self-attention map per layer.
        cross_attentions: when asked, one (B, H, T, S) cross-attention map per layer.
    """

    states: Tensor
    logits: Tensor | None = None
    self_attentions: tuple[Tensor, ...] | None = None
    cross_attentions: tuple[Tensor, ...] | None = None


@dataclass
class TransformerOutput:
    """`Transformer.forward(..., need_weights=True)`: logits plus maps in the bertviz layout."""

    logits: Tensor
    encoder_attentions: tuple[Tensor, ...]
    decoder_attentions: tuple[Tensor, ...]
    cross_attentions: tuple[Tensor, ...]


class DecoderCache:
    """Per-layer KV caches for incremental decoding: (self-attention, cross-attention) pairs."""

    def __init__(self, n_layers: int) -> None:
        self.layers = [(KVCache(), KVCache()) for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """Target positions decoded so far (the position offset of the next step)."""
        return self.layers[0][0].length

    def reorder(self, index: Tensor, *, cross: bool = True) -> None:
        """Keep batch rows `index` (B',) in every cache, e.g. after a beam-search step.

        `cross=False` leaves the cross-attention caches as they are: right when `index` only
        permutes rows whose encoder outputs are equal (the beams of one sentence).
        """
        for self_cache, cross_cache in self.layers:
            self_cache.reorder(index)
            if cross:
                cross_cache.reorder(index)


class Transformer(nn.Module):
    """Encoder–decoder Transformer for translation.

    Usage: `logits = model(src, tgt_in)` for training; `encode` + `decode(..., cache=...)` for
    incremental decoding; `model(src, tgt_in, need_weights=True)` for attention maps;
    `with model.attention_mode("hard-argmax", scope="cross"):` for hard attention at inference.

    Attributes:
        pack_rows: run the feed-forward sub-layers of full-sequence passes (training,
            `encode`, teacher forcing) on the real positions only, packed (`real_rows`) and
            topped up with padded ones to a multiple of `pack_rows` rows (`PACK_ROWS` by default);
            0 computes them on every padded position too. A runtime switch, not a
            `TransformerConfig` setting: the outputs at real positions are the same up to
            rounding, and padded positions are read by nothing.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.pack_rows = PACK_ROWS
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=PAD_ID)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=c.pad_id)
        )
        self.positional = make_positional_encoding(
            c.positional, c.d_model, c.max_positions, n_heads=c.n_heads
        )
        self.embed_dropout = nn.Dropout(c.dropout)
        layer_args = dict(
            dropout=c.dropout,
            attention_dropout=c.attention_dropout,
            activation_dropout=c.activation_dropout,
            activation=c.activation,
            norm_first=c.norm_first,
            score=c.score,
            positions=self.positional if self.positional.uses_qk_hook else None,
        )
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.n_heads, c.d_ff, **layer_args)
            for _ in range(c.n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(c.d_model, c.n_heads, c.d_ff, **layer_args)
            for _ in range(c.n_decoder_layers)
        )
        # Pre-LN leaves the residual stream un-normalised: normalise once at the end of each stack.
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self._init_parameters()
        if c.tie_output:
            self.output.weight = self.tgt_embed.weight

    def _init_parameters(self) -> None:
        """Embeddings ~ N(0, 1/D); every linear map's weight Xavier-uniform; the rest (biases,
        norms, a bilinear score's matrix) keep their own initialisation. Selected by module
        type, in module order, so that a seed gives the same weights on every machine."""
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.config.d_model**-0.5)
            elif isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
        for embedding in (self.src_embed, self.tgt_embed):
            with torch.no_grad():
                embedding.weight[PAD_ID].zero_()

    def _embed(self, embedding: nn.Embedding, ids: Tensor, offset: int = 0) -> Tensor:
        x = embedding(ids)  # (B, T, D)
        if self.config.scale_embeddings:
            x = x * self.config.d_model**0.5
        return self.embed_dropout(self.positional(x, offset))

    def encode(self, src: Tensor, *, need_weights: bool = False) -> EncoderOutput:
        """Encode source ids (B, S) into memory (B, S, D)."""
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        rows = real_rows(src, self.config.pad_id, self.pack_rows) if self.pack_rows else None
        x = self._embed(self.src_embed, src)
        maps = []
        for layer in self.encoder_layers:
            x, weights = layer(x, src_mask, need_weights, rows=rows)
            maps.append(weights)
        return EncoderOutput(self.encoder_norm(x), src_mask, tuple(maps) if need_weights else None)

    def decode(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        *,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> DecoderOutput:
        """Decode target ids into next-token logits.

        Args:
            tgt_in: (B, T) decoder input ids (bos first). With a cache: only the new ids,
                usually (B, 1); positions continue from `cache.length`.
            memory: (B, S, D) encoder output.
            src_mask: (B, 1, 1, S) source padding mask from `encode`.
            cache: a `DecoderCache` (see `new_cache`), updated in place.
            need_weights: also return the per-layer attention maps.
        """
        out = self.decoder_states(tgt_in, memory, src_mask, cache=cache, need_weights=need_weights)
        out.logits = self.output(out.states)  # (B, T, D) -> (B, T, V)
        return out

    def decoder_states(
        self,
        tgt_in: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        *,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> DecoderOutput:
        """Like `decode` but without the output projection (`logits` is None), so that a loss
        can project only the positions it needs with `self.output`."""
        offset = cache.length if cache is not None else 0
        x = self._embed(self.tgt_embed, tgt_in, offset)
        # Incremental decoding feeds one position per sentence: nothing to pack there.
        pack = self.pack_rows and cache is None
        rows = real_rows(tgt_in, self.config.pad_id, self.pack_rows) if pack else None
        self_maps, cross_maps = [], []
        for i, layer in enumerate(self.decoder_layers):
            layer_cache = cache.layers[i] if cache is not None else None
            x, self_w, cross_w = layer(
                x, memory, src_mask, need_weights=need_weights, cache=layer_cache, rows=rows
            )
            self_maps.append(self_w)
            cross_maps.append(cross_w)
        x = self.decoder_norm(x)  # (B, T, D)
        if not need_weights:
            return DecoderOutput(x)
        return DecoderOutput(x, None, tuple(self_maps), tuple(cross_maps))

    def new_cache(self) -> DecoderCache:
        """An empty cache for incremental decoding."""
        return DecoderCache(len(self.decoder_layers))

    def forward(
        self, src: Tensor, tgt_in: Tensor, need_weights: bool = False
    ) -> Tensor | TransformerOutput:
        """Teacher-forced forward pass.

        Args:
            src: (B, S) source ids, right-padded with pad_id.
            tgt_in: (B, T) decoder input ids (bos + target), right-padded.
            need_weights: also return every attention map.

        Returns:
            logits (B, T, V); with `need_weights` a `TransformerOutput` whose maps are tuples
            with one (B, H, Tq, Tk) tensor per layer.
        """
        enc = self.encode(src, need_weights=need_weights)
        dec = self.decode(tgt_in, enc.memory, enc.src_mask, need_weights=need_weights)
        if not need_weights:
            return dec.logits
        return TransformerOutput(
            dec.logits, enc.attentions, dec.self_attentions, dec.cross_attentions
        )

    def attention_modules(self, scope: str = "all") -> list[MultiHeadAttention]:
        """The attention modules of `scope` (see `HARD_ATTENTION_SCOPES`), in module order."""
        check_attention_scope(scope)
        if scope == "cross":
            return [layer.cross_attn for layer in self.decoder_layers]
        return [m for m in self.modules() if isinstance(m, MultiHeadAttention)]

    def set_attention_mode(
        self, mode: str = "soft", *, scope: str = "cross", seed: int = 0
    ) -> None:
        """Switch how attention uses its weights, for inference (see
        `minitx.attention.ATTENTION_MODES`): `mode` in the attentions of `scope`, "soft" in
        all others. "hard-sample" draws from one `torch.Generator` seeded with `seed`, on the
        model's device (call this after moving the model), shared by those modules in call
        order: the same seed, inputs and batches give the same draws.

        An inference-time switch, not a `TransformerConfig` setting: it changes no parameter,
        so checkpoints never hold it. Prefer the context manager `attention_mode`.

        Raises:
            ConfigError: an unknown mode or scope.
        """
        check_attention_mode(mode)
        chosen = {id(module) for module in self.attention_modules(scope)}
        generator = None
        if mode == "hard-sample":
            device = next(self.parameters()).device
            generator = torch.Generator(device=device).manual_seed(seed)
        for module in self.attention_modules("all"):
            hard = id(module) in chosen
            module.attention_mode = mode if hard else "soft"
            module.generator = generator if hard else None

    @contextmanager
    def attention_mode(
        self, mode: str = "soft", *, scope: str = "cross", seed: int = 0
    ) -> Iterator[Transformer]:
        """`set_attention_mode` for the duration of a `with` block; the modes and generators
        from before come back afterwards (also after an error). Each entry re-seeds "hard-sample".

        Example:
            with model.attention_mode("hard-argmax", scope="cross"):
                ids = greedy_decode(model, src)
        """
        modules = self.attention_modules("all")
        saved = [(m.attention_mode, m.generator) for m in modules]
        self.set_attention_mode(mode, scope=scope, seed=seed)
        try:
            yield self
        finally:
            for module, (old_mode, old_generator) in zip(modules, saved, strict=True):
                module.attention_mode, module.generator = old_mode, old_generator

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied matrices counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
