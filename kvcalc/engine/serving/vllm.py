"""vLLM (``--engine vllm``): its block pool as vLLM sizes it at start-up
(:mod:`kvcalc.engine.vllm`), started with ``--max-model-len`` = each request length, under the
rules of the release asked for (``--vllm-version``, :mod:`kvcalc.engine.vllm_releases`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kvcalc.engine.inputs import Input
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
    refusal,
)
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.vllm import KVCacheTooSmall, VLLMInputs, VLLMKVCache

_NAME = "vllm"
#: What each of its own inputs declares: the engine that reads it, where the help lists it.
_OWN: dict[str, Any] = {"engine": _NAME, "panel": "vLLM engine"}


class VLLM(Engine):
    name = _NAME
    label = "vLLM"
    summary = "vllm: vLLM's exact block count (0.10-0.33)"
    plans = True
    takes_lengths = True
    inputs: tuple[Input, ...] = (
        Input("vllm_version", "text", "release, 0.10-0.33 [default: 0.33.0]",
              metavar="X.Y[.Z]", **_OWN),
    )
    options = tuple(i.name for i in inputs)
    refusals = Refusals({
        "prefix_shared": "vLLM's block count does not depend on prefix caching",
    })

    def engine_options(self, given: Given) -> str | None:
        """The release asked for (None: the newest), refused unless kvcalc has its rules."""
        from kvcalc.engine.vllm_releases import VLLMVersionError, vllm_release

        version = given.get("vllm_version")
        try:
            vllm_release(version)
        except VLLMVersionError as exc:
            raise InputRefusal(exc.template, "vllm_version") from None
        return version

    def check_model(self, model: ModelSpec, given: Given) -> None:
        from kvcalc.engine.vllm import backend_blocks

        if "block_size" in given and backend_blocks(model):
            model_id = literal(model.id)
            raise refusal(
                "block_size",
                f"vLLM pages {model_id}'s caches at its backend's own blocks "
                "(64-token windows, 256-token latents); drop it",
            )

    def check_kv_format(self, kv: KVFormat) -> None:
        from kvcalc.engine.vllm import VLLMConfigError, vllm_kv_dtype

        try:
            vllm_kv_dtype(kv)
        except VLLMConfigError as exc:
            raise InputRefusal("{kv_dtype}: " + literal(str(exc)),
                               "kv_dtype") from None

    def pool(self, dep: Deployment, options: Any = None) -> VLLMPool:
        return VLLMPool(dep, options)


class VLLMPool:
    """vLLM's block pool of one replica, started once per request length (its max_model_len)."""

    def __init__(self, dep: Deployment, version: str | None = None) -> None:
        from kvcalc.engine.vllm import vllm_inputs

        self.dep = dep
        self.inputs = vllm_inputs(dep, version)
        self._started: dict[int, VLLMKVCache | KVCacheTooSmall] = {}

    def start(self, max_model_len: int) -> VLLMKVCache | KVCacheTooSmall:
        """vLLM started with ``--max-model-len``; a setting vLLM rejects raises its
        :class:`~kvcalc.engine.vllm.VLLMConfigError`."""
        from kvcalc.engine.vllm import vllm_kv_cache_for

        result = self._started.get(max_model_len)
        if result is None:
            result = self._started[max_model_len] = vllm_kv_cache_for(
                self.dep, max_model_len, self.inputs
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
            batches.append(math.floor(result.max_concurrency))
        return batches, None

    def max_batch(self, context: int) -> int:
        from kvcalc.engine.vllm import KVCacheTooSmall, VLLMConfigError

        try:
            result = self.start(context)
        except VLLMConfigError:
            return 0
        if isinstance(result, KVCacheTooSmall):
            return 0
        return math.floor(result.max_concurrency)

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
        return VLLMAnswer(self.dep, [self.start(length) for length in lengths], self.inputs)


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


def vllm_payload(result: VLLMKVCache | KVCacheTooSmall, replicas: int) -> dict[str, Any]:
    """One request length: every key whether it fits or not (null where vLLM prints none), so
    the JSON holds what the CSV does. ``max_batch_per_replica`` is vLLM's "Maximum
    concurrency" floored (whole requests), ``max_batch`` that across the replicas."""
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


def vllm_lines(result: VLLMKVCache | KVCacheTooSmall) -> list[str]:
    """vLLM's own start-up lines, as its log prints them."""
    from kvcalc.engine.units import GiB
    from kvcalc.engine.vllm import KVCacheTooSmall

    if isinstance(result, KVCacheTooSmall):
        return [f"max_model_len {result.setup.max_model_len:,}: does not fit: {result.message}"]
    avail = min(s.available_bytes for s in result.stages)
    return [
        f"Available KV cache memory: {avail / GiB:.2f} GiB",
        f"num_gpu_blocks: {result.num_blocks:,} ({len(result.grouping.groups)} KV cache "
        f"group(s), {result.blocks_per_request:,} blocks per request)",
        f"GPU KV cache size: {result.kv_cache_size_tokens:,} tokens",
        f"Maximum concurrency for {result.setup.max_model_len:,} tokens per request: "
        f"{result.max_concurrency:.2f}x",
    ]


#: The keys of every vLLM CSV record, fitting or not (a missing figure is an empty cell).
VLLM_FIELDS = (
    "model",
    *GPUS_COLUMNS,
    "tp",
    "pp",
    "kv_dtype",
    "block_size",
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


def budget_inputs(dep: Deployment, inputs: VLLMInputs) -> dict[str, Any]:
    """The inputs the start-up used: the release, and the values the profiler's budget read
    (null where the KV budget was given, so that it read none of them)."""
    from kvcalc.engine.vllm import vllm_memory_terms

    estimated = dep.kv_memory_bytes is None and dep.reserve is None
    graphs = None
    if estimated and dep.overhead_bytes is None:
        graphs = max(t.cudagraph_bytes for t in vllm_memory_terms(dep, inputs))
    return {
        "vllm_version": inputs.version,
        "gpu_memory_utilization": float(inputs.gpu_memory_utilization) if estimated else None,
        "max_num_batched_tokens": inputs.max_num_batched_tokens,
        "max_num_seqs": inputs.max_num_seqs,
        "cudagraph_memory_bytes": graphs,
    }


class VLLMAnswer:
    """vLLM's start-up at each request length."""

    def __init__(
        self, dep: Deployment, results: list[VLLMKVCache | KVCacheTooSmall], inputs: VLLMInputs
    ) -> None:
        self.dep = dep
        self.results = results
        self.inputs = inputs

    def part(self, setup: Setup) -> EnginePart:
        from kvcalc.engine.vllm import KVCacheTooSmall, backend_blocks

        dep, results, inputs = self.dep, self.results, self.inputs
        # DeepSeek-V4 is paged at its backend's own blocks by vLLM 0.33's rules, not --block-size.
        own_blocks = backend_blocks(dep.model)
        head = {
            "model": dep.model.id,
            "gpus": dict(setup.gpus),
            "tp": dep.tp,
            "pp": dep.pp,
            "engine": ENGINE.name,
            "kv_dtype": dep.kv_dtype.name,
            "kv_bits_per_value": setup.kv_bits_per_value,
            "block_size": None if own_blocks else dep.block_size,
            **budget_inputs(dep, inputs),
            **setup.layout,
        }
        per_length = [vllm_payload(r, dep.replicas) for r in results]
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
        release, block = (inputs.version, f"block {dep.block_size}")
        if own_blocks:
            block = "the backend's blocks (64-token windows, 256-token latents)"
        header = (
            f"{dep.model.name} ({dep.model.id}) on {dep.gpus}: vLLM {release}, tp {dep.tp}, "
            f"pp {dep.pp}, KV {setup.kv_label}, {block}"
        )
        too_small = any(isinstance(r, KVCacheTooSmall) for r in results)
        return EnginePart(
            payload=payload,
            records=records,
            fields=VLLM_FIELDS,
            lines=[header, *setup.layout_notes, *(line for r in results for line in vllm_lines(r))],
            fits=not too_small,
            lengths=[r.setup.max_model_len for r in results],
        )


ENGINE: ServingEngine = VLLM()
