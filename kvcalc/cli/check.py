"""`kvcalc check SPEC`: whether every deployment of a spec file meets its requirements.

Each deployment is built from the same options and the same factory as `kvcalc batch` and
`kvcalc decode` (:class:`~kvcalc.cli.deploy.DeploymentOptions`, ``--engine`` and SGLang's
flags), and measured with the same engines: sequences that fit as ``--engine`` sizes the cache
(:func:`~kvcalc.cli.decode.max_batches_by_engine`), the decode step for TPOT. Exit 0 when every
requirement holds, 1 when any fails, 2 when the spec is invalid.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvcalc.cli.app import (
    EXIT_USAGE,
    CheckFormat,
    InputError,
    command_typer,
    emit_report,
    load_model,
)
from kvcalc.cli.deploy import (
    DeploymentOptions,
    EngineChoice,
    SGLangFlags,
    option_bounds,
    option_name,
)

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.requirements import Outcome
    from kvcalc.engine.sglang import SGLangPool, SGLangPoolTooSmall
    from kvcalc.engine.vllm import KVCacheTooSmall, VLLMKVCache
    from kvcalc.registry.check_spec import Spec, SpecDeployment
    from kvcalc.render.capacity_check import CheckedDeployment
    from kvcalc.render.report import Case

command_app = command_typer()

CheckFormatOption = typer.Option(
    CheckFormat.table,
    "--format",
    "-f",
    help="table for people; json, yaml or csv for machines; markdown for docs; junit (JUnit "
    "XML) or github (Actions annotations) for CI",
)


SpecArgument = typer.Argument(..., help="capacity spec file (YAML), e.g. capacity.yaml")


@command_app.command()
def check(
    spec: Path = SpecArgument,
    fmt: CheckFormat = CheckFormatOption,
) -> None:
    """Check every deployment of SPEC against its requirements (min_batch, min_context,
    max_tpot_ms, min_tokens_per_second, max_kv_fraction): exit 0 when all hold, 1 when any
    fails, 2 when the spec is invalid (one line per problem, with its file and line)."""
    from kvcalc.registry.check_spec import SpecError, load_spec
    from kvcalc.render.capacity_check import check_spec_report

    try:
        loaded = load_spec(spec)
        checked = check_all(loaded)
    except SpecError as exc:
        refuse(exc.problems, spec, fmt)
    emit_report(check_spec_report(str(spec), checked), fmt)


def refuse(problems: list[str], spec: Path, fmt: CheckFormat) -> None:
    """Exit 2 with one line per problem on stderr. The CI formats also print them as they print
    failures (an annotation on the line, a failed JUnit test), so a pipeline that only reads
    stdout still shows why the spec is bad."""
    if fmt in (CheckFormat.github, CheckFormat.junit):
        from kvcalc.render.formats import render
        from kvcalc.render.report import Report

        cases = [_spec_problem_case(problem, spec) for problem in problems]
        sys.stdout.write(render(Report(payload={}, cases=cases), fmt.value, 0))
    for problem in problems:
        sys.stderr.write(f"Error: {problem}\n")
    raise typer.Exit(EXIT_USAGE)


def _spec_problem_case(problem: str, spec: Path) -> Case:
    from kvcalc.render.report import Case

    located = _LINE.match(problem)
    line = int(located.group(1)) if located else None
    message = problem[located.end():] if located else problem
    name = f"line {line}" if line else "file"
    return Case("invalid spec", name, False, message, str(spec), line, kind="invalid spec")


_LINE = re.compile(r"^.*?:(\d+): ")


def check_all(spec: Spec) -> list[CheckedDeployment]:
    """Every deployment measured; raises SpecError naming every deployment that cannot be
    built (unknown model or GPU, an option its engine does not use, ...)."""
    from kvcalc.registry.check_spec import SpecError

    checked: list[CheckedDeployment] = []
    problems = refuse_unread_defaults(spec)
    for entry in spec.deployments:
        try:
            checked.append(check_deployment(entry, spec.path.parent))
        except SpecError as exc:
            problems += [f"{spec.file}:{p}" for p in exc.problems]
    if problems:
        raise SpecError(problems)
    return checked


# ------------------------------------------------------------------ building a deployment

#: The spec keys that are sizes (``80GB``): a bare number is passed on as text, so the size
#: parser reads it as the command line would.
_TEXT_KEYS = (
    "overhead",
    "gpu_memory",
    "weights",
    "kv_memory",
    "free_before_load",
    "free_after_load",
    "context_length",
)


_SGLANG_KEYS = tuple(f.name for f in fields(SGLangFlags))


@dataclass(frozen=True)
class Built:
    dep: Deployment
    engine: str
    sglang: SGLangFlags


def check_deployment(entry: SpecDeployment, base: Path) -> CheckedDeployment:
    from kvcalc.engine.deployment import DeploymentError

    refuse_unused_keys(entry)
    built = build(entry, base)
    try:
        return measure(entry, built)
    except DeploymentError as exc:  # a rule between the deployment and its ctx (the prefix)
        raise _problem(entry, exc.fields[0], exc.worded(str)) from None


def _problem(entry: SpecDeployment, key: str | None, message: str) -> Exception:
    """A SpecError on the line of ``key`` (``line: deployments[i] (name): message``; the
    caller prefixes the file)."""
    from kvcalc.registry.check_spec import SpecError

    line = entry.line_of(key) if key else entry.line
    return SpecError([f"{line}: {entry.where}: {message}"])


def refuse_unused_keys(entry: SpecDeployment) -> None:
    """Refuse requirements this version cannot measure and keys no requirement would read."""
    req = entry.requirements
    if "max_ttft_ms" in req:
        raise _problem(
            entry,
            "require.max_ttft_ms",
            "require.max_ttft_ms: needs a prefill (time-to-first-token) estimate, which this "
            "kvcalc does not have yet; remove it (max_tpot_ms checks decode)",
        )
    from kvcalc.engine.requirements import OPTIONAL_SETTINGS, readers

    needing = readers("ctx", req)
    if "ctx" not in entry.values and needing:
        raise _problem(
            entry,
            f"require.{needing[0]}",
            f"ctx: missing; require.{needing[0]} is measured at a context, e.g. ctx: 32k",
        )
    for setting in OPTIONAL_SETTINGS:
        if setting in entry.own and not readers(setting, req):
            raise _problem(entry, setting, f"{setting}: {_UNREAD[setting]}; remove it")


_UNREAD = {
    "ctx": "no requirement here is measured at a context (min_context is at batch 1)",
    "mbu": "only max_tpot_ms and min_tokens_per_second read it, and none is required here",
}


def refuse_unread_defaults(spec: Spec) -> list[str]:
    """A setting of ``defaults:`` that no deployment taking it reads."""
    from kvcalc.engine.requirements import OPTIONAL_SETTINGS, REQUIREMENTS, readers

    problems = []
    for setting in OPTIONAL_SETTINGS:
        takers = [d for d in spec.deployments if setting in d.values and setting not in d.own]
        if takers and not any(readers(setting, d.requirements) for d in takers):
            line = takers[0].line_of(setting)
            using = ", ".join(k for k, r in REQUIREMENTS.items() if setting in r.reads)
            problems.append(
                f"{spec.file}:{line}: defaults.{setting}: no deployment that takes it requires "
                f"{using}, which read it; remove it"
            )
    return problems


def check_bounds(entry: SpecDeployment) -> None:
    """Each number within the range its command-line option allows (``tp`` as ``--tp``)."""
    for key, value in entry.values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        low, high = option_bounds(key)
        if (low is not None and value < low) or (high is not None and value > high):
            span = (
                f"at least {low:g}" if high is None
                else f"at most {high:g}" if low is None
                else f"from {low:g} to {high:g}"
            )
            raise _problem(entry, key, f"{key}: {value:g} is out of range; give {span}")


def build(entry: SpecDeployment, base: Path) -> Built:
    """The deployment the entry describes, through the command line's options and factory."""
    check_bounds(entry)
    values: dict[str, Any] = {
        k: str(v) if k in _TEXT_KEYS else v for k, v in entry.values.items()
    }
    deploy = DeploymentOptions.from_values(values)
    flags = SGLangFlags(**{name: values.get(name) for name in _SGLANG_KEYS})
    try:
        engine = EngineChoice(values.get("engine", "simple")).checked(deploy, flags)
        gpus = _step(entry, "gpus", deploy.resolve_gpus)
        model = _step(entry, "model", lambda: load_model(model_path(values["model"], base),
                                                         None, None, None))
        return Built(deploy.build(model, gpus, engine), engine, flags)
    except InputError as exc:
        key, message = spec_wording(str(exc))
        raise _problem(entry, key, message) from None


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
    local = base / model
    return str(local) if model.endswith(".json") or local.is_dir() else model


