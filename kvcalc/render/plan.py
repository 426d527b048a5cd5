"""The report of `kvcalc plan`: the layouts that meet the targets, best first.

JSON: the request at the top (``model``, ``model_name``, ``context_tokens``, ``users``,
``latency``: what the targets and the ranking hold to, ``estimate`` or ``roofline`` with
--roofline) and ``layouts``, best first, each with ``gpus`` (``id`` ``4xH200``, ``label``,
``accelerator``, ``count``), ``tp``, ``pp``, the layout keys of every command's deployment object
(:mod:`kvcalc.render.layout`: ``replicas``, ``tp_given`` false, as plan chose tp, ``tp_reason``,
``tp_nodes``, ``kv_head_copies``, ``layout_notes``), ``weight_dtype``, ``kv_dtype``, ``max_batch``
(sequences of the context that fit across the replicas), ``batch_per_replica`` (the users one
replica serves), ``tpot_seconds`` and ``ttft_seconds`` (the realistic estimate) with
``roofline_tpot_seconds`` and ``roofline_ttft_seconds`` beside them, ``latency``, ``watts``
(count x board power, null when unknown) and ``price_per_hour`` (null without --price). CSV: one
row per layout, ``gpus`` flattened (``gpus_id``, ...), ``layout_notes`` one ``;``-separated cell.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.serving.base import GPUS_COLUMNS
from kvcalc.engine.weight_names import weight_dtype_name
from kvcalc.planning import workload_line, workload_payload
from kvcalc.render.layout import gpus_payload
from kvcalc.render.layout import layout_payload as deployment_layout
from kvcalc.render.report import Column, Record, Report, Section, flatten, ms, number, text

if TYPE_CHECKING:
    from collections.abc import Sequence

    from kvcalc.engine.plan import Plan, PlannedLayout
    from kvcalc.engine.serving.base import ServingEngine

#: A layout's serving figures under a request rate (null without one).
SERVING_FIELDS = (
    "max_num_batched_tokens",
    "prefill_replicas",
    "decode_replicas",
    "request_rate_per_replica",
    "concurrency_per_replica",
    "prefill_tokens_per_step",
    "prefill_utilization",
    "queue_seconds",
)


FIELDS = (
    *GPUS_COLUMNS,
    "tp",
    "pp",
    "replicas",
    "tp_given",
    "tp_reason",
    "tp_nodes",
    "kv_head_copies",
    "layout_notes",
    "weight_dtype",
    "kv_dtype",
    "max_batch",
    "batch_per_replica",
    "tpot_seconds",
    "roofline_tpot_seconds",
    "ttft_seconds",
    "roofline_ttft_seconds",
    *SERVING_FIELDS,
    "latency",
    "watts",
    "price_per_hour",
)


def times(layout: PlannedLayout, result: Plan) -> dict[str, float | None]:
    """The layout's TPOT and TTFT both ways: the search timed it on the basis the targets hold
    to; the other basis is timed here, for the layouts shown only."""
    from kvcalc.engine.latency import tpot_seconds, ttft_seconds

    request = result.request
    searched = {"tpot": layout.tpot_seconds, "ttft": layout.ttft_seconds}
    other: dict[str, float | None] = {"tpot": None, "ttft": None}
    dep, context = layout.deployment, request.context_tokens
    if request.workload is not None and request.request_rate is not None:
        context = request.workload.decode_context  # the bound of the mean decode step
    basis = not request.roofline
    if layout.tpot_seconds is not None:
        other["tpot"] = tpot_seconds(
            dep,
            batch=layout.batch_per_replica,
            context_tokens=context,
            roofline=basis,
            mfu=request.mfu,
            profile=request.profile,
        )
    if layout.ttft_seconds is not None:
        other["ttft"] = ttft_seconds(
            dep, prompt_tokens=request.prompt_tokens, roofline=basis, mfu=request.mfu,
            profile=request.profile,
        )
    estimate, roofline = (other, searched) if request.roofline else (searched, other)
    return {
        "tpot_seconds": estimate["tpot"],
        "roofline_tpot_seconds": roofline["tpot"],
        "ttft_seconds": estimate["ttft"],
        "roofline_ttft_seconds": roofline["ttft"],
    }


def layout_payload(layout: PlannedLayout, result: Plan) -> dict[str, Any]:
    dep = layout.deployment
    return {
        "gpus": gpus_payload(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        **deployment_layout(dep),
        "weight_dtype": weight_dtype_name(dep.model, dep.weights),
        "kv_dtype": dep.kv_dtype.name,
        "max_batch": layout.max_batch,
        "batch_per_replica": layout.batch_per_replica,
        **times(layout, result),
        **serving_payload(layout, result),
        "latency": latency(result),
        "watts": layout.watts,
        "price_per_hour": layout.price_per_hour(result.request.prices),
    }


def serving_payload(layout: PlannedLayout, result: Plan) -> dict[str, Any]:
    """A layout's steady state under the request rate (nulls without one)."""
    point = layout.serving
    if point is None or not point.stable:
        return dict.fromkeys(SERVING_FIELDS)
    workload = result.request.workload
    assert workload is not None
    pools = layout.pools
    if pools is not None:  # the decode pool's steps carry no prompt tokens
        return {
            "max_num_batched_tokens": layout.step_tokens,
            "prefill_replicas": pools.prefill_replicas,
            "decode_replicas": pools.decode_replicas,
            "request_rate_per_replica": point.request_rate,
            "concurrency_per_replica": point.concurrency(workload),
            "prefill_tokens_per_step": None,
            "prefill_utilization": pools.prefill_utilization,
            "queue_seconds": pools.queue_seconds,
        }
    return {
        "max_num_batched_tokens": layout.step_tokens,
        "prefill_replicas": None,
        "decode_replicas": None,
        "request_rate_per_replica": point.request_rate,
        "concurrency_per_replica": point.concurrency(workload),
        "prefill_tokens_per_step": point.prefill_tokens_per_step,
        "prefill_utilization": point.prefill_utilization,
        "queue_seconds": point.queue_seconds,
    }




