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
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property

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

#: The share of GPU memory a serving engine takes by default (vLLM ``--gpu-memory-utilization``).
DEFAULT_GPU_UTIL = Fraction(9, 10)
#: vLLM's default ``--block-size`` (tokens per KV block) for attention layers.
DEFAULT_BLOCK_SIZE = 16


class DeploymentError(ValueError):
    """A deployment that cannot be built. ``fields`` names the inputs at fault (``tp``,
    ``kv_memory``, ...) so that each front end can word them its own way (``--kv-memory`` on the
    command line, ``kv_memory:`` in a spec file). ``model_specific`` marks a layout that other
    models could take (the heads or layers of this model do not split), as opposed to inputs
    that are wrong for every model."""

    def __init__(self, fields: tuple[str, ...], reason: str, *, model_specific: bool = False):
        super().__init__(f"{' and '.join(fields)}: {reason}")
        self.fields = fields
        self.reason = reason
        self.model_specific = model_specific

    def worded(self, name: Callable[[str], str]) -> str:
        """The message with each field named by ``name`` (e.g. ``kv_memory`` -> ``--kv-memory``)."""
        return f"{' and '.join(name(f) for f in self.fields)}: {self.reason}"


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
    prefix_shared_tokens: int = 0
    gpu_util: Fraction | None = None
    """None: :data:`DEFAULT_GPU_UTIL`, unless a reserve is given."""
    reserve: Fraction | None = None
    overhead_bytes: int | None = None
    gpu_memory_bytes: int | None = None
    weights_total_bytes: int | None = None
    kv_memory_bytes: int | None = None
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    """The scheduler's step (vLLM ``--max-num-batched-tokens``): it sizes the activation peak of
    the overhead estimate and, for vLLM, the sliding-window charge."""
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    eviction: Eviction = KEEP_ALL
    """Which tokens of each sequence the cache keeps (:mod:`kvcalc.engine.eviction`)."""
    per_rank: ModelSpec = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_deployment(self)
        object.__setattr__(self, "per_rank", rank_model(self.model, self.tp))

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
        stages = weights_per_gpu(self.model, self.weights, self.tp, self.pp)
        return tuple(s.bytes_per_gpu for s in stages)

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
                self.model, self.tp, self.pp, s, self.max_num_batched_tokens, self.max_num_seqs
            )
            for s in range(self.pp)
        )

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
        if getattr(dep, name) < 1:
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
    """Tensor parallelism when none is given: every GPU of the set, pp stages deep."""
    if pp < 1 or gpu_count % pp:
        raise DeploymentError(("pp",), f"{pp} does not divide the {gpu_count} GPUs")
    return gpu_count // pp


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
    tp over every GPU of a stage, weights as the checkpoint ships (:func:`checkpoint_precision`:
    the model's released format unless ``weight_dtype`` overrides it), the KV cache and recurrent
    states at the model's dtype. ``kv_dtype`` is a format name
    (:data:`~kvcalc.engine.kvformat.PRESETS`) or a built format. ``figures`` are the remaining
    :class:`Deployment` fields (``block_size``, ``kv_memory_bytes``, ...); None keeps a default."""
    from kvcalc.engine.kvformat import KVFormatError, KVFormatRequest, check_stores, kv_format
    from kvcalc.engine.quant import weight_format
    from kvcalc.engine.units import UnitError
    from kvcalc.engine.weights import checkpoint_precision

    # None is "not given"; an empty name is refused like any unknown one, never the default.
    try:
        kv = (
            kv_dtype
            if isinstance(kv_dtype, KVFormat)
            else kv_format(KVFormatRequest(dtype=kv_dtype), model.default_dtype)
        )
        check_stores(kv, model)
    except KVFormatError as exc:
        raise DeploymentError(("kv_dtype",), str(exc).removeprefix("--kv-dtype: ")) from None
    try:
        # None: the format the checkpoint ships in (the registry's ``weights:``, or the
        # config.json's quantization_config), else the model dtype.
        chosen = None if weight_dtype is None else weight_format(weight_dtype)
        weights = checkpoint_precision(model, chosen)
    except UnitError as exc:
        raise DeploymentError(("weight_dtype",), str(exc)) from None
    given = {k: v for k, v in figures.items() if v is not None}
    return Deployment(
        model=model,
        gpus=gpus,
        tp=tp if tp is not None else default_tp(gpus.count, pp),
        pp=pp,
        weights=weights,
        cache=cache_format(model, kv),
        gpu_util=None if gpu_util is None else as_fraction(gpu_util),
        reserve=None if reserve is None else as_fraction(reserve),
        eviction=eviction,
        **given,
    )


def largest_tp(model: ModelSpec, gpu_count: int, pp: int) -> int | None:
    """The largest tensor-parallel size a replica of ``model`` can take on ``gpu_count`` GPUs
    in ``pp`` stages (the rest become data-parallel replicas), or None when none can: a model
    whose heads tp 8 does not split (Falcon-7B's 71 query heads) still serves on 8 GPUs as
    8 replicas of tp 1, as engines run it."""
    if pp < 1 or gpu_count % pp or pp > model.num_layers:
        return None
    per_stage = gpu_count // pp
    for tp in range(per_stage, 0, -1):
        if per_stage % tp:
            continue
        try:
            model.per_rank(tp)
        except ParallelismError:
            continue
        return tp
    return None
