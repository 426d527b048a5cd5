"""Capacity: how many sequences fit in the memory left after the weights.

Per GPU: budget = usable memory - weights on that GPU - runtime overhead (activations, workspace,
communication buffers), where usable = reported memory x gpu_util, or memory x (1 - reserve) when
a fraction is reserved instead (seed 004: "leave 10% for activations, workspace and CUDA graphs").

The cache is paged, as serving engines page it: every layer stores a sequence's tokens in blocks
of ``block_size`` tokens, so a sequence costs whole blocks. Under tensor parallelism each GPU
holds the per-rank slice of every layer of its pipeline stage (:meth:`ModelSpec.per_rank`), and
the tightest stage decides. ``prefix_shared`` tokens (a common system prompt) are stored once
and shared by all sequences, in whole blocks, as prefix caching shares them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcalc.engine.kv import layer_bytes_per_token, mixer_counts
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import MAX_CONTEXT_TOKENS, DType, GiB


@dataclass(frozen=True)
class Stage:
    """One pipeline stage: its layers and the KV budget of one of its GPUs."""

    index: int
    layers: range
    kv_budget_bytes: int


@dataclass(frozen=True)
class Layout:
    """What one GPU of each stage stores for a sequence: the per-rank model, its stages, the KV
    dtype and the paging."""

    model: ModelSpec
    """The per-rank model (heads already split by tensor parallelism)."""
    stages: tuple[Stage, ...]
    kv_dtype: DType
    block_size: int = 16
    prefix_shared_tokens: int = 0


def usable_bytes(memory_bytes: int, gpu_util: float | None, reserve: float | None) -> int:
    """Memory a serving engine may use on one GPU: x gpu_util, or minus a reserved fraction."""
    if reserve is not None:
        return math.floor(memory_bytes * (1 - reserve))
    return math.floor(memory_bytes * (gpu_util if gpu_util is not None else 0.9))


def stage_bytes_per_sequence(layout: Layout, stage: Stage, context_tokens: int) -> tuple[int, int]:
    """(bytes each sequence adds, bytes shared by all sequences) on one GPU of ``stage``.

    Each layer holds ceil(tokens_held / block) blocks plus its fixed state. Layers that hold the
    whole context share the first floor(prefix / block) blocks; a window that has slid past the
    prefix shares nothing.
    """
    unique = shared = 0
    block = layout.block_size
    shared_tokens = min(layout.prefix_shared_tokens, context_tokens) // block * block
    for mixer, layers in mixer_counts(layout.model, stage.layers):
        per_token = layer_bytes_per_token(mixer, layout.kv_dtype)
        held = mixer.tokens_held(context_tokens)
        blocks_tokens = -(-held // block) * block
        state = layout.kv_dtype.bytes_for(mixer.state_elements())
        common = shared_tokens if held == context_tokens and per_token else 0
        unique += ((blocks_tokens - common) * per_token + state) * layers
        shared += common * per_token * layers
    return unique, shared


def max_batch(layout: Layout, context_tokens: int) -> int:
    """The most sequences of ``context_tokens`` that fit on every stage (0 when none does)."""
    best: int | None = None
    for stage in layout.stages:
        unique, shared = stage_bytes_per_sequence(layout, stage, context_tokens)
        room = stage.kv_budget_bytes - shared
        fits = 0 if room <= 0 else (room // unique if unique else MAX_BATCH_UNBOUNDED)
        best = fits if best is None else min(best, fits)
    return best or 0


#: Reported when a stage holds no per-sequence bytes at all (never for a real model).
MAX_BATCH_UNBOUNDED = 10**12


def kv_tokens_capacity(layout: Layout) -> int:
    """Tokens the KV pool holds at full per-token cost: whole blocks of the stage's per-token
    bytes (before any window caps them), minimum over stages."""
    capacities = []
    for stage in layout.stages:
        per_token = sum(
            layer_bytes_per_token(m, layout.kv_dtype) * n
            for m, n in mixer_counts(layout.model, stage.layers)
        )
        if per_token == 0 or stage.kv_budget_bytes <= 0:
            capacities.append(0 if stage.kv_budget_bytes <= 0 else MAX_CONTEXT_TOKENS)
            continue
        blocks = stage.kv_budget_bytes // (per_token * layout.block_size)
        capacities.append(blocks * layout.block_size)
    return min(capacities)


def max_context_at_batch_1(layout: Layout) -> int | None:
    """The longest context one sequence can have, or None when windows and states bound the
    cache so that any context up to the 2^30-token limit fits."""
    if max_batch(layout, 1) < 1:
        return 0
    if max_batch(layout, MAX_CONTEXT_TOKENS) >= 1:
        return None
    lo, hi = 1, MAX_CONTEXT_TOKENS  # fits at lo, not at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if max_batch(layout, mid) >= 1:
            lo = mid
        else:
            hi = mid
    return lo


# --------------------------------------------------------------------------------------------
# A deployment: GPUs, parallelism and memory budget -> sequences that fit


def default_overhead_bytes(model: ModelSpec, tp: int, pp: int) -> int:
    """Runtime overhead per GPU when the user gives none (``--overhead``): the activation peak of
    an 8,192-token forward pass plus non-torch memory (NCCL / all-reduce buffers, cuBLAS
    workspaces), estimated as vLLM's profiler finds them (:mod:`kvcalc.engine.overhead`: about
    0.35 GiB of buffers on one GPU, 2.1 GiB with TP >= 2), on the most loaded stage."""
    from kvcalc.engine.overhead import (
        DEFAULT_MAX_NUM_BATCHED_TOKENS,
        DEFAULT_MAX_NUM_SEQS,
        activation_peak,
        non_torch_memory,
    )

    peak = max(
        activation_peak(
            model, tp, DEFAULT_MAX_NUM_BATCHED_TOKENS, DEFAULT_MAX_NUM_SEQS, last_stage=s == pp - 1
        )
        for s in range(pp)
    )
    return peak + non_torch_memory(tp, pp)


class DeploymentError(ValueError):
    """A parallel layout that cannot be built on the given GPUs."""


def replicas(gpu_count: int, tp: int, pp: int) -> int:
    """Data-parallel replicas: each holds the model on tp x pp GPUs with its own KV pool."""
    if tp < 1 or pp < 1:
        raise DeploymentError(f"--tp and --pp must be at least 1 (got tp={tp}, pp={pp})")
    if gpu_count % (tp * pp):
        raise DeploymentError(
            f"{gpu_count} GPUs cannot be split into groups of tp x pp = {tp * pp}; "
            f"use a --tp/--pp whose product divides {gpu_count}"
        )
    return gpu_count // (tp * pp)


@dataclass(frozen=True)
class ContextCapacity:
    context_tokens: int
    max_batch: int
    """Sequences of this context that fit across all replicas."""
    bytes_per_sequence_per_gpu: int
    """KV bytes one sequence costs on a GPU of the tightest stage (blocks included)."""


@dataclass(frozen=True)
class Capacity:
    model_id: str
    model_name: str
    gpus: str
    gpu_count: int
    tp: int
    pp: int
    replicas: int
    kv_dtype: str
    block_size: int
    gpu_memory_bytes: int
    usable_bytes_per_gpu: int
    weights_bytes_per_gpu: int
    """On the most loaded GPU (the tightest pipeline stage)."""
    overhead_bytes_per_gpu: int
    kv_budget_bytes_per_gpu: int
    """On the tightest GPU; negative when the weights do not fit."""
    kv_tokens_capacity: int
    """Tokens the pools of all replicas hold at full per-token cost."""
    max_context_at_batch_1: int | None
    contexts: tuple[ContextCapacity, ...]
    reason: str | None
    """Why nothing fits, or None when at least one sequence fits at the first context."""

    @property
    def fits(self) -> bool:
        return self.reason is None


def build_layout(
    model: ModelSpec,
    tp: int,
    stages: tuple[range, ...],
    kv_budget_per_stage: tuple[int, ...],
    kv_dtype: DType,
    block_size: int = 16,
    prefix_shared_tokens: int = 0,
) -> Layout:
    return Layout(
        model=model.per_rank(tp),
        stages=tuple(
            Stage(i, layers, budget)
            for i, (layers, budget) in enumerate(zip(stages, kv_budget_per_stage, strict=True))
        ),
        kv_dtype=kv_dtype,
        block_size=block_size,
        prefix_shared_tokens=prefix_shared_tokens,
    )


def capacity(
    model: ModelSpec,
    *,
    gpus: str,
    gpu_count: int,
    gpu_memory_bytes: int,
    tp: int,
    stages: tuple[range, ...],
    weights_per_stage: tuple[int, ...],
    kv_dtype: DType,
    contexts: list[int],
    usable_per_gpu: int,
    overhead_per_gpu: int,
    kv_memory_per_gpu: int | None = None,
    block_size: int = 16,
    prefix_shared_tokens: int = 0,
) -> Capacity:
    """Sequences that fit at each context, and the budget behind the answer."""
    pp = len(stages)
    n_replicas = replicas(gpu_count, tp, pp)
    if kv_memory_per_gpu is not None:
        budgets = tuple(kv_memory_per_gpu for _ in stages)
    else:
        budgets = tuple(usable_per_gpu - w - overhead_per_gpu for w in weights_per_stage)
    layout = build_layout(model, tp, stages, budgets, kv_dtype, block_size, prefix_shared_tokens)
    tight = min(range(pp), key=lambda s: budgets[s])
    per_context = tuple(
        ContextCapacity(
            ctx,
            max_batch(layout, ctx) * n_replicas,
            sum(stage_bytes_per_sequence(layout, layout.stages[tight], ctx)),
        )
        for ctx in contexts
    )
    reason = _does_not_fit(
        weights=max(weights_per_stage),
        usable=usable_per_gpu,
        overhead=overhead_per_gpu,
        budget=min(budgets),
        first=per_context[0] if per_context else None,
        overridden=kv_memory_per_gpu is not None,
    )
    return Capacity(
        model_id=model.id,
        model_name=model.name,
        gpus=gpus,
        gpu_count=gpu_count,
        tp=tp,
        pp=pp,
        replicas=n_replicas,
        kv_dtype=kv_dtype.name,
        block_size=block_size,
        gpu_memory_bytes=gpu_memory_bytes,
        usable_bytes_per_gpu=usable_per_gpu,
        weights_bytes_per_gpu=max(weights_per_stage),
        overhead_bytes_per_gpu=overhead_per_gpu,
        kv_budget_bytes_per_gpu=min(budgets),
        kv_tokens_capacity=kv_tokens_capacity(layout) * n_replicas,
        max_context_at_batch_1=max_context_at_batch_1(layout),
        contexts=per_context,
        reason=reason,
    )


def _gib(n: int) -> str:
    return f"{n / GiB:,.2f} GiB"


def _does_not_fit(
    *,
    weights: int,
    usable: int,
    overhead: int,
    budget: int,
    first: ContextCapacity | None,
    overridden: bool,
) -> str | None:
    if not overridden and weights > usable:
        return f"weights {_gib(weights)} > {_gib(usable)} usable per GPU"
    if not overridden and weights + overhead >= usable:
        return (
            f"weights {_gib(weights)} + overhead {_gib(overhead)} leave no KV memory "
            f"of {_gib(usable)} usable per GPU"
        )
    if budget <= 0:
        return f"KV budget {_gib(budget)} per GPU"
    if first is not None and first.max_batch == 0:
        return (
            f"one sequence of {first.context_tokens:,} tokens needs "
            f"{_gib(first.bytes_per_sequence_per_gpu)} per GPU > KV budget {_gib(budget)}"
        )
    return None
