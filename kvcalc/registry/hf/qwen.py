"""Qwen: qwen2, qwen3 (dense), qwen2_moe, qwen3_moe, qwen3_next (hybrid linear attention), the
language models of Qwen3.5 / Qwen3.6 (qwen3_5_text, qwen3_5_moe_text: Qwen3-Next's hybrid,
dense or MoE, with the config stating its gate and state dtype) and of Qwen3-VL
(qwen3_vl_text, qwen3_vl_moe_text: Qwen3's decoders).

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py; Qwen3.5's from
transformers 5.20.2 (the newest inside vLLM 0.33's pin).
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from kvcalc.registry.hf.base import (
    TORCH_DTYPES,
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    WindowAdapter,
    WindowConfig,
    every_nth,
    experts_field,
    routed_experts,
)

# ---------------------------------------------------------------- configs


class QwenWindowConfig(WindowConfig):
    """Qwen states a window it may not use: sliding_window counts only with use_sliding_window."""

    use_sliding_window: bool


class QwenMoeConfig(DecoderConfig):
    """The keys of Qwen's sparse MoE block (Qwen2MoeSparseMoeBlock and its successors)."""

    decoder_sparse_step: PosInt
    moe_intermediate_size: PosInt
    num_experts_per_tok: PosInt
    num_experts: NonNegInt  # 0: a dense model
    mlp_only_layers: list[NonNegInt] | None


class Qwen2Config(QwenWindowConfig):
    vocab_size: PosInt = 151936
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 22016
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 32
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 32768
    tie_word_embeddings: bool = False
    use_sliding_window: bool = False
    sliding_window: PosInt | None = 4096
    max_window_layers: NonNegInt = 28


class Qwen3Config(Qwen2Config):
    head_dim: PosInt | None = 128


class Qwen2MoeConfig(QwenWindowConfig, QwenMoeConfig):
    vocab_size: PosInt = 151936
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 5632
    num_hidden_layers: LayerCount = 24
    num_attention_heads: PosInt = 16
    num_key_value_heads: PosInt | None = 16
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 32768
    tie_word_embeddings: bool = False
    use_sliding_window: bool = False
    sliding_window: PosInt | None = 4096
    max_window_layers: NonNegInt = 28
    decoder_sparse_step: PosInt = 1
    moe_intermediate_size: PosInt = 1408
    shared_expert_intermediate_size: NonNegInt = 5632
    num_experts_per_tok: PosInt = 4
    num_experts: NonNegInt = experts_field(60, "num_experts", "num_local_experts")
    mlp_only_layers: list[NonNegInt] | None = []


class Qwen3MoeConfig(QwenWindowConfig, QwenMoeConfig):
    vocab_size: PosInt = 151936
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 6144
    num_hidden_layers: LayerCount = 24
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 4
    head_dim: PosInt | None = (
        None  # not a Qwen3MoeConfig field: the modeling code uses hidden/heads
    )
    max_position_embeddings: PosInt = 32768
    tie_word_embeddings: bool = False
    use_sliding_window: bool = False
    sliding_window: PosInt | None = 4096
    decoder_sparse_step: PosInt = 1
    moe_intermediate_size: PosInt = 768
    num_experts_per_tok: PosInt = 8
    num_experts: NonNegInt = experts_field(128, "num_experts", "num_local_experts")
    mlp_only_layers: list[NonNegInt] | None = []


class Qwen3NextConfig(QwenMoeConfig):
    vocab_size: PosInt = 151936
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 5632
    num_hidden_layers: LayerCount = 48
    num_attention_heads: PosInt = 16
    num_key_value_heads: PosInt | None = 2
    head_dim: PosInt | None = 256
    partial_rotary_factor: float = 0.25
    max_position_embeddings: PosInt = 32768
    tie_word_embeddings: bool = False
    full_attention_interval: PosInt = 4
    linear_conv_kernel_dim: PosInt = 4
    linear_key_head_dim: PosInt = 128
    linear_value_head_dim: PosInt = 128
    linear_num_key_heads: PosInt = 16
    linear_num_value_heads: PosInt = 32
    decoder_sparse_step: PosInt = 1
    moe_intermediate_size: PosInt = 512
    shared_expert_intermediate_size: NonNegInt = 512
    num_experts_per_tok: PosInt = 10
    num_experts: NonNegInt = experts_field(512, "num_experts", "num_local_experts")
    mlp_only_layers: list[NonNegInt] | None = []
    # Qwen3NextConfig's layers are gated attention or Gated DeltaNet, not sliding or chunked.
    layer_types: list[Literal["full_attention", "linear_attention"]] | None = None  # type: ignore[assignment]


