"""The accelerator registry (model_configs/gpus/*.yaml): schema, lookup and GPU-set parsing.

Each file records every capacity figure a source gives (marketing label, nvidia-smi total,
CUDA/torch total, rocm-smi total) and names, in ``memory.usable``, the one kvcalc sizes with, and
why. Lookup is lazy: ``h100-sxm`` reads ``gpus/h100-sxm.yaml`` and nothing else; only an alias
(``h100``) or a miss reads the other files.
"""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcalc.engine.hardware import MAX_GPU_COUNT, Accelerator, GpuSet
from kvcalc.engine.units import GB, TB, GiB, MiB
from kvcalc.registry.load import (
    RegistryError,
    UnknownNameError,
    _name_index,
    close_names,
    read_yaml,
    registry_root,
    validate,
)

PosInt = Annotated[int, Field(gt=0, strict=True)]
PosNumber = Annotated[float, Field(gt=0)]


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
        return self

    def _cuda_total(self) -> int | None:
        if self.cuda_total_bytes is not None:
            return self.cuda_total_bytes
        return None if self.cuda_total_mib is None else self.cuda_total_mib * MiB

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
        return f"{self.marketed_gb:g} GB"


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


Status = Literal["verified", "partial", "unverified"]

_TOP_FIELDS = (
    "memory", "bandwidth_tbps", "dense_tflops", "interconnect", "pcie", "tdp_w",
)


class GpuFile(_Strict):
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    vendor: Literal["nvidia", "amd", "intel", "google", "apple"]
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
        )


def _scaled(value: float, unit: int) -> int:
    # Through Decimal(str(...)) so that 3.35 TB/s is exactly 3_350_000_000_000 B/s.
    return int(Decimal(str(value)) * unit)


# ---------------------------------------------------------------- lookup


def gpus_dir(root: Path | None = None) -> Path:
    return (root or registry_root()) / "gpus"


def load_gpu_file(path: Path) -> GpuFile:
    gpu = validate(path, read_yaml(path), GpuFile)
    if gpu.id != path.stem:
        raise RegistryError(f"{path}: id: {gpu.id!r} must match the file name {path.stem!r}")
    return gpu


def gpu_paths(root: Path | None = None) -> list[Path]:
    directory = gpus_dir(root)
    if not directory.is_dir():
        raise RegistryError(f"{directory}: registry directory not found (set KVCALC_REGISTRY)")
    return sorted(directory.glob("*.yaml"))


_FILE_KEY = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


def find_gpu(name: str, root: Path | None = None) -> GpuFile:
    """Resolve an accelerator id or alias (case-insensitive) to its registry file."""
    key = name.strip().lower()
    directory = gpus_dir(root)
    if _FILE_KEY.match(key):
        direct = directory / f"{key}.yaml"
        if direct.is_file():
            return load_gpu_file(direct)
    if not directory.is_dir():
        raise RegistryError(f"{directory}: registry directory not found (set KVCALC_REGISTRY)")
    index = _name_index(directory)
    if key in index:
        return load_gpu_file(index[key])
    raise UnknownNameError("gpu", name, close_names(key, index))


def all_gpus(root: Path | None = None) -> list[GpuFile]:
    return [load_gpu_file(p) for p in gpu_paths(root)]


def check_gpus(root: Path | None = None) -> list[str]:
    """Validate every accelerator file; one message per problem (empty when all are good)."""
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for path in gpu_paths(root):
        try:
            gpu = load_gpu_file(path)
        except RegistryError as exc:
            problems.append(str(exc))
            continue
        for name in gpu.names():
            key = name.lower()
            if key in seen and seen[key] != path:
                problems.append(f"{path}: name {name!r} is already used by {seen[key].name}")
            seen[key] = path
    return problems


# ---------------------------------------------------------------- GPU sets


class GpuSetError(RegistryError, ValueError):
    """A GPU set that cannot be parsed (bad count or shape); one line naming the fix."""


_SET_FORMS = "use COUNTxGPU such as 8xH100, 4xMI300X, or a single name such as h200"
_SPLIT = re.compile(r"^\s*(?P<count>[^x×*\s]+)\s*[x×*]\s*(?P<gpu>\S.*?)\s*$", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?[\d.,_eE]+$")
_COUNT_ONLY = re.compile(r"^\s*[+-]?\d+\s*[x×*]?\s*$", re.IGNORECASE)


def parse_gpu_set(text: str, root: Path | None = None) -> GpuSet:
    """Parse ``8xH100``, ``8x h100``, ``4*mi300x`` or a bare name (count 1) into a GpuSet."""
    if not text.strip():
        raise GpuSetError(f"empty GPU set: {_SET_FORMS}")
    match = _SPLIT.match(text)
    if match is None or not _NUMBER.match(match["count"]):
        try:
            gpu = find_gpu(text, root)
        except UnknownNameError:
            if _COUNT_ONLY.match(text):
                raise GpuSetError(f"GPU set {_shown(text)} names no GPU: {_SET_FORMS}") from None
            if match is not None and _is_gpu_name(match["gpu"], root):
                raise GpuSetError(
                    f"invalid GPU count {_shown(match['count'])} in {_shown(text)}: {_SET_FORMS}"
                ) from None
            raise
        return GpuSet(gpu.to_accelerator(), 1)
    count = _parse_count(match["count"], text)
    return GpuSet(find_gpu(match["gpu"], root).to_accelerator(), count)


def _is_gpu_name(name: str, root: Path | None) -> bool:
    try:
        find_gpu(name, root)
    except UnknownNameError:
        return False
    return True


def _shown(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _parse_count(raw: str, text: str) -> int:
    where = f"{_shown(raw)} in {_shown(text)}"
    if not raw.lstrip("+-").isdigit() or not raw.isascii() or raw.count("-") + raw.count("+") > 1:
        raise GpuSetError(f"invalid GPU count {where}: the count is a whole number")
    digits = raw.lstrip("+-").lstrip("0")
    if raw.startswith("-") or not digits:
        raise GpuSetError(f"invalid GPU count {where}: it must be at least 1")
    # Compare lengths first: int() refuses strings of more than 4,300 digits.
    if len(digits) > len(str(MAX_GPU_COUNT)) or int(digits) > MAX_GPU_COUNT:
        raise GpuSetError(
            f"invalid GPU count {where}: at most {MAX_GPU_COUNT:,} GPUs are accepted"
        )
    return int(digits)
