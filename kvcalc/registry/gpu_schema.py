"""Pydantic schema of the accelerator registry files (model_configs/gpus/*.yaml).

Kept apart from the lookup in :mod:`kvcalc.registry.gpus` so that resolving ``--gpus 8xH100``
from the validated-spec cache does not import pydantic.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcalc.engine.hardware import Accelerator, Efficiency
from kvcalc.engine.units import GB, TB, GiB, MiB
from kvcalc.registry.load import REGISTRY_ID

# Every number of an accelerator file is bounded: whole figures (bytes, MiB, lanes, watts)
# below 2^50 and decimal figures (GB, TB/s, TFLOPS, GB/s) finite and below 10^9 in their unit,
# far beyond any datasheet, so that no file can make the engine's arithmetic absurd.
MAX_WHOLE = 1 << 50
MAX_DECIMAL = 1e9
PosInt = Annotated[int, Field(gt=0, le=MAX_WHOLE, strict=True)]
PosNumber = Annotated[float, Field(gt=0, le=MAX_DECIMAL, allow_inf_nan=False)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: Which capacity figure is the usable one:
#: cuda_total  - torch ``total_memory`` / cudaDeviceProp.totalGlobalMem (what an allocator sees);
#: nvidia_smi  - the nvidia-smi Memory-Usage total (a few hundred MiB above cuda_total);
#: rocm_smi    - rocm-smi "VRAM Total Memory (B)";
#: label_gib   - the label read as GiB, where a source states GiB;
#: label_gb    - the label read as decimal GB: the smaller reading, used when nothing better is
#:               known so that fit results err on the safe side.
UsableBasis = Literal["cuda_total", "nvidia_smi", "rocm_smi", "label_gib", "label_gb"]


class _SourcedGiB(_Strict):
    """A figure in GiB (2^30 B) with the lines it comes from."""

    gib: PosNumber
    source: list[str] = Field(min_length=1, description="the log lines and where they are")

    def total_bytes(self) -> int:
        return int(Decimal(str(self.gib)) * GiB)


class LoggedTotal(_SourcedGiB):
    """The device total as a serving engine's start-up log prints it (torch ``mem_get_info``'s
    total, two decimals of GiB): what vLLM, SGLang and TensorRT-LLM size their budgets from.
    Kept apart from ``cuda_total_*`` (exact figures, which set the usable memory) so that a
    rounded log figure moves the engines' start-up models and not the capacity tables."""

    gib: PosNumber = Field(description="the logged total, GiB (2^30 B), as printed")


class AvailableAtStart(_SourcedGiB):
    """On a unified-memory part, the most memory its OS has been measured to leave available to a
    process at start-up (MemAvailable, which vLLM reads as the integrated GPU's free memory):
    an engine that requests more than this does not start."""

    gib: PosNumber = Field(description="the most available at start-up, GiB (2^30 B)")
    source: list[str] = Field(min_length=1, description="the measurements and where they are")


