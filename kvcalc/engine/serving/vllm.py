"""vLLM (``--engine vllm``): its block pool as vLLM sizes it at start-up
(:mod:`kvcalc.engine.vllm`), started with ``--max-model-len`` = each request length, under the
rules of the release asked for (``--vllm-version``, :mod:`kvcalc.engine.vllm_releases`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvcalc.engine.inputs import Input
from kvcalc.engine.profiles import REGISTRY_FIT, SGLANG_2904, VLLM_2192, DecodeProfile
from kvcalc.engine.serving.base import (
    GPUS_COLUMNS,
    BatchRequest,
    Engine,
    EnginePart,
    Given,
    InputRefusal,
    Refusals,
    ServingEngine,
    Setup,
    cuda_total_note,
    refusal,
)
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.vllm import KVCacheTooSmall, VLLMInputs, VLLMKVCache
    from kvcalc.engine.vllm_parallel import VLLMServing

_NAME = "vllm"
#: What each of its own inputs declares: the engine that reads it, where the help lists it.
_OWN: dict[str, Any] = {"engine": _NAME, "panel": "vLLM engine"}

#: ``vllm serve``'s own options, named as vLLM names them (:mod:`kvcalc.engine.vllm_parallel`),
#: and the release whose rules apply (:mod:`kvcalc.engine.vllm_releases`).
VLLM_INPUTS: tuple[Input, ...] = (
    Input("vllm_version", "text", "release, 0.10-0.34 [default: 0.34.0]",
          metavar="X.Y[.Z]", **_OWN),
    Input("max_num_seqs", "count",
          "most requests running at once: caps the batch, sizes the sampler's profile and "
          "the CUDA graphs [default: vllm serve's for the GPU and release: 1024; 256 on "
          "A100s, GB10 and GPUs under 70 GiB]",
          minimum=1, maximum=1 << 20, **_OWN),
    Input("decode_context_parallel_size", "count",
          "DCP: a request's tokens split over this many of the tp ranks (x tokens)",
          minimum=1, maximum=4096, aliases=("--dcp",), metavar="N", **_OWN),
    Input("data_parallel_size", "count",
          "DP replicas of one vLLM (= GPUs / (tp x pp)): each sizes its own pool, the MoE "
          "experts spread over all of them", minimum=1, maximum=4096, metavar="N", **_OWN),
    Input("enable_expert_parallel", "flag",
          "EP: whole routed experts split across the tp x dp ranks [default: off]", **_OWN),
    Input("enable_prefix_caching", "flag",
          "prefix caching; on a Mamba hybrid 'align' mode: 2 state pages per request "
          "[default: vLLM's, on; for hybrids off before 0.28]", **_OWN),
    Input("num_speculative_tokens", "count",
          "MTP speculative decoding: the model's MTP layers load, their KV joins the pool",
          minimum=0, maximum=64, metavar="K", **_OWN),
    Input("enforce_eager", "flag",
          "no CUDA graphs: none estimated, captured or taken from the KV budget (batch and "
          "check; decode and plan time graph steps) [default: off]", **_OWN),
    Input("enable_extensible_kv_cache", "flag",
          "0.34's KV cache sized after warmup; off, from the profile run at utilization 0.92 "
          "[default: vLLM's, on from 0.34]", **_OWN),
)


class VLLM(Engine):
    name = _NAME
    label = "vLLM"
    summary = "vllm: vLLM's exact block count (0.10-0.34)"
    plans = True
    takes_lengths = True
    refusals = Refusals({
        "prefix_shared": "vLLM's block count does not depend on a shared prefix",
    })
    inputs: tuple[Input, ...] = VLLM_INPUTS
    options = tuple(i.name for i in inputs)

    def engine_options(self, given: Given) -> VLLMServing:
        """vLLM's own options from their values, defaults filled in; the release asked for
        (None: the newest) is refused unless kvcalc has its rules."""
        from kvcalc.engine.vllm_parallel import VLLMServing
        from kvcalc.engine.vllm_releases import VLLMVersionError, vllm_release

        version = given.get("vllm_version")
        try:
            vllm_release(version)
        except VLLMVersionError as exc:
            raise InputRefusal(exc.template, "vllm_version") from None
        return VLLMServing(
            decode_context_parallel_size=given.get("decode_context_parallel_size") or 1,
            enable_prefix_caching=given.get("enable_prefix_caching"),
            num_speculative_tokens=given.get("num_speculative_tokens") or 0,
            max_num_seqs=given.get("max_num_seqs"),
            data_parallel_size=given.get("data_parallel_size"),
            enable_expert_parallel=bool(given.get("enable_expert_parallel")),
            enforce_eager=bool(given.get("enforce_eager")),
            enable_extensible_kv_cache=given.get("enable_extensible_kv_cache"),
            vllm_version=version,
        )

    #: vLLM replays decode steps as CUDA graphs unless --enforce-eager (its docs; V1 captures
    #: batch sizes up to max_cudagraph_capture_size), all-reduces small messages with its custom
    #: one-shot kernel (vllm PR #2192; NCCL above 512 KB or without full NVLink), 10 us each:
    #: sglang PR #2904 measured vLLM's kernel at 8.5-11.8 us for 512 B-32 KB, tp 2-8, H100.
    #: V1's scheduler overlaps the next step's CPU work with the GPU, so the fixed per-step cost
    #: is the GPU's registry figure (the 4-13 ms GPU bubbles of vllm issue #6854 were V0's).
    decode_profile = DecodeProfile(
        name="vllm",
        label="vLLM",
        cuda_graphs=True,
        allreduce="custom one-shot all-reduce",
        allreduce_latency_seconds=10e-6,
        sources=(
            "https://docs.vllm.ai/en/latest/configuration/optimization.html (CUDA graphs)",
            VLLM_2192,
            SGLANG_2904 + " (vLLM's custom all-reduce: 8.5-11.8 us at 512 B-32 KB, H100)",
            "https://github.com/vllm-project/vllm/issues/6854 (V0's per-step CPU bubbles)",
            REGISTRY_FIT,
        ),
    )

    def check_model(self, model: ModelSpec, given: Given) -> None:
        from kvcalc.engine.vllm import backend_blocks

        if "block_size" in given and backend_blocks(model):
            model_id = literal(model.id)
            raise refusal(
                "block_size",
                f"vLLM pages {model_id}'s caches at its backend's own blocks "
                "(64-token windows, 256-token latents); drop it",
            )

    def check_timed(self, given: Given, timed_by: str) -> None:
        if given.get("enforce_eager"):
            raise refusal("enforce_eager", (
                f"{timed_by} times vLLM's decode steps as CUDA-graph replays (its decode "
                "profile), and kvcalc does not model eager steps; drop it, or time nothing "
                "(batch and check's capacity requirements size the eager pool)"
            ))

    def check_kv_format(self, kv: KVFormat) -> None:
        from kvcalc.engine.vllm import vllm_kv_dtype

        vllm_kv_dtype(kv)  # a VLLMConfigError is the InputRefusal naming kv_dtype

    def pool(self, dep: Deployment, options: Any = None) -> VLLMPool:
        from kvcalc.engine.vllm_parallel import VLLMServing, serving_deployment

        serving = options if options is not None else VLLMServing()
        return VLLMPool(serving_deployment(dep, serving), serving)


class VLLMPool:
    """vLLM's block pool of one replica, started once per request length (its max_model_len)."""

    def __init__(self, dep: Deployment, serving: VLLMServing | None = None) -> None:
        from kvcalc.engine.vllm import serving_inputs
        from kvcalc.engine.vllm_parallel import VLLMServing

        self.dep = dep
        self.serving = serving or VLLMServing()
        self.inputs = serving_inputs(dep, self.serving)
        self._started: dict[int, VLLMKVCache | KVCacheTooSmall] = {}

    def start(self, max_model_len: int) -> VLLMKVCache | KVCacheTooSmall:
        """vLLM started with ``--max-model-len``; a setting vLLM rejects raises its
        :class:`~kvcalc.engine.vllm.VLLMConfigError`."""
        from kvcalc.engine.vllm import vllm_kv_cache_for

        result = self._started.get(max_model_len)
        if result is None:
            result = self._started[max_model_len] = vllm_kv_cache_for(
                self.dep, max_model_len, self.inputs, self.serving
            )
        return result

    def max_batches(self, contexts: Sequence[int]) -> tuple[list[int], str | None]:
        """The whole requests of its log's "Maximum concurrency" at each context (floor: a
        fraction of a request does not decode)."""
        from kvcalc.engine.vllm import KVCacheTooSmall

        batches: list[int] = []
        for context in contexts:
            result = self.start(context)
            if isinstance(result, KVCacheTooSmall):
                return [*batches, 0], result.message
            batches.append(self.capped(result.max_concurrency))
        return batches, None

    def step_tokens(self) -> int:
        """``--max-num-batched-tokens``, else ``vllm serve``'s default for the GPU and release
        (``get_batch_defaults``): 2,048 on an A100 where the budget formula takes 8,192."""
        return self.inputs.max_num_batched_tokens

    def capped(self, concurrency: float) -> int:
        """Whole requests of the pool's concurrency, at most ``--max-num-seqs`` or the release's
        default for the GPU (the scheduler runs no more at once)."""
        return min(math.floor(concurrency), self.inputs.max_num_seqs)

    def max_batch(self, context: int) -> int:
        from kvcalc.engine.vllm import KVCacheTooSmall, VLLMConfigError

        try:
            result = self.start(context)
        except VLLMConfigError:
            return 0
        if isinstance(result, KVCacheTooSmall):
            return 0
        return self.capped(result.max_concurrency)

    def fraction(self, batch_per_replica: int, context: int) -> float:
        """Blocks per request x requests over the pool's blocks (vLLM refusing to start: inf)."""
        from kvcalc.engine.vllm import VLLMKVCache

        result = self.start(context)
        if not isinstance(result, VLLMKVCache):
            return math.inf
        return result.pool_fraction(batch_per_replica)

    def longest_context(self) -> int | None:
        """The model's maximum (or 2^30) when vLLM starts with it, else the max_model_len vLLM
        estimates when it refuses."""
        from kvcalc.engine.units import MAX_CONTEXT_TOKENS
        from kvcalc.engine.vllm import VLLMKVCache

        length = self.dep.model.max_context or MAX_CONTEXT_TOKENS
        result = self.start(length)
        return length if isinstance(result, VLLMKVCache) else result.estimated_max_model_len

    def batch(self, request: BatchRequest) -> VLLMAnswer:
        """vLLM started at each ``--max-model-len`` (else each ``--ctx``, else the model's
        maximum)."""
        if request.lengths and request.contexts:
            _refuse_ctx_with_max_model_len(request.contexts, request.lengths)
        lengths = request.lengths or request.contexts
        if not lengths and self.dep.model.max_context:
            lengths = [self.dep.model.max_context]
        if not lengths:
            raise refusal("max_model_len", "give the request length vLLM serves, e.g. 8k")
        results = [self.start(length) for length in lengths]
        return VLLMAnswer(self.dep, results, self.inputs, self.serving)

    def caveats(self) -> list[str]:
        return estimate_notes(self.dep, self.inputs)

    def started_with(self) -> dict[str, Any]:
        return serving_keys(self.dep, self.serving, self.inputs)


