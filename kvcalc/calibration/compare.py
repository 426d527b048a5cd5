"""A start-up log beside kvcalc's model of the same start-up: each budget term as logged, as
kvcalc estimates it, and the difference; the token count kvcalc finds from the logged KV memory
(within the log's rounding: the pool model's check) and from its own estimates; and the inputs
that make kvcalc reproduce the logged token count exactly (what ``--write`` keeps).

kvcalc's terms for a vLLM start-up come from one function, :func:`kvcalc_vllm_terms`: the rules
of the log's release (:mod:`kvcalc.engine.vllm_releases`; the newest when the log states none,
the nearest kvcalc has when it is outside them), named in the output (``rules``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from kvcalc.calibration.lines import Logged
from kvcalc.calibration.sglang_log import SGLangLog
from kvcalc.calibration.vllm_log import VLLMLog
from kvcalc.errors import InputError

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.vllm import VLLMInputs, VLLMKVCache
    from kvcalc.engine.vllm_parallel import MambaCacheMode



@dataclass(frozen=True)
class Term:
    """One term of the start-up, as logged and as kvcalc has it (None: not stated / not
    modelled). ``unit``: bytes (per GPU), tokens, requests or a fraction."""

    name: str
    label: str
    unit: str
    logged: int | float | None
    kvcalc: int | float | None
    stage: int | None = None
    note: str = ""

    @property
    def difference(self) -> int | float | None:
        if self.logged is None or self.kvcalc is None:
            return None
        return self.kvcalc - self.logged


@dataclass(frozen=True)
class Comparison:
    """A start-up log and kvcalc's model of it."""

    engine: str
    release: str | None
    """As the log (or ``release``) states it; None: not known."""
    rules: str
    """The release whose rules kvcalc applied."""
    model: ModelSpec
    gpus: GpuSet
    tp: int
    pp: int
    dp: int
    terms: tuple[Term, ...]
    kv_cache_tokens: int
    """The log's token count."""
    kv_cache_tokens_kvcalc: int | None
    """kvcalc's, from the logged memory figures (None: kvcalc's model refuses the start-up)."""
    kv_cache_tokens_range: tuple[int, int] | None
    """kvcalc's from the logged figures moved to either end of their rounding."""
    kv_cache_tokens_estimated: int | None
    """kvcalc's from its own estimates of every term."""
    inputs: Mapping[str, Any]
    """The deployment and engine inputs that reproduce the start-up (a calibration's)."""
    exact: bool
    """Whether :attr:`inputs` reproduce the logged token count exactly."""
    workers: tuple[Mapping[str, Any], ...]
    """Each worker's logged figures (bytes), as it printed them."""
    notes: tuple[str, ...] = field(default=())

    @property
    def agrees(self) -> bool:
        """The logged token count lies within what the logged figures, rounded as printed,
        give under kvcalc's pool model."""
        span = self.kv_cache_tokens_range
        return span is not None and span[0] <= self.kv_cache_tokens <= span[1]


def _bytes(figure: Logged | None) -> int | None:
    return None if figure is None else figure.bytes


def smallest_reproducing(
    tokens_at: Callable[[int], int | None], low: int, high: int, target: int
) -> int | None:
    """The fewest bytes in [low, high] at which ``tokens_at`` gives ``target`` tokens (tokens
    never fall as memory grows), or None when no value in the interval does."""
    def at(value: int) -> int:
        found = tokens_at(value)
        return -1 if found is None else found

    if low > high or at(high) < target:
        return None
    while low < high:
        mid = (low + high) // 2
        if at(mid) >= target:
            high = mid
        else:
            low = mid + 1
    return low if at(low) == target else None


# ------------------------------------------------------------------ vLLM


