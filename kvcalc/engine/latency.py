"""Realistic decode and prefill times: the roofline of :mod:`kvcalc.engine.decode` corrected by
what real steps achieve, each correction its own term.

Decode (time per output token, one replica)::

    TPOT ~ max((weight reads / kernel share + KV reads) / (bandwidth_fraction x peak bandwidth),
               FLOPs / (mfu x dense peak))
           + tensor-parallel all-reduces + pipeline sends (over the links they cross)
           + fixed step overhead + per-layer kernels (the engine's or runtime's decode profile:
             a serving engine's by default, none for a compiled step)

Prefill (time to first token of one prompt, no queueing)::

    TTFT ~ max(prompt FLOPs / (mfu x dense peak x tp), weight reads at the achievable bandwidth)
           + all-reduces of the prompt's activations + pipeline sends + fixed step overhead
           + one pass of the per-layer kernels

The roofline is a lower bound that single-stream decode misses by about 2x (reference
gpu-notes.md section 4: observed batch-1 MBU 0.3-0.9); the shape of the correction follows the
model suggested there. Per-family figures (achievable bandwidth, step overhead, scale-up link
latency, matmul ceiling) are registry data with their sources (model_configs/gpus,
``efficiency``); parts without them use :data:`GENERIC_EFFICIENCY`. Which link each all-reduce
and send crosses, and what it costs, is :mod:`kvcalc.engine.communication`'s. The per-layer
kernel costs (:class:`~kvcalc.engine.profiles.StepKernels`), the dequantising kernels' share
(:data:`DEQUANT_EFFICIENCY`) and an old build's F16 mat-vec share (the kernel class's
``f16_matvec_hbm_share``: :func:`weight_share`) are set on the fit points of
tests/fixtures/decode_points.yaml;
every estimate carries the band of :mod:`kvcalc.engine.accuracy` (the error on those points),
and tests/test_decode_points.py holds the estimate to the held-back ones.

MoE layers are timed as tensor-parallel like dense ones (experts split across the tp ranks,
the experts a batch touches read once); expert parallelism's all-to-all is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.engine.accuracy import Band, band_for
from kvcalc.engine.communication import (
    ACTIVATION_BYTES,
    ALLREDUCES_PER_LAYER,
    allreduce_seconds,
    intra_node_link,
    link_kind,
    nvlink,
    pp_links,
    replica_nodes,
    tp_link,
    tp_nodes,
)
from kvcalc.engine.decode import DecodeStep, decode_step_for
from kvcalc.engine.flops import prefill_flops
from kvcalc.engine.hardware import Accelerator, Efficiency
from kvcalc.engine.matvec_waves import RESIDENT_BLOCKS_PER_SM, step_wave_fill
from kvcalc.engine.profiles import SERVING_KERNELS, StepKernels
from kvcalc.engine.runtimes import LLAMA_CPP_F16_MATVEC_FIX_BUILD
from kvcalc.engine.spec import MoE
from kvcalc.errors import InputError

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


def scale_up_allreduce_latency(dep: Deployment, profile: DecodeProfile | None = None) -> float:
    """The latency one small all-reduce over the scale-up link is timed at: the engine's custom
    one-shot kernel's (``profile``) inside one node over NVLink -- where the kernel runs and
    where its figure was measured (sglang PR #2904, H100) -- else the GPU's registry figure
    (other fabrics' is fitted per part, MI300X's on vLLM). PCIe and the network keep
    :mod:`.communication`'s NCCL models whatever the engine: vLLM's custom all-reduce is off for
    more than two PCIe-only GPUs and across nodes, and NCCL runs."""
    registry = efficiency_of(dep.gpus.accelerator).link_latency_seconds
    if profile is None or profile.allreduce_latency_seconds is None:
        return registry
    if tp_nodes(dep) > 1 or not nvlink(dep.gpus.accelerator):
        return registry
    return profile.allreduce_latency_seconds


def tp_communication_seconds(
    dep: Deployment, tokens: int, profile: DecodeProfile | None = None
) -> float:
    """The all-reduces of one forward pass over ``tokens`` tokens: two per layer, each of the
    tokens' hidden activations, over the link the group crosses (:mod:`.communication`)."""
    if dep.tp == 1:
        return 0.0
    link = tp_link(dep, scale_up_allreduce_latency(dep, profile))
    if link is None:
        raise ValueError("the GPU's link bandwidth is unknown: tensor parallelism cannot be timed")
    message = tokens * dep.model.hidden_size * ACTIVATION_BYTES
    one = allreduce_seconds(message, dep.tp, link.bytes_per_s, link.allreduce_latency_seconds)
    return ALLREDUCES_PER_LAYER * dep.model.num_layers * one


def pipeline_send_seconds(dep: Deployment, tokens: int) -> float:
    """Hand-offs between pipeline stages: pp - 1 point-to-point sends of the activations, each
    the link's latency plus the bytes over one direction of the link it crosses."""
    if dep.pp == 1:
        return 0.0
    message = tokens * dep.model.hidden_size * ACTIVATION_BYTES
    total = 0.0
    for link in pp_links(dep, efficiency_of(dep.gpus.accelerator).link_latency_seconds):
        if link is None:
            raise ValueError(
                "the GPU's link bandwidth is unknown, so pipeline stages cannot be timed"
            )
        total += message / link.bytes_per_s + link.send_latency_seconds
    return total


def communication_seconds(
    dep: Deployment, tokens: int, profile: DecodeProfile | None = None
) -> float:
    """Time spent moving activations between the GPUs of a replica in one forward pass (the
    pipeline's sends are NCCL point-to-point whatever the engine: the registry's latency)."""
    return tp_communication_seconds(dep, tokens, profile) + pipeline_send_seconds(dep, tokens)


def can_time_communication(dep: Deployment) -> bool:
    """Whether the replica's GPU-to-GPU traffic can be timed (a link speed is known)."""
    if dep.tp * dep.pp == 1:
        return True
    if replica_nodes(dep) > 1:
        return True
    return intra_node_link(dep.gpus.accelerator, max(dep.tp, 2), 0.0) is not None


# -------------------------------------------------------------------------- decode


#: The share of the achievable bandwidth a weight-only dequantising kernel reaches, by the
#: bits its layer matrices store (16-bit and FP8 GEMMs read at the full achievable rate):
#: 8-bit integers from gpt-fast's int8 rows on A100 (Llama-2-7B 0.82, Llama-2-70B 0.88 of its
#: bf16 rate: 0.85); 4-bit formats (GPTQ/AWQ int4, NVFP4, MXFP4 run as W4A16 Marlin kernels where
#: no FP4 GEMM applies) 0.9 (Marlin's "near-ideal" ~3.9x over FP16 at batch 1-16,
#: IST-DASLab/marlin README).
DEQUANT_EFFICIENCY = {8: 0.85, 4: 0.9}


def weight_kernel_efficiency(dep: Deployment) -> float:
    """The dequantising kernels' share of the achievable bandwidth for the deployment's
    weights (the weaker of its layer matrices' and its experts' formats)."""
    shares = [1.0]
    for fmt in (dep.weights.layers, dep.weights.experts):
        if fmt.compute == "fp8" or fmt.element_bits >= 16:
            continue
        shares.append(DEQUANT_EFFICIENCY.get(fmt.element_bits, DEQUANT_EFFICIENCY[4]))
    return min(shares)


def f16_matvec_share(dep: Deployment, kernels: StepKernels, tokens: int) -> float:
    """The share of the achievable bandwidth the F16 weights are read at by the kernel class's
    F16 matrix-vector kernel: its HBM share where that kernel runs -- F16 layer matrices or
    experts, one token per step (``tokens``: a step of more, decode sequences or prompt
    tokens, takes a GEMM), on an NVIDIA HBM GPU (issue 9817 measured NVIDIA parts only; GDDR
    ones ran the same kernel near peak) -- else 1. A one-warp-per-row kernel reaches its
    full-wave share times the step's wave fill."""
    accelerator = dep.gpus.accelerator
    if tokens != 1 or not accelerator.hbm or accelerator.vendor != "nvidia":
        return 1.0
    if "fp16" not in (dep.weights.layers.name, dep.weights.experts.name):
        return 1.0
    if not kernels.f16_matvec_warp_per_row:
        return kernels.f16_matvec_hbm_share
    return kernels.f16_matvec_hbm_share * float(step_wave_fill(dep.model, rows_per_wave(dep)))


class UnknownWaves(InputError):
    """An old build's F16 mat-vec asked of a GPU whose waves the registry cannot size (no SM
    count, or a compute capability outside the block-limit table): refused, not guessed; a
    search over many GPUs (``plan``) leaves such a GPU out instead."""


def rows_per_wave(dep: Deployment) -> int:
    """Rows of a one-warp-per-row mat-vec one wave of ``dep``'s GPU runs: its SMs times the
    blocks an SM holds. Refused for a GPU whose SM count or compute capability's block limit
    the registry lacks: the wave fill would be a guess."""
    accelerator = dep.gpus.accelerator
    blocks = RESIDENT_BLOCKS_PER_SM.get(accelerator.compute_capability or (0, 0))
    if accelerator.sm_count is None or blocks is None:
        fixed = LLAMA_CPP_F16_MATVEC_FIX_BUILD
        raise UnknownWaves(
            f"--llama-cpp-build: a build before {fixed} times F16 weights on {accelerator.id} by "
            "its SM count and resident blocks per SM, which the registry does not hold for it; "
            f"give --llama-cpp-build {fixed} or later, or another --weight-dtype",
            field="llama_cpp_build",
            fix=f"give a build of {fixed} or later",
        )
    return accelerator.sm_count * blocks


def weight_share(dep: Deployment, kernels: StepKernels, tokens: int) -> float:
    """The share of the achievable bandwidth a step's weights are read at, the step
    multiplying them by ``tokens`` tokens: the weaker of the dequantising kernels'
    (:func:`weight_kernel_efficiency`) and the F16 mat-vec's."""
    return min(weight_kernel_efficiency(dep), f16_matvec_share(dep, kernels, tokens))


def moe_layer_count(dep: Deployment) -> int:
    model = dep.model
    blocks = model.block_counts(range(model.num_layers))
    return sum(n for _, ffn, n in blocks if isinstance(ffn, MoE))


def w4a16_experts(dep: Deployment) -> bool:
    """Whether the routed experts are integer 4-bit weight-only (GPTQ / AWQ / compressed-tensors
    int4), which the engines run as Marlin MoE kernels; NVFP4, MXFP4 and FP8 experts are not."""
    experts = dep.weights.experts
    return experts.name.startswith("int4") and experts.element_bits == 4


def moe_layer_kernel_seconds(dep: Deployment, kernels: StepKernels) -> float:
    """One MoE layer's kernel cost beyond its reads, by the kernel its experts run on."""
    if w4a16_experts(dep):
        return kernels.w4a16_moe_layer_seconds
    return kernels.moe_layer_seconds


def layer_kernel_seconds(dep: Deployment, kernels: StepKernels) -> float:
    """The step's per-layer kernel costs: every layer runs on one stage or another, one after
    the other."""
    moe = moe_layer_count(dep)
    dense = dep.model.num_layers - moe
    return dense * kernels.dense_layer_seconds + moe * moe_layer_kernel_seconds(dep, kernels)


def regime_of(dep: Deployment) -> str:
    """The accuracy regime the deployment's estimate falls in: ``single-gpu``, ``scale-up``
    (NVLink, Infinity Fabric), ``pcie`` or ``multi-node``."""
    kind = link_kind(dep)
    return {"none": "single-gpu", "network": "multi-node"}.get(kind, kind)


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
    """Fixed per-step cost: sampling, scheduling, launching the step."""
    measured: bool
    """Whether the efficiencies are the part's measured ones (else generic)."""
    layer_seconds: float = 0.0
    """Per-layer kernel costs beyond the reads (:class:`~kvcalc.engine.profiles.StepKernels`)."""
    band: Band | None = None
    """The spread of measured over estimated TPOT on the fit points of the regime."""

    @property
    def tpot_seconds(self) -> float:
        busy = self.memory_seconds
        if self.compute_seconds is not None:
            busy = max(busy, self.compute_seconds)
        return busy + self.communication_seconds + self.overhead_seconds + self.layer_seconds

    @property
    def tpot_low_seconds(self) -> float:
        """The band's low end (the estimate itself without a band), never below the roofline."""
        low = self.tpot_seconds * (self.band.low if self.band else 1.0)
        return max(low, self.roofline.tpot_seconds)

    @property
    def tpot_high_seconds(self) -> float:
        return self.tpot_seconds * (self.band.high if self.band else 1.0)

    @property
    def tokens_per_second(self) -> float:
        return self.roofline.batch / self.tpot_seconds

    @property
    def tokens_per_second_low(self) -> float:
        return self.roofline.batch / self.tpot_high_seconds

    @property
    def tokens_per_second_high(self) -> float:
        return self.roofline.batch / self.tpot_low_seconds


def achievable_memory_seconds(
    step: DecodeStep, eff: Efficiency, weight_share: float = 1.0
) -> float:
    """The roofline's reads (at full bandwidth) at the part's achievable bandwidth, the weights
    at ``weight_share`` of it (dequantising kernels)."""
    return (step.weight_read_seconds / weight_share + step.kv_read_seconds) / eff.bandwidth_fraction


def achievable_compute_seconds(step: DecodeStep, mfu: float) -> float | None:
    """The roofline's compute (at the dense peak) at the achievable share of it."""
    return None if step.compute_seconds is None else step.compute_seconds / mfu


def profiled(
    dep: Deployment, eff: Efficiency, profile: DecodeProfile | None, tokens: int
) -> tuple[float, float]:
    """A step's (communication, fixed overhead) seconds over ``tokens`` tokens: the GPU's
    figures, or as ``profile`` (the engine's or runtime's, :mod:`kvcalc.engine.profiles`)
    replaces them (its all-reduce latency on the scale-up link, its step overhead)."""
    communication = communication_seconds(dep, tokens, profile)
    if profile is None:
        return communication, eff.step_overhead_seconds
    return communication, profile.overhead_seconds(dep, eff)


def kernels_of(profile: DecodeProfile | None) -> StepKernels:
    """The per-layer kernel class of the stack ``profile`` describes (None: a serving
    engine's, what the estimate assumes without a profile)."""
    return SERVING_KERNELS if profile is None else profile.kernels


def tpot_estimate(
    dep: Deployment,
    *,
    batch: int,
    context_tokens: int,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
    step_tokens: int | None = None,
) -> TpotEstimate:
    """Realistic time per output token of ``batch`` sequences at ``context_tokens`` on one
    replica of ``dep`` (``mfu``: the share of the dense peak matmuls reach; default the part's
    measured ceiling; ``profile``: the engine's or runtime's decode profile, its all-reduce
    latency, step overhead and per-layer kernels; None: the GPU's figures with a serving
    engine's kernels). ``step_tokens``: the tokens the step's weights multiply, which pick the
    weight kernel (:func:`weight_share`); None: one per sequence, ``batch``."""
    accelerator = dep.gpus.accelerator
    eff = efficiency_of(accelerator)
    step = decode_step_for(dep, batch=batch, context_tokens=context_tokens)
    communication, overhead = profiled(dep, eff, profile, batch)
    tokens = batch if step_tokens is None else step_tokens
    return TpotEstimate(
        roofline=step,
        memory_seconds=achievable_memory_seconds(
            step, eff, weight_share(dep, kernels_of(profile), tokens)
        ),
        compute_seconds=achievable_compute_seconds(step, mfu or default_mfu(accelerator)),
        communication_seconds=communication,
        overhead_seconds=overhead,
        measured=eff.measured,
        layer_seconds=layer_kernel_seconds(dep, kernels_of(profile)),
        band=band_for(regime_of(dep)),
    )


def tpot_seconds(
    dep: Deployment,
    *,
    batch: int,
    context_tokens: int,
    roofline: bool = False,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
    bound: str = "estimate",
) -> float:
    """The TPOT a latency target is held to: the realistic estimate (``bound`` ``high``: the
    band's high end), or with ``roofline`` the bound (what `plan`'s and `check`'s
    ``--roofline`` select)."""
    if roofline:
        return decode_step_for(dep, batch=batch, context_tokens=context_tokens).tpot_seconds
    est = tpot_estimate(dep, batch=batch, context_tokens=context_tokens, mfu=mfu, profile=profile)
    return est.tpot_high_seconds if bound == "high" else est.tpot_seconds


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
    layer_seconds: float = 0.0
    """The forward pass's per-layer kernel costs (:class:`~kvcalc.engine.profiles.StepKernels`)."""
    band: Band | None = None
    """The regime's band (TPOT's ratios: :mod:`kvcalc.engine.accuracy`)."""

    @property
    def ttft_seconds(self) -> float:
        busy = self.weight_read_seconds
        if self.compute_seconds is not None:
            busy = max(busy, self.compute_seconds)
        return busy + self.communication_seconds + self.overhead_seconds + self.layer_seconds

    @property
    def ttft_low_seconds(self) -> float:
        return self.ttft_seconds * (self.band.low if self.band else 1.0)

    @property
    def ttft_high_seconds(self) -> float:
        return self.ttft_seconds * (self.band.high if self.band else 1.0)

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
        layer_seconds=layer_kernel_seconds(dep, kernels_of(profile)),
        band=band_for(regime_of(dep)),
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