def _refuse_ctx_with_max_model_len(contexts: Sequence[int], lengths: Sequence[int]) -> None:
    """vLLM answers for --max-model-len, the longest request it admits: a --ctx beside it would
    be silently dropped, or (longer) is a request vLLM refuses."""
    longest, cap = max(contexts), max(lengths)
    if longest > cap:
        raise InputRefusal(
            f"{{ctx}} {longest:,} is longer than {{max_model_len}} {cap:,}: vLLM refuses such a "
            "request; raise {max_model_len} or shorten {ctx}",
            "ctx",
            "max_model_len",
        )
    raise InputRefusal(
        "{ctx}: with {engine} vllm the request length is {max_model_len}, and vLLM's figures "
        "are for it; give one of {ctx} and {max_model_len}",
        "ctx",
        "engine",
        "max_model_len",
    )


def vllm_payload(
    result: VLLMKVCache | KVCacheTooSmall, replicas: int, max_num_seqs: int | None = None
) -> dict[str, Any]:
    """One request length: every key whether it fits or not (null where vLLM prints none), so
    the JSON holds what the CSV does. ``max_batch_per_replica`` is vLLM's "Maximum
    concurrency" floored (whole requests; at most ``max_num_seqs``), ``max_batch`` that across
    the replicas."""
    import math

    from kvcalc.engine.vllm import KVCacheTooSmall

    length = result.setup.max_model_len
    if isinstance(result, KVCacheTooSmall):
        return {
            "context_tokens": length,
            "max_model_len": length,
            "fits": False,
            "reason": result.message,
            "max_batch": 0,
            "max_batch_per_replica": 0,
            **dict.fromkeys(VLLM_POOL_FIELDS),
            "needed_bytes": result.needed_bytes,
            "available_bytes": result.available_bytes,
            "estimated_max_model_len": result.estimated_max_model_len,
        }
    per_replica = math.floor(result.max_concurrency)
    if max_num_seqs is not None:
        per_replica = min(per_replica, max_num_seqs)
    return {
        "context_tokens": length,
        "max_model_len": length,
        "fits": True,
        "reason": None,
        "max_batch": per_replica * replicas,
        "max_batch_per_replica": per_replica,
        "num_blocks": result.num_blocks,
        "kv_cache_tokens": result.kv_cache_size_tokens,
        "blocks_per_request": result.blocks_per_request,
        "max_concurrency": result.max_concurrency,
        "kv_cache_groups": len(result.grouping.groups),
        "available_bytes_per_gpu": min(s.available_bytes for s in result.stages),
        **dict.fromkeys(("needed_bytes", "available_bytes", "estimated_max_model_len")),
    }


