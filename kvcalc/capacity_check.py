"""Checking a capacity spec: whether every deployment of a spec file meets its requirements.

Each deployment is built from the same inputs and the same factory as `kvcalc batch` and
`kvcalc decode` (the deployment options, the engine and SGLang's flags), and measured with the
same engines: sequences that fit as the engine sizes the cache, decode's realistic TPOT and
TTFT estimates (or the roofline bound with ``roofline``). Used by :func:`kvcalc.api.check` and
so by `kvcalc check`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.deploy import (
    DeploymentOptions,
    EngineChoice,
    EngineFlags,
    engine_input_names,
    engine_pool,
    option_bounds,
)
from kvcalc.engine.inputs import DEPLOYMENT_INPUTS, KV_FORMAT_INPUTS, all_inputs
from kvcalc.errors import InputError
from kvcalc.options import EvictionOptions, eviction_bounds
from kvcalc.values import load_model

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.requirements import Outcome
    from kvcalc.engine.serving.base import KVPool, ServingEngine
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.registry.check_spec import Spec, SpecDeployment
    from kvcalc.render.capacity_check import CheckedDeployment


def check_all(spec: Spec, roofline: bool = False) -> list[CheckedDeployment]:
    """Every deployment measured; raises SpecError naming every problem of the spec, in the
    order of its lines: the file's own, and each deployment's that cannot be built (unknown
    model or GPU, an option its engine does not use, ...)."""
    from kvcalc.engine.requirements import REQUIREMENTS, readers
    from kvcalc.registry.check_spec import MAX_PROBLEMS, SpecError

    checked: list[CheckedDeployment] = []
    problems = list(spec.problems)
    if not problems:  # with a deployment left out, a default may be read by it alone
        problems += refuse_unread_defaults(spec)
    if not problems and roofline and not any(
        readers("mfu", entry.requirements) for entry in spec.deployments
    ):  # the time requirements (those a step's time decides) are what it holds to the bound
        from kvcalc.errors import fail

        timed = [k for k, r in REQUIREMENTS.items() if "mfu" in r.reads]
        fail(f"--roofline: no deployment of {spec.file} requires a time "
             f"({', '.join(timed[:-1])} or {timed[-1]}); drop --roofline")
    unchecked = None  # the line of the first deployment left unchecked
    for entry in spec.deployments:
        if len(problems) >= MAX_PROBLEMS:
            unchecked = entry.line
            break
        try:
            checked.append(check_deployment(entry, spec.path.parent, roofline))
        except SpecError as exc:
            problems += [(_line_of(p), f"{spec.file}:{p}") for p in exc.problems]
    if problems:
        raise SpecError(_first_problems(spec, problems, unchecked))
    return checked


def _first_problems(
    spec: Spec, problems: list[tuple[int, str]], unchecked: int | None
) -> list[str]:
    """The problems in the order of their lines, the first ``MAX_PROBLEMS`` of them (all
    before the first deployment left unchecked), then, if any is left out, a line saying where
    the rest begins."""
    from kvcalc.registry.check_spec import MAX_PROBLEMS, stopped

    ordered = sorted(problems, key=lambda p: p[0])
    before = [p for p in ordered if unchecked is None or p[0] < unchecked]
    kept = before[:MAX_PROBLEMS]
    if len(kept) == len(ordered) and unchecked is None:
        return [text for _, text in kept]
    rest = before[len(kept)][0] if len(before) > len(kept) else unchecked
    return [text for _, text in kept] + [stopped(spec.file, rest, len(kept))]


def _line_of(problem: str) -> int:
    """The line a deployment's problem starts with (``12: deployments[0] ...``)."""
    return int(problem.split(":", 1)[0])


# ------------------------------------------------------------------ building a deployment

#: The spec keys that are sizes (``80GB``): a bare number is passed on as text, so the size
#: parser reads it as the command line would.
_TEXT_KEYS = (
    *(i.name for i in all_inputs().values() if i.unit in ("bytes", "context")),
    "prompt",
    "gen",
)


