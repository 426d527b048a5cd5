"""Rows and table of `kvcalc models`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.kv import kv_bytes_per_token, layer_groups
from kvcalc.engine.units import dtype

if TYPE_CHECKING:
    from rich.table import Table

    from kvcalc.registry.schema import ModelFile


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


def _params(total: float | None, active: float | None) -> str:
    def fmt(v: float | None) -> str:
        if v is None:
            return "?"
        return f"{v / 1e12:g}T" if v >= 1e12 else f"{v / 1e9:g}B"

    if total is not None and total == active:
        return fmt(total)
    return f"{fmt(total)} / {fmt(active)}"


def models_table(rows: list[dict[str, Any]]) -> Table:
    from rich.table import Table

    table = Table(title="kvcalc model registry (KV at bf16; params total / active as stated)")
    for col, justify in (
        ("model", "left"),
        ("family", "left"),
        ("attention", "left"),
        ("layers", "right"),
        ("kv heads", "right"),
        ("head dim", "right"),
        ("KV KiB/token", "right"),
        ("params", "right"),
        ("verification", "left"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for r in rows:
        table.add_row(
            r["id"],
            r["family"],
            r["attention"],
            str(r["layers"]),
            r["kv_heads"],
            r["head_dim"],
            f"{r['kv_bytes_per_token_bf16'] / 1024:,.1f}",
            _params(r["params_total"], r["params_active"]),
            r["verification"] + (" *" if r["unverified"] else ""),
        )
    table.caption = "* some fields UNVERIFIED: see the model file"
    return table
