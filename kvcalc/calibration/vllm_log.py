"""A vLLM start-up log read into the figures it states: release, model, parallel sizes, memory
share, and each worker's budget terms (weights, activation peak, non-torch memory, CUDA graphs,
the KV memory left), then the block pool's token line and concurrency.

The lines read, with the releases that print them (reference vllm-releases.md section 1):

- ``version 0.19.0`` (the banner) / ``Initializing a V1 LLM engine (v0.19.0)``;
- ``tensor_parallel_size=2, pipeline_parallel_size=1, data_parallel_size=1,
  decode_context_parallel_size=1`` (the engine config), and 0.10.2-0.20's "Multiplying the GPU KV
  cache size by the ... dcp_world_size 8" under DCP, and its
  ``speculative_config=SpeculativeConfig(method='mtp', ..., num_spec_tokens=2)``;
- ``non-default args: {... 'gpu_memory_utilization': 0.95 ...}`` (and ``'enable_expert_parallel'``);
- ``Model loading took 7.51 GiB``, ``Available KV cache memory: 63.76 GiB`` (every release);
- ``Memory profiling takes ... torch peak memory increase: 1.89GiB; non-torch forward increase
  memory: 2.07GiB; weights memory: 7.51GiB`` (DEBUG, 0.11+);
- ``Actual usage is 7.51 GiB for weight, 1.89 GiB for peak activation, 2.07 GiB for non-torch
  memory, and 0.76 GiB for CUDAGraph memory`` (0.10.2-0.26), ``... for consumed memory (weights +
  non-torch) ...`` (0.27+), each ending "Current kv cache memory in use is X GiB" (every
  worker's own KV memory, before the minimum over workers);
- ``Estimated CUDA graph memory: 1.69 GiB total``; ``CUDA graph memory profiling is enabled``
  (0.21+: the estimate is subtracted);
- ``Memory after warmup: 62.10 GiB free, ... GiB kept for transient activations`` and
  ``Extended KV cache to 7776 blocks (60.75 GiB).`` (0.34's extensible KV cache);
- ``GPU KV cache size: 1,044,688 tokens`` and ``Maximum concurrency for 8,192 tokens per
  request: 127.53x`` (V1; one line from 0.28-era nightlies).

Pure text in, data out: nothing here knows kvcalc's model of the start-up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from fractions import Fraction

from kvcalc.calibration.lines import Logged, LogLine, first, number

_GIB = r"(-?\d+(?:\.\d+)?) ?GiB"
_RELEASE = (
    re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+\-]*)"),
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(\d+\.\d+\.\d+[^)]*)\)"),
)
_MODEL = (
    re.compile(r"\bmodel {2,}(\S+)$"),
    re.compile(r"Initializing an? (?:V1 )?LLM engine .*? with config: model='([^']+)'"),
)
_CONFIG_INT = {
    name: re.compile(rf"\b{key}=(\d+)")
    for name, key in (
        ("tp", "tensor_parallel_size"),
        ("pp", "pipeline_parallel_size"),
        ("dp", "data_parallel_size"),
        ("dcp", "decode_context_parallel_size"),
        ("max_model_len", "max_seq_len"),
    )
}
_ARG_INT = {
    name: re.compile(rf"non-default args: .*'{name}': (\d+)")
    for name in ("max_model_len", "max_num_batched_tokens", "max_num_seqs", "block_size",
                 "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
                 "decode_context_parallel_size")
}
_UTIL = (
    re.compile(r"non-default args: .*'gpu_memory_utilization': ([\d.]+)"),
    re.compile(r"Desired GPU memory utilization is \(([\d.]+),"),
)
_KV_DTYPE = (
    re.compile(r"non-default args: .*'kv_cache_dtype': '(\w+)'"),
    re.compile(r"\bkv_cache_dtype=(\w+)"),
)
_BATCHED = (
    re.compile(r"Defaulting max_num_batched_tokens to (\d+)"),
    re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)"),
)
_SEQS = re.compile(r"Defaulting max_num_seqs to (\d+)")
_PREFIX_CACHING = re.compile(r"non-default args: .*'enable_prefix_caching': (True|False)")
_EXPERT_PARALLEL = re.compile(r"non-default args: .*'enable_expert_parallel': (True|False)")
_EAGER = (
    re.compile(r"non-default args: .*'enforce_eager': (True|False)"),
    re.compile(r"\benforce_eager=(True|False)"),
)
#: The speculative draft: the engine config's ``SpeculativeConfig(method='mtp', model=...,
#: num_spec_tokens=2)`` (its ``__repr__``, config/speculative.py of 0.19.0), else the
#: non-default args' ``'speculative_config': {'method': 'qwen3_next_mtp', 'num_speculative_tokens':
#: 2}``; the method as the engine resolved it (0.20 renames ``qwen3_next_mtp`` to ``mtp``).
_SPEC_METHOD = (
    re.compile(r"speculative_config=SpeculativeConfig\(method='([\w-]+)'"),
    re.compile(r"non-default args: .*'speculative_config': \{[^}]*'method': '([\w-]+)'"),
)
_SPEC_TOKENS = (
    re.compile(r"speculative_config=SpeculativeConfig\([^)]*\bnum_spec_tokens=(\d+)"),
    re.compile(
        r"non-default args: .*'speculative_config': \{[^}]*'num_speculative_tokens': (\d+)"
    ),
)
#: 0.34's extensible KV cache turned off by an argument, or by vLLM itself where KV transfers
#: within a host would lose NVLink without an IMEX channel (``_resolve_extensible_kv_cache``,
#: vllm/config/vllm.py of 0.34.0).
_EXTENSIBLE = (
    re.compile(r"non-default args: .*'enable_extensible_kv_cache': (True|False)"),
    re.compile(r"Extensible KV cache (off): "),
)
_TOTAL = (
    re.compile(r"total_memory=" + _GIB),
    re.compile(r"Free memory on device \([\d.]+/" + _GIB + r"\)"),
)
_REQUESTED = (
    re.compile(r"requested memory: " + _GIB),
    re.compile(r"Desired GPU memory utilization is \([\d.]+, " + _GIB + r"\)"),
)
_LOADING = re.compile(r"Model loading took " + r"(\d+(?:\.\d+)?) ?Gi?B")
_PROFILED = re.compile(
    r"torch peak memory increase: " + _GIB + r"; non-torch forward increase memory: " + _GIB
    + r"; weights memory: " + _GIB
)
_ACTUAL = re.compile(
    r"Actual usage is " + _GIB + r" for weight, " + _GIB + r" for peak activation, " + _GIB
    + r" for non-torch memory, and " + _GIB + r" for CUDAGraph memory"
)
_CONSUMED = re.compile(
    r"Actual usage is " + _GIB + r" for consumed memory \(weights \+ non-torch\)(?:, " + _GIB
    + r" for peak activation, and " + _GIB + r" for CUDAGraph memory)?"
)
_V0 = re.compile(
    r"model weights take " + _GIB + r"; non_torch_memory takes " + _GIB
    + r"; PyTorch activation peak memory takes " + _GIB
)
_KV_MEMORY = re.compile(r"Available KV cache memory: " + _GIB)
#: 0.34's extensible KV cache: the size committed after warmup ("Extended KV cache to %d blocks
#: (%.2f GiB).", ``extend_kv_cache`` in vllm/v1/worker/extensible_kv_cache.py of 0.34.0), which
#: replaces the profile's "Available KV cache memory" (then only the reserved capacity).
_KV_EXTENDED = re.compile(r"Extended KV cache to \d+ blocks \(" + _GIB + r"\)")
#: 0.34's measure after warmup (``measure_kv_cache_blocks``, extensible_kv_cache.py of 0.34.0):
#: the free memory, and what it keeps free for transient activations (the larger of the
#: allocated peak and torch's reservation growth).
_AFTER_WARMUP = re.compile(
    r"Memory after warmup: " + _GIB + r" free, (?:" + _GIB + r" committed to the KV cache, )?"
    + _GIB + r" kept for transient activations"
)
#: The post-capture summary's last clause (0.12-0.27; 0.10.2/0.11 print bytes, not read).
_KV_IN_USE = re.compile(r"Current kv cache memory in use is " + _GIB)
_GRAPH_ESTIMATE = re.compile(r"Estimated CUDA graph memory: " + _GIB + " total")
_GRAPH_TAKEN = re.compile(r"Graph capturing finished in .*? took " + _GIB)
_GRAPH_SUBTRACTED = re.compile(r"CUDA graph memory profiling is enabled")
_TOKENS = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
#: 0.10.2-0.20's line before a DCP token line: "... by the dcp_world_size 8." (to 0.11.2), "...
#: by the cp_world_size 8 (pcp_world_size 1 * dcp_world_size 8)." (from 0.12).
_DCP_LINE = re.compile(r"Multiplying the GPU KV cache size by the .*\bdcp_world_size (\d+)")
_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_BLOCKS = re.compile(r"num_gpu_blocks(?: is)?: (\d+)")
#: Lines only vLLM prints: one is enough to call the file a vLLM log.
_MARKERS = (_TOKENS, _KV_MEMORY, re.compile(r"LLM engine \(v"), re.compile(r"vllm\.|\[gpu_worker"))
#: A worker's label naming its pipeline stage (``Worker_PP1``, ``Worker_PP1_TP0``).
_STAGE = re.compile(r"PP(\d+)")


@dataclass(frozen=True)
class VLLMWorker:
    """What one worker printed of its budget (None: not printed)."""

    label: str
    stage: int
    weights: Logged | None = None
    activation_peak: Logged | None = None
    non_torch: Logged | None = None
    consumed: Logged | None = None
    """0.27+: weights + non-torch, measured as one block."""
    cuda_graph: Logged | None = None
    """The graphs' pool after capture (actual)."""
    cuda_graph_estimate: Logged | None = None
    kv_memory: Logged | None = None
    free_after_warmup: Logged | None = None
    """0.34: the free memory measured after warmup and graph capture."""
    transient_kept: Logged | None = None
    """0.34: what the cache leaves free for transient activations."""


