"""`kvcalc batch`: how many sequences fit on a set of GPUs, for one model or the whole registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import (
    MODEL_HELP,
    TOKENS,
    VLLM_PANEL,
    AttentionOption,
    ContextsOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    complete_models,
    emit_report,
    fail,
    load_model,
    parse_attention_variant,
    parse_ctx_list,
)
from kvcalc.cli.deploy import (
    DeploymentOptions,
    EngineChoice,
    LayoutError,
    SGLangFlags,
    deployment_options,
    engine_options,
    sglang_start,
    vllm_start,
)
from kvcalc.cli.eviction import EvictionOptions, eviction_options

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.variant import AttentionVariant

DEFAULT_CONTEXTS = "8k,32k,128k"
#: The request length SGLang's concurrency is shown for when --ctx is not given.
DEFAULT_SGLANG_CONTEXT = "8k"

command_app = command_typer()


@command_app.command()
@deployment_options
@engine_options
@eviction_options
def batch(
    model: str = typer.Argument(
        None,
        help=f"{MODEL_HELP} [default: every model]",
        autocompletion=complete_models,
        show_default=False,
    ),
    ctx: str = ContextsOption,
    attention: str = AttentionOption,
    max_model_len: str = typer.Option(
        None,
        "--max-model-len",
        metavar=TOKENS,
        rich_help_panel=VLLM_PANEL,
        help="request length(s) vLLM serves [default: each --ctx, else the model's maximum]",
    ),
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploy: DeploymentOptions,
    engine: EngineChoice,
    sglang: SGLangFlags,
    evict: EvictionOptions,
) -> None:
    """Sequences that fit at each context (default 8k,32k,128k; SGLang 8k; vLLM the model's
    maximum; SnapKV --prompt + --gen): memory budget, KV capacity, max context at batch 1."""
    name = engine.checked(deploy, sglang)
    evict.check_applies(name)
    if name != "vllm" and max_model_len is not None:
        fail("--max-model-len: applies to --engine vllm only; the budget formula uses --ctx")
    if deploy.given("kv_memory"):
        deploy.refuse("weights", because="--kv-memory gives the KV budget directly")
    gpu_set = deploy.resolve_gpus()
    if model is None:
        if name != "simple":
            fail(f"--engine {name} needs a MODEL")
        deploy.refuse("weights", because="it is one model's weights; name the MODEL")
        if evict.given():
            fail(f"{evict.flags()}: an eviction policy is sized for one model; name the MODEL")
        variant = parse_attention_variant(attention) if attention else None
        _whole_registry(gpu_set, parse_ctx_list(ctx or DEFAULT_CONTEXTS), deploy, fmt, variant)
        return
    spec = load_model(model, None, None, None, attention)
    if name == "simple":
        contexts = evict.contexts(ctx, lambda: parse_ctx_list(DEFAULT_CONTEXTS))
        policy, notes = evict.checked(spec, contexts)
        _simple(deploy.build(spec, gpu_set, name, policy), contexts, notes, fmt)
        return
    dep = deploy.build(spec, gpu_set, name)
    if name == "vllm":
        _vllm(dep, ctx, max_model_len, fmt)
        return
    if name == "sglang":
        _sglang(dep, sglang, parse_ctx_list(ctx or DEFAULT_SGLANG_CONTEXT), fmt)


def _simple(dep: Deployment, contexts: list[int], notes: list[str], fmt: ReportFormat) -> None:
    from kvcalc.engine.capacity import capacity
    from kvcalc.render.batch import capacity_report

    emit_report(capacity_report(capacity(dep, contexts)), fmt, warnings=notes)


def _whole_registry(
    gpu_set: GpuSet,
    contexts: list[int],
    deploy: DeploymentOptions,
    fmt: ReportFormat,
    variant: AttentionVariant | None,
) -> None:
    from kvcalc.engine.capacity import capacity
    from kvcalc.registry.load import all_model_specs
    from kvcalc.render.batch import RegistrySetting, registry_report, registry_row
    from kvcalc.render.layout import layout_note

    # A model that cannot take the what-if or the KV format is its row, not an error. (The
    # what-if module loads only when one is asked for.)
    refused: tuple[type[Exception], ...] = (LayoutError,)
    if variant is not None:
        from kvcalc.engine.variant import VariantError, as_attention

        refused = (VariantError, LayoutError)
    rows = []
    specs = all_model_specs()
    kv_name = None
    for spec in specs:
        try:
            if variant is not None:
                spec = as_attention(spec, variant)
            kv = deploy.kv_format(spec)
            kv_name = kv.name if deploy.format_given() else None
        except refused as exc:
            rows.append(registry_row(None, spec.id, str(exc)))
            continue
        try:
            # Without --tp the split is the default every command takes (choose_tp).
            dep = deploy.build(spec, gpu_set)
        except LayoutError as exc:
            rows.append(registry_row(None, spec.id, str(exc)))
            continue
        rows.append(registry_row(capacity(dep, contexts), spec.id, None, layout_note(dep)))
    setting = RegistrySetting(
        weight_dtype=deploy.weight_dtype,
        kv_dtype=kv_name,
        attention=None if variant is None else variant.label,
    )
    emit_report(registry_report(rows, gpu_set, contexts, specs, setting), fmt)


def _vllm(dep: Deployment, ctx: str | None, max_model_len: str | None, fmt: ReportFormat) -> None:
    from kvcalc.render.batch import vllm_report

    if max_model_len and ctx:
        _refuse_ctx_with_max_model_len(parse_ctx_list(ctx), parse_ctx_list(max_model_len))
    if max_model_len:
        lengths = parse_ctx_list(max_model_len, "--max-model-len")
    elif ctx:
        lengths = parse_ctx_list(ctx)
    elif dep.model.max_context:
        lengths = [dep.model.max_context]
    else:
        fail("--max-model-len: give the request length vLLM serves, e.g. 8k")
    results = [vllm_start(dep, length) for length in lengths]
    emit_report(vllm_report(dep, results), fmt)


def _refuse_ctx_with_max_model_len(contexts: list[int], lengths: list[int]) -> None:
    """vLLM answers for --max-model-len, the longest request it admits: a --ctx beside it would
    be silently dropped, or (longer) is a request vLLM refuses."""
    longest, cap = max(contexts), max(lengths)
    if longest > cap:
        fail(
            f"--ctx {longest:,} is longer than --max-model-len {cap:,}: vLLM refuses such a "
            "request; raise --max-model-len or shorten --ctx"
        )
    fail(
        "--ctx: with --engine vllm the request length is --max-model-len, and vLLM's figures "
        "are for it; give one of --ctx and --max-model-len"
    )


def _sglang(dep: Deployment, flags: SGLangFlags, contexts: list[int], fmt: ReportFormat) -> None:
    from kvcalc.render.sglang import sglang_report

    emit_report(sglang_report(dep, sglang_start(dep, flags), contexts), fmt)
