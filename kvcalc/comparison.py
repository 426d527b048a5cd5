"""`kvcalc compare`: one row per KV-cache technique (kvcalc/techniques.py), for one model or
several side by side, each row computed from its option preset by the factories every command
uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from kvcalc.errors import InputError, LayoutError, fail
from kvcalc.options import EvictionOptions, KvFormatOptions
from kvcalc.techniques import TECHNIQUES, Technique, technique_names
from kvcalc.values import (
    head_override_problem,
    load_model,
    one_length,
    option_name,
    parse_attention_variant,
    parse_ctx_list,
)

if TYPE_CHECKING:
    from kvcalc.deploy import DeploymentOptions
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.eviction import Eviction
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.kv import CacheFormat
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.render.compare import CompareRow, ModelComparison
    from kvcalc.render.report import Report

#: Row overrides that change the model (the what-ifs of `kvcalc size`), by option name.
MODEL_OPTIONS = {"kv_heads": "kv_heads", "head_dim": "head_dim", "layers": "num_layers"}
#: The row override that swaps the model's attention (`--as`), applied before the others.
ATTENTION = "attention"
#: Options a comparison without --gpus still applies: the KV cache format and the prefix.
WITHOUT_GPUS = (*(f.name for f in fields(KvFormatOptions)), "prefix_shared")
#: The eviction options that describe the request rather than choose a policy.
REQUEST = ("prompt", "gen")


@dataclass(frozen=True)
class RowOptions:
    """The option groups a row may override, as the commands declare them: each override goes
    to the group that has the field, so another group (eviction, say) is one more field here."""

    deploy: DeploymentOptions
    evict: EvictionOptions

    def overridden(self, overrides: Mapping[str, Any]) -> RowOptions:
        changes: dict[str, dict[str, Any]] = {}
        for key, value in overrides.items():
            group = next(g.name for g in fields(self) if key in _field_names(getattr(self, g.name)))
            changes.setdefault(group, {})[key] = value
        groups = {g: getattr(self, g) for g in changes}
        if "evict" in groups:  # a row's policy replaces the user's
            groups["evict"] = without_policy(groups["evict"])
        return replace(self, **{g: _replaced(groups[g], kw) for g, kw in changes.items()})

    def given(self, name: str) -> bool:
        if name in _field_names(self.deploy):
            return self.deploy.given(name)
        return getattr(self.evict, name) is not None

    @classmethod
    def names(cls) -> set[str]:
        """Every option a group of this class spells."""
        import typing

        from kvcalc.deploy import DeploymentOptions

        hints = typing.get_type_hints(cls, localns={"DeploymentOptions": DeploymentOptions})
        return {n for g in fields(cls) for n in _field_names(hints[g.name])}


def _field_names(group: Any) -> set[str]:
    from kvcalc.deploy import DeploymentOptions

    if group is DeploymentOptions or isinstance(group, DeploymentOptions):
        return set(DeploymentOptions.names)  # one value per declared input, not fields
    return {f.name for f in fields(group)}


def _replaced(group: Any, changes: Mapping[str, Any]) -> Any:
    return group.replace(**changes) if hasattr(group, "values") else replace(group, **changes)


def without_policy(evict: EvictionOptions) -> EvictionOptions:
    """The eviction options with no policy chosen: the request (--prompt, --gen) stays."""
    return replace(evict, **{n: None for n in _field_names(evict) if n not in REQUEST})


def row_policy(evict: EvictionOptions) -> Eviction:
    """The policy of a row's eviction options. Without a SnapKV budget --prompt and --gen only
    describe the request (for the no-cache row), so they choose no policy."""
    if evict.snapkv_budget is None:
        evict = replace(evict, **dict.fromkeys(REQUEST))
    return evict.policy()


class Skip(Exception):
    """A row that does not apply to a model (the reason is shown under its table)."""


def compared(
    models: list[str | ModelSpec],
    ctx: str | None,
    batch: int | None,
    attention: str | None,
    only: str | None,
    kv_heads: int | None,
    head_dim: int | None,
    layers: int | None,
    deploy: DeploymentOptions,
    evict: EvictionOptions,
) -> tuple[int, list[ModelComparison], Report]:
    """`kvcalc compare`: the context, each model's chosen rows at it, and the report."""
    from kvcalc.render.compare import NoCache, compare_report

    deploy.refuse_without_gpus(keep=WITHOUT_GPUS)
    check_batch(deploy, batch)
    if (evict.prompt is None) != (evict.gen is None):
        fail("--prompt and --gen: give both (the request's prompt and answer lengths)")
    no_cache = None
    if evict.prompt is not None and evict.gen is not None:
        no_cache = NoCache(
            one_length(evict.prompt, "--prompt", "1000 or 32k"),
            one_length(evict.gen, "--gen", "1000 or 32k"),
        )
    given = RowOptions(deploy, evict)
    techniques = chosen_techniques(only, given)
    specs = distinct_models(models, kv_heads, head_dim, layers, attention)
    if evict.snapkv_budget is not None:  # SnapKV sizes the sequence at --prompt + --gen
        (context,) = evict.contexts(ctx, lambda: [])
    else:
        context = one_context(ctx, specs)
    gpus = deploy.resolve_gpus() if deploy.gpus is not None else None
    comparisons = [compare_model(spec, techniques, given, context, batch, gpus) for spec in specs]
    return context, comparisons, compare_report(comparisons, context, gpus, batch, no_cache)


