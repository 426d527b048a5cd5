"""Capacity planning: the fewest GPUs that serve ``users`` sequences of ``context`` tokens within
latency targets.

The search walks every accelerator given, every weight and KV dtype allowed, and GPU counts in
ascending order; at each count every tensor/pipeline split whose product divides the count, the
rest of the count being data-parallel replicas. A layout is kept when the users fit (the same
budget as `batch`: :func:`kvcalc.engine.capacity.max_batch`, or vLLM's block count) and, with
the users spread evenly over the replicas, the TPOT of one replica's step and the TTFT of one
prompt of ``context`` tokens meet the targets (:mod:`kvcalc.engine.latency`). The first count
that works ends the search for that accelerator and dtype pair: one GPU fewer of that kind did
not work, so every answer is minimal.

Pruning keeps the whole registry under a second: a split whose weights alone exceed the usable
memory (:func:`weights_cannot_fit`), or whose memory left after the weights cannot hold the
users' caches even unsharded and unpaged (:func:`users_cannot_fit`), is skipped before a
deployment is built; both are lower bounds, so no layout that fits is skipped.

Ranking: GPU count, then the tie-break (``price``: count x price per GPU-hour when prices are
given, else ``watts``: count x the board power, unknown last), then TPOT.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kvcalc.engine.deployment import Deployment, DeploymentError, deployment
from kvcalc.engine.hardware import Accelerator, GpuSet
from kvcalc.engine.kv import kv_bytes_per_sequence
from kvcalc.engine.latency import (
    UnknownWaves,
    can_time_communication,
    tpot_seconds,
    ttft_seconds,
)
from kvcalc.engine.requirements import batch_per_replica
from kvcalc.engine.spec import ModelSpec

if TYPE_CHECKING:
    from kvcalc.engine.profiles import DecodeProfile
    from kvcalc.engine.serving.base import KVPool, ServingEngine
    from kvcalc.engine.workload import Pools, ServingPoint, Workload
from kvcalc.engine.weights import weight_bytes

#: A deployment's KV pool as the engine sizes it: the sequences one replica runs at once at a
#: context, and the tokens its scheduler runs per step.
PoolOf = Callable[[Deployment], "KVPool"]


@dataclass(frozen=True)
class PlanRequest:
    model: ModelSpec
    users: int
    context_tokens: int
    accelerators: Sequence[Accelerator]
    max_gpus: int
    weight_dtypes: Sequence[str | None] = (None,)
    """None: the checkpoint's precision."""
    kv_dtypes: Sequence[str | None] = (None,)
    """None: the model's dtype."""
    max_tpot_seconds: float | None = None
    max_ttft_seconds: float | None = None
    roofline: bool = False
    """Hold the targets to the roofline bound instead of the realistic estimate."""
    mfu: float | None = None
    """Prefill efficiency of the TTFT estimate; None: each GPU's measured matmul ceiling."""
    prices: Mapping[str, float] | None = None
    """Accelerator id -> price per GPU-hour; the tie-break when given (else watts)."""
    measured: Mapping[tuple[str, int, int, str | None], int] | None = None
    """(accelerator id, tp, pp, KV dtype) -> the KV memory per GPU a start-up measured
    (`kvcalc calibrate`): such layouts take it in place of the estimated budget."""

    profile: DecodeProfile | None = None
    """The decode profile steps are timed with (:mod:`kvcalc.engine.profiles`); None: the
    GPU's registry figures. One that splits layers only (llama.cpp) searches tp 1 alone."""
    workload: Workload | None = None
    """Requests of ``input_len`` + ``output_len`` tokens (:mod:`kvcalc.engine.workload`): with a
    request rate, each layout is held to its steady state under that rate (``users`` is then
    1, a bound for the pruning only); without, ``users`` decode together and the TTFT is of
    one prompt of ``input_len``. None: ``users`` sequences of ``context_tokens``."""

    disaggregated: bool = False
    """Size prefill and decode pools apart (needs a request rate): each layout is a replica
    shape repeated for both pools (:func:`kvcalc.engine.workload.disaggregated_pools`)."""
    max_num_batched_tokens: int | None = None
    """``--max-num-batched-tokens`` given: every layout's engine takes it (its profile and its
    steps); None: each engine's own for the GPU (:meth:`KVPool.step_tokens`)."""

    def runs_tp(self, tp: int) -> bool:
        """Whether the profile steps are timed with can serve a tp group of ``tp``."""
        return self.profile is None or self.profile.runs_tp(tp)

    @property
    def prompt_tokens(self) -> int:
        """The prompt the TTFT is of."""
        return self.context_tokens if self.workload is None else self.workload.input_len

    @property
    def request_rate(self) -> float | None:
        return None if self.workload is None else self.workload.request_rate

    def __post_init__(self) -> None:
        if self.users < 1:
            raise ValueError(f"users must be at least 1, not {self.users}")
        if self.max_gpus < 1:
            raise ValueError(f"max_gpus must be at least 1, not {self.max_gpus}")


