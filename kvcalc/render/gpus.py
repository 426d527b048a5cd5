"""The report of `kvcalc gpus`: the accelerator registry, one record per device.

JSON: ``{"accelerators": [...]}`` (``gpus`` is a GPU set in every other command), one object
per accelerator with raw numbers (bytes, bytes/s, FLOP/s),
and ``efficiency``: the measured decode figures of the realistic estimate (all null where the
registry has none and the generic figures apply).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.units import GiB
from kvcalc.render.report import Column, Record, Report, Section, flatten, text

if TYPE_CHECKING:
    from kvcalc.registry.gpu_schema import GpuFile


def gpu_row(gpu: GpuFile) -> dict[str, Any]:
    """One accelerator as raw numbers (bytes, bytes/s, FLOP/s); the JSON keys are stable."""
    acc = gpu.to_accelerator()
    mem = gpu.memory
    return {
        "id": gpu.id,
        "name": gpu.name,
        "vendor": gpu.vendor,
        "aliases": list(gpu.aliases),
        "memory_bytes": acc.memory_bytes,
        "memory_basis": mem.usable,
        "memory_marketed": acc.memory_marketed,
        "memory_type": mem.type,
        "memory_unified": mem.unified,
        "memory_reported": {
            "nvidia_smi_mib": mem.nvidia_smi_mib,
            "nvidia_smi_mib_ecc_off": mem.nvidia_smi_mib_ecc_off,
            "cuda_total_mib": mem.cuda_total_mib,
            "cuda_total_bytes": mem.cuda_total_bytes,
            "cuda_total_logged_bytes": (
                mem.cuda_total_logged.total_bytes() if mem.cuda_total_logged else None
            ),
            "rocm_smi_bytes": mem.rocm_smi_bytes,
        },
        "bandwidth_bytes_per_s": acc.bandwidth_bytes_per_s,
        "dense_flops": dict(acc.dense_flops),
        "interconnect": acc.interconnect,
        "interconnect_bytes_per_s": acc.interconnect_bytes_per_s,
        "pcie_bytes_per_s": acc.pcie_bytes_per_s,
        "tdp_w": gpu.tdp_w,
        "node_gpus": gpu.node_gpus,
        "compute_capability": gpu.compute_capability,
        "sm_count": gpu.sm_count,
        "efficiency": efficiency_row(gpu),
        "status": gpu.status,
        "unverified": list(gpu.unverified),
    }


#: A row of :func:`gpu_row`, key by key: the form the listing cache stores and checks
#: (kvcalc.registry.cache.cached_rows).
GPU_ROW_SHAPE: dict[str, Any] = {
    "id": str,
    "name": str,
    "vendor": str,
    "aliases": [str],
    "memory_bytes": int,
    "memory_basis": str,
    "memory_marketed": str,
    "memory_type": str,
    "memory_unified": bool,
    "memory_reported": {
        "nvidia_smi_mib": int | None,
        "nvidia_smi_mib_ecc_off": int | None,
        "cuda_total_mib": int | None,
        "cuda_total_bytes": int | None,
        "cuda_total_logged_bytes": int | None,
        "rocm_smi_bytes": int | None,
    },
    "bandwidth_bytes_per_s": int,
    "dense_flops": {"bf16": int | None, "fp16": int | None, "fp8": int | None, "fp4": int | None},
    "interconnect": str | None,
    "interconnect_bytes_per_s": int | None,
    "pcie_bytes_per_s": int | None,
    "tdp_w": int | None,
    "node_gpus": int | None,
    "compute_capability": str | None,
    "sm_count": int | None,
    "efficiency": {
        "bandwidth_fraction": float | None,
        "step_overhead_seconds": float | None,
        "link_latency_seconds": float | None,
        "matmul_fraction": float | None,
    },
    "status": str,
    "unverified": [str],
}


def efficiency_row(gpu: GpuFile) -> dict[str, float | None]:
    """The registry's decode efficiency in seconds and fractions; the same keys, all null, when
    there is none (so every CSV row has the same columns)."""
    eff = gpu.efficiency
    return {
        "bandwidth_fraction": eff.bandwidth_fraction if eff else None,
        "step_overhead_seconds": eff.step_overhead_ms / 1000 if eff else None,
        "link_latency_seconds": eff.link_latency_us / 1_000_000 if eff else None,
        "matmul_fraction": eff.matmul_fraction if eff else None,
    }


def _tflops(flops: int | None) -> str:
    return "-" if flops is None else f"{flops / 1e12:,.1f}".removesuffix(".0")


def _bf16(rates: dict[str, int | None]) -> str:
    # Volta and Turing have no BF16; their FP16 rate is what a BF16 model runs at (as FP16).
    if rates["bf16"] is None and rates["fp16"] is not None:
        return f"{_tflops(rates['fp16'])} (fp16)"
    return _tflops(rates["bf16"])


def _link(row: Record) -> str:
    kind, rate = row["interconnect"], row["interconnect_bytes_per_s"]
    if kind is None:
        return "-"
    # The table shows the fabric's family ("NVLink 4"); the full description is in the file/JSON.
    short = kind.split(" (")[0].split(" + ")[0].split(",")[0]
    return f"{rate / 1e9:,.0f} GB/s {short}" if rate else short


TITLE = "kvcalc accelerator registry (per device)"
NOTE = (
    "memory: usable GiB (2^30 B) as the device reports it where known, else from the label; "
    "model_configs/gpus/<id>.yaml names the figure used. Vendor label in brackets. TB/s and "
    "TFLOPS are decimal and dense (no sparsity); '-' = not published (FP8 then runs at the "
    "BF16 rate). partial/unverified: some figures are UNVERIFIED, see the file."
)


def memory_cell(row: Record) -> str:
    return f"{row['memory_bytes'] / GiB:,.2f} ({row['memory_marketed']})"


def bandwidth_cell(row: Record) -> str:
    return f"{row['bandwidth_bytes_per_s'] / 1e12:g}"


def bf16_cell(row: Record) -> str:
    return _bf16(row["dense_flops"])


def fp8_cell(row: Record) -> str:
    return _tflops(row["dense_flops"]["fp8"])


GPU_COLUMNS = (
    text("id", "id", "name"),
    text("name", "name"),
    Column("memory GiB (label)", memory_cell),
    Column("TB/s", bandwidth_cell),
    Column("BF16 TFLOPS", bf16_cell),
    Column("FP8 TFLOPS", fp8_cell),
    Column("interconnect (bidir)", _link, "text"),
    text("status", "status", "name"),
)


def gpus_report(rows: list[dict[str, Any]]) -> Report:
    return Report(
        payload={"accelerators": rows},
        records=[flatten(r) for r in rows],
        sections=[Section(TITLE, GPU_COLUMNS, rows, notes=[NOTE])],
    )