def check_batch(deploy: DeploymentOptions, batch: int | None) -> None:
    """Without GPUs the batch only spreads a shared prefix: one needs the other."""
    if deploy.gpus is not None:
        return
    if deploy.given("prefix_shared") and batch is None:
        fail("--prefix-shared: a shared prefix saves memory across sequences; give --batch N "
             "or --gpus")
    if batch is not None and not deploy.given("prefix_shared"):
        fail("--batch: without --gpus it only spreads a --prefix-shared prefix over the "
             "sequences; give --gpus or --prefix-shared")


def chosen_techniques(only: str | None, given: RowOptions) -> list[Technique]:
    """The rows of --only (default: every row whose options are given), in the table's order."""
    from kvcalc.engine.units import shown

    available = [t for t in TECHNIQUES if row_available(t, given)]
    if only is None:
        return available
    names = [n.strip().lower() for n in only.split(",") if n.strip()]
    if not names:
        fail(f"--only: name at least one row: {', '.join(technique_names())}")
    for name in names:
        if name not in technique_names():
            fail(
                f"--only: unknown row {shown(name)!r}; choose from {', '.join(technique_names())}"
            )
    for technique in TECHNIQUES:
        if technique.name in names and technique not in available:
            needs = " and ".join(option_name(n) for n in row_needs(technique))
            fail(f"--only {technique.name}: give {needs} for this row")
    return [t for t in TECHNIQUES if t.name in names]


def row_needs(technique: Technique) -> list[str]:
    """The options a row exists only with."""
    return [*technique.requires, *([technique.option] if technique.option else [])]


def row_available(technique: Technique, given: RowOptions) -> bool:
    return all(given.given(name) for name in row_needs(technique))


def distinct_models(
    names: list[str | ModelSpec],
    kv_heads: int | None,
    head_dim: int | None,
    layers: int | None,
    attention: str | None,
) -> list[ModelSpec]:
    from kvcalc.engine.units import shown

    specs: list[ModelSpec] = []
    for name in names:
        spec = load_model(name, kv_heads, head_dim, layers, attention)
        if any(s.id == spec.id for s in specs):
            same = spec.id if name in (spec.id, spec) else f"{shown(str(name))} ({spec.id})"
            fail(f"MODEL: {same} is given twice; name each model once")
        specs.append(spec)
    return specs


def one_context(ctx: str | None, specs: list[ModelSpec]) -> int:
    if ctx is not None:
        contexts = parse_ctx_list(ctx)
        if len(contexts) != 1:
            fail("--ctx: compare sets techniques side by side at one context, e.g. --ctx 128k")
        return contexts[0]
    maxima = [s.max_context for s in specs if s.max_context is not None]
    if len(maxima) < len(specs):
        fail("--ctx: a model states no maximum context; give one, e.g. --ctx 128k")
    return min(maxima)


def compare_model(
    spec: ModelSpec,
    techniques: list[Technique],
    given: RowOptions,
    context: int,
    batch: int | None,
    gpus: GpuSet | None,
) -> ModelComparison:
    """Every chosen row of one model, with the baseline its reductions are relative to."""
    from kvcalc.render.compare import ModelComparison

    base = replace(given, deploy=given.deploy.replace(prefix_shared=0))
    try:
        baseline = technique_row(TECHNIQUES[0], spec, base, given, context, batch, gpus)
    except Skip as exc:
        fail(str(exc))
    if baseline.deployment is not None and given.deploy.tp is None:
        # Every row is sized on the baseline's layout, so that the rows differ by the
        # technique alone (a row whose heads that tp does not split is left out).
        base = replace(base, deploy=base.deploy.replace(tp=baseline.deployment.tp))
    rows: list[CompareRow] = []
    skipped: list[tuple[str, str]] = []
    for technique in techniques:
        if technique == TECHNIQUES[0]:
            rows.append(baseline)
            continue
        try:
            rows.append(technique_row(technique, spec, base, given, context, batch, gpus))
        except Skip as exc:
            skipped.append((technique.name, str(exc)))
    return ModelComparison(spec, baseline, rows, skipped)