def profile_payload(result: Plan, engine: ServingEngine) -> dict[str, Any]:
    """The decode profile the layouts were timed with (the engine's, or --runtime's)."""
    return (result.request.profile or engine.decode_profile).payload()


def latency(result: Plan) -> str:
    return "roofline" if result.request.roofline else "estimate"


def columns(result: Plan) -> list[Column]:
    # The table shows the times the targets hold to.
    prefix = "roofline_" if result.request.roofline else ""
    priced = [number("$/hour", "price_per_hour", ",.2f")] if result.tie_break == "price" else []
    serving: list[Column] = []
    if result.request.disaggregated:
        serving += [number("prefill", "prefill_replicas"), number("decode", "decode_replicas")]
    if result.request.request_rate is not None:
        serving += [
            number("req/s/replica", "request_rate_per_replica", ",.3g"),
            number("concurrency", "concurrency_per_replica", ",.1f"),
        ]
    return [
        Column("GPUs", gpus_cell, "name"),
        number("tp", "tp"),
        number("pp", "pp"),
        number("replicas", "replicas"),
        text("weights", "weight_dtype", "name"),
        text("KV", "kv_dtype", "name"),
        number("max batch", "max_batch"),
        number("batch/replica", "batch_per_replica"),
        ms("TPOT ms", f"{prefix}tpot_seconds", "n/a"),
        ms("TTFT ms", f"{prefix}ttft_seconds", "n/a"),
        *serving,
        number("watts", "watts"),
        *priced,
    ]


def gpus_cell(row: Record) -> str:
    return str(row["gpus"]["id"])


