"""Capacity: how many sequences fit in the memory left after the weights.

The budget of each GPU comes from the deployment (:mod:`kvcalc.engine.deployment`: usable memory
- weights - runtime overhead, or a figure given directly).

The cache is paged, as serving engines page it: every layer stores a sequence's tokens in blocks
of ``block_size`` tokens, so a sequence costs whole blocks. Under tensor parallelism each GPU
holds the per-rank slice of every layer of its pipeline stage (:meth:`ModelSpec.per_rank`), and
the tightest stage decides. ``prefix_shared`` tokens (a common system prompt) are stored once
and shared by all sequences, in whole blocks, as prefix caching shares them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, NamedTuple

from kvcalc.engine.deployment import check_context
from kvcalc.engine.eviction import KEEP_ALL, Eviction, layer_tokens_held
from kvcalc.engine.kv import (
    CacheFormat,
    layer_bytes_per_token,
    layer_state_bytes,
    layer_tokens_bytes,
    mixer_counts,
)
from kvcalc.engine.mixers.base import Mixer
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import MAX_CONTEXT_TOKENS, GiB

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up (every whole-registry batch loads this module).
class Stage(NamedTuple):
    """One pipeline stage: its layers and the KV budget of one of its GPUs."""

    number: int
    """Its place in the pipeline, from 0 (``index`` is taken by the tuple method)."""
    layers: range
    kv_budget_bytes: int


@dataclass(frozen=True, eq=False)  # compared by identity: no __eq__/__hash__ to build
class Layout:
    """What one GPU of each stage stores for a sequence: the per-rank model, its stages, the cache
    format and the paging."""

    model: ModelSpec
    """The per-rank model (heads already split by tensor parallelism)."""
    stages: tuple[Stage, ...]
    cache: CacheFormat
    block_size: int = 16
    prefix_shared_tokens: int = 0
    eviction: Eviction = KEEP_ALL

    @cached_property
    def groups(self) -> tuple[tuple[LayerGroup, ...], ...]:
        """Each stage's layer groups, worked out once: a capacity search asks for the same
        stage at some thirty contexts per model."""
        return tuple(stage_layer_groups(self, stage) for stage in self.stages)


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up (every whole-registry batch loads this module).
class LayerGroup(NamedTuple):
    """The layers of one stage that share a mixer, with what each of them stores."""

    mixer: Mixer
    layers: int
    bytes_per_token: int
    state_bytes: int
    cache: CacheFormat
    linear: bool
    """Whether tokens take tokens x bytes_per_token (every format but KIVI)."""

    def tokens_bytes(self, tokens: int) -> int:
        """Bytes ``tokens`` tokens of one sequence take in one of these layers."""
        if self.linear:
            return tokens * self.bytes_per_token
        return layer_tokens_bytes(self.mixer, tokens, self.cache)


def stage_layer_groups(layout: Layout, stage: Stage) -> tuple[LayerGroup, ...]:
    return tuple(
        LayerGroup(
            mixer,
            layers,
            layer_bytes_per_token(mixer, layout.cache),
            layer_state_bytes(mixer, layout.cache),
            layout.cache,
            # A kind with its own bytes for held tokens (DeepSeek-V4's compressed entries) is
            # not tokens x a per-token figure.
            layout.cache.kv.linear and mixer.slope_bytes(layout.cache.kv) is None,
        )
        for mixer, layers in mixer_counts(layout.model, stage.layers)
    )


def stage_bytes_per_sequence(layout: Layout, stage: Stage, context_tokens: int) -> tuple[int, int]:
    """(bytes each sequence adds, bytes shared by all sequences) on one GPU of ``stage``.

    Each layer holds ceil(tokens_held / block) blocks plus its fixed state. Layers that hold the
    whole context share the first floor(prefix / block) blocks; a window that has slid past the
    prefix shares nothing. The shared blocks are the oldest tokens: under a format with a
    full-precision recent part (KIVI) they are priced as the tokens they add to the sequence.
    """
    unique = shared = 0
    block = layout.block_size
    shared_tokens = min(layout.prefix_shared_tokens, context_tokens) // block * block
    for group in layout.groups[stage.number]:
        per_token = group.bytes_per_token
        held = layer_tokens_held(group.mixer, context_tokens, layout.eviction)
        blocks_tokens = -(-held // block) * block
        common = shared_tokens if held == context_tokens and per_token else 0
        if group.linear:  # the capacity searches run this some thirty times per model
            whole, own = blocks_tokens * per_token, (blocks_tokens - common) * per_token
        else:
            whole = group.tokens_bytes(blocks_tokens)
            own = group.tokens_bytes(blocks_tokens - common)
        unique += (own + group.state_bytes) * group.layers
        shared += (whole - own) * group.layers
    return unique, shared


def max_batch(layout: Layout, context_tokens: int) -> int:
    """The most sequences of ``context_tokens`` that fit on every stage (0 when none does)."""
    return _max_batch(layout, _stages_bytes(layout, context_tokens))


def _stages_bytes(layout: Layout, context_tokens: int) -> list[tuple[int, int]]:
    return [stage_bytes_per_sequence(layout, stage, context_tokens) for stage in layout.stages]


def _max_batch(layout: Layout, stages_bytes: list[tuple[int, int]]) -> int:
    """:func:`max_batch` from each stage's (unique, shared) bytes, so that a caller that needs
    them too does not work them out twice."""
    best: int | None = None
    for stage, (unique, shared) in zip(layout.stages, stages_bytes, strict=True):
        room = stage.kv_budget_bytes - shared
        fits = 0 if room <= 0 else (room // unique if unique else MAX_BATCH_UNBOUNDED)
        best = fits if best is None else min(best, fits)
    return best or 0


def kv_budget_fraction(layout: Layout, batch: int, context_tokens: int) -> float:
    """The share of the KV budget ``batch`` sequences of ``context_tokens`` take on the fullest
    stage: their blocks plus the shared prefix over the stage's budget, so that ``batch`` fits
    exactly when this is at most 1 (:func:`max_batch`); infinite when a budget is empty."""
    worst = 0.0
    for stage in layout.stages:
        unique, shared = stage_bytes_per_sequence(layout, stage, context_tokens)
        if stage.kv_budget_bytes <= 0:
            return math.inf
        worst = max(worst, (shared + unique * batch) / stage.kv_budget_bytes)
    return worst


#: Reported when a stage holds no per-sequence bytes at all (never for a real model).
MAX_BATCH_UNBOUNDED = 10**12


def kv_tokens_capacity(layout: Layout) -> int:
    """Tokens the KV pool holds at full per-token cost: whole blocks of the stage's per-token
    bytes (before any window caps them), minimum over stages."""
    capacities = []
    for stage in layout.stages:
        per_token = sum(g.bytes_per_token * g.layers for g in layout.groups[stage.number])
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
    lo, hi = _bracket(layout, _long_context_tokens(layout))
    if hi - lo > 1 and max_batch(layout, lo + 1) < 1:
        # Costs step at whole blocks, so the answer is most often the block boundary the
        # bracket starts from: one probe instead of a bisection over the block.
        return lo
    while hi - lo > 1:  # fits at lo, not at hi
        mid = (lo + hi) // 2
        if max_batch(layout, mid) >= 1:
            lo = mid
        else:
            hi = mid
    return lo


def _long_context_tokens(layout: Layout) -> int:
    """Where the search for the longest context starts: the context one sequence reaches once
    it is past every bound, with each bounded layer (a window, a chunk, an evicting policy) at
    its bound, states whole and the other layers per token, in whole blocks. Exact when the
    answer lies past every window (any model whose KV bytes are linear in tokens); elsewhere a
    guess the bracket corrects."""
    block = layout.block_size
    tokens = []
    for stage in layout.stages:
        fixed = per_token = 0
        for g in layout.groups[stage.number]:
            bound = layer_tokens_held(g.mixer, MAX_CONTEXT_TOKENS, layout.eviction)
            if bound == layer_tokens_held(g.mixer, MAX_CONTEXT_TOKENS // 2, layout.eviction):
                fixed += (g.tokens_bytes(-(-bound // block) * block) + g.state_bytes) * g.layers
            else:
                fixed += g.state_bytes * g.layers
                per_token += g.bytes_per_token * g.layers
        room = max(stage.kv_budget_bytes - fixed, 0)
        tokens.append(room // (per_token * block) * block if per_token else MAX_CONTEXT_TOKENS)
    return min(tokens)


def _bracket(layout: Layout, guess: int) -> tuple[int, int]:
    """Contexts that fit (lo) and do not (hi) at batch 1, found by galloping from ``guess``
    (usually the answer or within a block or two of it), so the bisection that follows takes a
    few steps instead of thirty. Needs 1 to fit and the limit not to."""
    guess = min(max(guess, 1), MAX_CONTEXT_TOKENS)
    step = layout.block_size
    if max_batch(layout, guess) >= 1:
        lo = guess
        while (hi := min(lo + step, MAX_CONTEXT_TOKENS)) < MAX_CONTEXT_TOKENS and (
            max_batch(layout, hi) >= 1
        ):
            lo, step = hi, step * 2
        return lo, hi
    hi = guess
    while (lo := max(hi - step, 1)) > 1 and max_batch(layout, lo) < 1:
        hi, step = lo, step * 2
    return lo, hi


# --------------------------------------------------------------------------------------------
# A deployment's answer: sequences that fit at each context


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up (every whole-registry batch loads this module).
class ContextCapacity(NamedTuple):
    context_tokens: int
    max_batch: int
    """Sequences of this context that fit across all replicas."""
    max_batch_per_replica: int
    """Sequences of this context that fit on one replica (what one decode step serves)."""
    bytes_per_sequence_per_gpu: int
    """KV bytes one sequence costs on a GPU of the tightest stage (blocks included)."""
    tokens_held: int
    """Tokens of the sequence the eviction policy keeps (the context when none evicts)."""


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up (every whole-registry batch loads this module).
class Capacity(NamedTuple):
    deployment: Deployment
    weights_bytes_per_gpu: int
    """On the most loaded GPU (the tightest pipeline stage)."""
    overhead_bytes_per_gpu: int
    """On the tightest GPU."""
    kv_budget_bytes_per_gpu: int
    """On the tightest GPU; negative when the weights do not fit, 0 when a budget given with
    the weights and overhead exceeds the GPU's memory (:func:`memory_shortfall`)."""
    kv_tokens_capacity: int
    """Tokens the pools of all replicas hold at full per-token cost."""
    max_context_at_batch_1: int | None
    contexts: tuple[ContextCapacity, ...]
    reason: str | None
    """Why nothing fits, or None when at least one sequence fits at the first context."""

    @property
    def fits(self) -> bool:
        return self.reason is None