_OPTION = re.compile(r"--([a-z][a-z-]*)")


def spec_wording(message: str) -> tuple[str | None, str]:
    """An option-worded error (``--kv-memory: ...``) in the spec's words (``kv_memory: ...``),
    and the first key it names."""
    from kvcalc.registry.check_spec import DeploymentEntry

    keys = {option_name(k): k for k in DeploymentEntry.model_fields}
    named: list[str] = []

    def word(match: re.Match[str]) -> str:
        key = keys.get(match.group(0))
        if key is None:
            return match.group(0)
        named.append(key)
        return key

    text = _OPTION.sub(word, " ".join(message.split()))
    return (named[0] if named else None), text


# ------------------------------------------------------------------ measuring


def measure(entry: SpecDeployment, built: Built) -> CheckedDeployment:
    from kvcalc.cli.decode import max_batches_by_engine
    from kvcalc.engine.requirements import evaluate
    from kvcalc.render.capacity_check import CheckedDeployment

    dep, req = built.dep, entry.requirements
    ctx: int | None = entry.values.get("ctx")
    fits, reason, batch = 0, None, None
    if ctx is not None:
        per_replica, reason = _refusing(entry, lambda: max_batches_by_engine(
            dep, built.engine, built.sglang, [ctx]))
        fits = per_replica[0] * dep.replicas
        reason = reason or (None if fits else f"no sequence of {ctx:,} tokens fits")
        batch = req.get("min_batch", fits) or None
    outcomes: list[Outcome] = []
    for key, required in req.items():
        if key == "min_batch":
            outcomes.append(evaluate(key, required, fits, reason))
        elif key == "min_context":
            outcomes.append(_min_context(entry, built, required))
        elif batch is None:
            outcomes.append(evaluate(key, required, None, f"nothing to measure: {reason}"))
        elif key == "max_kv_fraction":
            outcomes.append(_kv_fraction(entry, built, required, batch))
        else:
            outcomes.append(_timed(key, required, built, batch, entry))
    return CheckedDeployment(
        name=entry.name,
        line=entry.line,
        dep=dep,
        engine=built.engine,
        context_tokens=ctx,
        batch=batch,
        reason=reason,
        outcomes=tuple(outcomes),
        lines=tuple(entry.line_of(f"require.{k}") for k in req),
    )


