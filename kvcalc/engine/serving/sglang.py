"""SGLang (``--engine sglang``): its token pool(s) as SGLang sizes them at start-up
(:mod:`kvcalc.engine.sglang`), with its server arguments as options named as SGLang names them.

Its part of the report echoes SGLang's own log so that a run can be compared with a real
start-up log line by line, with the units corrected: SGLang prints GiB (2^30 bytes, two
decimals) as "GB", kvcalc prints them as GiB and says so once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvcalc.engine.inputs import Input
from kvcalc.engine.profiles import REGISTRY_FIT, SGLANG_2904, DecodeProfile
from kvcalc.engine.serving.base import (
    GPUS_COLUMNS,
    BatchRequest,
    Engine,
    EnginePart,
    Given,
    Refusals,
    ServingEngine,
    Setup,
    cuda_total_note,
    log_gib,
    refusal,
)
from kvcalc.engine.units import GiB

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.sglang import (
        SGLangMemory,
        SGLangOptions,
        SGLangPool,
        SGLangPoolTooSmall,
        SGLangVersion,
    )

#: The request length its concurrency is shown for when --ctx is not given.
DEFAULT_CONTEXT = 8192

_NAME = "sglang"
#: What each of its own inputs declares: the engine that reads it, where the help lists it.
_OWN: dict[str, Any] = {"engine": _NAME, "panel": "SGLang engine"}

# SGLang sizes its pool from its own share of *free* memory (--mem-fraction-static), with no
# profiled overhead, pages of --page-size and no prefix charge.
_BUDGET = (
    "SGLang's budget is {mem_fraction_static} of the free memory "
    "(or {free_before_load} / {free_after_load} from its log)"
)
_REFUSALS: dict[str, str] = {
    "gpu_util": _BUDGET,
    "reserve": _BUDGET,
    "overhead": _BUDGET,
    "kv_memory": _BUDGET,
    "block_size": "SGLang pages its pool with {page_size}",
    "prefix_shared": "SGLang's token pool does not depend on it",
    "max_num_batched_tokens": "SGLang's step is {chunked_prefill_size}",
}


class SGLang(Engine):
    name = _NAME
    label = "SGLang"
    # The releases of kvcalc.engine.sglang (imported when an answer is asked, not at start-up;
    # tests/test_sglang.py holds these texts to its constants).
    summary = "sglang: SGLang's token pool (0.4.0-0.5.23)"
    #: SGLang replays decode batches up to --cuda-graph-max-bs as CUDA graphs (its server
    #: arguments) and all-reduces small messages with its custom kernel (adapted from
    #: TensorRT-LLM's): 3.7-7.8 us for 512 B-32 KB at tp 2-8 on H100 (sglang PR #2904), 6 us.
    #: Its scheduler overlaps CPU work with the GPU (the overlap scheduler, on by default), so
    #: the fixed per-step cost is the GPU's registry figure.
    decode_profile = DecodeProfile(
        name=_NAME,
        label="SGLang",
        cuda_graphs=True,
        allreduce="custom one-shot all-reduce",
        allreduce_latency_seconds=6e-6,
        sources=(
            "https://docs.sglang.ai/advanced_features/server_arguments.html "
            "(--cuda-graph-max-bs, --disable-overlap-schedule)",
            SGLANG_2904 + " (SGLang's custom all-reduce: 3.7-7.8 us at 512 B-32 KB, H100)",
            REGISTRY_FIT,
        ),
    )
    #: Its server arguments, named as SGLang names them.
    inputs: tuple[Input, ...] = (
        Input("sglang_version", "text", "release, 0.4.0-0.5.23 [default: 0.5.23]",
              metavar="X.Y.Z", **_OWN),
        Input("mem_fraction_static", "fraction",
              "share of free memory for weights + KV [default: the release's rule]", **_OWN),
        Input("page_size", "tokens",
              "tokens per page [default: 1; 256 for DeepSeek-V4]", maximum=65536, **_OWN),
        Input("context_length", "context", "context length [default: the model's maximum]",
              **_OWN),
        Input("chunked_prefill_size", "tokens", "prefill chunk (feeds the default memory share)",
              maximum=1 << 24, **_OWN),
        Input("cuda_graph_max_bs", "count",
              "largest CUDA-graph batch (feeds the default memory share)",
              minimum=1, maximum=1 << 16, **_OWN),
        Input("max_total_tokens", "tokens", "pool cap [default: none]", maximum=1 << 40,
              **_OWN),
        # SGLang prints "avail mem=63.41 GB" meaning GiB (it divides by 2^30): a bare number
        # is read so.
        Input("free_before_load", "bytes",
              "'Load weight begin. avail mem' in GiB, e.g. 78.43 [default: estimated]",
              metavar="GIB", bare_unit="GiB", **_OWN),
        Input("free_after_load", "bytes",
              "'Load weight end. avail mem' in GiB, e.g. 63.41 [default: estimated]",
              metavar="GIB", bare_unit="GiB", **_OWN),
        Input("swa_full_tokens_ratio", "fraction",
              "pool sliding-window layers apart at this ratio (SGLang's is 0.8) "
              "[default: one shared pool to 0.5.9; 0.8 from 0.5.10, but one pool for "
              "Gemma 2/3; DeepSeek-V4: 0.1]", **_OWN),
        Input("mamba_full_memory_ratio", "fraction",
              "mamba state : full KV memory of a hybrid's budget (SGLang's pool takes r / (1 + "
              "r)) [default: 0.9]", metavar="R", **_OWN),
        Input("max_mamba_cache_size", "count",
              "state slots of a hybrid's mamba pool (0.5.10+) [default: from the ratio]",
              minimum=1, maximum=1 << 24, **_OWN),
        Input("mamba_ssm_dtype", "text",
              "SSM state dtype of a hybrid's mamba pool: fp32, bf16 or fp16 [default: the "
              "config's mamba_ssm_dtype, else fp32]", metavar="DTYPE", **_OWN),
        Input("max_running_requests", "count",
              "cap on running requests [default: the request pool's; 256 for DeepSeek-V4]",
              minimum=1, maximum=1 << 20, **_OWN),
        # SGLang's --dp-size with --enable-dp-attention; without it SGLang's dp ranks are whole
        # replicas, which kvcalc counts from --gpus / (tp x pp), so here it means DP attention.
        Input("dp_size", "count",
              "DP attention (SGLang --enable-dp-attention --dp-size N): N attention ranks of "
              "the TP group, a pool each [default: off]",
              minimum=1, maximum=4096, **_OWN),
        Input("ep_size", "count",
              "expert parallelism (SGLang --ep-size N): the routed experts whole over the N "
              "ranks of the TP group, N = tp; shared experts stay split [default: 1]",
              minimum=1, maximum=4096, **_OWN),
        Input("speculative_algorithm", "text",
              "EAGLE or NEXTN: the model's MTP layers draft, their KV priced into the cell "
              "(0.5.14+) [default: none]", metavar="NAME", **_OWN),
    )
    options = tuple(i.name for i in inputs)
    default_contexts: tuple[int, ...] | None = (DEFAULT_CONTEXT,)
    refusals = Refusals(_REFUSALS)

    def check_inputs(self, given: Given) -> None:
        self.refusals.check(given)
        if "free_after_load" in given:
            loaded = "{free_after_load} is the memory left once the weights are loaded"
            Refusals(dict.fromkeys(("weights", "weight_dtype"), loaded)).check(given)
        if {"mem_fraction_static", "free_before_load", "free_after_load"} <= set(given):
            Refusals({
                "gpu_memory": "{mem_fraction_static} and both free-memory figures leave "
                "nothing for the GPU's memory to decide"
            }).check(given)

    def engine_options(self, given: Given) -> SGLangOptions:
        """SGLang's options from their values (free memory in bytes, the context in tokens);
        a value SGLang refuses raises its one line."""
        from kvcalc.engine.deployment import as_fraction
        from kvcalc.engine.sglang import (
            DEFAULT_VERSION,
            SGLangOptions,
            mfs_uses_graph_inputs,
            sglang_version,
        )

        text = given.get("sglang_version")
        version = sglang_version(text) if text else DEFAULT_VERSION
        for name in ("chunked_prefill_size", "cuda_graph_max_bs"):
            if name not in given:
                continue
            if "mem_fraction_static" in given:
                raise refusal(name, "only the default {mem_fraction_static} reads it")
            if not mfs_uses_graph_inputs(version):
                raise refusal(
                    name,
                    f"SGLang {version}'s default {{mem_fraction_static}} does not read it "
                    "(0.5.3 and later do)",
                )

        def fraction(name: str) -> Any:
            value = given.get(name)
            return None if value is None else as_fraction(value)

        return SGLangOptions(
            version=version,
            mem_fraction_static=fraction("mem_fraction_static"),
            page_size=given.get("page_size"),
            context_length=given.get("context_length"),
            chunked_prefill_size=given.get("chunked_prefill_size"),
            cuda_graph_max_bs=given.get("cuda_graph_max_bs"),
            max_total_tokens=given.get("max_total_tokens"),
            free_before_load_bytes=given.get("free_before_load"),
            free_after_load_bytes=given.get("free_after_load"),
            swa_full_tokens_ratio=fraction("swa_full_tokens_ratio"),
            mamba_full_memory_ratio=fraction("mamba_full_memory_ratio"),
            max_mamba_cache_size=given.get("max_mamba_cache_size"),
            mamba_ssm_dtype=ssm_dtype(given.get("mamba_ssm_dtype")),
            max_running_requests=given.get("max_running_requests"),
            enable_dp_attention=(given.get("dp_size") or 1) > 1,
            dp_size=given.get("dp_size"),
            ep_size=given.get("ep_size"),
            speculative_algorithm=speculative(given.get("speculative_algorithm")),
        )

    def pool(self, dep: Deployment, options: SGLangOptions | None = None) -> SGLangTokenPool:
        """SGLang's pool(s) for ``dep`` (the default release's unless ``options`` say)."""
        from kvcalc.engine.sglang import expert_parallel_deployment

        opts = options if options is not None else self.engine_options({})
        return SGLangTokenPool(expert_parallel_deployment(dep, opts), opts)


def ssm_dtype(text: str | None) -> str | None:
    """``--mamba-ssm-dtype`` in kvcalc's spelling (SGLang's float32 / bfloat16 / float16)."""
    if text is None:
        return None
    name = text.strip().lower()
    return {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}.get(name, name)


def speculative(text: str | None) -> str | None:
    """``--speculative-algorithm`` as SGLang spells it (upper case)."""
    return None if text is None else text.strip().upper()


class SGLangTokenPool:
    """SGLang's token pool(s) of one replica, started once."""

    def __init__(self, dep: Deployment, options: SGLangOptions) -> None:
        self.dep = dep
        self.options = options
        self._started: SGLangPool | SGLangPoolTooSmall | None = None

    def start(self) -> SGLangPool | SGLangPoolTooSmall:
        """SGLang's start-up; a setting SGLang rejects raises its
        :class:`~kvcalc.engine.sglang.SGLangConfigError`."""
        from kvcalc.engine.sglang import sglang_pool

        if self._started is None:
            self._started = sglang_pool(self.dep, self.options)
        return self._started

    def max_batches(self, contexts: Sequence[int]) -> tuple[list[int], str | None]:
        """The requests of each length the pool holds, capped by ``max_running_requests`` (0
        past ``max_req_len - 1``)."""
        from kvcalc.engine.sglang import SGLangPool, sliding_window

        result = self.start()
        if not isinstance(result, SGLangPool):
            return [0] * len(contexts), result.message
        window = sliding_window(self.dep.model)
        return [result.replica_concurrency(context, window) for context in contexts], None

    def max_batch(self, context: int) -> int:
        from kvcalc.engine.sglang import SGLangConfigError

        try:
            return self.max_batches([context])[0][0]
        except SGLangConfigError:
            return 0

    def fraction(self, batch_per_replica: int, context: int) -> float:
        from kvcalc.engine.sglang import SGLangPool, sliding_window

        pool = self.start()
        if not isinstance(pool, SGLangPool):
            return math.inf
        # The replica's requests spread over its DP-attention ranks, each with its own pool.
        per_rank = math.ceil(batch_per_replica / pool.dp_size)
        return pool.pool_fraction(per_rank, context, sliding_window(self.dep.model))

    def longest_context(self) -> int | None:
        """The longest request the scheduler runs to the end (``max_req_len - 1``)."""
        from kvcalc.engine.sglang import SGLangPool

        pool = self.start()
        return pool.max_request_tokens if isinstance(pool, SGLangPool) else 0

    def batch(self, request: BatchRequest) -> SGLangAnswer:
        contexts = list(request.contexts or (DEFAULT_CONTEXT,))
        return SGLangAnswer(self.dep, self.start(), contexts)

    def caveats(self) -> list[str]:
        return total_note(self.dep, self.start().memory)

    def step_tokens(self) -> int:
        """``--chunked-prefill-size``, else the release's default for the GPU: SGLang's prompt
        chunk, which its default scheduler runs apart from the decodes (mixed chunks are
        opt-in); the step model shares one budget, as vLLM's scheduler does."""
        from kvcalc.engine.sglang import chunked_prefill_size

        return chunked_prefill_size(self.dep, self.options)

    def started_with(self) -> dict[str, Any]:
        return sglang_started_with(self.dep, self.start())