_ENGINE_KEYS = engine_input_names()
_EVICTION_KEYS = tuple(f.name for f in fields(EvictionOptions))


@dataclass(frozen=True)
class Built:
    dep: Deployment
    engine: ServingEngine
    flags: EngineFlags
    ctx: int | None = None
    """The context the requirements at a context are measured at: ``ctx``, or SnapKV's
    prompt + gen."""
    warnings: tuple[tuple[int, str], ...] = ()
    """Each warning with the line of the key it is about."""


def check_deployment(entry: SpecDeployment, base: Path, roofline: bool) -> CheckedDeployment:
    """The deployment built and measured; raises SpecError with each of its problems that can
    be found apart (keys no requirement reads, numbers out of range, each option, the model,
    the GPUs: :func:`resolve_parts`), else the first rule between them that stops the build."""
    from kvcalc.engine.deployment import DeploymentError
    from kvcalc.registry.check_spec import SpecError

    bounds = out_of_range(entry)
    problems = [*unused_key_problems(entry), *bounds.values()]
    if roofline and "mfu" in entry.values:
        problems.append(_at(
            entry, "mfu", "mfu: the roofline holds prefill to the dense peak; drop mfu or "
            "--roofline"
        ))
    if roofline and "internode" in entry.values:
        problems.append(_at(
            entry, "internode", "internode: the roofline bound crosses no network; drop "
            "internode or --roofline"
        ))
    if roofline and entry.values.get("judge") == "high":
        problems.append(_at(
            entry, "judge", "judge: the roofline bound has no band; drop judge or --roofline"
        ))
    try:  # a key out of range is not read again (one line each)
        options = entry_options(entry, base)
        parts = resolve_parts(entry, base, options, frozenset(bounds), building=not problems)
    except SpecError as exc:
        problems += exc.problems
    if problems:
        raise SpecError(sorted(problems, key=_line_of))
    built = build(entry, options, parts)
    try:
        return measure(entry, built, roofline)
    except DeploymentError as exc:  # a rule between the deployment and its ctx (the prefix)
        raise _problem(entry, exc.fields[0], exc.worded(str)) from None


def _problem(entry: SpecDeployment, key: str | None, message: str) -> Exception:
    """A SpecError on the line of ``key`` (``line: deployments[i] (name): message``; the
    caller prefixes the file)."""
    from kvcalc.registry.check_spec import SpecError

    return SpecError([_at(entry, key, message)])


def _at(entry: SpecDeployment, key: str | None, message: str) -> str:
    line = entry.line_of(key) if key else entry.line
    return f"{line}: {entry.where}: {message}"


def unused_key_problems(entry: SpecDeployment) -> list[str]:
    """A requirement at a context without ``ctx``, and each key no requirement reads."""
    req = entry.requirements
    from kvcalc.engine.requirements import OPTIONAL_SETTINGS, readers

    problems = []
    needing = readers("ctx", req)
    # SnapKV fixes the context itself (prompt + gen).
    if "ctx" not in entry.values and "snapkv_budget" not in entry.values and needing:
        problems.append(_at(
            entry,
            f"require.{needing[0]}",
            f"ctx: missing; require.{needing[0]} is measured at a context, e.g. ctx: 32k",
        ))
    evicting = any(k in entry.values for k in _EVICTION_KEYS)
    for setting in OPTIONAL_SETTINGS:
        if setting == "ctx" and evicting:
            continue  # the policy is sized at ctx (build refuses it without one)
        if setting in entry.own and not readers(setting, req):
            problems.append(_at(entry, setting, f"{setting}: {_UNREAD[setting]}; remove it"))
    return problems


