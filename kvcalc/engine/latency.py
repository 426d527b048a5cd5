"""Realistic decode and prefill times: the roofline of :mod:`kvcalc.engine.decode` corrected by
what real steps achieve, each correction its own term.

Decode (time per output token, one replica)::

    TPOT ~ max(reads / (bandwidth_fraction x peak bandwidth), FLOPs / (mfu x dense peak))
           + tensor-parallel all-reduces + pipeline sends + fixed step overhead

Prefill (time to first token of one prompt, no queueing)::

    TTFT ~ max(prompt FLOPs / (mfu x dense peak x tp), weight reads at the achievable bandwidth)
           + all-reduces of the prompt's activations + pipeline sends + fixed step overhead

The roofline is a lower bound that single-stream decode misses by about 2x (reference
gpu-notes.md section 4: observed batch-1 MBU 0.3-0.9); the shape of the correction follows the
model suggested there. Per-family figures (achievable bandwidth, step overhead, link latency,
matmul ceiling) are registry data with their sources (model_configs/gpus, ``efficiency``);
parts without them use :data:`GENERIC_EFFICIENCY`. tests/test_latency_judge.py holds the
estimate to published single-stream measurements.

All-reduce (ring, Patarasuk & Yuan 2009; NCCL's documented ring cost): each GPU sends and
receives 2(n-1)/n of the message over its link, one direction of the link's bandwidth. Engines
all-reduce twice per layer under tensor parallelism (after attention and after the MLP,
Megatron-LM's split), in the activation dtype (16-bit). At decode batch sizes the message is
kilobytes and the time is the link latency, which the registry gives per all-reduce (engines use
one-shot custom all-reduce kernels for small messages, whose cost does not grow with hops). MoE
layers are timed as tensor-parallel like dense ones (experts split across the tp ranks); expert
parallelism's all-to-all is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.engine.decode import DecodeStep, decode_step_for
from kvcalc.engine.flops import prefill_flops
from kvcalc.engine.hardware import Accelerator, Efficiency

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.profiles import DecodeProfile

#: Where the registry has no measured figures for a part (reference gpu-notes.md section 4):
#: ~0.8 of the label as the achievable bandwidth (stream copy 0.78-0.87 of peak on A100, H100,
#: H200, MI300X), a 2 ms step overhead (1-1.5 ms on consumer cards, 2.3-3 ms on A100/H100 with
#: llama.cpp), 10 us per small all-reduce (NCCL's small-message latency is 5-20 us) and 0.5 of
#: the dense peak for large matmuls (stas00's measured matmul ceilings span 0.51-0.97).
GENERIC_EFFICIENCY = Efficiency(
    bandwidth_fraction=0.8,
    step_overhead_seconds=0.002,
    link_latency_seconds=10e-6,
    matmul_fraction=0.5,
    measured=False,
)

#: Bytes of one activation value moved between GPUs: engines exchange bf16/fp16 activations.
ACTIVATION_BYTES = 2
#: All-reduces per layer under tensor parallelism (after attention, after the MLP).
ALLREDUCES_PER_LAYER = 2


def efficiency_of(accelerator: Accelerator) -> Efficiency:
    """The part's measured efficiency, or the generic figures when the registry has none."""
    return accelerator.efficiency or GENERIC_EFFICIENCY


def default_mfu(accelerator: Accelerator) -> float:
    """Prefill efficiency when --mfu is not given: the part's measured matmul ceiling."""
    eff = efficiency_of(accelerator)
    if eff.matmul_fraction is not None:
        return eff.matmul_fraction
    assert GENERIC_EFFICIENCY.matmul_fraction is not None
    return GENERIC_EFFICIENCY.matmul_fraction


# -------------------------------------------------------------------------- communication


def allreduce_seconds(
    message_bytes: int, tp: int, link_bytes_per_s: int | None, latency_seconds: float
) -> float:
    """One ring all-reduce of ``message_bytes`` among ``tp`` GPUs: 2(n-1)/n x bytes over one
    direction of the link, plus the link's latency. None of it at tp 1."""
    if tp == 1:
        return 0.0
    if link_bytes_per_s is None:
        raise ValueError("the GPU's link bandwidth is unknown: tensor parallelism cannot be timed")
    return 2 * (tp - 1) / tp * message_bytes / link_bytes_per_s + latency_seconds