def total_note(dep: Deployment, memory: SGLangMemory) -> list[str]:
    """The estimated CUDA total's note where SGLang's free memory is estimated from that total
    (no ``--free-before-load`` given); else none."""
    return cuda_total_note(dep) if "free_before_load" in memory.estimated else []


class SGLangAnswer:
    def __init__(
        self, dep: Deployment, result: SGLangPool | SGLangPoolTooSmall, contexts: list[int]
    ) -> None:
        self.dep = dep
        self.result = result
        self.contexts = contexts

    def part(self, setup: Setup) -> EnginePart:
        dep, result, contexts = self.dep, self.result, self.contexts
        payload = sglang_payload(dep, result, contexts, setup)
        top = {**payload, **{f"gpus_{k}": v for k, v in setup.gpus.items()}}
        records = [{k: {**top, **row}.get(k) for k in SGLANG_FIELDS} for row in payload["contexts"]]
        return EnginePart(
            payload=payload,
            records=records,
            fields=SGLANG_FIELDS,
            lines=sglang_lines(dep, result, contexts, setup),
            fits=payload["fits"],
            lengths=contexts,
        )


def sglang_started_with(
    dep: Deployment, result: SGLangPool | SGLangPoolTooSmall
) -> dict[str, Any]:
    """The inputs SGLang started with, as its server arguments name them: the release, the
    static share and the sizes its defaults chose for the GPU, and the free memory it read
    (``estimated`` names those kvcalc estimated)."""
    memory = result.memory
    return {
        "sglang_version": str(result.version),
        "sglang_version_default": is_default_release(result.version),
        "gpu_memory_mib": memory.gpu_memory_mib,
        "mem_fraction_static": float(memory.mem_fraction_static),
        "chunked_prefill_size": memory.chunked_prefill_size,
        "cuda_graph_max_bs": memory.cuda_graph_max_bs,
        "free_before_load_bytes": memory.free_before_load_bytes,
        "cuda_total_estimated": bool(total_note(dep, memory)),
        "free_after_load_bytes": memory.free_after_load_bytes,
        "estimated": list(memory.estimated),
    }