#: The pool's figures, null for a length vLLM refuses.
VLLM_POOL_FIELDS = (
    "num_blocks",
    "kv_cache_tokens",
    "blocks_per_request",
    "max_concurrency",
    "kv_cache_groups",
    "available_bytes_per_gpu",
)


#: The first release whose DCP line names prefill context parallelism beside it
#: (``_report_kv_cache_config``, kv_cache_utils.py of 0.12.0; 0.10.2-0.11.2 name dcp alone).
PCP_LINE_SINCE = (0, 12, 0)


def vllm_lines(
    result: VLLMKVCache | KVCacheTooSmall,
    after_warmup: bool = False,
    version: tuple[int, int, int] = PCP_LINE_SINCE,
) -> list[str]:
    """vLLM's own start-up lines, as its log prints them. Sized ``after_warmup`` (0.34's
    extensible cache), the size is the one ``extend_kv_cache`` logs for the committed blocks:
    its "Available KV cache memory" is the reserved range, not the cache."""
    from kvcalc.engine.units import GiB
    from kvcalc.engine.vllm import KVCacheTooSmall

    if isinstance(result, KVCacheTooSmall):
        return [f"max_model_len {result.setup.max_model_len:,}: does not fit: {result.message}"]
    avail = min(s.available_bytes for s in result.stages)
    size = f"Available KV cache memory: {avail / GiB:.2f} GiB"
    if after_warmup:
        # physical_bytes of the first stage's worker: its committed blocks (the minimum over
        # ranks) times its page; vLLM's 2 MiB granule rounding is below the 0.01 GiB printed.
        committed = result.num_blocks * result.stages[0].bytes_per_block
        size = f"Extended KV cache to {result.num_blocks} blocks ({committed / GiB:.2f} GiB)."
    return [
        size,
        f"num_gpu_blocks: {result.num_blocks:,} ({len(result.grouping.groups)} KV cache "
        f"group(s), {result.blocks_per_request:,} blocks per request)",
        *dcp_line(result.setup.decode_context_parallel_size, result.setup.token_line, version),
        f"GPU KV cache size: {result.kv_cache_size_tokens:,} tokens",
        f"Maximum concurrency for {result.setup.max_model_len:,} tokens per request: "
        f"{result.max_concurrency:.2f}x",
    ]


