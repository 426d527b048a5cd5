"""The report of `kvcalc models`: the model registry, one record per model.

JSON: ``{"models": [...]}``, one object per model with raw numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.kv import kv_bytes_per_token, layer_groups
from kvcalc.engine.units import dtype
from kvcalc.render.report import Column, Record, Report, Section, flatten, number, text

if TYPE_CHECKING:
    from kvcalc.registry.schema import ModelFile

TITLE = "kvcalc model registry (KV at bf16; params total / active as stated)"


def _listed(values: list[int | None]) -> str:
    """Distinct values joined with "/", "-" when no layer has one."""
    distinct = sorted({v for v in values if v is not None})
    return "/".join(str(v) for v in distinct) if distinct else "-"


def model_row(model: ModelFile) -> dict[str, Any]:
    spec = model.to_spec()
    groups = layer_groups(spec)
    mixers = [m for m, _ in groups]
    kinds = "+".join(dict.fromkeys(f"{m.kind}" for m in mixers))
    return {
        "id": model.id,
        "name": model.name,
        "family": model.family,
        "attention": kinds,
        "layers": spec.num_layers,
        "layer_groups": [{"kind": m.kind, "layers": n} for m, n in groups],
        "kv_heads": _listed([m.kv_head_count() for m in mixers]),
        "head_dim": _listed([m.listed_head_dim() for m in mixers]),
        "kv_bytes_per_token_bf16": kv_bytes_per_token(spec, dtype("bf16")),
        "params_total": model.params.total,
        "params_active": model.params.active,
        "max_context": model.max_context,
        "verification": model.verification,
        "unverified": model.unverified,
    }


def model_rows(models: list[ModelFile]) -> list[dict[str, Any]]:
    return [model_row(m) for m in models]


#: A row of :func:`model_row`, key by key: the form the listing cache stores and checks
#: (kvcalc.registry.cache.cached_rows).
MODEL_ROW_SHAPE: dict[str, Any] = {
    "id": str,
    "name": str,
    "family": str,
    "attention": str,
    "layers": int,
    "layer_groups": [{"kind": str, "layers": int}],
    "kv_heads": str,
    "head_dim": str,
    "kv_bytes_per_token_bf16": int,
    "params_total": float | None,
    "params_active": float | None,
    "max_context": int | None,
    "verification": str,
    "unverified": [str],
}


def model_record(row: dict[str, Any]) -> dict[str, Any]:
    """A model as a CSV row: its layer groups as ``kind:layers`` pairs, e.g. sliding:52;full:10."""
    groups = ";".join(f"{g['kind']}:{g['layers']}" for g in row["layer_groups"])
    return flatten({**row, "layer_groups": groups})


def _params(total: float | None, active: float | None) -> str:
    def fmt(v: float | None) -> str:
        if v is None:
            return "?"
        return f"{v / 1e12:g}T" if v >= 1e12 else f"{v / 1e9:g}B"

    if total is not None and total == active:
        return fmt(total)
    return f"{fmt(total)} / {fmt(active)}"


def params_cell(row: Record) -> str:
    return _params(row["params_total"], row["params_active"])


def kib_per_token(row: Record) -> str:
    return f"{row['kv_bytes_per_token_bf16'] / 1024:,.1f}"


def verification_cell(row: Record) -> str:
    return str(row["verification"]) + (" *" if row["unverified"] else "")


MODEL_COLUMNS = (
    text("model", "id", "name"),
    text("family", "family", "name"),
    text("attention", "attention", "name"),
    number("layers", "layers", ""),
    text("kv heads", "kv_heads", "number"),
    text("head dim", "head_dim", "number"),
    Column("KV KiB/token", kib_per_token),
    Column("params", params_cell),
    Column("verification", verification_cell, "text"),
)


def models_report(rows: list[dict[str, Any]]) -> Report:
    notes = ["* some fields UNVERIFIED: see the model file"]
    return Report(
        payload={"models": rows},
        records=[model_record(r) for r in rows],
        sections=[Section(TITLE, MODEL_COLUMNS, rows, notes=notes)],
    )