@dataclass(frozen=True)
class VLLMLog:
    """The figures a vLLM start-up log states (None: the log does not state it)."""

    release: str | None
    model: str | None
    tp: int | None
    pp: int | None
    dp: int | None
    dcp: int | None
    gpu_memory_utilization: Fraction | None
    max_model_len: int | None
    max_num_batched_tokens: int | None
    max_num_seqs: int | None
    enable_prefix_caching: bool | None
    """``--enable-prefix-caching`` / ``--no-enable-prefix-caching`` as the non-default args
    give it (None: not given, the release's default)."""
    kv_cache_dtype: str | None
    block_size: int | None
    total_memory: Logged | None
    requested_memory: Logged | None
    workers: tuple[VLLMWorker, ...]
    cuda_graph_subtracted: bool
    kv_cache_tokens: int | None
    max_concurrency: float | None
    concurrency_tokens: int | None
    num_gpu_blocks: int | None = None
    enforce_eager: bool | None = None
    """``--enforce-eager`` as the engine config or the non-default args give it."""
    enable_extensible_kv_cache: bool | None = None
    """0.34's extensible KV cache as the non-default args give it, or off where vLLM says so."""
    speculative_method: str | None = None
    """The speculative draft's method (``mtp``, ``eagle``, ``ngram``, ...); None: no draft."""
    num_speculative_tokens: int | None = None
    enable_expert_parallel: bool | None = None
    """``--enable-expert-parallel`` as the non-default args give it."""
    notes: tuple[str, ...] = field(default=())

    @property
    def kv_memory(self) -> Logged | None:
        """The "Available KV cache memory" line (one worker prints it)."""
        return next((w.kv_memory for w in self.workers if w.kv_memory is not None), None)

    def first_of(self, term: str) -> Logged | None:
        """The first worker's figure for ``term`` that printed one."""
        return next((getattr(w, term) for w in self.workers if getattr(w, term) is not None),
                    None)


