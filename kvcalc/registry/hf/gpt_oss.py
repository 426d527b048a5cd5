"""gpt-oss: alternating sliding and full attention, MoE on every layer.

Defaults: transformers 5.24.0, models/gpt_oss/configuration_gpt_oss.py.
"""

from __future__ import annotations

from kvcalc.registry.hf.base import (
    LayerCount,
    MoEFlags,
    PosInt,
    WindowAdapter,
    WindowConfig,
    every_nth,
    experts_field,
    moe_on_every_layer,
)


class GptOssConfig(WindowConfig):
    num_hidden_layers: LayerCount = 36
    num_local_experts: PosInt = experts_field(128, "num_local_experts", "num_experts")
    vocab_size: PosInt = 201088
    hidden_size: PosInt = 2880
    intermediate_size: PosInt = 2880
    head_dim: PosInt | None = 64
    num_attention_heads: PosInt = 64
    num_key_value_heads: PosInt | None = 8
    sliding_window: PosInt | None = 128
    tie_word_embeddings: bool = False
    max_position_embeddings: PosInt = 131072
    num_experts_per_tok: PosInt = 4


class GptOss(WindowAdapter[GptOssConfig]):
    model_types = ("gpt_oss",)
    family = "gpt-oss"
    config_class = GptOssConfig

    def default_layer_kinds(self) -> list[str]:
        # GptOssConfig: even-indexed layers slide, odd ones attend globally.
        return ["full" if f else "sliding" for f in every_nth(self.num_layers, 2)]

    def moe_flags(self) -> MoEFlags:
        c = self.config
        return moe_on_every_layer(
            c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, self.num_layers
        )