def tp_communication_seconds(dep: Deployment, tokens: int) -> float:
    """The all-reduces of one forward pass over ``tokens`` tokens: two per layer, each of the
    tokens' hidden activations."""
    accelerator = dep.gpus.accelerator
    message = tokens * dep.model.hidden_size * ACTIVATION_BYTES
    one = allreduce_seconds(
        message,
        dep.tp,
        accelerator.link_bytes_per_s,
        efficiency_of(accelerator).link_latency_seconds,
    )
    return ALLREDUCES_PER_LAYER * dep.model.num_layers * one


def pipeline_send_seconds(dep: Deployment, tokens: int) -> float:
    """Hand-offs between pipeline stages: pp - 1 point-to-point sends of the activations, each
    the link latency plus the bytes over one direction of the link."""
    if dep.pp == 1:
        return 0.0
    accelerator = dep.gpus.accelerator
    link = accelerator.link_bytes_per_s
    if link is None:
        raise ValueError("the GPU's link bandwidth is unknown, so pipeline stages cannot be timed")
    message = tokens * dep.model.hidden_size * ACTIVATION_BYTES
    one = message / link + efficiency_of(accelerator).link_latency_seconds
    return (dep.pp - 1) * one


def communication_seconds(dep: Deployment, tokens: int) -> float:
    """Time spent moving activations between the GPUs of a replica in one forward pass."""
    return tp_communication_seconds(dep, tokens) + pipeline_send_seconds(dep, tokens)


def can_time_communication(dep: Deployment) -> bool:
    """Whether the replica's GPU-to-GPU traffic can be timed (a link speed is known)."""
    return dep.tp * dep.pp == 1 or dep.gpus.accelerator.link_bytes_per_s is not None


# -------------------------------------------------------------------------- decode


@dataclass(frozen=True)
class TpotEstimate:
    """A realistic decode step, term by term (seconds)."""

    roofline: DecodeStep
    memory_seconds: float
    """The step's weight and KV reads at the achievable bandwidth."""
    compute_seconds: float | None
    """The step's FLOPs at the achievable matmul rate; None without a published dense rate."""
    communication_seconds: float
    """Tensor-parallel all-reduces and pipeline sends."""
    overhead_seconds: float
    """Fixed per-step cost: kernel launches, sampling, scheduling."""
    measured: bool
    """Whether the efficiencies are the part's measured ones (else generic)."""

    @property
    def tpot_seconds(self) -> float:
        busy = self.memory_seconds
        if self.compute_seconds is not None:
            busy = max(busy, self.compute_seconds)
        return busy + self.communication_seconds + self.overhead_seconds

    @property
    def tokens_per_second(self) -> float:
        return self.roofline.batch / self.tpot_seconds


def achievable_memory_seconds(step: DecodeStep, eff: Efficiency) -> float:
    """The roofline's reads (at full bandwidth) at the part's achievable bandwidth."""
    return step.memory_seconds / eff.bandwidth_fraction


def achievable_compute_seconds(step: DecodeStep, mfu: float) -> float | None:
    """The roofline's compute (at the dense peak) at the achievable share of it."""
    return None if step.compute_seconds is None else step.compute_seconds / mfu


def profiled(
    dep: Deployment, eff: Efficiency, profile: DecodeProfile | None, tokens: int
) -> tuple[float, float]:
    """A step's (communication, fixed overhead) seconds: the GPU's figures, or as ``profile``
    (the engine's or runtime's, :mod:`kvcalc.engine.profiles`) replaces them."""
    communication = communication_seconds(dep, tokens)
    if profile is None:
        return communication, eff.step_overhead_seconds
    return (
        profile.communication_seconds(dep, eff, communication),
        profile.overhead_seconds(dep, eff),
    )