def _refusing(entry: SpecDeployment, run: Any) -> Any:
    """Run an engine; an option it refuses (exit 2 on the command line) is a spec problem."""
    try:
        return run()
    except InputError as exc:
        key, message = spec_wording(str(exc))
        raise _problem(entry, key, message) from None


def _batch_note(batch: int, replicas: int) -> str:
    per = f" ({-(-batch // replicas):,} per replica)" if replicas > 1 else ""
    return f"at batch {batch:,}{per}"


def _kv_fraction(entry: SpecDeployment, built: Built, required: float, batch: int) -> Outcome:
    from kvcalc.engine.requirements import batch_per_replica, evaluate

    per_replica = batch_per_replica(batch, built.dep.replicas)
    ctx: int = entry.values["ctx"]  # refuse_unused_keys: it reads ctx
    used = _refusing(entry, lambda: ENGINE_CACHES[built.engine](built).fraction(per_replica, ctx))
    return evaluate("max_kv_fraction", required, used, _batch_note(batch, built.dep.replicas))


def _timed(
    key: str, required: float, built: Built, batch: int, entry: SpecDeployment
) -> Outcome:
    """TPOT (ms) or output tokens per second of ``batch`` sequences at ``ctx``."""
    from kvcalc.engine.requirements import (
        batch_per_replica,
        evaluate,
        measured_tpot_seconds,
        tokens_per_second,
    )

    ctx: int = entry.values["ctx"]  # refuse_unused_keys: a timed requirement needs it
    mbu = float(entry.values.get("mbu", 1.0))
    tpot = measured_tpot_seconds(
        built.dep, batch_per_replica(batch, built.dep.replicas), ctx, mbu
    )
    measured = tpot * 1000 if key == "max_tpot_ms" else tokens_per_second(batch, tpot)
    note = _batch_note(batch, built.dep.replicas) + (f", mbu {mbu:g}" if mbu != 1 else "")
    return evaluate(key, required, measured, note)


