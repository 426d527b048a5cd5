"""GLM-4.5 / 4.6 / 4.7 (glm4_moe): grouped-query softmax attention on every layer, dense MLPs
on the first first_k_dense_replace layers and routed plus shared experts on the rest; and
GLM-4.7-Flash (glm4_moe_lite), the same MoE over DeepSeek's multi-head latent attention.

Defaults: transformers 5.24.0, models/glm4_moe/configuration_glm4_moe.py. head_dim is not a
Glm4MoeConfig field: the modeling code (Glm4MoeAttention) uses the config's head_dim when the
file states one (GLM-4.5: 128, against 5120 / 96) and hidden_size / heads otherwise, as vLLM's
glm4_moe.py does. The num_nextn_predict_layers MTP layers hold KV only under speculative
decoding (vLLM glm4_moe_mtp.py): stated (mtp_layers), counted in no total.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, cast

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    TextConfig,
    experts_field,
    routed_experts,
)
from kvcalc.registry.hf.deepseek import DeepseekMLA, DeepseekV2Config
from kvcalc.registry.hf.deepseek_v32 import DeepseekV32, DeepseekV32Config


class Glm4MoeConfig(DecoderConfig):
    vocab_size: PosInt = 151552
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 10944
    num_hidden_layers: LayerCount = 46
    num_attention_heads: PosInt = 96
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 131072
    tie_word_embeddings: bool = False
    moe_intermediate_size: PosInt = 1408
    num_experts_per_tok: PosInt = 8
    n_shared_experts: NonNegInt = 1
    n_routed_experts: NonNegInt = experts_field(128, "n_routed_experts", "num_local_experts")
    first_k_dense_replace: NonNegInt = 1
    # __post_init__: kwargs.setdefault("partial_rotary_factor", 0.5).
    partial_rotary_factor: float = 0.5
    # The MTP layers (Glm4MoeMTP); None (absent): none, a rule rather than a class default.
    num_nextn_predict_layers: NonNegInt | None = None


class Glm4Moe(DecoderAdapter[Glm4MoeConfig]):
    model_types = ("glm4_moe",)
    family = "glm"
    config_class = Glm4MoeConfig

    def head_dim(self) -> int:
        c = self.config
        if c.head_dim is None and c.hidden_size % c.num_attention_heads:
            # The modeling code would floor hidden_size // heads; GLM-4.5's 5120 / 96 is not its
            # 128, so a file that states no head_dim is not sized with a floored guess.
            self.fail(
                "head_dim",
                f"missing required field: hidden_size {c.hidden_size} is not divisible by "
                f"{c.num_attention_heads} heads, and kvcalc will not assume Glm4MoeConfig's "
                "hidden_size // heads; give the checkpoint's own config.json",
            )
        return super().head_dim()

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if not c.n_routed_experts:
            return None, [False] * self.num_layers
        if c.num_experts_per_tok > c.n_routed_experts:
            self.fail(
                "num_experts_per_tok", f"must be at most n_routed_experts ({c.n_routed_experts})"
            )
        moe = routed_experts(c.n_routed_experts, c.num_experts_per_tok, c.moe_intermediate_size)
        if c.n_shared_experts:  # one fused MLP of n_shared_experts x moe_intermediate_size
            moe |= {
                "shared_experts": c.n_shared_experts,
                "shared_intermediate_size": c.moe_intermediate_size,
            }
        first = c.first_k_dense_replace
        return moe, [i >= first for i in range(self.num_layers)]

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        factor = self.config.partial_rotary_factor
        if not 0 < factor <= 1:
            self.fail("partial_rotary_factor", f"must be in (0, 1], got {factor}")
        dims = int(self.head_dim() * factor)
        positions = self.config.max_position_embeddings
        arch = super().architecture(tied_embeddings) | {"rotary_caches": [[positions, dims]]}
        mtp = self.config.num_nextn_predict_layers
        return arch | {"mtp_layers": mtp} if mtp else arch


class Glm4MoeLiteConfig(DeepseekV2Config):
    """GLM-4.7-Flash (glm4_moe_lite): DeepSeek's multi-head latent attention with GLM's MoE.
    Defaults: transformers 5.24.0, models/glm4_moe_lite/configuration_glm4_moe_lite.py."""

    #: vLLM's glm4_moe_lite.py reads moe_layer_freq with getattr(config, ..., 1): every layer
    #: from first_k_dense_replace on is MoE when the file states none.
    documented_defaults: ClassVar[frozenset[str]] = TextConfig.documented_defaults | {
        "moe_layer_freq"
    }

    vocab_size: PosInt = 154880
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 10240
    moe_intermediate_size: PosInt = 1536
    num_hidden_layers: LayerCount = 47
    num_attention_heads: PosInt = 20
    num_key_value_heads: PosInt | None = 20
    n_shared_experts: NonNegInt | None = 1
    n_routed_experts: NonNegInt | None = experts_field(64, "n_routed_experts", "num_local_experts")
    kv_lora_rank: PosInt = 512
    q_lora_rank: NonNegInt | None = 768
    qk_rope_head_dim: PosInt = 64
    v_head_dim: PosInt = 256
    qk_nope_head_dim: PosInt = 192
    num_experts_per_tok: PosInt | None = 4
    max_position_embeddings: PosInt = 202752
    tie_word_embeddings: bool = False
    # Not a Glm4MoeLiteConfig field, but what vLLM's glm4_moe_lite.py reads; the class's own
    # rule (mlp_layer_types None: one dense layer, then sparse) is the same layout.
    first_k_dense_replace: NonNegInt | None = 1
    mlp_layer_types: list[Literal["dense", "sparse"]] | None = None
    # DeepSeek Sparse Attention's indexer keys (GLM-5's glm_moe_dsa); none in GLM-4.7-Flash.
    index_topk: PosInt | None = None


class Glm4MoeLite(DeepseekMLA[Glm4MoeLiteConfig]):
    """MLA on every layer (vLLM: Glm4MoeLiteMLAAttention is DeepseekV2MLAAttention, caching the
    kv_lora_rank latent and the qk_rope_head_dim key), MoE from first_k_dense_replace on."""

    model_types = ("glm4_moe_lite",)
    family = "glm"
    config_class = Glm4MoeLiteConfig

    def mixers(self) -> Mixers:
        if self.config.index_topk is not None:
            self.fail(
                "index_topk",
                "a sparse-attention indexer is not modelled for glm4_moe_lite; write a "
                "registry file",
            )
        return super().mixers()

    def moe_flags(self) -> MoEFlags:
        moe, flags = super().moe_flags()
        types = self.config.mlp_layer_types
        if moe is None or types is None:
            return moe, flags
        if len(types) != self.num_layers:
            self.fail("mlp_layer_types", f"must list {self.num_layers} entries, one per layer")
        stated = [t == "sparse" for t in types]
        if stated != flags:
            # vLLM builds its MoE layers from first_k_dense_replace, not this list.
            self.fail(
                "mlp_layer_types",
                "disagrees with first_k_dense_replace, which vLLM builds the MoE layers from",
            )
        return moe, flags


class GlmMoeDsaConfig(DeepseekV32Config):
    """GLM-5 (glm_moe_dsa): DeepSeek-V3.2's indexed MLA with GLM's widths. Defaults:
    transformers 5.20.2, models/glm_moe_dsa/configuration_glm_moe_dsa.py."""

    #: vLLM 0.19 builds GlmMoeDsaForCausalLM as DeepseekV2ForCausalLM, which reads moe_layer_freq
    #: with getattr(config, ..., 1) (every layer from first_k_dense_replace on is MoE);
    #: GlmMoeDsaConfig has no such field, so save_pretrained never writes it.
    documented_defaults: ClassVar[frozenset[str]] = TextConfig.documented_defaults | {
        "moe_layer_freq"
    }

    vocab_size: PosInt = 154880
    hidden_size: PosInt = 6144
    intermediate_size: PosInt = 12288
    moe_intermediate_size: PosInt = 2048
    num_hidden_layers: LayerCount = 78
    num_attention_heads: PosInt = 64
    num_key_value_heads: PosInt | None = 64
    n_shared_experts: NonNegInt | None = 1
    n_routed_experts: NonNegInt | None = experts_field(256, "n_routed_experts", "num_local_experts")
    kv_lora_rank: PosInt = 512
    q_lora_rank: NonNegInt | None = 2048
    qk_rope_head_dim: PosInt = 64
    v_head_dim: PosInt = 256
    qk_nope_head_dim: PosInt = 192
    num_experts_per_tok: PosInt = 8
    max_position_embeddings: PosInt = 202752
    tie_word_embeddings: bool = False
    first_k_dense_replace: NonNegInt | None = 3
    index_topk: PosInt = 2048
    index_head_dim: PosInt = 128
    index_n_heads: PosInt = 32
    mlp_layer_types: list[Literal["dense", "sparse"]] | None = None
    # "full" / "shared" per layer (GLM-5.2's: a shared layer reuses the previous full layer's
    # top-k). vLLM 0.19 builds the indexer, and its key cache, on every layer whatever this
    # says (DeepseekV2 is_v32 = hasattr(config, "index_topk")), so kvcalc reads no more.
    indexer_types: list[Literal["full", "shared"]] | None = None


class GlmMoeDsa(DeepseekV32):
    """Indexed MLA on every layer (vLLM 0.19 GlmMoeDsaForCausalLM: DeepseekV2 with the
    DeepSeek-V3.2 indexer, its fp8 key cache beside the latent), MoE from
    first_k_dense_replace on."""

    model_types = ("glm_moe_dsa",)
    family = "glm"
    config_class = GlmMoeDsaConfig

    def moe_flags(self) -> MoEFlags:
        moe, flags = super().moe_flags()
        types = cast(GlmMoeDsaConfig, self.config).mlp_layer_types
        if moe is None or types is None:
            return moe, flags
        if [t == "sparse" for t in types] != flags or len(types) != self.num_layers:
            self.fail(
                "mlp_layer_types",
                "disagrees with first_k_dense_replace, which vLLM builds the MoE layers from",
            )
        return moe, flags
