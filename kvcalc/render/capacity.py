"""Rendering of `kvcalc batch` (capacity) and `kvcalc decode` results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.units import GiB
from kvcalc.engine.weights import precision_name
from kvcalc.render.humanize import both_units, format_binary

if TYPE_CHECKING:
    from rich.table import Table

    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.decode import DecodeStep
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.vllm import KVCacheTooSmall, VLLMKVCache

BAR_WIDTH = 40


def capacity_payload(cap: Capacity) -> dict[str, Any]:
    dep = cap.deployment
    return {
        "model": dep.model.id,
        "name": dep.model.name,
        "gpus": str(dep.gpus),
        "gpu_count": dep.gpus.count,
        "tp": dep.tp,
        "pp": dep.pp,
        "replicas": dep.replicas,
        "kv_dtype": dep.kv_dtype.name,
        "weight_dtype": precision_name(dep.weights),
        "block_size": dep.block_size,
        "gpu_memory_bytes": dep.memory_bytes_per_gpu,
        "usable_bytes_per_gpu": dep.usable_bytes_per_gpu,
        "weights_bytes_per_gpu": cap.weights_bytes_per_gpu,
        "overhead_bytes_per_gpu": cap.overhead_bytes_per_gpu,
        "kv_budget_bytes_per_gpu": max(0, cap.kv_budget_bytes_per_gpu),
        "kv_tokens_capacity": cap.kv_tokens_capacity,
        "max_context_at_batch_1": cap.max_context_at_batch_1,
        "fits": cap.fits,
        "reason": cap.reason,
        "contexts": [
            {
                "context_tokens": c.context_tokens,
                "max_batch": c.max_batch,
                "kv_bytes_per_sequence_per_gpu": c.bytes_per_sequence_per_gpu,
            }
            for c in cap.contexts
        ],
    }


def capacity_lines(cap: Capacity) -> list[str]:
    dep = cap.deployment
    dp = f", {dep.replicas} replicas" if dep.replicas > 1 else ""
    ctx1 = (
        "unbounded (windows and states cap the cache)"
        if cap.max_context_at_batch_1 is None
        else f"{cap.max_context_at_batch_1:,} tokens"
    )
    budget = max(0, cap.kv_budget_bytes_per_gpu)
    return [
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: tp {dep.tp}, pp {dep.pp}{dp}; "
        f"weights {precision_name(dep.weights)}, KV {dep.kv_dtype.name}, "
        f"blocks of {dep.block_size} tokens",
        f"memory per GPU:     {both_units(dep.memory_bytes_per_gpu)}",
        f"usable per GPU:     {both_units(dep.usable_bytes_per_gpu)}",
        f"weights per GPU:    {both_units(cap.weights_bytes_per_gpu)}",
        f"overhead per GPU:   {both_units(cap.overhead_bytes_per_gpu)}",
        f"KV budget per GPU:  {both_units(budget)}"
        f"  (x {dep.gpus.count} GPUs = {both_units(budget * dep.gpus.count)})",
        f"KV token capacity:  {cap.kv_tokens_capacity:,} tokens",
        f"max context at batch 1: {ctx1}",
    ]


def capacity_table(cap: Capacity) -> Table:
    from rich.table import Table

    table = Table(title="sequences that fit", title_justify="left")
    table.add_column("context", justify="right")
    table.add_column("KV/sequence per GPU", justify="right")
    table.add_column("max sequences", justify="right")
    table.add_column("")
    peak = max((c.max_batch for c in cap.contexts), default=0) or 1
    for c in cap.contexts:
        bar = "█" * max(1 if c.max_batch else 0, round(BAR_WIDTH * c.max_batch / peak))
        table.add_row(
            f"{c.context_tokens:,}",
            format_binary(c.bytes_per_sequence_per_gpu),
            f"{c.max_batch:,}",
            bar,
        )
    return table


def registry_capacity_row(cap: Capacity | None, model_id: str, error: str | None) -> dict:
    if cap is None:
        return {"model": model_id, "fits": False, "reason": error, "contexts": []}
    return {
        "model": cap.deployment.model.id,
        "fits": cap.fits,
        "reason": cap.reason,
        "tp": cap.deployment.tp,
        "pp": cap.deployment.pp,
        "weights_bytes_per_gpu": cap.weights_bytes_per_gpu,
        "kv_budget_bytes_per_gpu": max(0, cap.kv_budget_bytes_per_gpu),
        "kv_tokens_capacity": cap.kv_tokens_capacity,
        "max_context_at_batch_1": cap.max_context_at_batch_1,
        "contexts": [
            {"context_tokens": c.context_tokens, "max_batch": c.max_batch} for c in cap.contexts
        ],
    }


def registry_capacity_table(rows: list[dict], contexts: list[int], title: str) -> Table:
    from rich.table import Table

    # no_wrap everywhere: rich's wrapping measurements dominate the run time of this table.
    table = Table(title=title, title_justify="left")
    table.add_column("model", no_wrap=True)
    table.add_column("weights/GPU", justify="right", no_wrap=True)
    table.add_column("KV budget/GPU", justify="right", no_wrap=True)
    for ctx in contexts:
        table.add_column(f"@{ctx:,}", justify="right", no_wrap=True)
    table.add_column("note", no_wrap=True, overflow="ellipsis")
    for r in rows:
        if "weights_bytes_per_gpu" in r:
            weights = f"{r['weights_bytes_per_gpu'] / GiB:,.1f} GiB"
            budget = f"{r['kv_budget_bytes_per_gpu'] / GiB:,.1f} GiB"
        else:
            weights = budget = "-"
        batches = [f"{c['max_batch']:,}" for c in r["contexts"]] or ["-"] * len(contexts)
        note = "fits" if r["fits"] else f"does not fit: {r['reason']}"
        table.add_row(r["model"], weights, budget, *batches, note)
    from kvcalc.render.console import fix_column_widths

    fix_column_widths(table)
    return table


# ------------------------------------------------------------------ vLLM


def vllm_payload(result: VLLMKVCache | KVCacheTooSmall) -> dict[str, Any]:
    from kvcalc.engine.vllm import KVCacheTooSmall

    if isinstance(result, KVCacheTooSmall):
        return {
            "max_model_len": result.setup.max_model_len,
            "fits": False,
            "reason": result.message,
            "needed_bytes": result.needed_bytes,
            "available_bytes": result.available_bytes,
            "estimated_max_model_len": result.estimated_max_model_len,
        }
    return {
        "max_model_len": result.setup.max_model_len,
        "fits": True,
        "num_blocks": result.num_blocks,
        "kv_cache_tokens": result.kv_cache_size_tokens,
        "blocks_per_request": result.blocks_per_request,
        "max_concurrency": result.max_concurrency,
        "kv_cache_groups": len(result.grouping.groups),
        "available_bytes_per_gpu": min(s.available_bytes for s in result.stages),
    }


def vllm_lines(result: VLLMKVCache | KVCacheTooSmall) -> list[str]:
    from kvcalc.engine.vllm import KVCacheTooSmall

    if isinstance(result, KVCacheTooSmall):
        return [f"max_model_len {result.setup.max_model_len:,}: does not fit: {result.message}"]
    avail = min(s.available_bytes for s in result.stages)
    return [
        f"Available KV cache memory: {avail / GiB:.2f} GiB",
        f"num_gpu_blocks: {result.num_blocks:,} ({len(result.grouping.groups)} KV cache "
        f"group(s), {result.blocks_per_request:,} blocks per request)",
        f"GPU KV cache size: {result.kv_cache_size_tokens:,} tokens",
        f"Maximum concurrency for {result.setup.max_model_len:,} tokens per request: "
        f"{result.max_concurrency:.2f}x",
    ]


# ------------------------------------------------------------------ decode


def decode_step_payload(step: DecodeStep) -> dict[str, Any]:
    return {
        "context_tokens": step.context_tokens,
        "batch": step.batch,
        "weight_bytes_read": step.weight_bytes_read,
        "kv_bytes_read": step.kv_bytes_read,
        "flops": step.flops,
        "weight_read_seconds": step.weight_read_seconds,
        "kv_read_seconds": step.kv_read_seconds,
        "compute_seconds": step.compute_seconds,
        "tpot_seconds": step.tpot_seconds,
        "tokens_per_second": step.tokens_per_second,
        "bound": step.bound,
        "kv_share": step.kv_share,
    }


def decode_payload(
    dep: Deployment, steps: list[DecodeStep], mbu: float, reason: str | None
) -> dict[str, Any]:
    return {
        "model": dep.model.id,
        "gpus": str(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        "weight_dtype": precision_name(dep.weights),
        "kv_dtype": dep.kv_dtype.name,
        "mbu": mbu,
        "fits": reason is None,
        "reason": reason,
        "steps": [decode_step_payload(s) for s in steps],
    }


def decode_title(dep: Deployment, mbu: float) -> str:
    return (
        f"{dep.model.name} ({dep.model.id}) decode step on {dep.gpus}: tp {dep.tp}, pp {dep.pp}, "
        f"weights {precision_name(dep.weights)}, KV {dep.kv_dtype.name}, mbu {mbu:g}"
    )


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:,.2f}"


def decode_table(steps: list[DecodeStep], title: str) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in (
        "context",
        "batch",
        "weights read ms",
        "KV read ms",
        "compute ms",
        "TPOT ms",
        "tokens/s",
        "KV share",
        "bound",
    ):
        table.add_column(col, justify="left" if col == "bound" else "right")
    for s in steps:
        table.add_row(
            f"{s.context_tokens:,}",
            f"{s.batch:,}",
            _ms(s.weight_read_seconds),
            _ms(s.kv_read_seconds),
            _ms(s.compute_seconds),
            _ms(s.tpot_seconds),
            f"{s.tokens_per_second:,.0f}",
            f"{s.kv_share:.0%}",
            s.bound,
        )
    return table
