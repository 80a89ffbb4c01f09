"""The encoder–decoder Transformer (Vaswani et al., 2017), from token ids to logits.

Read top to bottom after `minitx.attention`: sinusoidal positions, the feed-forward network,
the residual sub-layer, the encoder and decoder layers, the settings, then `Transformer`:
ids -> embeddings + positions -> encoder layers -> memory; ids -> embeddings + positions ->
decoder layers (causal self-attention, cross-attention to the memory) -> logits.

Pre-LN (default) normalises the input of each sub-layer, x + f(LN(x)), and needs a final
LayerNorm after each stack; post-LN is the original paper's LN(x + f(x)).

Beside this file: the other positional encodings (`minitx.positional`), the settings' checks
(`minitx.model_config`), hard attention (`minitx.hard_attention`), the decoding cache
(`minitx.kv_cache`) and row packing, a speed switch (`minitx.packing`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import ClassVar

import torch
from torch import Tensor, nn

from minitx.activations import ACTIVATIONS
from minitx.attention import MultiHeadAttention, padding_mask
from minitx.dropout import Dropout
from minitx.kv_cache import DecoderCache, KVCache, check_one_row_each
from minitx.model_config import check_transformer_config, transformer_config_values
from minitx.model_outputs import DecoderOutput, EncoderOutput, TransformerOutput
from minitx.packing import PACK_ROWS, on_rows, real_rows
from minitx.positional import POSITIONAL_ENCODINGS, PositionalEncoding, make_positional_encoding
from minitx.vocab import BOS_ID, EOS_ID, PAD_ID


@POSITIONAL_ENCODINGS.register("sinusoidal")
class SinusoidalPositionalEncoding(PositionalEncoding):
    """Fixed sinusoids added to the embeddings (Vaswani et al., 2017, §3.5).

    PE[p, 2i] = sin(p / 10000^(2i/D)) and PE[p, 2i+1] = cos(p / 10000^(2i/D)).
    """

    def __init__(self, *, d_model: int, n_heads: int = 1, max_len: int = 1024) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, max_len=max_len)
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
        exponent = torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
        inv_freq = torch.exp(exponent)  # (D/2,)
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * inv_freq)
        pe[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
        self.register_buffer("pe", pe, persistent=False)  # derived, so not saved in checkpoints

    @classmethod
    def check_config(cls, *, d_model: int, n_heads: int) -> None:
        if d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got {d_model}")

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        """Embeddings x (B, T, D) of positions offset .. offset+T-1, with positions added."""
        end = offset + x.size(1)
        self._check_length(end)
        return x + self.pe[offset:end].to(x.dtype)


class FeedForward(nn.Module):
    """Position-wise feed-forward: W2 · dropout(act(W1 x)), D -> d_ff -> D (§3.3)."""

    def __init__(
        self, d_model: int, d_ff: int, *, activation: str = "relu", dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]()  # minitx.activations: relu, gelu, silu
        self.dropout = Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(self.dropout(self.activation(self.w1(x))))  # (..., D)


class _SubLayer(nn.Module):
    """Residual connection around one sub-layer, with pre- or post-LayerNorm and dropout."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def pre(self, x: Tensor) -> Tensor:
        """What the sub-layer sees: LN(x) for pre-LN, x for post-LN."""
        return self.norm(x) if self.norm_first else x

    def post(self, x: Tensor, y: Tensor) -> Tensor:
        """Add the sub-layer output y to the residual stream x."""
        out = x + self.dropout(y)
        return out if self.norm_first else self.norm(out)

    def around(self, x: Tensor, sublayer: nn.Module) -> Tensor:
        """The whole residual sub-layer: post(x, sublayer(pre(x))), (..., D) -> (..., D)."""
        return self.post(x, sublayer(self.pre(x)))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each wrapped in a residual sub-layer (§3.1), built
    from the model's settings `c`; `positions`: the positional encoding when it turns queries
    and keys (`uses_qk_hook`, rotary)."""

    def __init__(self, c: TransformerConfig, positions: nn.Module | None = None) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            c.d_model, c.n_heads, dropout=c.attention_dropout, score=c.score, positions=positions
        )
        self.feed_forward = FeedForward(
            c.d_model, c.d_ff, activation=c.activation, dropout=c.activation_dropout
        )
        self.attn_block = _SubLayer(c.d_model, c.dropout, c.norm_first)
        self.ff_block = _SubLayer(c.d_model, c.dropout, c.norm_first)

    def forward(
        self,
        x: Tensor,
        src_mask: Tensor | None,
        need_weights: bool = False,
        *,
        rows: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D) and weights (B, H, S, S) or None;
        `rows`: see `minitx.packing` (None: the feed-forward on every position)."""
        y, weights = self.self_attn(
            self.attn_block.pre(x), mask=src_mask, need_weights=need_weights
        )
        x = self.attn_block.post(x, y)
        return on_rows(lambda h: self.ff_block.around(h, self.feed_forward), x, rows), weights


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to the encoder output, then feed-forward (§3.1).
    Built as `EncoderLayer`."""

    def __init__(self, c: TransformerConfig, positions: nn.Module | None = None) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(
            c.d_model, c.n_heads, dropout=c.attention_dropout, score=c.score, positions=positions
        )
        self.cross_attn = MultiHeadAttention(
            c.d_model, c.n_heads, dropout=c.attention_dropout, score=c.score
        )
        self.feed_forward = FeedForward(
            c.d_model, c.d_ff, activation=c.activation, dropout=c.activation_dropout
        )
        self.self_block = _SubLayer(c.d_model, c.dropout, c.norm_first)
        self.cross_block = _SubLayer(c.d_model, c.dropout, c.norm_first)
        self.ff_block = _SubLayer(c.d_model, c.dropout, c.norm_first)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        *,
        need_weights: bool = False,
        cache: tuple[KVCache, KVCache] | None = None,
        rows: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x (B, T, D) target states (with a cache: only the new positions), memory (B, S, D)
        encoder output, src_mask (B, 1, 1, S) -> (B, T, D), self-attention weights
        (B, H, T, Tcache + T) and cross-attention weights (B, H, T, S) or None; `cache`: the
        layer's (self, cross) `KVCache` pair; `rows`: see `minitx.packing`."""
        self_cache, cross_cache = cache if cache is not None else (None, None)
        y, self_w = self.self_attn(
            self.self_block.pre(x), is_causal=True, need_weights=need_weights, cache=self_cache
        )
        x = self.self_block.post(x, y)
        y, cross_w = self.cross_attn(
            self.cross_block.pre(x),
            memory,
            mask=src_mask,
            need_weights=need_weights,
            cache=cross_cache,
        )
        x = self.cross_block.post(x, y)
        x = on_rows(lambda h: self.ff_block.around(h, self.feed_forward), x, rows)
        return x, self_w, cross_w


