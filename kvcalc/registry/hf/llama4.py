"""Llama 4 text model (llama4_text; the language model of the llama4 wrapper).

Defaults: transformers 5.24.0, models/llama4/configuration_llama4.py (Llama4TextConfig).
"""

from __future__ import annotations

from typing import Any

from pydantic import model_validator

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    MoEFlags,
    NonNegInt,
    PosInt,
    every_nth,
    field_error,
    routed_experts,
)


class Llama4TextConfig(DecoderConfig):
    vocab_size: PosInt = 202048
    hidden_size: PosInt = 5120
    intermediate_size: PosInt = 8192
    intermediate_size_mlp: PosInt = 16384
    num_hidden_layers: LayerCount = 48
    num_attention_heads: PosInt = 40
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = 128
    max_position_embeddings: PosInt = 131072
    tie_word_embeddings: bool = False
    num_experts_per_tok: PosInt = 1
    num_local_experts: PosInt = 16
    moe_layers: list[NonNegInt] | None = None
    interleave_moe_layer_step: PosInt = 1
    no_rope_layers: list[NonNegInt] | None = None
    no_rope_layer_interval: PosInt = 4
    attention_chunk_size: PosInt | None = 8192

    @model_validator(mode="after")
    def _one_rope_flag_per_layer(self) -> Llama4TextConfig:
        n = self.num_hidden_layers
        if self.no_rope_layers and len(self.no_rope_layers) != n:
            raise field_error("no_rope_layers", f"must have {n} entries, one per layer")
        return self


class Llama4Text(DecoderAdapter[Llama4TextConfig]):
    model_types = ("llama4_text",)
    config_class = Llama4TextConfig

    def default_layer_kinds(self) -> list[str]:
        # Llama4TextConfig: RoPE layers (no_rope_layers[i] == 1) are chunked; NoPE layers, by
        # default every no_rope_layer_interval-th, attend to the full context. An empty list is
        # treated like an absent one.
        c = self.config
        uses_rope = c.no_rope_layers or [
            not nope for nope in every_nth(self.num_layers, c.no_rope_layer_interval)
        ]
        return ["chunked" if rope else "full" for rope in uses_rope]

    def attention_chunk(self) -> int | None:
        return self.config.attention_chunk_size

    def dense_mlp(self) -> dict[str, Any]:
        return {"intermediate_size": self.config.intermediate_size_mlp, "gated": True}

    def moe_flags(self) -> MoEFlags:
        # Llama4TextMoe: routed experts plus one shared expert, both of intermediate_size.
        c = self.config
        moe = routed_experts(c.num_local_experts, c.num_experts_per_tok, c.intermediate_size)
        moe |= {"shared_experts": 1, "shared_intermediate_size": c.intermediate_size}
        if c.moe_layers is None:
            flags = every_nth(self.num_layers, c.interleave_moe_layer_step)
        else:
            listed = set(c.moe_layers)
            flags = [i in listed for i in range(self.num_layers)]
        return moe, flags

    def irregular_moe_field(self) -> str:
        return "moe_layers"