def memory_shortfall(dep: Deployment) -> int:
    """Bytes by which weights + overhead + KV budget exceed the memory of one GPU, on the
    fullest stage; 0 when they fit. Only figures given directly (``kv_memory``, ``weights``)
    can exceed it: a computed budget is what the usable memory leaves."""
    memory = dep.memory_bytes_per_gpu
    return max(
        0,
        *(
            w + o + kv - memory
            for w, o, kv in zip(
                dep.weights_per_stage,
                dep.overhead_per_stage,
                dep.kv_budget_per_stage,
                strict=True,
            )
        ),
    )


def over_memory_reason(dep: Deployment) -> str | None:
    """Why ``dep`` cannot run at all: its weights, overhead and KV budget exceed the memory of
    one GPU (None when they fit). Every engine refuses such a deployment with this line."""
    short = memory_shortfall(dep)
    if not short:
        return None
    s = max(range(dep.pp), key=lambda i: sum(_stage_memory(dep, i)))
    w, o, kv = _stage_memory(dep, s)
    return (
        f"weights {_gib(w)} + overhead {_gib(o)} + KV {_gib(kv)} per GPU exceed its "
        f"{_gib(dep.memory_bytes_per_gpu)}: short by {_short(short)}"
    )


def _short(n: int) -> str:
    # Bytes where two decimals of GiB would read "short by 0.00 GiB".
    return _gib(n) if n >= GiB // 100 else f"{n:,} B"