_UNREAD = {
    "ctx": "no requirement here is measured at a context (min_context is at batch 1)",
    "mfu": "only max_tpot_ms, min_tokens_per_second and max_ttft_ms read it, and none is "
    "required here",
    "judge": "only max_tpot_ms and min_tokens_per_second read it, and neither is required here",
    "internode": "only max_tpot_ms, min_tokens_per_second and max_ttft_ms read it, and none is "
    "required here",
}


def refuse_unread_defaults(spec: Spec) -> list[tuple[int, str]]:
    """A setting of ``defaults:`` that no deployment taking it reads."""
    from kvcalc.engine.requirements import OPTIONAL_SETTINGS, REQUIREMENTS, readers

    problems = []
    for setting in OPTIONAL_SETTINGS:
        takers = [d for d in spec.deployments if setting in d.values and setting not in d.own]
        if takers and not any(readers(setting, d.requirements) for d in takers):
            line = takers[0].line_of(setting)
            using = ", ".join(k for k, r in REQUIREMENTS.items() if setting in r.reads)
            problems.append((line, (
                f"{spec.file}:{line}: defaults.{setting}: no deployment that takes it requires "
                f"{using}, which read it; remove it"
            )))
    return problems


def out_of_range(entry: SpecDeployment) -> dict[str, str]:
    """Key -> its problem, for each number outside the range its command-line option allows
    (``tp`` as ``--tp``)."""
    problems = {}
    for key, value in entry.values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        low, high = option_bounds(key) if key not in _EVICTION_KEYS else (
            eviction_bounds(key)
        )
        if (low is not None and value < low) or (high is not None and value > high):
            span = (
                f"at least {low:g}" if high is None
                else f"at most {high:g}" if low is None
                else f"from {low:g} to {high:g}"
            )
            problems[key] = _at(entry, key, f"{key}: {value:g} is out of range; give {span}")
    return problems


def entry_options(entry: SpecDeployment, base: Path | None = None) -> Options:
    """The command line's options a deployment's keys give; a calibration's measured inputs
    among them (its path relative to the spec file's folder ``base``)."""
    from kvcalc.calibration.calfile import CalibrationError, calibrated

    values: dict[str, Any] = {
        k: str(v) if k in _TEXT_KEYS else v for k, v in entry.values.items()
    }
    if values.get("calibration") is not None and base is not None:
        values["calibration"] = str(base / str(values["calibration"]))
    try:
        values = calibrated(values)
    except CalibrationError as exc:
        raise _problem(entry, "calibration", str(exc).replace("--", "", 1)) from None
    return Options(
        values,
        DeploymentOptions.from_values(values),
        EngineFlags(**{name: values.get(name) for name in _ENGINE_KEYS}),
        EvictionOptions(**{name: values.get(name) for name in _EVICTION_KEYS}),
    )


def build(entry: SpecDeployment, options: Options, parts: Parts) -> Built:
    """The deployment the entry describes, through the command line's factory, from parts each
    checked on its own (:func:`resolve_parts`): the rules between them (this model's layout on
    these GPUs, the memory) are checked here, the first that fails stopping the build."""
    evict = options.evict

    def from_options() -> Built:
        policy, notes = (
            evict.checked(parts.model, [parts.ctx]) if parts.ctx and evict.given() else (None, [])
        )
        from kvcalc.calibration.calfile import check_calibration
        from kvcalc.engine.inputs import deployment_from

        # The library's DeploymentError names its fields: _refusing words them as keys.
        deploy = options.deploy
        check_calibration(parts.model, parts.gpus, parts.engine, deploy.given_values())
        dep = deployment_from(
            parts.model, parts.gpus, deploy.given_values(), engine=parts.engine,
            eviction=policy, kv_format=deploy.kv_format,
        )
        line = entry.line_of(evict.given()[0]) if notes else entry.line
        return Built(dep, parts.engine, options.flags, parts.ctx,
                     tuple((line, f"{entry.name}: {n}") for n in notes))

    built: Built = _refusing(entry, from_options)
    return built


class Options(NamedTuple):
    """A deployment's keys, and the command line's options they give."""

    values: dict[str, Any]
    deploy: DeploymentOptions
    flags: EngineFlags
    evict: EvictionOptions


