"""Serving workloads: requests of ``input_len`` prompt tokens and ``output_len`` generated tokens
arriving at ``request_rate`` per second, served by one or more replicas -- the steady state a
real server runs, not a batch decoding alone.

**Aggregated serving with chunked prefill** (vLLM V1, SGLang, TensorRT-LLM's PyTorch backend:
each step carries every running request's decode token plus prompt tokens up to the step budget,
``max_num_batched_tokens``). At a per-replica arrival rate ``lam`` and a step time ``t``:

- decode batch ``B = lam x output_len x t`` (Little's law on the decode phase: a request spends
  ``output_len`` steps decoding);
- prefill tokens per step ``p = lam x input_len x t`` (the prompts arriving in one step);
- the step time ``t = step(B, p)``: the decode batch's reads and FLOPs (at the mean decode
  context ``input_len + output_len / 2``) with the chunk's FLOPs added, so the step slows as the
  prefill share grows (:func:`mixed_step_seconds`). ``t`` is the smallest fixed point, found by
  bisection; none (the step outgrows the time it has) means the rate exceeds the replica.

**TTFT under load**: a prompt needs ``ceil(input_len / (budget - B))`` steps of the chunk budget
left after the decode tokens, ``S`` seconds; the prefill "server" is busy ``rho = lam x S``.
Arrivals are Poisson (what vLLM's and SGLang's ``benchmark_serving --request-rate`` send:
exponential gaps, burstiness 1) and the service time is deterministic for a fixed prompt
length, so the wait is M/D/1's mean (Pollaczek-Khinchine with zero service variance):
``Wq = rho S / (2 (1 - rho))``; ``TTFT = Wq + S``. M/M/1 would double the wait, which fits
prompts of exponentially spread lengths, not a fixed ``input_len``.

**Concurrency** (Little's law on the whole server): ``N = lam x (TTFT + output_len x t)``.

**Disaggregated serving** (prefill and decode pools apart): the prefill pool is sized by prompt
tokens per second (each replica prefills full budget-sized steps), the decode pool by the
decode batch its TPOT allows and its KV cache holds (:func:`disaggregated_pools`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.profiles import DecodeProfile

#: The step budget when none is given: vLLM V1's ``max_num_batched_tokens`` for its OpenAI
#: server on GPUs of 70 GiB or more (``EngineArgs`` usage-context defaults), SGLang's
#: ``chunked_prefill_size`` 8192 on such GPUs, TensorRT-LLM's ``max_num_tokens`` 8192.
DEFAULT_BATCHED_TOKENS = 8192
#: benchmark_serving's random dataset defaults (``--random-input-len``, ``--random-output-len``).
DEFAULT_INPUT_LEN = 1024
DEFAULT_OUTPUT_LEN = 128
#: The longest step the solver considers: a step of a minute is no serving.
MAX_STEP_SECONDS = 60.0

#: Time of one step carrying ``decode_batch`` decode tokens and ``prefill_tokens`` prompt tokens.
StepTime = Callable[[int, int], float]


@dataclass(frozen=True)
class Workload:
    input_len: int
    output_len: int
    request_rate: float | None = None
    """Requests per second, all replicas (None: a closed batch of users, no arrivals)."""
    batched_tokens: int = DEFAULT_BATCHED_TOKENS
    """Tokens one step carries at most (``max_num_batched_tokens``)."""

    def __post_init__(self) -> None:
        if self.input_len < 1 or self.output_len < 1:
            raise ValueError("input and output lengths must be at least 1 token")
        if self.request_rate is not None and not (
            math.isfinite(self.request_rate) and self.request_rate > 0
        ):
            raise ValueError(f"request rate must be positive, not {self.request_rate}")
        if self.batched_tokens < 1:
            raise ValueError("the step budget must be at least 1 token")

    @property
    def context_tokens(self) -> int:
        """The longest a request's sequence grows: what its KV cache must hold."""
        return self.input_len + self.output_len

    @property
    def decode_context(self) -> int:
        """The mean context a decode step reads over a request's generation."""
        return self.input_len + self.output_len // 2


@dataclass(frozen=True)
class ServingPoint:
    """One replica's steady state under a workload (None fields: not stable)."""

    request_rate: float
    """Requests per second arriving at this replica."""
    stable: bool
    why: str | None = None
    """Why the replica cannot keep up (None when stable)."""
    step_seconds: float = math.inf
    """A step's time: the TPOT (inter-token latency) every running request sees."""
    decode_batch: int = 0
    """Requests decoding at once (Little's law, rounded up)."""
    prefill_tokens_per_step: float = 0.0
    prefill_seconds: float = math.inf
    """Steps a prompt's chunks need, times the step."""
    queue_seconds: float = math.inf
    """M/D/1 mean wait before a prompt's first chunk."""
    prefill_utilization: float = math.inf

    @property
    def ttft_seconds(self) -> float:
        return self.queue_seconds + self.prefill_seconds

    def concurrency(self, workload: Workload) -> float:
        """Requests in the replica at once (Little's law: rate x time in the system)."""
        if not self.stable:
            return math.inf
        return self.request_rate * (self.ttft_seconds + workload.output_len * self.step_seconds)


