"""The Python API: one function per command, ``import kvcalc`` and call ``kvcalc.size(...)``.

Keywords are named and typed as the command line's options, dashes as underscores:
``ctx="128k"`` (or ``131072``, or a list such as ``["8k", "32k"]``), ``gpus="8xH100"``,
``kv_dtype="fp8"``, ``kv_memory="52GiB"`` (or a number of bytes). A model is a registry name,
a Hugging Face repo id, a ``config.json`` path, or a :class:`~kvcalc.engine.spec.ModelSpec`.

Each function returns a frozen result (:mod:`kvcalc.results`) whose ``to_dict()`` is exactly
the command's ``--format json`` document and ``report()`` what every format renders. Bad input
raises a :class:`~kvcalc.errors.KvcalcError` subclass naming the input (``field``) and the fix
(``fix``); the command line prints the same error as its one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from kvcalc.errors import InputError, fail
from kvcalc.values import MAX_BATCH, check_mbu, load_model, option_name, parse_ctx_list

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from kvcalc.cli.deploy import DeploymentOptions
    from kvcalc.engine.offload import Tier
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.options import EvictionOptions, KvFormatOptions
    from kvcalc.results import (
        CheckResult,
        CompareResult,
        OffloadResult,
        SizeResult,
        SweepResult,
    )

class KvFormatInputs(TypedDict, total=False):
    """The KV cache format (``--kv-dtype`` ...): every command that sizes a cache takes it."""

    kv_dtype: str
    kv_group: int
    kv_scale_dtype: str
    kv_zero_point: bool
    kv_quant: str
    kv_bits: int
    kv_residual: int | str


class EvictionInputs(TypedDict, total=False):
    """An eviction or bounding policy (``--window`` ...): `size`, `batch`, `decode`, `compare`."""

    window: int | str
    sinks: int | str
    recent: int | str
    h2o_budget: int | str
    snapkv_budget: int | str
    observation_window: int | str
    prompt: int | str
    gen: int | str
    keep_ratio: float


class SizeInputs(KvFormatInputs, EvictionInputs, total=False):
    """The inputs of :func:`size`."""


class DeploymentInputs(KvFormatInputs, total=False):
    """A deployment on the GPUs (``--tp``, ``--kv-memory`` ...), the KV format included."""

    tp: int
    pp: int
    gpu_util: float
    reserve: float
    overhead: str | int
    gpu_memory: str | int
    weights: str | int
    kv_memory: str | int
    weight_dtype: str
    block_size: int | str
    prefix_shared: int | str
    max_num_batched_tokens: int | str


class CompareInputs(DeploymentInputs, EvictionInputs, total=False):
    """The inputs of :func:`compare`."""


# ------------------------------------------------------------------ reading the keywords

#: Inputs that are sizes: a number is bytes.
_SIZES = frozenset({"overhead", "gpu_memory", "weights", "kv_memory"})
#: Inputs the option groups hold as text (the command line's spelling: ``32k``).
_TEXTS = frozenset({"prompt", "gen"})
#: Inputs that count tokens, held as numbers: text (``4k``) is read as the command line reads it.
_TOKEN_COUNTS = frozenset({
    "kv_residual", "window", "sinks", "recent", "h2o_budget", "snapkv_budget",
    "observation_window", "block_size", "prefix_shared", "max_num_batched_tokens",
})


def _group_names(*groups: type) -> list[str]:
    return [f.name for g in groups for f in fields(g)]


def _refuse_unknown(command: str, inputs: Mapping[str, Any], known: Iterable[str]) -> None:
    """An input this command does not take (a typo, or another command's) is refused, naming
    the inputs it does take."""
    allowed = set(known)
    for name in inputs:
        if name not in allowed:
            raise InputError(
                f"{name}: kvcalc.{command} takes no such input; it takes "
                f"{', '.join(sorted(allowed))}",
                field=name,
                fix=f"drop {name}",
            )


def _tokens_text(value: Any) -> str | None:
    """Token counts as the command line spells them: ``128k``, ``131072``, ``8k,32k``."""
    if value is None:
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, Sequence):
        return ",".join(str(v) for v in value)
    raise InputError(f"--ctx: {value!r} is no token count; give e.g. 128k, 131072 or ['8k', '32k']")


def _token_count(name: str, value: Any) -> Any:
    """A token-count input given as text (``4k``) read as the command line reads it."""
    if not isinstance(value, str):
        return value
    from kvcalc.engine.units import UnitError, parse_tokens

    try:
        return parse_tokens(value, 0, 1 << 40, what="token count")
    except UnitError as exc:
        fail(f"{option_name(name)}: {exc}")


def _value(name: str, value: Any) -> Any:
    """An input as the option groups hold it: sizes and lengths as text, counts as numbers."""
    if name in _SIZES:
        return f"{value}B" if isinstance(value, int) and not isinstance(value, bool) else value
    if name in _TEXTS:
        return str(value)
    return _token_count(name, value) if name in _TOKEN_COUNTS else value


def _given(inputs: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    return {n: _value(n, inputs[n]) for n in names if inputs.get(n) is not None}


def _kv_options(inputs: Mapping[str, Any]) -> KvFormatOptions:
    from kvcalc.options import KvFormatOptions

    names = _group_names(KvFormatOptions)
    values: dict[str, Any] = {**dict.fromkeys(names), "kv_zero_point": False}
    return KvFormatOptions(**{**values, **_given(inputs, names)})


def _evict_options(inputs: Mapping[str, Any]) -> EvictionOptions:
    from kvcalc.options import EvictionOptions

    names = _group_names(EvictionOptions)
    return EvictionOptions(**{**dict.fromkeys(names), **_given(inputs, names)})


def _deploy_options(inputs: Mapping[str, Any], gpus: str | None) -> DeploymentOptions:
    # The deployment inputs are declared with the command line's options for now.
    from kvcalc.cli.deploy import DeploymentOptions

    names = [n for n in _group_names(DeploymentOptions) if n != "gpus"]
    return DeploymentOptions.from_values({**_given(inputs, names), "gpus": gpus})


def given_inputs(*groups: Any) -> dict[str, Any]:
    """The inputs an option group holds that were given, by keyword: what the command line
    passes to this API (a group's defaults are the API's, so leaving them out is the same)."""
    given: dict[str, Any] = {}
    for group in groups:
        for f in fields(group):
            value = getattr(group, f.name)
            chosen = group.given(f.name) if hasattr(group, "refuse") else value is not None
            if chosen and value is not False:
                given[f.name] = value
    given.pop("gpus", None)  # an argument of its own
    return given


def _bounded(name: str, value: int | None, low: int, high: int) -> None:
    """A count the command line's option bounds (``--batch``, ``--kv-heads``) held to them."""
    if value is not None and not low <= value <= high:
        fail(f"{option_name(name)}: {value} is out of range; give from {low:,} to {high:,}")


def _what_ifs(kv_heads: int | None, head_dim: int | None, layers: int | None) -> None:
    _bounded("kv_heads", kv_heads, 1, 4096)
    _bounded("head_dim", head_dim, 1, 65536)
    _bounded("layers", layers, 1, 100_000)


def _models(models: str | ModelSpec | Sequence[str | ModelSpec]) -> list[str | ModelSpec]:
    return [models] if isinstance(models, str) or not isinstance(models, Sequence) else list(
        models
    )


# ------------------------------------------------------------------ size


def size(
    model: str | ModelSpec,
    *,
    ctx: str | int | Sequence[str | int] | None = None,
    batch: int | None = None,
    attention: str | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    layers: int | None = None,
    **inputs: Unpack[SizeInputs],
) -> SizeResult:
    """KV-cache bytes per token, per sequence at ``ctx`` (default: the model's maximum context)
    and for ``batch`` sequences (default 1), keeping what an eviction policy keeps.

    ``attention`` (``"gqa:8"``, ``"mla:512+64"``), ``kv_heads``, ``head_dim`` and ``layers``
    are what-ifs on the model, as ``--as``, ``--kv-heads``, ``--head-dim`` and ``--layers``."""
    from kvcalc.engine.kv import kv_size
    from kvcalc.options import EvictionOptions, KvFormatOptions
    from kvcalc.render.size import size_report
    from kvcalc.render.warnings import max_context_warnings
    from kvcalc.results import SizeResult

    _refuse_unknown("size", inputs, _group_names(KvFormatOptions, EvictionOptions))
    _bounded("batch", batch, 1, MAX_BATCH)
    _what_ifs(kv_heads, head_dim, layers)
    kv, evict = _kv_options(inputs), _evict_options(inputs)
    spec = load_model(model, kv_heads, head_dim, layers, attention)

    def model_maximum() -> list[int]:
        if spec.max_context is None:
            fail("--ctx: this model states no maximum context; give one, e.g. --ctx 8k")
        return [spec.max_context]

    contexts = evict.contexts(_tokens_text(ctx), model_maximum)
    policy, notes = evict.checked(spec, contexts)
    cache = kv.cache_format(spec)
    sizes = tuple(kv_size(spec, c, cache, batch or 1, policy) for c in contexts)
    report = size_report(list(sizes), spec.name)
    report.warnings = [*report.warnings, *max_context_warnings(spec, contexts), *notes]
    return SizeResult(
        _report=report,
        model=spec.id,
        kv_dtype=sizes[0].kv_dtype,
        batch=sizes[0].batch,
        kv_bytes_per_token=sizes[0].bytes_per_token,
        contexts=tuple(contexts),
        kv_bytes_per_sequence=tuple(s.bytes_per_sequence for s in sizes),
        kv_bytes_total=tuple(s.bytes_total for s in sizes),
        sizes=sizes,
    )


# ------------------------------------------------------------------ sweep

SWEEP_CONTEXTS = "4k..128k"


def sweep(
    models: str | ModelSpec | Sequence[str | ModelSpec],
    *,
    gpus: str | Sequence[str],
    ctx: str | int | Sequence[str | int] = SWEEP_CONTEXTS,
    batch: str | int | Sequence[str | int] | None = None,
    attention: str | None = None,
    mbu: float = 1.0,
    **inputs: Unpack[DeploymentInputs],
) -> SweepResult:
    """KV bytes per sequence, max batch and decode TPOT at each context (``"4k..128k"``: both
    ends and the powers of two between; ``"4k..1m:8"``: 8 log-spaced points; or a list), one
    line per model and GPU set (``gpus`` may be several); ``batch`` the batches timed
    (default: the most that fit at each context)."""
    from kvcalc.cli.deploy import DeploymentOptions
    from kvcalc.engine.sweep import sweep as sweep_of
    from kvcalc.engine.units import parse_context
    from kvcalc.render.sweep import sweep_report
    from kvcalc.results import SweepResult

    _refuse_unknown("sweep", inputs, _group_names(DeploymentOptions))
    check_mbu(mbu)
    contexts = sweep_values(_tokens_text(ctx) or "", "--ctx", parse_context)
    batch_text = _tokens_text(batch)
    batches = sweep_values(batch_text, "--batch", parse_batch) if batch_text is not None else None
    names = _models(models)
    gpu_sets = [gpus] if isinstance(gpus, str) else list(gpus)
    refuse_repeats([str(n) for n in names], "MODEL")
    refuse_repeats(gpu_sets, "--gpus")
    deploys = [_deploy_options(inputs, g) for g in gpu_sets]
    if len(names) > 1:
        deploys[0].refuse("weights", because="it is one model's weights; sweep one MODEL with it")
    specs = [load_model(name, None, None, None, attention) for name in names]
    lines = tuple(
        sweep_of(d.build(spec, d.resolve_gpus()), contexts, batches, mbu)
        for spec in specs
        for d in deploys
    )
    return SweepResult(
        _report=sweep_report(list(lines), contexts, batches),
        lines=lines,
        contexts=tuple(contexts),
        batches=None if batches is None else tuple(batches),
    )


def sweep_values(text: str, option: str, parse_point: Any) -> list[int]:
    """A range (``4k..1m``, ``4k..1m:8``) or a comma-separated list of values."""
    from kvcalc.engine.units import UnitError, parse_range

    try:
        if ".." in text:
            return parse_range(text, parse_point)
        values = [parse_point(p) for p in text.split(",") if p.strip()]
    except UnitError as exc:
        fail(f"{option}: {exc}")
    if not values:
        fail(f"{option}: give a range such as 4k..1m or a list such as 8k,32k")
    refuse_repeats([str(v) for v in values], option)
    return values


def parse_batch(text: str) -> int:
    from kvcalc.engine.units import UnitError, parse_count

    value = parse_count(text)
    if value > MAX_BATCH:
        raise UnitError(f"invalid batch {text!r}: above the limit of {MAX_BATCH:,} sequences")
    return value


def refuse_repeats(values: list[str], option: str) -> None:
    from kvcalc.engine.units import shown

    seen = set()
    for value in values:
        if value in seen:
            fail(f"{option}: {shown(value, 100)} is given twice; each gives one line, give it once")
        seen.add(value)


# ------------------------------------------------------------------ offload

OFFLOAD_CONTEXT = "32k"


def offload(
    model: str | ModelSpec,
    *,
    gpus: str,
    ctx: str | int = OFFLOAD_CONTEXT,
    tier: str | Tier | Sequence[str | Tier] | None = None,
    **inputs: Unpack[DeploymentInputs],
) -> OffloadResult:
    """Tokens and sequences each memory tier holds at ``ctx`` (one prefix length), the time to
    load a cached prefix back into HBM against recomputing its prefill, and the prefix length
    from which loading wins. ``tier``: ``"cpu:512GB@64GB/s"`` (or several; default: host memory
    2x the GPUs' over PCIe, one 4 TB NVMe at 7 GB/s per GPU)."""
    from kvcalc.cli.deploy import DeploymentOptions
    from kvcalc.engine.capacity import capacity
    from kvcalc.engine.offload import default_tiers, tier_fit
    from kvcalc.render.offload import offload_report
    from kvcalc.results import OffloadResult

    _refuse_unknown("offload", inputs, _group_names(DeploymentOptions))
    contexts = parse_ctx_list(_tokens_text(ctx) or OFFLOAD_CONTEXT)
    if len(contexts) != 1:
        fail("--ctx: give one prefix length, e.g. --ctx 32k")
    context = contexts[0]
    deploy = _deploy_options(inputs, gpus)
    dep = deploy.build(load_model(model, None, None, None), deploy.resolve_gpus())
    given = [] if tier is None else [tier] if isinstance(tier, str) or not isinstance(
        tier, Sequence) else list(tier)
    tiers = parse_tiers(given) if given else list(default_tiers(dep))
    fits = tuple(tier_fit(dep, t, context) for t in tiers)
    cap = capacity(dep, [context])
    return OffloadResult(
        _report=offload_report(cap, list(fits)),
        model=dep.model.id,
        context=context,
        capacity=cap,
        tiers=fits,
    )


def parse_tiers(given: Sequence[str | Tier]) -> list[Tier]:
    from kvcalc.engine.units import shown

    tiers = [parse_tier(t) if isinstance(t, str) else t for t in given]
    names = [t.name for t in tiers]
    for name in names:
        if names.count(name) > 1:
            fail(f"--tier: {shown(name)} is given twice; name each tier once")
    return tiers


def parse_tier(text: str) -> Tier:
    """``cpu:512GB@64GB/s`` -> a tier of 512 GB read at 64 GB/s."""
    from kvcalc.engine.offload import Tier
    from kvcalc.engine.units import shown
    from kvcalc.values import parse_size

    example = "e.g. cpu:512GB@64GB/s"
    given = f"--tier {shown(text)}"
    name, colon, rest = text.partition(":")
    if not colon or not name.strip():
        fail(f"{given}: name the tier and its size, {example}")
    amount, at, rate = rest.partition("@")
    if not at or not rate.strip():
        fail(f"{given}: give the bandwidth it is read back at, {example}")
    rate = rate.strip()
    if not rate.lower().endswith("/s"):
        fail(f"{given}: give the bandwidth per second, {example}")
    return Tier(name.strip().lower(), parse_size(amount, given), parse_size(rate[:-2], given))


# ------------------------------------------------------------------ compare


def compare(
    models: str | ModelSpec | Sequence[str | ModelSpec],
    *,
    ctx: str | int | None = None,
    gpus: str | None = None,
    batch: int | None = None,
    attention: str | None = None,
    only: str | Sequence[str] | None = None,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    layers: int | None = None,
    **inputs: Unpack[CompareInputs],
) -> CompareResult:
    """KV-cache techniques side by side at one ``ctx`` (default: the smallest maximum context of
    the models): bytes per token and per sequence, the reduction against the baseline, and with
    ``gpus`` the sequences that fit and the decode TPOT. ``only``: the rows to show
    (:data:`kvcalc.techniques.TECHNIQUES`); ``prompt`` and ``gen`` add the no-cache and SnapKV
    rows."""
    from kvcalc.cli.deploy import DeploymentOptions
    from kvcalc.comparison import compared
    from kvcalc.options import EvictionOptions
    from kvcalc.results import CompareResult

    _refuse_unknown("compare", inputs, _group_names(DeploymentOptions, EvictionOptions))
    _bounded("batch", batch, 1, MAX_BATCH)
    _what_ifs(kv_heads, head_dim, layers)
    rows = only if only is None or isinstance(only, str) else ",".join(only)
    context, comparisons, report = compared(
        _models(models),
        _tokens_text(ctx),
        batch,
        attention,
        rows,
        kv_heads,
        head_dim,
        layers,
        _deploy_options(inputs, gpus),
        _evict_options(inputs),
    )
    return CompareResult(_report=report, context=context, models=tuple(comparisons))


# ------------------------------------------------------------------ check


def check(spec: str | Path, *, roofline: bool = False) -> CheckResult:
    """Every deployment of the capacity spec file ``spec`` against its requirements; an invalid
    spec raises :class:`~kvcalc.registry.check_spec.SpecError` (a KvcalcError) holding one
    ``file:line: ...`` line per problem (``problems``). ``roofline``: hold the time
    requirements to the roofline bound, not the realistic estimate."""
    from kvcalc.capacity_check import check_all
    from kvcalc.registry.check_spec import load_spec
    from kvcalc.render.capacity_check import check_spec_report
    from kvcalc.results import CheckResult

    path = Path(spec)
    checked = tuple(check_all(load_spec(path), roofline))
    report = check_spec_report(str(spec), checked)
    return CheckResult(
        _report=report,
        spec=str(spec),
        deployments=checked,
        passed=all(c.ok for c in checked),
    )
