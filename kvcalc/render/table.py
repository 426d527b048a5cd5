"""Rich tables for people. Every size is shown in both binary (GiB) and decimal (GB) units."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.engine.kv import KVSize
from kvcalc.engine.units import GiB
from kvcalc.render.humanize import both_units, format_binary

if TYPE_CHECKING:
    from rich.table import Table


def size_table(size: KVSize, name: str) -> Table:
    from rich.table import Table

    title = (
        f"{name} ({size.model_id}): KV cache at {size.context_tokens:,} tokens, "
        f"batch {size.batch}, {size.kv_dtype}"
    )
    with_state = any(g.state_bytes for g in size.groups)
    table = Table(title=title, title_justify="left")
    table.add_column("kind")
    table.add_column("detail")
    table.add_column("layers", justify="right")
    table.add_column("bytes/token", justify="right")
    table.add_column("tokens held", justify="right")
    if with_state:
        table.add_column("state bytes", justify="right")
    table.add_column("bytes/sequence", justify="right")
    table.add_column("GiB", justify="right")
    for g in size.groups:
        state = [f"{g.state_bytes:,}"] if with_state else []
        table.add_row(
            g.kind,
            g.mixer.detail(),
            str(g.layers),
            f"{g.bytes_per_token:,}",
            f"{g.tokens_held:,}",
            *state,
            f"{g.bytes:,}",
            f"{g.bytes / GiB:,.2f}",
        )
    if len(size.groups) > 1:
        table.add_section()
        state = [f"{sum(g.state_bytes for g in size.groups):,}"] if with_state else []
        table.add_row(
            "total",
            "",
            str(sum(g.layers for g in size.groups)),
            f"{size.bytes_per_token:,}",
            "",
            *state,
            f"{size.bytes_per_sequence:,}",
            f"{size.bytes_per_sequence / GiB:,.2f}",
        )
    return table


def size_summary(size: KVSize) -> list[str]:
    lines = [
        f"per token:    {size.bytes_per_token:,} B ({format_binary(size.bytes_per_token)})",
        f"per sequence: {size.bytes_per_sequence:,} B = {both_units(size.bytes_per_sequence)}",
    ]
    if size.batch > 1:
        lines.append(
            f"batch of {size.batch}: {size.bytes_total:,} B = {both_units(size.bytes_total)}"
        )
    return lines
