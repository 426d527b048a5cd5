"""Liquid AI LFM2 (lfm2) and LFM2-MoE (lfm2_moe): gated short-convolution layers ("conv") with a
few grouped-query attention layers ("full_attention"), as ``layer_types`` (or, in the first
releases, ``full_attn_idxs``) lays them out.

Defaults: transformers 5.24.0, models/lfm2/configuration_lfm2.py and
models/lfm2_moe/configuration_lfm2_moe.py; the modeling code read is vLLM 0.33's
model_executor/models/lfm2.py and lfm2_moe.py (and SGLang 0.5.23's configs/lfm2.py for the
cache). What they agree on, and kvcalc therefore reads:

- the attention head dim is hidden_size / num_attention_heads (vLLM ignores a ``head_dim``
  key; a file stating another one is refused), with a per-head QK RMSNorm and full RoPE;
- a conv layer's channels are hidden_size (SGLang and transformers; vLLM reads ``conv_dim``,
  which every release states equal to it: a file stating another one is refused), its state
  ``conv_L_cache - 1`` past inputs of each;
- lfm2's MLP (Lfm2MLP) is SwiGLU of ``block_ff_dim`` (transformers: it wins over
  intermediate_size), shrunk when ``block_auto_adjust_ff_dim`` to int(2/3 of it), times
  ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``; lfm2_moe's dense layers
  (the first ``num_dense_layers``) use intermediate_size as stated and the others route over
  ``num_experts`` experts of moe_intermediate_size, top ``num_experts_per_tok``, no shared one;
- the LM head is tied (vLLM ties it to the embedding whatever the file says); the released
  files say ``tie_embedding``, transformers' name for tie_word_embeddings.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeVar

from pydantic import AliasChoices, Field, model_validator

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    field_error,
    routed_experts,
)

Lfm2LayerType = Literal["conv", "full_attention"]


class Lfm2BaseConfig(DecoderConfig):
    vocab_size: PosInt = 65536
    hidden_size: PosInt = 2560
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = None  # not a config field: the modeling code uses hidden/heads
    max_position_embeddings: PosInt = 128_000
    tie_word_embeddings: bool = Field(
        True, validation_alias=AliasChoices("tie_embedding", "tie_word_embeddings")
    )
    conv_bias: bool = False
    conv_L_cache: int = Field(3, ge=2, le=64)
    conv_dim: PosInt | None = None  # vLLM's conv width; not a transformers field
    layer_types: list[Lfm2LayerType] | None = None  # type: ignore[assignment]

    @model_validator(mode="after")
    def _conv_over_the_hidden_width(self) -> Lfm2BaseConfig:
        if self.conv_dim is not None and self.conv_dim != self.hidden_size:
            raise field_error(
                "conv_dim",
                f"is {self.conv_dim:,}, not hidden_size {self.hidden_size:,}: vLLM builds the "
                "conv over conv_dim, SGLang and transformers over hidden_size",
            )
        return self


class Lfm2Config(Lfm2BaseConfig):
    # transformers pops block_ff_dim over intermediate_size.
    intermediate_size: PosInt = Field(
        12288, validation_alias=AliasChoices("block_ff_dim", "intermediate_size")
    )
    block_multiple_of: PosInt = 256
    block_ffn_dim_multiplier: float | None = 1.0
    block_auto_adjust_ff_dim: bool = True
    full_attn_idxs: list[NonNegInt] | None = None


class Lfm2MoeConfig(Lfm2BaseConfig):
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 7168
    moe_intermediate_size: PosInt = 1792
    num_dense_layers: NonNegInt = 2
    num_experts: PosInt = 32
    num_experts_per_tok: PosInt = 4


L = TypeVar("L", Lfm2Config, Lfm2MoeConfig)


class Lfm2Hybrid(DecoderAdapter[L]):
    """Both families' layers: attention where layer_types says full_attention, a short conv
    elsewhere."""

    mixer_names: ClassVar[dict[str, str]] = {"full_attention": "attn", "conv": "conv"}

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        # Lfm2ForCausalLM / Lfm2MoeForCausalLM tie the LM head to the embedding unconditionally.
        return super().architecture(True)

    def head_dim(self) -> int:
        derived = self.derived_head_dim()
        stated = self.config.head_dim
        if stated is not None and stated != derived:
            self.fail(
                "head_dim",
                f"is {stated}, not hidden_size / num_attention_heads ({derived}), which vLLM's "
                "Lfm2Attention uses whatever the file says",
            )
        return derived

    #: What the configuration class does without layer_types, for the refusal.
    default_layout: ClassVar[str] = "no layout (vLLM then fails)"

    def types(self) -> list[str]:
        stated = self.config.layer_types
        if stated is None:
            name = type(self.reads.target).__name__
            self.fail(
                "layer_types",
                f"missing required field: kvcalc will not assume {name}'s default "
                f"({self.default_layout}), another model's; give the checkpoint's own config.json",
            )
        return list(stated)

    def conv_mixer(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "short_conv",
            "channels": c.hidden_size,
            "conv_kernel": c.conv_L_cache,
            "bias": c.conv_bias,
        }

    def mixers(self) -> Mixers:
        names = [self.mixer_names[t] for t in self.types()]
        return self.hybrid_mixers(names, "attn", "conv", self.conv_mixer)


class Lfm2(Lfm2Hybrid[Lfm2Config]):
    model_types = ("lfm2",)
    config_class = Lfm2Config
    default_layout = "every layer attention, when full_attn_idxs is absent too"

    def types(self) -> list[str]:
        # Lfm2Config derives layer_types from full_attn_idxs when the file states only those
        # (LFM2's first releases); without either it would make every layer attention, another
        # model's layout.
        c = self.config
        if c.layer_types is not None or c.full_attn_idxs is None:
            return super().types()
        beyond = [i for i in c.full_attn_idxs if i >= self.num_layers]
        if beyond:
            n = self.num_layers
            self.fail("full_attn_idxs", f"names layer {beyond[0]}, past the model's {n} layers")
        attention = set(c.full_attn_idxs)
        return ["full_attention" if i in attention else "conv" for i in range(self.num_layers)]

    def mlp_size(self) -> int:
        c = self.config
        size = c.intermediate_size
        if not c.block_auto_adjust_ff_dim:
            return size
        if c.block_ffn_dim_multiplier is None:
            # transformers then skips the rounding that vLLM's Lfm2MLP still applies.
            self.fail(
                "block_ffn_dim_multiplier",
                "is null with block_auto_adjust_ff_dim: vLLM and transformers size the MLP "
                "differently then; give the checkpoint's own config.json",
            )
        size = int(c.block_ffn_dim_multiplier * int(2 * size / 3))
        step = c.block_multiple_of
        return step * -(-size // step)

    def dense_mlp(self) -> dict[str, Any]:
        return {"intermediate_size": self.mlp_size(), "gated": True}


class Lfm2Moe(Lfm2Hybrid[Lfm2MoeConfig]):
    model_types = ("lfm2_moe",)
    config_class = Lfm2MoeConfig

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if c.num_experts_per_tok > c.num_experts:
            self.fail("num_experts_per_tok", f"must be at most num_experts ({c.num_experts})")
        moe = routed_experts(c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size)
        return moe, [i >= c.num_dense_layers for i in range(self.num_layers)]