class Memory(_Strict):
    marketed_gb: PosNumber = Field(description="the vendor's capacity label, as printed")
    type: str
    nvidia_smi_mib: PosInt | None = Field(
        None, description="nvidia-smi total (MiB = 2^20 B); ECC on for GDDR parts with ECC"
    )
    nvidia_smi_mib_ecc_off: PosInt | None = Field(
        None, description="nvidia-smi total with ECC disabled (GDDR parts lose 1/16 to ECC)"
    )
    cuda_total_mib: PosInt | None = Field(
        None, description="torch total_memory / cudaDeviceProp.totalGlobalMem, in MiB"
    )
    cuda_total_bytes: PosInt | None = Field(
        None, description="the same in bytes, when the source prints bytes (deviceQuery)"
    )
    rocm_smi_bytes: PosInt | None = Field(None, description="rocm-smi VRAM Total Memory (B)")
    cuda_total_logged: LoggedTotal | None = Field(
        None,
        description="the CUDA total an engine's start-up log prints (\"Free memory on device "
        "(F/T GiB)\"), with its source: the engines' start-up models use it where no exact "
        "CUDA total is given",
    )
    unified: bool = Field(
        False,
        description="one pool shared with the CPU and OS (DGX Spark, Apple): the total is the "
        "system's, and what the OS and other processes hold comes out of it",
    )
    available_at_start: AvailableAtStart | None = Field(
        None,
        description="unified parts only: the most memory the OS leaves available at start-up, "
        "as measured; vLLM refuses to start when it requests more",
    )
    usable: UsableBasis = Field(description="the figure kvcalc uses as capacity")
    usable_why: str = Field(min_length=1, description="why that figure was chosen")

    @model_validator(mode="after")
    def _check(self) -> Memory:
        if self.cuda_total_mib is not None and self.cuda_total_bytes is not None:
            raise ValueError("give cuda_total_mib or cuda_total_bytes, not both")
        needed = {
            "cuda_total": self._cuda_total(),
            "nvidia_smi": self.nvidia_smi_mib,
            "rocm_smi": self.rocm_smi_bytes,
        }
        if self.usable in needed and needed[self.usable] is None:
            raise ValueError(f"usable is {self.usable!r} but that figure is not given")
        cuda, smi = self._cuda_total(), self.nvidia_smi_mib
        if cuda is not None and smi is not None and cuda > smi * MiB:
            raise ValueError("the CUDA total cannot exceed nvidia_smi_mib")
        if self.available_at_start is not None and not self.unified:
            raise ValueError("available_at_start is for unified memory (set unified: true)")
        logged = self.cuda_total_logged
        if logged is not None and smi is not None and logged.total_bytes() > smi * MiB:
            raise ValueError("the logged CUDA total cannot exceed nvidia_smi_mib")
        return self

    def _cuda_total(self) -> int | None:
        if self.cuda_total_bytes is not None:
            return self.cuda_total_bytes
        return None if self.cuda_total_mib is None else self.cuda_total_mib * MiB

    def engine_total_bytes(self) -> int | None:
        """The total a CUDA allocator reports (torch ``mem_get_info``), where measured: the
        exact CUDA total, else the one a start-up log prints; None: neither is known."""
        exact = self._cuda_total()
        if exact is not None:
            return exact
        return None if self.cuda_total_logged is None else self.cuda_total_logged.total_bytes()

    def usable_bytes(self) -> int:
        if self.usable == "cuda_total":
            cuda = self._cuda_total()
            assert cuda is not None
            return cuda
        if self.usable == "nvidia_smi":
            assert self.nvidia_smi_mib is not None
            return self.nvidia_smi_mib * MiB
        if self.usable == "rocm_smi":
            assert self.rocm_smi_bytes is not None
            return self.rocm_smi_bytes
        unit = GiB if self.usable == "label_gib" else GB
        return int(Decimal(str(self.marketed_gb)) * unit)

    def label(self) -> str:
        return f"{self.marketed_gb:g} GB" + (" unified" if self.unified else "")


class DenseTflops(_Strict):
    """Dense (no 2:4 sparsity) tensor/matrix TFLOPS, decimal; null where not published."""

    bf16: PosNumber | None
    fp16: PosNumber | None
    fp8: PosNumber | None
    fp4: PosNumber | None


class Link(_Strict):
    type: str
    bidirectional_gb_per_s: PosNumber | None = Field(
        description="per device, both directions added (NVLink '900 GB/s' = 450 each way)"
    )


class Pcie(_Strict):
    gen: PosInt | None
    lanes: PosInt | None
    bidirectional_gb_per_s: PosNumber | None = Field(description="Gen5 x16 = 128, Gen4 x16 = 64")


class DecodeEfficiency(_Strict):
    """What real decode steps achieve on this part (or its family), fitted to or read from the
    published measurements in ``source``; kvcalc's realistic TPOT/TTFT estimate applies it."""

    bandwidth_fraction: Annotated[float, Field(gt=0, le=1)] = Field(
        description="share of the peak DRAM bandwidth a decode step's weight and KV reads reach"
    )
    step_overhead_ms: Annotated[float, Field(ge=0)] = Field(
        description="fixed time per decode step beyond the reads (kernel launches, sampling)"
    )
    link_latency_us: Annotated[float, Field(ge=0)] = Field(
        description="latency of one small tensor-parallel all-reduce over the GPU's link"
    )
    matmul_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="measured share of the dense peak a large matmul reaches (prefill)"
    )
    source: list[str] = Field(min_length=1)

    def to_engine(self) -> Efficiency:
        return Efficiency(
            bandwidth_fraction=self.bandwidth_fraction,
            step_overhead_seconds=self.step_overhead_ms / 1000,
            link_latency_seconds=self.link_latency_us / 1_000_000,
            matmul_fraction=self.matmul_fraction,
        )


Status = Literal["verified", "partial", "unverified"]

_TOP_FIELDS = (
    "memory", "bandwidth_tbps", "dense_tflops", "interconnect", "pcie", "tdp_w", "node_gpus",
)


