"""Jamba: Mamba layers with attention on every attn_layer_period-th layer, MoE interleaved.

Defaults: transformers 5.24.0, models/jamba/configuration_jamba.py.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import PlainValidator, model_validator
from pydantic_core import PydanticCustomError

from kvcalc.registry.hf.base import (
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    Mixers,
    MoEFlags,
    NonNegInt,
    PosInt,
    experts_field,
    field_error,
    routed_experts,
)


def _dt_rank(value: Any) -> int | str:
    # JambaConfig takes a rank or "auto"; strict like every other integer here (no bool).
    if value == "auto":
        return "auto"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise PydanticCustomError(
        "dt_rank", 'must be a positive integer or "auto", got {value}', {"value": repr(value)}
    )


DtRank = Annotated[int | str, PlainValidator(_dt_rank)]


class JambaConfig(DecoderConfig):
    vocab_size: PosInt = 65536
    tie_word_embeddings: bool = False
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 14336
    num_hidden_layers: LayerCount = 32
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = None  # not a JambaConfig field: the modeling code uses hidden/heads
    max_position_embeddings: PosInt = 262144
    num_experts_per_tok: PosInt = 2
    num_experts: PosInt = experts_field(16, "num_experts", "num_local_experts")
    expert_layer_period: PosInt = 2
    expert_layer_offset: NonNegInt = 1
    attn_layer_period: PosInt = 8
    attn_layer_offset: NonNegInt = 4
    mamba_d_state: PosInt = 16
    mamba_d_conv: PosInt = 4
    mamba_expand: PosInt = 2
    mamba_dt_rank: DtRank = "auto"  # "auto": ceil(hidden_size / 16)

    @model_validator(mode="after")
    def _offsets_within_periods(self) -> JambaConfig:
        # JambaConfig refuses these too (_check_supported_offset).
        for kind in ("attn", "expert"):
            period = getattr(self, f"{kind}_layer_period")
            if getattr(self, f"{kind}_layer_offset") >= period:
                raise field_error(
                    f"{kind}_layer_offset", f"must be smaller than {kind}_layer_period ({period})"
                )
        return self


class Jamba(DecoderAdapter[JambaConfig]):
    model_types = ("jamba",)
    config_class = JambaConfig

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        # Jamba's attention has no positional encoding: the engine builds no RoPE table.
        return super().architecture(tied_embeddings) | {"rotary_caches": []}

    def dt_rank(self) -> int:
        rank = self.config.mamba_dt_rank
        return -(-self.config.hidden_size // 16) if rank == "auto" else int(rank)

    def mamba_mixer(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "mamba",
            "d_state": c.mamba_d_state,
            "d_conv": c.mamba_d_conv,
            "expand": c.mamba_expand,
            "dt_rank": self.dt_rank(),
        }

    def mixers(self) -> Mixers:
        c = self.config
        names = [
            "attn" if i % c.attn_layer_period == c.attn_layer_offset else "mamba"
            for i in range(self.num_layers)
        ]
        return self.hybrid_mixers(names, "attn", "mamba", self.mamba_mixer)

    def moe_flags(self) -> MoEFlags:
        c = self.config
        if c.num_experts == 1:  # JambaConfig: one expert is a plain MLP
            return None, [False] * self.num_layers
        moe = routed_experts(c.num_experts, c.num_experts_per_tok, c.intermediate_size)
        period, offset = c.expert_layer_period, c.expert_layer_offset
        return moe, [i % period == offset for i in range(self.num_layers)]