@dataclass(frozen=True)
class VLLMTerms:
    """kvcalc's budget of a vLLM start-up, per pipeline stage, in bytes per GPU."""

    rules: str
    """The release whose rules applied, X.Y."""
    inputs: VLLMInputs
    """The release's rules and the batch inputs they start the deployment with."""
    requested: int
    weights: tuple[int, ...]
    activation_peak: tuple[int, ...]
    non_torch: tuple[int, ...]
    cuda_graph_estimate: tuple[int, ...]
    """The CUDA-graph estimate as the log prints it ("Estimated CUDA graph memory"; 0 before
    0.17), subtracted from the budget or not as the release does."""
    cuda_graph_pool: int | None
    """The graphs' captured pool ("X GiB for CUDAGraph memory"), where kvcalc models it: 0.34,
    which measures it with the rest after capture; None before (captured after the budget is
    set, it plays no part in it)."""
    kv_memory: tuple[int, ...]
    free_after_warmup: tuple[int | None, ...] = ()
    """0.34: the free memory measured after warmup, per stage (None before 0.34)."""
    transient_kept: tuple[int | None, ...] = ()
    """0.34: what the cache leaves free for transient activations, per stage."""


def vllm_rules_for(release: str | None) -> tuple[str, str | None]:
    """The release whose rules kvcalc applies to a log of ``release`` (X.Y or X.Y.Z), and a
    note when it is not the log's own: the newest when the log states none, the nearest kvcalc
    has rules for when the release is outside them (or is no release kvcalc can read)."""
    from kvcalc.engine.vllm_releases import (
        NEWEST_VERSION,
        OLDEST_VERSION,
        VLLMVersionError,
        parse_version,
        vllm_release,
    )

    if release is None:
        return NEWEST_VERSION, (f"the log states no vLLM release: kvcalc applies vLLM "
                                f"{NEWEST_VERSION}'s rules (give --release)")
    try:
        vllm_release(release)
    except VLLMVersionError:
        try:
            older = parse_version(release)[:2] < parse_version(OLDEST_VERSION)[:2]
        except VLLMVersionError:
            older = False
        nearest = OLDEST_VERSION if older else NEWEST_VERSION
        return nearest, (f"vLLM {release}: kvcalc has rules for {OLDEST_VERSION} to "
                         f"{NEWEST_VERSION} and applies vLLM {nearest}'s, which may differ")
    return release, None


def kvcalc_vllm_terms(
    dep: Deployment,
    release: str | None,
    enforce_eager: bool = False,
    extensible: bool | None = None,
) -> VLLMTerms:
    """kvcalc's terms for this vLLM start-up under the rules of vLLM ``release``
    (:func:`vllm_rules_for`): the profiler's budget per stage as
    :func:`kvcalc.engine.vllm.vllm_memory_terms` computes it (the release's utilization
    default, GPU-dependent batch defaults, sampler profile and CUDA-graph estimate)."""
    from kvcalc.engine.vllm import vllm_inputs, vllm_memory_terms
    from kvcalc.engine.vllm_releases import parse_version

    version, _ = vllm_rules_for(release)
    inputs = vllm_inputs(dep, version, enforce_eager, extensible)
    terms = vllm_memory_terms(dep, inputs)
    major, minor, _patch = parse_version(version)
    return VLLMTerms(
        rules=f"{major}.{minor}",
        inputs=inputs,
        requested=terms[0].requested_bytes,
        weights=tuple(t.weights_bytes for t in terms),
        activation_peak=tuple(t.activation_peak_bytes for t in terms),
        non_torch=tuple(t.non_torch_bytes for t in terms),
        cuda_graph_estimate=tuple(t.cudagraph_estimate_bytes for t in terms),
        cuda_graph_pool=max((t.after_warmup.graph_pool_bytes for t in terms if t.after_warmup),
                            default=None),
        kv_memory=tuple(t.available_bytes for t in terms),
        free_after_warmup=tuple(t.free_after_warmup_bytes for t in terms),
        transient_kept=tuple(t.transient_kept_bytes for t in terms),
    )


def _vllm_kv_dtype(text: str | None) -> str | None:
    """``--kv-cache-dtype`` as kvcalc names it (auto: the model's dtype)."""
    if text is None or text == "auto":
        return None
    return "fp8" if text.startswith("fp8") else text


def _vllm_tokens(
    dep: Deployment,
    inputs: VLLMInputs,
    mode: MambaCacheMode,
    memory: int | tuple[int, ...],
    length: int,
    **paging: Any,
) -> int | None:
    """The token line of the release's pool (its batch inputs, window reserve and token line)
    from ``memory`` per stage, the states in Mamba cache mode ``mode``; ``paging``: the DCP size
    and the MTP draft's tokens and layers, as the log states them."""
    result = _vllm_start(dep, inputs, mode, memory, length, **paging)
    return None if result is None else result.kv_cache_size_tokens


