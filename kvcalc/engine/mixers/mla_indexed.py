"""Multi-head latent attention with DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2).

- cache: the MLA latent plus RoPE key of :mod:`kvcalc.engine.mixers.mla`, and beside it the
  indexer's own key per token: index_head_dim fp8 values and one fp32 scale per 128 of them,
  whatever the KV dtype (DeepSeek's inference/model.py Indexer k_cache / k_scale_cache; vLLM
  ``DeepseekV32IndexerCache``: head_dim + head_dim // quant_block_size x 4 uint8 with
  quant_block_size 128, so 132 bytes for index_head_dim 128). Neither is split by tensor
  parallelism: the indexer is replicated on every rank (vLLM builds it from ReplicatedLinear);
- an fp8 KV cache stores the latent in DeepSeek's sparse-MLA format: kv_lora_rank fp8 values,
  one fp32 scale per 128 of them and the RoPE key left in bf16, 656 bytes for 512 + 64 (vLLM's
  "fp8_ds_mla", which DeepseekV32ForCausalLM selects for any fp8 cache dtype; SGLang's NSA
  calculate_mla_kv_cache_dim gives the same). Other KV dtypes store latent and RoPE alike;
- weights: MLA's, plus the indexer (DeepSeek-V3.2-Exp inference/model.py Indexer): wq_b
  (q_lora_rank x index_heads x index_head_dim), wk (hidden x index_head_dim), its LayerNorm
  k_norm (weight and bias) and weights_proj (hidden x index_heads), all replicated;
- decode FLOPs: the indexer scores every held token, 2 x index_heads x index_head_dim each; the
  sparse MLA then attends to at most index_topk of them. The interface counts FLOPs per held
  token only, so the MLA term is counted over every held token as in dense MLA: an upper bound
  beyond index_topk tokens (the selection is not modelled).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from kvcalc.engine.mixers.mla import MultiHeadLatentAttention
from kvcalc.engine.tensors import Tensor, replicated
from kvcalc.engine.units import DType, dtype

if TYPE_CHECKING:
    from kvcalc.engine.mixers.side_cache import SideCache

#: Values per fp32 scale in the indexer keys and in the fp8 sparse-MLA latent (vLLM
#: quant_block_size / DeepSeek's block_size).
QUANT_BLOCK = 128
#: Bytes of one fp32 scale.
SCALE_BYTES = 4


def scaled_fp8_bytes(values: int) -> int:
    """fp8 values plus one fp32 scale per whole block of 128, as DeepSeek and vLLM size them
    (``head_dim + head_dim // quant_block_size * 4``: a partial block gets no scale)."""
    return values + values // QUANT_BLOCK * SCALE_BYTES


@dataclass(frozen=True)
class IndexedLatentAttention(MultiHeadLatentAttention):
    """MLA plus an indexer of ``index_heads`` heads of ``index_head_dim`` selecting the
    ``index_topk`` tokens each query attends to."""

    kind: ClassVar[str] = "mla_indexed"
    index_heads: int = field(kw_only=True)
    index_head_dim: int = field(kw_only=True)
    index_topk: int = field(kw_only=True)

    def main_token_bytes(self, kv: DType) -> int:
        if kv.name == "fp8":
            rope = dtype("bf16").bytes_for(self.qk_rope_head_dim)
            return scaled_fp8_bytes(self.kv_lora_rank) + rope
        return super().main_token_bytes(kv)

    def side_caches(self) -> tuple[SideCache, ...]:
        from kvcalc.engine.mixers.side_cache import SideCache

        return (SideCache("indexer keys", scaled_fp8_bytes(self.index_head_dim)),)

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        heads, dim = self.index_heads, self.index_head_dim
        query_input = self.q_lora_rank or hidden
        return (
            *super().weight_tensors(hidden),
            replicated("mixer", query_input * heads * dim),  # indexer wq_b
            replicated("mixer", hidden * dim),  # indexer wk
            replicated("norm", 2 * dim),  # indexer k_norm (LayerNorm weight and bias)
            replicated("mixer", hidden * heads),  # indexer weights_proj
        )

    def indexer_flops_per_held_token(self) -> int:
        return 2 * self.index_heads * self.index_head_dim

    def attention_flops_per_held_token(self) -> int:
        return super().attention_flops_per_held_token() + self.indexer_flops_per_held_token()

    def detail(self) -> str:
        return (
            f"{super().detail()}, indexer {self.index_heads}x{self.index_head_dim} "
            f"top-{self.index_topk:,}"
        )
