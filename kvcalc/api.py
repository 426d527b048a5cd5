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
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple, TypedDict

from kvcalc.command_inputs import BATCH, HEAD_DIM, KV_HEADS, LAYERS, MAX_USERS
from kvcalc.errors import InputError, LayoutError, fail
from kvcalc.values import MAX_BATCH, check_mbu, load_model, option_name, parse_ctx_list

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from kvcalc.deploy import DeploymentOptions, EngineFlags
    from kvcalc.engine.capacity import Capacity
    from kvcalc.engine.inputs import Input
    from kvcalc.engine.offload import Tier
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.options import EvictionOptions, KvFormatOptions
    from kvcalc.results import (
        BatchResult,
        CalibrateResult,
        CheckResult,
        CompareResult,
        DecodeResult,
        OffloadResult,
        PlanResult,
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
    nodes: int
    internode: str
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
    calibration: str | Path


class CompareInputs(DeploymentInputs, EvictionInputs, total=False):
    """The inputs of :func:`compare`."""


class EngineInputs(TypedDict, total=False):
    """The serving engines' own options (``--mem-fraction-static`` ...), each read by its
    engine only (:mod:`kvcalc.engine.serving`)."""

    # vLLM's, named as `vllm serve` names them, and its release.
    vllm_version: str
    max_num_seqs: int
    decode_context_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool
    enable_prefix_caching: bool
    num_speculative_tokens: int
    enforce_eager: bool
    enable_extensible_kv_cache: bool
    sglang_version: str
    mem_fraction_static: float
    page_size: int | str
    context_length: int | str
    chunked_prefill_size: int | str
    cuda_graph_max_bs: int
    max_total_tokens: int | str
    free_before_load: str | float
    free_after_load: str | float
    swa_full_tokens_ratio: float
    max_running_requests: int
    dp_size: int
    ep_size: int
    speculative_algorithm: str
    mamba_full_memory_ratio: float
    max_mamba_cache_size: int
    mamba_ssm_dtype: str
    # TensorRT-LLM's, named as its own options are.
    free_gpu_memory_fraction: float
    tokens_per_block: int | str
    max_tokens: int | str
    free_memory: str | float


class ServingInputs(DeploymentInputs, EngineInputs, EvictionInputs, total=False):
    """The inputs of :func:`batch` and :func:`decode`."""


# ------------------------------------------------------------------ reading the keywords

def _group_names(*groups: type) -> list[str]:
    """The inputs of option groups: a dataclass's fields, or the declared inputs a group holds
    by name (``names``: the deployment's)."""
    return [n for g in groups for n in getattr(g, "names", None) or [f.name for f in fields(g)]]


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


def _tokens_text(value: Any, option: str = "--ctx") -> str | None:
    """Token counts as the command line spells them: ``128k``, ``131072``, ``8k,32k``."""
    if value is None:
        return None
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, Sequence):
        return ",".join(str(v) for v in value)
    raise InputError(
        f"{option}: {value!r} is no token count; give e.g. 128k, 131072 or ['8k', '32k']"
    )


def _given_or(text: str | None, default: str) -> str:
    """``text`` when given (an empty one too, which the parser then refuses), else
    ``default``: an empty ``ctx`` is a mistake, not a request for the default."""
    return default if text is None else text


def _declared(names: Iterable[str]) -> dict[str, Input]:
    """The declared inputs by name, covering ``names``: the deployment's and the eviction's,
    and the serving engines' own only when one of ``names`` is theirs (declaring them loads
    every engine, which `kvcalc size` never needs)."""
    from kvcalc.engine.inputs import DEPLOYMENT_INPUTS, engine_inputs
    from kvcalc.options import EVICTION_INPUTS

    declared = {i.name: i for i in (*DEPLOYMENT_INPUTS, *EVICTION_INPUTS)}
    if not declared.keys() >= set(names):
        declared.update((i.name, i) for i in engine_inputs())
    return declared


def _value(name: str, value: Any, declared: Mapping[str, Input]) -> Any:
    """An input as the option groups hold it, by its declared unit: a size given as a number is
    bytes, a length (``prompt``) is text as typed, a token count given as text (``4k``) is read
    as the command line reads it; a number is held to the declared range."""
    inp = declared.get(name)
    if inp is None:
        return value
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if inp.unit == "bytes" and isinstance(value, int) and number:
        return f"{value}B"
    if inp.unit == "context":
        return str(value)
    if inp.unit == "tokens" and isinstance(value, str):
        from kvcalc.engine.units import UnitError, parse_tokens

        try:
            value = parse_tokens(value, 0, 1 << 40, what="token count")
        except UnitError as exc:
            fail(f"{inp.flag}: {exc}")
        number = True
    if number:
        _in_range(inp, value)
    return value


