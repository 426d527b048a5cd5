"""Accelerators and sets of them: memory, bandwidth and dense compute, as the engine needs them.

Conventions (gpu-notes.md in the reference):

- ``memory_bytes`` is the capacity the device reports to software (CUDA/torch total_memory where a
  public log shows it, else the nvidia-smi/rocm-smi total), never the marketing label: an "80 GB"
  H100 SXM shows 81,082 MiB (79.18 GiB) to torch. The registry file says which figure it used.
- Bandwidth and FLOPS are decimal (1 TB/s = 10^12 B/s), as vendors quote them.
- FLOPS are dense (no 2:4 sparsity): datasheets that print sparse figures are halved upstream.
- Link speeds are bidirectional aggregates per device (NVLink "900 GB/s" = 450 GB/s each way).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from kvcalc.engine.units import MiB, UnitError, canonical_dtype_name

#: Compute dtypes a datasheet may publish a dense tensor/matrix rate for.
COMPUTE_DTYPES = ("bf16", "fp16", "fp8", "fp4")

#: A GPU set larger than this is a typo: the largest clusters announced hold ~10^5 devices.
MAX_GPU_COUNT = 100_000

# When a part publishes no rate for a dtype, the kernel that runs on it falls back to a wider
# type: FP8/FP4 weights are dequantised and multiplied at 16 bits on parts without FP8/FP4 tensor
# cores (e.g. FP8-weight Marlin kernels on Ampere), and BF16 models run as FP16 on parts without
# BF16 (V100, T4). The first published rate along the chain is used.
_FALLBACK: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16", "fp16"),
    "fp16": ("fp16", "bf16"),
    "fp8": ("fp8", "bf16", "fp16"),
    "fp4": ("fp4", "fp8", "bf16", "fp16"),
}

# Storage names beyond the shared aliases of units.canonical_dtype_name: both 4-bit float
# formats run on the FP4 tensor cores.
_COMPUTE_ALIASES = {"mxfp4": "fp4", "nvfp4": "fp4"}


def capability_family(capability: tuple[int, int] | None, major: int) -> bool:
    """Whether a GPU of compute ``capability`` is of the ``major``.x family, as vLLM tests it
    (``is_device_capability_family``, vllm/platforms/interface.py); False when it is not known
    (ROCm)."""
    return capability is not None and capability[0] == major


def compute_dtype(name: str) -> str:
    """Normalise a compute dtype name (``bf16``, ``bfloat16``, ``fp8``, ``nvfp4``, ...)."""
    key = canonical_dtype_name(name)
    key = _COMPUTE_ALIASES.get(key, key)
    if key not in COMPUTE_DTYPES:
        raise UnitError(
            f"unknown compute dtype {name!r}; choose one of {', '.join(COMPUTE_DTYPES)}"
        )
    return key


@dataclass(frozen=True)
class Efficiency:
    """What a real decode step achieves on a GPU family, from published measurements (the
    registry file's ``efficiency`` block cites them); :mod:`kvcalc.engine.latency` applies it."""

    bandwidth_fraction: float
    """Share of peak DRAM bandwidth a decode step's reads achieve."""
    step_overhead_seconds: float
    """Fixed time per step beyond the reads: kernel launches, sampling, scheduling."""
    link_latency_seconds: float
    """Latency of one small all-reduce among the GPUs of a tensor-parallel group over the
    scale-up link (NVLink, Infinity Fabric: the engines' one-shot kernel); PCIe and the network
    are :mod:`kvcalc.engine.communication`'s."""
    matmul_fraction: float | None = None
    """Share of the dense peak a large matmul achieves (the default prefill --mfu)."""
    measured: bool = True
    """False for the generic figures used where the registry has none for the part."""

    def __post_init__(self) -> None:
        for name in ("bandwidth_fraction", "matmul_fraction"):
            value = getattr(self, name)
            if value is not None and not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], not {value}")
        if self.step_overhead_seconds < 0 or self.link_latency_seconds < 0:
            raise ValueError("step overhead and link latency must not be negative")


#: How far nvidia-smi's memory total lies above the total CUDA reports (torch ``mem_get_info``,
#: what vLLM, SGLang and TensorRT-LLM size from): the median, to the MiB, over the registry GPUs
#: where both are known, one per distinct pair (RTX 3090 451, L4 455, H100 SXM 477, RTX 4090
#: 480, H200 606, L40S 613, A100 40GB 621, RTX PRO 6000 638, B200 729, A100 80GB 768 MiB: their
#: ``nvidia_smi_mib`` and ``cuda_total_*``, tests/fixtures/cuda_totals/README.md), recomputed by
#: tests/test_gpus.py. A GPU with only an nvidia-smi total is started from that total less this,
#: and the output says it is estimated (each measured GPU lies within 0.2 GiB of it).
SMI_ABOVE_CUDA_BYTES = 609 * MiB


