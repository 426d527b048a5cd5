"""Rendering of `kvcalc batch --engine sglang`: SGLang's start-up figures, as lines and as JSON.

The lines echo SGLang's own log so that a run can be compared with a real start-up log line by
line, with the units corrected: SGLang prints GiB (2^30 bytes, two decimals) as "GB", kvcalc
prints them as GiB and says so once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.units import GiB
from kvcalc.render.kvformat import kv_bits_per_value, kv_label
from kvcalc.render.layout import gpus_payload, layout_notes, layout_payload
from kvcalc.render.report import Report, flatten

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.sglang import SGLangMemory, SGLangPool, SGLangPoolTooSmall


def sglang_payload(
    dep: Deployment, result: SGLangPool | SGLangPoolTooSmall, contexts: list[int]
) -> dict[str, Any]:
    """One JSON object: the issue's keys, the inputs SGLang read, and one row per context
    (``max_batch_per_replica``: SGLang's concurrency for that length on one server;
    ``max_batch``: that across the replicas; 0 for every context when the pool is too small)."""
    from kvcalc.engine.sglang import SGLangPool, sliding_window

    memory = result.memory
    payload: dict[str, Any] = {
        "model": dep.model.id,
        "gpus": gpus_payload(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        **layout_payload(dep),
        "engine": "sglang",
        "sglang_version": str(result.version),
        "kv_dtype": dep.kv_dtype.name,
        "kv_bits_per_value": kv_bits_per_value(dep),
        "gpu_memory_mib": memory.gpu_memory_mib,
        "mem_fraction_static": float(memory.mem_fraction_static),
        "chunked_prefill_size": memory.chunked_prefill_size,
        "cuda_graph_max_bs": memory.cuda_graph_max_bs,
        "free_before_load_bytes": memory.free_before_load_bytes,
        "free_after_load_bytes": memory.free_after_load_bytes,
        "estimated": list(memory.estimated),
        "cell_size_bytes": result.cells.cell_size,
        "mamba_bytes_per_request": result.cells.state_bytes_per_request or None,
        "max_mamba_cache_size": result.mamba_cache_size,
    }
    if memory.prefill_graph_mib is not None:
        # Only releases from 0.5.10 reserve for the prefill CUDA graph: older payloads keep
        # their keys.
        payload["prefill_cuda_graph_reserved_mib"] = memory.prefill_graph_mib
    if not isinstance(result, SGLangPool):
        return {
            **payload,
            "fits": False,
            "reason": result.message,
            "max_total_num_tokens": 0,
            "max_running_requests": 0,
            "kv_pool_bytes": 0,
            "contexts": [context_payload(c, 0, dep.replicas) for c in contexts],
        }
    window = sliding_window(dep.model)
    refusals = [r for r in (result.refusal(c, window) for c in contexts) if r is not None]
    return {
        **payload,
        "fits": not refusals,
        "reason": refusals[0] if refusals else None,
        "page_size": result.page_size,
        "context_length": result.context_length,
        "max_total_num_tokens": result.max_total_num_tokens,
        "swa_tokens": result.swa_tokens,
        "max_running_requests": result.max_running_requests,
        "req_pool_size": result.req_pool_size,
        "max_req_len": result.max_req_len,
        "kv_pool_bytes": result.kv_pool_bytes,
        "contexts": [
            context_payload(c, result.concurrency(c, window), dep.replicas) for c in contexts
        ],
    }


def context_payload(context: int, concurrency: int, replicas: int) -> dict[str, Any]:
    return {
        "context_tokens": context,
        "max_batch": concurrency * replicas,
        "max_batch_per_replica": concurrency,
        "fits": concurrency > 0,
    }


def _gib(value: float) -> str:
    return f"{value / GiB:.2f} GiB"


def _log_units(memory: SGLangMemory) -> str:
    """The note that lets a reader match the avail-mem lines against SGLang's own log."""
    before = memory.free_before_load_bytes / GiB
    return f'(SGLang\'s log prints these GiB as "GB": avail mem={before:.2f} GB)'


def _source(memory: SGLangMemory, name: str) -> str:
    return " (estimated)" if name in memory.estimated else ""


def _prefill_graph(memory: SGLangMemory) -> str:
    if memory.prefill_graph_mib is None:
        return ""
    return f", prefill CUDA graph {memory.prefill_graph_mib:g} MiB"


