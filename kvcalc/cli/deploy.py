"""Options shared by `batch` and `decode`: GPUs, parallelism, dtypes and the memory budget, and
their resolution into engine inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import InputError, fail, kv_dtype_option, parse_size

if TYPE_CHECKING:
    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.units import DType
    from kvcalc.engine.weights import WeightPrecision

GpusOption = typer.Option(..., "--gpus", "-g", help="COUNTxGPU, e.g. 8xH100, 4xMI300X, h200")
TpOption = typer.Option(None, "--tp", min=1, max=4096, help="tensor parallel [default: GPUs/pp]")
PpOption = typer.Option(1, "--pp", min=1, max=1024, help="pipeline parallel stages")
GpuUtilOption = typer.Option(
    None, "--gpu-util", help="fraction of GPU memory the engine may use [default: 0.9]"
)
ReserveOption = typer.Option(
    None, "--reserve", help="instead of --gpu-util/--overhead: fraction of memory reserved"
)
OverheadOption = typer.Option(
    None, "--overhead", help="runtime overhead per GPU, e.g. 5GiB [default: estimated]"
)
GpuMemoryOption = typer.Option(None, "--gpu-memory", help="memory per GPU, e.g. 80GB")
WeightsOption = typer.Option(None, "--weights", help="total weight bytes, e.g. 140GB")
KvMemoryOption = typer.Option(None, "--kv-memory", help="KV budget per GPU directly, e.g. 52GiB")
WeightDtypeOption = typer.Option(
    None, "--weight-dtype", help="bf16, fp16, fp8, int8, int4, mxfp4 [default: model dtype]"
)
BlockSizeOption = typer.Option(16, "--block-size", min=1, max=65536, help="tokens per KV block")
PrefixOption = typer.Option(
    0, "--prefix-shared", min=0, max=1 << 30, help="prompt-prefix tokens shared by all sequences"
)


class LayoutError(InputError):
    """Valid options that this particular model cannot be split by (its heads or layers): the
    registry-wide table reports it as that model's row; any other bad option stops the command."""


def fraction(value: float | None, option: str, *, upper_inclusive: bool) -> float | None:
    if value is None:
        return None
    ok = 0 < value <= 1 if upper_inclusive else 0 <= value < 1
    if not ok:
        bounds = "in (0, 1]" if upper_inclusive else "in [0, 1)"
        fail(f"{option}: {value} is not a fraction {bounds}, e.g. 0.9")
    return value


def weight_precision(name: str | None, model: ModelSpec) -> WeightPrecision:
    """How a --weight-dtype is applied, following how quantized checkpoints ship: 8- and 4-bit
    formats quantize the layer matrices and keep embeddings, LM head, norms and router at the
    model dtype; MXFP4 quantizes the routed experts only (as gpt-oss ships), or the layers of a
    dense model; 16/32-bit dtypes apply to everything."""
    from kvcalc.engine.units import WEIGHT_DTYPES, UnitError, dtype
    from kvcalc.engine.weights import WeightPrecision

    try:
        chosen = dtype(name or model.default_dtype, WEIGHT_DTYPES)
    except UnitError as exc:
        fail(f"--weight-dtype: {exc}")
    keep = dtype(model.default_dtype)
    if chosen.bits >= 16:
        return WeightPrecision.uniform(chosen)
    if chosen.name == "mxfp4" and model.moe is not None:
        return WeightPrecision(experts=chosen, layers=keep, other=keep)
    return WeightPrecision.quantized_layers(chosen, keep)


def compute_dtype_for(precision: WeightPrecision) -> str:
    """Matmul dtype: FP8 weights run FP8 GEMMs; other quantized weights are dequantized to 16 bit
    (weight-only kernels), so they compute at the bf16 rate."""
    return "fp8" if precision.layers.name == "fp8" else "bf16"


def resolve_gpus(text: str) -> GpuSet:
    from kvcalc.registry.gpus import parse_gpu_set

    return parse_gpu_set(text)


