"""`kvcalc size`: KV bytes per token, per sequence and per batch, by layer group."""

from __future__ import annotations

from typing import Any

from kvcalc.cli.app import (
    ModelArgument,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
)
from kvcalc.cli.eviction import EvictionOptions, eviction_options
from kvcalc.cli.kvformat import KvFormatOptions, kv_format_options
from kvcalc.command_inputs import SIZE_INPUTS

command_app = command_typer()


@command_app.command()
@kv_format_options
@eviction_options
@declared_options(SIZE_INPUTS)
def size(
    model: str = ModelArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
    kv: KvFormatOptions,
    evict: EvictionOptions,
) -> None:
    """KV-cache bytes per token, per sequence at --ctx (default: the model's maximum context),
    and for --batch sequences (default 1), keeping what an eviction policy keeps."""
    from kvcalc.api import given_inputs
    from kvcalc.api import size as size_of

    emit_report(size_of(model, **given, **given_inputs(kv, evict)).report(), fmt)
