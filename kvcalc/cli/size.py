"""`kvcalc size`: KV bytes per token, per sequence and per batch, by layer group."""

from __future__ import annotations

import typer

from kvcalc.cli.app import (
    MODEL_HELP,
    AttentionOption,
    BatchOption,
    ContextsOption,
    HeadDimOption,
    KvHeadsOption,
    LayersOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    complete_models,
    emit_report,
    fail,
    load_model,
)
from kvcalc.cli.eviction import EvictionOptions, eviction_options
from kvcalc.cli.kvformat import KvFormatOptions, kv_format_options

command_app = command_typer()


@command_app.command()
@kv_format_options
@eviction_options
def size(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_models),
    ctx: str = ContextsOption,
    batch: int = BatchOption,
    attention: str = AttentionOption,
    kv_heads: int = KvHeadsOption,
    head_dim: int = HeadDimOption,
    layers: int = LayersOption,
    fmt: ReportFormat = ReportFormatOption,
    *,
    kv: KvFormatOptions,
    evict: EvictionOptions,
) -> None:
    """KV-cache bytes per token, per sequence at --ctx (default: the model's maximum context),
    and for --batch sequences (default 1), keeping what an eviction policy keeps."""
    from kvcalc.engine.kv import kv_size
    from kvcalc.render.size import size_report
    from kvcalc.render.warnings import max_context_warnings

    spec = load_model(model, kv_heads, head_dim, layers, attention)

    def model_maximum() -> list[int]:
        if spec.max_context is None:
            fail("--ctx: this model states no maximum context; give one, e.g. --ctx 8k")
        return [spec.max_context]

    contexts = evict.contexts(ctx, model_maximum)
    policy, notes = evict.checked(spec, contexts)
    cache = kv.cache_format(spec)
    sizes = [kv_size(spec, c, cache, batch or 1, policy) for c in contexts]
    report = size_report(sizes, spec.name)
    emit_report(report, fmt, warnings=[*max_context_warnings(spec, contexts), *notes])