def _given(inputs: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    given = [n for n in names if inputs.get(n) is not None]
    declared = _declared(given)
    return {n: _value(n, inputs[n], declared) for n in given}


def _in_range(inp: Input, value: float) -> None:
    """A number held to the range its input declares (:mod:`kvcalc.engine.inputs`), as the
    command line's option and a spec file's key are."""
    low, high = inp.bounds()
    if (low is not None and value < low) or (high is not None and value > high):
        span = (
            f"at least {low:g}" if high is None
            else f"at most {high:g}" if low is None
            else f"from {low:g} to {high:g}"
        )
        fail(f"{inp.flag}: {value:g} is out of range; give {span}")


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
    # gpus is the function's own argument (several for sweep), not one of the inputs.
    from kvcalc.deploy import DeploymentOptions

    names = [n for n in _group_names(DeploymentOptions) if n != "gpus"]
    return DeploymentOptions.from_values({**_given(inputs, names), "gpus": gpus})


#: What each command whose figures cross no inter-node network times: --internode, given to
#: one of them, would change nothing (decode and check time the network, as tp or pp spans
#: nodes: kvcalc.engine.communication).
_NO_NETWORK = {
    "batch": "sizes memory and times no step",
    "sweep": "times the roofline step, which crosses no network",
    "compare": "times the roofline step, which crosses no network",
    "offload": "times loads over the host's links and prefill at the GPUs' peak",
}


def _refuse_internode(deploy: DeploymentOptions, command: str) -> None:
    deploy.refuse("internode", because=f"{command} {_NO_NETWORK[command]}; decode and check "
                  "time the inter-node network")


def _engine_flags(inputs: Mapping[str, Any]) -> EngineFlags:
    """The engines' own inputs given, as given: each engine reads its own (its declaration in
    :mod:`kvcalc.engine.inputs` says how)."""
    from kvcalc.deploy import EngineFlags, engine_input_names

    given = {n: inputs[n] for n in engine_input_names() if inputs.get(n) is not None}
    declared = _declared(given)
    for name, value in given.items():  # as given: the engine reads its own (a bare GiB, ...)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            _in_range(declared[name], value)
    return EngineFlags(**given)


def given_inputs(*groups: Any) -> dict[str, Any]:
    """The inputs an option group holds that were given, by keyword: what the command line
    passes to this API (a group's defaults are the API's, so leaving them out is the same)."""
    given: dict[str, Any] = {}
    for group in groups:
        if hasattr(group, "named"):  # the engines' own options, by name
            given.update(group.named())
        elif hasattr(group, "given_values"):  # the deployment's, by name
            given.update(group.given_values())
        else:
            values = {f.name: getattr(group, f.name) for f in fields(group)}
            given.update({k: v for k, v in values.items() if v is not None and v is not False})
    given.pop("gpus", None)  # an argument of its own
    return given


def _bounded(inp: Input, value: int | None) -> None:
    """A count held to the bounds its declaration gives (:mod:`kvcalc.command_inputs`), the
    command line's option's too (``--batch``, ``--kv-heads``)."""
    low, high = inp.bounds()
    if value is not None and not (low or 0) <= value <= (high or value):
        fail(f"{option_name(inp.name)}: {value} is out of range; give from {low:,} to {high:,}")


def _what_ifs(kv_heads: int | None, head_dim: int | None, layers: int | None) -> None:
    _bounded(KV_HEADS, kv_heads)
    _bounded(HEAD_DIM, head_dim)
    _bounded(LAYERS, layers)


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
    _bounded(BATCH, batch)
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


# ------------------------------------------------------------------ batch

BATCH_CONTEXTS = "8k,32k,128k"


def _engine_names(inputs: Mapping[str, Any]) -> list[str]:
    from kvcalc.deploy import DeploymentOptions, engine_input_names
    from kvcalc.options import EvictionOptions

    return [*_group_names(DeploymentOptions, EvictionOptions), *engine_input_names()]


def batch(
    model: str | ModelSpec | None = None,
    *,
    gpus: str,
    ctx: str | int | Sequence[str | int] | None = None,
    attention: str | None = None,
    max_model_len: str | int | Sequence[str | int] | None = None,
    engine: str | None = None,
    **inputs: Unpack[ServingInputs],
) -> BatchResult:
    """Sequences that fit at each context (default 8k, 32k and 128k; SGLang 8k; vLLM the
    model's maximum; SnapKV ``prompt`` + ``gen``) as ``engine`` sizes the cache (default: the
    budget formula): memory budget, KV capacity, max context at batch 1. Without a model, every
    model of the registry (the budget formula)."""
    from kvcalc.deploy import EngineChoice
    from kvcalc.engine.serving import DEFAULT_ENGINE, engines
    from kvcalc.engine.serving.base import BatchRequest
    from kvcalc.render.serving import engine_report
    from kvcalc.results import BatchResult

    _refuse_unknown("batch", inputs, _engine_names(inputs))
    inputs, engine = _calibrated(inputs, engine)
    deploy, flags, evict = _deploy_options(inputs, gpus), _engine_flags(inputs), _evict_options(
        inputs
    )
    _refuse_internode(deploy, "batch")
    chosen = EngineChoice(engine or DEFAULT_ENGINE).checked(deploy, flags)
    evict.check_applies(chosen)
    ctx_text, lengths_text = _tokens_text(ctx), _tokens_text(max_model_len, "--max-model-len")
    if not chosen.takes_lengths and lengths_text is not None:
        takers = " or ".join(e.name for e in engines() if e.takes_lengths)
        fail(f"--max-model-len: applies to --engine {takers} only; the budget formula uses --ctx")
    if deploy.given("kv_memory"):
        deploy.refuse("weights", because="--kv-memory gives the KV budget directly")
    gpu_set = deploy.resolve_gpus()
    if model is None:
        if not chosen.sizes_registry:
            fail(f"--engine {chosen.name} needs a MODEL")
        deploy.refuse("weights", because="it is one model's weights; name the MODEL")
        if evict.given():
            fail(f"{evict.flags()}: an eviction policy is sized for one model; name the MODEL")
        return _whole_registry(
            gpu_set, parse_ctx_list(ctx_text or BATCH_CONTEXTS), deploy, attention, chosen.name
        )
    spec = load_model(model, None, None, None, attention)
    notes: list[str] = []
    policy = None
    contexts = parse_ctx_list(ctx_text) if ctx_text else None
    if chosen.evicts:
        defaults = chosen.default_contexts or ()
        contexts = evict.contexts(ctx_text, lambda: list(defaults))
        policy, notes = evict.checked(spec, contexts)
    dep = deploy.build(spec, gpu_set, chosen, policy)
    lengths = parse_ctx_list(lengths_text, "--max-model-len") if lengths_text else None
    pool = engine_pool_of(dep, chosen, flags)
    answer = pool.batch(BatchRequest(contexts=contexts, lengths=lengths))
    report = engine_report(dep, answer)
    report.warnings = [*report.warnings, *notes]
    answered = _answered(answer)
    per_replica, _ = pool.max_batches(answered)
    per_replica = [*per_replica, *[0] * (len(answered) - len(per_replica))]
    return BatchResult(
        _report=report,
        model=spec.id,
        engine=chosen.name,
        contexts=tuple(answered),
        max_batch=tuple(n * dep.replicas for n in per_replica),
        _registry=dict,
    )


def _calibrated(inputs: Mapping[str, Any], engine: str | None) -> tuple[Any, str | None]:
    """The inputs with a calibration's measured inputs in place of kvcalc's estimates, and its
    engine unless another than the default is given
    (:func:`kvcalc.calibration.calfile.calibrated`)."""
    if inputs.get("calibration") is None:
        return inputs, engine
    from kvcalc.calibration.calfile import calibrated

    merged = calibrated(inputs, engine)
    return merged, merged.pop("engine", engine)


def engine_pool_of(dep: Any, engine: Any, flags: EngineFlags) -> Any:
    from kvcalc.deploy import engine_pool

    return engine_pool(dep, engine, flags)


def _answered(answer: Any) -> list[int]:
    """The contexts (or request lengths) an engine's answer is for."""
    from kvcalc.render.serving import setup_of

    capacity = getattr(answer, "capacity", None)
    if capacity is not None:
        return [c.context_tokens for c in capacity.contexts]
    dep = getattr(answer, "dep", None)
    part = answer.part(setup_of(dep)) if dep is not None else None
    return list(part.lengths) if part is not None else []


def _whole_registry(
    gpu_set: Any, contexts: list[int], deploy: DeploymentOptions, attention: str | None,
    engine: str,
) -> BatchResult:
    """Every model of the registry on ``gpu_set``: a model that cannot take the what-if, the
    KV format or the layout is its row, not an error.

    The rows are plain data, cached under everything they are made from (the model files, the
    GPU set, the inputs given, kvcalc's source: :func:`kvcalc.registry.cache.cached`), so the
    same table asked again reads its rows back instead of sizing every model. Each model's
    :class:`~kvcalc.engine.capacity.Capacity` (``BatchResult.registry``) is worked out when
    asked for."""
    import json

    from kvcalc.registry.cache import cached, files_content
    from kvcalc.registry.load import model_paths
    from kvcalc.render.batch import RegistrySetting, registry_report
    from kvcalc.results import BatchResult

    sized: list[RegistryRows] = []

    def rows_text() -> str:
        sized.append(_registry_rows(gpu_set, contexts, deploy, attention))
        return json.dumps(sized[0].plain(), separators=(",", ":"))

    asked = json.dumps(
        [repr(gpu_set), contexts, deploy.given_values(), attention, engine], default=repr
    )
    data = files_content(model_paths()) + b"\0" + asked.encode()
    plain = _registry_plain(cached(data, rows_text, "registry-rows", str))
    if plain is None:  # an entry of another shape: sized again
        plain = json.loads(rows_text())
    setting = RegistrySetting(deploy.weight_dtype, plain["kv_dtype"], plain["attention"])

    def registry() -> Mapping[str, Capacity | str]:
        rows = sized[0] if sized else _registry_rows(gpu_set, contexts, deploy, attention)
        return MappingProxyType(rows.found)

    return BatchResult(
        _report=registry_report(plain["rows"], gpu_set, contexts, setting, plain["warnings"]),
        model=None,
        engine=engine,
        contexts=tuple(contexts),
        max_batch=(),
        _registry=registry,
    )


class RegistryRows(NamedTuple):  # not a dataclass: cheaper to declare, for every command
    """The whole-registry table's rows, its warnings and what they share, and each model's
    capacity (or why none could be built)."""

    rows: list[dict[str, Any]]
    warnings: list[str]
    kv_dtype: str | None
    attention: str | None
    found: dict[str, Capacity | str]

    def plain(self) -> dict[str, Any]:
        """What the table is rendered from (JSON: the capacities are not)."""
        return {"rows": self.rows, "warnings": self.warnings, "kv_dtype": self.kv_dtype,
                "attention": self.attention}


def _registry_plain(text: str) -> dict[str, Any] | None:
    """The rows :meth:`RegistryRows.plain` wrote, or None for text of any other shape (the
    entry is kvcalc's own, trusted as the cached specs are; this catches a damaged one)."""
    import json

    from kvcalc.render.batch import registry_row

    try:
        plain = json.loads(text)
    except ValueError:
        return None
    keys = set(registry_row(None, "", None))
    if not isinstance(plain, dict) or set(plain) != set(RegistryRows._fields) - {"found"}:
        return None
    rows, warnings = plain["rows"], plain["warnings"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) and set(r) == keys for r in rows):
        return None
    return plain if isinstance(warnings, list) else None