class Qwen35Keys(DecoderConfig):
    """The keys Qwen3.5's text configs add to Qwen3-Next's layout. attn_output_gate and
    mamba_ssm_dtype are not class fields (save_pretrained writes them from the kwargs): absent,
    vLLM's Qwen3NextAttention gates (``getattr(config, "attn_output_gate", True)``) and the
    temporal state follows ``--mamba-ssm-cache-dtype auto``, the model dtype. The MTP layers
    (mtp_num_hidden_layers) are loaded only with speculative decoding: vLLM drops ``mtp.``
    weights otherwise, so they size nothing here."""

    full_attention_interval: PosInt = 4  # Qwen3_5TextConfig.__post_init__ pops it, default 4
    partial_rotary_factor: float = 0.25  # __post_init__: kwargs.setdefault(..., 0.25)
    linear_conv_kernel_dim: PosInt = 4
    linear_key_head_dim: PosInt = 128
    linear_value_head_dim: PosInt = 128
    linear_num_key_heads: PosInt = 16
    linear_num_value_heads: PosInt = 32
    attn_output_gate: bool = True
    mamba_ssm_dtype: Literal["float32", "bfloat16", "float16"] | None = None
    mtp_num_hidden_layers: NonNegInt = 0  # Qwen3_5TextConfig has no such field: absent, none
    layer_types: list[Literal["full_attention", "linear_attention"]] | None = None  # type: ignore[assignment]


class Qwen35TextConfig(Qwen35Keys):
    """Qwen3_5TextConfig."""

    vocab_size: PosInt = 248320
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 12288
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 16
    num_key_value_heads: PosInt | None = 4
    head_dim: PosInt | None = 256
    max_position_embeddings: PosInt = 32768
    tie_word_embeddings: bool = False


class Qwen35MoeTextConfig(Qwen35Keys, QwenMoeConfig):
    """Qwen3_5MoeTextConfig: every layer MoE (no decoder_sparse_step or mlp_only_layers in the
    class, nor in vLLM's Qwen3_5DecoderLayer), with one gated shared expert."""

    vocab_size: PosInt = 248320
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 512  # not a class field: unused by the MoE layers
    num_hidden_layers: LayerCount = 40
    num_attention_heads: PosInt = 16
    num_key_value_heads: PosInt | None = 2
    head_dim: PosInt | None = 256
    max_position_embeddings: PosInt = 32768
    tie_word_embeddings: bool = False
    decoder_sparse_step: PosInt = 1
    moe_intermediate_size: PosInt = 512
    shared_expert_intermediate_size: NonNegInt = 512
    num_experts_per_tok: PosInt = 8
    num_experts: NonNegInt = experts_field(256, "num_experts", "num_local_experts")
    mlp_only_layers: list[NonNegInt] | None = []


class Qwen3VLTextConfig(DecoderConfig):
    """Qwen3VLTextConfig: Qwen3's dense decoder with no sliding window (M-RoPE changes positions,
    not shapes or caches). tie_word_embeddings is PreTrainedConfig's; the wrapper's governs."""

    vocab_size: PosInt = 151936
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 22016
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 32
    head_dim: PosInt | None = 128
    max_position_embeddings: PosInt = 128000
    tie_word_embeddings: bool = True


