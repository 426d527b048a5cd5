"""DeepSeek-V3.2 (deepseek_v32): DeepSeek-V3's MLA and MoE plus the sparse-attention indexer.

Defaults: transformers 5.24.0, models/deepseek_v32/configuration_deepseek_v32.py: V3's shape
with 163840 positions and the indexer's index_n_heads 64, index_head_dim 128, index_topk 2048.
An omitted layer_types makes every layer indexed attention; configuration_utils remaps the
legacy name "deepseek_sparse_attention" to "indexed_attention".
"""

from __future__ import annotations

from typing import Literal

from kvcalc.registry.hf.base import Mixers, PosInt
from kvcalc.registry.hf.deepseek import DeepseekMLA, DeepseekV3Config

IndexedLayerType = Literal["indexed_attention", "deepseek_sparse_attention"]


class DeepseekV32Config(DeepseekV3Config):
    max_position_embeddings: PosInt = 163840
    index_n_heads: PosInt = 64
    index_head_dim: PosInt = 128
    index_topk: PosInt = 2048
    # Every layer carries the indexer; a list naming another kind is not this architecture.
    layer_types: list[IndexedLayerType] | None = None  # one per layer: TextConfig checks it


class DeepseekV32(DeepseekMLA[DeepseekV32Config]):
    """Indexed (sparse) MLA on every layer; MoE from first_k_dense_replace on, as V3."""

    model_types = ("deepseek_v32",)
    config_class = DeepseekV32Config

    def mixers(self) -> Mixers:
        c = self.config
        mixers, names = super().mixers()
        indexer = {
            "kind": "mla_indexed",
            "index_heads": c.index_n_heads,
            "index_head_dim": c.index_head_dim,
            "index_topk": c.index_topk,
        }
        return {name: mixer | indexer for name, mixer in mixers.items()}, names
