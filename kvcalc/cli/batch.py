"""`kvcalc batch`: how many sequences fit on a set of GPUs, for one model or the whole registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from kvcalc.cli.app import (
    EXIT_DOES_NOT_FIT,
    FormatOption,
    OutputFormat,
    command_typer,
    emit,
    fail,
    load_model,
    parse_ctx_list,
)
from kvcalc.cli.deploy import (
    DeploymentOptions,
    LayoutError,
    SGLangFlags,
    deployment_options,
    sglang_options,
)

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet

ENGINES = ("simple", "vllm", "sglang")
EngineOption = typer.Option(
    "simple",
    "--engine",
    help="simple: the budget formula; vllm: vLLM 0.19's exact block count; "
    "sglang: SGLang's token pool (0.4.0-0.5.9)",
)
DEFAULT_CONTEXTS = "8k,32k,128k"
#: The request length SGLang's concurrency is shown for when --ctx is not given.
DEFAULT_SGLANG_CONTEXT = "8k"

command_app = command_typer()


@command_app.command()
@deployment_options
@sglang_options
def batch(
    model: str = typer.Argument(None, help="registry name or config.json [default: every model]"),
    ctx: str = typer.Option(None, "--ctx", "-c", help="contexts, e.g. 8k,32k,128k"),
    engine: str = EngineOption,
    max_model_len: str = typer.Option(
        None, "--max-model-len", help="vllm engine: request length [default: each --ctx]"
    ),
    fmt: OutputFormat = FormatOption,
    *,
    deploy: DeploymentOptions,
    sglang: SGLangFlags,
) -> None:
    """Sequences that fit at each context: memory budget, KV capacity, max context at batch 1."""
    if engine not in ENGINES:
        fail(f"--engine: unknown engine {engine!r}; choose {', '.join(ENGINES)}")
    if engine != "vllm" and max_model_len is not None:
        fail("--max-model-len: applies to --engine vllm only; the budget formula uses --ctx")
    deploy.check_applies(engine)
    sglang.check_applies(engine, deploy)
    if deploy.given("kv_memory"):
        deploy.refuse("weights", because="--kv-memory gives the KV budget directly")
    gpu_set = deploy.resolve_gpus()
    if model is None:
        if engine != "simple":
            fail(f"--engine {engine} needs a MODEL")
        _whole_registry(gpu_set, parse_ctx_list(ctx or DEFAULT_CONTEXTS), deploy, fmt)
        return
    dep = deploy.build(load_model(model, None, None, None), gpu_set, engine)
    if engine == "vllm":
        _vllm(dep, ctx, max_model_len, fmt)
        return
    if engine == "sglang":
        _sglang(dep, sglang, parse_ctx_list(ctx or DEFAULT_SGLANG_CONTEXT), fmt)
        return
    _simple(dep, parse_ctx_list(ctx or DEFAULT_CONTEXTS), fmt)


def _simple(dep: Deployment, contexts: list[int], fmt: OutputFormat) -> None:
    from kvcalc.engine.capacity import capacity

    cap = capacity(dep, contexts)
    if fmt is OutputFormat.json:
        from kvcalc.render.capacity import capacity_payload
        from kvcalc.render.json import dumps

        emit(dumps(capacity_payload(cap)))
    else:
        from kvcalc.render.capacity import capacity_lines, capacity_table
        from kvcalc.render.console import console

        out = console()
        for line in capacity_lines(cap):
            out.print(line)
        out.print(capacity_table(cap))
        if not cap.fits:
            out.print(f"does not fit: {cap.reason}")
    if not cap.fits:
        raise typer.Exit(EXIT_DOES_NOT_FIT)


def _whole_registry(
    gpu_set: GpuSet, contexts: list[int], deploy: DeploymentOptions, fmt: OutputFormat
) -> None:
    from kvcalc.engine.capacity import capacity
    from kvcalc.registry.load import all_model_specs
    from kvcalc.render.capacity import registry_capacity_row

    rows = []
    for spec in all_model_specs():
        try:
            dep = deploy.build(spec, gpu_set)
        except LayoutError as exc:
            rows.append(registry_capacity_row(None, spec.id, str(exc)))
            continue
        rows.append(registry_capacity_row(capacity(dep, contexts), spec.id, None))
    if fmt is OutputFormat.json:
        from kvcalc.render.json import dumps

        emit(dumps({"gpus": str(gpu_set), "context_tokens": contexts, "models": rows}))
        return
    from kvcalc.render.capacity import registry_capacity_table
    from kvcalc.render.console import console

    title = f"max sequences per context on {gpu_set} (weights and KV at each model's dtype)"
    console().print(registry_capacity_table(rows, contexts, title))


def _vllm(dep: Deployment, ctx: str | None, max_model_len: str | None, fmt: OutputFormat) -> None:
    from kvcalc.engine.vllm import KVCacheTooSmall, VLLMConfigError, vllm_kv_cache_for

    if max_model_len:
        lengths = parse_ctx_list(max_model_len, "--max-model-len")
    elif ctx:
        lengths = parse_ctx_list(ctx)
    elif dep.model.max_context:
        lengths = [dep.model.max_context]
    else:
        fail("--max-model-len: give the request length vLLM serves, e.g. 8k")
    try:
        results = [vllm_kv_cache_for(dep, length) for length in lengths]
    except VLLMConfigError as exc:
        fail(str(exc))
    if fmt is OutputFormat.json:
        from kvcalc.render.capacity import vllm_payload
        from kvcalc.render.json import dumps

        payload: dict[str, Any] = {
            "model": dep.model.id,
            "gpus": str(dep.gpus),
            "tp": dep.tp,
            "pp": dep.pp,
            "engine": "vllm",
            "kv_dtype": dep.kv_dtype.name,
            "block_size": dep.block_size,
            "max_num_batched_tokens": dep.max_num_batched_tokens,
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


def _sglang(dep: Deployment, flags: SGLangFlags, contexts: list[int], fmt: OutputFormat) -> None:
    from kvcalc.engine.sglang import SGLangConfigError, SGLangPool, sglang_pool

    options = flags.options()
    try:
        result = sglang_pool(dep, options)
    except SGLangConfigError as exc:
        fail(str(exc))
    if fmt is OutputFormat.json:
        from kvcalc.render.json import dumps
        from kvcalc.render.sglang import sglang_payload

        emit(dumps(sglang_payload(dep, result, contexts)))
    else:
        from kvcalc.render.console import console
        from kvcalc.render.sglang import sglang_lines

        out = console()
        for line in sglang_lines(dep, result, contexts):
            out.print(line)
    if not isinstance(result, SGLangPool):
        raise typer.Exit(EXIT_DOES_NOT_FIT)
