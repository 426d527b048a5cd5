"""Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2).

- cache: one compressed latent plus a decoupled RoPE key per token, ``kv_lora_rank +
  qk_rope_head_dim`` values per layer with no factor 2 and no head count (seed 004). The latent
  is not split by tensor parallelism: every rank keeps all of it;
- weights (transformers DeepseekV3Attention): q_a, q_b (or a plain q when q_lora_rank is None),
  kv_a (hidden x (kv_lora_rank + rope)), kv_b (kv_lora_rank x heads x (nope + v)), o, and the
  two latent RMSNorms. The down-projections q_a and kv_a are replicated on every rank;
- decode FLOPs, in the absorbed form vLLM decodes with: queries are mapped into the latent
  space, scores are taken against the latent plus the RoPE key and the output is a weighted sum
  of latents, 2 x q_heads x (2 x kv_lora_rank + qk_rope_head_dim) per held token. The absorbed
  up-projections (kv_b) run once per query token and are counted with the weights;
- vLLM: MLAAttentionSpec, one "head" of kv_lora_rank + qk_rope_head_dim (576 for DeepSeek-V3).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from kvcalc.engine.mixers.base import AttentionMixer, split_heads
from kvcalc.engine.tensors import CacheVectors, Tensor, linear, replicated, row_parallel

if TYPE_CHECKING:
    from kvcalc.engine.mixers.base import Mixer
    from kvcalc.engine.mixers.caches import PageLayout
    from kvcalc.engine.variant import AttentionVariant


@dataclass(frozen=True)
class MultiHeadLatentAttention(AttentionMixer):
    """MLA: a latent of ``kv_lora_rank`` and a RoPE key of ``qk_rope_head_dim`` per token."""

    kind: ClassVar[str] = "mla"
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int
    q_heads: int
    q_lora_rank: int | None = None

    def cache_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def cache_vectors(self) -> tuple[CacheVectors, ...]:
        return (CacheVectors("latent", 1, self.cache_elements_per_token()),)

    def tokens_held(self, context_tokens: int) -> int:
        return context_tokens

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank is None:
            queries: tuple[Tensor, ...] = (linear("mixer", self.q_heads, qk_head_dim, hidden),)
        else:
            queries = (
                linear("mixer", 1, self.q_lora_rank, hidden),  # q_a_proj
                replicated("norm", self.q_lora_rank),  # q_a_layernorm
                linear("mixer", self.q_heads, qk_head_dim, self.q_lora_rank),  # q_b_proj
            )
        kv_b_rows = self.qk_nope_head_dim + self.v_head_dim
        return (
            *queries,
            linear("mixer", 1, self.cache_elements_per_token(), hidden),  # kv_a_proj_with_mqa
            replicated("norm", self.kv_lora_rank),  # kv_a_layernorm
            linear("mixer", self.q_heads, kv_b_rows, self.kv_lora_rank),  # kv_b_proj
            row_parallel("mixer", self.q_heads, hidden, self.v_head_dim),  # o_proj
        )

    def attention_flops_per_held_token(self) -> int:
        scores = self.kv_lora_rank + self.qk_rope_head_dim
        values = self.kv_lora_rank
        return 2 * self.q_heads * (scores + values)

    def page_layout(self) -> PageLayout:
        from kvcalc.engine.mixers.caches import PageLayout

        return PageLayout("mla", kv_heads=1, head_size_k=self.cache_elements_per_token())

    def detail(self) -> str:
        return f"latent {self.kv_lora_rank} + rope {self.qk_rope_head_dim}"

    def kv_head_count(self) -> None:
        return None

    def listed_head_dim(self) -> None:
        return None

    def rotary_dims(self) -> int:
        return self.qk_rope_head_dim  # only the separate rope part of each key

    def per_rank(self, tp: int) -> MultiHeadLatentAttention:
        return replace(self, q_heads=split_heads(self.q_heads, tp, "query heads"))

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> MultiHeadLatentAttention:
        return self  # the latent has no KV heads to change

    def as_attention(self, variant: AttentionVariant) -> Mixer:
        from kvcalc.engine.variant import check_rope

        qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if variant.kind != "mla":
            # Plain attention over the query heads, keys of the full query width (nope + RoPE)
            # and values of v_head_dim (seed 004's MHA counterpart of DeepSeek-V3).
            from kvcalc.engine.mixers.attention import FullAttention

            return FullAttention(
                kv_heads=variant.kv_heads_for(self.q_heads),
                head_dim_k=qk_head_dim,
                head_dim_v=self.v_head_dim,
                q_heads=self.q_heads,
            )
        check_rope(variant.rope, qk_head_dim)
        return replace(
            self,
            kv_lora_rank=variant.latent,
            qk_rope_head_dim=variant.rope,
            qk_nope_head_dim=qk_head_dim - variant.rope,
        )