def sglang_lines(
    dep: Deployment, result: SGLangPool | SGLangPoolTooSmall, contexts: list[int]
) -> list[str]:
    """The text output: the set-up, the inputs, then SGLang's own log lines."""
    from kvcalc.engine.sglang import SGLangPool, sliding_window

    memory = result.memory
    rule = (
        f"default for {memory.gpu_memory_mib:,} MiB{_source(memory, 'gpu_memory')}"
        if memory.chunked_prefill_size is None
        else f"default for {memory.gpu_memory_mib:,} MiB{_source(memory, 'gpu_memory')}, "
        f"chunked_prefill_size {memory.chunked_prefill_size}, "
        f"cuda_graph_max_bs {memory.cuda_graph_max_bs}{_prefill_graph(memory)}"
    )
    lines = [
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: SGLang {result.version}, "
        f"tp {dep.tp}, pp {dep.pp}, KV {kv_label(dep)}",
        *layout_notes(dep),
        f"mem_fraction_static={float(memory.mem_fraction_static):g} ({rule})",
        f"Load weight begin. avail mem={_gib(memory.free_before_load_bytes)}"
        f"{_source(memory, 'free_before_load')}",
        f"Load weight end. avail mem={_gib(memory.free_after_load_bytes)}"
        f"{_source(memory, 'free_after_load')}",
        _log_units(memory),
        f"cell_size: {result.cells.cell_size:,} bytes per token per rank",
    ]
    if result.mamba_cache_size is not None:
        lines.append(
            f"Mamba Cache is allocated. max_mamba_cache_size: {result.mamba_cache_size:,} "
            f"({result.cells.state_bytes_per_request:,} bytes per request)"
        )
    if not isinstance(result, SGLangPool):
        return [*lines, f"does not fit: {result.message}"]
    if result.swa_tokens is not None:
        lines.append(
            f"Use Sliding window memory pool. full_layer_tokens={result.max_total_num_tokens}, "
            f"swa_layer_tokens={result.swa_tokens}"
        )
    lines += [
        f"KV Cache is allocated. #tokens: {result.max_total_num_tokens}, "
        f"pool {_gib(result.kv_pool_bytes)} per rank",
        f"max_total_num_tokens={result.max_total_num_tokens}, "
        f"max_running_requests={result.max_running_requests}, "
        f"context_len={result.context_length}",
        f"request pool: {result.req_pool_size:,} slots, max_req_len {result.max_req_len:,}, "
        f"page_size {result.page_size}",
    ]
    window = sliding_window(dep.model)
    lines += [
        f"Concurrency for {c:,} tokens per request: {result.concurrency(c, window):,}"
        + (f" (longer than max_req_len {result.max_req_len:,})" if c > result.max_req_len else "")
        for c in contexts
    ]
    refusals = (result.refusal(c, window) for c in contexts)
    return lines + [f"does not fit: {r}" for r in refusals if r is not None][:1]


#: The keys of every CSV record: the pool, then one row per context.
SGLANG_FIELDS = (
    "model",
    "gpus_id",
    "gpus_label",
    "gpus_accelerator",
    "gpus_count",
    "tp",
    "pp",
    "sglang_version",
    "kv_dtype",
    "mem_fraction_static",
    "cell_size_bytes",
    "kv_pool_bytes",
    "max_total_num_tokens",
    "max_running_requests",
    "fits",
    "context_tokens",
    "max_batch",
    "max_batch_per_replica",
)


def sglang_report(
    dep: Deployment, result: SGLangPool | SGLangPoolTooSmall, contexts: list[int]
) -> Report:
    from kvcalc.render.warnings import max_context_warnings

    payload = sglang_payload(dep, result, contexts)
    top = flatten({k: v for k, v in payload.items() if k not in ("contexts", "estimated")})
    records = [{k: {**top, **row}.get(k) for k in SGLANG_FIELDS} for row in payload["contexts"]]
    return Report(
        payload=payload,
        records=records,
        fields=SGLANG_FIELDS,
        lines=sglang_lines(dep, result, contexts),
        exit_code=0 if payload["fits"] else 1,
        warnings=max_context_warnings(dep.model, contexts),
    )