@dataclass(frozen=True)
class PlannedLayout:
    """One layout the search evaluated, with its answer."""

    deployment: Deployment = field(repr=False)
    max_batch: int
    """Sequences of the context that fit across all replicas."""
    tpot_seconds: float | None = None
    """Of one replica's step at ``batch_per_replica``; None when the users do not fit."""
    ttft_seconds: float | None = None
    """None when the users do not fit or the TPOT already misses its target."""
    batch_per_replica: int = 0
    serving: ServingPoint | None = None
    """One replica's steady state under the request's rate (None without a rate)."""
    pools: Pools | None = None
    """With --disaggregated: the prefill and decode replicas (the deployment's replicas are
    their sum)."""
    step_tokens: int | None = None
    """Under a request rate: the tokens one step of its engine carries (None without one)."""

    @property
    def accelerator(self) -> Accelerator:
        return self.deployment.gpus.accelerator

    @property
    def label(self) -> str:
        """The GPU set as ``4xH200`` (what ``--gpus`` of the other commands accepts)."""
        return f"{self.count}x{self.accelerator.id.upper()}"

    @property
    def count(self) -> int:
        return self.deployment.gpus.count

    @property
    def watts(self) -> int | None:
        tdp = self.accelerator.tdp_watts
        return None if tdp is None else tdp * self.count

    def price_per_hour(self, prices: Mapping[str, float] | None) -> float | None:
        if prices is None or self.accelerator.id not in prices:
            return None
        return prices[self.accelerator.id] * self.count


@dataclass(frozen=True)
class Plan:
    request: PlanRequest
    layouts: tuple[PlannedLayout, ...]
    """Every layout that meets the targets at its accelerator's smallest count, best first."""
    closest: PlannedLayout | None
    """When none meets the targets: the one that comes closest (None when nothing was built)."""
    evaluated: int
    weights_fit: bool
    """Whether any layout searched could hold the weights (else nothing was evaluated)."""
    left_out: tuple[str, ...] = ()
    """Accelerators left out because the profile's old llama.cpp build cannot be timed on them
    (no SM count to size its F16 mat-vec's waves: :class:`~kvcalc.engine.latency.UnknownWaves`):
    the id where every weight dtype searched was, else ``ID with D weights`` for those that were
    (the others are in :attr:`layouts`)."""

    @property
    def tie_break(self) -> str:
        return "price" if self.request.prices else "watts"


def splits(count: int, num_layers: int) -> Iterator[tuple[int, int, int]]:
    """(tp, pp, replicas) with tp x pp x replicas = count: widest tensor parallelism first."""
    for per_replica in range(count, 0, -1):
        if count % per_replica:
            continue
        for tp in range(per_replica, 0, -1):
            if per_replica % tp == 0 and per_replica // tp <= num_layers:
                yield tp, per_replica // tp, count // per_replica


def weights_cannot_fit(weights: int, usable_per_gpu: int, per_replica: int) -> bool:
    """The weights spread evenly over a replica's GPUs exceed one GPU's usable memory."""
    return weights / per_replica > usable_per_gpu


def users_cannot_fit(
    bounds: tuple[int, int], usable_per_gpu: int, count: int, per_replica: int, users: int
) -> bool:
    """The memory of all ``count`` GPUs, less a copy of the weights per replica, is short of
    ``users`` caches of one sequence each, unsharded (tensor parallelism only adds replicated
    heads, paging only rounds up). ``bounds``: total weight bytes, one sequence's KV bytes."""
    weights, per_sequence = bounds
    replicas = count // per_replica
    return usable_per_gpu * count - weights * replicas < users * per_sequence


