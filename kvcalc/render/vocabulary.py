"""The JSON vocabulary: every command's document declared as typed dictionaries, and every key's
unit and meaning, once.

The payload builders of :mod:`kvcalc.render` produce these shapes; :mod:`kvcalc.render.schema`
turns them into the JSON Schemas of docs/schema/ and the table of docs/json.md, and the tests
validate every command's real output against them (extra keys refused) and check that a key has
one type and one unit wherever it appears. Import this module only to generate or check (it
imports pydantic's typing helpers); the commands never load it.

Rules the names follow (docs/json.md repeats them):

- a byte figure with no suffix is the whole model's (all the GPUs of a replica); ``_per_gpu``
  marks one GPU's share (``kv_bytes_per_sequence`` vs ``kv_bytes_per_sequence_per_gpu``); an
  engine's own figures, named after its log, are one rank's, as the engine reports them;
- ``tpot_seconds``, ``ttft_seconds`` and ``tokens_per_second`` are the realistic estimate of
  `kvcalc decode`; the bound is beside them with a ``roofline_`` prefix;
- ``max_batch`` is the sequences of a context that fit at once across all replicas,
  ``max_batch_per_replica`` one replica's (for an engine, its own figure for one server);
- ``contexts`` is the list of per-context entries, each with its ``context_tokens``;
- ``gpus`` is a GPU set (:class:`GpuSet`), ``model`` a registry id, ``model_name`` its name.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

from pydantic import ConfigDict, with_config
from typing_extensions import NotRequired, TypedDict

from kvcalc.engine.hardware import SMI_ABOVE_CUDA_BYTES
from kvcalc.engine.units import MiB

#: Every declaration refuses keys it does not name, so a key added to a payload and not here
#: fails the tests (and so is documented before it ships).
STRICT = ConfigDict(extra="forbid", strict=True)

SchemaVersion = Literal[2]


# ------------------------------------------------------------------ shared objects


@with_config(STRICT)
class GpuSet(TypedDict):
    """The GPUs a deployment runs on (all its replicas), in the words of every command."""

    id: str
    label: str
    accelerator: str
    count: int


@with_config(STRICT)
class EvictionPolicy(TypedDict):
    """An eviction policy as every report states it (kvcalc.render.eviction)."""

    policy: str
    lossy: bool
    consequence: str | None
    parameters: dict[str, int | float]


@with_config(STRICT)
class Layout(TypedDict):
    """The layout keys of every deployment object (kvcalc.render.layout)."""

    replicas: int
    tp_given: bool
    tp_reason: str | None
    tp_nodes: int | None
    kv_head_copies: int | None
    layout_notes: list[str]


@with_config(STRICT)
class Deployment(Layout):
    """What names a deployment in the documents that state one whole."""

    model: str
    gpus: GpuSet
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str


# ------------------------------------------------------------------ size


@with_config(STRICT)
class SizeGroup(TypedDict):
    kind: str
    detail: str
    layers: int
    kv_bytes_per_token: int
    tokens_held: int
    state_bytes: int
    kv_bytes_per_sequence: int


@with_config(STRICT)
class SizeContext(TypedDict):
    context_tokens: int
    tokens_held: int
    kv_bytes_per_sequence: int
    kv_bytes_total: int
    groups: list[SizeGroup]
    mtp: NotRequired[SizeGroup]


@with_config(STRICT)
class SizeDocument(TypedDict):
    """`kvcalc size`: KV bytes per token, per sequence and per batch, by layer group."""

    schema_version: SchemaVersion
    model: str
    model_name: str
    kv_dtype: str
    kv_bits_per_value: float | None
    batch: int
    kv_bytes_per_token: int
    eviction: EvictionPolicy
    contexts: list[SizeContext]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ batch


@with_config(STRICT)
class BatchContext(TypedDict):
    context_tokens: int
    tokens_held: int
    max_batch: int
    max_batch_per_replica: int
    kv_bytes_per_sequence_per_gpu: int


@with_config(STRICT)
class BatchDocument(Layout):
    """`kvcalc batch MODEL`: the sequences that fit at each context, by the budget formula."""

    schema_version: SchemaVersion
    model: str
    model_name: str
    gpus: GpuSet
    tp: int
    pp: int
    kv_dtype: str
    kv_bits_per_value: float | None
    weight_dtype: str
    block_size: int
    eviction: EvictionPolicy
    gpu_memory_bytes: int
    usable_bytes_per_gpu: int
    weights_bytes_per_gpu: int
    overhead_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    kv_tokens_capacity: int
    max_context_at_batch_1: int | None
    fits: bool
    reason: str | None
    contexts: list[BatchContext]
    warnings: NotRequired[list[str]]


@with_config(STRICT)
class RegistryContext(TypedDict):
    context_tokens: int
    max_batch: int
    beyond_max_context: bool


@with_config(STRICT)
class RegistryRow(TypedDict):
    model: str
    fits: bool
    reason: str | None
    layout: str | None
    tp: int | None
    pp: int | None
    replicas: int | None
    tp_given: bool | None
    tp_reason: str | None
    tp_nodes: int | None
    kv_head_copies: int | None
    layout_notes: list[str]
    weights_bytes_per_gpu: int | None
    kv_budget_bytes_per_gpu: int | None
    kv_tokens_capacity: int | None
    max_context_at_batch_1: int | None
    contexts: list[RegistryContext]


@with_config(STRICT)
class BatchRegistryDocument(TypedDict):
    """`kvcalc batch --gpus G` without a model: one row per registry model."""

    schema_version: SchemaVersion
    gpus: GpuSet
    weight_dtype: str | None
    kv_dtype: str | None
    as_attention: str | None
    context_tokens_list: list[int]
    models: list[RegistryRow]
    warnings: NotRequired[list[str]]


@with_config(STRICT)
class VllmContext(TypedDict):
    context_tokens: int
    max_model_len: int
    fits: bool
    reason: str | None
    max_batch: int
    max_batch_per_replica: int
    num_blocks: int | None
    kv_cache_tokens: int | None
    blocks_per_request: int | None
    max_concurrency: float | None
    kv_cache_groups: int | None
    available_bytes_per_gpu: int | None
    needed_bytes: int | None
    available_bytes: int | None
    estimated_max_model_len: int | None


@with_config(STRICT)
class EngineDocument(Layout):
    """What every serving engine's `kvcalc batch MODEL --engine E` document holds first."""

    schema_version: SchemaVersion
    model: str
    gpus: GpuSet
    tp: int
    pp: int
    engine: str
    kv_dtype: str
    kv_bits_per_value: float | None