def _registry_rows(
    gpu_set: Any, contexts: list[int], deploy: DeploymentOptions, attention: str | None
) -> RegistryRows:
    from kvcalc.engine.capacity import capacity
    from kvcalc.registry.load import all_model_specs
    from kvcalc.render.batch import registry_row
    from kvcalc.render.layout import layout_note
    from kvcalc.render.warnings import registry_context_warnings
    from kvcalc.values import parse_attention_variant

    variant = parse_attention_variant(attention) if attention else None
    # The what-if module loads only when one is asked for.
    refused: tuple[type[Exception], ...] = (LayoutError,)
    if variant is not None:
        from kvcalc.engine.variant import VariantError, as_attention

        refused = (VariantError, LayoutError)
    rows = []
    found: dict[str, Capacity | str] = {}
    specs = all_model_specs()
    kv_name = None
    for spec in specs:
        try:
            if variant is not None:
                spec = as_attention(spec, variant)
            kv = deploy.kv_format(spec)
            kv_name = kv.name if deploy.format_given() else None
            # Without --tp the split is the default every command takes (choose_tp).
            dep = deploy.build(spec, gpu_set, kv=kv)
        except refused as exc:
            rows.append(registry_row(None, spec.id, str(exc)))
            found[spec.id] = str(exc)
            continue
        cap = capacity(dep, contexts)
        found[spec.id] = cap
        rows.append(registry_row(cap, spec.id, None, layout_note(dep)))
    return RegistryRows(
        rows, registry_context_warnings(specs, contexts), kv_name,
        None if variant is None else variant.label, found,
    )


