"""Falcon: falcon, and the RWConfig remote-code configs it was first shipped with.

Defaults: transformers 5.24.0, models/falcon/configuration_falcon.py.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import AliasChoices, Field, model_validator

from kvcalc.registry.hf.base import AttentionAdapter, AttentionConfig, LayerCount, PosInt


def _renamed(default: Any, key: str, old_key: str) -> Any:
    # RWConfig named the keys n_head, n_layer, n_embed, n_head_kv; a new name in the same file
    # wins (AliasChoices takes the first key present).
    return Field(default, validation_alias=AliasChoices(key, old_key))


class FalconConfig(AttentionConfig):
    # The Falcon checkpoints on the Hub were written by RWConfig's remote code, which had none
    # of these keys: FalconConfig documents the values the released models have (MQA for the
    # 7B, the 40B's grouped layout flagged by n_head_kv, 2,048 trained positions).
    documented_defaults: ClassVar[frozenset[str]] = frozenset(
        {
            "tie_word_embeddings",
            "max_position_embeddings",
            "multi_query",
            "new_decoder_architecture",
        }
    )

    vocab_size: PosInt = 65024
    hidden_size: PosInt = _renamed(4544, "hidden_size", "n_embed")
    num_hidden_layers: LayerCount = _renamed(32, "num_hidden_layers", "n_layer")
    num_attention_heads: PosInt = _renamed(71, "num_attention_heads", "n_head")
    num_kv_heads: PosInt | None = _renamed(None, "num_kv_heads", "n_head_kv")
    new_decoder_architecture: bool = False
    multi_query: bool = True
    max_position_embeddings: PosInt = 2048
    ffn_hidden_size: PosInt | None = None  # None: 4 x hidden_size
    tie_word_embeddings: bool = True

    @model_validator(mode="before")
    @classmethod
    def _grouped_kv_of_rwconfig(cls, data: Any) -> Any:
        # n_head_kv exists only in RWConfig's grouped-KV layout (Falcon-40B), which the port
        # calls new_decoder_architecture.
        if (
            isinstance(data, dict)
            and "n_head_kv" in data
            and "new_decoder_architecture" not in data
        ):
            return {**data, "new_decoder_architecture": True}
        return data


class Falcon(AttentionAdapter[FalconConfig]):
    model_types = ("falcon", "RefinedWebModel", "RefinedWeb")
    config_class = FalconConfig
    family = "falcon"  # the old RefinedWeb* model_types do not spell it

    def kv_heads(self) -> int:
        # modeling_falcon: grouped KV heads with the new decoder, one with multi_query, else MHA.
        c = self.config
        if c.new_decoder_architecture:
            return c.num_kv_heads or c.num_attention_heads
        return 1 if c.multi_query else c.num_attention_heads

    def head_dim(self) -> int:
        return self.derived_head_dim()

    def dense_mlp(self) -> dict[str, Any]:
        # FalconConfig: ffn_hidden_size defaults to 4 x hidden; a plain (ungated) GELU MLP.
        size = self.config.ffn_hidden_size or 4 * self.config.hidden_size
        return {"intermediate_size": size, "gated": False}
