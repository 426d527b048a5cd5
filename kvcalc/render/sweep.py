"""The report of `kvcalc sweep`: KV per sequence, max batch and TPOT along a context (or batch)
sweep, one series per model and GPU set.

JSON: ``mbu``, ``x`` (the swept quantity: ``context_tokens`` or ``batch``),
``context_tokens_list``, ``batches`` (null: the most that fit at each context) and ``series``,
one per model and GPU set with its deployment, ``fits``, ``reason`` and ``points`` (one per
context and batch; ``tpot_seconds`` the realistic estimate, ``roofline_tpot_seconds`` the bound
the table and charts show, as every command names them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kvcalc.engine.serving.base import GPUS_COLUMNS
from kvcalc.engine.units import GiB
from kvcalc.engine.weights import precision_name
from kvcalc.render.batch import deployment_setup
from kvcalc.render.chart import Chart
from kvcalc.render.kvformat import kv_label
from kvcalc.render.layout import layout_notes, layout_payload
from kvcalc.render.report import Record, Report, Section, flatten, gib, ms, number
from kvcalc.render.warnings import max_context_warnings

if TYPE_CHECKING:
    from kvcalc.engine.sweep import Sweep, SweepPoint

#: The keys of one point, also the tail of every CSV record.
POINT_FIELDS = (
    "context_tokens",
    "batch",
    "kv_bytes_per_sequence",
    "max_batch",
    "fits",
    "tpot_seconds",
    "roofline_tpot_seconds",
    "tokens_per_second",
    "roofline_tokens_per_second",
)
SERIES_FIELDS = (
    "model",
    *GPUS_COLUMNS,
    "tp",
    "pp",
    "replicas",
    "weight_dtype",
    "kv_dtype",
)


def point_payload(point: SweepPoint) -> dict[str, Any]:
    step, estimate = point.step, point.tpot_seconds
    return {
        "context_tokens": point.context_tokens,
        "batch": point.batch,
        "kv_bytes_per_sequence": point.kv_bytes_per_sequence,
        "max_batch": point.max_batch,
        "fits": point.fits,
        "tpot_seconds": estimate,
        "roofline_tpot_seconds": None if step is None else step.tpot_seconds,
        "tokens_per_second": None if estimate is None else point.batch / estimate,
        "roofline_tokens_per_second": None if step is None else step.tokens_per_second,
    }


def series_payload(result: Sweep, setup: dict[str, Any]) -> dict[str, Any]:
    return {
        **setup,
        **layout_payload(result.deployment),
        "fits": any(p.fits for p in result.points),
        "reason": result.reason,
        "points": [point_payload(p) for p in result.points],
    }


def series_name(result: Sweep) -> str:
    return f"{result.deployment.model.id} on {result.deployment.gpus}"


def series_title(result: Sweep) -> str:
    dep = result.deployment
    replicas = f"{dep.replicas} replica{'s' if dep.replicas != 1 else ''}"
    return (
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: tp {dep.tp}, pp {dep.pp}, "
        f"{replicas}, weights {precision_name(dep.weights)}, KV {kv_label(dep)}, "
        f"mbu {result.mbu:g}"
    )


COLUMNS = [
    number("context", "context_tokens"),
    number("KV bytes/sequence", "kv_bytes_per_sequence"),
    gib("KV GiB", "kv_bytes_per_sequence"),
    number("max batch", "max_batch"),
    number("batch", "batch"),
    # n/a: the batch does not fit at that context, so it is not timed.
    ms("TPOT ms", "roofline_tpot_seconds", "n/a"),
    number("tokens/s", "roofline_tokens_per_second", ",.0f", "n/a"),
]

NOT_TIMED = (
    "n/a: that batch does not fit at that context on one replica, so it is not timed "
    "(kvcalc decode --batch times one such point with a warning)."
)


def section(result: Sweep, records: Sequence[Record]) -> Section:
    notes = layout_notes(result.deployment)
    if result.reason:
        notes.append(f"does not fit: {result.reason}")
    elif any(not r["fits"] for r in records):
        notes.append(NOT_TIMED)
    return Section(series_title(result), COLUMNS, records, notes=notes)


def charts(
    results: Sequence[Sweep],
    x: str,
    batches: Sequence[int] | None,
    contexts: Sequence[int] = (),
) -> list[Chart]:
    """Against context: KV per sequence, max batch and TPOT (a line per batch when several are
    given); against batch: TPOT and tokens/s (KV per sequence and max batch do not vary).

    The times are the roofline's (`kvcalc decode`'s first table), and the charts say so. A batch
    sweep's x axis names its one context, a context sweep's TPOT its one batch when one is given;
    each line's legend names the points where it does not fit (none for the KV of a sequence,
    which is the model's wherever it fits)."""
    # (title, value of a point, whether it depends on the batch, whether it does not fit there)
    quantities: list[
        tuple[str, Callable[[SweepPoint], float | None], bool, Callable[[SweepPoint], bool] | None]
    ]
    if x == "batch":
        quantities = [
            ("roofline TPOT (ms)", tpot_ms, True, untimed),
            ("roofline tokens/s (one replica)", tokens_per_second, True, untimed),
        ]
        label = "batch (sequences)"
        if len(contexts) == 1:
            label += f", context {contexts[0]:,} tokens"
    else:
        one_batch = f", batch {batches[0]:,}" if batches is not None and len(batches) == 1 else ""
        quantities = [
            ("KV per sequence (GiB)", kv_gib, False, None),
            ("max batch (sequences)", max_batch, False, no_sequence_fits),
            (f"roofline TPOT (ms){one_batch}", tpot_ms, True, untimed),
        ]
        label = "context (tokens)"
    charted = []
    for title, value, per_batch, unfit in quantities:
        lines = chart_series(results, x, batches if per_batch else None)
        charted.append(
            Chart(
                title,
                label,
                [
                    (name, [(getattr(p, x), v) for p in pts if (v := value(p)) is not None])
                    for name, pts in lines
                ],
                x_tokens=x != "batch",
                unfit={
                    name: [getattr(p, x) for p in pts if unfit(p)]
                    for name, pts in lines
                    if unfit is not None
                },
            )
        )
    return charted


