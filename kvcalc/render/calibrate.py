"""The report of `kvcalc calibrate`: each term of a start-up as its log states it, as kvcalc
models it, and the difference; then the token count, which decides the exit code.

JSON: the start-up (``engine``, ``release``, ``rules``: the release whose rules kvcalc applied,
``model``, ``gpus``, ``tp``, ``pp``, ``dp``), ``agrees`` and ``exact``, ``kv_cache_tokens`` (the
log's) beside ``kv_cache_tokens_kvcalc`` (kvcalc's from the logged memory, ``_low``/``_high`` at
either end of the log's rounding) and ``kv_cache_tokens_estimated`` (from kvcalc's own terms),
``terms`` (one object per term: ``term``, ``stage``, ``unit``, ``logged``, ``kvcalc``,
``difference``; bytes per GPU), ``workers`` (each worker's logged figures), ``calibration``
(what ``--write`` keeps) and ``written``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvcalc.engine.units import GiB
from kvcalc.render.layout import gpus_payload
from kvcalc.render.report import Column, Record, Report, Section, text

if TYPE_CHECKING:
    from kvcalc.calibration.compare import Comparison, Term


def term_payload(term: Term) -> dict[str, Any]:
    return {
        "term": term.name,
        "stage": term.stage,
        "unit": term.unit,
        "logged": term.logged,
        "kvcalc": term.kvcalc,
        "difference": term.difference,
        "note": term.note or None,
    }


def calibrate_payload(c: Comparison, document: dict[str, Any], written: str | None
                      ) -> dict[str, Any]:
    span = c.kv_cache_tokens_range
    return {
        "engine": c.engine,
        "release": c.release,
        "rules": c.rules,
        "model": c.model.id,
        "gpus": gpus_payload(c.gpus),
        "tp": c.tp,
        "pp": c.pp,
        "dp": c.dp,
        "agrees": c.agrees,
        "exact": c.exact,
        "kv_cache_tokens": c.kv_cache_tokens,
        "kv_cache_tokens_kvcalc": c.kv_cache_tokens_kvcalc,
        "kv_cache_tokens_low": None if span is None else span[0],
        "kv_cache_tokens_high": None if span is None else span[1],
        "kv_cache_tokens_estimated": c.kv_cache_tokens_estimated,
        "terms": [term_payload(t) for t in c.terms],
        "workers": [dict(w) for w in c.workers],
        "calibration": document,
        "written": written,
        "notes": list(c.notes),
    }


def _figure(unit: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return ""
    sign = "+" if signed else ""
    if unit == "bytes":
        return f"{value / GiB:{sign},.2f} GiB"
    if unit == "fraction":
        return f"{value:{sign}.3f}"
    return f"{value:{sign},}"


def _cells(record: Record, key: str, signed: bool = False) -> str:
    return _figure(record["unit"], record[key], signed)


COLUMNS = [
    text("term", "label", "name"),
    Column("logged", lambda r: _cells(r, "logged")),
    Column("kvcalc", lambda r: _cells(r, "kvcalc")),
    Column("difference", lambda r: _cells(r, "difference", signed=True)),
    text("note", "note"),
]


def verdict(c: Comparison) -> str:
    span = c.kv_cache_tokens_range
    logged = f"the logged {c.kv_cache_tokens:,} tokens"
    if span is None:
        return f"does not agree: {c.rules}'s pool does not start with the logged memory"
    within = (f"kvcalc's {span[0]:,}" if span[0] == span[1]
              else f"kvcalc's {span[0]:,} to {span[1]:,}")
    if c.agrees:
        return (f"agrees: {logged} are within {within} from the logged memory "
                "(each figure moved within its printed rounding)")
    return f"does not agree: {logged} are outside {within} from the logged memory"


def calibrate_report(c: Comparison, document: dict[str, Any], written: str | None) -> Report:
    payload = calibrate_payload(c, document, written)
    records = [
        {"label": t.label + ("" if t.stage is None else f" (stage {t.stage})"),
         **term_payload(t)}
        for t in c.terms
    ]
    release = c.release or "release not stated"
    title = (f"{c.model.name} ({c.model.id}) on {c.gpus}, tp {c.tp}, pp {c.pp}: "
             f"{c.engine} start-up ({release}) beside kvcalc ({c.rules} rules)")
    notes = [verdict(c), *c.notes]
    if written is not None:
        exact = "exactly" if c.exact else "as closely as the rules allow"
        notes.append(f"wrote {written}: --calibration {written} reproduces "
                     f"{c.kv_cache_tokens:,} tokens {exact}")
    return Report(
        payload=payload,
        records=[{k: v for k, v in r.items() if k != "label"} for r in records],
        fields=("term", "stage", "unit", "logged", "kvcalc", "difference", "note"),
        sections=[Section(title, COLUMNS, records, (), notes)],
        exit_code=0 if c.agrees else 1,
    )
