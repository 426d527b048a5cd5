"""The report of `kvcalc check SPEC`: every requirement of every deployment, measured.

JSON (docs/json.md): ``spec``, ``ok``, ``requirement_count`` and ``failed`` (counts), and
``deployments``, each with its layout (``deployment``, ``line``, ``model``, ``gpus``, ``engine``,
``engine_inputs`` (what the engine's pool was sized with, null for the budget formula),
``tp``, ``pp``, the layout keys (``replicas``, ``tp_given``, ``tp_reason``, ``tp_nodes``,
``kv_head_copies``, ``layout_notes``), ``kv_dtype``, ``weight_dtype``, ``eviction`` as every
report states it), ``context_tokens`` and ``batch`` (the batch timed, or null), ``reason`` (why
nothing fits, else null), ``ok`` and ``requirements``: one entry per requirement with
``requirement``, ``limit`` (``min`` or ``max``), ``unit``, ``required``, ``measured``,
``margin``, ``margin_ratio``, ``passed``, ``line`` and ``note``. The human formats show one
table per deployment, titled with its set-up, its layout notes under it (as `batch` and
`decode` print them); the CI formats (junit, github) render its ``cases``, each a requirement,
and no layout note: a note is no pass or fail, and an annotation on every run of a sound layout
would bury the failures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from kvcalc.engine.weights import precision_name
from kvcalc.render.eviction import eviction_notes, eviction_payload, eviction_title
from kvcalc.render.layout import gpus_payload, layout_notes, layout_payload
from kvcalc.render.report import Case, Column, Record, Report, Section, flatten, number, text
from kvcalc.render.warnings import max_context_warnings

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.requirements import Outcome


@dataclass(frozen=True)
class CheckedDeployment:
    """One deployment of a spec with its requirements measured; ``lines`` gives each
    outcome's line in the spec file."""

    name: str
    line: int
    dep: Deployment
    engine: str
    context_tokens: int | None
    batch: int | None
    """The batch TPOT, tokens/s and the KV fraction are measured at (all replicas)."""
    reason: str | None
    """Why no sequence of ``context_tokens`` fits, else None."""
    outcomes: tuple[Outcome, ...]
    lines: tuple[int, ...]
    warnings: tuple[tuple[int, str], ...] = ()
    """Answers that hold but rest on an unusual input (an eviction policy evicting nothing),
    each with the line of the key it is about."""
    ctx_line: int | None = None
    """The line of ``ctx`` (or of the deployment), where a warning about the context points."""
    engine_inputs: dict[str, Any] | None = None
    """What the engine's pool was sized with
    (:meth:`~kvcalc.engine.serving.base.KVPool.started_with`; None: the budget formula)."""

    def located_warnings(self) -> list[tuple[int, str]]:
        """Every warning of the deployment, with its line."""
        at_ctx = [] if self.context_tokens is None else [
            (self.ctx_line or self.line, f"{self.name}: {w}")
            for w in max_context_warnings(self.dep.model, [self.context_tokens])
        ]
        return [*at_ctx, *self.warnings]

    @property
    def ok(self) -> bool:
        return all(o.passed for o in self.outcomes)


# ------------------------------------------------------------------ figures as people read them


def quantity(value: float | None, unit: str) -> str:
    """A measured or required value in its unit's usual precision."""
    if value is None:
        return "n/a"
    if math.isinf(value):
        return "unbounded"
    if unit == "fraction":
        return f"{value:.1%}"
    if unit == "ms":
        return f"{value:,.2f} ms"
    return f"{value:,.0f} {_SUFFIXES[unit]}"


_SUFFIXES = {"sequences": "seq", "tokens": "tokens", "tokens/s": "tok/s"}


def signed(value: float | None, unit: str) -> str:
    """A margin: positive on the good side of the bound; a fraction's in percentage points."""
    if value is None or math.isnan(value):
        return "n/a"
    if math.isinf(value):
        return "unbounded"
    if unit == "fraction":
        return f"{value * 100:+.1f} pp"
    if unit == "ms":
        return f"{value:+,.2f} ms"
    return f"{value:+,.0f} {_SUFFIXES[unit]}"


def requirement_name(outcome: Outcome) -> str:
    r = outcome.requirement
    return f"{r.key} {r.operator} {quantity(outcome.required, r.unit)}"


def case_message(checked: CheckedDeployment, outcome: Outcome) -> str:
    r = outcome.requirement
    verdict = "holds" if outcome.passed else "fails"
    note = f"; {outcome.note}" if outcome.note else ""
    return (
        f"{checked.name}: {r.key} {verdict}: measured {quantity(outcome.measured, r.unit)}, "
        f"required {r.operator} {quantity(outcome.required, r.unit)}, "
        f"margin {signed(outcome.margin, r.unit)}{note}"
    )


# ------------------------------------------------------------------ the report


def outcome_payload(outcome: Outcome, line: int) -> dict[str, Any]:
    r = outcome.requirement
    return {
        "requirement": r.key,
        "limit": r.bound,
        "unit": r.unit,
        "required": outcome.required,
        "measured": outcome.measured,
        "margin": outcome.margin,
        "margin_ratio": outcome.margin_ratio,
        "passed": outcome.passed,
        "line": line,
        "note": outcome.note,
    }


