"""MiniMax-M2 (minimax_m2: M2, M2.1, M2.5, M2.7): grouped-query softmax attention on every
layer, routed experts on every layer.

Defaults: transformers 5.24.0, models/minimax_m2/configuration_minimax_m2.py (its defaults are
MiniMax-M2's own shape). ``rotary_dim`` (RoPE on 64 of 128 dims) and the QK-norm leave the KV
unchanged; the ``num_mtp_modules`` multi-token-prediction modules are dropped by vLLM's loader
(``minimax_m2.py``: "Drop spec-decode (MTP) layers"), so they hold no cache and are not sized.
"""

from __future__ import annotations

from typing import Any

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    MoEFlags,
    NonNegInt,
    PosInt,
    experts_field,
    moe_on_every_layer,
)


class MiniMaxM2Config(DecoderConfig):
    vocab_size: PosInt = 200064
    hidden_size: PosInt = 3072
    intermediate_size: PosInt = 1536  # the width of one routed expert
    num_hidden_layers: LayerCount = 62
    num_attention_heads: PosInt = 48
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = 128
    max_position_embeddings: PosInt = 196608
    tie_word_embeddings: bool = False
    num_experts_per_tok: PosInt = 8
    num_local_experts: PosInt = experts_field(256, "num_local_experts", "num_experts")
    # Not MiniMaxM2Config fields: the released config.json states them. None: RoPE over the
    # whole head; every layer softmax attention.
    rotary_dim: PosInt | None = None
    attn_type_list: list[NonNegInt] | None = None


class MiniMaxM2(DecoderAdapter[MiniMaxM2Config]):
    model_types = ("minimax_m2",)
    family = "minimax"
    config_class = MiniMaxM2Config

    def layer_kinds(self) -> list[str]:
        # MiniMax-M1 / Text-01 (model_type minimax) mark lightning layers 0 in attn_type_list;
        # MiniMax-M2's modeling code has softmax attention only, so any 0 is not this model.
        types = self.config.attn_type_list
        if types is not None:
            if len(types) != self.num_layers:
                self.fail("attn_type_list", f"must list {self.num_layers} entries, one per layer")
            if any(t != 1 for t in types):
                self.fail(
                    "attn_type_list",
                    "minimax_m2 has softmax attention (1) on every layer; a lightning layer (0) "
                    "is MiniMax-M1's architecture (model_type minimax), not modelled for this type",
                )
        return ["full"] * self.num_layers

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if c.num_experts_per_tok > c.num_local_experts:
            self.fail(
                "num_experts_per_tok", f"must be at most num_local_experts ({c.num_local_experts})"
            )
        return moe_on_every_layer(
            c.num_local_experts, c.num_experts_per_tok, c.intermediate_size, self.num_layers
        )

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        dims = self.config.rotary_dim or self.head_dim()
        if dims > self.head_dim():
            self.fail("rotary_dim", f"must be at most head_dim ({self.head_dim()})")
        positions = self.config.max_position_embeddings
        return super().architecture(tied_embeddings) | {"rotary_caches": [[positions, dims]]}
