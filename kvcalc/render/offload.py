"""The report of `kvcalc offload`: HBM and each tier beyond it, at one prefix length.

JSON: the deployment and the prefix at the top (``context_tokens``, ``kv_bytes_per_sequence``:
the prefix's KV, ``prefill_flops``, ``prefill_flops_per_second``: null when the GPU publishes no
dense rate), then ``tiers``: ``hbm`` first (the KV budget of the GPUs, nothing to load), one
entry per tier after, each with ``kv_tokens_capacity`` and ``max_batch`` (the tokens and the
prefixes it holds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.flops import prefill_flops
from kvcalc.engine.offload import HBM, TierFit, prefill_flops_per_second
from kvcalc.engine.units import GB
from kvcalc.engine.weights import precision_name
from kvcalc.render.layout import gpus_payload, layout_payload
from kvcalc.render.report import Column, Record, Report, Section, gib, ms, number, text
from kvcalc.render.warnings import max_context_warnings

if TYPE_CHECKING:
    from kvcalc.engine.capacity import Capacity


def hbm_payload(cap: Capacity) -> dict[str, Any]:
    dep = cap.deployment
    fit = cap.contexts[0]
    return {
        "tier": HBM,
        "capacity_bytes": max(cap.kv_budget_bytes_per_gpu, 0) * dep.gpus.count,
        "bandwidth_bytes_per_s": None,
        "kv_tokens_capacity": cap.kv_tokens_capacity,
        "max_batch": fit.max_batch,
        "load_seconds": None,
        "recompute_seconds": None,
        "faster": None,
        "break_even_tokens": None,
    }


def tier_payload(fit: TierFit) -> dict[str, Any]:
    return {
        "tier": fit.tier.name,
        "capacity_bytes": fit.tier.capacity_bytes,
        "bandwidth_bytes_per_s": fit.tier.bandwidth_bytes_per_s,
        "kv_tokens_capacity": fit.tokens,
        "max_batch": fit.sequences,
        "load_seconds": fit.load_seconds,
        "recompute_seconds": fit.recompute_seconds,
        "faster": fit.faster,
        "break_even_tokens": fit.break_even_tokens,
    }


def offload_payload(cap: Capacity, fits: list[TierFit]) -> dict[str, Any]:
    dep = cap.deployment
    context = cap.contexts[0].context_tokens
    prefix = fits[0].prefix_bytes if fits else None
    return {
        "model": dep.model.id,
        "gpus": gpus_payload(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        **layout_payload(dep),
        "weight_dtype": precision_name(dep.weights),
        "kv_dtype": dep.kv_dtype.name,
        "context_tokens": context,
        "kv_bytes_per_sequence": prefix,
        "prefill_flops": prefill_flops(dep.model, context).total,
        "prefill_flops_per_second": prefill_flops_per_second(dep),
        "tiers": [hbm_payload(cap), *(tier_payload(f) for f in fits)],
    }


def rate(record: Record) -> str:
    value = record["bandwidth_bytes_per_s"]
    if value is None:
        return ""
    # Three significant figures below 1 GB/s, so a slow tier never shows as 0.0.
    return f"{value / GB:,.1f}" if value >= GB else f"{value / GB:.3g}"


def break_even(record: Record) -> str:
    if record["tier"] == HBM:
        return ""
    value = record["break_even_tokens"]
    if value is None:
        return "never" if record["recompute_seconds"] is not None else "n/a"
    return f"{value:,}"


COLUMNS = [
    text("tier", "tier", "name"),
    gib("GiB", "capacity_bytes"),
    Column("GB/s", rate),
    number("tokens", "kv_tokens_capacity"),
    number("sequences", "max_batch"),
    ms("load ms", "load_seconds"),
    ms("recompute ms", "recompute_seconds"),
    text("faster", "faster", "name"),
    Column("break-even tokens", break_even),
]


def offload_title(cap: Capacity) -> str:
    dep = cap.deployment
    return (
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: a cached prefix of "
        f"{cap.contexts[0].context_tokens:,} tokens, KV {dep.kv_dtype.name}, "
        f"weights {precision_name(dep.weights)}"
    )


def offload_notes(payload: dict[str, Any]) -> list[str]:
    notes = [
        *payload["layout_notes"],
        f"prefix: {payload['kv_bytes_per_sequence']:,} B of KV; "
        f"prefill {payload['prefill_flops']:,} FLOPs (2 x weights x tokens + causal attention)"
    ]
    peak = payload["prefill_flops_per_second"]
    if peak is None:
        notes.append("the GPU publishes no dense rate: recompute time is not known")
    else:
        notes.append(
            f"recompute at the dense peak of tp {payload['tp']}: {peak / 10**12:,.1f} TFLOPS; "
            "break-even: the shortest prefix from which loading is at least as fast"
        )
    return notes


def offload_report(cap: Capacity, fits: list[TierFit]) -> Report:
    payload = offload_payload(cap, fits)
    records = [{"model": payload["model"], **t} for t in payload["tiers"]]
    return Report(
        payload=payload,
        records=records,
        sections=[Section(offload_title(cap), COLUMNS, records, (), offload_notes(payload))],
        warnings=max_context_warnings(cap.deployment.model, [payload["context_tokens"]]),
    )