@with_config(STRICT)
class VllmEngineInputs(TypedDict):
    """The inputs vLLM started with, as ``vllm serve`` names them (kvcalc batch, and the
    ``engine_inputs`` of decode, plan and check)."""

    vllm_version: str
    gpu_memory_utilization: float | None
    kv_cache_memory_bytes: int | None
    max_num_batched_tokens: int
    max_num_seqs: int
    cudagraph_memory_bytes: int | None
    decode_context_parallel_size: int
    data_parallel_size: int | None
    enable_expert_parallel: bool
    enforce_eager: bool
    enable_extensible_kv_cache: bool
    enable_prefix_caching: bool
    mamba_cache_mode: str | None
    num_speculative_tokens: int
    draft_layers: int
    draft_weight_bytes_per_gpu: int


@with_config(STRICT)
class BatchVllmDocument(EngineDocument, VllmEngineInputs):
    """`kvcalc batch MODEL --engine vllm`: vLLM's start-up figures per request length."""

    block_size: int | None
    kv_cache_upper_bound: bool
    kv_sized_after_warmup: bool
    cuda_total_estimated: bool
    num_blocks: int | None
    kv_cache_tokens: int | None
    max_concurrency: float | None
    fits: bool
    reason: str | None
    contexts: list[VllmContext]
    warnings: NotRequired[list[str]]


@with_config(STRICT)
class SglangContext(TypedDict):
    context_tokens: int
    max_batch: int
    max_batch_per_replica: int
    fits: bool


@with_config(STRICT)
class SglangDsv4Pools(TypedDict):
    """DeepSeek-V4's pools as SGLang's DSV4PoolConfigurator sizes them (one rank)."""

    bytes_per_full_token: float
    budget_bytes: int
    c128_state_fixed_bytes: int
    swa_tokens: int
    c4_tokens: int
    c128_tokens: int
    c4_state_rows: int
    c128_state_rows: int


@with_config(STRICT)
class SglangEngineInputs(TypedDict):
    """The inputs SGLang started with, as its server arguments name them (kvcalc batch, and
    the ``engine_inputs`` of decode and check)."""

    sglang_version: str
    sglang_version_default: bool
    gpu_memory_mib: int
    mem_fraction_static: float
    chunked_prefill_size: int | None
    cuda_graph_max_bs: int | None
    free_before_load_bytes: int
    cuda_total_estimated: bool
    free_after_load_bytes: int
    estimated: list[str]


@with_config(STRICT)
class BatchSglangDocument(EngineDocument, SglangEngineInputs):
    """`kvcalc batch MODEL --engine sglang`: SGLang's start-up figures and pools."""

    cell_size_bytes: int
    mamba_bytes_per_request: int | None
    max_mamba_cache_size: int | None
    prefill_cuda_graph_reserved_mib: NotRequired[float]
    fits: bool
    reason: str | None
    page_size: NotRequired[int]
    context_length: NotRequired[int]
    max_total_num_tokens: int
    swa_tokens: NotRequired[int | None]
    max_running_requests: int
    req_pool_size: NotRequired[int]
    max_req_len: NotRequired[int]
    kv_pool_bytes: int
    dsv4_pools: NotRequired[SglangDsv4Pools]
    dp_attention_ranks: NotRequired[int]
    expert_parallel_ranks: NotRequired[int]
    draft_layers: NotRequired[int]
    mamba_slots_per_request: NotRequired[int]
    contexts: list[SglangContext]
    warnings: NotRequired[list[str]]


@with_config(STRICT)
class TrtllmContext(TypedDict):
    context_tokens: int
    blocks_per_sequence: int | None
    max_batch: int
    max_batch_per_replica: int
    fits: bool


@with_config(STRICT)
class TrtllmEngineInputs(TypedDict):
    """The ``KvCacheConfig`` TensorRT-LLM started with and the free memory it read (the
    ``engine_inputs`` of decode, plan and check; kvcalc batch holds the same keys)."""

    free_gpu_memory_fraction: float
    tokens_per_block: int
    max_tokens_cap: int | None
    free_memory_bytes: int | None
    estimated: list[str] | None


#: A pool's ``engine_inputs`` (null: the budget formula, which reads no engine's).
EngineInputs = VllmEngineInputs | SglangEngineInputs | TrtllmEngineInputs | None


@with_config(STRICT)
class BatchTrtllmDocument(EngineDocument):
    """`kvcalc batch MODEL --engine trtllm`: TensorRT-LLM's start-up figures and pool."""

    gpu_memory_bytes: int
    cuda_total_estimated: bool
    free_gpu_memory_fraction: float | None
    tokens_per_block: int | None
    max_tokens_cap: int | None
    free_memory_bytes: int | None
    estimated: list[str] | None
    kv_bytes_per_token_per_gpu: int | None
    kv_budget_bytes_per_gpu: int | None
    max_tokens: int | None
    num_blocks: int
    kv_cache_tokens: int
    kv_pool_bytes: int | None
    max_seq_len: int | None
    max_batch_size: int | None
    fits: bool
    reason: str | None
    contexts: list[TrtllmContext]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ decode


@with_config(STRICT)
class DecodeContext(TypedDict):
    context_tokens: int
    tokens_held: int
    batch: int
    weight_bytes_read: int
    kv_bytes_read: int
    flops: int
    weight_read_seconds: float
    kv_read_seconds: float
    compute_seconds: float | None
    roofline_tpot_seconds: float
    roofline_tokens_per_second: float
    bound: str
    kv_share: float
    memory_estimate_seconds: float | None
    compute_estimate_seconds: float | None
    communication_seconds: float | None
    step_overhead_seconds: float | None
    layer_kernel_seconds: float | None
    tpot_seconds: float | None
    tpot_low_seconds: float | None
    tpot_high_seconds: float | None
    tokens_per_second: float | None
    tokens_per_second_low: float | None
    tokens_per_second_high: float | None
    ttft_seconds: float | None
    ttft_low_seconds: float | None
    ttft_high_seconds: float | None


@with_config(STRICT)
class DecodeProfile(TypedDict):
    """How the engine or runtime runs a decode step (kvcalc.engine.profiles)."""

    profile: str
    profile_label: str
    cuda_graphs: bool
    allreduce: str
    tensor_parallel: bool
    profile_step_overhead_seconds: float | None
    layer_overhead_seconds: float
    allreduce_latency_seconds: float | None
    kernels: str
    build: int | None
    f16_matvec_hbm_share: float
    f16_matvec_warp_per_row: bool
    profile_sources: list[str]


@with_config(STRICT)
class DecodeServing(TypedDict):
    """One replica's steady state under `decode --request-rate` (kvcalc.engine.workload)."""

    input_len: int
    output_len: int
    request_rate: float
    max_num_batched_tokens: int
    request_rate_per_replica: float
    stable: bool
    reason: str | None
    decode_batch: int | None
    concurrency_per_replica: float | None
    prefill_tokens_per_step: float | None
    prefill_utilization: float | None
    queue_seconds: float | None
    tpot_seconds: float | None
    ttft_seconds: float | None


