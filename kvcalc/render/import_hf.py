"""The report of `kvcalc import-hf`: one registry entry.

JSON and YAML print the entry itself, the mapping a registry file holds, so the YAML output is a
file for model_configs/models/ (``kvcalc import-hf ID > model_configs/models/NAME.yaml``), with
no ``schema_version``: its format is the registry's (kvcalc.registry.schema.ModelFile). CSV has
one row of the flattened entry (``architecture_mixers_attn_kv_heads``), and the table and
markdown formats list the same fields one per row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcalc.render.report import Column, Record, Report, Section, flatten, text


def field_value(value: Any) -> str:
    """A field as people read it: integers with thousands separators, JSON's null/true/false."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _value_cell(row: Record) -> str:
    return field_value(row["value"])


COLUMNS = (text("field", "field", "name"), Column("value", _value_cell, "text"))


def import_report(entry: Mapping[str, Any], warnings: list[str]) -> Report:
    flat = flatten(entry)
    title = f"registry entry {entry['id']} ({entry['verification']}: review before committing)"
    return Report(
        payload=entry,
        records=[flat],
        sections=[Section(title, COLUMNS, [{"field": k, "value": v} for k, v in flat.items()])],
        diagnostics=warnings,
        versioned=False,
    )
