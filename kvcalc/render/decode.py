"""The report of `kvcalc decode`: one decode step per context.

JSON: one object whatever the number of contexts; the deployment and its ``eviction`` policy at the
top, ``fits`` and ``reason`` (why nothing fits), and one entry per context that fits under
``contexts`` (with ``tokens_held``, the tokens of each sequence a step reads under the policy).
Each has the realistic estimate (``tpot_seconds``, ``tokens_per_second`` and its terms,
``ttft_seconds`` for a prompt of the context's length; null when the GPU's link speed is unknown
and the replica spans several GPUs) and the roofline beside it (``roofline_tpot_seconds``,
``roofline_tokens_per_second`` and its terms), as every command names them (docs/json.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvcalc.engine.weights import precision_name
from kvcalc.render.eviction import eviction_notes, eviction_payload, eviction_title
from kvcalc.render.kvformat import kv_bits_per_value, kv_label
from kvcalc.render.layout import gpus_payload, layout_notes, layout_payload
from kvcalc.render.report import Column, Report, Section, flatten, ms, number, text

if TYPE_CHECKING:
    from kvcalc.engine.decode import DecodeStep
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.latency import PrefillEstimate, TpotEstimate
    from kvcalc.engine.profiles import DecodeProfile
    from kvcalc.engine.serving.base import ServingEngine
    from kvcalc.engine.workload import ServingPoint, Workload


#: The roofline's keys of one step: JSON key -> attribute of DecodeStep (the realistic
#: estimate's ``tpot_seconds`` and ``tokens_per_second`` are the plain names, as everywhere).
ROOFLINE_KEYS = {
    "context_tokens": "context_tokens",
    "tokens_held": "tokens_held",
    "batch": "batch",
    "weight_bytes_read": "weight_bytes_read",
    "kv_bytes_read": "kv_bytes_read",
    "flops": "flops",
    "weight_read_seconds": "weight_read_seconds",
    "kv_read_seconds": "kv_read_seconds",
    "compute_seconds": "compute_seconds",
    "roofline_tpot_seconds": "tpot_seconds",
    "roofline_tokens_per_second": "tokens_per_second",
    "bound": "bound",
    "kv_share": "kv_share",
}
#: The keys of one step's roofline, also the CSV header when no step fits.
STEP_FIELDS = tuple(ROOFLINE_KEYS)


#: The realistic estimate's keys beside the roofline's (TpotEstimate / PrefillEstimate).
ESTIMATE_FIELDS = (
    "memory_estimate_seconds",
    "compute_estimate_seconds",
    "communication_seconds",
    "step_overhead_seconds",
    "layer_kernel_seconds",
    "tpot_seconds",
    "tpot_low_seconds",
    "tpot_high_seconds",
    "tokens_per_second",
    "tokens_per_second_low",
    "tokens_per_second_high",
    "ttft_seconds",
    "ttft_low_seconds",
    "ttft_high_seconds",
)


@dataclass(frozen=True)
class TimedStep:
    """One context's decode step: the roofline, and the realistic estimates when they can be
    made (None: the link speed a multi-GPU replica needs is unknown)."""

    roofline: DecodeStep
    tpot: TpotEstimate | None
    prefill: PrefillEstimate | None


def estimate_payload(tpot: TpotEstimate | None, prefill: PrefillEstimate | None) -> dict[str, Any]:
    if tpot is None or prefill is None:
        return dict.fromkeys(ESTIMATE_FIELDS)
    return {
        "memory_estimate_seconds": tpot.memory_seconds,
        "compute_estimate_seconds": tpot.compute_seconds,
        "communication_seconds": tpot.communication_seconds,
        "step_overhead_seconds": tpot.overhead_seconds,
        "layer_kernel_seconds": tpot.layer_seconds,
        "tpot_seconds": tpot.tpot_seconds,
        "tpot_low_seconds": tpot.tpot_low_seconds,
        "tpot_high_seconds": tpot.tpot_high_seconds,
        "tokens_per_second": tpot.tokens_per_second,
        "tokens_per_second_low": tpot.tokens_per_second_low,
        "tokens_per_second_high": tpot.tokens_per_second_high,
        "ttft_seconds": prefill.ttft_seconds,
        "ttft_low_seconds": prefill.ttft_low_seconds,
        "ttft_high_seconds": prefill.ttft_high_seconds,
    }


def step_payload(timed: TimedStep) -> dict[str, Any]:
    roofline = {key: getattr(timed.roofline, name) for key, name in ROOFLINE_KEYS.items()}
    return {**roofline, **estimate_payload(timed.tpot, timed.prefill)}


def decode_payload(
    dep: Deployment,
    steps: list[TimedStep],
    mbu: float,
    reason: str | None,
    engine: ServingEngine,
    profile: DecodeProfile | None = None,
    serving: tuple[Workload | None, ServingPoint | None] = (None, None),
    engine_inputs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "model": dep.model.id,
        "engine": engine.name,
        "gpus": gpus_payload(dep.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        **layout_payload(dep),
        **link_payload(dep),
        "weight_dtype": precision_name(dep.weights),
        "kv_dtype": dep.kv_dtype.name,
        "kv_bits_per_value": kv_bits_per_value(dep),
        "mbu": mbu,
        "efficiency_basis": efficiency_basis(dep),
        "decode_profile": (profile or engine.decode_profile).payload(),
        "engine_inputs": engine_inputs,
        "serving": serving_payload(dep, *serving),
        "eviction": eviction_payload(dep.eviction),
        "fits": reason is None,
        "reason": reason,
        "contexts": [step_payload(s) for s in steps],
    }


def serving_payload(
    dep: Deployment, workload: Workload | None, point: ServingPoint | None
) -> dict[str, Any] | None:
    """The ``serving`` object: one replica's steady state under --request-rate (null without
    one)."""
    if workload is None:
        return None
    assert workload.request_rate is not None
    stable = point is not None and point.stable
    return {
        "input_len": workload.input_len,
        "output_len": workload.output_len,
        "request_rate": workload.request_rate,
        "max_num_batched_tokens": workload.batched_tokens,
        "request_rate_per_replica": workload.request_rate / dep.replicas,
        "stable": stable,
        "reason": (
            None if stable
            else point.why if point is not None
            else f"no request of {workload.context_tokens:,} tokens fits the KV cache"
        ),
        **(steady_figures(workload, point) if stable and point else dict.fromkeys(STEADY_KEYS)),
    }


#: The steady state's figures (null when the rate admits none).
STEADY_KEYS = (
    "decode_batch", "concurrency_per_replica", "prefill_tokens_per_step",
    "prefill_utilization", "queue_seconds", "tpot_seconds", "ttft_seconds",
)


def steady_figures(workload: Workload, point: ServingPoint) -> dict[str, Any]:
    figures = {
        "decode_batch": point.decode_batch,
        "concurrency_per_replica": point.concurrency(workload),
        "prefill_tokens_per_step": point.prefill_tokens_per_step,
        "prefill_utilization": point.prefill_utilization,
        "queue_seconds": point.queue_seconds,
        "tpot_seconds": point.step_seconds,
        "ttft_seconds": point.ttft_seconds,
    }
    assert tuple(figures) == STEADY_KEYS
    return figures


SERVING = [
    number("req/s per replica", "request_rate_per_replica", ",.3g"),
    number("concurrency", "concurrency_per_replica", ",.1f", "n/a"),
    number("batch", "decode_batch", ",", "n/a"),
    number("prefill tokens/step", "prefill_tokens_per_step", ",.0f", "n/a"),
    number("prefill load", "prefill_utilization", ".0%", "n/a"),
    ms("TPOT ms", "tpot_seconds", "n/a"),
    ms("queue ms", "queue_seconds", "n/a"),
    ms("TTFT ms", "ttft_seconds", "n/a"),
]


def serving_section(serving: dict[str, Any]) -> Section:
    title = (
        f"serving {serving['request_rate']:g} requests/s (Poisson) of {serving['input_len']:,} "
        f"prompt + {serving['output_len']:,} output tokens, one replica's steady state"
    )
    notes = [
        f"each step carries the decode batch and prefill chunks up to "
        f"{serving['max_num_batched_tokens']:,} tokens (--max-num-batched-tokens); "
        "concurrency by Little's law; TTFT = half a step + M/D/1 queueing + the prompt's chunks"
    ]
    if not serving["stable"]:
        notes.append(f"not stable: {serving['reason']}")
    return Section(title, SERVING, [serving], notes=notes)


def decode_title(dep: Deployment, mbu: float, engine: ServingEngine) -> str:
    # The engine decides the default batch; the budget formula goes unnamed.
    sized = f", batch as {engine.label} sizes it" if engine.label else ""
    return (
        f"{dep.model.name} ({dep.model.id}) decode step on {dep.gpus}: tp {dep.tp}, pp {dep.pp}, "
        f"weights {precision_name(dep.weights)}, KV {kv_label(dep)}, mbu {mbu:g}{sized}"
        f"{eviction_title(dep.eviction)}"
    )


def link_payload(dep: Deployment) -> dict[str, Any]:
    """``nodes`` (nodes one replica spans), ``link`` (what its traffic crosses at its slowest:
    none, scale-up, pcie, network or unknown) and ``accuracy_regime`` (whose band applies)."""
    from kvcalc.engine.communication import link_kind, replica_nodes
    from kvcalc.engine.latency import regime_of

    return {
        "nodes": replica_nodes(dep),
        "link": link_kind(dep),
        "accuracy_regime": regime_of(dep),
    }


def band_note(dep: Deployment) -> str:
    """Where the low-high band comes from (kvcalc.engine.accuracy)."""
    from kvcalc.engine.accuracy import band_for
    from kvcalc.engine.latency import regime_of

    regime = regime_of(dep)
    band = band_for(regime)
    if band is None:
        return f"low-high: no measured points speak for {regime}: the estimate alone"
    whose = (
        "all fit points (too few in this regime)"
        if band.pooled
        else f"{band.points} {regime} fit points"
    )
    return (
        f"low-high: measured / estimated TPOT {band.low:g}-{band.high:g} on {whose} "
        "(docs/accuracy.md); kernels ms: the profile's per-layer kernels"
    )


def efficiency_basis(dep: Deployment) -> str:
    """``measured`` when the registry holds the part's efficiency figures, else ``generic``."""
    return "measured" if dep.gpus.accelerator.efficiency is not None else "generic"