def _vllm_concurrency(
    dep: Deployment,
    inputs: VLLMInputs,
    mode: MambaCacheMode,
    memory: int,
    length: int,
    **paging: Any,
) -> int:
    """The "Maximum concurrency" line's figure as printed (``:.2f``), in hundredths (-1: vLLM
    does not start), for :func:`smallest_reproducing`."""
    result = _vllm_start(dep, inputs, mode, memory, length, **paging)
    return -1 if result is None else round(float(f"{result.max_concurrency:.2f}") * 100)


def _vllm_start(
    dep: Deployment,
    inputs: VLLMInputs,
    mode: MambaCacheMode,
    memory: int | tuple[int, ...],
    length: int,
    **paging: Any,
) -> VLLMKVCache | None:
    from kvcalc.engine.vllm import VLLMKVCache, deployment_kv_cache

    result = deployment_kv_cache(dep, memory, length, inputs, mamba_cache_mode=mode, **paging)
    return result if isinstance(result, VLLMKVCache) else None


#: Speculative methods with no draft model, so no KV or weights of their own (the methods whose
#: ``SpeculativeConfig.__repr__`` names no model, config/speculative.py of 0.19.0).
MODELLESS_DRAFTS = frozenset({"ngram", "suffix", "extract_hidden_states"})


def _mtp_draft(
    log: VLLMLog, spec: ModelSpec, dep: Deployment, notes: list[str]
) -> tuple[tuple[Any, ...], int, int]:
    """The log's speculative draft as kvcalc sizes it: (the MTP layers whose KV joins the pool,
    their weights on one GPU of the last stage, the speculative tokens). A draft with no model
    (n-gram, suffix) holds nothing; another method's (EAGLE, a draft model) is not modelled:
    sized without it, and ``notes`` says so."""
    from kvcalc.engine.vllm_parallel import check_speculative, mtp_mixers, mtp_weight_bytes

    k, method = log.num_speculative_tokens or 0, log.speculative_method or ""
    if not k or method in MODELLESS_DRAFTS:
        return (), 0, 0
    if not method.endswith("mtp"):
        notes.append(f"vLLM's {method} speculative draft is not modelled: the pool is sized "
                     "without its KV and weights")
        return (), 0, 0
    check_speculative(spec, k, dep.pp)
    weights = mtp_weight_bytes(spec, dep.weights, dep.tp, dep.moe_ranks, dep.expert_parallel)
    return mtp_mixers(spec), weights, k


def _stage_memory(log: VLLMLog, pp: int) -> tuple[list[int], list[int], list[int]]:
    """The KV memory of each stage from the log (value, low, high): the logged "Available KV
    cache memory" for one stage; with several, each stage's worker's own figure ("Current kv
    cache memory in use", every worker prints it), else its requested memory less its printed
    terms (one worker prints the "Available" line: vllm-kv-algorithm.md step 4)."""
    kv = log.kv_memory
    assert kv is not None
    values, lows, highs = [kv.bytes] * pp, [kv.low] * pp, [kv.high] * pp
    if pp == 1:
        return values, lows, highs
    requested = log.requested_memory
    for stage in range(pp):
        own = next((w.kv_memory for w in log.workers
                    if w.stage == stage and w.kv_memory is not None), None)
        if own is not None:
            values[stage], lows[stage], highs[stage] = own.bytes, own.low, own.high
            continue
        if requested is None:
            continue
        worker = next((w for w in log.workers if w.stage == stage
                       and w.activation_peak is not None
                       and (w.consumed is not None
                            or (w.weights is not None and w.non_torch is not None))), None)
        if worker is None:
            continue
        # 0.27+ measures weights + non-torch as one consumed block (vllm-releases.md 4).
        held = [worker.consumed] if worker.consumed is not None else [worker.weights,
                                                                       worker.non_torch]
        parts = [requested, *held, worker.activation_peak]
        terms = [p for p in parts[1:] if p is not None]
        values[stage] = requested.bytes - sum(t.bytes for t in terms)
        slack = sum(p.half_step_bytes for p in parts if p is not None)
        lows[stage], highs[stage] = values[stage] - slack, values[stage] + slack
    return values, lows, highs