class GpuFile(_Strict):
    id: str = Field(pattern=REGISTRY_ID.pattern)
    name: str
    vendor: Literal["nvidia", "amd", "intel", "google", "apple", "aws"]
    aliases: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._\-]*$")]] = []
    status: Status = Field(
        description="verified: every field matched a retrieved source; partial: the fields in "
        "`unverified` did not; unverified: no official datasheet was retrieved"
    )
    unverified: list[str] = Field(
        [], description="fields no retrieved source confirmed (UNVERIFIED in the reference)"
    )
    source: list[str] = Field(min_length=1)
    notes: str | None = None
    memory: Memory
    bandwidth_tbps: PosNumber = Field(description="peak DRAM bandwidth, decimal TB/s")
    dense_tflops: DenseTflops
    sparse_note: str | None = None
    interconnect: Link | None = None
    pcie: Pcie | None = None
    tdp_w: PosInt | None = None
    node_gpus: Annotated[int, Field(gt=0, le=4096, strict=True)] | None = Field(
        None,
        description="GPUs one scale-up link joins in the usual system (an HGX or OAM board's 8, "
        "an NVL72 rack's 72); a tensor-parallel group beyond it crosses the inter-node network",
    )
    efficiency: DecodeEfficiency | None = None
    compute_capability: str | None = Field(
        None,
        pattern=r"^\d+\.\d+$",
        description="CUDA compute capability (NVIDIA's CUDA GPUs list, "
        "https://developer.nvidia.com/cuda-gpus); it picks vLLM's default attention backend",
    )

    sm_count: PosInt | None = Field(
        None,
        description="streaming multiprocessors of an NVIDIA GPU, as its architecture whitepaper "
        "counts them (A100: 108; H100 SXM5: 132; H100 PCIe: 114), named in source; it times "
        "llama.cpp's pre-b3916 F16 mat-vec, whose one-warp-per-row blocks run in waves of SMs x "
        "resident blocks per SM (without it, --llama-cpp-build below 3916 is refused for F16 "
        "weights at one token per step on an NVIDIA HBM GPU, and plan leaves the GPU out)",
    )

    @model_validator(mode="after")
    def _check(self) -> GpuFile:
        for path in self.unverified:
            if path.split(".")[0] not in _TOP_FIELDS:
                raise ValueError(f"unverified entry {path!r} names no field of the file")
        if self.status == "verified" and self.unverified:
            raise ValueError("status is verified but some fields are listed as unverified")
        if self.status == "partial" and not self.unverified:
            raise ValueError("status is partial: list the unverified fields")
        return self

    def names(self) -> list[str]:
        return [self.id, *self.aliases]

    def to_accelerator(self) -> Accelerator:
        link = self.interconnect
        pcie = self.pcie
        return Accelerator(
            id=self.id,
            name=self.name,
            memory_bytes=self.memory.usable_bytes(),
            memory_marketed=self.memory.label(),
            bandwidth_bytes_per_s=_scaled(self.bandwidth_tbps, TB),
            dense_flops={
                d: _scaled(v, TB) if v is not None else None
                for d, v in self.dense_tflops.model_dump().items()
            },
            interconnect=link.type if link else None,
            interconnect_bytes_per_s=_scaled(link.bidirectional_gb_per_s, GB)
            if link and link.bidirectional_gb_per_s
            else None,
            pcie_bytes_per_s=_scaled(pcie.bidirectional_gb_per_s, GB)
            if pcie and pcie.bidirectional_gb_per_s
            else None,
            smi_memory_bytes=self.memory.nvidia_smi_mib * MiB
            if self.memory.nvidia_smi_mib
            else None,
            tdp_watts=self.tdp_w,
            node_gpus=self.node_gpus,
            unified_memory=self.memory.unified,
            cuda_total_bytes=self.memory.engine_total_bytes(),
            available_at_start_bytes=(
                None if self.memory.available_at_start is None
                else self.memory.available_at_start.total_bytes()
            ),
            efficiency=self.efficiency.to_engine() if self.efficiency else None,
            compute_capability=_capability(self.compute_capability),
            vendor=self.vendor,
            memory_type=self.memory.type,
            sm_count=self.sm_count,
        )


def _capability(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    major, minor = text.split(".")
    return int(major), int(minor)


def _scaled(value: float, unit: int) -> int:
    # Through Decimal(str(...)) so that 3.35 TB/s is exactly 3_350_000_000_000 B/s.
    return int(Decimal(str(value)) * unit)