class Qwen3VLMoeTextConfig(QwenMoeConfig):
    """Qwen3VLMoeTextConfig: Qwen3-MoE's decoder, no shared expert."""

    vocab_size: PosInt = 151936
    hidden_size: PosInt = 2048
    intermediate_size: PosInt = 5632
    num_hidden_layers: LayerCount = 24
    num_attention_heads: PosInt = 16
    num_key_value_heads: PosInt | None = 16
    head_dim: PosInt | None = None
    max_position_embeddings: PosInt = 128000
    tie_word_embeddings: bool = True
    decoder_sparse_step: PosInt = 1
    moe_intermediate_size: PosInt = 1408
    num_experts_per_tok: PosInt = 4
    num_experts: NonNegInt = experts_field(60, "num_experts", "num_local_experts")
    mlp_only_layers: list[NonNegInt] | None = None


# ---------------------------------------------------------------- adapters


def used_window(config: QwenWindowConfig) -> int | None:
    # Qwen2.5 states a 131072 window it never uses: use_sliding_window is false.
    return config.sliding_window if config.use_sliding_window else None


class Qwen(WindowAdapter[Qwen2Config]):
    """Qwen2Config/Qwen3Config: layers from max_window_layers on slide, if a window is used."""

    model_types = ("qwen2",)
    config_class = Qwen2Config

    def default_layer_kinds(self) -> list[str]:
        first = self.config.max_window_layers
        return ["sliding" if i >= first else "full" for i in range(self.num_layers)]

    def sliding_window(self) -> int | None:
        return used_window(self.config)


class Qwen3(Qwen):
    model_types = ("qwen3",)
    config_class = Qwen3Config


M = TypeVar("M", bound=QwenMoeConfig)


class QwenMoE(DecoderAdapter[M]):
    """Qwen2MoeDecoderLayer and successors: MoE unless listed in mlp_only_layers, on every
    decoder_sparse_step-th layer."""

    def shared_expert_size(self) -> int:
        """The width of the one gated shared expert (0: none)."""
        return 0

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if not c.num_experts:
            return None, [False] * self.num_layers
        moe = routed_experts(c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size)
        shared = self.shared_expert_size()
        if shared:  # one gated shared expert of this width (Qwen2MoeSparseMoeBlock)
            moe |= {"shared_experts": 1, "shared_intermediate_size": shared}
        dense = set(c.mlp_only_layers or [])
        sparse = every_nth(self.num_layers, c.decoder_sparse_step)
        return moe, [s and i not in dense for i, s in enumerate(sparse)]

    def irregular_moe_field(self) -> str:
        return "mlp_only_layers"


class Qwen2Moe(QwenMoE[Qwen2MoeConfig]):
    model_types = ("qwen2_moe",)
    config_class = Qwen2MoeConfig

    def default_layer_kinds(self) -> list[str]:
        # Qwen2MoeConfig: even-indexed layers below max_window_layers slide.
        below = self.config.max_window_layers
        return ["sliding" if i % 2 == 0 and i < below else "full" for i in range(self.num_layers)]

    def sliding_window(self) -> int | None:
        return used_window(self.config)

    def shared_expert_size(self) -> int:
        return self.config.shared_expert_intermediate_size


class Qwen3Moe(QwenMoE[Qwen3MoeConfig]):
    model_types = ("qwen3_moe",)
    config_class = Qwen3MoeConfig

    def default_layer_kinds(self) -> list[str]:
        return ["sliding"] * self.num_layers  # one window on every layer, if it is used

    def sliding_window(self) -> int | None:
        return used_window(self.config)


G = TypeVar("G", Qwen3NextConfig, Qwen35TextConfig, Qwen35MoeTextConfig)