def plan_title(result: Plan, engine: ServingEngine) -> str:
    request = result.request
    model = request.model
    rate = request.request_rate
    wanted = [
        f"{rate:g} requests/s" if rate is not None
        else f"{request.users:,} users at {request.context_tokens:,} tokens"
    ]
    if request.max_tpot_seconds is not None:
        wanted.append(f"TPOT <= {request.max_tpot_seconds * 1000:g} ms")
    if request.max_ttft_seconds is not None:
        wanted.append(f"TTFT <= {request.max_ttft_seconds * 1000:g} ms")
    sized = f", cache as {engine.label} sizes it" if engine.label else ""
    return f"{model.name} ({model.id}) plan: {', '.join(wanted)}{sized}"


def plan_notes(result: Plan) -> list[str]:
    basis = (
        "roofline bound (--roofline)"
        if result.request.roofline
        else "realistic estimate (see `kvcalc decode`)"
    )
    order = "price per hour" if result.tie_break == "price" else "fewest watts"
    notes = [
        f"times: {basis}; ranked by GPU count, then {order}, then TPOT",
        f"{len(result.layouts)} accelerator/dtype choices meet the targets; "
        f"{result.evaluated:,} layouts evaluated",
    ]
    if result.left_out:
        notes.append(
            f"left out: {', '.join(result.left_out)} (no SM count in the registry to time an "
            "old llama.cpp build's F16 mat-vec waves; --llama-cpp-build)"
        )
    return notes


def row_layout_notes(rows: list[dict[str, Any]], result: Plan) -> list[str]:
    """Each shown answer's layout notes, after the GPUs they are about (and the dtypes, when
    more than one pair was searched, so two answers on the same GPUs are told apart), and for a
    group across nodes that its times are a bound, as `decode` says."""
    request = result.request
    dtypes = len(request.weight_dtypes) * len(request.kv_dtypes) > 1

    def who(row: dict[str, Any]) -> str:
        pair = f" ({row['weight_dtype']} weights, {row['kv_dtype']} KV)" if dtypes else ""
        return f"{row['gpus']['id']}{pair}"

    notes = []
    for row in rows:
        notes += [f"{who(row)}: {note}" for note in row["layout_notes"]]
    return notes


def plan_report(
    result: Plan,
    top: int,
    engine: ServingEngine,
    caveats: Sequence[str],
    engine_inputs: Sequence[dict[str, Any] | None],
) -> Report:
    """A context beyond the model's maximum is warned about (the convention of every command,
    :mod:`kvcalc.render.warnings`: on stderr and in the document's ``warnings``), and so are
    ``caveats``, what the shown layouts' pools must say beside their max batch;
    ``engine_inputs``: what each shown layout's pool was sized with, one per layout shown."""
    from kvcalc.render.warnings import max_context_warnings

    rows = [
        {**layout_payload(layout, result), "engine_inputs": inputs}
        for layout, inputs in zip(result.layouts[:top], engine_inputs, strict=True)
    ]
    request = result.request
    return Report(
        warnings=[*max_context_warnings(request.model, [request.context_tokens]), *caveats],
        payload={
            "model": request.model.id,
            "model_name": request.model.name,
            "context_tokens": request.context_tokens,
            "users": None if request.request_rate is not None else request.users,
            "latency": latency(result),
            "workload": workload_payload(result.request),
            "decode_profile": profile_payload(result, engine),
            "layouts": rows,
            # The GPUs the search could not time, so that a reader of the JSON alone knows the
            # layouts are not of every GPU (the text's `left out:` note).
            "left_out": list(result.left_out),
        },
        # layout_notes: one `;`-separated cell; engine_inputs, whose keys are the engine's,
        # stays in the JSON (the CSV's columns are the same for every engine).
        records=[flatten({k: v for k, v in row.items() if k != "engine_inputs"}) for row in rows],
        fields=FIELDS,
        sections=[
            Section(
                plan_title(result, engine),
                columns(result),
                rows,
                notes=[
                    workload_line(
                        result.request,
                        [la.step_tokens for la in result.layouts[:top] if la.step_tokens],
                    ),
                    *plan_notes(result),
                    (result.request.profile or engine.decode_profile).summary(),
                    *row_layout_notes(rows, result),
                ],
            )
        ],
    )