def untimed(point: SweepPoint) -> bool:
    return not point.fits


def no_sequence_fits(point: SweepPoint) -> bool:
    return point.max_batch == 0


def chart_series(
    results: Sequence[Sweep], x: str, batches: Sequence[int] | None
) -> list[tuple[str, list[SweepPoint]]]:
    """One line per model and GPU set, and per batch when both contexts and ``batches`` vary
    (None: a quantity the batch does not change, drawn once per context)."""
    if x == "batch":
        return [(series_name(r), list(r.points)) for r in results]
    if batches is None or len(batches) == 1:
        return [(series_name(r), first_per_context(r.points)) for r in results]
    return [
        (f"{series_name(r)}, batch {b:,}", [p for p in r.points if p.batch == b])
        for r in results
        for b in batches
    ]


def first_per_context(points: Sequence[SweepPoint]) -> list[SweepPoint]:
    first: dict[int, SweepPoint] = {}
    for point in points:
        first.setdefault(point.context_tokens, point)
    return list(first.values())


def kv_gib(point: SweepPoint) -> float:
    return point.kv_bytes_per_sequence / GiB


def max_batch(point: SweepPoint) -> float:
    return point.max_batch


def tpot_ms(point: SweepPoint) -> float | None:
    return None if point.step is None else point.step.tpot_seconds * 1000


def tokens_per_second(point: SweepPoint) -> float | None:
    return None if point.step is None else point.step.tokens_per_second


def swept_axis(contexts: Sequence[int], batches: Sequence[int] | None) -> str | None:
    """What the charts plot against: ``context_tokens`` when several contexts are given, else
    ``batch`` when several batches are, else None (one point, nothing to chart)."""
    if len(contexts) > 1:
        return "context_tokens"
    if batches is not None and len(batches) > 1:
        return "batch"
    return None


def sweep_report(
    results: Sequence[Sweep], contexts: Sequence[int], batches: Sequence[int] | None
) -> Report:
    """Exit code 1 when a series fits at none of its points, with the reason on stderr."""
    axis = swept_axis(contexts, batches)
    x = axis or "context_tokens"
    setups = [deployment_setup(r.deployment) for r in results]
    series = [series_payload(r, setup) for r, setup in zip(results, setups, strict=True)]
    payload = {
        "mbu": results[0].mbu if results else None,
        "x": x,
        "context_tokens_list": list(contexts),
        "batches": None if batches is None else list(batches),
        "series": series,
    }
    sections = []
    records: list[Record] = []
    for result, one, setup in zip(results, series, setups, strict=True):
        rows = [{**flatten(setup), **p} for p in one["points"]]
        records += rows
        sections.append(section(result, rows))
    missing = [s for s in series if not s["fits"]]
    return Report(
        payload=payload,
        records=records,
        fields=[*SERIES_FIELDS, *POINT_FIELDS],
        sections=sections,
        diagnostics=[
            f"does not fit: {s['model']} on {s['gpus']['label']}: "
            f"{s['reason'] or 'no point of the sweep fits'}"
            for s in missing
        ],
        exit_code=1 if missing else 0,
        charts=charts(results, axis, batches, contexts) if axis else [],
        warnings=[
            w
            for model in {r.deployment.model.id: r.deployment.model for r in results}.values()
            for w in max_context_warnings(model, contexts)
        ],
    )
