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
    from kvcalc.api import given_inputs
    from kvcalc.api import size as size_of

    result = size_of(
        model,
        ctx=ctx,
        batch=batch,
        attention=attention,
        kv_heads=kv_heads,
        head_dim=head_dim,
        layers=layers,
        **given_inputs(kv, evict),
    )
    emit_report(result.report(), fmt)