def deployment_payload(checked: CheckedDeployment) -> dict[str, Any]:
    dep = checked.dep
    return {
        "deployment": checked.name,
        "line": checked.line,
        "model": dep.model.id,
        "gpus": gpus_payload(dep.gpus),
        "engine": checked.engine,
        "engine_inputs": checked.engine_inputs,
        "tp": dep.tp,
        "pp": dep.pp,
        **layout_payload(dep),
        "kv_dtype": dep.kv_dtype.name,
        "weight_dtype": precision_name(dep.weights),
        "eviction": eviction_payload(dep.eviction),
        "context_tokens": checked.context_tokens,
        "batch": checked.batch,
        "reason": checked.reason,
        "ok": checked.ok,
        "requirements": [
            outcome_payload(o, line)
            for o, line in zip(checked.outcomes, checked.lines, strict=True)
        ],
    }


SETUP_FIELDS = ("model", "gpus", "engine", "context_tokens", "batch")


def records(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per requirement, its deployment's name and set-up first."""
    return [
        {
            "deployment": d["deployment"],
            **flatten({k: d[k] for k in SETUP_FIELDS}),
            "eviction": d["eviction"]["policy"],
            **{k: r[k] for k in ("requirement", "unit", "required", "measured", "margin")},
            "passed": r["passed"],
            "line": r["line"],
            "note": r["note"],
        }
        for d in payload["deployments"]
        for r in d["requirements"]
    ]


def _unit_cell(key: str, show: Any) -> Column:
    def cell(record: Record) -> str:
        return str(show(record[key], record["unit"]))

    return Column(key, cell)


COLUMNS = [
    text("requirement", "requirement", "name"),
    number("line", "line"),
    _unit_cell("measured", quantity),
    Column("required", lambda r: f"{r['operator']} {quantity(r['required'], r['unit'])}"),
    _unit_cell("margin", signed),
    Column("result", lambda r: "pass" if r["passed"] else "FAIL", "name"),
    text("note", "note"),
]


def deployment_line(checked: CheckedDeployment) -> str:
    dep = checked.dep
    at = f", ctx {checked.context_tokens:,}" if checked.context_tokens is not None else ""
    batch = f", batch {checked.batch:,}" if checked.batch is not None else ""
    replicas = f" x {dep.replicas} replicas" if dep.replicas > 1 else ""
    return (
        f"{checked.name}: {dep.model.name} ({dep.model.id}) on {dep.gpus}, tp {dep.tp}, "
        f"pp {dep.pp}{replicas}, engine {checked.engine}, weights {precision_name(dep.weights)}, "
        f"KV {dep.kv_dtype.name}{eviction_title(dep.eviction)}{at}{batch}"
    )


def summary(payload: dict[str, Any]) -> str:
    total, failed = payload["requirement_count"], payload["failed"]
    count = len(payload["deployments"])
    deployments = f"{count} deployment{'s' if count != 1 else ''}"
    if failed:
        return f"{payload['spec']}: {failed} of {total} requirements fail ({deployments})"
    held = "the requirement holds" if total == 1 else f"all {total} requirements hold"
    return f"{payload['spec']}: {held} ({deployments})"


def check_spec_report(spec: str, checked: Sequence[CheckedDeployment]) -> Report:
    """Exit 0 when every requirement holds, 1 when any fails."""
    deployments = [deployment_payload(c) for c in checked]
    outcomes = [o for c in checked for o in c.outcomes]
    failed = sum(not o.passed for o in outcomes)
    payload = {
        "spec": spec,
        "ok": failed == 0,
        "requirement_count": len(outcomes),
        "failed": failed,
        "deployments": deployments,
    }
    flat = records(payload)
    # Table rows carry the requirement's operator; the records (CSV) keep the payload's keys.
    rows = [
        {**record, "operator": o.requirement.operator}
        for record, o in zip(flat, outcomes, strict=True)
    ]
    warnings = [w for c in checked for w in c.located_warnings()]
    starts = list(accumulate((len(c.outcomes) for c in checked), initial=0))
    cases = [
        Case(c.name, requirement_name(o), o.passed, case_message(c, o), spec, line)
        for c in checked
        for o, line in zip(c.outcomes, c.lines, strict=True)
    ]
    return Report(
        payload=payload,
        records=flat,
        lines=(summary(payload),),
        sections=[
            Section(
                deployment_line(c),
                COLUMNS,
                rows[start : start + len(c.outcomes)],
                notes=[*layout_notes(c.dep), *eviction_notes(c.dep.eviction)],
            )
            for c, start in zip(checked, starts, strict=False)
        ],
        cases=cases,
        warnings=[w for _, w in warnings],
        warning_lines={w: (spec, line) for line, w in warnings},
        exit_code=1 if failed else 0,
    )


def spec_problems_report(problems: Sequence[str], spec: str) -> Report:
    """An invalid spec's problems as failed cases, for the CI formats (an annotation on the
    line, a failed JUnit test): a pipeline that only reads stdout still shows why."""
    import re

    cases = []
    for problem in problems:
        # Problems read "<spec>:<line>: <message>", or "<spec>: <message>" for the whole file.
        rest = problem.removeprefix(f"{spec}:")
        located = re.match(r"^(\d+): ", rest)
        line = int(located.group(1)) if located else None
        message = rest[located.end():] if located else rest.strip()
        name = f"line {line}" if line else "file"
        cases.append(Case("invalid spec", name, False, message, spec, line, kind="invalid spec"))
    return Report(payload={}, cases=cases)