def serving_keys(dep: Deployment, serving: VLLMServing, inputs: VLLMInputs) -> dict[str, Any]:
    """The inputs vLLM started with, as ``vllm serve`` names them: the release, the values the
    profiler's budget read (null where a KV budget or a reserve was given, so that it read none
    of them), and the serving options applied."""
    from kvcalc.engine.vllm import vllm_memory_terms
    from kvcalc.engine.vllm_parallel import has_states, serving_setup

    setup = serving_setup(dep, serving, inputs)
    estimated = not dep.kv_budget_given
    graphs = None
    if estimated and dep.overhead_bytes is None:
        graphs = max(t.cudagraph_charged_bytes for t in vllm_memory_terms(dep, inputs))
    given = serving.enable_prefix_caching
    return {
        "vllm_version": inputs.version,
        "gpu_memory_utilization": float(inputs.gpu_memory_utilization) if estimated else None,
        "kv_cache_memory_bytes": dep.kv_memory_bytes,
        "max_num_batched_tokens": inputs.max_num_batched_tokens,
        "max_num_seqs": inputs.max_num_seqs,
        "cudagraph_memory_bytes": graphs,
        "decode_context_parallel_size": setup.dcp,
        "data_parallel_size": serving.data_parallel_size,
        "enable_expert_parallel": serving.enable_expert_parallel,
        "enforce_eager": serving.enforce_eager,
        "enable_extensible_kv_cache": extensible_as_run(dep, inputs),
        # vLLM's default: on, but (before 0.28) off for models with recurrent states.
        "enable_prefix_caching": (not has_states(dep.model) or inputs.release.mamba_align)
        if given is None
        else given,
        "mamba_cache_mode": setup.mamba_cache_mode if has_states(dep.model) else None,
        "num_speculative_tokens": setup.num_speculative_tokens,
        "draft_layers": len(setup.draft_mixers),
        "draft_weight_bytes_per_gpu": setup.mtp_weight_bytes,
    }