def meets(layout: PlannedLayout, request: PlanRequest) -> bool:
    if layout.tpot_seconds is None or layout.ttft_seconds is None:
        return False
    if request.max_tpot_seconds is not None and layout.tpot_seconds > request.max_tpot_seconds:
        return False
    return request.max_ttft_seconds is None or layout.ttft_seconds <= request.max_ttft_seconds


def shortfall(layout: PlannedLayout, request: PlanRequest) -> float:
    """How far a layout is from the targets: the largest ratio of time to target (1 = met);
    layouts where the users do not fit rank after every layout where they do, by users held."""
    if layout.serving is not None and not layout.serving.stable:
        # Held the users but cannot keep up with the rate: the lighter each replica's share,
        # the closer (ranked before layouts that hold none).
        return 1e8 + layout.serving.request_rate
    if layout.tpot_seconds is None:
        return math.inf if layout.max_batch == 0 else 1e9 + request.users / layout.max_batch
    ratios = [1.0]
    if request.max_tpot_seconds is not None:
        ratios.append(layout.tpot_seconds / request.max_tpot_seconds)
    if request.max_ttft_seconds is not None and layout.ttft_seconds is not None:
        ratios.append(layout.ttft_seconds / request.max_ttft_seconds)
    return max(ratios)


def evaluate(dep: Deployment, request: PlanRequest, pool_of: PoolOf) -> PlannedLayout:
    """The users that fit on ``dep`` and, when they all do, its TPOT and (when the TPOT meets
    its target) its TTFT."""
    pool = pool_of(dep)
    per_replica = pool.max_batch(request.context_tokens)
    fits = per_replica * dep.replicas
    if fits < request.users or not can_time_communication(dep):
        return PlannedLayout(dep, fits)
    if request.request_rate is not None:
        return evaluate_rate(dep, request, per_replica, pool.step_tokens())
    batch = batch_per_replica(request.users, dep.replicas)
    context = request.context_tokens
    tpot = tpot_seconds(
        dep, batch=batch, context_tokens=context, roofline=request.roofline, mfu=request.mfu,
        profile=request.profile,
    )
    if request.max_tpot_seconds is not None and tpot > request.max_tpot_seconds:
        return PlannedLayout(dep, fits, tpot, None, batch)  # the prefill need not be timed
    ttft = ttft_seconds(
        dep, prompt_tokens=request.prompt_tokens, roofline=request.roofline, mfu=request.mfu,
        profile=request.profile,
    )
    return PlannedLayout(dep, fits, tpot, ttft, batch)


def evaluate_rate(
    dep: Deployment, request: PlanRequest, per_replica: int, step_tokens: int
) -> PlannedLayout:
    """``dep`` under the request's rate, spread evenly over its replicas, its steps carrying
    ``step_tokens``: each replica's steady state (:func:`kvcalc.engine.workload.solve`), its
    TPOT the mean mixed step, its TTFT the prefill under load; not timed (None) when a replica
    cannot keep up."""
    from kvcalc.engine.workload import solve, step_time

    workload, rate = request.workload, request.request_rate
    assert workload is not None and rate is not None
    workload = replace(workload, batched_tokens=step_tokens)
    step = step_time(dep, workload, mfu=request.mfu, profile=request.profile)
    point = solve(workload, rate / dep.replicas, step, per_replica)
    fits = per_replica * dep.replicas
    if not point.stable:
        return PlannedLayout(dep, fits, serving=point, step_tokens=step_tokens)
    return PlannedLayout(
        dep, fits, point.step_seconds, point.ttft_seconds, point.decode_batch, serving=point,
        step_tokens=step_tokens,
    )


def build(
    model: ModelSpec, accelerator: Accelerator, count: int, tp: int, pp: int,
    weight_dtype: str | None, kv_dtype: str | None,
    measured: Mapping[tuple[str, int, int, str | None], int] | None = None,
    max_num_batched_tokens: int | None = None,
) -> Deployment | None:
    # A measured budget holds for the checkpoint's weights only (it was measured with them).
    kv_memory = None if measured is None or weight_dtype is not None else measured.get(
        (accelerator.id, tp, pp, kv_dtype))
    try:
        return deployment(
            model, GpuSet(accelerator, count), tp=tp, pp=pp,
            weight_dtype=weight_dtype, kv_dtype=kv_dtype, kv_memory_bytes=kv_memory,
            max_num_batched_tokens=max_num_batched_tokens,
        )
    except DeploymentError as exc:
        if exc.model_specific:
            return None  # this model's heads or layers do not split this way
        raise


