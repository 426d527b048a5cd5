"""A deployment: one model served on a set of GPUs, and everything that decides its memory.

It is built and validated once -- by the CLI from its options, by a capacity spec file, by a
planner -- and every engine reads it: the budget formula (:mod:`kvcalc.engine.capacity`), vLLM's
block model (:mod:`kvcalc.engine.vllm`) and decode timing (:mod:`kvcalc.engine.decode`). Each
quantity that more than one engine needs is one method here: usable memory, weights, runtime
overhead and the KV budget of each pipeline stage.

Memory per GPU (seed 004 and vLLM's ``Worker.determine_available_memory``)::

    usable    = ceil(memory x gpu_util)          (or memory x (1 - reserve), the seed's wording)
    kv budget = usable - weights - overhead      (or kv_memory, given directly)

where overhead is the user's figure, or 0 with a reserve (the reserved fraction *is* the
overhead), or vLLM's profiled activation peak plus non-torch memory for that stage.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from typing import Any, NamedTuple

from kvcalc.engine.eviction import KEEP_ALL, Eviction
from kvcalc.engine.hardware import GpuSet
from kvcalc.engine.kv import CacheFormat, cache_format
from kvcalc.engine.kvformat import KVFormat
from kvcalc.engine.overhead import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    estimated_overhead,
)
from kvcalc.engine.spec import ModelSpec, ParallelismError
from kvcalc.engine.units import GiB
from kvcalc.engine.weights import WeightPrecision, compute_dtype, pipeline_stages, weights_per_gpu
from kvcalc.errors import InputError, LayoutError

#: The share of GPU memory a serving engine takes by default (vLLM ``--gpu-memory-utilization``).
DEFAULT_GPU_UTIL = Fraction(9, 10)
#: vLLM's default ``--block-size`` (tokens per KV block) for attention layers.
DEFAULT_BLOCK_SIZE = 16


class DeploymentError(InputError, ValueError):
    """A deployment that cannot be built. ``fields`` names the inputs at fault (``tp``,
    ``kv_memory``, ...) so that each front end can word them its own way (``--kv-memory`` on the
    command line, ``kv_memory:`` in a spec file). ``model_specific`` marks a layout that other
    models could take (the heads or layers of this model do not split), as opposed to inputs
    that are wrong for every model."""

    def __init__(self, fields: tuple[str, ...], reason: str, *, model_specific: bool = False):
        super().__init__(f"{' and '.join(fields)}: {reason}", fields=fields)
        self.reason = reason
        self.model_specific = model_specific

    def worded(self, name: Callable[[str], str]) -> str:
        """The message with each field named by ``name`` (e.g. ``kv_memory`` -> ``--kv-memory``)."""
        return f"{' and '.join(name(f) for f in self.fields)}: {self.reason}"


class TpSplitError(DeploymentError, LayoutError):
    """A tp the heads do not split. Its wording names the sizes that do on these GPUs, found only
    when it is worded: a planner trying every split discards thousands of these unread."""

    def __init__(self, reason: str, model: ModelSpec, per_stage: int, pp: int) -> None:
        super().__init__(("tp",), reason, model_specific=True)
        self.model = model
        self.per_stage = per_stage
        self.pp = pp

    def worded(self, name: Callable[[str], str]) -> str:
        return super().worded(name) + self.sizes_hint()

    def __str__(self) -> str:
        return super().__str__() + self.sizes_hint()

    def sizes_hint(self) -> str:
        sizes = [str(t) for t in tp_sizes(self.model, self.per_stage)]
        listed = " or ".join([", ".join(sizes[:-1]), sizes[-1]] if len(sizes) > 1 else sizes)
        stage = " per stage" if self.pp > 1 else ""
        return f"; on {self.per_stage} GPUs{stage} use tp {listed}"


def usable_bytes(memory_bytes: int, share: Fraction) -> int:
    """The memory an engine may use on one GPU: ``ceil(memory x share)``, as vLLM rounds its
    requested memory (``requested_memory``). Exact: ``share`` is a Fraction, so 80 GB x 0.9 is
    72 GB to the byte."""
    return math.ceil(memory_bytes * share)


def as_fraction(value: float | Fraction | str) -> Fraction:
    """A fraction given as a float is read as its decimal text: 0.9 is 9/10, not the binary
    0.90000000000000002220."""
    return value if isinstance(value, Fraction) else Fraction(str(value))


@dataclass(frozen=True)
class Deployment:
    """One model on ``gpus``, split tp x pp, with data-parallel replicas on the GPUs left over.

    The optional figures override what would otherwise be computed: ``gpu_memory_bytes`` the
    memory each GPU reports, ``weights_total_bytes`` the weights from the architecture (spread
    evenly over the tp x pp GPUs of a replica), ``overhead_bytes`` the estimated runtime overhead,
    and ``kv_memory_bytes`` the whole KV budget per GPU (as vLLM logs "Available KV cache
    memory"). Construct with :func:`deployment`, which resolves the defaults and validates.
    """

    model: ModelSpec
    gpus: GpuSet
    tp: int
    pp: int
    weights: WeightPrecision
    cache: CacheFormat
    block_size: int = DEFAULT_BLOCK_SIZE
    block_size_given: bool = False
    """Whether ``block_size`` was given: vLLM pages at its attention backend's default block
    otherwise (:func:`kvcalc.engine.vllm_backends.default_backend_block`)."""
    prefix_shared_tokens: int = 0
    gpu_util: Fraction | None = None
    """None: :data:`DEFAULT_GPU_UTIL`, unless a reserve is given."""
    reserve: Fraction | None = None
    overhead_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    weights_total_bytes: int | None = None
    kv_memory_bytes: int | None = None
    max_num_batched_tokens: int | None = None
    """The scheduler's step (vLLM ``--max-num-batched-tokens``): it sizes the activation peak of
    the overhead estimate and, for vLLM, the sliding-window charge. None: the engine's default
    (vLLM's for the GPU and release, :mod:`kvcalc.engine.vllm_releases`; 8192 for the budget
    formula's estimate)."""
    max_num_seqs: int | None = None
    """The most sequences a step schedules (vLLM ``--max-num-seqs``); None: the engine's
    default, as for :attr:`max_num_batched_tokens`."""
    eviction: Eviction = KEEP_ALL
    """Which tokens of each sequence the cache keeps (:mod:`kvcalc.engine.eviction`)."""
    nodes: int | None = None
    """Nodes the GPUs are spread over (``--nodes``; None: as many as the part's node size needs,
    :attr:`node_gpus`): a group spanning nodes crosses the inter-node network."""
    internode_bytes_per_s: int | None = None
    """One direction of each GPU's inter-node network (``--internode``; None: 400 Gb/s)."""


    data_parallel: bool = False
    """The replicas are one engine's data-parallel group (vLLM ``--data-parallel-size``), whose
    MoE layers spread the routed experts over every rank of it (:meth:`moe_ranks`); False:
    independent engines, each holding all the experts on its tp ranks."""
    expert_parallel: bool = False
    """Routed experts held whole, split across the MoE ranks (vLLM ``--enable-expert-parallel``),
    instead of every expert split by rows."""
    tp_given: bool = field(default=True, compare=False)
    """False when :func:`deployment` chose tp (:func:`choose_tp`)."""
    tp_reason: str | None = field(default=None, compare=False)
    """Why the chosen tp is not every GPU of a stage (None: tp was given, or it is)."""
    per_rank: ModelSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_deployment(self)
        try:
            object.__setattr__(self, "per_rank", rank_model(self.model, self.tp))
        except DeploymentError as exc:
            per_stage = self.gpus.count // self.pp
            raise TpSplitError(exc.reason, self.model, per_stage, self.pp) from None

    # ------------------------------------------------------------------ layout

    @property
    def kv_dtype(self) -> KVFormat:
        """The KV cache's format (a dtype, or scales, groups, a full-precision part)."""
        return self.cache.kv

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: each holds the model on tp x pp GPUs with its own KV pool."""
        return self.gpus.count // self.gpus_per_replica

    @property
    def node_gpus(self) -> int | None:
        """GPUs of one node's scale-up link (NVLink, Infinity Fabric); None: not known."""
        return self.gpus.accelerator.node_gpus

    @property
    def gpus_per_node(self) -> int | None:
        """GPUs in one node: the GPUs over ``nodes`` when given, else the part's scale-up
        domain (None: neither is known)."""
        if self.nodes is not None:
            return -(-self.gpus.count // self.nodes)
        return self.node_gpus

    @property
    def tp_nodes(self) -> int | None:
        """Nodes one tensor-parallel group spans (None: the node size is not known); above 1,
        its all-reduces cross the inter-node network."""
        node = self.gpus_per_node
        return None if node is None else -(-self.tp // node)

    @cached_property
    def kv_heads(self) -> int | None:
        """The fewest KV heads of a layer (None: no layer has KV heads: MLA, states)."""
        heads = [h for m in self.model.mixer_pattern if (h := m.kv_head_count()) is not None]
        return min(heads, default=None)

    @property
    def kv_head_copies(self) -> int | None:
        """Ranks that hold each KV head: beyond tp = KV heads, every rank keeps one whole head
        (vLLM ``max(1, kv_heads // tp)``), so tp / kv_heads ranks hold the same one."""
        heads = self.kv_heads
        return None if heads is None else max(1, self.tp // heads)

    @cached_property
    def stages(self) -> tuple[range, ...]:
        """Layers of each pipeline stage, split as vLLM splits them."""
        return pipeline_stages(self.model.num_layers, self.pp)

    # ------------------------------------------------------------------ memory per GPU

    @property
    def memory_bytes_per_gpu(self) -> int:
        """What each GPU reports (or the user's ``gpu_memory_bytes``)."""
        if self.gpu_memory_bytes is not None:
            return self.gpu_memory_bytes
        return self.gpus.accelerator.memory_bytes

    @property
    def cuda_total_bytes_per_gpu(self) -> int:
        """The total CUDA reports on each GPU (torch ``mem_get_info``), the figure serving
        engines size their budgets from: the user's ``gpu_memory_bytes``, else the accelerator's
        (:attr:`~kvcalc.engine.hardware.Accelerator.engine_total_bytes`: measured, else estimated
        from nvidia-smi's total, else its usable memory)."""
        if self.gpu_memory_bytes is not None:
            return self.gpu_memory_bytes
        return self.gpus.accelerator.engine_total_bytes

    @property
    def cuda_total_estimated(self) -> bool:
        """Whether :attr:`cuda_total_bytes_per_gpu` is an estimate (no measured CUDA total for
        the GPU and no ``gpu_memory_bytes`` given): the engines' output says so."""
        return self.gpu_memory_bytes is None and self.gpus.accelerator.engine_total_estimated

    @property
    def memory_share(self) -> Fraction:
        """The share of each GPU's memory the engine takes: gpu_util, or 1 - reserve."""
        if self.reserve is not None:
            return 1 - self.reserve
        return self.gpu_util if self.gpu_util is not None else DEFAULT_GPU_UTIL

    @property
    def dense_flops_per_gpu(self) -> int | None:
        """One GPU's dense matmul rate at the weights' compute dtype (None: none published)."""
        return self.gpus.accelerator.dense_flops_for(compute_dtype(self.weights))

    @property
    def usable_bytes_per_gpu(self) -> int:
        return usable_bytes(self.memory_bytes_per_gpu, self.memory_share)

    @cached_property
    def weights_per_stage(self) -> tuple[int, ...]:
        """Weight bytes on one GPU of each stage (its most loaded tensor-parallel rank)."""
        if self.weights_total_bytes is not None:
            per_gpu = -(-self.weights_total_bytes // self.gpus_per_replica)
            return tuple(per_gpu for _ in self.stages)
        stages = weights_per_gpu(
            self.model, self.weights, self.tp, self.pp, self.moe_ranks, self.expert_parallel
        )
        return tuple(s.bytes_per_gpu for s in stages)

    @property
    def moe_ranks(self) -> int:
        """The ranks the routed experts are spread over: tp, or tp x the replicas of a
        data-parallel group (vLLM ``flatten_tp_across_dp_and_pcp``)."""
        return self.tp * (self.replicas if self.data_parallel else 1)

    @cached_property
    def overhead_per_stage(self) -> tuple[int, ...]:
        """Runtime overhead on one GPU of each stage: the user's figure, none under a reserve,
        else vLLM's profiled activation peak (only the last stage samples) plus non-torch memory
        (:mod:`kvcalc.engine.overhead`)."""
        if self.overhead_bytes is not None:
            return tuple(self.overhead_bytes for _ in self.stages)
        if self.reserve is not None:
            return tuple(0 for _ in self.stages)
        return tuple(
            estimated_overhead(
                self.model, self.tp, self.pp, s, self.batched_tokens, self.scheduled_seqs
            )
            for s in range(self.pp)
        )

    @property
    def batched_tokens(self) -> int:
        """:attr:`max_num_batched_tokens`, or the budget formula's default (8192)."""
        given = self.max_num_batched_tokens
        return DEFAULT_MAX_NUM_BATCHED_TOKENS if given is None else given

    @property
    def scheduled_seqs(self) -> int:
        """:attr:`max_num_seqs`, or the budget formula's default (1024)."""
        return DEFAULT_MAX_NUM_SEQS if self.max_num_seqs is None else self.max_num_seqs

    @property
    def kv_budget_given(self) -> bool:
        """Whether the KV budget is given (``kv_memory``, or the seed's ``reserve``), so that no
        engine's profile estimates it."""
        return self.kv_memory_bytes is not None or self.reserve is not None

    @cached_property
    def kv_budget_per_stage(self) -> tuple[int, ...]:
        """KV bytes one GPU of each stage may hold; negative when the weights do not fit."""
        if self.kv_memory_bytes is not None:
            return tuple(self.kv_memory_bytes for _ in self.stages)
        usable = self.usable_bytes_per_gpu
        return tuple(
            usable - w - o
            for w, o in zip(self.weights_per_stage, self.overhead_per_stage, strict=True)
        )

    @property
    def tightest_stage(self) -> int:
        """The stage with the smallest KV budget (the first of equals)."""
        budgets = self.kv_budget_per_stage
        return min(range(self.pp), key=lambda s: budgets[s])


def check_deployment(dep: Deployment) -> None:
    """Every rule a deployment must satisfy, in one place (but the heads tp must split, which
    :func:`rank_model` checks as it splits them); raises :class:`DeploymentError`."""
    _check_positive(dep)
    _check_memory_inputs(dep)
    _check_kv_memory(dep)
    _check_gpu_memory(dep)
    _check_layout(dep.model, dep.gpus.count, dep.tp, dep.pp)


def _check_positive(dep: Deployment) -> None:
    for name in ("tp", "pp", "block_size", "max_num_batched_tokens", "max_num_seqs"):
        if getattr(dep, name) is not None and getattr(dep, name) < 1:
            raise DeploymentError((name,), f"must be at least 1, not {getattr(dep, name)}")
    if dep.prefix_shared_tokens < 0:
        raise DeploymentError(("prefix_shared",), "must not be negative")
    if dep.prefix_shared_tokens and dep.eviction.lossy:
        # Each sequence evicts its own tokens, so the blocks of a common prefix part ways.
        raise DeploymentError(
            ("prefix_shared", *dep.eviction.fields),
            f"under {dep.eviction.describe()} each sequence evicts its own tokens, so no "
            "prompt prefix stays shared; give one or the other",
        )
    for name in ("overhead_bytes", "gpu_memory_bytes", "weights_total_bytes", "kv_memory_bytes"):
        value = getattr(dep, name)
        if value is not None and (value < 0 or (value == 0 and name != "overhead_bytes")):
            raise DeploymentError((name.removesuffix("_bytes"),), f"must be positive, not {value}")
    _check_nodes(dep)


def _check_nodes(dep: Deployment) -> None:
    if dep.nodes is not None and not 1 <= dep.nodes <= dep.gpus.count:
        raise DeploymentError(
            ("nodes",), f"must be between 1 and the {dep.gpus.count} GPUs, not {dep.nodes}"
        )
    if dep.internode_bytes_per_s is not None and dep.internode_bytes_per_s <= 0:
        raise DeploymentError(("internode",), "must be positive")


def _check_kv_memory(dep: Deployment) -> None:
    # The KV budget is per GPU: more than the GPU holds is a typo (or a total over all GPUs).
    memory = dep.gpus.accelerator.memory_bytes
    if dep.kv_memory_bytes is not None and dep.kv_memory_bytes > memory:
        raise DeploymentError(
            ("kv_memory",),
            f"{dep.kv_memory_bytes:,} B is more than the {memory:,} B of one "
            f"{dep.gpus.accelerator.name}; give the KV budget of one GPU",
        )


def _check_gpu_memory(dep: Deployment) -> None:
    # Less than the device has is a what-if (a MIG slice, memory held by another process); more
    # contradicts the accelerator named: no engine can allocate it. The device has its
    # nvidia-smi total (SGLang reads that one), a little more than the CUDA total.
    accelerator = dep.gpus.accelerator
    memory = max(accelerator.memory_bytes, accelerator.smi_memory_bytes or 0)
    if dep.gpu_memory_bytes is not None and dep.gpu_memory_bytes > memory:
        raise DeploymentError(
            ("gpu_memory",),
            f"{dep.gpu_memory_bytes:,} B is more than the {memory:,} B ({memory / GiB:.2f} "
            f"GiB) one {accelerator.name} has; give at most that, or name the accelerator "
            "that has it (kvcalc gpus)",
        )


def check_context(dep: Deployment, context_tokens: int) -> None:
    """Rules between a deployment and a context it is asked about: the shared prefix is part
    of every sequence, so each sequence must have at least one token of its own (at a prefix of
    the whole context, no sequence costs anything and the batch would be unbounded)."""
    if dep.prefix_shared_tokens >= context_tokens:
        raise DeploymentError(
            ("prefix_shared",),
            f"{dep.prefix_shared_tokens:,} shared tokens leave nothing of a "
            f"{context_tokens:,}-token context to each sequence; give a prefix shorter "
            "than every context",
        )


def _check_memory_inputs(dep: Deployment) -> None:
    if dep.gpu_util is not None and not 0 < dep.gpu_util <= 1:
        raise DeploymentError(
            ("gpu_util",), f"{float(dep.gpu_util):g} is not a fraction in (0, 1], e.g. 0.9"
        )
    if dep.reserve is not None and not 0 <= dep.reserve < 1:
        raise DeploymentError(
            ("reserve",), f"{float(dep.reserve):g} is not a fraction in [0, 1), e.g. 0.1"
        )
    if dep.reserve is not None:
        for other, value in (("gpu_util", dep.gpu_util), ("overhead", dep.overhead_bytes)):
            if value is not None:
                raise DeploymentError(
                    ("reserve", other),
                    "a reserved fraction replaces the memory share and the overhead; "
                    "give one or the other",
                )
    if dep.kv_memory_bytes is not None:
        given = {
            "gpu_memory": dep.gpu_memory_bytes,
            "gpu_util": dep.gpu_util,
            "reserve": dep.reserve,
            "overhead": dep.overhead_bytes,
        }
        for other, value in given.items():
            if value is not None:
                raise DeploymentError(
                    ("kv_memory", other),
                    "the KV budget is given directly, so the other cannot change it; "
                    "give one or the other",
                )


def _check_layout(model: ModelSpec, gpu_count: int, tp: int, pp: int) -> None:
    if gpu_count % (tp * pp):
        raise DeploymentError(
            ("tp", "pp"),
            f"{gpu_count} GPUs cannot be split into groups of tp x pp = {tp * pp}; "
            f"use a tp/pp whose product divides {gpu_count}",
        )
    if pp > model.num_layers:
        raise DeploymentError(
            ("pp",),
            f"{pp} stages exceed the {model.num_layers} layers of {model.id}",
            model_specific=True,
        )


def rank_model(model: ModelSpec, tp: int) -> ModelSpec:
    """What one tensor-parallel rank holds (:meth:`ModelSpec.per_rank`); heads that ``tp``
    does not split are refused here, the last rule a deployment is checked by."""
    try:
        return model.per_rank(tp)
    except ParallelismError as exc:
        raise DeploymentError(("tp",), str(exc), model_specific=True) from None


def default_tp(gpu_count: int, pp: int) -> int:
    """The GPUs of one pipeline stage: the largest tensor parallelism the set could take."""
    if pp < 1 or gpu_count % pp:
        raise DeploymentError(("pp",), f"{pp} does not divide the {gpu_count} GPUs")
    return gpu_count // pp


def _splits(model: ModelSpec, per_stage: int) -> Iterator[tuple[int, str | None]]:
    """Each tensor-parallel size dividing the ``per_stage`` GPUs of a stage, largest first, with
    why the heads refuse it (None: they split). Lazy: a layout stops at the first size it takes,
    and each split costs a per-rank model."""
    for tp in range(per_stage, 0, -1):
        if per_stage % tp:
            continue
        try:
            model.per_rank(tp)
        except ParallelismError as exc:
            yield tp, str(exc)
        else:
            yield tp, None


def tp_sizes(model: ModelSpec, per_stage: int) -> list[int]:
    """The tensor-parallel sizes, largest first, that divide the ``per_stage`` GPUs of a stage
    and split every layer's heads (tp 1 always does); the GPUs left over serve as replicas."""
    return [tp for tp, refusal in _splits(model, per_stage) if refusal is None]


class TpChoice(NamedTuple):
    """The tensor-parallel size :func:`choose_tp` takes, and why."""

    tp: int
    reason: str | None
    """Why not every GPU of a stage (None: it is)."""


def choose_tp(
    model: ModelSpec, gpus: GpuSet, pp: int, fits: Callable[[TpChoice], bool]
) -> TpChoice:
    """Tensor parallelism when none is given, as a practitioner lays a model out: the largest
    size that splits the heads (:func:`tp_sizes`) within one node's scale-up link, the GPUs
    left over as data-parallel replicas; if the weights do not fit there (``fits``: the KV
    budget is positive, asked of each candidate with the reason it would be chosen for), the
    fewest nodes that do; if none fits, the largest size."""
    per_stage = default_tp(gpus.count, pp)
    node = gpus.accelerator.node_gpus
    # Sizes beyond a node come first (largest first); the walk stops at the largest local one.
    # A smaller tp holds at least as much on each GPU: if the largest local size does not fit,
    # no smaller one does.
    beyond: list[int] = []
    local: int | None = None
    refusal: str | None = None  # why the heads refuse every GPU of the stage
    for tp, refused in _splits(model, per_stage):
        if refused is not None:
            refusal = refusal or (refused if tp == per_stage else None)
            continue
        if node is None or tp <= node:
            local = tp
            break
        beyond.append(tp)
    sizes = beyond + ([] if local is None else [local])
    tried = ([] if local is None else [local]) + beyond[::-1]
    for tp in tried:
        choice = TpChoice(tp, _tp_reason(per_stage, tp, node, refusal, fitted=True))
        if fits(choice):
            return choice
    largest = sizes[0] if sizes else per_stage
    return TpChoice(largest, _tp_reason(per_stage, largest, node, refusal, fitted=False))


def _tp_reason(
    per_stage: int, tp: int, node: int | None, refusal: str | None, *, fitted: bool
) -> str | None:
    if node is not None and tp <= node < per_stage:
        which = "" if tp == node else " that splits the heads"
        return (
            f"tp {per_stage} would span {-(-per_stage // node)} nodes of {node} GPUs; "
            f"tp {tp} is the largest within one node{which}"
        )
    if fitted and node is not None and tp > node:
        return (
            f"the weights do not fit on one node of {node} GPUs; tp {tp} is the smallest "
            "split across nodes that holds them"
        )
    if tp == per_stage or refusal is None:
        return None
    return f"{refusal}; tp {tp} is the largest that does"


def deployment(
    model: ModelSpec,
    gpus: GpuSet,
    *,
    tp: int | None = None,
    pp: int = 1,
    weight_dtype: str | None = None,
    kv_dtype: str | KVFormat | None = None,
    gpu_util: float | Fraction | None = None,
    reserve: float | Fraction | None = None,
    eviction: Eviction = KEEP_ALL,
    **figures: int | None,
) -> Deployment:
    """Build a deployment from names and figures, filling in what a practitioner would assume:
    tp as :func:`choose_tp` lays the model out (None: choose), weights as the checkpoint ships
    (:func:`checkpoint_precision`: the model's released format unless ``weight_dtype`` overrides
    it), the KV cache and recurrent states at the model's dtype. ``kv_dtype`` is a format name
    (:data:`~kvcalc.engine.kvformat.PRESETS`) or a built format. ``figures`` are the remaining
    :class:`Deployment` fields (``block_size``, ``kv_memory_bytes``, ...); None keeps a default."""
    from kvcalc.engine.kvformat import KVFormatError, KVFormatRequest, check_stores, kv_format
    from kvcalc.engine.units import UnitError
    from kvcalc.engine.weight_names import weight_precision

    # None is "not given"; an empty name is refused like any unknown one, never the default.
    try:
        kv = (
            kv_dtype
            if isinstance(kv_dtype, KVFormat)
            else kv_format(KVFormatRequest(dtype=kv_dtype), model.default_dtype, model.kv_default)
        )
        check_stores(kv, model)
    except KVFormatError as exc:
        raise DeploymentError(("kv_dtype",), str(exc).removeprefix("--kv-dtype: ")) from None
    try:
        # None: the format the checkpoint ships in (the registry's ``weights:``, or the
        # config.json's quantization_config), else the model dtype. A joined name the tables
        # print (fp8+bf16) is read against the model.
        weights = weight_precision(model, weight_dtype)
    except UnitError as exc:
        raise DeploymentError(("weight_dtype",), str(exc)) from None
    given: dict[str, Any] = {k: v for k, v in figures.items() if v is not None}

    def build(tp: int, choice: TpChoice | None = None) -> Deployment:
        return Deployment(
            model=model,
            gpus=gpus,
            tp=tp,
            pp=pp,
            weights=weights,
            cache=cache_format(model, kv),
            gpu_util=None if gpu_util is None else as_fraction(gpu_util),
            reserve=None if reserve is None else as_fraction(reserve),
            eviction=eviction,
            tp_given=choice is None,
            block_size_given="block_size" in given,
            tp_reason=None if choice is None else choice.reason,
            **given,
        )

    if tp is not None:
        return build(tp)
    if pp > model.num_layers:
        build(default_tp(gpus.count, pp))  # refused for its layers before any split is tried
    # Each candidate is built with the reason it would be chosen for, so the one taken is
    # returned as built, not built again.
    built: dict[TpChoice, Deployment] = {}

    def fits(candidate: TpChoice) -> bool:
        built[candidate] = build(candidate.tp, candidate)
        return min(built[candidate].kv_budget_per_stage) > 0

    choice = choose_tp(model, gpus, pp, fits)
    taken = built.get(choice)
    return build(choice.tp, choice) if taken is None else taken
