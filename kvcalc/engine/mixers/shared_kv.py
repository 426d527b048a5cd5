"""An attention layer that reads another layer's KV cache and stores none of its own (Gemma-3n's
and Gemma 4's last ``num_kv_shared_layers`` layers: each reuses the cache of the last earlier
layer of its attention type).

- cache: nothing; the ``source`` layer holds the keys and values. vLLM gives such a layer no
  KV-cache spec (``kv_sharing_target_layer_name``; ``add_kv_sharing_layers_to_kv_cache_groups``
  attaches it to its target's group), so it adds no page. SGLang 0.5.23 does size a pool row for
  it: its full / SWA pools count every layer of ``layer_types``, shared or not
  (``HybridSWAPoolConfigurator``), though the layer never writes it (``save_kv_cache=False``);
  :meth:`pooled_as` says so;
- weights: q_proj and o_proj only (transformers Gemma4TextAttention: "Layers sharing kv states
  don't need any weight matrices" for k/v; vLLM from 0.30 builds a ColumnParallelLinear q_proj,
  up to 0.29 a whole QKVParallelLinear whose unused K/V slots
  :mod:`kvcalc.engine.vllm_loading` adds to what vLLM loads). Gemma 4's
  ``use_double_wide_mlp`` doubles the MLP of exactly these layers (Gemma4TextMLP: ``2 if
  use_double_wide_mlp and is_kv_shared_layer``); the extra intermediate rows are ``wide_mlp``,
  counted here since the layer's feed-forward block is the model's ordinary one;
- decode: it attends over its source's held tokens, reading that cache again
  (:meth:`cache_read`), with the source's FLOPs per held token.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from kvcalc.engine.mixers.attention import FullAttention
from kvcalc.engine.mixers.base import AttentionMixer
from kvcalc.engine.tensors import CacheVectors, Tensor, linear, row_parallel

if TYPE_CHECKING:
    from kvcalc.engine.mixers.base import Mixer
    from kvcalc.engine.mixers.caches import PageLayout
    from kvcalc.engine.variant import AttentionVariant


@dataclass(frozen=True)
class SharedKVAttention(AttentionMixer):
    """Attention over the cache of ``source`` (full or sliding), storing nothing itself."""

    kind: ClassVar[str] = "shared_kv"
    source: FullAttention
    wide_mlp: int = 0
    """Gated-MLP intermediate rows this layer has beyond the model's MLP (0: none)."""

    @property
    def owns_cache(self) -> bool:
        return False

    def cache_read(self) -> Mixer:
        return self.source

    def pooled_as(self) -> Mixer:
        return self.source

    def cache_elements_per_token(self) -> int:
        return 0

    def cache_vectors(self) -> tuple[CacheVectors, ...]:
        return ()

    def tokens_held(self, context_tokens: int) -> int:
        # The tokens it attends to (its source's window), though it stores none of them.
        return self.source.tokens_held(context_tokens)

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        s = self.source
        attention = (
            linear("mixer", s.q_heads, s.head_dim_k, hidden),  # q_proj
            row_parallel("mixer", s.q_heads, hidden, s.head_dim_v),  # o_proj
        )
        if not self.wide_mlp:
            return attention
        # gate and up [rows, hidden], down [hidden, rows], split by intermediate row
        return (
            *attention,
            linear("mlp", self.wide_mlp, 2, hidden, stacked=2),
            row_parallel("mlp", self.wide_mlp, hidden, 1),
        )

    def attention_flops_per_held_token(self) -> int:
        return self.source.attention_flops_per_held_token()

    def page_layout(self) -> PageLayout | None:
        return None  # no spec of its own: it pages in its source's group

    def detail(self) -> str:
        return f"reads a {self.source.kind} layer's cache ({self.source.detail()})"

    def kv_head_count(self) -> int:
        return self.source.kv_heads

    def listed_head_dim(self) -> int:
        return self.source.head_dim_k

    def rotary_dims(self) -> int:
        return self.source.rotary_dims()

    def per_rank(self, tp: int) -> SharedKVAttention:
        return replace(self, source=self.source.per_rank(tp))

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> SharedKVAttention:
        # The what-if changes the source layer; this one reads whatever the source stores.
        return replace(self, source=self.source.with_heads(kv_heads, head_dim))

    def as_attention(self, variant: AttentionVariant) -> Mixer:
        # Another attention for the source layer leaves this layer still storing nothing; its
        # reads follow the source only through the source's own variant.
        return self