class Parts(NamedTuple):
    """What a deployment is built from, each part checked on its own."""

    engine: ServingEngine
    gpus: GpuSet
    model: ModelSpec
    ctx: int | None
    """The context measured at (:func:`_context`)."""


#: The sizes of the deployment options, each parsed on its own.
_SIZE_KEYS = tuple(i.name for i in DEPLOYMENT_INPUTS if i.unit == "bytes")
_KV_KEYS = tuple(i.name for i in KV_FORMAT_INPUTS)


def resolve_parts(
    entry: SpecDeployment,
    base: Path,
    options: Options,
    refused: frozenset[str] = frozenset(),
    building: bool = True,
) -> Parts:
    """The engine, GPUs, model and context of a deployment; raises SpecError with the problem
    of every part that has one (the engine's options, each size, the eviction options, the
    GPUs, the model and, once the model is known, its KV format and weight format), each on
    its own line. A part that reads a key in ``refused`` is not checked. ``building``: the
    factory follows if every part is sound (no other problem of the deployment stops it);
    else a tp is also checked against the model's heads here, as the factory would."""
    from kvcalc.registry.check_spec import SpecError

    values, deploy, flags, evict = options
    problems: list[str] = []

    def attempt(run: Callable[[], Any], *keys: str) -> Any:
        if refused.intersection(keys):
            return None
        try:
            return _refusing(entry, run)
        except SpecError as exc:
            problems.extend(exc.problems)
            return None

    from kvcalc.engine.requirements import readers
    from kvcalc.engine.serving import DEFAULT_ENGINE, engine_named

    named = engine_named(values.get("engine", DEFAULT_ENGINE))  # the schema names only engines
    engine = attempt(lambda: EngineChoice(named.name).checked(deploy, flags))
    timed = readers("mfu", entry.requirements)  # the requirements a decode step's time decides
    if engine is not None and timed:
        attempt(lambda: engine.check_timed(flags.named(), f"require.{timed[0]}"))
    for key in _SIZE_KEYS:
        if key in values:
            attempt(_size_parser(values[key], key), key)
    found = len(problems)
    attempt(lambda: evict.check_applies(named))
    ctx = None  # the policy's context, once the engine evicts at all
    if len(problems) == found:
        ctx = attempt(lambda: _evicting_context(entry, evict, values.get("ctx")), *_EVICTION_KEYS)
    model = attempt(lambda: _step(entry, "model", lambda: load_model(
        model_path(values["model"], base), None, None, None)), "model")
    gpus = attempt(lambda: _step(entry, "gpus", deploy.resolve_gpus), "gpus")
    if model is not None:
        if deploy.format_given():
            attempt(lambda: deploy.kv_format(model), *_KV_KEYS)
        weight_dtype, tp = deploy.weight_dtype, deploy.tp
        if weight_dtype is not None:
            attempt(lambda: _weight_format(entry, model, weight_dtype), "weight_dtype")
        if tp is not None and (problems or gpus is None or not building):
            attempt(lambda: _tp_splits(entry, model, tp, gpus, deploy.pp), "tp", "pp")
    if problems:
        raise SpecError(problems)
    return Parts(engine, gpus, model, ctx)


def _size_parser(text: str, key: str) -> Callable[[], int]:
    from kvcalc.engine.inputs import read_value

    return lambda: int(read_value(all_inputs()[key], text))


def _evicting_context(entry: SpecDeployment, evict: EvictionOptions, ctx: int | None) -> int | None:
    context = _context(evict, ctx)
    if context is None and evict.given():
        raise _problem(entry, evict.given()[0], f"{evict.given()[0]}: an eviction policy is "
                       "sized at a context; give ctx")
    return context


def _weight_format(entry: SpecDeployment, model: ModelSpec, name: str) -> None:
    from kvcalc.engine.weight_names import weight_precision

    _step(entry, "weight_dtype", lambda: weight_precision(model, name))