def _worker_payload(worker: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {"worker": worker.label, **{f"{n}_bytes": _bytes(getattr(worker, n)) for n in names}}


_VLLM_WORKER_TERMS = ("weights", "activation_peak", "non_torch", "consumed", "cuda_graph",
                      "cuda_graph_estimate", "kv_memory", "free_after_warmup", "transient_kept")


#: What the release does with the profiler's CUDA-graph estimate: 0.17-0.19 print it but, like
#: 0.10-0.16 (which make none), capture the graphs after the KV cache.
_GRAPH_NOTES = {
    "subtracted": "subtracted from the budget",
    "printed": "printed, not subtracted",
    "after_kv": "none made",
}


def _graph_note(rule: str, log_subtracts: bool, after_warmup: bool) -> str:
    """What kvcalc's rules for the release do with the CUDA-graph estimate (what its column
    holds); a log that subtracts it under a release whose default does not had the profiler's
    estimate switched on (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, 0.18-0.19)."""
    if after_warmup:
        return "none made: the pool is measured"
    note = _GRAPH_NOTES[rule]
    if log_subtracts and rule != "subtracted":
        note += "; the log subtracts it (the estimate switched on), kvcalc's rules do not"
    return note


def _pool_note(after_warmup: bool) -> str:
    """What the graphs' captured pool ("X GiB for CUDAGraph memory", every release) is to the
    budget: measured with the rest under 0.34's extensible cache, else captured after it."""
    if after_warmup:
        return "measured after capture"
    return "captured after: outside the budget"


def compare_vllm(log: VLLMLog, spec: ModelSpec, gpus: GpuSet, release: str | None,
                 gpu_util: float | None = None, weight_dtype: str | None = None) -> Comparison:
    from kvcalc.engine.inputs import deployment_from
    from kvcalc.engine.serving.vllm import ENGINE
    from kvcalc.engine.units import GiB
    from kvcalc.engine.vllm_parallel import has_states, mamba_cache_mode

    if log.kv_memory is None:
        raise NotAStartupLog("it states no \"Available KV cache memory\" (truncated before the "
                             "profiler's lines?)")
    # vLLM's default max_model_len is the model's maximum context.
    length = log.max_model_len or log.concurrency_tokens or spec.max_context
    if length is None:
        raise NotAStartupLog("it states no max_model_len (no engine config, no concurrency "
                             "line) and the model no maximum context")
    tp, pp, dp = log.tp or 1, log.pp or 1, log.dp or 1
    given: dict[str, Any] = {"tp": tp, "pp": pp}
    if weight_dtype is not None:
        given["weight_dtype"] = weight_dtype
    stated = log.gpu_memory_utilization
    if stated is not None and gpu_util is not None and Fraction(str(gpu_util)) != stated:
        raise InputError(f"--gpu-util: the log states {float(stated):g}; drop --gpu-util",
                         field="gpu_util")
    if stated is not None or gpu_util is not None:
        given["gpu_util"] = float(stated) if stated is not None else gpu_util
    if log.max_num_batched_tokens is not None:
        given["max_num_batched_tokens"] = log.max_num_batched_tokens
    if log.block_size is not None:
        given["block_size"] = log.block_size
    kv_dtype = _vllm_kv_dtype(log.kv_cache_dtype)
    if kv_dtype is not None:
        given["kv_dtype"] = kv_dtype
    dep = deployment_from(spec, gpus, given, engine=ENGINE)
    if log.max_num_seqs is not None:
        dep = replace(dep, max_num_seqs=log.max_num_seqs)
    notes = []
    if log.enable_expert_parallel:
        # Whole experts a rank (weights_per_gpu); vLLM ignores the flag where nothing splits.
        if spec.moe is not None and dep.moe_ranks > 1:
            dep = replace(dep, expert_parallel=True)
        else:
            notes.append("the log's --enable-expert-parallel splits nothing here (no routed "
                         "experts, or one rank): ignored")
    terms = kvcalc_vllm_terms(
        dep, release, bool(log.enforce_eager), log.enable_extensible_kv_cache
    )
    used = terms.inputs
    # Prefix caching as the log gives it, else the release's default (align mode for hybrids
    # from 0.28); Mamba1/2 "all" mode (before 0.28) is not modelled: sized as without it, and
    # said so.
    mode = mamba_cache_mode(spec, log.enable_prefix_caching,
                            hybrid_default_on=used.release.mamba_align)
    unmodelled = mode == "all"
    if unmodelled:
        notes.append(f"vLLM caches {spec.id}'s Mamba states in 'all' mode (prefix caching on), "
                     "which kvcalc does not model: the pool is sized as without it")
        mode = "none"
    values, lows, highs = _stage_memory(log, pp)

    dcp = log.dcp or 1
    drafts, draft_weights, spec_tokens = _mtp_draft(log, spec, dep, notes)
    paging = {"dcp": dcp, "num_speculative_tokens": spec_tokens, "draft_mixers": drafts}

    def tokens(memory: int | tuple[int, ...]) -> int | None:
        return _vllm_tokens(dep, used, mode, memory, length, **paging)

    logged_tokens = tokens(tuple(values))
    span_low, span_high = tokens(tuple(lows)), tokens(tuple(highs))
    target = log.kv_cache_tokens
    assert target is not None
    exact = smallest_reproducing(tokens, min(lows), max(highs), target)
    if exact is not None and log.max_concurrency is not None and pp == 1:
        # A hybrid's token line counts whole blocks of all its groups, so several block counts
        # print it; the concurrency line (blocks / blocks per request) tells them apart.
        pinned = smallest_reproducing(
            lambda memory: _vllm_concurrency(dep, used, mode, memory, length, **paging),
            exact, max(highs), round(log.max_concurrency * 100),
        )
        if pinned is not None and tokens(pinned) == target:
            exact = pinned
    # The drafter loads with the model ("Model loading took" holds it) on the last stage, and
    # its weights come out of that stage's budget (vllm_kv_cache_for).
    last = pp - 1
    weights = tuple(w + draft_weights * (s == last) for s, w in enumerate(terms.weights))
    budgets = tuple(m - draft_weights * (s == last) for s, m in enumerate(terms.kv_memory))
    estimated = tokens(budgets) if min(budgets) > 0 else None
    rows: list[Term] = [
        Term("gpu_memory", "GPU memory (CUDA total)", "bytes", _bytes(log.total_memory),
             dep.cuda_total_bytes_per_gpu),
        Term("requested", "requested (total x utilization)", "bytes",
             _bytes(log.requested_memory), terms.requested),
    ]
    for stage in range(pp):
        worker = next((w for w in log.workers if w.stage == stage and w.weights is not None),
                      None) or next((w for w in log.workers if w.stage == stage), None)
        at = stage if pp > 1 else None

        def row(name: str, label: str, ours: int | None, note: str = "",
                w: Any = worker, s: int | None = at) -> Term:
            return Term(name, label, "bytes", _bytes(getattr(w, name, None)), ours, s, note)

        if getattr(worker, "consumed", None) is not None:
            rows.append(row("consumed", "consumed (weights + non-torch)",
                            weights[stage] + terms.non_torch[stage]))
        # From 0.27 the summary's peak activation holds the graph estimate
        # (peak_activation_memory = transient_peak_headroom + cudagraph_memory_estimate,
        # gpu_worker.py of 0.29.0 and 0.34.0; 0.25.0 prints torch_peak_increase alone).
        warm = terms.cuda_graph_pool is not None
        with_estimate = used.release.accounting == "consumed" and not warm
        rows += [
            row("weights", "weights", weights[stage],
                "with the MTP draft's" * bool(draft_weights and stage == last)),
            row("activation_peak", "activation peak", terms.activation_peak[stage]
                + terms.cuda_graph_estimate[stage] * with_estimate,
                "with the CUDA-graph estimate" * with_estimate),
            row("non_torch", "non-torch memory", terms.non_torch[stage]),
            row("cuda_graph_estimate", "CUDA-graph estimate",
                terms.cuda_graph_estimate[stage] if used.release.cudagraph != "after_kv"
                else None,
                _graph_note(used.release.cudagraph, log.cuda_graph_subtracted, warm)),
            row("cuda_graph", "CUDA graphs captured", terms.cuda_graph_pool, _pool_note(warm)),
        ]
        if warm or getattr(worker, "transient_kept", None) is not None:
            rows += [
                row("free_after_warmup", "free after warmup", terms.free_after_warmup[stage]),
                row("transient_kept", "kept for transients", terms.transient_kept[stage],
                    "the profile's or the warmup's peak"),
            ]
        rows += [
            Term("kv_memory", "KV cache memory", "bytes", values[stage], budgets[stage],
                 at, "" if pp == 1 else "the stage's worker's own figure"),
        ]
    rows += [
        Term("kv_cache_tokens", "KV cache tokens (logged memory)", "tokens", target,
             logged_tokens),
        Term("kv_cache_tokens_estimated", "KV cache tokens (kvcalc's estimates)", "tokens",
             target, estimated),
    ]
    rules_version, rules_note = vllm_rules_for(release)
    if rules_note is not None:
        notes.append(rules_note)
    inputs: dict[str, Any] = {"tp": tp, "pp": pp}
    inputs["kv_memory"] = f"{exact if exact is not None else min(values)}B"
    # The release whose rules reproduce the log, so that --calibration sizes the same pool.
    inputs["vllm_version"] = rules_version
    if log.enable_prefix_caching is not None and has_states(spec) and not unmodelled:
        inputs["enable_prefix_caching"] = log.enable_prefix_caching
    if dcp > 1:
        inputs["decode_context_parallel_size"] = dcp
    if spec_tokens:
        inputs["num_speculative_tokens"] = spec_tokens
    for key in ("max_num_batched_tokens", "block_size", "kv_dtype", "weight_dtype"):
        if key in given:
            inputs[key] = given[key]
    if exact is None:
        notes.append(f"no KV memory within the log's rounding of {log.kv_memory.text} GiB gives "
                     f"{target:,} tokens under vLLM {terms.rules}'s rules; the calibration keeps "
                     f"the logged {min(values) / GiB:.2f} GiB")
    return Comparison(
        engine=ENGINE.name, release=release, rules=f"vLLM {terms.rules}", model=spec, gpus=gpus,
        tp=tp, pp=pp, dp=dp, terms=tuple(rows), kv_cache_tokens=target,
        kv_cache_tokens_kvcalc=logged_tokens,
        kv_cache_tokens_range=None if span_low is None or span_high is None
        else (span_low, span_high),
        kv_cache_tokens_estimated=estimated, inputs=inputs, exact=exact is not None,
        workers=tuple(_worker_payload(w, _VLLM_WORKER_TERMS) for w in log.workers),
        notes=tuple(notes),
    )


# ------------------------------------------------------------------ SGLang


def _sglang_kv_dtype(text: str | None) -> str | None:
    if text is None or text == "auto":
        return None
    if text.startswith("fp8"):
        return "fp8"
    return {"bfloat16": "bf16", "float16": "fp16", "fp4_e2m1": "nvfp4"}.get(text, text)


def compare_sglang(log: SGLangLog, spec: ModelSpec, gpus: GpuSet,
                   release: str | None, weight_dtype: str | None = None) -> Comparison:
    from kvcalc.engine.inputs import deployment_from
    from kvcalc.engine.serving.sglang import ENGINE
    from kvcalc.engine.sglang import (
        DEFAULT_VERSION,
        SGLangOptions,
        SGLangPool,
        expert_parallel_deployment,
        sglang_pool,
        sglang_version,
    )

    before, after = log.min_of("free_before_load"), log.min_of("free_after_load")
    if before is None or after is None:
        raise NotAStartupLog("it states no free memory before and after the weights load "
                             "(\"Load weight begin/end. avail mem\"; truncated?)")
    target = log.kv_cache_tokens
    assert target is not None
    tp, pp, dp = log.tp or 1, log.pp or 1, log.dp or 1
    given: dict[str, Any] = {"tp": tp, "pp": pp}
    kv_dtype = _sglang_kv_dtype(log.kv_cache_dtype)
    if kv_dtype is not None:
        given["kv_dtype"] = kv_dtype
    if weight_dtype is not None:
        given["weight_dtype"] = weight_dtype
    dep = deployment_from(spec, gpus, given, engine=ENGINE)
    version = sglang_version(release) if release else DEFAULT_VERSION
    base = SGLangOptions(
        version=version, page_size=log.page_size or 1, context_length=log.context_length,
        max_total_tokens=log.max_total_tokens,
        chunked_prefill_size=log.chunked_prefill_size if (log.chunked_prefill_size or 0) > 0
        else None,
        cuda_graph_max_bs=log.cuda_graph_max_bs,
    )
    notes: list[str] = []
    if (log.ep or 1) > 1:
        # Whole experts a rank (expert_parallel_deployment); nothing to split without routed
        # experts or with one rank.
        if spec.moe is not None and dep.tp > 1:
            base = replace(base, ep_size=log.ep)
            dep = expert_parallel_deployment(dep, base)
        else:
            notes.append(f"the log's --ep-size {log.ep} splits nothing here (no routed experts, "
                         "or one rank): ignored")
    estimate = sglang_pool(dep, base)
    mfs = log.mem_fraction_static

    def tokens(pre: int, post: int) -> int | None:
        opts = replace(base, mem_fraction_static=mfs, free_before_load_bytes=pre,
                       free_after_load_bytes=min(post, pre))
        pool = sglang_pool(dep, opts)
        return pool.max_total_num_tokens if isinstance(pool, SGLangPool) else None

    logged_tokens = tokens(before.bytes, after.bytes)
    span = (tokens(before.high, after.low), tokens(before.low, after.high))
    exact = smallest_reproducing(lambda post: tokens(before.bytes, post), after.low,
                                 min(after.high, before.bytes), target)
    estimated_pool = estimate if isinstance(estimate, SGLangPool) else None
    memory = estimate.memory
    weights = log.min_of("weights")
    logged_weights = weights.bytes if weights is not None else before.bytes - after.bytes
    k, v = log.first_of("k_size"), log.first_of("v_size")
    rows = [
        Term("mem_fraction_static", "mem_fraction_static", "fraction",
             None if mfs is None else float(mfs), float(memory.mem_fraction_static),
             note=f"SGLang {version}'s default rule"),
        Term("free_before_load", "free memory before the weights", "bytes", before.bytes,
             memory.free_before_load_bytes),
        Term("weights", "weights (load mem usage)", "bytes", logged_weights,
             max(dep.weights_per_stage)),
        Term("free_after_load", "free memory after the weights", "bytes", after.bytes,
             memory.free_after_load_bytes),
        Term("kv_memory", "KV cache (K + V)", "bytes",
             None if k is None or v is None else k.bytes + v.bytes,
             None if estimated_pool is None else estimated_pool.kv_pool_bytes),
        Term("kv_cache_tokens", "KV cache tokens (logged memory)", "tokens", target,
             logged_tokens),
        Term("kv_cache_tokens_estimated", "KV cache tokens (kvcalc's estimates)", "tokens",
             target, None if estimated_pool is None else estimated_pool.max_total_num_tokens),
        Term("max_running_requests", "max_running_requests", "requests",
             log.max_running_requests,
             None if estimated_pool is None else estimated_pool.max_running_requests),
    ]
    inputs: dict[str, Any] = {"tp": tp, "pp": pp}
    if release:
        inputs["sglang_version"] = str(version)
    if mfs is not None:
        inputs["mem_fraction_static"] = float(mfs)
    inputs["free_before_load"] = f"{before.bytes}B"
    inputs["free_after_load"] = f"{exact if exact is not None else after.bytes}B"
    if log.page_size and log.page_size != 1:
        inputs["page_size"] = log.page_size
    if log.max_total_tokens:
        inputs["max_total_tokens"] = log.max_total_tokens
    if kv_dtype is not None:
        inputs["kv_dtype"] = kv_dtype
    if weight_dtype is not None:
        inputs["weight_dtype"] = weight_dtype
    if base.ep_size:
        inputs["ep_size"] = base.ep_size
    if not release:
        notes.append(f"the log states no SGLang release: the default share is SGLang "
                     f"{version}'s rule (give --release)")
    rank_terms = ("free_before_load", "free_after_load", "weights")
    return Comparison(
        engine=ENGINE.name, release=release, rules=f"SGLang {version}", model=spec, gpus=gpus,
        tp=tp, pp=pp, dp=dp, terms=tuple(rows), kv_cache_tokens=target,
        kv_cache_tokens_kvcalc=logged_tokens,
        kv_cache_tokens_range=None if None in span else span,  # type: ignore[arg-type]
        kv_cache_tokens_estimated=None if estimated_pool is None
        else estimated_pool.max_total_num_tokens,
        inputs=inputs, exact=exact is not None,
        workers=tuple({**_worker_payload(r, rank_terms), "kv_cache_tokens": r.kv_cache_tokens}
                      for r in log.ranks),
        notes=tuple(notes),
    )


# ------------------------------------------------------------------ reading a log


class NotAStartupLog(InputError):
    """A file that states no start-up of a serving engine kvcalc reads (or not enough of one)."""


StartupLog = VLLMLog | SGLangLog


def read_startup_log(text: str) -> StartupLog:
    """The start-up ``text`` holds, as its engine's parser reads it."""
    from kvcalc.calibration.lines import log_lines
    from kvcalc.calibration.sglang_log import is_sglang_log, parse_sglang_log
    from kvcalc.calibration.vllm_log import is_vllm_log, parse_vllm_log

    lines = log_lines(text)
    log: StartupLog
    if is_sglang_log(lines):
        log = parse_sglang_log(lines)
        what = "SGLang's \"max_total_num_tokens=\" or \"#tokens:\""
    elif is_vllm_log(lines):
        log = parse_vllm_log(lines)
        what = "vLLM's \"GPU KV cache size: N tokens\""
    else:
        raise NotAStartupLog("no vLLM or SGLang start-up line in it (\"GPU KV cache size\", "
                             "\"KV Cache is allocated\")")
    if log.kv_cache_tokens is None:
        raise NotAStartupLog(f"it ends before {what} line (truncated?)")
    return log


def compare(log: StartupLog, spec: ModelSpec, gpus: GpuSet, release: str | None,
            gpu_util: float | None = None, weight_dtype: str | None = None) -> Comparison:
    """``log`` beside kvcalc's model of it for ``spec`` on ``gpus`` (the log's tp x pp);
    ``gpu_util``: vLLM's memory share where the log states none; ``weight_dtype``: the
    checkpoint's weights (None: the registry model's), which the calibration keeps."""
    if isinstance(log, SGLangLog):
        if gpu_util is not None:
            raise InputError("--gpu-util: an SGLang log states its own share "
                             "(mem_fraction_static); drop --gpu-util", field="gpu_util")
        return compare_sglang(log, spec, gpus, release_of(log, release), weight_dtype)
    return compare_vllm(log, spec, gpus, release_of(log, release), gpu_util, weight_dtype)


def release_of(log: StartupLog, release: str | None) -> str | None:
    """The release whose rules apply to ``log``: the one it states, else ``release``
    (``--release``). A ``release`` beside the log's own is refused unless it names the same
    release (the log is what ran, as its stated --gpu-util is), and one its engine's releases
    are not spelled as is refused as ``--release``, not as the sizing commands' option."""
    from kvcalc.engine.sglang import sglang_version
    from kvcalc.engine.vllm_releases import parse_version
    from kvcalc.errors import KvcalcError

    if release is None:
        return log.release
    parse: Callable[[str], object] = (
        sglang_version if isinstance(log, SGLangLog) else parse_version
    )
    if log.release is not None:
        try:
            same = parse(release) == parse(log.release)  # 0.19 is 0.19.0
        except KvcalcError:  # either is no release kvcalc reads: as written
            same = release.strip().removeprefix("v") == log.release.removeprefix("v")
        if not same:
            raise InputError(f"--release: the log states {log.release}; drop --release",
                             field="release")
        return release
    try:
        parse(release)
    except KvcalcError as exc:
        worded = getattr(exc, "worded", None)
        text = worded(lambda _: "--release") if callable(worded) else str(exc)
        raise InputError(text, field="release") from None
    return release

