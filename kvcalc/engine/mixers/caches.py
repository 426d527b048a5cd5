"""What a layer's cache looks like to a serving engine: vLLM's page spec of an attention layer
and the side caches a layer keeps beside its main one. Only the engine models read these, so
they live apart from the mixer interface and load only when one of them runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.engine.mixers.base import AttentionPageKind


@dataclass(frozen=True)
class PageLayout:
    """What vLLM's spec of one attention layer records besides the block and page size: the
    spec kind, the heads and head sizes one token stores, and the window or chunk."""

    kind: AttentionPageKind
    kv_heads: int
    head_size_k: int
    head_size_v: int = 0
    window: int = 0
    chunk: int = 0


@dataclass(frozen=True)
class SideCache:
    """A per-token cache a layer keeps beside its main one, stored at a fixed format whatever the
    KV dtype. DeepSeek-V3.2's sparse-attention indexer keeps its keys this way (fp8 values plus an
    fp32 scale per 128); vLLM gives each such cache a layer spec of its own (an MLAAttentionSpec
    of one "head" of ``bytes_per_token`` uint8, ``DeepseekV32IndexerCache``)."""

    name: str
    bytes_per_token: int