def serving_note(serving: VLLMServing) -> str:
    """The header's words for the serving options given (empty: none)."""
    parts = [
        f"dcp {serving.decode_context_parallel_size}"
        * (serving.decode_context_parallel_size > 1),
        f"dp {serving.data_parallel_size}" * bool(serving.data_parallel_size),
        "expert parallel" * serving.enable_expert_parallel,
        "eager" * serving.enforce_eager,
        {None: "", True: "", False: "no extensible KV cache"}[serving.enable_extensible_kv_cache],
        {None: "", True: "prefix caching", False: "no prefix caching"}[
            serving.enable_prefix_caching
        ],
        _mtp_words(serving.num_speculative_tokens),
        f"max {serving.max_num_seqs} seqs" * bool(serving.max_num_seqs),
    ]
    return "".join(f", {p}" for p in parts if p)


def _mtp_words(tokens: int) -> str:
    return "" if not tokens else f"MTP {tokens} draft token" + "s" * (tokens > 1)


def total_estimated(dep: Deployment) -> bool:
    """Whether the budget starts from an estimated CUDA total: not when it is given."""
    return dep.cuda_total_estimated and not dep.kv_budget_given


def estimate_notes(dep: Deployment, inputs: VLLMInputs) -> list[str]:
    """What the pool's figures rest on that kvcalc could not know: an estimated CUDA total
    (:func:`~kvcalc.engine.serving.base.cuda_total_note`), a unified part's bound, and a
    release sized after warmup that no public log has checked yet."""
    total = cuda_total_note(dep) if total_estimated(dep) else []
    return [*total, *upper_bound_note(dep), *after_warmup_note(dep, inputs),
            *utilization_cap_note(dep, inputs)]