@dataclass(frozen=True)
class Deployment:
    """Everything `batch` and `decode` need, resolved from the options."""

    model: ModelSpec
    gpus: GpuSet
    tp: int
    pp: int
    precision: WeightPrecision
    kv_dtype: DType
    gpu_memory_bytes: int
    weights_per_stage: tuple[int, ...]
    weights_total_override: int | None
    usable_per_gpu: int
    overhead_per_gpu: int
    kv_memory_per_gpu: int | None
    block_size: int
    prefix_shared: int
    gpu_util: float | None

    def capacity(self, contexts: list[int]) -> Capacity:
        from kvcalc.engine.capacity import capacity
        from kvcalc.engine.weights import pipeline_stages

        return capacity(
            self.model,
            gpus=str(self.gpus),
            gpu_count=self.gpus.count,
            gpu_memory_bytes=self.gpu_memory_bytes,
            tp=self.tp,
            stages=pipeline_stages(self.model.num_layers, self.pp),
            weights_per_stage=self.weights_per_stage,
            kv_dtype=self.kv_dtype,
            contexts=contexts,
            usable_per_gpu=self.usable_per_gpu,
            overhead_per_gpu=self.overhead_per_gpu,
            kv_memory_per_gpu=self.kv_memory_per_gpu,
            block_size=self.block_size,
            prefix_shared_tokens=self.prefix_shared,
        )


def deployment(
    model: ModelSpec,
    gpus: GpuSet,
    *,
    tp: int | None,
    pp: int,
    gpu_util: float | None,
    reserve: float | None,
    overhead: str | None,
    gpu_memory: str | None,
    weights: str | None,
    kv_memory: str | None,
    weight_dtype: str | None,
    kv_dtype: DType,
    block_size: int,
    prefix_shared: int,
) -> Deployment:
    from kvcalc.engine.capacity import (
        DeploymentError,
        default_overhead_bytes,
        replicas,
        usable_bytes,
    )
    from kvcalc.engine.spec import ParallelismError
    from kvcalc.engine.weights import weights_per_gpu

    gpu_util = fraction(gpu_util, "--gpu-util", upper_inclusive=True)
    reserve = fraction(reserve, "--reserve", upper_inclusive=False)
    if reserve is not None and (gpu_util is not None or overhead is not None):
        fail("--reserve replaces --gpu-util and --overhead; give one or the other")
    if tp is None:
        if gpus.count % pp:
            fail(f"--pp {pp} does not divide the {gpus.count} GPUs of --gpus {gpus}")
        tp = gpus.count // pp
    try:
        replicas(gpus.count, tp, pp)
    except DeploymentError as exc:
        fail(f"--tp/--pp: {exc}")
    try:
        model.per_rank(tp)
    except ParallelismError as exc:
        raise LayoutError(f"--tp/--pp: {exc}") from None
    if pp > model.num_layers:
        raise LayoutError(f"--pp {pp} exceeds the {model.num_layers} layers of {model.id}")
    precision = weight_precision(weight_dtype, model)
    memory = parse_size(gpu_memory, "--gpu-memory") if gpu_memory else gpus.accelerator.memory_bytes
    override = parse_size(weights, "--weights") if weights else None
    if override is not None:
        per_gpu = -(-override // (tp * pp))
        per_stage = tuple(per_gpu for _ in range(pp))
    else:
        per_stage = tuple(s.bytes_per_gpu for s in weights_per_gpu(model, precision, tp, pp))
    if reserve is not None:
        extra = 0
    elif overhead is not None:
        extra = parse_size(overhead, "--overhead")
    else:
        extra = default_overhead_bytes(model, tp, pp)
    return Deployment(
        model=model,
        gpus=gpus,
        tp=tp,
        pp=pp,
        precision=precision,
        kv_dtype=kv_dtype,
        gpu_memory_bytes=memory,
        weights_per_stage=per_stage,
        weights_total_override=override,
        usable_per_gpu=usable_bytes(memory, gpu_util, reserve),
        overhead_per_gpu=extra,
        kv_memory_per_gpu=parse_size(kv_memory, "--kv-memory") if kv_memory else None,
        block_size=block_size,
        prefix_shared=prefix_shared,
        gpu_util=gpu_util,
    )


def weight_name(dep: Deployment) -> str:
    p = dep.precision
    return "+".join(dict.fromkeys([p.layers.name, p.experts.name, p.other.name]))


def option_values(values: dict, spec: ModelSpec) -> dict:
    """The deployment options among a command's parameters (`batch` and `decode` share them)."""
    return {
        "tp": values["tp"],
        "pp": values["pp"],
        "gpu_util": values["gpu_util"],
        "reserve": values["reserve"],
        "overhead": values["overhead"],
        "gpu_memory": values["gpu_memory"],
        "weights": values["weights"],
        "kv_memory": values["kv_memory"],
        "weight_dtype": values["weight_dtype"],
        "kv_dtype": kv_dtype_option(values["kv_dtype"], spec.default_dtype),
        "block_size": values["block_size"],
        "prefix_shared": values["prefix_shared"],
    }