def md1_wait_seconds(utilization: float, service_seconds: float) -> float:
    """M/D/1's mean queueing delay (Pollaczek-Khinchine, deterministic service)."""
    if utilization >= 1:
        return math.inf
    return utilization * service_seconds / (2 * (1 - utilization))


def solve(
    workload: Workload, rate: float, step: StepTime, max_batch: int | None = None
) -> ServingPoint:
    """The steady state of one replica receiving ``rate`` requests per second: the smallest mean
    step time ``t`` with ``decode_step + rate x chunks x extra <= t`` (see the module), then
    its TTFT under load."""
    out, prompt, budget = workload.output_len, workload.input_len, workload.batched_tokens

    def batch_at(t: float) -> int:
        return max(1, math.ceil(rate * out * t - 1e-9))

    def shape(batch: int) -> tuple[int, int] | None:
        """(chunks per prompt, tokens per chunk) with the budget the decode tokens leave."""
        room = budget - batch
        if room < 1:
            return None
        chunks = math.ceil(prompt / room)
        return chunks, math.ceil(prompt / chunks)

    def mean_step(t: float) -> float:
        """Every step's decode work plus the prefill work arriving per step: each prompt's
        chunks add what a step carrying one takes beyond a decode-only step."""
        batch = batch_at(t)
        chunking = shape(batch)
        if chunking is None:
            return math.inf
        chunks, tokens = chunking
        decode_only = step(batch, 0)
        extra = step(batch, tokens) - decode_only
        return decode_only + rate * chunks * extra * t

    def feasible(t: float) -> bool:
        return mean_step(t) <= t

    limit = MAX_STEP_SECONDS
    if max_batch is not None:
        # Beyond the batch the KV cache holds, requests wait for memory: not a steady state.
        limit = min(limit, max_batch / (rate * out))
    lo = step(1, 0)
    if lo > limit:
        return ServingPoint(rate, False, _why_unstable(max_batch, batch_at(lo)))
    # The first feasible point on a geometric grid, then bisection below it.
    t = lo
    while not feasible(t):
        if t >= limit:
            return ServingPoint(rate, False, _why_unstable(max_batch, batch_at(limit)))
        lo, t = t, min(t * 1.25, limit)
    if t > lo:
        _, t = bisected(lo, t, feasible, 60)
    batch = batch_at(t)
    if max_batch is not None and batch > max_batch:
        return ServingPoint(rate, False, _why_unstable(max_batch, batch))
    chunking = shape(batch)
    if chunking is None:
        return ServingPoint(rate, False, "decode tokens fill the step budget: no room to prefill")
    chunks, tokens = chunking
    service = chunks * step(batch, tokens)
    utilization = rate * prompt * t / (budget - batch)
    if utilization >= 1:
        return ServingPoint(
            rate, False, "prompts arrive faster than the step budget left prefills them"
        )
    return ServingPoint(
        request_rate=rate,
        stable=True,
        step_seconds=t,
        decode_batch=batch,
        prefill_tokens_per_step=rate * prompt * t,
        prefill_seconds=service,
        # A prompt waits for the step under way to end (half a step on average), then for the
        # prompts ahead of it in the budget (M/D/1).
        queue_seconds=t / 2 + md1_wait_seconds(utilization, service),
        prefill_utilization=utilization,
    )


def _why_unstable(max_batch: int | None, batch: int) -> str:
    if max_batch is not None and batch > max_batch:
        return f"the decode batch would exceed the {max_batch:,} sequences the KV cache holds"
    return "each step takes longer than the rate allows: the queue grows without bound"


def max_rate(
    workload: Workload,
    step: StepTime,
    max_batch: int | None = None,
    *,
    max_tpot_seconds: float | None = None,
    max_ttft_seconds: float | None = None,
) -> float:
    """The highest request rate one replica serves stably within the targets (0: none)."""

    def ok(rate: float) -> bool:
        point = solve(workload, rate, step, max_batch)
        if not point.stable:
            return False
        if max_tpot_seconds is not None and point.step_seconds > max_tpot_seconds:
            return False
        return max_ttft_seconds is None or point.ttft_seconds <= max_ttft_seconds

    lo, hi = 0.0, 1.0
    while ok(hi):
        lo, hi = hi, hi * 2
        if hi > 1e7:
            return lo
    lo, _ = bisected(lo, hi, lambda rate: not ok(rate), 50)
    return lo


def bisected(
    lo: float, hi: float, on_high_side: Callable[[float], bool], steps: int
) -> tuple[float, float]:
    """``(lo, hi)`` narrowed ``steps`` halvings around where ``on_high_side`` turns true (false
    at ``lo``, true at ``hi``)."""
    for _ in range(steps):
        mid = (lo + hi) / 2
        if on_high_side(mid):
            hi = mid
        else:
            lo = mid
    return lo, hi


# ------------------------------------------------------------------ a deployment's step


