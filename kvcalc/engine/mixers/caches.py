"""What a layer's cache looks like to vLLM: the page spec of an attention layer. Only the engine
models read it, so it lives apart from the mixer interface and loads only when one of them
runs."""

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