class GatedDeltaNetHybrid(DecoderAdapter[G]):
    """Qwen3-Next's layout: gated attention on every full_attention_interval-th layer (or as
    layer_types states), Gated DeltaNet elsewhere."""

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        # RoPE rotates partial_rotary_factor of each head (64 of 256): the table is that wide.
        factor = self.config.partial_rotary_factor
        if not 0 < factor <= 1:
            self.fail("partial_rotary_factor", f"must be in (0, 1], got {factor}")
        dims = int(self.head_dim() * factor)
        positions = self.config.max_position_embeddings
        return super().architecture(tied_embeddings) | {"rotary_caches": [[positions, dims]]}

    def deltanet_mixer(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "gated_deltanet",
            "k_heads": c.linear_num_key_heads,
            "v_heads": c.linear_num_value_heads,
            "k_head_dim": c.linear_key_head_dim,
            "v_head_dim": c.linear_value_head_dim,
            "conv_kernel": c.linear_conv_kernel_dim,
        }

    def mixers(self) -> Mixers:
        c = self.config
        if c.layer_types is None:
            full = every_nth(self.num_layers, c.full_attention_interval)
        else:
            full = [t == "full_attention" for t in c.layer_types]
        names = ["full" if f else "linear" for f in full]
        return self.hybrid_mixers(names, "full", "linear", self.deltanet_mixer)


class Qwen3Next(GatedDeltaNetHybrid[Qwen3NextConfig], QwenMoE[Qwen3NextConfig]):
    """Gated attention on every full_attention_interval-th layer, Gated DeltaNet elsewhere."""

    model_types = ("qwen3_next",)
    config_class = Qwen3NextConfig

    def shared_expert_size(self) -> int:
        return self.config.shared_expert_intermediate_size


Q35 = TypeVar("Q35", Qwen35TextConfig, Qwen35MoeTextConfig)


class Qwen35Hybrid(GatedDeltaNetHybrid[Q35]):
    """Qwen3.5 / Qwen3.6: Qwen3-Next's layers, the attention gate and the SSM state dtype as the
    config states them (vLLM 0.33 Qwen3_5ForConditionalGenerationConfig: the temporal state in
    ``mamba_ssm_dtype``, float32 in every release)."""

    def mixers(self) -> Mixers:
        mixers, names = super().mixers()
        if "full" in mixers and self.config.attn_output_gate:
            mixers["full"] = mixers["full"] | {"output_gate": True}
        return mixers, names

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        arch = super().architecture(tied_embeddings)
        if self.config.mtp_num_hidden_layers:
            arch |= {"mtp_layers": self.config.mtp_num_hidden_layers}
        stated = self.config.mamba_ssm_dtype
        if stated is None or "linear" not in arch["pattern"]:
            return arch
        return arch | {"ssm_state_dtype": TORCH_DTYPES[stated]}


class Qwen35(Qwen35Hybrid[Qwen35TextConfig]):
    model_types = ("qwen3_5_text",)
    config_class = Qwen35TextConfig


class Qwen35Moe(Qwen35Hybrid[Qwen35MoeTextConfig], QwenMoE[Qwen35MoeTextConfig]):
    model_types = ("qwen3_5_moe_text",)
    config_class = Qwen35MoeTextConfig

    def shared_expert_size(self) -> int:
        return self.config.shared_expert_intermediate_size

    def moe_flags(self) -> MoEFlags:
        # vLLM's Qwen3_5DecoderLayer gives every layer of a qwen3_5_moe_text model the sparse MoE
        # block; a config stating fewer MoE layers describes a model it would not build.
        c = self.config
        if not c.num_experts:
            self.fail("num_experts", "must be at least 1: every Qwen3.5-MoE layer is MoE")
        if c.decoder_sparse_step != 1 or c.mlp_only_layers:
            field = "mlp_only_layers" if c.mlp_only_layers else "decoder_sparse_step"
            self.fail(
                field,
                "Qwen3.5-MoE has MoE on every layer (vLLM Qwen3_5DecoderLayer reads neither "
                "decoder_sparse_step nor mlp_only_layers); give the checkpoint's own config.json",
            )
        return super().moe_flags()


class Qwen3VLText(DecoderAdapter[Qwen3VLTextConfig]):
    """Qwen3-VL's dense language model: full attention on every layer."""

    model_types = ("qwen3_vl_text",)
    config_class = Qwen3VLTextConfig


class Qwen3VLMoeText(QwenMoE[Qwen3VLMoeTextConfig]):
    """Qwen3-VL's MoE language model: full attention, MoE as Qwen3-MoE lays it out."""

    model_types = ("qwen3_vl_moe_text",)
    config_class = Qwen3VLMoeTextConfig