def mixed_step_seconds(
    dep: Deployment,
    workload: Workload,
    decode_batch: int,
    prefill_tokens: int,
    *,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> float:
    """One step of ``dep`` carrying ``decode_batch`` decode tokens (at the workload's mean
    decode context) and ``prefill_tokens`` prompt tokens: the decode step's reads, or its FLOPs
    plus the chunk's (its share of one prompt's prefill FLOPs) at the matmul rate, whichever is
    longer, plus the all-reduces of every token of the step, the fixed overhead and the
    profile's per-layer kernels."""
    from kvcalc.engine.flops import prefill_flops
    from kvcalc.engine.latency import (
        default_mfu,
        efficiency_of,
        prefill_compute_seconds,
        profiled,
        tpot_estimate,
    )

    # A prefill-only step (decode_batch 0) still reads the weights once: time a one-token
    # step for its reads and count none of its FLOPs. The weights multiply every token of the
    # step, prompt ones too, which picks their kernel (an old llama.cpp's mat-vec at one only).
    decode = tpot_estimate(
        dep,
        batch=max(1, decode_batch),
        context_tokens=workload.decode_context if decode_batch else 1,
        mfu=mfu,
        profile=profile,
        step_tokens=decode_batch + prefill_tokens,
    )
    share = mfu or default_mfu(dep.gpus.accelerator)
    prompt = prefill_flops(dep.model, workload.input_len).total
    chunk = prefill_compute_seconds(dep, prompt * prefill_tokens // workload.input_len, share)
    compute = ((decode.compute_seconds or 0.0) if decode_batch else 0.0) + (chunk or 0.0)
    eff = efficiency_of(dep.gpus.accelerator)
    communication, overhead = profiled(dep, eff, profile, decode_batch + prefill_tokens)
    # One pass of the layers' kernels per step, however many tokens it carries.
    return max(decode.memory_seconds, compute) + communication + overhead + decode.layer_seconds


def step_time(
    dep: Deployment,
    workload: Workload,
    *,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> StepTime:
    """:func:`mixed_step_seconds` of ``dep`` as the solver calls it (memoised: the solver asks
    for the same batches many times)."""
    cache: dict[tuple[int, int], float] = {}

    def step(decode_batch: int, prefill_tokens: int) -> float:
        key = (decode_batch, prefill_tokens)
        if key not in cache:
            cache[key] = mixed_step_seconds(
                dep, workload, decode_batch, prefill_tokens, mfu=mfu, profile=profile
            )
        return cache[key]

    return step


# ------------------------------------------------------------------ disaggregated


@dataclass(frozen=True)
class Pools:
    """Prefill and decode replicas sized apart for one request rate."""

    prefill_replicas: int
    decode_replicas: int
    prefill_tokens_per_second: float
    """Prompt tokens one prefill replica processes per second (full budget-sized steps)."""
    decode_point: ServingPoint
    """One decode replica's steady state (no prefill in its steps)."""
    ttft_seconds: float
    """Prefill service plus the M/D/1 wait at one prefill replica's share of the rate."""
    prefill_utilization: float
    """The busy share of one prefill replica."""
    queue_seconds: float
    """The M/D/1 wait before a prompt's prefill starts."""


def disaggregated_pools(
    workload: Workload,
    prefill_step: StepTime,
    decode_step: StepTime,
    max_batch: int | None,
    *,
    max_tpot_seconds: float | None = None,
    max_ttft_seconds: float | None = None,
    max_replicas: int = 1024,
) -> Pools | None:
    """The fewest prefill replicas whose prompt throughput keeps their utilisation below 1, and
    the fewest decode replicas whose steady state is stable within ``max_tpot_seconds``; None
    when no count up to ``max_replicas`` serves the rate."""
    rate = workload.request_rate
    if rate is None:
        raise ValueError("a disaggregated pool is sized for a request rate")
    budget = workload.batched_tokens
    full_step = prefill_step(0, budget)
    throughput = budget / full_step
    prompt_tokens = rate * workload.input_len
    steps = math.ceil(workload.input_len / budget)
    service = steps * prefill_step(0, min(budget, workload.input_len))
    prefill = max(1, math.floor(prompt_tokens / throughput) + 1)
    while True:  # the fewest prefill replicas that keep up (and meet the TTFT target)
        if prefill > max_replicas:
            return None
        utilization = rate / prefill * workload.input_len / throughput
        ttft = service + md1_wait_seconds(utilization, service)
        if max_ttft_seconds is None or ttft <= max_ttft_seconds:
            break
        if service > max_ttft_seconds:
            return None
        prefill += 1
    # Decode replicas: steps carry no prompt tokens (the KV arrives from the prefill pool).
    decode_only = replace_budget(workload)
    for count in range(1, max_replicas + 1):
        point = solve(decode_only, rate / count, lambda b, _p: decode_step(b, 0), max_batch)
        if point.stable and (
            max_tpot_seconds is None or point.step_seconds <= max_tpot_seconds
        ):
            return Pools(prefill, count, throughput, point, ttft, utilization, ttft - service)
    return None


def replace_budget(workload: Workload) -> Workload:
    """The workload as a decode-only replica sees it: no prompt shares its steps' budget (its
    TTFT terms are the prefill pool's)."""
    import dataclasses

    return dataclasses.replace(workload, batched_tokens=1 << 30)
