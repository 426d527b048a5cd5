"""DeepSeek-V4 (deepseek_v4): compressed attention on every layer, MoE on every layer.

Defaults: transformers 5.20.2 (the newest inside vLLM 0.33's pin),
models/deepseek_v4/configuration_deepseek_v4.py, which the file's own keys override. Each layer's
kind comes from ``layer_types`` (sliding_attention, compressed_sparse_attention,
heavily_compressed_attention), else from the per-layer ``compress_ratios`` the released
checkpoints ship (0, 4, 128; the entries past num_hidden_layers are the MTP layer's and are
dropped, as transformers does), else from the class's default interleave (two heavily compressed
layers, then compressed sparse and heavily compressed alternating). ``compress_rates`` maps the
two compressed kinds to their ratios (4 and 128); a file changing them is refused: the engines'
layouts are for those two. The RoPE width is ``qk_rope_head_dim`` when stated, else
``partial_rotary_factor`` x head_dim (64 of 512). Every layer is MoE (the first
``num_hash_layers`` route by a token hash over the same experts). ``expert_dtype: fp4`` ships
the routed experts in FP4 beside the FP8 block-scaled layers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from kvcalc.engine.checkpoint import CheckpointFormat
from kvcalc.registry.hf.base import (
    Adapter,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    TextConfig,
    field_error,
    moe_on_every_layer,
)

V4LayerType = Literal[
    "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
]
#: transformers' _COMPRESS_RATIO_TO_LAYER_TYPE.
RATIO_TYPES: dict[int, V4LayerType] = {
    0: "sliding_attention",
    4: "compressed_sparse_attention",
    128: "heavily_compressed_attention",
}
TYPE_RATIOS: dict[str, int] = {kind: ratio for ratio, kind in RATIO_TYPES.items()}
#: DeepseekV4Config.default_compress_rates.
DEFAULT_RATES = {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128}


class DeepseekV4Config(TextConfig):
    vocab_size: PosInt = 129280
    hidden_size: PosInt = 4096
    num_hidden_layers: LayerCount = 43
    num_attention_heads: PosInt = 64
    max_position_embeddings: PosInt = 1048576
    tie_word_embeddings: bool = False
    head_dim: PosInt = 512
    q_lora_rank: PosInt = 1024
    o_lora_rank: PosInt = 1024
    o_groups: PosInt = 8
    sliding_window: PosInt = 128
    qk_rope_head_dim: PosInt | None = None  # legacy key; else partial_rotary_factor
    partial_rotary_factor: float | None = None
    layer_types: list[V4LayerType] | None = None
    compress_ratios: list[Literal[0, 4, 128]] | None = None
    compress_rates: dict[str, int] | None = None
    index_n_heads: PosInt = 64
    index_head_dim: PosInt = 128
    index_topk: PosInt = 512
    n_routed_experts: PosInt = 256
    n_shared_experts: NonNegInt = 1
    num_experts_per_tok: PosInt = 6
    moe_intermediate_size: PosInt = 2048
    expert_dtype: str | None = Field(None, description="fp4: the routed experts ship in FP4")
    hc_mult: NonNegInt = 4
    num_nextn_predict_layers: NonNegInt = 0  # the MTP layer(s) past num_hidden_layers

    @model_validator(mode="before")
    @classmethod
    def _layer_types_of_the_layers(cls, data: Any) -> Any:
        # transformers keeps layer_types[:num_hidden_layers]: entries past it are the MTP
        # layer's, as in compress_ratios.
        if isinstance(data, dict) and isinstance(data.get("layer_types"), list):
            layers = data.get("num_hidden_layers", cls.model_fields["num_hidden_layers"].default)
            if isinstance(layers, int) and not isinstance(layers, bool):
                data = data | {"layer_types": data["layer_types"][:layers]}
        return data

    @model_validator(mode="after")
    def _check(self) -> DeepseekV4Config:
        ratios = self.compress_ratios
        if self.layer_types is None and ratios is not None and len(ratios) < self.num_hidden_layers:
            raise field_error(
                "compress_ratios",
                f"must have at least {self.num_hidden_layers} entries, one per layer",
            )
        if self.compress_rates is not None and self.compress_rates != DEFAULT_RATES:
            raise field_error(
                "compress_rates",
                f"must be {DEFAULT_RATES}: the engines store DeepSeek-V4's compressed caches "
                "at those ratios only",
            )
        if self.expert_dtype not in (None, "fp4"):
            raise field_error("expert_dtype", "must be fp4 or absent")
        return self


class DeepseekV4(Adapter[DeepseekV4Config]):
    """Compressed attention per layer type, MoE everywhere."""

    model_types = ("deepseek_v4",)
    config_class = DeepseekV4Config

    def layer_kinds(self) -> list[str]:
        c, n = self.config, self.num_layers
        if c.layer_types is not None:
            return list(c.layer_types)
        if c.compress_ratios is not None:
            return [RATIO_TYPES[r] for r in c.compress_ratios[:n]]
        interleave = [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention"
            for i in range(max(n - 2, 0))
        ]
        return ["heavily_compressed_attention"] * min(n, 2) + interleave

    def rope_dim(self) -> int:
        c = self.config
        if c.qk_rope_head_dim is not None:
            return c.qk_rope_head_dim
        factor = c.partial_rotary_factor
        return int(c.head_dim * factor) if factor is not None else c.head_dim * 64 // 512

    def mixers(self) -> Mixers:
        c = self.config
        common: dict[str, Any] = {
            "kind": "compressed",
            "window": c.sliding_window,
            "head_dim": c.head_dim,
            "rope_dim": self.rope_dim(),
            "q_lora_rank": c.q_lora_rank,
            "o_lora_rank": c.o_lora_rank,
            "o_groups": c.o_groups,
            "hc_mult": c.hc_mult,
        }
        indexer = {
            "index_heads": c.index_n_heads,
            "index_head_dim": c.index_head_dim,
            "index_topk": c.index_topk,
        }
        kinds = self.layer_kinds()
        mixers: dict[str, Any] = {}
        for kind in dict.fromkeys(kinds):
            ratio = TYPE_RATIOS[kind]
            mixers[kind] = common | {"compress_ratio": ratio} | (indexer if ratio == 4 else {})
        return mixers, kinds

    def dense_mlp(self) -> dict[str, Any]:
        return {"intermediate_size": self.config.moe_intermediate_size, "gated": True}

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        arch = super().architecture(tied_embeddings)
        mtp = self.config.num_nextn_predict_layers
        return arch | {"mtp_layers": mtp} if mtp else arch

    def moe_flags(self) -> MoEFlags:
        c = self.config
        moe, flags = moe_on_every_layer(
            c.n_routed_experts, c.num_experts_per_tok, c.moe_intermediate_size, self.num_layers
        )
        assert moe is not None
        if c.n_shared_experts:
            moe |= {
                "shared_experts": c.n_shared_experts,
                "shared_intermediate_size": c.moe_intermediate_size,
            }
        return moe, flags

    def released_checkpoint(self, stated: CheckpointFormat | None) -> CheckpointFormat | None:
        """FP4 routed experts (``expert_dtype: fp4``: E2M1 values and one UE8M0 scale per 32, the
        MXFP4 layout) beside the quantization_config's FP8 layers."""
        if self.config.expert_dtype != "fp4" or stated is None:
            return stated
        from dataclasses import replace

        from kvcalc.engine.quant import MXFP4

        return replace(stated, experts=MXFP4, source=f"{stated.source} + expert_dtype fp4")
