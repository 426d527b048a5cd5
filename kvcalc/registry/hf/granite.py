"""IBM Granite-4.0-H (granitemoehybrid): Mamba-2 layers with a few attention layers, every layer
followed by routed experts (when num_local_experts > 0) and a shared MLP.

Defaults: transformers 5.24.0, models/granitemoehybrid/configuration_granitemoehybrid.py. The
modeling code (modeling_granitemoehybrid.py) builds a Mamba-2 mixer on a "linear_attention"
layer and attention on any other; configuration_utils remaps the released files' legacy names
("mamba" -> "linear_attention", "attention" -> "full_attention"), and an omitted layer_types
means every layer is Mamba-2.
"""

from __future__ import annotations

from typing import Any, Literal

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

GraniteLayerType = Literal["mamba", "linear_attention", "attention", "full_attention"]
#: The layer types that are Mamba-2 mixers; the others are softmax attention.
MAMBA_LAYER_TYPES = ("mamba", "linear_attention")


class GraniteMoeHybridConfig(DecoderConfig):
    vocab_size: PosInt = 32000
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 11008  # the width of one routed expert
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = None
    head_dim: PosInt | None = None  # not a config field: the modeling code uses hidden/heads
    max_position_embeddings: PosInt = 2048
    tie_word_embeddings: bool = False
    num_local_experts: NonNegInt = 8  # 0: no routed experts, only the shared MLP (H-Micro)
    num_experts_per_tok: NonNegInt = 2
    shared_intermediate_size: PosInt = 1024
    position_embedding_type: str | None = None  # "rope", else none (Granite-4.0-H: "nope")
    # attribute_map: layers_block_type is the same field.
    layer_types: list[GraniteLayerType] | None = Field(  # type: ignore[assignment]
        None, validation_alias=AliasChoices("layer_types", "layers_block_type")
    )
    mamba_n_heads: PosInt = 128
    mamba_n_groups: PosInt = 1
    mamba_d_state: PosInt = 256
    mamba_d_head: PosInt | Literal["auto"] = "auto"  # "auto": mamba_expand x hidden / n_heads
    mamba_d_conv: PosInt = 4
    mamba_expand: PosInt = 2

    @model_validator(mode="after")
    def _mamba_heads_fill_the_inner_width(self) -> GraniteMoeHybridConfig:
        # GraniteMoeHybridConfig.validate_architecture refuses these too.
        inner = self.mamba_expand * self.hidden_size
        if inner % self.mamba_n_heads:
            raise field_error(
                "mamba_n_heads", f"must divide mamba_expand x hidden_size ({inner:,})"
            )
        if self.mamba_d_head != "auto" and self.mamba_d_head * self.mamba_n_heads != inner:
            raise field_error(
                "mamba_d_head",
                f"x mamba_n_heads must equal mamba_expand x hidden_size ({inner:,})",
            )
        return self


class GraniteMoeHybrid(DecoderAdapter[GraniteMoeHybridConfig]):
    model_types = ("granitemoehybrid",)
    family = "granite"
    config_class = GraniteMoeHybridConfig

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        # Only "rope" builds a RoPE table (GraniteMoeHybridModel); Granite-4.0-H says "nope".
        arch = super().architecture(tied_embeddings)
        if self.config.position_embedding_type != "rope":
            arch["rotary_caches"] = []
        return arch

    def mamba_head_dim(self) -> int:
        c = self.config
        if c.mamba_d_head == "auto":
            return c.mamba_expand * c.hidden_size // c.mamba_n_heads
        return c.mamba_d_head

    def mamba_mixer(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "mamba2",
            "n_heads": c.mamba_n_heads,
            "head_dim": self.mamba_head_dim(),
            "n_groups": c.mamba_n_groups,
            "d_state": c.mamba_d_state,
            "d_conv": c.mamba_d_conv,
        }

    def mixers(self) -> Mixers:
        types = self.config.layer_types or ["linear_attention"] * self.num_layers
        names = ["mamba" if t in MAMBA_LAYER_TYPES else "attn" for t in types]
        return self.hybrid_mixers(names, "attn", "mamba", self.mamba_mixer)

    def dense_mlp(self) -> dict[str, Any]:
        # Without routed experts the shared MLP (gated, GraniteMoeHybridMLP) is the whole FFN.
        return {"intermediate_size": self.config.shared_intermediate_size, "gated": True}

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if c.num_local_experts == 0:
            return None, [False] * self.num_layers
        if not 1 <= c.num_experts_per_tok <= c.num_local_experts:
            self.fail(
                "num_experts_per_tok",
                f"must be between 1 and num_local_experts ({c.num_local_experts})",
            )
        moe = routed_experts(c.num_local_experts, c.num_experts_per_tok, c.intermediate_size)
        # The shared MLP runs beside the routed experts on every layer: one gated shared expert.
        moe |= {"shared_experts": 1, "shared_intermediate_size": c.shared_intermediate_size}
        return moe, [True] * self.num_layers
