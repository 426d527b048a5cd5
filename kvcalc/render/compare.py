"""The report of `kvcalc compare`: a row per technique, a section per model.

JSON: one object whatever the number of models: the context, GPUs and batch at the top, the
no-cache figures (``token_passes_with_cache``, ``token_passes_without_cache``,
``no_cache_factor``; null without --prompt/--gen), and one entry per model under ``models`` with
its ``rows`` and the rows ``skipped`` (name and reason). A row's ``tpot_seconds`` and
``tokens_per_second`` are the realistic estimate of `kvcalc decode` (null when it cannot be made),
``roofline_tpot_seconds`` and ``roofline_tokens_per_second`` the bound the table shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvcalc.engine.compare import reduction, token_passes_with_cache, token_passes_without_cache
from kvcalc.render.layout import gpus_payload, layout_notes, layout_payload
from kvcalc.render.report import Column, Record, Report, Section, gib, ms, number, text
from kvcalc.render.warnings import max_context_warnings

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.spec import ModelSpec


@dataclass(frozen=True)
class NoCache:
    """The cost of no cache for a prompt of ``prompt_tokens`` answered with ``generated_tokens``."""

    prompt_tokens: int
    generated_tokens: int

    @property
    def with_cache(self) -> int:
        return token_passes_with_cache(self.prompt_tokens, self.generated_tokens)

    @property
    def without_cache(self) -> int:
        return token_passes_without_cache(self.prompt_tokens, self.generated_tokens)

    @property
    def factor(self) -> float:
        return self.without_cache / self.with_cache


@dataclass(frozen=True)
class CompareRow:
    technique: str
    category: str
    note: str
    cached: bool
    """False for the row without a cache."""
    kv_dtype: str | None
    bytes_per_token: int
    bytes_per_sequence: int
    max_sequences: int | None = None
    """Sequences of the context that fit on all replicas (None without --gpus)."""
    batch: int | None = None
    """The batch the TPOT is for and the shared prefix is spread over."""
    tpot_seconds: float | None = None
    reason: str | None = None
    """Why no sequence fits on the GPUs."""
    deployment: Deployment | None = field(default=None, compare=False)
    """The row's deployment (None without --gpus, or for the row without a cache)."""


@dataclass(frozen=True)
class ModelComparison:
    model: ModelSpec
    baseline: CompareRow
    rows: list[CompareRow]
    skipped: list[tuple[str, str]] = field(default_factory=list)


def row_payload(
    row: CompareRow, baseline: CompareRow, no_cache: NoCache | None, context: int
) -> dict[str, Any]:
    passes = None
    if no_cache is not None:
        passes = no_cache.with_cache if row.cached else no_cache.without_cache
    estimate = estimated_tpot(row, context)
    return {
        "technique": row.technique,
        "category": row.category,
        "kv_dtype": row.kv_dtype,
        "kv_bytes_per_token": row.bytes_per_token,
        "kv_bytes_per_sequence": row.bytes_per_sequence,
        "reduction": reduction(baseline.bytes_per_sequence, row.bytes_per_sequence),
        "max_batch": row.max_sequences,
        "batch": row.batch,
        "tpot_seconds": estimate,
        "roofline_tpot_seconds": row.tpot_seconds,
        "tokens_per_second": tokens_per_second(row.batch, estimate),
        "roofline_tokens_per_second": tokens_per_second(row.batch, row.tpot_seconds),
        "token_passes": passes,
        "reason": row.reason,
        "note": row.note,
    }


def estimated_tpot(row: CompareRow, context: int) -> float | None:
    """The realistic TPOT of the row's timed step (as `kvcalc decode` estimates it); None when
    the row is not timed or its replica's link speed is unknown."""
    dep = row.deployment
    if dep is None or row.batch is None or row.tpot_seconds is None:
        return None
    from kvcalc.engine.latency import can_time_communication, tpot_estimate

    if not can_time_communication(dep):
        return None
    return tpot_estimate(dep, batch=row.batch, context_tokens=context).tpot_seconds


def tokens_per_second(batch: int | None, tpot: float | None) -> float | None:
    """Decode throughput of one replica at the row's batch."""
    if tpot is None or batch is None:
        return None
    return batch / tpot