@dataclass
class _Search:
    request: PlanRequest
    pool_of: PoolOf
    found: list[PlannedLayout] = field(default_factory=list)
    closest: PlannedLayout | None = None
    evaluated: int = 0
    weights_fit: bool = False

    def note(self, layout: PlannedLayout) -> None:
        self.evaluated += 1
        if self.closest is None or shortfall(layout, self.request) < shortfall(
            self.closest, self.request
        ):
            self.closest = layout

    def smallest_pools(
        self, accelerator: Accelerator, weight_dtype: str | None, kv_dtype: str | None
    ) -> PlannedLayout | None:
        """With --disaggregated: the replica shape (tp x pp) whose prefill and decode pools
        together take the fewest GPUs, each pool as :func:`disaggregated_pools` sizes it."""
        from kvcalc.engine.workload import disaggregated_pools, step_time

        request = self.request
        workload = request.workload
        assert workload is not None
        model = request.model
        best: PlannedLayout | None = None
        for per_replica in range(1, request.max_gpus + 1):
            for tp, pp, replicas in splits(per_replica, model.num_layers):
                if replicas != 1 or not request.runs_tp(tp):
                    continue
                dep = build(model, accelerator, per_replica, tp, pp, weight_dtype, kv_dtype,
                            request.measured, request.max_num_batched_tokens)
                if dep is None or not can_time_communication(dep):
                    continue
                pool = self.pool_of(dep)
                held = pool.max_batch(request.context_tokens)
                if held < 1:
                    continue
                self.weights_fit = True
                carried = replace(workload, batched_tokens=pool.step_tokens())
                step = step_time(dep, carried, mfu=request.mfu, profile=request.profile)
                pools = disaggregated_pools(
                    carried, step, step, held,
                    max_tpot_seconds=request.max_tpot_seconds,
                    max_ttft_seconds=request.max_ttft_seconds,
                    max_replicas=request.max_gpus // per_replica,
                )
                self.evaluated += 1
                if pools is None:
                    continue
                count = (pools.prefill_replicas + pools.decode_replicas) * per_replica
                if count > request.max_gpus or (best is not None and count > best.count):
                    continue
                whole = build(model, accelerator, count, tp, pp, weight_dtype, kv_dtype,
                              request.measured, request.max_num_batched_tokens)
                if whole is None:
                    continue
                point = pools.decode_point
                layout = PlannedLayout(
                    whole, held * pools.decode_replicas, point.step_seconds, pools.ttft_seconds,
                    point.decode_batch, serving=point, pools=pools,
                    step_tokens=carried.batched_tokens,
                )
                if best is None or rank_key(layout, request) < rank_key(best, request):
                    best = layout
        return None if best is None else chosen_by_plan(best)

    def smallest_count(
        self, accelerator: Accelerator, weight_dtype: str | None, kv_dtype: str | None
    ) -> PlannedLayout | None:
        """The best layout at the smallest count that meets the targets, or None."""
        request = self.request
        model = request.model
        probe = build(model, accelerator, 1, 1, 1, weight_dtype, kv_dtype)
        if probe is None:
            return None
        bounds = (
            weight_bytes(model, probe.weights),
            kv_bytes_per_sequence(model, request.context_tokens, probe.cache),
        )
        usable = probe.usable_bytes_per_gpu  # every layout of this GPU: the default share
        for count in range(1, request.max_gpus + 1):
            best: PlannedLayout | None = None
            for tp, pp, _ in splits(count, model.num_layers):
                if not request.runs_tp(tp):
                    continue  # the runtime splits layers, not tensors
                # A measured budget is the layout's own: the bounds of the default share do
                # not hold for it.
                measured = (accelerator.id, tp, pp, kv_dtype) in (request.measured or {})
                if not measured and weights_cannot_fit(bounds[0], usable, tp * pp):
                    continue
                self.weights_fit = True
                if not measured and users_cannot_fit(bounds, usable, count, tp * pp,
                                                     request.users):
                    continue
                dep = build(model, accelerator, count, tp, pp, weight_dtype, kv_dtype,
                            request.measured, request.max_num_batched_tokens)
                if dep is None:
                    continue
                layout = evaluate(dep, request, self.pool_of)
                self.note(layout)
                if meets(layout, request) and (best is None or _faster(layout, best)):
                    best = layout
            if best is not None:
                return chosen_by_plan(best)
        return None