def is_vllm_log(lines: list[LogLine]) -> bool:
    return any(p.search(line.text) for line in lines[:50_000] for p in _MARKERS)


def _one(patterns: tuple[re.Pattern[str], ...], lines: list[LogLine]) -> str | None:
    for pattern in patterns:
        found = first(pattern, lines)
        if found is not None:
            return found
    return None


def _int(text: str | None) -> int | None:
    return None if text is None else number(text)


def _flag(text: str | None) -> bool | None:
    return None if text is None else text == "True"


def _workers(lines: list[LogLine]) -> tuple[VLLMWorker, ...]:
    """Each worker's budget figures, by process id: a worker prints its snapshot as ``Worker``
    and its later lines as ``Worker_TP1``, the same pid."""
    labels: dict[object, str] = {}
    figures: dict[object, dict[str, Logged]] = {}
    for line in lines:
        key: object = line.pid if line.pid is not None else line.worker
        label = labels.get(key, "")
        if line.worker and (not label or len(line.worker) > len(label)):
            labels[key] = line.worker
        found = figures.setdefault(key, {})
        text = line.text

        def put(term: str, value: str, *, overwrite: bool = True,
                into: dict[str, Logged] = found) -> None:
            if overwrite or term not in into:
                into[term] = Logged(value)

        if (m := _ACTUAL.search(text)) is not None:
            for term, value in zip(("weights", "activation_peak", "non_torch", "cuda_graph"),
                                   m.groups(), strict=True):
                put(term, value)
        elif (m := _CONSUMED.search(text)) is not None:
            for term, value in zip(("consumed", "activation_peak", "cuda_graph"), m.groups(),
                                   strict=True):
                if value is not None:  # a quote may stop after the first clause
                    put(term, value)
        elif (m := _PROFILED.search(text)) is not None:
            put("activation_peak", m[1], overwrite=False)
            put("non_torch", m[2], overwrite=False)
            put("weights", m[3], overwrite=False)
        elif (m := _V0.search(text)) is not None:
            put("weights", m[1])
            put("non_torch", m[2])
            put("activation_peak", m[3])
        elif (m := _LOADING.search(text)) is not None:
            put("weights", m[1], overwrite=False)
        elif (m := _AFTER_WARMUP.search(text)) is not None:
            put("free_after_warmup", m[1])
            put("transient_kept", m[3])
        elif (m := _KV_EXTENDED.search(text)) is not None:
            put("kv_memory", m[1])  # printed after the "Available" line, and replaces it
        elif (m := _KV_MEMORY.search(text)) is not None:
            put("kv_memory", m[1])
        if (m := _KV_IN_USE.search(text)) is not None:
            put("kv_memory", m[1], overwrite=False)
        elif (m := _GRAPH_ESTIMATE.search(text)) is not None:
            put("cuda_graph_estimate", m[1])
        elif (m := _GRAPH_TAKEN.search(text)) is not None:
            put("cuda_graph", m[1], overwrite=False)
    workers = []
    for key, found in figures.items():
        if not found:
            continue
        label = labels.get(key, "") or "worker"
        stage = _STAGE.search(label)
        workers.append(VLLMWorker(label, int(stage[1]) if stage else 0, **found))
    return tuple(workers)