def utilization_cap_note(dep: Deployment, inputs: VLLMInputs) -> list[str]:
    """vLLM 0.34's own warning for a utilization between 0.7 and 1 that keeps 1 GiB or more of
    free memory out of an extensible cache (``measure_kv_cache_blocks``,
    vllm/v1/worker/extensible_kv_cache.py of 0.34.0)."""
    from kvcalc.engine.units import GiB
    from kvcalc.engine.vllm import vllm_memory_terms

    util = inputs.gpu_memory_utilization
    if not sized_after_warmup(dep, inputs) or not 0.7 < util < 1:
        return []
    withheld = max(t.withheld_by_utilization_bytes for t in vllm_memory_terms(dep, inputs))
    if withheld < GiB:
        return []
    return [
        f"gpu_memory_utilization={float(util):g} keeps {withheld / GiB:.2f} GiB of free device "
        f"memory out of the KV cache: vLLM {inputs.version} sizes it from the memory measured "
        "after warmup, so its own use needs no headroom below 1.0; leave --gpu-util unset "
        "unless it keeps room for what vLLM does not measure (other processes on the GPU, the "
        "CPU on unified memory, weight-update or KV-connector buffers)"
    ]


def extensible_as_run(dep: Deployment, inputs: VLLMInputs) -> bool:
    """Whether vLLM runs ``dep`` with 0.34's extensible KV cache: the release's rule, unless a
    KV budget given turns it off (``_resolve_extensible_kv_cache``, vllm/config/vllm.py)."""
    return inputs.release.kv_sizing == "after_warmup" and not dep.kv_budget_given


def sized_after_warmup(dep: Deployment, inputs: VLLMInputs) -> bool:
    """Whether vLLM sizes ``dep``'s cache after warmup (0.34's extensible KV cache) and kvcalc
    estimates what it measures: not when an overhead is given either."""
    return extensible_as_run(dep, inputs) and dep.overhead_bytes is None


def after_warmup_note(dep: Deployment, inputs: VLLMInputs) -> list[str]:
    """The one note of a budget 0.34 measures after warmup (:mod:`kvcalc.engine.vllm_warmup`):
    its terms come from earlier releases' logs, none yet from a 0.34 start-up."""
    if not sized_after_warmup(dep, inputs):
        return []
    return [
        f"vLLM {inputs.version} sizes the KV cache from the memory free after warmup and CUDA-"
        "graph capture; kvcalc reads that rule from its code, with figures from earlier "
        "releases' start-up logs (no public 0.34 log checked yet): for your machine's pool give "
        "--kv-cache-memory, or --calibration from its start-up log"
    ]