def estimate_title(dep: Deployment) -> str:
    basis = efficiency_basis(dep)
    figures = (
        f"{dep.gpus.accelerator.id}'s measured efficiency"
        if basis == "measured"
        else "generic efficiency (no measured figures for this GPU in the registry)"
    )
    prompt = "SnapKV's prompt" if dep.eviction.fixed_context else "one prompt of the context"
    return f"realistic estimate ({figures}); TTFT for {prompt}"


COLUMNS = [
    number("context", "context_tokens"),
    number("batch", "batch"),
    ms("weights ms", "weight_read_seconds", "n/a"),
    ms("KV ms", "kv_read_seconds", "n/a"),
    ms("compute ms", "compute_seconds", "n/a"),
    ms("TPOT ms", "roofline_tpot_seconds", "n/a"),
    number("tokens/s", "roofline_tokens_per_second", ",.0f"),
    number("KV share", "kv_share", ".0%"),
    text("bound", "bound", "name"),
]


ESTIMATE = [
    number("context", "context_tokens"),
    number("batch", "batch"),
    ms("reads ms", "memory_estimate_seconds", "n/a"),
    ms("compute ms", "compute_estimate_seconds", "n/a"),
    ms("all-reduce ms", "communication_seconds", "n/a"),
    ms("overhead ms", "step_overhead_seconds", "n/a"),
    ms("kernels ms", "layer_kernel_seconds", "n/a"),
    ms("est. TPOT ms", "tpot_seconds", "n/a"),
    ms("low", "tpot_low_seconds", "n/a"),
    ms("high", "tpot_high_seconds", "n/a"),
    number("est. tokens/s", "tokens_per_second", ",.0f"),
    ms("est. TTFT ms", "ttft_seconds", "n/a"),
]