# ------------------------------------------------------------------ decode

DECODE_CONTEXT = "8k"


def decode(
    model: str | ModelSpec,
    *,
    gpus: str,
    ctx: str | int | Sequence[str | int] | None = None,
    attention: str | None = None,
    batch: int | None = None,
    mbu: float = 1.0,
    mfu: float | None = None,
    engine: str | None = None,
    runtime: str | None = None,
    llama_cpp_build: int | None = None,
    input_len: int | str | None = None,
    output_len: int | str | None = None,
    request_rate: float | str | None = None,
    **inputs: Unpack[ServingInputs],
) -> DecodeResult:
    """Decode-step time at each context (default 8k): weight-read, KV-read and compute time,
    TPOT and tokens/s at ``batch`` sequences (default: the most that fit, as ``engine`` sizes
    the cache), and beside the roofline (at ``mbu``) a realistic TPOT and TTFT estimate (at
    ``mfu``: default the GPU's measured matmul ceiling).

    With ``request_rate`` (requests per second of ``input_len`` + ``output_len`` tokens,
    default 1024 + 128) the step is timed at the batch that rate keeps decoding, with prefill
    chunks mixed in, and the report adds the replica's steady state (``serving``).

    ``llama_cpp_build`` (with ``runtime`` llama.cpp or ollama): the llama.cpp build number
    timed (default: a current build); before 3916 its F16 mat-vec runs below peak on NVIDIA
    HBM GPUs (llama.cpp issue 9817)."""
    from dataclasses import replace

    from kvcalc.deploy import EngineChoice
    from kvcalc.engine.serving import DEFAULT_ENGINE
    from kvcalc.render.decode import decode_report
    from kvcalc.results import DecodeResult
    from kvcalc.values import check_mfu

    _refuse_unknown("decode", inputs, _engine_names(inputs))
    inputs, engine = _calibrated(inputs, engine)
    _bounded(BATCH, batch)
    check_mbu(mbu)
    check_mfu(mfu)
    deploy, flags, evict = _deploy_options(inputs, gpus), _engine_flags(inputs), _evict_options(
        inputs
    )
    chosen = EngineChoice(engine or DEFAULT_ENGINE).checked(deploy, flags)
    chosen.check_timed(flags.named(), "decode")
    profile = decode_profile_of(chosen, runtime, llama_cpp_build)
    evict.check_applies(chosen)
    gpu_set = deploy.resolve_gpus()
    spec = load_model(model, None, None, None, attention)
    contexts = evict.contexts(_tokens_text(ctx), lambda: parse_ctx_list(DECODE_CONTEXT))
    policy, notes = evict.checked(spec, contexts)
    workload = decode_workload(input_len, output_len, request_rate, ctx, batch)
    if workload is not None:
        contexts = [workload.context_tokens]
    dep = deploy.build(spec, gpu_set, chosen, policy)
    check_runtime_layout(profile, dep.tp)
    pool = engine_pool_of(dep, chosen, flags)
    max_batches, why = pool.max_batches(contexts)
    serving = None
    if workload is not None:  # its steps carry what the engine's scheduler runs per step
        workload = replace(workload, batched_tokens=pool.step_tokens())
    if workload is not None and max_batches[0] >= 1:
        serving = serving_of(dep, workload, max_batches[0], mfu, profile)
        if serving.stable:
            batch = serving.decode_batch
            contexts = [workload.decode_context]
            max_batches = pool.max_batches(contexts)[0]
    steps = []
    warnings = [*notes, *pool.caveats()]
    reason = None
    for context, fits in zip(contexts, max_batches, strict=True):
        if fits < 1:
            reason = why or f"no sequence of {context:,} tokens fits"
            break
        n = batch if batch is not None else fits
        if n > fits:
            # A what-if beyond memory is still timed, but never silently.
            warnings.append(
                f"--batch {n:,} exceeds the {fits:,} sequences of "
                f"{context:,} tokens that fit in the KV budget"
            )
        steps.append(timed_step(dep, n, context, mbu, mfu, profile))
    return DecodeResult(
        _report=decode_report(
            dep, steps, mbu, reason, warnings, chosen, profile, (workload, serving),
            pool.started_with(),
        ),
        model=spec.id,
        engine=chosen.name,
        contexts=tuple(s.roofline.context_tokens for s in steps),
        batch=tuple(s.roofline.batch for s in steps),
        tpot_seconds=tuple(None if s.tpot is None else s.tpot.tpot_seconds for s in steps),
        tpot_low_seconds=tuple(
            None if s.tpot is None else s.tpot.tpot_low_seconds for s in steps
        ),
        tpot_high_seconds=tuple(
            None if s.tpot is None else s.tpot.tpot_high_seconds for s in steps
        ),
        roofline_tpot_seconds=tuple(s.roofline.tpot_seconds for s in steps),
        ttft_seconds=tuple(None if s.prefill is None else s.prefill.ttft_seconds for s in steps),
        steps=tuple(steps),
        reason=reason,
    )