def sglang_payload(
    dep: Deployment, result: SGLangPool | SGLangPoolTooSmall, contexts: Sequence[int], setup: Setup
) -> dict[str, Any]:
    """One JSON object: the issue's keys, the inputs SGLang read, and one row per context
    (``max_batch_per_replica``: SGLang's concurrency for that length on one server;
    ``max_batch``: that across the replicas; 0 for every context when the pool is too small)."""
    from kvcalc.engine.sglang import SGLangPool, sliding_window

    memory = result.memory
    payload: dict[str, Any] = {
        "model": dep.model.id,
        "gpus": dict(setup.gpus),
        "tp": dep.tp,
        "pp": dep.pp,
        **setup.layout,
        "engine": ENGINE.name,
        "kv_dtype": dep.kv_dtype.name,
        "kv_bits_per_value": setup.kv_bits_per_value,
        **sglang_started_with(dep, result),
        "cell_size_bytes": result.cells.cell_size,
        "mamba_bytes_per_request": result.cells.state_bytes_per_request or None,
        "max_mamba_cache_size": result.mamba_cache_size,
    }
    if result.dp_size > 1:
        # Only DP attention's payloads carry it: the pool figures are one DP rank's.
        payload["dp_attention_ranks"] = result.dp_size
    if dep.expert_parallel:
        # Only --ep-size's payloads carry it: the routed experts whole over these ranks.
        payload["expert_parallel_ranks"] = dep.moe_ranks
    if result.cells.draft_layers:
        payload["draft_layers"] = result.cells.draft_layers
    slots_each = getattr(result, "mamba_slots_per_request", None)
    if slots_each is not None:
        # Only hybrids with a state pool carry it: max_running_requests <= slots // this.
        payload["mamba_slots_per_request"] = slots_each
    if memory.prefill_graph_mib is not None:
        # Only releases from 0.5.10 reserve for the prefill CUDA graph: older payloads keep
        # their keys.
        payload["prefill_cuda_graph_reserved_mib"] = memory.prefill_graph_mib
    if not isinstance(result, SGLangPool):
        return {
            **payload,
            "fits": False,
            "reason": result.message,
            "max_total_num_tokens": 0,
            "max_running_requests": 0,
            "kv_pool_bytes": 0,
            "contexts": [context_payload(c, 0, dep.replicas) for c in contexts],
        }
    window = sliding_window(dep.model)
    refusals = [r for r in (result.refusal(c, window) for c in contexts) if r is not None]
    return {
        **payload,
        "fits": not refusals,
        "reason": refusals[0] if refusals else None,
        "page_size": result.page_size,
        "context_length": result.context_length,
        "max_total_num_tokens": result.max_total_num_tokens,
        "swa_tokens": result.swa_tokens,
        "max_running_requests": result.max_running_requests,
        "req_pool_size": result.req_pool_size,
        "max_req_len": result.max_req_len,
        "kv_pool_bytes": result.kv_pool_bytes,
        **dsv4_payload(result),
        "contexts": [
            context_payload(c, result.replica_concurrency(c, window), dep.replicas)
            for c in contexts
        ],
    }