def plan_tp_reason(dep: Deployment) -> str | None:
    """Why plan's tp is not every GPU of a stage (the layout keys' ``tp_reason``): the search
    kept it; None when it is every GPU of a stage."""
    if dep.replicas == 1:
        return None
    return (
        f"of the splits of {dep.gpus.count} GPUs that meet the targets, plan kept the one "
        "with the lowest TPOT"
    )


def chosen_by_plan(layout: PlannedLayout) -> PlannedLayout:
    """An answer's deployment marked as plan's choice of tp (``tp_given`` false), as a command
    marks the tp it chose; built with an explicit tp, the search's layouts are marked given."""
    dep = layout.deployment
    chosen = dataclasses.replace(dep, tp_given=False, tp_reason=plan_tp_reason(dep))
    return dataclasses.replace(layout, deployment=chosen)


def _faster(a: PlannedLayout, b: PlannedLayout) -> bool:
    assert a.tpot_seconds is not None and b.tpot_seconds is not None
    return a.tpot_seconds < b.tpot_seconds


def rank_key(layout: PlannedLayout, request: PlanRequest) -> tuple[int, float, float]:
    """GPU count, then the tie-break (price or watts; unknown last), then TPOT."""
    if request.prices:
        cost = layout.price_per_hour(request.prices)
    else:
        watts = layout.watts
        cost = None if watts is None else float(watts)
    return layout.count, math.inf if cost is None else cost, layout.tpot_seconds or math.inf


def plan(request: PlanRequest, pool_of: PoolOf) -> Plan:
    """Every accelerator and dtype pair's smallest layout that meets the targets, ranked."""
    search = _Search(request, pool_of)
    # An old llama.cpp build's F16 steps on a GPU whose waves the registry cannot size are
    # refused; over many GPUs that GPU is left out, and only a search that could time no GPU
    # at all is refused.
    unknown: list[UnknownWaves] = []
    left_out: list[str] = []
    for accelerator in request.accelerators:
        untimed: list[str | None] = []
        for weight_dtype in request.weight_dtypes:
            for kv_dtype in request.kv_dtypes:
                find = search.smallest_pools if request.disaggregated else search.smallest_count
                try:
                    best = find(accelerator, weight_dtype, kv_dtype)
                except UnknownWaves as exc:
                    unknown.append(exc)
                    if weight_dtype not in untimed:
                        untimed.append(weight_dtype)
                    continue
                if best is not None:
                    search.found.append(best)
        if untimed:
            left_out.append(left_out_label(accelerator.id, untimed, request.weight_dtypes))
    combinations = (
        len(request.accelerators) * len(request.weight_dtypes) * len(request.kv_dtypes)
    )
    if unknown and len(unknown) == combinations:
        raise unknown[0]
    ranked = sorted(search.found, key=lambda layout: rank_key(layout, request))
    return Plan(
        request=request,
        layouts=tuple(ranked),
        closest=None if ranked else search.closest,
        evaluated=search.evaluated,
        weights_fit=search.weights_fit,
        left_out=tuple(left_out),
    )


def left_out_label(
    accelerator_id: str, untimed: Sequence[str | None], searched: Sequence[str | None]
) -> str:
    """How a left-out accelerator is named: alone when none of the weight dtypes searched could
    be timed on it, else with the dtypes that could not (the others' layouts are shown)."""
    if set(untimed) == set(searched):
        return accelerator_id
    names = ", ".join(d or "the model's own" for d in untimed)
    return f"{accelerator_id} with {names} weights"


def pool_rule(engine: ServingEngine, options: Any = None) -> PoolOf:
    """Each deployment's pool as ``engine`` sizes it (its ``max_batch`` 0 when none fits or the
    engine would refuse the layout)."""
    return lambda dep: engine.pool(dep, options)
