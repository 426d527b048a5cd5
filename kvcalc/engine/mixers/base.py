"""The :class:`Mixer` interface every layer kind implements, and the registry of kinds.

A mixer is the part of a layer that caches something per sequence: an attention kind (a cache
that grows with the tokens it holds) or a recurrent state (fixed per sequence). Every formula
that depends on the kind is a member of its type, so the sums over a model (kv.py, weights.py,
flops.py, vllm.py) and the tables never branch on the kind:

- cache: ``owns_cache``, ``cache_read`` and ``pooled_as`` (a layer reusing another's cache);
  ``cache_elements_per_token`` (``cache_vectors`` splits them into keys, values or a
  latent for quantised formats), ``tokens_held``, ``state_tensors`` (``state_elements`` is
  their sum), ``holds_tokens``; ``main_token_bytes`` (the main entry at the KV dtype) and
  ``side_caches`` kept at a fixed format (DeepSeek-V3.2's indexer keys), which
  :mod:`kvcalc.engine.kv` adds up; a kind that does not keep one entry per held token
  (DeepSeek-V4's window plus compressed entries) sizes its tokens itself (``held_bytes``,
  ``slope_bytes``), with a fixed-format state (``state_cache_bytes``), the formats it has a
  layout in (``check_format``), the one the engines default to (``engine_kv_dtype``) and what
  that means (``format_note``);
- weights: ``weight_tensors``; decode FLOPs: ``attention_flops_per_held_token``,
  ``state_flops_per_token``;
- vLLM: ``page_layout`` (the fields of an attention layer's KV-cache spec);
- text: ``detail``, ``kv_head_count``, ``listed_head_dim``;
- what-ifs: ``per_rank`` (tensor parallelism), ``with_heads`` (other KV heads / head dim),
  ``as_attention`` (another attention, ``--as``: :mod:`kvcalc.engine.variant`).

A concrete kind sets the class variable ``kind`` and so registers itself in
:data:`MIXER_KINDS`; abstract members left out make the type impossible to instantiate.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from kvcalc.engine.tensors import CacheVectors, StateTensor, Tensor
from kvcalc.engine.units import DType

if TYPE_CHECKING:
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.mixers.caches import PageLayout
    from kvcalc.engine.mixers.side_cache import SideCache
    from kvcalc.engine.variant import AttentionVariant


class ParallelismError(ValueError):
    """A tensor-parallel size the model's heads cannot be split over; names what failed so that
    a caller (e.g. the vLLM model) can word it its own way."""

    def __init__(self, heads: int, what: str, tp: int) -> None:
        super().__init__(f"tensor parallel size {tp} does not divide the {heads} {what}")
        self.heads = heads
        self.what = what
        self.tp = tp


def split_heads(heads: int, tp: int, what: str) -> int:
    """Heads per rank. Serving engines require tp to divide the heads, or (for KV heads, which
    are then replicated) the heads to divide tp; vLLM refuses anything else at start-up."""
    if heads % tp == 0:
        return heads // tp
    if tp % heads == 0 and what == "KV heads":
        return 1
    raise ParallelismError(heads, what, tp)


#: The vLLM KV-cache spec an attention kind maps to (FullAttentionSpec, SlidingWindowSpec,
#: ChunkedLocalAttentionSpec, MLAAttentionSpec).
AttentionPageKind = Literal["full", "sliding", "chunked", "mla"]


#: Every concrete mixer type, by its ``kind`` (the name the registry files and tables use).
MIXER_KINDS: dict[str, type[Mixer]] = {}


class Mixer(ABC):
    """One layer kind. Concrete kinds are frozen dataclasses of their shape."""

    kind: ClassVar[str]
    holds_tokens: ClassVar[bool]
    """True when the cache grows with the tokens held (attention); False for a fixed state."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # A type that names its own kind is a concrete kind; family bases name none.
        if "kind" in cls.__dict__:
            if cls.kind in MIXER_KINDS:
                raise TypeError(f"mixer kind {cls.kind!r} is defined twice")
            MIXER_KINDS[cls.kind] = cls

    # ---- cache

    @abstractmethod
    def cache_elements_per_token(self) -> int:
        """Values one token adds to this layer's cache (0 for a fixed state)."""

    def main_token_bytes(self, kv: DType) -> int:
        """Bytes one token adds to the layer's main cache at KV dtype ``kv``, rounded up. A kind
        whose entry mixes formats (a quantized latent with its scales) overrides this."""
        return kv.bytes_for(self.cache_elements_per_token())

    def side_caches(self) -> tuple[SideCache, ...]:
        """Fixed-format per-token caches beside the main one (none for most kinds)."""
        return ()

    def held_bytes(self, kv: KVFormat, tokens: int) -> int | None:
        """Bytes ``tokens`` held tokens take in one layer when the kind does not keep one entry
        per held token (DeepSeek-V4's window plus compressed entries); None for the usual
        kinds, which the format sizes as tokens x entry."""
        return None

    def slope_bytes(self, kv: KVFormat) -> int | None:
        """Bytes one token adds while no window is full, for a kind with :meth:`held_bytes`;
        None otherwise."""
        return None

    def state_cache_bytes(self) -> int:
        """Fixed per-sequence bytes kept at their own format beside any recurrent state
        (DeepSeek-V4's fp32 compressor state); 0 for most kinds."""
        return 0

    def check_format(self, kv: KVFormat) -> None:  # noqa: B027 - most kinds take any format
        """Raise :class:`~kvcalc.engine.kvformat.KVFormatError` when the kind has no layout in
        ``kv``."""

    def engine_kv_dtype(self) -> str | None:
        """The KV dtype the serving engines store this kind in by default, when it is not the
        model's dtype (DeepSeek-V4: fp8); None: the model's dtype."""
        return None

    def format_note(self) -> str | None:
        """What a reader must know about how the KV format stores this kind (None: nothing)."""
        return None

    def mtp_layer(self) -> Mixer:
        """The mixer of a multi-token-prediction layer built on this kind: the same one (vLLM's
        draft layers register their specs like the target's: Qwen3.5's Qwen3_5MTP adds
        full_attention layers, GLM's Glm4MoeMTP decoder layers of its attention); a kind whose
        MTP layer differs says so (DeepSeek-V4)."""
        return self

    @abstractmethod
    def cache_vectors(self) -> tuple[CacheVectors, ...]:
        """The vectors behind :meth:`cache_elements_per_token` (empty for a fixed state)."""

    @abstractmethod
    def tokens_held(self, context_tokens: int) -> int:
        """How many of a sequence's ``context_tokens`` tokens the layer keeps."""

    @abstractmethod
    def state_tensors(self) -> tuple[StateTensor, ...]:
        """The tensors of the fixed per-sequence state (empty for attention)."""

    def state_elements(self) -> int:
        """Values of the fixed per-sequence state, independent of the context."""
        return sum(t.elements for t in self.state_tensors())

    @property
    def owns_cache(self) -> bool:
        """Whether the layer stores a cache of its own; False for a layer that reads another
        layer's (Gemma 4's KV-shared layers), which vLLM gives no page."""
        return True

    def cache_read(self) -> Mixer:
        """The layer whose cache this one attends over at decode: itself, or the layer whose
        cache it reuses (whose bytes a decode step reads once more for it)."""
        return self

    def pooled_as(self) -> Mixer:
        """The layer SGLang sizes a pool row of this one as: itself, or (a KV-shared layer) the
        layer it reuses, since SGLang's pools count every layer of the model's layer types."""
        return self

    # ---- weights and FLOPs

    @abstractmethod
    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        """The layer's mixer weights (projections, convolutions, its own norms)."""

    @abstractmethod
    def attention_flops_per_held_token(self) -> int:
        """FLOPs one query token spends per held token at decode (0 for a state)."""

    @abstractmethod
    def state_flops_per_token(self) -> int:
        """FLOPs of one token's recurrent-state update (0 for attention)."""

    # ---- vLLM

    @abstractmethod
    def page_layout(self) -> PageLayout | None:
        """The vLLM attention spec fields of this (per-rank) layer; None for a state, whose
        page is a MambaSpec built from :meth:`state_tensors`."""

    # ---- text

    @abstractmethod
    def detail(self) -> str:
        """A short description for the size table: heads, window, latent or state shape."""

    @abstractmethod
    def kv_head_count(self) -> int | None:
        """KV heads, or None for a kind without per-head keys and values (MLA's latent, states)."""

    @abstractmethod
    def listed_head_dim(self) -> int | None:
        """The head dim a model summary lists, or None when the kind has no single one."""

    @abstractmethod
    def rotary_dims(self) -> int | None:
        """The width RoPE rotates in this kind (its cos/sin table's width), or None without
        RoPE."""

    @property
    def has_kv_heads(self) -> bool:
        """Whether :meth:`with_heads` changes anything: only kinds with KV heads take the
        ``kv_heads`` / ``head_dim`` what-ifs."""
        return self.kv_head_count() is not None

    # ---- what-ifs

    @abstractmethod
    def per_rank(self, tp: int) -> Mixer:
        """What one of ``tp`` tensor-parallel ranks stores."""

    @abstractmethod
    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> Mixer:
        """The layer with other KV heads or head dim; unchanged when it has no KV heads."""

    @abstractmethod
    def as_attention(self, variant: AttentionVariant) -> Mixer:
        """The layer as ``variant`` would build it (the same object when the variant does not
        apply to this kind, a new one when it does); raises
        :class:`~kvcalc.engine.variant.VariantError` when it cannot."""


class AttentionMixer(Mixer):
    """A kind whose cache grows with the tokens it holds: no recurrent state."""

    holds_tokens: ClassVar[bool] = True

    def state_tensors(self) -> tuple[StateTensor, ...]:
        return ()

    def state_flops_per_token(self) -> int:
        return 0


class RecurrentMixer(Mixer):
    """A kind with a fixed per-sequence state: nothing per token, no KV heads to change."""

    holds_tokens: ClassVar[bool] = False

    def cache_elements_per_token(self) -> int:
        return 0

    def cache_vectors(self) -> tuple[CacheVectors, ...]:
        return ()

    def tokens_held(self, context_tokens: int) -> int:
        return 0

    def attention_flops_per_held_token(self) -> int:
        return 0

    def page_layout(self) -> PageLayout | None:
        return None

    def kv_head_count(self) -> int | None:
        return None

    def listed_head_dim(self) -> int | None:
        return None

    def rotary_dims(self) -> int | None:
        return None

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> Mixer:
        return self

    def as_attention(self, variant: AttentionVariant) -> Mixer:
        return self  # a recurrent state has no attention to re-derive