def dsv4_payload(result: SGLangPool) -> dict[str, Any]:
    """DeepSeek-V4's pools (only for that model: other payloads keep their keys)."""
    sizes = result.dsv4
    if sizes is None:
        return {}
    return {
        "dsv4_pools": {
            "bytes_per_full_token": round(sizes.bytes_per_full_token, 4),
            "budget_bytes": sizes.budget_bytes,
            "c128_state_fixed_bytes": sizes.c128_state_fixed_bytes,
            "swa_tokens": sizes.swa_tokens,
            "c4_tokens": sizes.c4_tokens,
            "c128_tokens": sizes.c128_tokens,
            "c4_state_rows": sizes.c4_state_rows,
            "c128_state_rows": sizes.c128_state_rows,
        }
    }


def dsv4_lines(result: SGLangPool) -> list[str]:
    """SGLang's DSV4 sizing lines, as its log prints them (GiB as "GB"): 0.5.21+ add the
    unified-KV flags, the fixed pools that are zero on the default path and a "DSV4 SWA
    sizing" line (DeepSeek-V4's ratio is always declared, so "ratio (explicit)")."""
    from kvcalc.engine.sglang_dsv4 import rewritten

    sizes = result.dsv4
    if sizes is None:
        return []
    cost = f"bytes_per_full_token={sizes.bytes_per_full_token:.2f}, "
    budget = (
        f"available_bytes={sizes.budget_bytes / GiB:.2f} GB, "
        f"c128_state_fixed={sizes.c128_state_fixed_bytes / GiB:.2f} GB, "
    )
    pools = (
        f"DSV4 pool sizes: full={sizes.full_tokens}, swa={sizes.swa_tokens}, "
        f"c4={sizes.c4_tokens}, c128={sizes.c128_tokens}, c4_state={sizes.c4_state_rows}, "
        f"c128_state={sizes.c128_state_rows}"
    )
    if not rewritten(result.version):
        return [f"DSV4 memory calculation: {cost}{budget}full_token={sizes.full_tokens}", pools]
    zero = "0.00 GB"
    return [
        f"DSV4 SWA sizing: mode=ratio (explicit), swa_tokens={sizes.swa_tokens}, "
        f"swa_full_tokens_ratio={float(sizes.swa_ratio)}",
        "DSV4 memory calculation: unified=False, unified_fp8=False, dspark_draft_bf16=False, "
        f"{cost}{budget}c2_state_fixed={zero}, swa_fixed={zero}, swa_ring_fixed={zero}, "
        f"c4_state_fixed={zero}, full_token={sizes.full_tokens}",
        pools,
    ]