def _min_context(entry: SpecDeployment, built: Built, required: int) -> Outcome:
    """The longest sequence one replica holds at batch 1 as the engine sizes its cache, capped
    by the model's own maximum context."""
    from kvcalc.engine.requirements import evaluate

    longest = _refusing(entry, lambda: ENGINE_CACHES[built.engine](built).longest_context())
    model_max = built.dep.model.max_context
    note = None
    if model_max is not None and (longest is None or longest > model_max):
        longest, note = model_max, "the model's maximum context"
    measured = math.inf if longest is None else longest
    return evaluate("min_context", required, measured, note)


class EngineCache:
    """One replica's KV cache as an engine sizes it: the budget formula (``simple``); each
    engine is a subclass with its own two formulas."""

    def __init__(self, built: Built) -> None:
        self.dep = built.dep
        self.sglang = built.sglang

    def fraction(self, batch_per_replica: int, ctx: int) -> float:
        """The share of the cache ``batch_per_replica`` sequences of ``ctx`` take: whole
        blocks (and the shared prefix) over the fullest stage's budget."""
        from kvcalc.engine.capacity import kv_budget_fraction, layout_of

        return kv_budget_fraction(layout_of(self.dep), batch_per_replica, ctx)

    def longest_context(self) -> int | None:
        """The longest single sequence (None: no limit below 2^30 tokens)."""
        from kvcalc.engine.capacity import layout_of, max_context_at_batch_1

        return max_context_at_batch_1(layout_of(self.dep))


class VLLMCache(EngineCache):
    """vLLM 0.19 started with ``--max-model-len`` = the context, as `batch --engine vllm`."""

    def _start(self, max_model_len: int) -> VLLMKVCache | KVCacheTooSmall:
        from kvcalc.engine.vllm import VLLMConfigError, vllm_kv_cache_for

        try:
            return vllm_kv_cache_for(self.dep, max_model_len)
        except VLLMConfigError as exc:
            raise InputError(str(exc)) from None

    def fraction(self, batch_per_replica: int, ctx: int) -> float:
        """Blocks per request x requests over the pool's blocks (vLLM refusing to start: inf)."""
        from kvcalc.engine.vllm import VLLMKVCache

        result = self._start(ctx)
        if not isinstance(result, VLLMKVCache):
            return math.inf
        return result.pool_fraction(batch_per_replica)

    def longest_context(self) -> int | None:
        """The model's maximum (or 2^30) when vLLM starts with it, else the max_model_len vLLM
        estimates when it refuses."""
        from kvcalc.engine.units import MAX_CONTEXT_TOKENS
        from kvcalc.engine.vllm import VLLMKVCache

        length = self.dep.model.max_context or MAX_CONTEXT_TOKENS
        result = self._start(length)
        return length if isinstance(result, VLLMKVCache) else result.estimated_max_model_len


class SGLangCache(EngineCache):
    """SGLang's token pool(s), with the spec's SGLang keys, as `batch --engine sglang`."""

    def _pool(self) -> SGLangPool | SGLangPoolTooSmall:
        from kvcalc.engine.sglang import SGLangConfigError, sglang_pool

        try:
            return sglang_pool(self.dep, self.sglang.options())
        except SGLangConfigError as exc:
            raise InputError(str(exc)) from None

    def fraction(self, batch_per_replica: int, ctx: int) -> float:
        from kvcalc.engine.sglang import SGLangPool, sliding_window

        pool = self._pool()
        if not isinstance(pool, SGLangPool):
            return math.inf
        return pool.pool_fraction(batch_per_replica, ctx, sliding_window(self.dep.model))

    def longest_context(self) -> int | None:
        """The longest request the scheduler admits (``max_req_len``)."""
        from kvcalc.engine.sglang import SGLangPool

        pool = self._pool()
        return pool.max_req_len if isinstance(pool, SGLangPool) else 0


ENGINE_CACHES: dict[str, type[EngineCache]] = {
    "simple": EngineCache,
    "vllm": VLLMCache,
    "sglang": SGLangCache,
}
