"""`kvcalc batch`: how many sequences fit on a set of GPUs, for one model or the whole registry."""

from __future__ import annotations

import typer

from kvcalc.cli import deploy
from kvcalc.cli.app import (
    EXIT_DOES_NOT_FIT,
    FormatOption,
    KvDtypeOption,
    OutputFormat,
    command_typer,
    emit,
    fail,
    load_model,
    parse_ctx_list,
)

EngineOption = typer.Option(
    "simple", "--engine", help="simple: the budget formula; vllm: vLLM 0.19's exact block count"
)


command_app = command_typer()


@command_app.command()
def batch(
    model: str = typer.Argument(None, help="registry name or config.json [default: every model]"),
    gpus: str = deploy.GpusOption,
    ctx: str = typer.Option(None, "--ctx", "-c", help="contexts, e.g. 8k,32k,128k"),
    tp: int = deploy.TpOption,
    pp: int = deploy.PpOption,
    gpu_util: float = deploy.GpuUtilOption,
    reserve: float = deploy.ReserveOption,
    overhead: str = deploy.OverheadOption,
    gpu_memory: str = deploy.GpuMemoryOption,
    weights: str = deploy.WeightsOption,
    kv_memory: str = deploy.KvMemoryOption,
    weight_dtype: str = deploy.WeightDtypeOption,
    kv_dtype: str = KvDtypeOption,
    block_size: int = deploy.BlockSizeOption,
    prefix_shared: int = deploy.PrefixOption,
    engine: str = EngineOption,
    max_model_len: str = typer.Option(
        None, "--max-model-len", help="vllm engine: request length [default: each --ctx]"
    ),
    max_num_batched_tokens: int = typer.Option(
        8192, "--max-num-batched-tokens", min=1, max=1 << 24, help="vllm engine: scheduler step"
    ),
    fmt: OutputFormat = FormatOption,
) -> None:
    """Sequences that fit at each context: memory budget, KV capacity, max context at batch 1."""
    if engine not in ("simple", "vllm"):
        fail(f"--engine: unknown engine {engine!r}; choose simple or vllm")
    gpu_set = deploy.resolve_gpus(gpus)
    if model is None:
        if engine == "vllm":
            fail("--engine vllm needs a MODEL")
        contexts = parse_ctx_list(ctx or "8k,32k,128k")
        _whole_registry(gpu_set, contexts, locals(), fmt)
        return
    spec = load_model(model, None, None, None)
    options = deploy.option_values(locals(), spec)
    dep = deploy.deployment(spec, gpu_set, **options)
    if engine == "vllm":
        _vllm(dep, ctx, max_model_len, max_num_batched_tokens, fmt)
        return
    contexts = parse_ctx_list(ctx or "8k,32k,128k")
    cap = dep.capacity(contexts)
    weight_name = deploy.weight_name(dep)
    if fmt is OutputFormat.json:
        from kvcalc.render.capacity import capacity_payload
        from kvcalc.render.json import dumps

        emit(dumps(capacity_payload(cap, weight_name)))
    else:
        from kvcalc.render.capacity import capacity_lines, capacity_table
        from kvcalc.render.console import console

        out = console()
        for line in capacity_lines(cap, weight_name):
            out.print(line)
        out.print(capacity_table(cap))
        if not cap.fits:
            out.print(f"does not fit: {cap.reason}")
    if not cap.fits:
        raise typer.Exit(EXIT_DOES_NOT_FIT)


def _whole_registry(gpu_set, contexts: list[int], values: dict, fmt: OutputFormat) -> None:  # noqa: ANN001
    from kvcalc.registry.load import all_model_specs
    from kvcalc.render.capacity import registry_capacity_row

    rows = []
    for spec in all_model_specs():
        try:
            dep = deploy.deployment(spec, gpu_set, **deploy.option_values(values, spec))
            rows.append(registry_capacity_row(dep.capacity(contexts), spec.id, None))
        except deploy.LayoutError as exc:
            rows.append(registry_capacity_row(None, spec.id, str(exc)))
    if fmt is OutputFormat.json:
        from kvcalc.render.json import dumps

        emit(dumps({"gpus": str(gpu_set), "context_tokens": contexts, "models": rows}))
        return
    from kvcalc.render.capacity import registry_capacity_table
    from kvcalc.render.console import console

    title = f"max sequences per context on {gpu_set} (weights and KV at each model's dtype)"
    console().print(registry_capacity_table(rows, contexts, title))


def _vllm(dep: deploy.Deployment, ctx: str | None, max_model_len: str | None, mnbt: int,
          fmt: OutputFormat) -> None:
    from kvcalc.engine.vllm import VLLMConfigError, profile_kv_memory, vllm_kv_cache

    if max_model_len:
        lengths = parse_ctx_list(max_model_len, "--max-model-len")
    elif ctx:
        lengths = parse_ctx_list(ctx)
    elif dep.model.max_context:
        lengths = [dep.model.max_context]
    else:
        fail("--max-model-len: give the request length vLLM serves, e.g. 8k")
    if dep.kv_memory_per_gpu is not None:
        memory: int | tuple[int, ...] = dep.kv_memory_per_gpu
    else:
        profiled = profile_kv_memory(
            dep.model,
            dep.gpu_memory_bytes,
            dep.weights_per_stage,
            tp=dep.tp,
            pp=dep.pp,
            gpu_memory_utilization=dep.gpu_util or 0.9,
            max_num_batched_tokens=mnbt,
        )
        memory = tuple(p.available_bytes for p in profiled)
    try:
        results = [
            vllm_kv_cache(
                dep.model,
                memory,
                max_model_len=length,
                kv_dtype=dep.kv_dtype,
                tp=dep.tp,
                pp=dep.pp,
                block_size=dep.block_size,
                max_num_batched_tokens=mnbt,
            )
            for length in lengths
        ]
    except VLLMConfigError as exc:
        fail(str(exc))
    from kvcalc.engine.vllm import KVCacheTooSmall

    if fmt is OutputFormat.json:
        from kvcalc.render.capacity import vllm_payload
        from kvcalc.render.json import dumps

        payload = {
            "model": dep.model.id,
            "gpus": str(dep.gpus),
            "tp": dep.tp,
            "pp": dep.pp,
            "engine": "vllm",
            "kv_dtype": dep.kv_dtype.name,
            "block_size": dep.block_size,
            "max_num_batched_tokens": mnbt,
            "results": [vllm_payload(r) for r in results],
        }
        first = payload["results"][0]
        for key in ("num_blocks", "kv_cache_tokens", "max_concurrency"):
            payload[key] = first.get(key)
        emit(dumps(payload))
    else:
        from kvcalc.render.capacity import vllm_lines
        from kvcalc.render.console import console

        out = console()
        out.print(
            f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: vLLM 0.19, tp {dep.tp}, "
            f"pp {dep.pp}, KV {dep.kv_dtype.name}, block {dep.block_size}"
        )
        for r in results:
            for line in vllm_lines(r):
                out.print(line)
    if any(isinstance(r, KVCacheTooSmall) for r in results):
        raise typer.Exit(EXIT_DOES_NOT_FIT)