@with_config(STRICT)
class DecodeDocument(Deployment):
    """`kvcalc decode`: one decode step per context, realistic estimate and roofline."""

    schema_version: SchemaVersion
    engine: str
    kv_bits_per_value: float | None
    nodes: int
    link: Literal["none", "scale-up", "pcie", "network", "unknown"]
    accuracy_regime: str
    mbu: float
    efficiency_basis: Literal["measured", "generic"]
    decode_profile: DecodeProfile
    engine_inputs: EngineInputs
    serving: DecodeServing | None
    eviction: EvictionPolicy
    fits: bool
    reason: str | None
    contexts: list[DecodeContext]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ sweep


@with_config(STRICT)
class SweepPoint(TypedDict):
    context_tokens: int
    batch: int
    kv_bytes_per_sequence: int
    max_batch: int
    fits: bool
    tpot_seconds: float | None
    roofline_tpot_seconds: float | None
    tokens_per_second: float | None
    roofline_tokens_per_second: float | None


@with_config(STRICT)
class SweepSeries(Deployment):
    fits: bool
    reason: str | None
    points: list[SweepPoint]


@with_config(STRICT)
class SweepDocument(TypedDict):
    """`kvcalc sweep`: KV per sequence, max batch and TPOT along contexts or batches."""

    schema_version: SchemaVersion
    mbu: float | None
    x: Literal["context_tokens", "batch"]
    context_tokens_list: list[int]
    batches: list[int] | None
    series: list[SweepSeries]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ plan


@with_config(STRICT)
class PlanLayout(Layout):
    gpus: GpuSet
    tp: int
    pp: int
    weight_dtype: str
    kv_dtype: str
    max_batch: int
    batch_per_replica: int
    tpot_seconds: float | None
    roofline_tpot_seconds: float | None
    ttft_seconds: float | None
    roofline_ttft_seconds: float | None
    max_num_batched_tokens: int | None
    prefill_replicas: int | None
    decode_replicas: int | None
    request_rate_per_replica: float | None
    concurrency_per_replica: float | None
    prefill_tokens_per_step: float | None
    prefill_utilization: float | None
    queue_seconds: float | None
    latency: Literal["estimate", "roofline"]
    watts: int | None
    price_per_hour: float | None
    engine_inputs: EngineInputs


@with_config(STRICT)
class PlanWorkload(TypedDict):
    """What plan assumed the layouts serve (kvcalc.planning.workload_payload)."""

    workload_kind: Literal["closed_batch", "request_rate", "disaggregated"]
    input_len: int | None
    output_len: int | None
    request_rate: float | None
    max_num_batched_tokens: int | None
    ttft_prompt_tokens: int
    arrivals: Literal["poisson"] | None
    queueing: Literal["M/D/1"] | None


@with_config(STRICT)
class PlanDocument(TypedDict):
    """`kvcalc plan`: the layouts that meet the targets, best first."""

    schema_version: SchemaVersion
    model: str
    model_name: str
    context_tokens: int
    users: int | None
    latency: Literal["estimate", "roofline"]
    workload: PlanWorkload
    decode_profile: DecodeProfile
    layouts: list[PlanLayout]
    left_out: list[str]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ compare


@with_config(STRICT)
class CompareRow(TypedDict):
    technique: str
    category: str
    kv_dtype: str | None
    kv_bytes_per_token: int
    kv_bytes_per_sequence: int
    reduction: float | None
    max_batch: int | None
    batch: int | None
    tpot_seconds: float | None
    roofline_tpot_seconds: float | None
    tokens_per_second: float | None
    roofline_tokens_per_second: float | None
    token_passes: int | None
    reason: str | None
    note: str


@with_config(STRICT)
class Skipped(TypedDict):
    technique: str
    reason: str


@with_config(STRICT)
class CompareModel(TypedDict):
    model: str
    model_name: str
    tp: NotRequired[int]
    pp: NotRequired[int]
    replicas: NotRequired[int]
    tp_given: NotRequired[bool]
    tp_reason: NotRequired[str | None]
    tp_nodes: NotRequired[int | None]
    kv_head_copies: NotRequired[int | None]
    layout_notes: NotRequired[list[str]]
    rows: list[CompareRow]
    skipped: list[Skipped]


@with_config(STRICT)
class CompareDocument(TypedDict):
    """`kvcalc compare`: KV-cache techniques side by side, a row each, per model."""

    schema_version: SchemaVersion
    context_tokens: int
    gpus: GpuSet | None
    batch: int | None
    prompt_tokens: int | None
    generated_tokens: int | None
    token_passes_with_cache: int | None
    token_passes_without_cache: int | None
    no_cache_factor: float | None
    models: list[CompareModel]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ offload


@with_config(STRICT)
class OffloadTier(TypedDict):
    tier: str
    capacity_bytes: int
    bandwidth_bytes_per_s: int | None
    kv_tokens_capacity: int
    max_batch: int
    load_seconds: float | None
    recompute_seconds: float | None
    faster: str | None
    break_even_tokens: int | None


@with_config(STRICT)
class OffloadDocument(Deployment):
    """`kvcalc offload`: HBM and each tier beyond it, at one prefix length."""

    schema_version: SchemaVersion
    context_tokens: int
    kv_bytes_per_sequence: int | None
    prefill_flops: int
    prefill_flops_per_second: int | None
    tiers: list[OffloadTier]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ check


@with_config(STRICT)
class CheckRequirement(TypedDict):
    requirement: str
    limit: Literal["min", "max"]
    unit: str
    required: float
    measured: float | None
    margin: float | None
    margin_ratio: float | None
    passed: bool
    line: int
    note: str | None


@with_config(STRICT)
class CheckDeployment(Deployment):
    deployment: str
    line: int
    engine: str
    engine_inputs: EngineInputs
    eviction: EvictionPolicy
    context_tokens: int | None
    batch: int | None
    reason: str | None
    ok: bool
    requirements: list[CheckRequirement]


@with_config(STRICT)
class CheckDocument(TypedDict):
    """`kvcalc check SPEC`: every requirement of every deployment, measured."""

    schema_version: SchemaVersion
    spec: str
    ok: bool
    requirement_count: int
    failed: int
    deployments: list[CheckDeployment]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ the registries


@with_config(STRICT)
class RegistryCheckDocument(TypedDict):
    """`kvcalc models --check` and `kvcalc gpus --check`: the registry files' validity."""

    schema_version: SchemaVersion
    ok: bool
    files: int
    problems: list[str]


@with_config(STRICT)
class MemoryReported(TypedDict):
    nvidia_smi_mib: int | None
    nvidia_smi_mib_ecc_off: int | None
    cuda_total_mib: int | None
    cuda_total_bytes: int | None
    cuda_total_logged_bytes: int | None
    rocm_smi_bytes: int | None