def reads(evicting: bool) -> list[Column]:
    held = [number("tokens held", "tokens_held")] if evicting else []
    return [*READS[:1], *held, *READS[1:]]


READS = [
    number("context", "context_tokens"),
    number("batch", "batch"),
    number("weight bytes read", "weight_bytes_read"),
    number("KV bytes read", "kv_bytes_read"),
    number("FLOPs", "flops"),
]


def decode_report(
    dep: Deployment,
    steps: list[TimedStep],
    mbu: float,
    reason: str | None,
    warnings: list[str],
    engine: ServingEngine,
    profile: DecodeProfile | None = None,
    serving: tuple[Workload | None, ServingPoint | None] = (None, None),
    engine_inputs: dict[str, Any] | None = None,
) -> Report:
    """``warnings`` (a batch timed beyond what fits) follow the convention of every command
    (:mod:`kvcalc.render.warnings`), with the contexts beyond the model's maximum;
    ``engine_inputs``: what the engine's pool was sized with
    (:meth:`~kvcalc.engine.serving.base.KVPool.started_with`)."""
    from kvcalc.render.warnings import max_context_warnings

    profile = profile or engine.decode_profile
    payload = decode_payload(dep, steps, mbu, reason, engine, profile, serving, engine_inputs)
    setup = flatten(
        {k: payload[k] for k in ("model", "engine", "gpus", "tp", "pp", "weight_dtype", "kv_dtype")}
    )
    setup["eviction"] = dep.eviction.policy
    records = [{**setup, "mbu": mbu, **p} for p in payload["contexts"]]
    diagnostics = [f"does not fit: {reason}"] if reason else []
    contexts = [s.roofline.context_tokens for s in steps]
    warned = [
        *warnings,
        *max_context_warnings(dep.model, contexts),
    ]
    unknown_link = any(s.tpot is None for s in steps)
    notes = [profile.summary()]
    if unknown_link:
        notes.append(
            f"{dep.gpus.accelerator.id}: no link speed in the registry, so tp x pp > 1 is not timed"
        )
    if not unknown_link and records:
        notes.append(band_note(dep))
    sections = (
        [
            Section(
                decode_title(dep, mbu, engine),
                COLUMNS,
                records,
                notes=[*layout_notes(dep), *eviction_notes(dep.eviction)],
            ),
            Section(estimate_title(dep), ESTIMATE, records, notes=notes),
            Section(
                "what one step reads and computes (all GPUs of a replica)",
                reads(dep.eviction.lossy),
                records,
            ),
        ]
        if records
        else []
    )
    served = payload["serving"]
    if served is not None:
        sections.insert(0, serving_section(served))
    # A rate the replica cannot keep up with is a "no", as a cache that holds nothing is.
    unserved = served is not None and not served["stable"]
    return Report(
        payload=payload,
        records=records,
        fields=[*setup, "mbu", *STEP_FIELDS, *ESTIMATE_FIELDS],
        sections=sections,
        diagnostics=diagnostics,
        exit_code=0 if reason is None and not unserved else 1,
        warnings=warned,
    )
