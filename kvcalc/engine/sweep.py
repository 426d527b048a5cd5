"""A sweep: one deployment's KV per sequence, capacity and decode time at many contexts and
batches. No formula of its own: each point is :func:`~kvcalc.engine.capacity.capacity` and
:func:`~kvcalc.engine.decode.decode_step_for`, as `kvcalc batch` and `kvcalc decode` compute
them, so a sweep's point always equals those commands' answer at that context.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.engine.capacity import capacity
from kvcalc.engine.decode import DecodeStep, decode_step_for
from kvcalc.engine.kv import kv_bytes_per_sequence
from kvcalc.engine.latency import can_time_communication, tpot_estimate

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment


@dataclass(frozen=True)
class SweepPoint:
    context_tokens: int
    batch: int
    """The batch timed: the one asked for, else the most that fit on one replica (as `kvcalc
    decode` picks it)."""
    kv_bytes_per_sequence: int
    """The whole model's cache for one sequence (all GPUs, windows capped, states included), as
    `kvcalc size` prints it."""
    max_batch: int
    """Sequences that fit across all replicas, as `kvcalc batch` prints it."""
    step: DecodeStep | None
    """One replica's decode step at ``batch`` (the roofline); None when that batch does not
    fit."""
    tpot_seconds: float | None = None
    """The realistic TPOT of that step, as `kvcalc decode` estimates it; None when the step is
    not timed or the replica's link speed is unknown."""

    @property
    def fits(self) -> bool:
        return self.step is not None


@dataclass(frozen=True)
class Sweep:
    deployment: Deployment
    mbu: float
    points: tuple[SweepPoint, ...]
    reason: str | None
    """Why no sequence fits at the first context (the weights, the budget), else None."""


def sweep(
    dep: Deployment, contexts: Sequence[int], batches: Sequence[int] | None, mbu: float = 1.0
) -> Sweep:
    """Every context with every batch (None: the most that fit at each context), context-major.

    A batch beyond what fits is not timed: a sweep answers what the deployment can serve, and
    `kvcalc decode --batch` remains the what-if for one oversubscribed point.
    """
    cap = capacity(dep, contexts)
    points = []
    for fit in cap.contexts:
        kv = kv_bytes_per_sequence(dep.model, fit.context_tokens, dep.cache)
        for batch in batches if batches is not None else [fit.max_batch_per_replica]:
            fits = 1 <= batch <= fit.max_batch_per_replica
            step = (
                decode_step_for(dep, batch=batch, context_tokens=fit.context_tokens, mbu=mbu)
                if fits
                else None
            )
            estimate = (
                tpot_estimate(dep, batch=batch, context_tokens=fit.context_tokens).tpot_seconds
                if step is not None and can_time_communication(dep)
                else None
            )
            points.append(SweepPoint(fit.context_tokens, batch, kv, fit.max_batch, step, estimate))
    return Sweep(dep, mbu, tuple(points), cap.reason)