def context_payload(context: int, concurrency: int, replicas: int) -> dict[str, Any]:
    return {
        "context_tokens": context,
        "max_batch": concurrency * replicas,
        "max_batch_per_replica": concurrency,
        "fits": concurrency > 0,
    }


def is_default_release(version: SGLangVersion) -> bool:
    from kvcalc.engine.sglang import DEFAULT_VERSION

    return version == DEFAULT_VERSION


def _default_note(version: SGLangVersion) -> str:
    """Says when the rules are the default release's (the newest) rather than a given one."""
    from kvcalc.engine.sglang import NEWEST

    if not is_default_release(version):
        return ""
    if version == NEWEST:
        return " (kvcalc's default, the newest release)"
    return f" (kvcalc's default; --sglang-version {NEWEST} is the newest)"


def _swa_cell_note(result: SGLangPool | SGLangPoolTooSmall) -> str:
    """0.5.11+ price a full-pool token of a split pool as F + r x S (HybridSWAPoolConfigurator's
    cell_size), which the pool sizes divide the budget by."""
    from kvcalc.engine.sglang import SGLangPool, swa_pool_cell

    if not isinstance(result, SGLangPool) or result.swa_tokens is None or result.dsv4:
        return ""
    cell = swa_pool_cell(result)
    return "" if cell is None else f" (the split pools' cell: {float(cell):,.1f})"