@dataclass(frozen=True)
class Accelerator:
    """One device as software sees it (one GCD of an MI250X, one GPU of a GB200 superchip)."""

    id: str
    name: str
    memory_bytes: int
    memory_marketed: str
    bandwidth_bytes_per_s: int
    dense_flops: Mapping[str, int | None] = field(hash=False)
    interconnect: str | None = None
    interconnect_bytes_per_s: int | None = None
    pcie_bytes_per_s: int | None = None
    smi_memory_bytes: int | None = None
    """The nvidia-smi ``memory.total``, where known: SGLang sizes its default memory share from it
    (``get_nvgpu_memory_capacity``), not from the CUDA total in ``memory_bytes``."""
    tdp_watts: int | None = None
    node_gpus: int | None = None
    """GPUs one scale-up link joins (an HGX board's 8 over NVSwitch, an NVL72 rack's 72): a
    tensor-parallel group larger than this crosses the slower inter-node network. None: not in
    the registry (no node rule applies)."""
    unified_memory: bool = False
    """Memory shared with the CPU and OS (DGX Spark's GB10, Apple M-series): ``memory_bytes`` is
    the system's total, and an engine's share of it must leave the OS and other processes theirs.
    vLLM on such a GPU (``is_integrated_gpu``) still requests ``total x gpu_memory_utilization``,
    but starts only when the OS reports that much available (``psutil`` MemAvailable)."""
    available_at_start_bytes: int | None = None
    """A unified part's most memory available to a process at start-up, as measured (what its
    OS leaves); None: not measured, or not unified."""
    cuda_total_bytes: int | None = None
    """The total CUDA reports (torch ``mem_get_info``), where measured: an exact figure or one a
    start-up log prints. Serving engines start from it (vLLM's requested memory is this total x
    gpu_memory_utilization); None: not measured, ``memory_bytes`` stands in."""
    efficiency: Efficiency | None = None
    """Measured decode efficiency of the part's family; None: none is in the registry."""
    compute_capability: tuple[int, int] | None = None
    """The CUDA compute capability (9.0 Hopper, 10.0 B200, 12.0 RTX Blackwell), which picks an
    engine's default attention backend; None: not an NVIDIA GPU (ROCm and others)."""
    vendor: str | None = None
    """nvidia, amd, intel, google, apple, aws (the registry's); None: not from the registry."""
    memory_type: str | None = None
    """The DRAM technology as the vendor's datasheet names it (``HBM3``, ``GDDR6X``, the
    registry's ``memory.type``); None: not from the registry."""
    sm_count: int | None = None
    """Streaming multiprocessors of an NVIDIA GPU, as its architecture whitepaper counts them
    (the registry's ``sm_count``): how many blocks of a kernel run at once (an old llama.cpp
    F16 mat-vec's waves, :mod:`kvcalc.engine.matvec_waves`); None: not in the registry."""

    @property
    def engine_total_bytes(self) -> int:
        """The CUDA total a serving engine starts from: the measured one, else nvidia-smi's total
        less :data:`SMI_ABOVE_CUDA_BYTES` (an estimate, :attr:`engine_total_estimated`), else
        the usable memory."""
        if self.cuda_total_bytes is not None:
            return self.cuda_total_bytes
        if self.smi_memory_bytes is not None:
            return self.smi_memory_bytes - SMI_ABOVE_CUDA_BYTES
        return self.memory_bytes

    @property
    def engine_total_estimated(self) -> bool:
        """Whether :attr:`engine_total_bytes` is estimated from nvidia-smi's total."""
        return self.cuda_total_bytes is None and self.smi_memory_bytes is not None

    @property
    def hbm(self) -> bool:
        """Whether the memory is High Bandwidth Memory (HBM, HBM2e, HBM3e ...), stacked beside
        the die: a kernel's memory-access pattern matters more there than on GDDR (llama.cpp
        issue 9817)."""
        return self.memory_type is not None and self.memory_type.upper().startswith("HBM")

    @property
    def link_bytes_per_s(self) -> int | None:
        """One direction of the GPU-to-GPU link tensor parallelism uses: the scale-up
        interconnect (NVLink, Infinity Fabric), else PCIe; None when neither is known."""
        both_ways = self.interconnect_bytes_per_s or self.pcie_bytes_per_s
        return None if both_ways is None else both_ways // 2

    def __post_init__(self) -> None:
        if self.memory_bytes <= 0:
            raise ValueError(f"{self.id}: memory_bytes must be positive")
        if self.bandwidth_bytes_per_s <= 0:
            raise ValueError(f"{self.id}: bandwidth_bytes_per_s must be positive")
        unknown = sorted(set(self.dense_flops) - set(COMPUTE_DTYPES))
        if unknown:
            raise ValueError(f"{self.id}: dense_flops has unknown dtypes {unknown}")
        rates = {d: self.dense_flops.get(d) for d in COMPUTE_DTYPES}
        if any(r is not None and r <= 0 for r in rates.values()):
            raise ValueError(f"{self.id}: dense_flops must be positive or None")
        if self.node_gpus is not None and self.node_gpus < 1:
            raise ValueError(f"{self.id}: node_gpus must be positive or None")
        object.__setattr__(self, "dense_flops", MappingProxyType(rates))

    def dense_flops_for(self, dtype: str) -> int | None:
        """Dense FLOP/s for matmuls in ``dtype``, falling back to a wider published rate.

        FP8 on a part without FP8 tensor cores (A100) returns the BF16 rate, FP4 without FP4 the
        FP8 rate, and so on (see ``_FALLBACK``). None when the vendor publishes no tensor rate at
        all (Apple M-series, A10G).
        """
        for candidate in _FALLBACK[compute_dtype(dtype)]:
            rate = self.dense_flops[candidate]
            if rate is not None:
                return rate
        return None


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class GpuSet:
    """``count`` identical accelerators serving one model replica (e.g. 8x H100 SXM)."""

    accelerator: Accelerator
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_GPU_COUNT:
            raise ValueError(f"GPU count must be between 1 and {MAX_GPU_COUNT:,}, not {self.count}")

    @property
    def memory_bytes(self) -> int:
        return self.accelerator.memory_bytes * self.count

    @property
    def bandwidth_bytes_per_s(self) -> int:
        return self.accelerator.bandwidth_bytes_per_s * self.count

    def dense_flops_for(self, dtype: str) -> int | None:
        rate = self.accelerator.dense_flops_for(dtype)
        return None if rate is None else rate * self.count

    def __str__(self) -> str:
        return f"{self.count}x {self.accelerator.name}"
