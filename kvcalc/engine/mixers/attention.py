"""Softmax attention with per-head keys and values: full (MHA, GQA, MQA), sliding-window and
chunked-local. The three share every formula except how many tokens a layer holds.

- cache: one key and one value vector per KV head per token (seed 004: 2 x n_kv x d_h when K and
  V match);
- weights: q, k, v, o projections (transformers modeling code), split by query / KV heads; an
  output gate (Qwen3-Next / Qwen3.5 ``attn_output_gate``: q_proj twice as wide, the second half
  a sigmoid gate on the attention output) adds one more query-sized projection and no cache;
- decode FLOPs: scores and weighted sum over the held tokens, 2 x q_heads x (head_dim_k +
  head_dim_v) per held token (QK^T and AV, one multiply-add each);
- vLLM: FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from kvcalc.engine.mixers.base import AttentionMixer, AttentionPageKind, split_heads
from kvcalc.engine.tensors import CacheVectors, Tensor, linear, row_parallel

if TYPE_CHECKING:
    from kvcalc.engine.mixers.base import Mixer
    from kvcalc.engine.mixers.caches import PageLayout
    from kvcalc.engine.variant import AttentionVariant


@dataclass(frozen=True)
class FullAttention(AttentionMixer):
    """Softmax attention over the whole context: MHA (kv_heads = q_heads), GQA, or MQA (1)."""

    kind: ClassVar[AttentionPageKind] = "full"
    kv_heads: int
    head_dim_k: int
    head_dim_v: int
    q_heads: int
    # Keyword-only: the subclasses' window / chunk stay the fifth positional field.
    output_gate: bool = field(default=False, kw_only=True)
    """A gate of one query head's width per query head on the output (vLLM Qwen3NextAttention:
    q_proj of ``q_heads x head_dim x 2``); weights only, the KV cache is unchanged."""

    def cache_elements_per_token(self) -> int:
        return self.kv_heads * (self.head_dim_k + self.head_dim_v)

    def cache_vectors(self) -> tuple[CacheVectors, ...]:
        return (
            CacheVectors("key", self.kv_heads, self.head_dim_k),
            CacheVectors("value", self.kv_heads, self.head_dim_v),
        )

    def tokens_held(self, context_tokens: int) -> int:
        return context_tokens

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        tensors = (
            linear("mixer", self.q_heads, self.head_dim_k, hidden),  # q_proj
            linear("mixer", self.kv_heads, self.head_dim_k, hidden),  # k_proj
            linear("mixer", self.kv_heads, self.head_dim_v, hidden),  # v_proj
            row_parallel("mixer", self.q_heads, hidden, self.head_dim_v),  # o_proj
        )
        if self.output_gate:  # the gate half of q_proj, as wide as the queries
            return (*tensors, linear("mixer", self.q_heads, self.head_dim_k, hidden))
        return tensors

    def attention_flops_per_held_token(self) -> int:
        return 2 * self.q_heads * (self.head_dim_k + self.head_dim_v)

    def page_layout(self) -> PageLayout:
        from kvcalc.engine.mixers.caches import PageLayout

        return PageLayout(self.kind, self.kv_heads, self.head_dim_k, self.head_dim_v)

    def detail(self) -> str:
        k, v = self.head_dim_k, self.head_dim_v
        dims = f"{k}" if k == v else f"{k}/{v}"
        return f"{self.kv_heads} kv x {dims}"

    def kv_head_count(self) -> int:
        return self.kv_heads

    def listed_head_dim(self) -> int:
        return self.head_dim_k

    def rotary_dims(self) -> int:
        return self.head_dim_k  # the whole key head

    def per_rank(self, tp: int) -> FullAttention:
        # KV heads split across ranks; beyond kv_heads ranks, each holds one replicated head
        # (vLLM ModelConfig.get_num_kv_heads: max(1, kv_heads // tp)).
        return replace(
            self,
            kv_heads=split_heads(self.kv_heads, tp, "KV heads"),
            q_heads=split_heads(self.q_heads, tp, "query heads"),
        )

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> FullAttention:
        new = self
        if kv_heads is not None:
            if self.q_heads % kv_heads:
                # Grouped-query attention shares each KV head among a whole group of queries.
                raise ValueError(
                    f"{self.q_heads} query heads cannot be grouped over {kv_heads} KV heads; "
                    f"use a divisor of {self.q_heads}"
                )
            new = replace(new, kv_heads=kv_heads)
        if head_dim is not None:
            new = replace(new, head_dim_k=head_dim, head_dim_v=head_dim)
        return new

    def as_attention(self, variant: AttentionVariant) -> Mixer:
        if variant.kind == "mla":
            return self.as_latent(variant.latent, variant.rope)
        return replace(self, kv_heads=variant.kv_heads_for(self.q_heads))

    def as_latent(self, latent: int, rope: int) -> Mixer:
        """MLA over the same query heads: the query head dim splits into ``rope`` RoPE values and
        the rest; the values keep their head dim."""
        from kvcalc.engine.mixers.mla import MultiHeadLatentAttention
        from kvcalc.engine.variant import check_rope

        check_rope(rope, self.head_dim_k, f", e.g. mla:{latent}+{self.head_dim_k // 2}")
        return MultiHeadLatentAttention(
            kv_lora_rank=latent,
            qk_rope_head_dim=rope,
            qk_nope_head_dim=self.head_dim_k - rope,
            v_head_dim=self.head_dim_v,
            q_heads=self.q_heads,
        )


@dataclass(frozen=True)
class SlidingWindowAttention(FullAttention):
    """Attention over the last ``window`` tokens only (Mistral-7B-v0.1, Gemma local, gpt-oss)."""

    kind: ClassVar[AttentionPageKind] = "sliding"
    window: int = 0

    def tokens_held(self, context_tokens: int) -> int:
        return min(context_tokens, self.window)

    def page_layout(self) -> PageLayout:
        return replace(super().page_layout(), window=self.window)

    def detail(self) -> str:
        return f"{super().detail()}, window {self.window:,}"

    def as_latent(self, latent: int, rope: int) -> Mixer:
        return self  # MLA replaces full attention; the window already bounds this cache


@dataclass(frozen=True)
class ChunkedLocalAttention(FullAttention):
    """Attention within fixed chunks of ``chunk`` tokens (Llama-4); at most a chunk is held."""

    kind: ClassVar[AttentionPageKind] = "chunked"
    chunk: int = 0

    def tokens_held(self, context_tokens: int) -> int:
        return min(context_tokens, self.chunk)

    def page_layout(self) -> PageLayout:
        return replace(super().page_layout(), chunk=self.chunk)

    def detail(self) -> str:
        return f"{super().detail()}, chunk {self.chunk:,}"

    def as_latent(self, latent: int, rope: int) -> Mixer:
        return self  # MLA replaces full attention; the chunk already bounds this cache