def technique_row(
    technique: Technique,
    spec: ModelSpec,
    base: RowOptions,
    given: RowOptions,
    context: int,
    batch: int | None,
    gpus: GpuSet | None,
) -> CompareRow:
    """One row: the technique's overrides applied to the options, then the cache sized (and,
    on GPUs, the capacity and decode step) as `size`, `batch` and `decode` compute them."""
    from kvcalc.engine.compare import cache_cost
    from kvcalc.render.compare import CompareRow

    overrides = dict(technique.overrides)
    if technique.option is not None:
        overrides[technique.option] = getattr(given.deploy, technique.option)
    what_ifs = {k: v for k, v in overrides.items() if k in MODEL_OPTIONS or k == ATTENTION}
    model = model_with(spec, what_ifs)
    row = base.overridden({k: v for k, v in overrides.items() if k not in what_ifs})
    options = row.deploy
    named = (technique.name, technique.category, technique.note, technique.cached)
    if not technique.cached:
        return CompareRow(*named, None, 0, 0)
    policy = evicting_policy(row.evict, model, context)
    dep = None
    if gpus is None:
        cache = cache_format_of(options, model)
        fit = OnGpus(None, batch or 1, None, None)
    else:
        dep = deployment_of(options, model, gpus, policy)
        cache = dep.cache
        fit = on_gpus(dep, context, batch)
    cost = cache_cost(
        model,
        cache,
        context,
        prefix_shared_tokens=options.prefix_shared,
        batch=fit.batch or 1,
        eviction=policy,
    )
    return CompareRow(
        *named,
        cache.name,
        cost.bytes_per_token,
        cost.bytes_per_sequence,
        fit.sequences,
        fit.batch,
        fit.tpot_seconds,
        fit.reason,
        dep,
    )


def cache_format_of(options: KvFormatOptions, model: ModelSpec) -> CacheFormat:
    """The row's cache format as `kvcalc size` builds it; one the model's layers cannot be
    stored in skips the row."""
    try:
        return options.cache_format(model)
    except LayoutError as exc:
        raise Skip(str(exc)) from None


def model_with(spec: ModelSpec, overrides: dict[str, Any]) -> ModelSpec:
    """``spec`` with a row's what-ifs (``--as`` first, as `size` applies them); a what-if that
    cannot apply or would not change the cache skips the row."""
    if not overrides:
        return spec
    overrides = dict(overrides)
    if ATTENTION in overrides:
        spec = attention_variant(spec, overrides.pop(ATTENTION))
    if "kv_heads" in overrides or "head_dim" in overrides:
        problem = head_override_problem(spec)
        if problem is not None:
            raise Skip(problem)
        heads = max(m.kv_head_count() or 0 for m in spec.mixer_pattern)
        wanted = overrides.get("kv_heads")
        if wanted is not None and wanted >= heads:
            raise Skip(f"{spec.id} has {heads} KV heads per layer already")
    try:
        return spec.with_overrides(**{MODEL_OPTIONS[k]: v for k, v in overrides.items()})
    except ValueError as exc:
        raise Skip(str(exc)) from None


def evicting_policy(evict: EvictionOptions, model: ModelSpec, context: int) -> Eviction:
    """The row's eviction policy; one that cannot be built for the request, or that evicts
    nothing of this model at the context (it would repeat the baseline), skips the row."""
    from kvcalc.engine.eviction import no_eviction_reason
    from kvcalc.engine.serving.base import InputRefusal

    try:
        policy = row_policy(evict)
    except (InputError, InputRefusal) as exc:
        raise Skip(str(exc)) from None
    reason = no_eviction_reason(model, [context], policy)
    if reason is not None:
        raise Skip(reason)
    return policy


def attention_variant(spec: ModelSpec, text: str) -> ModelSpec:
    from kvcalc.engine.variant import VariantError, as_attention

    variant = parse_attention_variant(text)
    try:
        changed = as_attention(spec, variant)
    except VariantError as exc:
        raise Skip(f"--as {variant.label}: {exc}") from None
    if changed.mixer_pattern == spec.mixer_pattern:
        raise Skip(f"{spec.id} has {variant.label} attention already")
    return changed


def deployment_of(
    options: DeploymentOptions, model: ModelSpec, gpus: GpuSet, policy: Eviction
) -> Deployment:
    """The row's deployment, as `batch` and `decode` build it; a layout the row's model cannot
    take (heads tp does not split) skips the row."""
    try:
        return options.build(model, gpus, None, policy)
    except LayoutError as exc:
        raise Skip(str(exc)) from None


class OnGpus(NamedTuple):
    sequences: int | None
    """Sequences of the context that fit on all replicas."""
    batch: int | None
    """The batch timed (--batch, or what one replica fits); None when nothing fits."""
    tpot_seconds: float | None
    reason: str | None
    """Why no sequence fits."""


def on_gpus(dep: Deployment, context: int, batch: int | None) -> OnGpus:
    """The sequences that fit (as `batch`) and the decode step (as `decode`) at --batch or at
    what one replica fits."""
    from kvcalc.engine.capacity import capacity
    from kvcalc.engine.decode import decode_step_for

    cap = capacity(dep, [context])
    fit = cap.contexts[0]
    n = batch or fit.max_batch_per_replica
    if not n:
        return OnGpus(0, None, None, cap.reason)
    tpot = decode_step_for(dep, batch=n, context_tokens=context).tpot_seconds
    return OnGpus(fit.max_batch, n, tpot, cap.reason)


def check_techniques() -> list[str]:
    """Override keys no option spells (for the tests: a typo would otherwise fail at run time)."""
    known = {*MODEL_OPTIONS, ATTENTION} | RowOptions.names()
    return [
        f"{t.name}: {key}"
        for t in TECHNIQUES
        for key in [*t.overrides, *([t.option] if t.option else [])]
        if key not in known
    ]