def decode_workload(
    input_len: int | str | None,
    output_len: int | str | None,
    request_rate: float | str | None,
    ctx: Any,
    batch: int | None,
) -> Any:
    """decode's serving workload (None: steps at --ctx and --batch), contradictions refused."""
    from kvcalc.engine.workload import DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, Workload
    from kvcalc.planning import parse_rate

    rate = parse_rate(request_rate)
    if rate is None:
        for value, option in ((input_len, "--input-len"), (output_len, "--output-len")):
            if value is not None:
                fail(f"{option}: applies with --request-rate only; add --request-rate, e.g. 10")
        return None
    if ctx is not None:
        fail("--ctx: with --request-rate the context is --input-len + --output-len; drop --ctx")
    if batch is not None:
        fail("--batch: with --request-rate the batch follows from the rate; drop --batch")
    return Workload(
        input_len=_length(input_len, "--input-len", DEFAULT_INPUT_LEN),
        output_len=_length(output_len, "--output-len", DEFAULT_OUTPUT_LEN),
        request_rate=rate,
    )


def serving_of(dep: Any, workload: Any, max_batch: int, mfu: float | None, profile: Any) -> Any:
    """One replica's steady state at its share of the workload's rate."""
    from kvcalc.engine.workload import solve, step_time

    step = step_time(dep, workload, mfu=mfu, profile=profile)
    return solve(workload, workload.request_rate / dep.replicas, step, max_batch)


def decode_profile_of(
    engine: Any, runtime: str | None, llama_cpp_build: int | None = None
) -> Any:
    """The decode profile a step is timed with: the runtime's when ``runtime`` is given (only
    beside the budget formula: a serving engine runs its own), else the engine's; at
    ``llama_cpp_build`` (llama.cpp and ollama only, else refused)."""
    from kvcalc.engine.runtimes import at_build, runtime_named
    from kvcalc.engine.serving import DEFAULT_ENGINE, engine_named

    if runtime is None:
        return at_build(engine.decode_profile, llama_cpp_build)
    profile = runtime_named(runtime)
    if engine is not engine_named(DEFAULT_ENGINE):
        fail(
            f"--runtime: {profile.name} is a single-user runtime, not {engine.label}'s profile; "
            "drop --runtime or --engine"
        )
    return at_build(profile, llama_cpp_build)


def check_runtime_layout(profile: Any, tp: int) -> None:
    from kvcalc.engine.runtimes import check_layout

    check_layout(profile, tp)


def timed_step(
    dep: Any, batch: int, context: int, mbu: float, mfu: float | None, profile: Any = None
) -> Any:
    """The roofline step at ``mbu`` and, where the replica's links can be timed, the realistic
    TPOT and the TTFT of the sequence's prompt (``context`` tokens, or SnapKV's prompt)."""
    from kvcalc.engine.decode import decode_step_for
    from kvcalc.engine.latency import (
        can_time_communication,
        prefill_estimate,
        prompt_tokens_at,
        tpot_estimate,
    )
    from kvcalc.render.decode import TimedStep

    roofline = decode_step_for(dep, batch=batch, context_tokens=context, mbu=mbu)
    if not can_time_communication(dep):
        return TimedStep(roofline, None, None)
    return TimedStep(
        roofline,
        tpot_estimate(dep, batch=batch, context_tokens=context, mfu=mfu, profile=profile),
        prefill_estimate(
            dep, prompt_tokens=prompt_tokens_at(dep, context), mfu=mfu, profile=profile
        ),
    )


# ------------------------------------------------------------------ plan