@dataclass
class TransformerConfig:
    """Hyper-parameters of a `Transformer`; validated on construction (`minitx.model_config`).

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
        activation: feed-forward activation, a name in `minitx.activations.ACTIVATIONS`.
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
        check_transformer_config(self)

    def to_dict(self) -> dict:
        """Plain dict (for checkpoints and hyper-parameter logging)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> TransformerConfig:
        """Inverse of `to_dict`; unknown keys are an error."""
        return cls(**transformer_config_values(values, (f.name for f in fields(cls))))


class Transformer(nn.Module):
    """Encoder–decoder Transformer for translation.

    Usage: `logits = model(src, tgt_in)` for training; `encode` + `decode(..., cache=...)` for
    incremental decoding; `model(src, tgt_in, need_weights=True)` for attention maps;
    hard attention at inference sits beside it (`minitx.hard_attention.attention_mode`).

    Attributes:
        pack_rows: row packing, a speed switch (`minitx.packing`): the feed-forward
            sub-layers of full-sequence passes on the real positions, topped up to a multiple
            of `pack_rows` rows (`PACK_ROWS` by default); 0 = on every position.
    """

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = c = config
        self.pack_rows = PACK_ROWS
        self.src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=PAD_ID)
        self.tgt_embed = (
            self.src_embed
            if c.share_embeddings
            else nn.Embedding(c.tgt_vocab_size, c.d_model, padding_idx=PAD_ID)
        )
        self.positional = make_positional_encoding(
            c.positional, c.d_model, c.max_positions, n_heads=c.n_heads
        )
        self.embed_dropout = Dropout(c.dropout)
        positions = self.positional if self.positional.uses_qk_hook else None  # rotary
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(c, positions) for _ in range(c.n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(c, positions) for _ in range(c.n_decoder_layers)
        )
        # Pre-LN leaves the residual stream un-normalised: normalise once at the end of each stack.
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self._init_parameters()
        if c.tie_output:
            self.output.weight = self.tgt_embed.weight

    def _init_parameters(self) -> None:
        """Embeddings ~ N(0, 1/D), linear weights Xavier-uniform, the rest as their modules made
        them; by module type, in module order, so that a seed gives the same weights everywhere."""
        for module in self.modules():
            if isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, std=self.config.d_model**-0.5)
            elif isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
        for embedding in (self.src_embed, self.tgt_embed):
            with torch.no_grad():
                embedding.weight[PAD_ID].zero_()

    def _embed(self, embedding: nn.Embedding, ids: Tensor, offset: int = 0) -> Tensor:
        if ids.dim() != 2:  # else an IndexError in the padding mask or a broadcast error
            one = ", ids[None] for one sentence" if ids.dim() == 1 else ""
            raise ValueError(f"ids {tuple(ids.shape)}: give (B, T) token ids{one}")
        x = embedding(ids)  # (B, T) -> (B, T, D)
        if self.config.scale_embeddings:
            x = x * self.config.d_model**0.5
        return self.embed_dropout(self.positional(x, offset))

    def encode(self, src: Tensor, *, need_weights: bool = False) -> EncoderOutput:
        """Encode source ids (B, S) into memory (B, S, D)."""
        x = self._embed(self.src_embed, src)
        src_mask = padding_mask(src, PAD_ID)  # (B, 1, 1, S)
        rows = real_rows(src, PAD_ID, self.pack_rows) if self.pack_rows else None
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
        """Decode target ids `tgt_in` (B, T) (bos first) into next-token logits (B, T, V),
        attending to the encoder's `memory` (B, S, D) under its `src_mask` (B, 1, 1, S).

        With a `cache` (`new_cache`, updated in place) `tgt_in` holds only the new ids, usually
        (B, 1), and positions continue from `cache.length`. `memory` may have B/g rows, one per
        g rows of `tgt_in` (beams), and `src_mask` then has them too. `need_weights`: also
        return the per-layer attention maps."""
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
        rows = real_rows(tgt_in, PAD_ID, self.pack_rows) if pack else None
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
        """An empty cache for incremental decoding (`minitx.kv_cache`)."""
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
        check_one_row_each(src, tgt_in)
        enc = self.encode(src, need_weights=need_weights)
        dec = self.decode(tgt_in, enc.memory, enc.src_mask, need_weights=need_weights)
        if not need_weights:
            return dec.logits
        return TransformerOutput(
            dec.logits, enc.attentions, dec.self_attentions, dec.cross_attentions
        )

    def num_parameters(self) -> int:
        """Number of distinct trainable parameters (tied matrices counted once)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