def after_warmup_line(
    dep: Deployment, inputs: VLLMInputs, results: Sequence[VLLMKVCache | KVCacheTooSmall]
) -> list[str]:
    """The first worker's "Memory after warmup" line in 0.34's words (``measure_kv_cache_blocks``,
    vllm/v1/worker/extensible_kv_cache.py of 0.34.0), so that it can be set beside a real log:
    the free memory, what is kept for transients, the blocks that fit and the requested memory
    (not the blocks warmup committed, which kvcalc does not model). Nothing when no context
    fits."""
    from kvcalc.engine.units import GiB
    from kvcalc.engine.vllm import VLLMKVCache, vllm_memory_terms

    fitted = next((r for r in results if isinstance(r, VLLMKVCache)), None)
    first = vllm_memory_terms(dep, inputs)[0]
    free, kept = first.free_after_warmup_bytes, first.transient_kept_bytes
    if fitted is None or free is None or kept is None:
        return []
    stage = fitted.stages[0]
    return [
        f"Memory after warmup: {free / GiB:.2f} GiB free, {kept / GiB:.2f} GiB kept for "
        f"transient activations; {stage.num_blocks} KV cache blocks "
        f"({stage.num_blocks * stage.bytes_per_block / GiB:.2f} GiB) fit within the requested "
        f"{first.requested_bytes / GiB:.2f} GiB."
    ]


def upper_bound_note(dep: Deployment) -> list[str]:
    """The one note of a unified part's budget from the GPU alone
    (:func:`~kvcalc.engine.vllm.kv_cache_upper_bound`): what vLLM takes from the pool there that
    kvcalc cannot know, and the two ways to give the real pool."""
    from kvcalc.engine.vllm import kv_cache_upper_bound

    if not kv_cache_upper_bound(dep):
        return []
    return [
        f"the KV figures are usually an upper bound: on the unified memory of a "
        f"{dep.gpus.accelerator.id} vLLM charges the change in the host's memory use while it "
        "starts (model loading, torch.compile, the page cache, other processes) to the KV pool, "
        "and kvcalc counts none of it (one public run came out 12% above, its host freeing "
        "memory as it loaded); for the pool of your machine give --kv-cache-memory, or "
        "--calibration from its start-up log"
    ]


#: The serving keys of every vLLM record (:func:`serving_keys`).
SERVING_FIELDS = (
    "vllm_version",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "max_num_batched_tokens",
    "max_num_seqs",
    "cudagraph_memory_bytes",
    "decode_context_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "enable_prefix_caching",
    "mamba_cache_mode",
    "num_speculative_tokens",
    "draft_layers",
    "draft_weight_bytes_per_gpu",
)


def dcp_line(
    dcp: int, token_line: str = "blocks", version: tuple[int, int, int] = PCP_LINE_SINCE
) -> list[str]:
    """The line before the token count under DCP (``_report_kv_cache_config``) of the releases
    that multiply their block line by it (0.10.2 to 0.20; gone with 0.21's concurrency line),
    in the words of the release ``version``."""
    if dcp == 1 or token_line != "blocks":
        return []
    if version < PCP_LINE_SINCE:
        return [f"Multiplying the GPU KV cache size by the dcp_world_size {dcp}."]
    return [
        f"Multiplying the GPU KV cache size by the cp_world_size {dcp} "
        f"(pcp_world_size 1 * dcp_world_size {dcp})."
    ]


#: The keys of every vLLM CSV record, fitting or not (a missing figure is an empty cell).
VLLM_FIELDS = (
    "model",
    *GPUS_COLUMNS,
    "tp",
    "pp",
    "kv_dtype",
    "block_size",
    *SERVING_FIELDS,
    "kv_cache_upper_bound",
    "kv_sized_after_warmup",
    "cuda_total_estimated",
    "context_tokens",
    "max_model_len",
    "fits",
    "reason",
    "max_batch",
    "max_batch_per_replica",
    *VLLM_POOL_FIELDS,
    "needed_bytes",
    "available_bytes",
    "estimated_max_model_len",
)


