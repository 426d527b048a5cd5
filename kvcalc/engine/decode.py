"""Decode time: one step (one new token per sequence), split into weight reads, KV-cache reads
and compute, on a roofline.

Bytes read per step (seed 004): the weights once for the whole batch (MoE: only the experts the
batch touches, :func:`kvcalc.engine.weights.decode_weight_bytes`) plus every sequence's cache at
its context (windows capped, fixed states included; under an eviction policy, only the tokens it
keeps are read and attended to). Time = bytes / (bandwidth x mbu), with mbu
(memory-bandwidth utilisation) 1.0 giving the roofline bound. Compute time = FLOPs / dense peak
FLOPS. The step takes the longer of the two (TPOT), and is memory- or compute-bound accordingly.

One replica is modelled: tp GPUs per pipeline stage read their shards in parallel, and the pp
stages of one step run one after another, so a step's time is the per-GPU bytes of all stages
over one GPU's bandwidth (for pp = 1: total bytes over tp x bandwidth, the aggregate bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.eviction import KEEP_ALL, Eviction
from kvcalc.engine.flops import decode_flops
from kvcalc.engine.kv import CacheFormat, kv_bytes_read_per_sequence
from kvcalc.engine.kvformat import KVFormat
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import DType
from kvcalc.engine.weights import (
    WeightPrecision,
    decode_weight_bytes,
    weight_bytes,
)

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment


@dataclass(frozen=True)
class DecodeStep:
    model_id: str
    batch: int
    context_tokens: int
    tp: int
    pp: int
    weight_bytes_read: int
    """Weight bytes one step reads, summed over the tp ranks (MoE: touched experts only)."""
    kv_bytes_read: int
    """KV bytes one step reads, summed over the tp ranks (replicated heads counted per rank)."""
    flops: int
    tokens_held: int
    """Tokens of each sequence the eviction policy keeps (the context when none evicts)."""
    weight_read_seconds: float
    kv_read_seconds: float
    compute_seconds: float | None
    """None when the accelerator publishes no dense rate for the compute dtype."""

    @property
    def memory_seconds(self) -> float:
        return self.weight_read_seconds + self.kv_read_seconds

    @property
    def tpot_seconds(self) -> float:
        """Time per output token: the longer of memory and compute (roofline)."""
        if self.compute_seconds is None:
            return self.memory_seconds
        return max(self.memory_seconds, self.compute_seconds)

    @property
    def bound(self) -> str:
        if self.compute_seconds is not None and self.compute_seconds > self.memory_seconds:
            return "compute"
        return "memory"

    @property
    def tokens_per_second(self) -> float:
        return self.batch / self.tpot_seconds

    @property
    def kv_share(self) -> float:
        """Fraction of the step's bytes that are KV-cache reads."""
        total = self.weight_bytes_read + self.kv_bytes_read
        return self.kv_bytes_read / total if total else 0.0


#: The smallest memory-bandwidth utilisation accepted. Measured decode MBU is 0.3-0.9; below 1%
#: a time is no longer a statement about the GPU, and a tiny positive float (1e-320) would make
#: every time infinite.
MIN_MBU = 0.01


def mbu_in_range(mbu: float) -> bool:
    return MIN_MBU <= mbu <= 1


def decode_step(
    model: ModelSpec,
    *,
    batch: int,
    context_tokens: int,
    kv_dtype: CacheFormat | KVFormat | DType,
    precision: WeightPrecision,
    tp: int,
    pp: int,
    bandwidth_per_gpu: int,
    flops_per_gpu: int | None,
    mbu: float = 1.0,
    weights_total_bytes: int | None = None,
    eviction: Eviction = KEEP_ALL,
    per_rank: ModelSpec | None = None,
) -> DecodeStep:
    """One decode step of ``batch`` sequences at ``context_tokens`` on one replica.

    ``weights_total_bytes`` overrides the weight size computed from the architecture (the seed's
    "weights take 140 GB"); the fraction of it a step reads still comes from the architecture.
    ``per_rank`` is ``model.per_rank(tp)`` when the caller holds it already (a deployment
    does), so that timing many steps does not split the model again for each.
    """
    if not mbu_in_range(mbu):
        raise ValueError(f"mbu must be in [{MIN_MBU}, 1], not {mbu}")
    per_rank_weights = decode_weight_bytes(model, batch, precision, tp)
    if weights_total_bytes is not None:
        full = weight_bytes(model, precision)
        read_fraction = Fraction(decode_weight_bytes(model, batch, precision, 1), full)
        per_rank_weights = int(weights_total_bytes * read_fraction / tp)
    if per_rank is None:
        per_rank = model.per_rank(tp)
    per_rank_kv = kv_bytes_read_per_sequence(per_rank, context_tokens, kv_dtype, eviction) * batch
    flops = decode_flops(model, batch, context_tokens, eviction).total
    rate = bandwidth_per_gpu * mbu
    compute = None if flops_per_gpu is None else flops / (flops_per_gpu * tp)
    return DecodeStep(
        model_id=model.id,
        batch=batch,
        context_tokens=context_tokens,
        tp=tp,
        pp=pp,
        weight_bytes_read=per_rank_weights * tp,
        kv_bytes_read=per_rank_kv * tp,
        flops=flops,
        tokens_held=eviction.tokens_held(context_tokens),
        weight_read_seconds=per_rank_weights / rate,
        kv_read_seconds=per_rank_kv / rate,
        compute_seconds=compute,
    )


def decode_step_for(
    dep: Deployment, *, batch: int, context_tokens: int, mbu: float = 1.0
) -> DecodeStep:
    """One decode step of ``batch`` sequences on one replica of ``dep``: its cache format, its
    weights as stored, and its accelerator's bandwidth and dense rate for the compute dtype."""
    accelerator = dep.gpus.accelerator
    return decode_step(
        dep.model,
        batch=batch,
        context_tokens=context_tokens,
        kv_dtype=dep.cache,
        precision=dep.weights,
        tp=dep.tp,
        pp=dep.pp,
        bandwidth_per_gpu=accelerator.bandwidth_bytes_per_s,
        flops_per_gpu=dep.dense_flops_per_gpu,
        mbu=mbu,
        weights_total_bytes=dep.weights_total_bytes,
        eviction=dep.eviction,
        per_rank=dep.per_rank,
    )
