"""The results of the Python API (:mod:`kvcalc.api`): one frozen dataclass per command.

Each holds the figures a notebook reads as typed attributes (``result.kv_bytes_per_token``,
``result.max_batch``) and the engine's own objects behind them; ``report()`` is the render
:class:`~kvcalc.render.report.Report` the command line prints, and ``to_dict()`` exactly the
command's ``--format json`` document.

Results compare by identity (``eq=False``): they hold the engine's objects, and each generated
``__eq__`` costs every command's start-up time.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from kvcalc.calibration.compare import Comparison
    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.kv import KVSize
    from kvcalc.engine.offload import TierFit
    from kvcalc.engine.plan import Plan, PlannedLayout
    from kvcalc.engine.sweep import Sweep
    from kvcalc.render.capacity_check import CheckedDeployment
    from kvcalc.render.compare import ModelComparison
    from kvcalc.render.decode import TimedStep
    from kvcalc.render.report import Report


@dataclass(frozen=True, kw_only=True, eq=False)
class Result:
    """What every result has: its report, its JSON document and its exit code."""

    _report: Report = field(repr=False, compare=False)

    def report(self) -> Report:
        """The report every output format renders (a copy: a caller may add warnings)."""
        return replace(self._report)

    def to_dict(self) -> Any:
        """The command's ``--format json`` document, as ``json.loads`` reads it back (a list
        for `plan`'s ranking, else an object)."""
        import json

        from kvcalc.render.json import dumps

        return json.loads(dumps(self._report.document()))

    def render(self, fmt: str = "table", width: int = 100) -> str:
        """The report as the command line prints it in ``fmt`` (table, json, yaml, csv,
        markdown; `check` also junit and github), ``width`` columns wide, without colour."""
        from kvcalc.render.formats import render

        return render(self._report, fmt, width)

    @property
    def warnings(self) -> tuple[str, ...]:
        """Answers that hold but rest on an unusual input (the command line's ``warning:``)."""
        return tuple(self._report.warnings)

    @property
    def exit_code(self) -> int:
        """The command line's exit code: 0, or 1 when the answer is "does not fit" or a
        requirement fails."""
        return self._report.exit_code


@dataclass(frozen=True, kw_only=True, eq=False)
class SizeResult(Result):
    """`kvcalc size`: the cache of one model, at each context."""

    model: str
    """The model's registry id."""
    kv_dtype: str
    batch: int
    kv_bytes_per_token: int
    """Bytes one token adds to a sequence (all layers, all GPUs; states excluded)."""
    contexts: tuple[int, ...]
    kv_bytes_per_sequence: tuple[int, ...]
    """One sequence's cache at each of ``contexts`` (windows capped, states included)."""
    kv_bytes_total: tuple[int, ...]
    """``batch`` sequences' cache at each of ``contexts``."""
    sizes: tuple[KVSize, ...]
    """The engine's answer at each context, layer group by layer group."""


@dataclass(frozen=True, kw_only=True, eq=False)
class BatchResult(Result):
    """`kvcalc batch`: the sequences that fit on the GPUs, as the engine sizes the cache."""

    model: str | None
    """None: every model of the registry (``registry``)."""
    engine: str
    contexts: tuple[int, ...]
    """The contexts answered (for vLLM, the request lengths it starts with)."""
    max_batch: tuple[int, ...]
    """Sequences of each context that fit on all replicas (empty for the whole registry)."""
    _registry: Callable[[], Mapping[str, Capacity | str]] = field(repr=False)

    @cached_property
    def registry(self) -> Mapping[str, Capacity | str]:
        """Without a model: each model's capacity, or why none could be built for it (worked
        out when first asked: the report may come from the cache of registry rows)."""
        return self._registry()


