"""A cache a layer keeps beside its main one (DeepSeek-V3.2's indexer keys). Its own module, so
that only models with such a layer pay for the class at start-up."""

from __future__ import annotations

from typing import NamedTuple


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up.
class SideCache(NamedTuple):
    """A per-token cache a layer keeps beside its main one, stored at a fixed format whatever the
    KV dtype. DeepSeek-V3.2's sparse-attention indexer keeps its keys this way (fp8 values plus an
    fp32 scale per 128); vLLM gives each such cache a layer spec of its own (an MLAAttentionSpec
    of one "head" of ``bytes_per_token`` uint8, ``DeepseekV32IndexerCache``)."""

    name: str
    bytes_per_token: int
