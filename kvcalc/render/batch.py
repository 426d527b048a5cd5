"""The reports of `kvcalc batch`: one model's capacity, the whole registry, and vLLM's start-up.

JSON shapes (documented in the README):

- one model: the deployment, its ``eviction`` policy and its budget at the top, one entry per
  context under ``contexts`` (with ``tokens_held``, the tokens the policy keeps);
- the registry: ``gpus``, ``context_tokens_list`` and one row per model under ``models``;
- ``--engine vllm``: the set-up at the top, one entry per request length under ``contexts``.

Every key is in the vocabulary of docs/json.md (kvcalc.render.vocabulary declares the shapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.engine.units import GiB
from kvcalc.engine.weights import precision_name
from kvcalc.render.eviction import eviction_notes, eviction_payload, eviction_title
from kvcalc.render.hint import fit_hint
from kvcalc.render.humanize import exact_and_units, format_binary
from kvcalc.render.kvformat import kv_bits_per_value, kv_label
from kvcalc.render.layout import gpus_payload, layout_notes, layout_payload
from kvcalc.render.report import Column, Record, Report, Section, flatten, number, text
from kvcalc.render.warnings import max_context_warnings

if TYPE_CHECKING:
    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet

BAR_WIDTH = 40

# ------------------------------------------------------------------ one model


def deployment_payload(dep: Deployment) -> dict[str, Any]:
    """What every answer about a deployment states first: the model and the layout."""
    return {
        "model": dep.model.id,
        "model_name": dep.model.name,
        "gpus": gpus_payload(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        "replicas": dep.replicas,
        "kv_dtype": dep.kv_dtype.name,
        "kv_bits_per_value": kv_bits_per_value(dep),
        "weight_dtype": precision_name(dep.weights),
        "block_size": dep.block_size,
        **layout_payload(dep),
    }


def capacity_payload(cap: Capacity) -> dict[str, Any]:
    from kvcalc.engine.capacity import unfit_reason

    dep = cap.deployment
    unfit = unfit_reason(cap)
    return {
        **deployment_payload(dep),
        "eviction": eviction_payload(dep.eviction),
        "gpu_memory_bytes": dep.memory_bytes_per_gpu,
        "usable_bytes_per_gpu": dep.usable_bytes_per_gpu,
        "weights_bytes_per_gpu": cap.weights_bytes_per_gpu,
        "overhead_bytes_per_gpu": cap.overhead_bytes_per_gpu,
        # A budget below zero is no budget: the reason says by how much the weights overflow.
        "kv_budget_bytes_per_gpu": max(0, cap.kv_budget_bytes_per_gpu),
        "kv_tokens_capacity": cap.kv_tokens_capacity,
        "max_context_at_batch_1": cap.max_context_at_batch_1,
        "fits": unfit is None,
        "reason": unfit,
        "contexts": [
            {
                "context_tokens": c.context_tokens,
                "tokens_held": c.tokens_held,
                "max_batch": c.max_batch,
                "max_batch_per_replica": c.max_batch_per_replica,
                "kv_bytes_per_sequence_per_gpu": c.bytes_per_sequence_per_gpu,
            }
            for c in cap.contexts
        ],
    }


def capacity_lines(cap: Capacity) -> list[str]:
    dep = cap.deployment
    dp = f", {dep.replicas} replicas" if dep.replicas > 1 else ""
    capped_by = "eviction caps" if dep.eviction.lossy else "windows and states cap"
    ctx1 = (
        f"unbounded ({capped_by} the cache)"
        if cap.max_context_at_batch_1 is None
        else f"{cap.max_context_at_batch_1:,} tokens"
    )
    budget = max(0, cap.kv_budget_bytes_per_gpu)
    return [
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: tp {dep.tp}, pp {dep.pp}{dp}; "
        f"weights {precision_name(dep.weights)}, KV {kv_label(dep)}, "
        f"blocks of {dep.block_size} tokens{eviction_title(dep.eviction)}",
        *layout_notes(dep),
        f"memory per GPU:     {exact_and_units(dep.memory_bytes_per_gpu)}",
        f"usable per GPU:     {exact_and_units(dep.usable_bytes_per_gpu)}",
        f"weights per GPU:    {exact_and_units(cap.weights_bytes_per_gpu)}",
        f"overhead per GPU:   {exact_and_units(cap.overhead_bytes_per_gpu)}",
        f"KV budget per GPU:  {exact_and_units(budget)}",
        f"{f'KV budget x {dep.gpus.count}:':<20}{exact_and_units(budget * dep.gpus.count)}",
        f"KV token capacity:  {cap.kv_tokens_capacity:,} tokens",
        f"max context at batch 1: {ctx1}",
    ]


def deployment_setup(dep: Deployment) -> dict[str, Any]:
    """The fields that name a deployment in a record (CSV row, series), in their stable order
    (``gpus`` an object: a CSV record flattens it)."""
    return {
        "model": dep.model.id,
        "gpus": gpus_payload(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        "replicas": dep.replicas,
        "weight_dtype": precision_name(dep.weights),
        "kv_dtype": dep.kv_dtype.name,
    }


def capacity_record(cap: Capacity, index: int) -> dict[str, Any]:
    """One CSV row: the deployment at one context."""
    dep, c = cap.deployment, cap.contexts[index]
    return {
        **flatten(deployment_setup(dep)),
        "kv_budget_bytes_per_gpu": max(0, cap.kv_budget_bytes_per_gpu),
        "eviction": dep.eviction.policy,
        "context_tokens": c.context_tokens,
        "tokens_held": c.tokens_held,
        "max_batch": c.max_batch,
        "kv_bytes_per_sequence_per_gpu": c.bytes_per_sequence_per_gpu,
        "fits": c.max_batch > 0,
    }


def bar(records: list[dict[str, Any]]) -> Column:
    """Bars of max_batch, scaled to the largest."""
    peak = max((r["max_batch"] for r in records), default=0) or 1

    def cell(record: Record) -> str:
        n: int = record["max_batch"]
        return "█" * max(1 if n else 0, round(BAR_WIDTH * n / peak))

    return Column("", cell, "text")


def capacity_report(cap: Capacity) -> Report:
    from kvcalc.engine.capacity import unfit_reason

    records = [capacity_record(cap, i) for i in range(len(cap.contexts))]
    evicting = cap.deployment.eviction.lossy
    columns = [
        number("context", "context_tokens"),
        *([number("tokens held", "tokens_held")] if evicting else []),
        Column("KV/sequence per GPU", lambda r: format_binary(r["kv_bytes_per_sequence_per_gpu"])),
        number("max sequences", "max_batch"),
        bar(records),
    ]
    unfit = unfit_reason(cap)
    notes = [
        *eviction_notes(cap.deployment.eviction),
        *([] if unfit is None else [f"does not fit: {unfit}"]),
    ]
    hint = fit_hint(cap)
    if hint is not None:
        notes.append(hint)
    contexts = [c.context_tokens for c in cap.contexts]
    return Report(
        payload=capacity_payload(cap),
        records=records,
        lines=capacity_lines(cap),
        sections=[Section("sequences that fit", columns, records, notes=notes)],
        exit_code=0 if unfit is None else 1,
        warnings=max_context_warnings(cap.deployment.model, contexts),
    )


# ------------------------------------------------------------------ the whole registry


def registry_row(
    cap: Capacity | None, model_id: str, error: str | None, layout: str | None = None
) -> dict[str, Any]:
    """One model of the registry-wide table; ``error`` when no layout could be built for it,
    ``layout`` when it runs in another split than the one asked for (and why)."""
    if cap is None:
        # Every row has every key (null where no layout was built), as the schema declares.
        return {
            "model": model_id,
            "fits": False,
            "reason": error,
            "layout": None,
            **dict.fromkeys(("tp", "pp", "replicas", "tp_given", "tp_reason", "tp_nodes")),
            "kv_head_copies": None,
            "layout_notes": [],
            **dict.fromkeys(REGISTRY_FIGURES),
            "contexts": [],
        }
    from kvcalc.engine.kv import beyond_max_context

    model = cap.deployment.model
    beyond = set(beyond_max_context(model, (c.context_tokens for c in cap.contexts)))
    return {
        "model": model_id,
        "fits": cap.fits,
        "reason": cap.reason,
        "layout": layout,
        "tp": cap.deployment.tp,
        "pp": cap.deployment.pp,
        **layout_payload(cap.deployment),
        "weights_bytes_per_gpu": cap.weights_bytes_per_gpu,
        "kv_budget_bytes_per_gpu": max(0, cap.kv_budget_bytes_per_gpu),
        "kv_tokens_capacity": cap.kv_tokens_capacity,
        "max_context_at_batch_1": cap.max_context_at_batch_1,
        "contexts": [
            {
                "context_tokens": c.context_tokens,
                "max_batch": c.max_batch,
                "beyond_max_context": c.context_tokens in beyond,
            }
            for c in cap.contexts
        ],
    }


#: The figures of a registry row that need a layout (null in a row without one).
REGISTRY_FIGURES = (
    "weights_bytes_per_gpu",
    "kv_budget_bytes_per_gpu",
    "kv_tokens_capacity",
    "max_context_at_batch_1",
)


def registry_record(row: dict[str, Any], contexts: list[int]) -> dict[str, Any]:
    """A registry row as one flat CSV record: one ``max_batch_at_<tokens>`` column per context."""
    batches = {c["context_tokens"]: c["max_batch"] for c in row["contexts"]}
    return {
        "model": row["model"],
        "fits": row["fits"],
        "reason": row["reason"],
        "layout": row["layout"],
        "tp": row.get("tp"),
        "pp": row.get("pp"),
        "weights_bytes_per_gpu": row.get("weights_bytes_per_gpu"),
        "kv_budget_bytes_per_gpu": row.get("kv_budget_bytes_per_gpu"),
        "kv_tokens_capacity": row.get("kv_tokens_capacity"),
        "max_context_at_batch_1": row.get("max_context_at_batch_1"),
        **{f"max_batch_at_{ctx}": batches.get(ctx) for ctx in contexts},
    }


#: The mark of a registry cell at a context beyond its model's maximum context.
BEYOND_MARK = "*"


def batch_cell(context: int, beyond: set[str]) -> Column:
    """The sequences that fit at ``context``, marked in the rows of the models ``beyond``,
    whose maximum context it exceeds (sized as asked; one warning counts the marked rows)."""
    key = f"max_batch_at_{context}"

    def cell(record: Record) -> str:
        value = record.get(key)
        if value is None:
            return ""
        return f"{value:,}" + (BEYOND_MARK if record["model"] in beyond else "")

    return Column(f"@{context:,}", cell, "number")


def beyond_at(rows: list[dict[str, Any]], context: int) -> set[str]:
    """The models of ``rows`` whose maximum context ``context`` exceeds."""
    return {
        r["model"]
        for r in rows
        for c in r["contexts"]
        if c["context_tokens"] == context and c["beyond_max_context"]
    }


def gib_cell(key: str) -> Column:
    header = {"weights_bytes_per_gpu": "weights GiB", "kv_budget_bytes_per_gpu": "KV GiB"}[key]

    def cell(record: Record) -> str:
        value = record.get(key)
        return "-" if value is None else f"{value / GiB:,.1f}"

    return Column(header, cell)


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up (every whole-registry batch loads this module).
class RegistrySetting(NamedTuple):
    """What every row of the whole-registry table shares: the weight dtype and KV format given
    (None: each model's own) and the attention what-if (``--as``), if any."""

    weight_dtype: str | None = None
    kv_dtype: str | None = None
    attention: str | None = None

    def text(self) -> str:
        own = "at each model's dtype"
        if self.weight_dtype is None and self.kv_dtype is None:
            text = f"weights and KV {own}"
        else:
            text = f"weights {self.weight_dtype or own}, KV {self.kv_dtype or own}"
        return text + (f", attention as {self.attention}" if self.attention else "")


def registry_report(
    rows: list[dict[str, Any]],
    gpus: GpuSet,
    contexts: list[int],
    setting: RegistrySetting | None = None,
    warnings: Sequence[str] = (),
) -> Report:
    """The whole-registry table, with ``warnings`` (that some context exceeds rows' maximum
    context: :func:`~kvcalc.render.warnings.registry_context_warnings`)."""
    setting = setting or RegistrySetting()
    records = [registry_record(r, contexts) for r in rows]
    # The reasons are long; as numbered notes under the table they never squeeze the figures.
    reasons = [r for r in records if not r["fits"] or r["layout"]]
    marks = {r["model"]: f"[{i}]" for i, r in enumerate(reasons, 1)}

    def fits(r: Record) -> str:
        mark = f" {marks[r['model']]}" if r["model"] in marks else ""
        return ("yes" if r["fits"] else "no") + mark

    def note(r: Record) -> str:
        parts = [p for p in (r["layout"], None if r["fits"] else r["reason"]) if p]
        return f"{marks[r['model']]} {r['model']}: {'; '.join(parts)}"

    columns = [
        text("model", "model", "name"),
        gib_cell("weights_bytes_per_gpu"),
        gib_cell("kv_budget_bytes_per_gpu"),
        *(batch_cell(ctx, beyond_at(rows, ctx)) for ctx in contexts),
        Column("fits", fits, "text"),
    ]
    title = f"Sequences that fit on {gpus}, per context ({setting.text()}; GiB per GPU)"
    notes = [note(r) for r in reasons]
    return Report(
        payload={
            "gpus": gpus_payload(gpus),
            "weight_dtype": setting.weight_dtype,
            "kv_dtype": setting.kv_dtype,
            "as_attention": setting.attention,
            "context_tokens_list": contexts,
            "models": rows,
        },
        records=records,
        sections=[Section(title, columns, records, notes=notes)],
        warnings=list(warnings),
    )