def _tp_splits(
    entry: SpecDeployment, model: ModelSpec, tp: int, gpus: GpuSet | None, pp: int
) -> None:
    """Refuse a tp that does not split the model's heads (known without the GPUs; with them,
    the sizes that do are named, as the build words it)."""
    from kvcalc.engine.deployment import DeploymentError, TpSplitError, rank_model

    try:
        rank_model(model, tp)
    except DeploymentError as exc:
        error = exc
        if gpus is not None and gpus.count % pp == 0:
            error = TpSplitError(exc.reason, model, gpus.count // pp, pp)
        raise _problem(entry, "tp", error.worded(str)) from None


def _context(evict: EvictionOptions, ctx: int | None) -> int | None:
    """``ctx``, or with SnapKV the sequence at its end (prompt + gen), as the command line's
    ``--ctx`` is read with the eviction options."""
    if not evict.given():
        return ctx
    contexts = evict.contexts(None if ctx is None else str(ctx), lambda: [])
    return contexts[0] if contexts else None


def _step(entry: SpecDeployment, key: str, run: Any) -> Any:
    """Run one step of the build; a registry or unit error names ``key`` and its line."""
    from kvcalc.engine.units import UnitError
    from kvcalc.registry.load import RegistryError

    try:
        return run()
    except (RegistryError, UnitError) as exc:
        raise _problem(entry, key, f"{key}: {' '.join(str(exc).split())}") from None


def model_path(model: str, base: Path) -> str:
    """A config path is relative to the spec file's folder; a name is looked up as given."""
    from kvcalc.registry.load import is_dir

    local = base / model
    return str(local) if model.endswith(".json") or is_dir(local) else model


def spec_key(field: str) -> str:
    """A field as a spec file's key names it (the deployment's ``weights_total`` is ``weights``)."""
    return "weights" if field == "weights_total" else field


# ------------------------------------------------------------------ measuring


def measure(entry: SpecDeployment, built: Built, roofline: bool = False) -> CheckedDeployment:
    """Every requirement of ``entry``, each measured by its own function (:data:`MEASURES`)."""
    from kvcalc.render.capacity_check import CheckedDeployment

    m = _refusing(entry, lambda: Measuring.start(entry, built, roofline))
    outcomes = tuple(
        _refusing(entry, lambda key=key, required=required: MEASURES[key](m, required))
        for key, required in entry.requirements.items()
    )
    return CheckedDeployment(
        name=entry.name,
        line=entry.line,
        dep=built.dep,
        engine=built.engine.name,
        context_tokens=m.ctx,
        batch=m.batch,
        reason=m.reason,
        outcomes=outcomes,
        lines=tuple(entry.line_of(f"require.{k}") for k in entry.requirements),
        # What the engine's pool rests on that kvcalc estimated, at the GPUs it is about.
        warnings=(
            *built.warnings,
            *((entry.line_of("gpus"), c) for c in m.cache.pool.caveats()),
        ),
        ctx_line=entry.line_of("ctx"),
        engine_inputs=m.cache.pool.started_with(),
    )


@dataclass(frozen=True)
class Measuring:
    """One deployment being measured: its cache as its engine sizes it, and the batch the
    requirements at ``ctx`` are measured at."""

    entry: SpecDeployment
    built: Built
    cache: EngineCache
    ctx: int | None
    fits: int
    """Sequences of ``ctx`` that fit, all replicas (0 without a ctx)."""
    reason: str | None
    batch: int | None
    """``min_batch`` when required, else what fits; None when nothing fits (or no ctx)."""
    roofline: bool = False
    """Times at the roofline bound instead of the realistic estimate (``--roofline``)."""

    @classmethod
    def start(cls, entry: SpecDeployment, built: Built, roofline: bool = False) -> Measuring:
        cache = EngineCache(built)
        ctx = built.ctx
        if ctx is None:
            return cls(entry, built, cache, None, 0, None, None, roofline)
        per_replica, reason = cache.fits(ctx)
        fits = per_replica * built.dep.replicas
        reason = reason or (None if fits else f"no sequence of {ctx:,} tokens fits")
        # Nothing runs when nothing fits; a min_batch above what fits is timed as asked (a
        # what-if, as `decode --batch`), its own requirement failing.
        batch = entry.requirements.get("min_batch", fits) if fits else None
        return cls(entry, built, cache, ctx, fits, reason, batch, roofline)

    @property
    def per_replica(self) -> int:
        from kvcalc.engine.requirements import batch_per_replica

        assert self.batch is not None
        return batch_per_replica(self.batch, self.built.dep.replicas)

    @property
    def at_batch(self) -> str:
        per = f" ({self.per_replica:,} per replica)" if self.built.dep.replicas > 1 else ""
        return f"at batch {self.batch:,}{per}"

    @property
    def mfu(self) -> float | None:
        value = self.entry.values.get("mfu")
        return None if value is None else float(value)

    def tpot_seconds(self, ctx: int) -> float | None:
        from kvcalc.engine.requirements import measured_tpot_seconds

        return measured_tpot_seconds(
            self.built.dep, self.per_replica, ctx, roofline=self.roofline, mfu=self.mfu,
            profile=self.built.engine.decode_profile, judge=self.judge,
        )

    @property
    def judge(self) -> str:
        """``high``: TPOT targets hold the band's high end; else the estimate."""
        return str(self.entry.values.get("judge") or "estimate")

    def ttft_seconds(self, ctx: int) -> float | None:
        from kvcalc.engine.requirements import measured_ttft_seconds

        return measured_ttft_seconds(
            self.built.dep, ctx, roofline=self.roofline, mfu=self.mfu,
            profile=self.built.engine.decode_profile,
        )

    @property
    def timing(self) -> str:
        """How times are measured, for the notes."""
        if self.roofline:
            return "roofline"
        judged = "estimate's band, high end" if self.judge == "high" else "estimate"
        return judged + (f", mfu {self.mfu:g}" if self.mfu is not None else "")

    @property
    def untimed(self) -> str:
        gpus = self.built.dep.gpus
        return (
            f"{gpus.accelerator.name} publishes no link speed, so the estimate cannot time "
            "tp/pp; check with --roofline"
        )


Measure = Callable[[Measuring, Any], "Outcome"]


def at_batch(key: str) -> Callable[[Callable[[Measuring, Any, int], Outcome]], Measure]:
    """The requirement ``key``, measured at the batch and ``ctx``: it fails, unmeasured, when
    nothing fits (there is no batch to measure)."""

    def wrap(measure: Callable[[Measuring, Any, int], Outcome]) -> Measure:
        def measured(m: Measuring, required: Any) -> Outcome:
            from kvcalc.engine.requirements import evaluate

            if m.batch is None or m.ctx is None:  # unused_key_problems: a ctx is given
                return evaluate(key, required, None, f"nothing to measure: {m.reason}")
            return measure(m, required, m.ctx)

        return measured

    return wrap


def measure_min_batch(m: Measuring, required: int) -> Outcome:
    from kvcalc.engine.requirements import evaluate

    return evaluate("min_batch", required, m.fits, m.reason)


def measure_min_context(m: Measuring, required: int) -> Outcome:
    """The longest sequence one replica holds at batch 1 as the engine sizes its cache, capped
    by the model's own maximum context."""
    from kvcalc.engine.requirements import evaluate

    longest = m.cache.longest_context()
    model_max = m.built.dep.model.max_context
    note = None
    if model_max is not None and (longest is None or longest > model_max):
        longest, note = model_max, "the model's maximum context"
    if longest is None:
        return evaluate("min_context", required, math.inf, "no limit below 2^30 tokens")
    return evaluate("min_context", required, longest, note)


@at_batch("max_kv_fraction")
def measure_kv_fraction(m: Measuring, required: float, ctx: int) -> Outcome:
    from kvcalc.engine.requirements import evaluate

    used = m.cache.fraction(m.per_replica, ctx)
    if math.isinf(used):  # no budget at all, or the engine refuses to start
        return evaluate("max_kv_fraction", required, None, m.reason or "no KV cache")
    return evaluate("max_kv_fraction", required, used, m.at_batch)


@at_batch("max_tpot_ms")
def measure_tpot(m: Measuring, required: float, ctx: int) -> Outcome:
    from kvcalc.engine.requirements import evaluate

    tpot = m.tpot_seconds(ctx)
    if tpot is None:
        return evaluate("max_tpot_ms", required, None, m.untimed)
    return evaluate("max_tpot_ms", required, tpot * 1000, f"{m.at_batch}, {m.timing}")


@at_batch("min_tokens_per_second")
def measure_tokens_per_second(m: Measuring, required: float, ctx: int) -> Outcome:
    from kvcalc.engine.requirements import evaluate, tokens_per_second

    assert m.batch is not None
    tpot = m.tpot_seconds(ctx)
    if tpot is None:
        return evaluate("min_tokens_per_second", required, None, m.untimed)
    rate = tokens_per_second(m.batch, tpot)
    return evaluate("min_tokens_per_second", required, rate, f"{m.at_batch}, {m.timing}")


def measure_ttft(m: Measuring, required: float) -> Outcome:
    """The prefill of one prompt of ``ctx`` tokens on one replica (batch 1: it does not depend
    on what fits)."""
    from kvcalc.engine.requirements import evaluate

    assert m.ctx is not None  # unused_key_problems: max_ttft_ms reads ctx
    ttft = m.ttft_seconds(m.ctx)
    if ttft is None:
        return evaluate("max_ttft_ms", required, None, m.untimed)
    from kvcalc.engine.latency import prompt_tokens_at

    prompt = prompt_tokens_at(m.built.dep, m.ctx)  # SnapKV prefills its prompt, not the context
    note = f"one prompt of {prompt:,} tokens, {m.timing}"
    return evaluate("max_ttft_ms", required, ttft * 1000, note)


#: Requirement -> how it is measured.
MEASURES: dict[str, Measure] = {
    "min_batch": measure_min_batch,
    "min_context": measure_min_context,
    "max_tpot_ms": measure_tpot,
    "max_ttft_ms": measure_ttft,
    "min_tokens_per_second": measure_tokens_per_second,
    "max_kv_fraction": measure_kv_fraction,
}


def _refusing(entry: SpecDeployment, run: Any) -> Any:
    """Run the options' parsing or an engine; an option refused (exit 2 on the command line)
    is a spec problem."""
    try:
        return run()
    except InputError as exc:  # worded as the spec's keys: the inputs its message leads with
        key = spec_key(exc.fields[0]) if exc.fields else None
        raise _problem(entry, key, " ".join(exc.worded(spec_key).split())) from None


class EngineCache:
    """One replica's KV cache as its engine sizes it (its
    :class:`~kvcalc.engine.serving.base.KVPool`), as `kvcalc decode` sizes its default batch
    with the same engine."""

    def __init__(self, built: Built) -> None:
        self.dep = built.dep
        self.pool: KVPool = engine_pool(built.dep, built.engine, built.flags)

    def fits(self, ctx: int) -> tuple[int, str | None]:
        """Sequences of ``ctx`` one replica holds, and why none does."""
        batches, reason = self.pool.max_batches([ctx])
        return batches[0], reason

    def fraction(self, batch_per_replica: int, ctx: int) -> float:
        """The share of the cache ``batch_per_replica`` sequences of ``ctx`` take."""
        return self.pool.fraction(batch_per_replica, ctx)

    def longest_context(self) -> int | None:
        """The longest single sequence (None: no limit below 2^30 tokens)."""
        return self.pool.longest_context()