def plan(
    model: str | ModelSpec,
    *,
    users: int | None = None,
    input_len: int | str | None = None,
    output_len: int | str | None = None,
    request_rate: float | str | None = None,
    max_num_batched_tokens: int | str | None = None,
    disaggregated: bool = False,
    ctx: str | int | None = None,
    max_tpot: str | None = None,
    max_ttft: str | None = None,
    attention: str | None = None,
    gpus: str | Sequence[str] | None = None,
    max_gpus: int | None = None,
    weight_dtype: str | Sequence[str] | None = None,
    kv_dtype: str | Sequence[str] | None = None,
    engine: str | None = None,
    vllm_version: str | None = None,
    max_num_seqs: int | None = None,
    price: str | Mapping[str, float] | None = None,
    roofline: bool = False,
    mfu: float | None = None,
    runtime: str | None = None,
    llama_cpp_build: int | None = None,
    top: int | None = None,
    calibration: str | Path | None = None,
) -> PlanResult:
    """The fewest GPUs that hold ``users`` sequences of ``ctx`` tokens (default 8k) and meet
    ``max_tpot`` / ``max_ttft`` (``"50ms"``, ``"2s"``): every accelerator (or those of
    ``gpus``), count up to ``max_gpus`` (default 8), tp/pp split, replica count and dtype
    (``weight_dtype``, ``kv_dtype``: several to try); ranked by GPU count, then ``price``
    (``{"H100": 2.5}`` or ``"H100=2.5"``) or watts. No layout that meets them raises an
    InputError naming the closest. ``calibration``: a `kvcalc calibrate --write` file; the
    layouts of its GPU, tp and pp take its measured KV memory in place of the estimate.
    ``llama_cpp_build``: with ``runtime`` llama.cpp or ollama, the llama.cpp build timed.
    ``vllm_version``, ``max_num_seqs``: with ``engine`` vllm, the release and its cap on the
    requests a replica runs at once (default: ``vllm serve``'s for the GPU and release).

    A serving workload instead of ``users``: ``request_rate`` requests per second of
    ``input_len`` + ``output_len`` tokens (default 1024 + 128), each layout held to its steady
    state (prefill chunks of up to ``max_num_batched_tokens`` mixed into decode steps, TTFT
    under M/D/1 queueing); ``disaggregated`` sizes prefill and decode pools apart."""
    from kvcalc.engine.plan import PlanRequest, pool_rule
    from kvcalc.engine.plan import plan as search
    from kvcalc.engine.serving import DEFAULT_ENGINE, engine_named
    from kvcalc.planning import (
        DEFAULT_CONTEXT,
        DEFAULT_MAX_GPUS,
        DEFAULT_TOP,
        MAX_MAX_GPUS,
        candidate_accelerators,
        dtype_list,
        duration,
        kv_format_list,
        nothing_meets,
        parse_prices,
        plan_engines,
    )
    from kvcalc.render.plan import plan_report
    from kvcalc.results import PlanResult
    from kvcalc.values import check_mfu

    max_gpus = DEFAULT_MAX_GPUS if max_gpus is None else max_gpus
    top = DEFAULT_TOP if top is None else top
    check_mfu(mfu)
    if roofline and mfu is not None:
        fail("--mfu: the roofline holds prefill to the dense peak; drop --mfu or --roofline")
    names = [e.name for e in plan_engines()]
    cal = None
    if calibration is not None:
        from kvcalc.calibration.calfile import load_calibration

        cal = load_calibration(calibration)
        if engine is None or engine.lower() == DEFAULT_ENGINE:
            engine = cal.engine
    wanted = (engine or DEFAULT_ENGINE).lower()
    if wanted not in names:
        fail(f"--engine: plan sizes the cache with {' or '.join(names)}, not {wanted!r}")
    chosen = engine_named(wanted)
    profile = decode_profile_of(chosen, runtime, llama_cpp_build)
    workload = plan_workload(
        users, input_len, output_len, request_rate, max_num_batched_tokens, ctx, roofline,
        disaggregated,
    )
    if workload is not None and workload.request_rate is not None:
        users = 1  # the concurrency follows from the rate: a bound for the pruning only
    assert users is not None
    given_own = {"vllm_version": vllm_version, "max_num_seqs": max_num_seqs}
    own = {name: value for name, value in given_own.items() if value is not None}
    from kvcalc.engine.serving import check_inputs

    check_inputs(chosen, own)  # a vLLM option with another engine is refused
    options = chosen.engine_options(own)
    if not 1 <= users <= MAX_USERS:
        fail(f"--users: {users} is not between 1 and {MAX_USERS:,}")
    if not 1 <= max_gpus <= MAX_MAX_GPUS:
        fail(f"--max-gpus: {max_gpus} is not between 1 and {MAX_MAX_GPUS}, e.g. 8")
    if top < 1:
        fail(f"--top: {top} must be at least 1")
    spec = load_model(model, None, None, None, attention)
    contexts = parse_ctx_list(_given_or(_tokens_text(ctx), DEFAULT_CONTEXT))
    if workload is not None:
        contexts = [workload.context_tokens]
    if len(contexts) != 1:
        fail("--ctx: plan serves one context length; give one, e.g. 16k")
    if isinstance(price, Mapping):
        price = ",".join(f"{gpu}={amount}" for gpu, amount in price.items())
    prices = parse_prices(price) if price else None
    request = PlanRequest(
        model=spec,
        users=users,
        context_tokens=contexts[0],
        accelerators=candidate_accelerators(_listed(gpus), prices),
        max_gpus=max_gpus,
        weight_dtypes=dtype_list(_listed(weight_dtype), "--weight-dtype", spec),
        kv_dtypes=kv_format_list(_listed(kv_dtype), spec, chosen),
        max_tpot_seconds=duration(max_tpot, "--max-tpot"),
        max_ttft_seconds=duration(max_ttft, "--max-ttft"),
        roofline=roofline,
        mfu=mfu,
        prices=prices,
        profile=profile,
        workload=workload,
        disaggregated=disaggregated,
        # Given, the engines take it (their profile and steps); else each its own per GPU.
        max_num_batched_tokens=None if max_num_batched_tokens is None or workload is None
        else workload.batched_tokens,
    )
    if cal is not None:
        from dataclasses import replace

        request = replace(request, measured=cal.planned(spec, chosen, request.accelerators,
                                                        _listed(kv_dtype)))
    result = search(request, pool_rule(chosen, options))
    if not result.layouts:
        fail(nothing_meets(result))
    return PlanResult(
        _report=plan_report(result, top, chosen, *shown_pools(result, top, chosen, options)),
        model=spec.id,
        engine=chosen.name,
        layouts=result.layouts[:top],
        plan=result,
    )


def shown_pools(
    result: Any, top: int, engine: Any, options: Any
) -> tuple[list[str], list[dict[str, Any] | None]]:
    """What the pools of the layouts shown must say beside their max batch
    (:meth:`~kvcalc.engine.serving.base.KVPool.caveats`: an estimated CUDA total, a unified
    part's upper bound), each once, named by the GPUs it holds for, as decode says them beside
    the batch it sizes; and each layout's engine inputs
    (:meth:`~kvcalc.engine.serving.base.KVPool.started_with`)."""
    gpus_by_caveat: dict[str, list[str]] = {}
    started: list[dict[str, Any] | None] = []
    for layout in result.layouts[:top]:
        dep = layout.deployment
        pool = engine.pool(dep, options)
        started.append(pool.started_with())
        for caveat in pool.caveats():
            named = gpus_by_caveat.setdefault(caveat, [])
            if dep.gpus.accelerator.id not in named:
                named.append(dep.gpus.accelerator.id)
    caveats = [f"{', '.join(gpus)}: {caveat}" for caveat, gpus in gpus_by_caveat.items()]
    return caveats, started