def parse_vllm_log(lines: list[LogLine]) -> VLLMLog:
    """The figures ``lines`` state (every field None that they do not)."""
    tokens = first(_TOKENS, lines)
    concurrency = next((m for line in lines if (m := _CONCURRENCY.search(line.text))), None)
    util = _one(_UTIL, lines)

    def config(name: str, arg: str | None = None) -> int | None:
        value = _int(first(_ARG_INT[arg], lines)) if arg else None
        return value if value is not None else _int(first(_CONFIG_INT[name], lines))

    total = _one(_TOTAL, lines)
    requested = _one(_REQUESTED, lines)
    return VLLMLog(
        release=_one(_RELEASE, lines),
        model=_one(_MODEL, lines),
        tp=config("tp", "tensor_parallel_size"),
        pp=config("pp", "pipeline_parallel_size"),
        dp=config("dp", "data_parallel_size"),
        dcp=config("dcp", "decode_context_parallel_size") or _int(first(_DCP_LINE, lines)),
        gpu_memory_utilization=None if util is None else Fraction(util),
        max_model_len=config("max_model_len", "max_model_len")
        or (_int(concurrency[1]) if concurrency else None),
        max_num_batched_tokens=_int(first(_ARG_INT["max_num_batched_tokens"], lines))
        or _int(_one(_BATCHED, lines)),
        max_num_seqs=_int(first(_ARG_INT["max_num_seqs"], lines)) or _int(first(_SEQS, lines)),
        enable_prefix_caching=_flag(first(_PREFIX_CACHING, lines)),
        kv_cache_dtype=_one(_KV_DTYPE, lines),
        block_size=_int(first(_ARG_INT["block_size"], lines)),
        total_memory=None if total is None else Logged(total),
        requested_memory=None if requested is None else Logged(requested),
        workers=_workers(lines),
        cuda_graph_subtracted=any(_GRAPH_SUBTRACTED.search(line.text) for line in lines),
        kv_cache_tokens=_int(tokens),
        max_concurrency=float(concurrency[2]) if concurrency else None,
        concurrency_tokens=_int(concurrency[1]) if concurrency else None,
        num_gpu_blocks=_int(first(_BLOCKS, lines)),
        enforce_eager=_flag(_one(_EAGER, lines)),
        enable_extensible_kv_cache=_flag(_one(_EXTENSIBLE, lines)),  # "off" reads as False
        speculative_method=_one(_SPEC_METHOD, lines),
        num_speculative_tokens=_int(_one(_SPEC_TOKENS, lines)),
        enable_expert_parallel=_flag(first(_EXPERT_PARALLEL, lines)),
    )