def _log_units(memory: SGLangMemory) -> str:
    """The note that lets a reader match the avail-mem lines against SGLang's own log."""
    before = memory.free_before_load_bytes / GiB
    return f'(SGLang\'s log prints these GiB as "GB": avail mem={before:.2f} GB)'


def _source(memory: SGLangMemory, name: str) -> str:
    return " (estimated)" if name in memory.estimated else ""


def _prefill_graph(memory: SGLangMemory) -> str:
    if memory.prefill_graph_mib is None:
        return ""
    return f", prefill CUDA graph {memory.prefill_graph_mib:g} MiB"


def sglang_lines(
    dep: Deployment, result: SGLangPool | SGLangPoolTooSmall, contexts: Sequence[int], setup: Setup
) -> list[str]:
    """The text output: the set-up, the inputs, then SGLang's own log lines."""
    from kvcalc.engine.sglang import SGLangPool, sliding_window

    memory = result.memory
    rule = (
        "given"
        if memory.share_given
        else f"default for {memory.gpu_memory_mib:,} MiB{_source(memory, 'gpu_memory')}"
        if memory.chunked_prefill_size is None
        else f"default for {memory.gpu_memory_mib:,} MiB{_source(memory, 'gpu_memory')}, "
        f"chunked_prefill_size {memory.chunked_prefill_size}, "
        f"cuda_graph_max_bs {memory.cuda_graph_max_bs}{_prefill_graph(memory)}"
    ) + (
        f", x {memory.vlm_factor:.4f} for the vision tower" if memory.vlm_factor is not None
        else ""
    ) + (
        f"; {memory.multimodal_reserved_bytes // 2**20} MiB kept for the multimodal cache"
        if memory.multimodal_reserved_bytes else ""
    )
    lines = [
        f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: SGLang {result.version}"
        f"{_default_note(result.version)}, tp {dep.tp}, pp {dep.pp}, KV {setup.kv_label}",
        *(
            [f"DP attention: {result.dp_size} ranks of attention tp {dep.tp // result.dp_size}, "
             "each with the pools below for its own requests"]
            if result.dp_size > 1 else []
        ),
        *(
            [f"Expert parallelism: the routed experts whole over {dep.moe_ranks} ranks "
             "(--ep-size), the shared experts split over tp"]
            if dep.expert_parallel else []
        ),
        *setup.layout_notes,
        *total_note(dep, memory),
        f"mem_fraction_static={float(memory.mem_fraction_static):g} ({rule})",
        f"Load weight begin. avail mem={log_gib(memory.free_before_load_bytes)}"
        f"{_source(memory, 'free_before_load')}",
        f"Load weight end. avail mem={log_gib(memory.free_after_load_bytes)}"
        f"{_source(memory, 'free_after_load')}",
        _log_units(memory),
        f"cell_size: {result.cells.cell_size:,} bytes per token per rank"
        + (f" (with the draft's {result.cells.draft_layers} MTP layer(s))"
           if result.cells.draft_layers else "")
        + _swa_cell_note(result),
    ]
    if result.mamba_cache_size is not None:
        lines.append(
            f"Mamba Cache is allocated. max_mamba_cache_size: {result.mamba_cache_size:,} "
            f"({result.cells.state_bytes_per_request:,} bytes per request"
            + (f"; {result.mamba_slots_per_request} slots per running request"
               if isinstance(result, SGLangPool) and result.mamba_slots_per_request else "")
            + ")"
        )
    if not isinstance(result, SGLangPool):
        return [*lines, f"does not fit: {result.message}"]
    lines += dsv4_lines(result)
    if result.swa_tokens is not None and result.dsv4 is None:
        lines.append(
            f"Use Sliding window memory pool. full_layer_tokens={result.max_total_num_tokens}, "
            f"swa_layer_tokens={result.swa_tokens}"
        )
    lines += [
        f"KV Cache is allocated. #tokens: {result.max_total_num_tokens}, "
        f"pool {log_gib(result.kv_pool_bytes)} per rank",
        f"max_total_num_tokens={result.max_total_num_tokens}, "
        f"max_running_requests={result.max_running_requests}, "
        f"context_len={result.context_length}",
        f"request pool: {result.req_pool_size:,} slots, max_req_len {result.max_req_len:,}, "
        f"page_size {result.page_size}",
    ]
    window = sliding_window(dep.model)
    dp = result.dp_size
    lines += [
        f"Concurrency for {c:,} tokens per request: {result.concurrency(c, window):,}"
        + (f" per DP rank, {result.replica_concurrency(c, window):,} over {dp}" if dp > 1 else "")
        + (f" (longer than max_req_len {result.max_req_len:,} - 1)"
           if c > result.max_request_tokens else "")
        for c in contexts
    ]
    refusals = (result.refusal(c, window) for c in contexts)
    return lines + [f"does not fit: {r}" for r in refusals if r is not None][:1]


#: The keys of every CSV record: the pool, then one row per context.
SGLANG_FIELDS = (
    "model",
    *GPUS_COLUMNS,
    "tp",
    "pp",
    "sglang_version",
    "kv_dtype",
    "mem_fraction_static",
    "cell_size_bytes",
    "kv_pool_bytes",
    "max_total_num_tokens",
    "max_running_requests",
    "fits",
    "context_tokens",
    "max_batch",
    "max_batch_per_replica",
)



ENGINE: ServingEngine = SGLang()