def plan_workload(
    users: int | None,
    input_len: int | str | None,
    output_len: int | str | None,
    request_rate: float | str | None,
    budget: int | str | None,
    ctx: Any,
    roofline: bool,
    disaggregated: bool,
) -> Any:
    """The workload plan's answer serves (None: ``users`` sequences of ``--ctx``), every
    contradiction among its inputs refused."""
    from kvcalc.engine.workload import (
        DEFAULT_BATCHED_TOKENS,
        DEFAULT_INPUT_LEN,
        DEFAULT_OUTPUT_LEN,
        Workload,
    )
    from kvcalc.planning import parse_rate

    rate = parse_rate(request_rate)
    if users is None and rate is None:
        fail("--users: give the sequences served at once, or --request-rate, e.g. --users 32")
    if users is not None and rate is not None:
        fail(
            "--users: the concurrency follows from --request-rate (Little's law); "
            "drop --users or --request-rate"
        )
    lengths = input_len is not None or output_len is not None
    if lengths and ctx is not None:
        fail("--ctx: the context is --input-len + --output-len; drop --ctx")
    if rate is None:
        for given, option in (
            (budget, "--max-num-batched-tokens"),
            (disaggregated or None, "--disaggregated"),
        ):
            if given is not None:
                fail(f"{option}: applies with --request-rate only; add --request-rate, e.g. 10")
    if rate is not None and roofline:
        fail(
            "--roofline: a serving steady state is timed with the realistic estimate; "
            "drop --roofline or --request-rate"
        )
    if rate is None and not lengths:
        return None
    return Workload(
        input_len=_length(input_len, "--input-len", DEFAULT_INPUT_LEN),
        output_len=_length(output_len, "--output-len", DEFAULT_OUTPUT_LEN),
        request_rate=rate,
        batched_tokens=_length(budget, "--max-num-batched-tokens", DEFAULT_BATCHED_TOKENS),
    )


def _length(value: int | str | None, option: str, default: int) -> int:
    """A token count given as the command line gives it (``4k`` or 4096)."""
    from kvcalc.engine.units import UnitError, parse_tokens

    if value is None:
        return default
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            fail(f"{option}: {value} must be at least 1 token")
        return value
    try:
        return parse_tokens(str(value), 1, 1 << 30, what="token count")
    except UnitError as exc:
        fail(f"{option}: {exc}")


def _listed(value: str | Sequence[str] | None) -> str | None:
    """A list input as the command line spells it: ``"H100,H200"``."""
    return value if value is None or isinstance(value, str) else ",".join(value)


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
    plot: str | Path | None = None,
    **inputs: Unpack[DeploymentInputs],
) -> SweepResult:
    """KV bytes per sequence, max batch and decode TPOT at each context (``"4k..128k"``: both
    ends and the powers of two between; ``"4k..1m:8"``: 8 log-spaced points; or a list), one
    line per model and GPU set (``gpus`` may be several); ``batch`` the batches timed
    (default: the most that fit at each context). ``plot``: also draw the charts into this
    .png or .svg file (needs matplotlib), checked before any work."""
    from kvcalc.deploy import DeploymentOptions
    from kvcalc.engine.sweep import sweep as sweep_of
    from kvcalc.engine.units import parse_context
    from kvcalc.render.sweep import sweep_report, swept_axis
    from kvcalc.results import SweepResult

    _refuse_unknown("sweep", inputs, _group_names(DeploymentOptions))
    check_mbu(mbu)
    contexts = sweep_values(_tokens_text(ctx) or "", "--ctx", parse_context, contexts=True)
    batch_text = _tokens_text(batch, "--batch")
    batches = sweep_values(batch_text, "--batch", parse_batch) if batch_text is not None else None
    target = None
    if plot is not None:
        from kvcalc.render.plot import plot_target

        target = plot_target(str(plot), swept_axis(contexts, batches) is not None)
    names = _models(models)
    gpu_sets = [gpus] if isinstance(gpus, str) else list(gpus)
    refuse_repeats([str(n) for n in names], "MODEL")
    refuse_repeats(gpu_sets, "--gpus")
    deploys = [_deploy_options(inputs, g) for g in gpu_sets]
    _refuse_internode(deploys[0], "sweep")  # the same options for every GPU set
    if len(names) > 1:
        deploys[0].refuse("weights", because="it is one model's weights; sweep one MODEL with it")
    specs = [load_model(name, None, None, None, attention) for name in names]
    lines = tuple(
        sweep_of(d.build(spec, d.resolve_gpus()), contexts, batches, mbu)
        for spec in specs
        for d in deploys
    )
    report = sweep_report(list(lines), contexts, batches)
    if target is not None:
        from kvcalc.render.plot import draw

        draw(report.charts, target, mbu)
    return SweepResult(
        _report=report,
        lines=lines,
        contexts=tuple(contexts),
        batches=None if batches is None else tuple(batches),
    )


