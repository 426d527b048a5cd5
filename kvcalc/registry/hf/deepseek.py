"""DeepSeek's multi-head latent attention models: deepseek_v2, deepseek_v3, kimi_k2.

Defaults: transformers 5.24.0, models/deepseek_v{2,3}/configuration_deepseek_v{2,3}.py.
"""

from __future__ import annotations

from typing import Any, TypeVar

from kvcalc.registry.hf.base import (
    Adapter,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    TextConfig,
    experts_field,
    routed_experts,
)


class DeepseekV2Config(TextConfig):
    vocab_size: PosInt = 102400
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 11008
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = None  # MLA caches a latent, not per-head keys
    max_position_embeddings: PosInt = 2048
    tie_word_embeddings: bool = False
    first_k_dense_replace: NonNegInt | None = 0
    kv_lora_rank: PosInt = 512
    q_lora_rank: NonNegInt | None = 1536  # 0 as well as null: uncompressed queries (V2-Lite)
    n_routed_experts: NonNegInt | None = experts_field(
        64, "n_routed_experts", "num_experts", "num_local_experts"
    )
    n_shared_experts: NonNegInt | None = 2
    qk_nope_head_dim: PosInt = 128
    qk_rope_head_dim: PosInt = 64
    v_head_dim: PosInt = 128
    num_experts_per_tok: PosInt | None = None
    moe_intermediate_size: PosInt = 1407
    # moe_layer_freq is not a transformers field (DeepSeek's own configuration_deepseek.py has
    # it); transformers makes every layer from first_k_dense_replace on MoE, i.e. a period of 1.
    moe_layer_freq: PosInt = 1
    # The MTP layers past num_hidden_layers (DeepSeek-V3's 1): vLLM loads them (deepseek_mtp.py)
    # only with speculative decoding. None (absent): none, a rule rather than a class default.
    num_nextn_predict_layers: NonNegInt | None = None


class DeepseekV3Config(DeepseekV2Config):
    vocab_size: PosInt = 129280
    hidden_size: PosInt = 7168
    intermediate_size: PosInt = 18432
    moe_intermediate_size: PosInt = 2048
    num_hidden_layers: LayerCount = 61
    num_attention_heads: PosInt = 128
    num_key_value_heads: PosInt | None = 128
    n_shared_experts: NonNegInt | None = 1
    n_routed_experts: NonNegInt | None = experts_field(
        256, "n_routed_experts", "num_experts", "num_local_experts"
    )
    kv_lora_rank: PosInt = 512
    q_lora_rank: NonNegInt | None = 1536
    qk_rope_head_dim: PosInt = 64
    v_head_dim: PosInt = 128
    qk_nope_head_dim: PosInt = 128
    num_experts_per_tok: PosInt = 8  # V3 has a default, and null is refused
    first_k_dense_replace: NonNegInt | None = 3
    moe_layer_freq: PosInt = 1
    max_position_embeddings: PosInt = 4096
    tie_word_embeddings: bool = False


DS = TypeVar("DS", bound=DeepseekV2Config)


class DeepseekMLA(Adapter[DS]):
    """Multi-head latent attention on every layer; MoE from first_k_dense_replace on."""

    def mixers(self) -> Mixers:
        c = self.config
        mla: dict[str, Any] = {
            "kind": "mla",
            "kv_lora_rank": c.kv_lora_rank,
            "qk_rope_head_dim": c.qk_rope_head_dim,
            "qk_nope_head_dim": c.qk_nope_head_dim,
            "v_head_dim": c.v_head_dim,
            "q_lora_rank": c.q_lora_rank or None,
        }
        return {"mla": mla}, ["mla"] * self.num_layers

    def dense_mlp(self) -> dict[str, Any]:
        return {"intermediate_size": self.config.intermediate_size, "gated": True}

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        arch = super().architecture(tied_embeddings)
        mtp = self.config.num_nextn_predict_layers  # None (absent): no MTP layer
        return arch | {"mtp_layers": mtp} if mtp else arch

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if not c.n_routed_experts:
            return None, [False] * self.num_layers
        if c.num_experts_per_tok is None:
            # DeepseekV2Config's default is None, which its MoE gate cannot route with.
            self.fail("num_experts_per_tok", "must be an integer, not null (a MoE model states it)")
        moe = routed_experts(c.n_routed_experts, c.num_experts_per_tok, c.moe_intermediate_size)
        shared = c.n_shared_experts or 0
        if shared:  # DeepSeek fuses the shared experts into one MLP of shared x moe_intermediate
            moe |= {"shared_experts": shared, "shared_intermediate_size": c.moe_intermediate_size}
        first = c.first_k_dense_replace or 0
        freq = c.moe_layer_freq
        return moe, [i >= first and i % freq == 0 for i in range(self.num_layers)]


class DeepseekV2(DeepseekMLA[DeepseekV2Config]):
    model_types = ("deepseek_v2",)
    config_class = DeepseekV2Config


class DeepseekV3(DeepseekMLA[DeepseekV3Config]):
    # Kimi-K2 ships its own copy of DeepseekV3Config (auto_map configuration_deepseek.py);
    # transformers has no kimi_k2 class, so the DeepseekV3Config defaults stand in.
    model_types = ("deepseek_v3", "kimi_k2")
    config_class = DeepseekV3Config