class VLLMAnswer:
    """vLLM's start-up at each request length."""

    def __init__(
        self,
        dep: Deployment,
        results: list[VLLMKVCache | KVCacheTooSmall],
        inputs: VLLMInputs,
        serving: VLLMServing | None = None,
    ) -> None:
        from kvcalc.engine.vllm_parallel import VLLMServing

        self.dep = dep
        self.results = results
        self.inputs = inputs
        self.serving = serving or VLLMServing()

    def part(self, setup: Setup) -> EnginePart:
        from kvcalc.engine.units import GiB
        from kvcalc.engine.vllm import KVCacheTooSmall, backend_blocks, kv_cache_upper_bound
        from kvcalc.engine.vllm_backends import deployment_backend_block, vllm_block_size
        from kvcalc.engine.vllm_releases import parse_version

        dep, results, inputs = self.dep, self.results, self.inputs
        # DeepSeek-V4 is paged at its backend's own blocks by vLLM 0.33's rules, not --block-size.
        own_blocks = backend_blocks(dep.model)
        block_size = vllm_block_size(dep, inputs.release)
        chosen = deployment_backend_block(dep, inputs.release)
        head = {
            "model": dep.model.id,
            "gpus": dict(setup.gpus),
            "tp": dep.tp,
            "pp": dep.pp,
            "engine": ENGINE.name,
            "kv_dtype": dep.kv_dtype.name,
            "kv_bits_per_value": setup.kv_bits_per_value,
            "block_size": None if own_blocks else block_size,
            **serving_keys(dep, self.serving, inputs),
            "kv_cache_upper_bound": kv_cache_upper_bound(dep),
            "kv_sized_after_warmup": sized_after_warmup(dep, inputs),
            "cuda_total_estimated": total_estimated(dep),
            **setup.layout,
        }
        cap = inputs.max_num_seqs
        per_length = [vllm_payload(r, dep.replicas, cap) for r in results]
        first = per_length[0]
        payload = {
            **head,
            # The first request length's figures at the top, for the common one-length question.
            **{k: first.get(k) for k in ("num_blocks", "kv_cache_tokens", "max_concurrency")},
            # As every engine's JSON: false, with the first reason, when any length does not fit.
            "fits": all(p["fits"] for p in per_length),
            "reason": next((p["reason"] for p in per_length if not p["fits"]), None),
            "contexts": per_length,
        }
        flat = {**head, **{f"gpus_{k}": v for k, v in setup.gpus.items()}}
        records = [{k: ({**flat, **p}).get(k) for k in VLLM_FIELDS} for p in per_length]
        release, block = (inputs.version, f"block {block_size}")
        if chosen is not None:
            block += f" ({chosen.note})"
        if own_blocks:
            block = "the backend's blocks (64-token windows, 256-token latents)"
        header = (
            f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: vLLM {release}, tp {dep.tp}, "
            f"pp {dep.pp}, KV {setup.kv_label}, {block}"
        )
        header += serving_note(self.serving)
        scheduler = (f"max_num_batched_tokens {inputs.max_num_batched_tokens:,}, max_num_seqs "
                     f"{inputs.max_num_seqs:,}")
        graphs = head["cudagraph_memory_bytes"]
        # As vLLM 0.20+ logs its estimate; a given budget or a release that captures the graphs
        # after the KV cache subtracts none, and the line is left out. 0.34 measures the pool.
        graph_line = [f"Estimated CUDA graph memory: {graphs / GiB:.2f} GiB total "
                      "(subtracted from the KV budget)"] if graphs else []
        if head["kv_sized_after_warmup"]:
            graph_line = [f"CUDA graph pool: {graphs / GiB:.2f} GiB (measured with the "
                          "rest after capture, as 0.34 sizes the KV cache)"] if graphs else []
            graph_line += after_warmup_line(dep, inputs, results)
        too_small = any(isinstance(r, KVCacheTooSmall) for r in results)
        return EnginePart(
            payload=payload,
            records=records,
            fields=VLLM_FIELDS,
            lines=[header, scheduler, *setup.layout_notes, *estimate_notes(dep, inputs),
                   *graph_line,
                   *(line for r in results
                     for line in vllm_lines(r, head["kv_sized_after_warmup"],
                                            parse_version(inputs.version)))],
            fits=not too_small,
            lengths=[r.setup.max_model_len for r in results],
        )


ENGINE: ServingEngine = VLLM()