def sweep_values(
    text: str, option: str, parse_point: Any, *, contexts: bool = False
) -> list[int]:
    """A range (``4k..1m``, ``4k..1m:8``) or a comma-separated list of values; of
    ``contexts``, not one count grouped by thousands (``8,192``; batches 8,256 are a list)."""
    from kvcalc.engine.units import UnitError, check_context_list, parse_range

    try:
        if ".." in text:
            return parse_range(text, parse_point)
        if contexts:
            check_context_list(text)
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
    from kvcalc.deploy import DeploymentOptions
    from kvcalc.engine.capacity import capacity
    from kvcalc.engine.offload import default_tiers, tier_fit
    from kvcalc.render.offload import offload_report
    from kvcalc.results import OffloadResult

    _refuse_unknown("offload", inputs, _group_names(DeploymentOptions))
    contexts = parse_ctx_list(_given_or(_tokens_text(ctx), OFFLOAD_CONTEXT))
    if len(contexts) != 1:
        fail("--ctx: give one prefix length, e.g. --ctx 32k")
    context = contexts[0]
    deploy = _deploy_options(inputs, gpus)
    _refuse_internode(deploy, "offload")
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
    from kvcalc.engine.offload import HBM
    from kvcalc.engine.units import shown

    tiers = [parse_tier(t) if isinstance(t, str) else t for t in given]
    names = [t.name for t in tiers]
    if HBM in names:  # its row would be taken for the GPUs' own
        fail(f"--tier: {HBM} is the GPUs' own memory, the first row; name the tier otherwise, "
             "e.g. cpu or ssd")
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
    from kvcalc.comparison import compared
    from kvcalc.deploy import DeploymentOptions
    from kvcalc.options import EvictionOptions
    from kvcalc.results import CompareResult

    _refuse_unknown("compare", inputs, _group_names(DeploymentOptions, EvictionOptions))
    _bounded(BATCH, batch)
    _what_ifs(kv_heads, head_dim, layers)
    rows = only if only is None or isinstance(only, str) else ",".join(only)
    deploy = _deploy_options(inputs, gpus)
    if gpus is not None:  # without GPUs every deployment option is refused as such
        _refuse_internode(deploy, "compare")
    context, comparisons, report = compared(
        _models(models),
        _tokens_text(ctx),
        batch,
        attention,
        rows,
        kv_heads,
        head_dim,
        layers,
        deploy,
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


# ------------------------------------------------------------------ calibrate


def calibrate(
    log: str | Path,
    *,
    model: str | ModelSpec | None = None,
    gpus: str | None = None,
    release: str | None = None,
    gpu_util: float | None = None,
    weight_dtype: str | None = None,
    write: str | Path | None = None,
) -> CalibrateResult:
    """A vLLM or SGLang start-up ``log`` (a path; ``"-"`` reads standard input) beside kvcalc's
    model of the same start-up: each term the log states (weights, activation peak, non-torch
    memory, CUDA graphs, KV memory, the token count) as logged, as kvcalc estimates it, and the
    difference. ``model``, ``gpus``, ``release``, ``gpu_util`` (vLLM's memory share) and
    ``weight_dtype`` (a quantized checkpoint's) give what the log does not state (vLLM logs
    name no GPU). ``exit_code`` is 0 when kvcalc's pool
    gives the logged token count from the logged memory within the log's rounding, else 1; a
    file that is no start-up log raises :class:`~kvcalc.calibration.compare.NotAStartupLog`.
    ``write``: keep the measured terms as a calibration file for ``batch``/``decode``/``check``
    (``calibration=``)."""
    from kvcalc.calibration.calfile import calibration_document, write_calibration
    from kvcalc.calibration.compare import NotAStartupLog, compare, read_startup_log
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.registry.gpus import parse_gpu_set
    from kvcalc.render.calibrate import calibrate_report
    from kvcalc.results import CalibrateResult

    name = str(log)
    try:
        startup = read_startup_log(_log_text(name))
    except NotAStartupLog as exc:
        raise NotAStartupLog(f"{name}: no start-up log: {exc}", field="log") from None
    named = model if model is not None else startup.model
    if named is None:
        fail("--model: the log names no model; give it, e.g. --model llama3.1-8b")
    try:
        spec = load_model(named, None, None, None)
    except InputError as exc:
        if model is not None:
            raise
        raise InputError(f"--model: the log's model {str(named)!r} is not one kvcalc knows "
                         f"({exc}); give --model", field="model") from None
    if gpus is None:
        fail("--gpus: the log does not name its GPUs; give them, e.g. --gpus H100")
    gpu_set = parse_gpu_set(gpus)
    replica = (startup.tp or 1) * (startup.pp or 1)
    if gpu_set.count not in (1, replica, replica * (startup.dp or 1)):
        fail(f"--gpus: {gpus} are not the log's {replica} GPUs per replica "
             f"(tp {startup.tp or 1} x pp {startup.pp or 1}); give e.g. --gpus "
             f"{replica}x{gpu_set.accelerator.id}")
    try:
        comparison = compare(startup, spec, GpuSet(gpu_set.accelerator, replica), release,
                             gpu_util, weight_dtype)
    except NotAStartupLog as exc:
        raise NotAStartupLog(f"{name}: no start-up log: {exc}", field="log") from None
    document = calibration_document(comparison, "-" if name == "-" else Path(name).name)
    if write is not None:
        write_calibration(document, write)
    return CalibrateResult(
        _report=calibrate_report(comparison, document, None if write is None else str(write)),
        model=spec.id,
        comparison=comparison,
        calibration=MappingProxyType(document),
    )


def _log_text(name: str) -> str:
    """The log's text (``-``: standard input), at most MAX_LOG_BYTES, undecodable bytes
    replaced; a binary file is no log."""
    import sys

    from kvcalc.calibration.compare import NotAStartupLog
    from kvcalc.calibration.lines import MAX_LOG_BYTES

    try:
        if name == "-":
            data = sys.stdin.buffer.read(MAX_LOG_BYTES + 1)
        else:
            with open(name, "rb") as handle:
                data = handle.read(MAX_LOG_BYTES + 1)
    except FileNotFoundError:
        fail(f"{name}: file not found; give a start-up log file (or - for standard input)")
    except IsADirectoryError:  # worded as `kvcalc check` words a folder given as its spec
        fail(f"{name}: not a regular file (a folder); give a start-up log file")
    except (OSError, ValueError) as exc:
        fail(f"{name}: cannot read it ({getattr(exc, 'strerror', None) or exc})")
    if len(data) > MAX_LOG_BYTES:
        fail(f"{name}: more than {MAX_LOG_BYTES >> 20} MiB; give the start-up's part of the log")
    if b"\0" in data:
        raise NotAStartupLog("a binary file")
    return data.decode("utf-8", errors="replace")