def tpot_estimate(
    dep: Deployment,
    *,
    batch: int,
    context_tokens: int,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> TpotEstimate:
    """Realistic time per output token of ``batch`` sequences at ``context_tokens`` on one
    replica of ``dep`` (``mfu``: the share of the dense peak matmuls reach; default the part's
    measured ceiling; ``profile``: the engine's decode profile, default the GPU's figures)."""
    accelerator = dep.gpus.accelerator
    eff = efficiency_of(accelerator)
    step = decode_step_for(dep, batch=batch, context_tokens=context_tokens)
    communication, overhead = profiled(dep, eff, profile, batch)
    return TpotEstimate(
        roofline=step,
        memory_seconds=achievable_memory_seconds(step, eff),
        compute_seconds=achievable_compute_seconds(step, mfu or default_mfu(accelerator)),
        communication_seconds=communication,
        overhead_seconds=overhead,
        measured=eff.measured,
    )


def tpot_seconds(
    dep: Deployment,
    *,
    batch: int,
    context_tokens: int,
    roofline: bool = False,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> float:
    """The TPOT a latency target is held to: the realistic estimate, or with ``roofline`` the
    bound (what `plan`'s and `check`'s ``--roofline`` select)."""
    if roofline:
        return decode_step_for(dep, batch=batch, context_tokens=context_tokens).tpot_seconds
    return tpot_estimate(
        dep, batch=batch, context_tokens=context_tokens, mfu=mfu, profile=profile
    ).tpot_seconds


# -------------------------------------------------------------------------- prefill


@dataclass(frozen=True)
class PrefillEstimate:
    """The prefill of one prompt, term by term (seconds)."""

    prompt_tokens: int
    flops: int
    compute_seconds: float | None
    """FLOPs at mfu x the dense peak of the tp GPUs; None without a published dense rate."""
    weight_read_seconds: float
    """Reading the weights once at the achievable bandwidth (the floor of a short prompt)."""
    communication_seconds: float
    overhead_seconds: float
    mfu: float

    @property
    def ttft_seconds(self) -> float:
        busy = self.weight_read_seconds
        if self.compute_seconds is not None:
            busy = max(busy, self.compute_seconds)
        return busy + self.communication_seconds + self.overhead_seconds

    @property
    def bound(self) -> str:
        if self.compute_seconds is not None and self.compute_seconds > self.weight_read_seconds:
            return "compute"
        return "memory"


def prefill_compute_seconds(dep: Deployment, flops: int, mfu: float) -> float | None:
    """Prompt FLOPs over the replica's tp GPUs at ``mfu`` of their dense peak; the pp stages of
    one prompt run one after another, so pp adds no rate."""
    peak = dep.dense_flops_per_gpu
    return None if peak is None else flops / (peak * mfu * dep.tp)


def prefill_estimate(
    dep: Deployment,
    *,
    prompt_tokens: int,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> PrefillEstimate:
    """Realistic prefill of one ``prompt_tokens`` prompt on one replica of ``dep``."""
    if mfu is not None and not 0 < mfu <= 1:
        raise ValueError(f"mfu must be in (0, 1], not {mfu}")
    accelerator = dep.gpus.accelerator
    eff = efficiency_of(accelerator)
    share = mfu or default_mfu(accelerator)
    flops = prefill_flops(dep.model, prompt_tokens).total
    # The weights are read once for the whole prompt (MoE: the experts its tokens touch).
    weights = decode_step_for(dep, batch=prompt_tokens, context_tokens=1).weight_read_seconds
    communication, overhead = profiled(dep, eff, profile, prompt_tokens)
    return PrefillEstimate(
        prompt_tokens=prompt_tokens,
        flops=flops,
        compute_seconds=prefill_compute_seconds(dep, flops, share),
        weight_read_seconds=weights / eff.bandwidth_fraction,
        communication_seconds=communication,
        overhead_seconds=overhead,
        mfu=share,
    )


def prompt_tokens_at(dep: Deployment, context_tokens: int) -> int:
    """The prompt a sequence of ``context_tokens`` was prefilled from: the whole context, or the
    prompt an eviction policy fixes (SnapKV's ``prompt``: its context adds the generated tokens,
    which are decoded, not prefilled)."""
    from kvcalc.engine.eviction.policies import SnapKV

    return dep.eviction.prompt if isinstance(dep.eviction, SnapKV) else context_tokens


def ttft_seconds(
    dep: Deployment,
    *,
    prompt_tokens: int,
    roofline: bool = False,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> float:
    """The TTFT a latency target is held to: the realistic estimate, or with ``roofline`` the
    bound (the prompt's FLOPs at the dense peak, or the weight read at peak bandwidth)."""
    if not roofline:
        return prefill_estimate(
            dep, prompt_tokens=prompt_tokens, mfu=mfu, profile=profile
        ).ttft_seconds
    bound = prefill_estimate(dep, prompt_tokens=prompt_tokens, mfu=1.0)
    eff = efficiency_of(dep.gpus.accelerator)
    compute = bound.compute_seconds or 0.0
    return max(compute, bound.weight_read_seconds * eff.bandwidth_fraction)
