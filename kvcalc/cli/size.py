"""`kvcalc size`: KV bytes per token, per sequence and per batch, by layer group."""

from __future__ import annotations

import typer

from kvcalc.cli.app import (
    BatchOption,
    ContextsOption,
    HeadDimOption,
    KvDtypeOption,
    KvHeadsOption,
    LayersOption,
    ReportFormat,
    ReportFormatOption,
    cache_format_option,
    command_typer,
    emit_report,
    fail,
    load_model,
    parse_ctx_list,
)

command_app = command_typer()


@command_app.command()
def size(
    model: str = typer.Argument(
        ..., help="registry name (see `kvcalc models`) or config.json path"
    ),
    ctx: str = ContextsOption,
    batch: int = BatchOption,
    kv_dtype: str = KvDtypeOption,
    kv_heads: int = KvHeadsOption,
    head_dim: int = HeadDimOption,
    layers: int = LayersOption,
    fmt: ReportFormat = ReportFormatOption,
) -> None:
    """KV-cache bytes per token, per sequence at --ctx (default: the model's maximum context),
    and for --batch sequences (default 1)."""
    from kvcalc.engine.kv import kv_size
    from kvcalc.render.size import size_report
    from kvcalc.render.warnings import max_context_warnings

    spec = load_model(model, kv_heads, head_dim, layers)
    if ctx is None:
        if spec.max_context is None:
            fail("--ctx: this model states no maximum context; give one, e.g. --ctx 8k")
        contexts = [spec.max_context]
    else:
        contexts = parse_ctx_list(ctx)
    cache = cache_format_option(kv_dtype, spec)
    report = size_report([kv_size(spec, c, cache, batch or 1) for c in contexts], spec.name)
    emit_report(report, fmt, warnings=max_context_warnings(spec, contexts))