@with_config(STRICT)
class DenseFlops(TypedDict):
    bf16: int | None
    fp16: int | None
    fp8: int | None
    fp4: int | None


@with_config(STRICT)
class Efficiency(TypedDict):
    bandwidth_fraction: float | None
    step_overhead_seconds: float | None
    link_latency_seconds: float | None
    matmul_fraction: float | None


@with_config(STRICT)
class Accelerator(TypedDict):
    id: str
    name: str
    vendor: str
    aliases: list[str]
    memory_bytes: int
    memory_basis: str
    memory_marketed: str
    memory_type: str
    memory_unified: bool
    memory_reported: MemoryReported
    bandwidth_bytes_per_s: int
    dense_flops: DenseFlops
    interconnect: str | None
    interconnect_bytes_per_s: int | None
    pcie_bytes_per_s: int | None
    tdp_w: int | None
    node_gpus: int | None
    compute_capability: str | None
    sm_count: int | None
    efficiency: Efficiency
    status: str
    unverified: list[str]


@with_config(STRICT)
class GpusDocument(TypedDict):
    """`kvcalc gpus`: the accelerator registry, one entry per device."""

    schema_version: SchemaVersion
    accelerators: list[Accelerator]


@with_config(STRICT)
class LayerGroup(TypedDict):
    kind: str
    layers: int


@with_config(STRICT)
class RegistryModel(TypedDict):
    id: str
    name: str
    family: str
    attention: str
    layers: int
    layer_groups: list[LayerGroup]
    kv_heads: str
    head_dim: str
    kv_bytes_per_token_bf16: int
    params_total: float | None
    params_active: float | None
    max_context: int | None
    verification: str
    unverified: list[str]


@with_config(STRICT)
class ModelsDocument(TypedDict):
    """`kvcalc models`: the model registry, one entry per model."""

    schema_version: SchemaVersion
    models: list[RegistryModel]


# ------------------------------------------------------------------ calibrate


@with_config(STRICT)
class CalibrateTerm(TypedDict):
    term: str
    stage: int | None
    unit: str
    logged: int | float | None
    kvcalc: int | float | None
    difference: int | float | None
    note: str | None


@with_config(STRICT)
class CalibrateWorker(TypedDict):
    worker: str
    weights_bytes: NotRequired[int | None]
    activation_peak_bytes: NotRequired[int | None]
    non_torch_bytes: NotRequired[int | None]
    consumed_bytes: NotRequired[int | None]
    cuda_graph_bytes: NotRequired[int | None]
    cuda_graph_estimate_bytes: NotRequired[int | None]
    kv_memory_bytes: NotRequired[int | None]
    free_after_warmup_bytes: NotRequired[int | None]
    transient_kept_bytes: NotRequired[int | None]
    free_before_load_bytes: NotRequired[int | None]
    free_after_load_bytes: NotRequired[int | None]
    kv_cache_tokens: NotRequired[int | None]


@with_config(STRICT)
class CalibrateDocument(TypedDict):
    """`kvcalc calibrate`: a start-up log's terms beside kvcalc's model of the start-up."""

    schema_version: SchemaVersion
    engine: str
    release: str | None
    rules: str
    model: str
    gpus: GpuSet
    tp: int
    pp: int
    dp: int
    agrees: bool
    exact: bool
    kv_cache_tokens: int
    kv_cache_tokens_kvcalc: int | None
    kv_cache_tokens_low: int | None
    kv_cache_tokens_high: int | None
    kv_cache_tokens_estimated: int | None
    terms: list[CalibrateTerm]
    workers: list[CalibrateWorker]
    calibration: dict[str, Any]
    written: str | None
    notes: list[str]
    warnings: NotRequired[list[str]]


# ------------------------------------------------------------------ per command

#: Each command's documents, in the order docs/json.md lists them (a command whose document
#: depends on its options has several: `batch`'s five shapes; the listings' --check).
COMMANDS: dict[str, tuple[type, ...]] = {
    "size": (SizeDocument,),
    "batch": (
        BatchDocument,
        BatchRegistryDocument,
        BatchVllmDocument,
        BatchSglangDocument,
        BatchTrtllmDocument,
    ),
    "decode": (DecodeDocument,),
    "sweep": (SweepDocument,),
    "plan": (PlanDocument,),
    "compare": (CompareDocument,),
    "offload": (OffloadDocument,),
    "check": (CheckDocument,),
    "calibrate": (CalibrateDocument,),
    "models": (ModelsDocument, RegistryCheckDocument),
    "gpus": (GpusDocument, RegistryCheckDocument),
}


# ------------------------------------------------------------------ units and meanings


class Term(NamedTuple):
    """What a key means, and its unit (``""``: a name, a flag or a count of things)."""

    unit: str
    meaning: str


B, TOK, S, SEQ = "bytes", "tokens", "seconds", "sequences"