@dataclass(frozen=True, kw_only=True, eq=False)
class DecodeResult(Result):
    """`kvcalc decode`: one decode step at each context."""

    model: str
    engine: str
    contexts: tuple[int, ...]
    """The contexts timed (up to the first at which nothing fits: ``reason``)."""
    batch: tuple[int, ...]
    """The batch timed at each context (one replica)."""
    tpot_seconds: tuple[float | None, ...]
    """The realistic estimate (None where a multi-GPU replica's links cannot be timed)."""
    tpot_low_seconds: tuple[float | None, ...] = ()
    """The estimate's band, low end (docs/accuracy.md)."""
    tpot_high_seconds: tuple[float | None, ...] = ()
    """The estimate's band, high end."""
    roofline_tpot_seconds: tuple[float, ...]
    ttft_seconds: tuple[float | None, ...]
    """The realistic prefill of one prompt of the context."""
    steps: tuple[TimedStep, ...]
    reason: str | None
    """Why no sequence fits at the first context left untimed, else None."""


@dataclass(frozen=True, kw_only=True, eq=False)
class PlanResult(Result):
    """`kvcalc plan`: the layouts that serve the users within the targets, best first."""

    model: str
    engine: str
    layouts: tuple[PlannedLayout, ...]
    """The ``top`` best (``plan.layouts`` has every one found)."""
    plan: Plan


@dataclass(frozen=True, kw_only=True, eq=False)
class SweepResult(Result):
    """`kvcalc sweep`: one line per model and GPU set along the contexts (and batches)."""

    lines: tuple[Sweep, ...]
    """Model-major, then GPU set, as given."""
    contexts: tuple[int, ...]
    batches: tuple[int, ...] | None
    """The batches timed; None: the most that fit at each context."""


@dataclass(frozen=True, kw_only=True, eq=False)
class OffloadResult(Result):
    """`kvcalc offload`: what each memory tier beyond HBM holds of the cache at one context."""

    model: str
    context: int
    capacity: Capacity
    """The deployment's HBM capacity at ``context``."""
    tiers: tuple[TierFit, ...]


@dataclass(frozen=True, kw_only=True, eq=False)
class CompareResult(Result):
    """`kvcalc compare`: the techniques' rows of each model at one context."""

    context: int
    models: tuple[ModelComparison, ...]
    """Each model's rows (``rows``), its baseline and the rows skipped with why."""


@dataclass(frozen=True, kw_only=True, eq=False)
class CheckResult(Result):
    """`kvcalc check`: every deployment of a spec file against its requirements."""

    spec: str
    deployments: tuple[CheckedDeployment, ...]
    passed: bool
    """Whether every requirement of every deployment holds."""


@dataclass(frozen=True, kw_only=True, eq=False)
class CalibrateResult(Result):
    """`kvcalc calibrate`: a start-up log beside kvcalc's model of the same start-up."""

    model: str
    comparison: Comparison
    """Every term, logged and as kvcalc has it; the figures below are read from it."""
    calibration: Mapping[str, Any]
    """The calibration file's document (what ``write=`` keeps)."""

    @property
    def engine(self) -> str:
        return self.comparison.engine

    @property
    def release(self) -> str | None:
        """As the log (or ``release=``) states it."""
        return self.comparison.release

    @property
    def rules(self) -> str:
        """The release whose rules kvcalc applied (``vLLM 0.19``)."""
        return self.comparison.rules

    @property
    def agrees(self) -> bool:
        """The logged token count is within what the logged figures give under kvcalc's pool."""
        return self.comparison.agrees

    @property
    def exact(self) -> bool:
        """The calibration's inputs reproduce the logged token count exactly."""
        return self.comparison.exact

    @property
    def kv_cache_tokens(self) -> int:
        """The log's."""
        return self.comparison.kv_cache_tokens

    @property
    def kv_cache_tokens_kvcalc(self) -> int | None:
        """kvcalc's, from the logged memory."""
        return self.comparison.kv_cache_tokens_kvcalc

    @property
    def kv_cache_tokens_estimated(self) -> int | None:
        """kvcalc's, from its own estimate of every term."""
        return self.comparison.kv_cache_tokens_estimated
