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
    EngineFlags,
    LayoutError,
    deployment_options,
    engine_options,
    engine_pool,
)
from kvcalc.cli.eviction import EvictionOptions, eviction_options

if TYPE_CHECKING:
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.variant import AttentionVariant

DEFAULT_CONTEXTS = "8k,32k,128k"

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
    flags: EngineFlags,
    evict: EvictionOptions,
) -> None:
    """Sequences that fit at each context (default 8k,32k,128k; SGLang 8k; vLLM the model's
    maximum; SnapKV --prompt + --gen): memory budget, KV capacity, max context at batch 1."""
    from kvcalc.engine.serving import engines
    from kvcalc.engine.serving.base import BatchRequest
    from kvcalc.render.serving import engine_report

    chosen = engine.checked(deploy, flags)
    evict.check_applies(chosen)
    if not chosen.takes_lengths and max_model_len is not None:
        takers = " or ".join(e.name for e in engines() if e.takes_lengths)
        fail(f"--max-model-len: applies to --engine {takers} only; the budget formula uses --ctx")
    if deploy.given("kv_memory"):
        deploy.refuse("weights", because="--kv-memory gives the KV budget directly")
    gpu_set = deploy.resolve_gpus()
    if model is None:
        if not chosen.sizes_registry:
            fail(f"--engine {chosen.name} needs a MODEL")
        deploy.refuse("weights", because="it is one model's weights; name the MODEL")
        if evict.given():
            fail(f"{evict.flags()}: an eviction policy is sized for one model; name the MODEL")
        variant = parse_attention_variant(attention) if attention else None
        _whole_registry(gpu_set, parse_ctx_list(ctx or DEFAULT_CONTEXTS), deploy, fmt, variant)
        return
    spec = load_model(model, None, None, None, attention)
    notes: list[str] = []
    policy = None
    contexts = parse_ctx_list(ctx) if ctx else None
    if chosen.evicts:
        defaults = chosen.default_contexts or ()
        contexts = evict.contexts(ctx, lambda: list(defaults))
        policy, notes = evict.checked(spec, contexts)
    dep = deploy.build(spec, gpu_set, chosen, policy)
    lengths = parse_ctx_list(max_model_len, "--max-model-len") if max_model_len else None
    pool = engine_pool(dep, chosen, flags)
    answer = pool.batch(BatchRequest(contexts=contexts, lengths=lengths))
    emit_report(engine_report(dep, answer), fmt, warnings=notes)


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