#: Every key of every document. The tests refuse a key declared above and missing here.
VOCABULARY: dict[str, Term] = {
    "schema_version": Term("", "the shape of the document (2; an unversioned one is 1)"),
    "warnings": Term("", "answers that hold but rest on an unusual input (only when any)"),
    # what is sized
    "model": Term("", "the registry id of the model (`llama3-70b`)"),
    "model_name": Term("", "the model's name (`Llama-3-70B`)"),
    "gpus": Term("", "the GPU set, all replicas: `id`, `label`, `accelerator`, `count`"),
    "id": Term("", "an identifier: the GPU set as --gpus takes it (`8xH100-SXM`), a registry id"),
    "label": Term("", "the GPU set as the text prints it (`8x NVIDIA H100 SXM5 80GB`)"),
    "accelerator": Term("", "the registry id of the GPU (`h100-sxm`)"),
    "count": Term("", "the number of GPUs in the set"),
    "engine": Term("", "the serving engine whose rules size the cache (--engine)"),
    "kv_dtype": Term("", "the KV-cache format (null: each model's own)"),
    "kv_bits_per_value": Term("bits", "bits per stored KV value at long context, scales in"),
    "weight_dtype": Term("", "the weight precision (null: each model's own)"),
    "as_attention": Term("", "the attention what-if applied to every model (--as), or null"),
    "batch": Term(SEQ, "the sequences of the batch sized or timed"),
    "eviction": Term("", "the eviction policy: `policy`, `lossy`, `consequence`, `parameters`"),
    "policy": Term("", "the eviction policy's name (`none`, `window`, `snapkv`, ...)"),
    "lossy": Term("", "whether the policy drops tokens a full cache would hold"),
    "consequence": Term("", "what the policy loses, or null"),
    "parameters": Term("", "the policy's inputs by name (tokens, or a ratio for keep_ratio)"),
    # layout
    "tp": Term("", "tensor-parallel ranks of a replica"),
    "pp": Term("", "pipeline stages of a replica"),
    "replicas": Term("", "data-parallel copies of the model over the GPUs"),
    "tp_given": Term("", "whether tp was given (false: kvcalc chose it)"),
    "tp_reason": Term("", "why the chosen tp is not every GPU of a stage, or null"),
    "tp_nodes": Term("", "nodes one tensor-parallel group spans (null: node size unknown)"),
    "kv_head_copies": Term("", "ranks holding each KV head (null without KV heads)"),
    "layout_notes": Term("", "what the text says about the layout"),
    "block_size": Term(TOK, "tokens per KV block (null: the engine's backend chooses)"),
    "layout": Term("", "the split the row runs in when it is not the one asked for, and why"),
    # contexts and sizes
    "contexts": Term("", "one entry per context, in the order given"),
    "context_tokens": Term(TOK, "the context length: prompt and generated tokens of a sequence"),
    "context_tokens_list": Term(TOK, "the context lengths asked for, in order"),
    "tokens_held": Term(TOK, "tokens of a sequence the cache holds (windows, eviction)"),
    "kv_bytes_per_token": Term(B, "KV bytes one token adds, all layers and GPUs of a replica"),
    "kv_bytes_per_sequence": Term(B, "KV bytes of one sequence of the context (whole model)"),
    "kv_bytes_per_sequence_per_gpu": Term(B, "one GPU's share of kv_bytes_per_sequence"),
    "kv_bytes_total": Term(B, "KV bytes of the whole batch"),
    "kv_bytes_per_token_bf16": Term(B, "kv_bytes_per_token with a bf16 cache"),
    "groups": Term("", "one entry per layer group (a hybrid model has several)"),
    "kind": Term("", "the kind of a layer group (`full`, `sliding`, `mla`, `mamba`, ...)"),
    "layers": Term("", "the number of layers"),
    "detail": Term("", "a layer group's shape as the table prints it (`8 kv x 128`)"),
    "state_bytes": Term(B, "fixed per-sequence state (recurrent layers), part of the bytes"),
    # capacity
    "fits": Term("", "whether at least one sequence fits (in a row: at that point)"),
    "reason": Term("", "why it does not fit (or why a row is skipped), else null"),
    "max_batch": Term(SEQ, "sequences of the context that fit at once, all replicas"),
    "max_batch_per_replica": Term(SEQ, "max_batch of one replica (an engine: one server)"),
    "gpu_memory_bytes": Term(B, "the memory of one GPU"),
    "usable_bytes_per_gpu": Term(B, "memory of one GPU after the reserve"),
    "weights_bytes_per_gpu": Term(B, "weights held by one GPU"),
    "overhead_bytes_per_gpu": Term(B, "activations and runtime memory of one GPU"),
    "kv_budget_bytes_per_gpu": Term(B, "memory of one GPU left for the KV cache"),
    "kv_tokens_capacity": Term(TOK, "tokens the KV budget (or a tier) holds"),
    "max_context_at_batch_1": Term(TOK, "the longest context one sequence fits (null: any)"),
    "beyond_max_context": Term("", "whether the context exceeds the model's maximum"),
    "models": Term("", "one entry per model"),
    "mtp": Term(
        "",
        "the multi-token-prediction layers as one more group, in no total (loaded only with "
        "speculative decoding)",
    ),
    # vLLM
    "max_model_len": Term(TOK, "vLLM's --max-model-len the pool is sized for"),
    "max_num_batched_tokens": Term(
        TOK, "tokens one scheduler step carries (vLLM's; also sizes its activation profile)"
    ),
    "vllm_version": Term("", "the vLLM release whose rules apply"),
    "gpu_memory_utilization": Term(
        "fraction", "vLLM's --gpu-memory-utilization used (null: a KV budget or reserve given)"
    ),
    "kv_cache_memory_bytes": Term(B, "vLLM's --kv-cache-memory per GPU, or null"),
    "max_num_seqs": Term(
        SEQ, "vLLM's --max-num-seqs or the release's default for the GPU: the sampler profile, "
        "the CUDA graphs, max_batch_per_replica's cap"
    ),
    "cudagraph_memory_bytes": Term(
        B, "CUDA-graph memory taken from each GPU's KV budget: the estimate, or the captured "
        "pool where vLLM sizes the pool after warmup (null: budget given)"
    ),
    "kv_sized_after_warmup": Term(
        "", "true: vLLM sizes the pool from the memory free after warmup and graph capture (its "
        "extensible KV cache), whose figures kvcalc estimates from earlier releases' logs"
    ),
    "kv_cache_upper_bound": Term(
        "", "true: a unified part's budget from the GPU alone, usually at most vLLM's (the "
        "change in the host's use while vLLM starts comes out of the pool; give "
        "--kv-cache-memory or --calibration)"
    ),
    "decode_context_parallel_size": Term("", "vLLM's DCP size: ranks splitting a request"),
    "data_parallel_size": Term("", "vLLM's --data-parallel-size (null: independent replicas)"),
    "enable_expert_parallel": Term("", "vLLM's --enable-expert-parallel"),
    "enforce_eager": Term("", "vLLM's --enforce-eager: no CUDA graphs in the budget"),
    "enable_extensible_kv_cache": Term(
        "", "vLLM's extensible KV cache, as run (on by default where the release has it; "
        "off with --no-enable-extensible-kv-cache or a KV budget given)"
    ),
    "enable_prefix_caching": Term("", "vLLM's prefix caching, given or the release's default"),
    "mamba_cache_mode": Term("", "vLLM's state mode (`none`, `align`; null: no states)"),
    "num_speculative_tokens": Term(TOK, "vLLM's MTP speculative tokens (0: none)"),
    "draft_layers": Term(
        "", "speculative draft layers (the model's MTP layers) whose KV joins the engine's pool"
    ),
    "draft_weight_bytes_per_gpu": Term(B, "the MTP layers' weights on one GPU"),
    "num_blocks": Term("", "blocks in the engine's pool (vLLM num_gpu_blocks, TensorRT-LLM's)"),
    "kv_cache_tokens": Term(TOK, "tokens the engine's pool holds (vLLM \"GPU KV cache size\")"),
    "blocks_per_request": Term("", "blocks one request of max_model_len takes"),
    "max_concurrency": Term(SEQ, "vLLM's \"Maximum concurrency\" (a ratio, one server)"),
    "kv_cache_groups": Term("", "vLLM's KV-cache groups"),
    "available_bytes_per_gpu": Term(B, "vLLM's \"Available KV cache memory\" on one GPU"),
    "needed_bytes": Term(B, "memory one request of max_model_len needs (too small)"),
    "available_bytes": Term(B, "memory the worker has for it (too small)"),
    "estimated_max_model_len": Term(TOK, "the longest request that fits (too small)"),
    # SGLang
    "sglang_version": Term("", "the SGLang release whose rules apply"),
    "sglang_version_default": Term(
        "", "whether that is kvcalc's default release (0.5.23, the newest)"
    ),
    "gpu_memory_mib": Term("MiB", "the GPU memory SGLang reads"),
    "mem_fraction_static": Term("fraction", "SGLang's static memory share"),
    "chunked_prefill_size": Term(TOK, "SGLang's chunked prefill size, or null"),
    "cuda_graph_max_bs": Term(SEQ, "SGLang's largest CUDA-graph batch, or null"),
    "free_before_load_bytes": Term(B, "free memory of one GPU before the weights load"),
    "free_after_load_bytes": Term(B, "free memory of one GPU after the weights load"),
    "estimated": Term("", "which of the engine's inputs kvcalc estimated"),
    "cell_size_bytes": Term(B, "KV bytes per token per rank (SGLang's cell_size)"),
    "mamba_bytes_per_request": Term(B, "state bytes per request (hybrids), or null"),
    "max_mamba_cache_size": Term(SEQ, "SGLang's state slots, or null"),
    "prefill_cuda_graph_reserved_mib": Term("MiB", "prefill CUDA graph reserve (from 0.5.10)"),
    "page_size": Term(TOK, "SGLang's page size"),
    "context_length": Term(TOK, "SGLang's context length"),
    "max_total_num_tokens": Term(TOK, "tokens SGLang's pool holds"),
    "swa_tokens": Term(TOK, "tokens of the sliding-window pool, or null"),
    "max_running_requests": Term(SEQ, "SGLang's cap on running requests"),
    "req_pool_size": Term(SEQ, "slots of SGLang's request pool"),
    "max_req_len": Term(
        TOK, "SGLang's max_req_len, min(context_len, pool) - 1; the longest request it runs to "
        "the end, prompt and output, is one token shorter"
    ),
    "kv_pool_bytes": Term(B, "bytes of the engine's KV pool per rank (SGLang, TensorRT-LLM)"),
    "dp_attention_ranks": Term("", "SGLang's DP-attention ranks (--dp-size), each its own pool"),
    "expert_parallel_ranks": Term("", "SGLang's --ep-size: ranks holding the routed experts whole"),
    "mamba_slots_per_request": Term("", "SGLang's state slots per running request (hybrids)"),
    "dsv4_pools": Term("", "DeepSeek-V4's SGLang pools (DSV4PoolConfigurator), one rank"),
    "bytes_per_full_token": Term(B, "SGLang's DeepSeek-V4 cost of one full-pool token"),
    "budget_bytes": Term(B, "SGLang's KV budget on one rank (its available_bytes)"),
    "c128_state_fixed_bytes": Term(B, "the ratio-128 compressor state charged up front"),
    "c4_tokens": Term(TOK, "compressed entries of SGLang's ratio-4 pool"),
    "c128_tokens": Term(TOK, "compressed entries of SGLang's ratio-128 pool"),
    "c4_state_rows": Term("", "rows of the ratio-4 compressor-state pool"),
    "c128_state_rows": Term("", "rows of the ratio-128 compressor-state pool"),
    # TensorRT-LLM
    "free_gpu_memory_fraction": Term("fraction", "TensorRT-LLM's share of the free memory"),
    "tokens_per_block": Term(TOK, "TensorRT-LLM's tokens per KV block"),
    "max_tokens_cap": Term(TOK, "TensorRT-LLM's KvCacheConfig.max_tokens, or null"),
    "free_memory_bytes": Term(B, "free memory of one GPU after the profile (its log's)"),
    "kv_bytes_per_token_per_gpu": Term(B, "KV bytes per token on one rank (its log's)"),
    "max_tokens": Term(TOK, "tokens the KV budget holds before block rounding"),
    "max_seq_len": Term(TOK, "the longest sequence TensorRT-LLM admits"),
    "max_batch_size": Term(SEQ, "TensorRT-LLM's cap on sequences at once"),
    "blocks_per_sequence": Term("", "blocks one sequence of the context takes"),
    # decode and latency
    "mbu": Term("fraction", "the share of peak bandwidth the roofline assumes"),
    "efficiency_basis": Term("", "`measured` (the GPU's registry figures) or `generic`"),
    "weight_bytes_read": Term(B, "weight bytes one step reads (all GPUs of a replica)"),
    "kv_bytes_read": Term(B, "KV bytes one step reads (all GPUs of a replica)"),
    "flops": Term("FLOPs", "floating-point operations of one step"),
    "weight_read_seconds": Term(S, "the roofline's time to read the weights"),
    "kv_read_seconds": Term(S, "the roofline's time to read the KV cache"),
    "compute_seconds": Term(S, "the roofline's compute time (null: no published rate)"),
    "bound": Term("", "what bounds the roofline step (`memory`, `compute`)"),
    "kv_share": Term("fraction", "the KV cache's share of the step's reads"),
    "memory_estimate_seconds": Term(S, "the estimate's read time at achievable bandwidth"),
    "compute_estimate_seconds": Term(S, "the estimate's compute time, or null"),
    "communication_seconds": Term(S, "the estimate's all-reduce time"),
    "step_overhead_seconds": Term(S, "fixed time per decode step (the estimate's, a GPU's)"),
    "layer_kernel_seconds": Term(S, "the profile's per-layer kernel costs in one step"),
    "tpot_seconds": Term(S, "time per output token, realistic estimate (null: not timed)"),
    "tpot_low_seconds": Term(S, "the estimate's band, low end (docs/accuracy.md)"),
    "tpot_high_seconds": Term(S, "the estimate's band, high end (docs/accuracy.md)"),
    "tokens_per_second_low": Term("tokens/s", "decode throughput at the band's high TPOT"),
    "tokens_per_second_high": Term("tokens/s", "decode throughput at the band's low TPOT"),
    "ttft_low_seconds": Term(S, "time to first token, the band's low end"),
    "ttft_high_seconds": Term(S, "time to first token, the band's high end"),
    "nodes": Term("", "nodes one replica spans (--nodes, else the GPU's node size)"),
    "link": Term("", "what a replica's traffic crosses: none, scale-up, pcie, network, unknown"),
    "accuracy_regime": Term("", "whose band applies: single-gpu, scale-up, pcie, multi-node"),
    "roofline_tpot_seconds": Term(S, "time per output token, roofline bound"),
    "tokens_per_second": Term("tokens/s", "decode throughput of one replica, realistic"),
    "roofline_tokens_per_second": Term("tokens/s", "decode throughput of one replica, bound"),
    "ttft_seconds": Term(S, "time to first token, realistic estimate"),
    "roofline_ttft_seconds": Term(S, "time to first token, roofline bound"),
    # sweep
    "x": Term("", "the swept quantity: `context_tokens` or `batch`"),
    "batches": Term(SEQ, "the batches asked for (null: the most that fit)"),
    "series": Term("", "one entry per model and GPU set"),
    "points": Term("", "one entry per context and batch"),
    # plan
    "users": Term(SEQ, "the sequences to serve at once (null: --request-rate sets them)"),
    "latency": Term("", "what the targets hold to: `estimate` or `roofline`"),
    "layouts": Term("", "the layouts that meet the targets, best first"),
    "left_out": Term(
        "", "accelerators the search left out (`ID with D weights` where only those weight "
        "dtypes were): an old llama.cpp build's F16 mat-vec waves cannot be timed on them (no "
        "SM count in the registry; --llama-cpp-build)"
    ),
    "batch_per_replica": Term(SEQ, "the users one replica serves"),
    "watts": Term("W", "board power of the GPUs (null: unknown)"),
    "price_per_hour": Term("$/hour", "the GPUs' price (null without --price)"),
    # decode profiles (kvcalc.engine.profiles)
    "decode_profile": Term("", "how the engine or --runtime runs a decode step, sourced"),
    "profile": Term("", "the profile's name (an --engine or --runtime value)"),
    "profile_label": Term("", "the engine or runtime as prose names it"),
    "cuda_graphs": Term("", "whether decode steps replay as CUDA graphs"),
    "allreduce": Term("", "the all-reduce implementation under tensor parallelism"),
    "tensor_parallel": Term("", "whether it splits tensors across GPUs (false: layers)"),
    "profile_step_overhead_seconds": Term(S, "its fixed time per step (null: the GPU's)"),
    "layer_overhead_seconds": Term(S, "time each layer adds without CUDA graphs"),
    "allreduce_latency_seconds": Term(
        S, "latency of one small all-reduce on NVLink in one node (null: the GPU's)"
    ),
    "kernels": Term("", "per-layer kernel class: `serving` or `compiled` (none per layer)"),
    "build": Term(
        "", "the llama.cpp build timed (--llama-cpp-build; null: a current build)"
    ),
    "f16_matvec_hbm_share": Term(
        "", "share of the achievable bandwidth its F16 mat-vec reaches on NVIDIA HBM GPUs at "
        "one token per step (1: the registry's figure; below 1: llama.cpp before b3916), in a "
        "full wave of its blocks where f16_matvec_warp_per_row"
    ),
    "f16_matvec_warp_per_row": Term(
        "", "whether that mat-vec runs one one-warp block per output row, so a matrix takes "
        "whole waves of SMs x resident blocks (llama.cpp before b3916; the GPU's sm_count)"
    ),
    "profile_sources": Term("", "where the profile's figures come from"),
    # serving workloads (kvcalc.engine.workload)
    "serving": Term("", "one replica's steady state under --request-rate (null: none)"),
    "engine_inputs": Term(
        "", "the inputs the serving engine sized the pool with, its defaults filled in, named "
        "as its batch JSON names them (null: the budget formula)"
    ),
    "workload": Term("", "what plan assumed the layouts serve"),
    "workload_kind": Term("", "`closed_batch` (--users), `request_rate` or `disaggregated`"),
    "input_len": Term(TOK, "prompt tokens of each request"),
    "output_len": Term(TOK, "generated tokens of each request"),
    "request_rate": Term("requests/s", "requests arriving per second, all replicas"),
    "request_rate_per_replica": Term("requests/s", "one replica's share of the rate"),
    "ttft_prompt_tokens": Term(TOK, "the prompt the TTFT is of"),
    "arrivals": Term("", "the arrival process assumed (`poisson`), null without a rate"),
    "queueing": Term("", "the queue the TTFT's wait follows (`M/D/1`), null without a rate"),
    "stable": Term("", "whether the replica keeps up with its share of the rate"),
    "decode_batch": Term(SEQ, "requests decoding at once under the rate"),
    "concurrency_per_replica": Term(SEQ, "requests in one replica at once (Little's law)"),
    "prefill_tokens_per_step": Term(TOK, "prompt tokens a step carries on average"),
    "prefill_utilization": Term("fraction", "the share of the prefill capacity prompts use"),
    "queue_seconds": Term(S, "mean wait before a prompt's prefill (M/D/1)"),
    "prefill_replicas": Term("", "replicas of the prefill pool (--disaggregated)"),
    "decode_replicas": Term("", "replicas of the decode pool (--disaggregated)"),
    # compare
    "technique": Term("", "the KV-cache technique of a row"),
    "category": Term("", "what a technique costs (`lossless`, `lossy`, ...)"),
    "reduction": Term("", "the baseline's bytes over the row's (null: no cache)"),
    "token_passes": Term(TOK, "token passes of the prompt and generation"),
    "note": Term("", "what a row or an outcome means"),
    "release": Term("", "the engine release a start-up log states (null: not stated)"),
    "rules": Term("", "the engine and release whose rules kvcalc applied"),
    "dp": Term("", "data-parallel replicas a start-up log states"),
    "agrees": Term("", "kvcalc gives the logged token count from the logged memory, within the "
                       "log's rounding"),
    "exact": Term("", "the calibration's inputs reproduce the logged token count exactly"),
    "kv_cache_tokens_kvcalc": Term(TOK, "kvcalc's token count from the log's memory figures"),
    "kv_cache_tokens_low": Term(TOK, "the same with each figure at the low end of its rounding"),
    "kv_cache_tokens_high": Term(TOK, "the same with each figure at the high end of its rounding"),
    "kv_cache_tokens_estimated": Term(TOK, "kvcalc's token count from its own estimates"),
    "terms": Term("", "one entry per term of the start-up's budget"),
    "term": Term("", "the term (weights, activation_peak, non_torch, kv_memory, ...)"),
    "stage": Term("", "the pipeline stage a term is of (null: every stage)"),
    "logged": Term("", "the figure the log states, in the term's unit"),
    "kvcalc": Term("", "kvcalc's figure for the term, in its unit"),
    "difference": Term("", "kvcalc's figure less the logged one"),
    "workers": Term("", "each worker's (rank's) logged figures"),
    "worker": Term("", "the worker's label in the log (`TP1`, `Worker_PP0`)"),
    "weights_bytes": Term(B, "weights one GPU holds, as the worker logged them"),
    "activation_peak_bytes": Term(B, "the worker's logged activation peak"),
    "non_torch_bytes": Term(B, "the worker's logged non-torch memory"),
    "consumed_bytes": Term(B, "weights + non-torch memory, logged as one (later vLLM releases)"),
    "cuda_graph_bytes": Term(B, "the worker's CUDA-graph memory after capture"),
    "cuda_graph_estimate_bytes": Term(B, "the worker's logged CUDA-graph estimate"),
    "kv_memory_bytes": Term(B, "the worker's logged KV cache memory"),
    "free_after_warmup_bytes": Term(B, "the worker's free memory after warmup, as logged (the "
                                       "extensible KV cache)"),
    "transient_kept_bytes": Term(B, "what the worker's extensible KV cache keeps free for "
                                    "transient activations, as logged"),
    "calibration": Term("", "the calibration file's document (`--write`)"),
    "written": Term("", "the calibration file written (null: none)"),
    "notes": Term("", "what the comparison rests on"),
    "rows": Term("", "one entry per technique"),
    "skipped": Term("", "the techniques left out, and why"),
    "prompt_tokens": Term(TOK, "the prompt of the no-cache figures (null without --prompt)"),
    "generated_tokens": Term(TOK, "the generated tokens of the no-cache figures"),
    "token_passes_with_cache": Term(TOK, "token passes with a cache"),
    "token_passes_without_cache": Term(TOK, "token passes without one"),
    "no_cache_factor": Term("", "token_passes_without_cache / token_passes_with_cache"),
    # offload
    "prefill_flops": Term("FLOPs", "the prefill of the prefix"),
    "prefill_flops_per_second": Term("FLOP/s", "the dense peak recompute runs at, or null"),
    "tiers": Term("", "HBM first, then each tier beyond it"),
    "tier": Term("", "the tier's name (`hbm`, `cpu`, `ssd`, ...)"),
    "capacity_bytes": Term(B, "bytes the tier holds"),
    "bandwidth_bytes_per_s": Term("bytes/s", "bandwidth (a tier's load rate, a GPU's memory)"),
    "load_seconds": Term(S, "time to load the prefix from the tier"),
    "recompute_seconds": Term(S, "time to recompute the prefix, or null"),
    "faster": Term("", "`load` or `recompute`, or null"),
    "break_even_tokens": Term(TOK, "the shortest prefix that loads as fast as it recomputes"),
    # check
    "spec": Term("", "the spec file checked"),
    "ok": Term("", "whether everything holds (every requirement; every file)"),
    "requirement_count": Term("", "the requirements checked"),
    "failed": Term("", "the requirements that fail"),
    "deployments": Term("", "one entry per deployment of the spec"),
    "deployment": Term("", "the deployment's name in the spec"),
    "line": Term("", "the line in the spec file"),
    "requirements": Term("", "one entry per requirement of the deployment"),
    "requirement": Term("", "the requirement's key (`min_batch`, `max_tpot_ms`, ...)"),
    "limit": Term("", "`min` (a lower bound) or `max` (an upper bound)"),
    "unit": Term("", "the unit of required, measured and margin (of logged and kvcalc)"),
    "required": Term("", "the bound, in unit"),
    "measured": Term("", "kvcalc's figure, in unit (null: cannot be measured)"),
    "margin": Term("", "how far measured is on the good side of the bound, in unit"),
    "margin_ratio": Term("", "margin / required"),
    "passed": Term("", "whether the requirement holds"),
    "files": Term("", "the registry files checked"),
    "problems": Term("", "one line per problem: file, field, message"),
    # the registries
    "accelerators": Term("", "one entry per accelerator of the registry"),
    "name": Term("", "a registry entry's name"),
    "vendor": Term("", "the accelerator's vendor"),
    "aliases": Term("", "other names the registry accepts"),
    "memory_bytes": Term(B, "usable memory of one accelerator"),
    "memory_basis": Term("", "which reported figure memory_bytes is"),
    "memory_marketed": Term("", "the vendor's label (`80 GB`)"),
    "memory_type": Term("", "HBM3, GDDR6, ..."),
    "memory_unified": Term("", "whether the memory is shared with the CPU"),
    "memory_reported": Term("", "the figures tools report (MiB or bytes as named)"),
    "nvidia_smi_mib": Term("MiB", "nvidia-smi's total"),
    "nvidia_smi_mib_ecc_off": Term("MiB", "nvidia-smi's total with ECC off"),
    "cuda_total_mib": Term("MiB", "CUDA's total"),
    "cuda_total_bytes": Term(B, "CUDA's total"),
    "cuda_total_estimated": Term(
        "", "true: the engine starts from an estimated CUDA total (nvidia-smi's less "
        f"{SMI_ABOVE_CUDA_BYTES // MiB} MiB; give --gpu-memory for the GPU's own)"
    ),
    "cuda_total_logged_bytes": Term(
        B, "CUDA's total as engine start-up logs print it, in bytes (the engines start from it)"
    ),
    "rocm_smi_bytes": Term(B, "rocm-smi's total"),
    "dense_flops": Term("FLOP/s", "dense peak per dtype (null: not published)"),
    "bf16": Term("FLOP/s", "dense bf16 peak"),
    "fp16": Term("FLOP/s", "dense fp16 peak"),
    "fp8": Term("FLOP/s", "dense fp8 peak"),
    "fp4": Term("FLOP/s", "dense fp4 peak"),
    "interconnect": Term("", "the GPU-to-GPU link"),
    "interconnect_bytes_per_s": Term("bytes/s", "its bidirectional bandwidth"),
    "pcie_bytes_per_s": Term("bytes/s", "the PCIe bandwidth"),
    "tdp_w": Term("W", "board power"),
    "node_gpus": Term("", "GPUs per node"),
    "compute_capability": Term("", "CUDA compute capability, major.minor (null: not NVIDIA)"),
    "sm_count": Term(
        "", "streaming multiprocessors, as NVIDIA's whitepaper counts them (null: not in the "
        "registry); sizes an old llama.cpp build's F16 mat-vec waves"
    ),
    "efficiency": Term("", "the measured decode efficiency (all null: generic)"),
    "bandwidth_fraction": Term("fraction", "achievable share of peak bandwidth"),
    "link_latency_seconds": Term(S, "latency of one all-reduce"),
    "matmul_fraction": Term("fraction", "achievable share of the dense peak"),
    "status": Term("", "how complete the entry is (`verified`, `partial`, ...)"),
    "unverified": Term("", "fields not verified against a source"),
    "family": Term("", "the model family"),
    "attention": Term("", "the attention kinds of the model's layers (`full+sliding`)"),
    "layer_groups": Term("", "runs of layers of one kind"),
    "kv_heads": Term("", "KV heads per layer, distinct values `/`-joined"),
    "head_dim": Term("", "head dimensions, distinct values `/`-joined"),
    "params_total": Term("", "parameters in total"),
    "params_active": Term("", "parameters active per token"),
    "max_context": Term(TOK, "the model's maximum context"),
    "verification": Term("", "how the entry was checked"),
}
