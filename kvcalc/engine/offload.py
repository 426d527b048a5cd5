"""Offload: a cached prefix kept outside HBM (host memory, SSD), and whether bringing it back
beats recomputing it.

A tier holds whole-model KV entries (every layer, every KV head once: an offloaded copy is not
replicated across tensor-parallel ranks). Bringing a prefix of P tokens back costs its bytes over
the tier's bandwidth; recomputing it costs its prefill FLOPs (:func:`kvcalc.engine.flops.
prefill_flops`) at the replica's dense peak, the roofline bound as decode uses it. Transfer time
per token never grows with P (windows and fixed states make it shrink) while recompute per token
never shrinks (causal attention grows with P), so once loading is as fast as recomputing it stays
so: the break-even is the first such P, found by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.flops import prefill_flops
from kvcalc.engine.kv import CacheFormat, kv_bytes_per_sequence, kv_bytes_per_token, kv_size
from kvcalc.engine.units import GB, MAX_CONTEXT_TOKENS, TB

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.spec import ModelSpec


#: The name of the GPUs' own memory, the row every tier beyond it is set beside.
HBM = "hbm"


@dataclass(frozen=True)
class Tier:
    """One place a cache can live outside HBM: its capacity and the bandwidth it is read back
    into the GPUs at (for the whole GPU set)."""

    name: str
    capacity_bytes: int
    bandwidth_bytes_per_s: int

    def __post_init__(self) -> None:
        if self.capacity_bytes <= 0 or self.bandwidth_bytes_per_s <= 0:
            raise ValueError(f"tier {self.name}: capacity and bandwidth must be positive")


#: Host memory per GPU when none is given: twice the GPU's memory, about what 8-GPU servers
#: ship (DGX H100: 2 TB of DDR5 for 8 x 80 GB; DGX B200: 2 TB for 8 x 180 GB).
HOST_MEMORY_PER_GPU_MEMORY = 2
#: PCIe 5.0 x16, one direction, for parts whose registry entry names no PCIe link.
DEFAULT_PCIE_ONE_WAY = 64 * GB
#: One NVMe drive per GPU as DGX H100 pairs them (8 x 3.84 TB), read at a PCIe 4.0 x4 drive's
#: ~7 GB/s sequential rate.
SSD_BYTES_PER_GPU = 4 * TB
SSD_BANDWIDTH_PER_GPU = 7 * GB


def default_tiers(dep: Deployment) -> tuple[Tier, ...]:
    """Host memory over each GPU's PCIe link (one direction: the registry lists links as
    bidirectional aggregates) and one NVMe drive per GPU."""
    accelerator = dep.gpus.accelerator
    count = dep.gpus.count
    pcie = accelerator.pcie_bytes_per_s
    one_way = pcie // 2 if pcie else DEFAULT_PCIE_ONE_WAY
    return (
        Tier("cpu", HOST_MEMORY_PER_GPU_MEMORY * dep.memory_bytes_per_gpu * count, one_way * count),
        Tier("ssd", SSD_BYTES_PER_GPU * count, SSD_BANDWIDTH_PER_GPU * count),
    )


@dataclass(frozen=True)
class TierFit:
    """What one tier holds of a model's cache and how fast a prefix of ``context`` tokens comes
    back from it compared with recomputing it."""

    tier: Tier
    context_tokens: int
    tokens: int
    """Tokens whose KV entries the tier holds (full per-token cost, before any window caps)."""
    sequences: int
    """Sequences of ``context_tokens`` the tier holds, a prefix they all share stored once."""
    prefix_bytes: int
    """KV bytes of one prefix of ``context_tokens``."""
    load_seconds: float
    recompute_seconds: float | None
    """None when the accelerator publishes no dense rate for the compute dtype."""
    break_even_tokens: int | None
    """The shortest prefix from which loading is at least as fast as recomputing (1: at every
    length); None when recomputing stays faster up to the 2^30-token limit or cannot be timed."""

    @property
    def faster(self) -> str | None:
        if self.recompute_seconds is None:
            return None
        return "load" if self.load_seconds <= self.recompute_seconds else "recompute"


def prefill_flops_per_second(dep: Deployment) -> int | None:
    """The dense peak a replica prefills at: its tp GPUs of a stage at the weights' compute
    dtype (pipeline stages of one prompt run one after another)."""
    rate = dep.dense_flops_per_gpu
    return None if rate is None else rate * dep.tp


def recompute_seconds(model: ModelSpec, tokens: int, flops_per_s: int) -> float:
    return prefill_flops(model, tokens).total / flops_per_s


def loading_wins(
    model: ModelSpec, cache: CacheFormat, tokens: int, tier: Tier, flops_per_s: int
) -> bool:
    """bytes / bandwidth <= FLOPs / peak, in exact integers."""
    flops = prefill_flops(model, tokens).total
    return (
        Fraction(kv_bytes_per_sequence(model, tokens, cache), tier.bandwidth_bytes_per_s)
        <= Fraction(flops, flops_per_s)
    )


def break_even_tokens(
    model: ModelSpec, cache: CacheFormat, tier: Tier, flops_per_s: int
) -> int | None:
    """The shortest prefix from which loading from ``tier`` is at least as fast as recomputing
    (see the module docstring for why the answer is monotone)."""
    if loading_wins(model, cache, 1, tier, flops_per_s):
        return 1
    if not loading_wins(model, cache, MAX_CONTEXT_TOKENS, tier, flops_per_s):
        return None
    lo, hi = 1, MAX_CONTEXT_TOKENS  # recompute wins at lo, loading at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if loading_wins(model, cache, mid, tier, flops_per_s):
            hi = mid
        else:
            lo = mid
    return hi


def shared_prefix_bytes(
    model: ModelSpec, cache: CacheFormat, context_tokens: int, shared_tokens: int
) -> int:
    """The KV bytes of a prefix of ``shared_tokens`` that every sequence of ``context_tokens``
    starts with, stored once (an offload cache keys its chunks by the prefix they continue, so a
    common system prompt is one entry): in the layers that keep the whole context (a window that
    has slid past it shares nothing), priced as the oldest tokens they are, as HBM's prefix
    caching prices them (:func:`kvcalc.engine.capacity.stage_bytes_per_sequence`), without its
    blocks: a tier stores entries, not pages."""
    shared = min(shared_tokens, context_tokens)
    if not shared:
        return 0
    total = 0
    for group in kv_size(model, context_tokens, cache).groups:
        if group.tokens_held == context_tokens and group.bytes_per_token:
            whole = cache.tokens_bytes(group.mixer, context_tokens)
            total += (whole - cache.tokens_bytes(group.mixer, context_tokens - shared)) * (
                group.layers
            )
    return total


def sequences_held(capacity_bytes: int, per_sequence: int, shared_bytes: int) -> int:
    """Sequences a store of ``capacity_bytes`` holds when each takes ``per_sequence`` bytes of
    which ``shared_bytes`` are one prefix common to all, stored once."""
    own = per_sequence - shared_bytes
    if own <= 0 or capacity_bytes < per_sequence:
        return 0
    return (capacity_bytes - shared_bytes) // own


def tier_fit(dep: Deployment, tier: Tier, context_tokens: int) -> TierFit:
    """One tier of ``dep``'s model and cache format at ``context_tokens``, the deployment's
    shared prefix (``--prefix-shared``) stored once."""
    model, cache = dep.model, dep.cache
    per_token = kv_bytes_per_token(model, cache)
    per_sequence = kv_bytes_per_sequence(model, context_tokens, cache)
    shared = shared_prefix_bytes(model, cache, context_tokens, dep.prefix_shared_tokens)
    rate = prefill_flops_per_second(dep)
    return TierFit(
        tier=tier,
        context_tokens=context_tokens,
        tokens=tier.capacity_bytes // per_token if per_token else 0,
        sequences=sequences_held(tier.capacity_bytes, per_sequence, shared),
        prefix_bytes=per_sequence,
        load_seconds=per_sequence / tier.bandwidth_bytes_per_s,
        recompute_seconds=None if rate is None else recompute_seconds(model, context_tokens, rate),
        break_even_tokens=None if rate is None else break_even_tokens(model, cache, tier, rate),
    )