def _stage_memory(dep: Deployment, stage: int) -> tuple[int, int, int]:
    return (
        dep.weights_per_stage[stage],
        dep.overhead_per_stage[stage],
        dep.kv_budget_per_stage[stage],
    )


def layout_of(dep: Deployment) -> Layout:
    """What one GPU of each stage of ``dep`` stores, with its stage's KV budget: none at all
    when the deployment does not fit in the GPUs' memory (:func:`memory_shortfall`)."""
    budgets = dep.kv_budget_per_stage if not memory_shortfall(dep) else (0,) * dep.pp
    return Layout(
        model=dep.per_rank,
        stages=tuple(
            Stage(i, layers, budget)
            for i, (layers, budget) in enumerate(zip(dep.stages, budgets, strict=True))
        ),
        cache=dep.cache,
        block_size=dep.block_size,
        prefix_shared_tokens=dep.prefix_shared_tokens,
        eviction=dep.eviction,
    )


def capacity(dep: Deployment, contexts: Sequence[int]) -> Capacity:
    """Sequences that fit at each context, and the budget behind the answer."""
    for ctx in contexts:
        check_context(dep, ctx)
    layout = layout_of(dep)
    tight = dep.tightest_stage
    per_context = []
    for ctx in contexts:
        stages_bytes = _stages_bytes(layout, ctx)
        per_replica = _max_batch(layout, stages_bytes)
        per_context.append(
            ContextCapacity(
                ctx,
                per_replica * dep.replicas,
                per_replica,
                sum(stages_bytes[tight]),
                dep.eviction.tokens_held(ctx),
            )
        )
    weights = max(dep.weights_per_stage)
    overhead = dep.overhead_per_stage[tight]
    budget = layout.stages[tight].kv_budget_bytes  # none when the GPU cannot hold it
    reason = over_memory_reason(dep) or _does_not_fit(
        weights=weights,
        usable=dep.usable_bytes_per_gpu,
        overhead=overhead,
        budget=budget,
        first=per_context[0] if per_context else None,
        overridden=dep.kv_memory_bytes is not None,
    )
    return Capacity(
        deployment=dep,
        weights_bytes_per_gpu=weights,
        overhead_bytes_per_gpu=overhead,
        kv_budget_bytes_per_gpu=budget,
        kv_tokens_capacity=kv_tokens_capacity(layout) * dep.replicas,
        max_context_at_batch_1=max_context_at_batch_1(layout),
        contexts=tuple(per_context),
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
    # "short by": what the weights and overhead take beyond the usable memory, before any KV.
    short = _short(weights + overhead - usable)
    if not overridden and weights > usable:
        return f"weights {_gib(weights)} > {_gib(usable)} usable per GPU: short by {short}"
    if not overridden and weights + overhead >= usable:
        return (
            f"weights {_gib(weights)} + overhead {_gib(overhead)} leave no KV memory "
            f"of {_gib(usable)} usable per GPU: short by {short}"
        )
    if budget <= 0:
        return f"KV budget {_gib(budget)} per GPU"
    if first is not None and first.max_batch == 0:
        return _too_long(first, budget)
    return None


def _too_long(context: ContextCapacity, budget: int) -> str:
    return (
        f"one sequence of {context.context_tokens:,} tokens needs "
        f"{_gib(context.bytes_per_sequence_per_gpu)} per GPU > KV budget {_gib(budget)}"
    )


def unfit_reason(cap: Capacity) -> str | None:
    """Why some context asked about holds no sequence (the deployment's :attr:`Capacity.reason`,
    else the first such context's); None when each context holds at least one. A context
    longer than the cache holds does not fit, in every engine, wherever it is in the list."""
    if cap.reason is not None:
        return cap.reason
    for context in cap.contexts:
        if context.max_batch == 0:
            return _too_long(context, cap.kv_budget_bytes_per_gpu)
    return None
