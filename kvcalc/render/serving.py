"""Rendering of any serving engine's answer to `kvcalc batch`: the engine states its part as
pure data (:class:`~kvcalc.engine.serving.base.EnginePart`), this turns it into a report
without knowing which engine made it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.render.kvformat import kv_bits_per_value, kv_label
from kvcalc.render.layout import layout_notes, layout_payload
from kvcalc.render.report import Report

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.serving.base import Answer, Setup


def setup_of(dep: Deployment) -> Setup:
    """What every engine's report says of the deployment, as the render layer words it."""
    from kvcalc.engine.serving.base import Setup

    return Setup(
        layout=layout_payload(dep),
        layout_notes=tuple(layout_notes(dep)),
        kv_label=kv_label(dep),
        kv_bits_per_value=kv_bits_per_value(dep),
    )


def engine_report(dep: Deployment, answer: Answer) -> Report:
    """The report of an engine's answer; the budget formula's capacity as its table."""
    from kvcalc.render.warnings import max_context_warnings

    part = answer.part(setup_of(dep))
    if part.capacity is not None:
        from kvcalc.render.batch import capacity_report

        return capacity_report(part.capacity)
    return Report(
        payload=part.payload,
        records=part.records,
        fields=part.fields,
        lines=part.lines,
        exit_code=0 if part.fits else 1,
        warnings=max_context_warnings(dep.model, list(part.lengths)),
    )