def model_payload(
    comparison: ModelComparison, no_cache: NoCache | None, context: int
) -> dict[str, Any]:
    return {
        "model": comparison.model.id,
        "model_name": comparison.model.name,
        **_layout(comparison.baseline.deployment),
        "rows": [row_payload(r, comparison.baseline, no_cache, context) for r in comparison.rows],
        "skipped": [{"technique": n, "reason": why} for n, why in comparison.skipped],
    }


def compare_payload(
    comparisons: list[ModelComparison],
    context: int,
    gpus: GpuSet | None,
    batch: int | None,
    no_cache: NoCache | None,
) -> dict[str, Any]:
    return {
        "context_tokens": context,
        "gpus": None if gpus is None else gpus_payload(gpus),
        "batch": batch,
        "prompt_tokens": None if no_cache is None else no_cache.prompt_tokens,
        "generated_tokens": None if no_cache is None else no_cache.generated_tokens,
        "token_passes_with_cache": None if no_cache is None else no_cache.with_cache,
        "token_passes_without_cache": None if no_cache is None else no_cache.without_cache,
        "no_cache_factor": None if no_cache is None else no_cache.factor,
        "models": [model_payload(c, no_cache, context) for c in comparisons],
    }


def times(record: Record) -> str:
    value = record["reduction"]
    return "no cache" if value is None else f"{value:,.2f}x"


def compare_columns(on_gpus: bool, passes: bool) -> list[Column]:
    gpu_columns = [
        number("sequences", "max_batch"),
        number("batch", "batch"),
        ms("TPOT ms", "roofline_tpot_seconds"),
        number("tokens/s", "roofline_tokens_per_second", ",.0f"),
    ]
    return [
        text("technique", "technique", "name"),
        text("category", "category"),
        number("bytes/token", "kv_bytes_per_token"),
        number("bytes/sequence", "kv_bytes_per_sequence"),
        gib("GiB", "kv_bytes_per_sequence"),
        Column("reduction", times),
        *(gpu_columns if on_gpus else []),
        *([number("token passes", "token_passes")] if passes else []),
        text("note", "note"),
    ]


def compare_title(model: ModelSpec, context: int, gpus: GpuSet | None) -> str:
    where = "" if gpus is None else f" on {gpus}"
    return f"{model.name} ({model.id}): KV-cache techniques at {context:,} tokens{where}"


def _layout(dep: Deployment | None) -> dict[str, Any]:
    """The layout every row of a model shares (the baseline's); nothing without GPUs."""
    return {} if dep is None else {"tp": dep.tp, "pp": dep.pp, **layout_payload(dep)}


def compare_notes(comparison: ModelComparison, no_cache: NoCache | None) -> list[str]:
    dep = comparison.baseline.deployment
    notes = [] if dep is None else layout_notes(dep)
    notes += [f"{name}: left out, {why}" for name, why in comparison.skipped]
    notes += [f"{r.technique}: does not fit, {r.reason}" for r in comparison.rows if r.reason]
    if no_cache is not None:
        notes.append(
            f"no cache: {no_cache.without_cache:,} token passes for a {no_cache.prompt_tokens:,}"
            f"-token prompt and {no_cache.generated_tokens:,} generated tokens, against "
            f"{no_cache.with_cache:,} with the cache ({no_cache.factor:,.2f}x)"
        )
    return notes


def compare_report(
    comparisons: list[ModelComparison],
    context: int,
    gpus: GpuSet | None,
    batch: int | None,
    no_cache: NoCache | None,
) -> Report:
    payload = compare_payload(comparisons, context, gpus, batch, no_cache)
    columns = compare_columns(gpus is not None, no_cache is not None)
    per_model = [
        [{"model": m["model"], "context_tokens": context, **r} for r in m["rows"]]
        for m in payload["models"]
    ]
    sections = [
        Section(
            compare_title(c.model, context, gpus), columns, records, (), compare_notes(c, no_cache)
        )
        for c, records in zip(comparisons, per_model, strict=True)
    ]
    return Report(
        payload=payload,
        records=[r for records in per_model for r in records],
        sections=sections,
        warnings=[w for c in comparisons for w in max_context_warnings(c.model, [context])],
    )
