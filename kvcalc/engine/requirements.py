"""Requirements of `kvcalc check`: what each one measures, and whether a measurement meets it.

Pure functions of numbers: the command measures each quantity with the engines (capacity, vLLM,
SGLang, decode) and this module decides pass or fail and the margin. Conventions (README,
"kvcalc check"):

- the *batch* a deployment is timed at is ``min_batch`` when given, else the most sequences of
  ``ctx`` that fit; a batch of B over R data-parallel replicas runs ceil(B / R) per replica;
- times are the realistic estimates of `kvcalc decode` (or, with ``--roofline``, the bound):
  TPOT of one replica's step at the batch, TTFT of one prompt of ``ctx`` tokens;
- ``min_tokens_per_second`` is B / TPOT: every replica emits one token per sequence per step;
- ``max_kv_fraction`` is the share of one replica's KV budget its ceil(B / R) sequences of
  ``ctx`` take, in whole blocks (pages), on the fullest GPU.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.profiles import DecodeProfile


@dataclass(frozen=True)
class Requirement:
    """One kind of requirement: the quantity it bounds, from below (min) or above (max)."""

    key: str
    quantity: str
    bound: Literal["min", "max"]
    unit: str
    reads: tuple[str, ...] = ()
    """The deployment settings its measurement depends on beyond the deployment itself."""

    @property
    def operator(self) -> str:
        return ">=" if self.bound == "min" else "<="


REQUIREMENTS: dict[str, Requirement] = {
    r.key: r
    for r in (
        Requirement("min_batch", "sequences of ctx that fit", "min", "sequences", ("ctx",)),
        # At batch 1: the longest sequence, whatever ctx says.
        Requirement("min_context", "tokens of one sequence", "min", "tokens"),
        # judge: high holds the band's high end (kvcalc.engine.accuracy) to the target.
        # internode: the realistic step's all-reduces and stage hand-offs cross it when tp or
        # pp spans nodes (kvcalc.engine.communication); no other figure does.
        Requirement(
            "max_tpot_ms", "time per output token", "max", "ms",
            ("ctx", "mfu", "judge", "internode"),
        ),
        # The prefill of one prompt of ctx tokens: batch 1, whatever fits.
        Requirement(
            "max_ttft_ms", "time to first token", "max", "ms", ("ctx", "mfu", "internode")
        ),
        Requirement(
            "min_tokens_per_second", "output tokens per second", "min", "tokens/s",
            ("ctx", "mfu", "judge", "internode"),
        ),
        Requirement(
            "max_kv_fraction", "share of the KV budget used", "max", "fraction", ("ctx",)
        ),
    )
}


@dataclass(frozen=True)
class Outcome:
    """A requirement against its measurement. ``measured`` is None when it cannot be measured
    (nothing fits, so no batch to time), which fails; ``note`` says why or how it was
    measured."""

    requirement: Requirement
    required: float
    measured: float | None
    note: str | None = None

    @property
    def passed(self) -> bool:
        if self.measured is None or math.isnan(self.measured):
            return False
        if self.requirement.bound == "min":
            return self.measured >= self.required
        return self.measured <= self.required

    @property
    def margin(self) -> float | None:
        """How far the measurement is on the good side of the bound (negative: the shortfall),
        in the requirement's unit."""
        if self.measured is None:
            return None
        if self.requirement.bound == "min":
            return self.measured - self.required
        return self.required - self.measured

    @property
    def margin_ratio(self) -> float | None:
        """The margin as a share of the required value."""
        margin = self.margin
        return None if margin is None else margin / self.required


#: Settings only some requirements read: a deployment that gives one none of its requirements
#: reads is refused, never silently ignored.
OPTIONAL_SETTINGS = ("ctx", "mfu", "judge", "internode")


def readers(setting: str, keys: Iterable[str]) -> list[str]:
    """The requirements among ``keys`` whose measurement reads ``setting``."""
    return [k for k in keys if setting in REQUIREMENTS[k].reads]


def evaluate(key: str, required: float, measured: float | None, note: str | None = None) -> Outcome:
    return Outcome(REQUIREMENTS[key], required, measured, note)


def batch_per_replica(batch: int, replicas: int) -> int:
    """Sequences one replica runs when ``batch`` are spread over ``replicas`` evenly."""
    return -(-batch // replicas)


def measured_tpot_seconds(
    dep: Deployment,
    batch_per_replica: int,
    context_tokens: int,
    *,
    roofline: bool = False,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
    judge: str = "estimate",
) -> float | None:
    """The TPOT `max_tpot_ms` and `min_tokens_per_second` are held to: the realistic estimate
    of `kvcalc decode` (:func:`kvcalc.engine.latency.tpot_seconds`, with the engine's decode
    ``profile``; ``judge`` ``high``: its band's high end), or with ``roofline`` the bound, as
    `kvcalc plan` holds its targets. None when a replica spans GPUs whose link speed is
    unknown, so its all-reduces cannot be timed (the roofline needs no link)."""
    from kvcalc.engine.latency import can_time_communication, tpot_seconds

    if not roofline and not can_time_communication(dep):
        return None
    return tpot_seconds(
        dep, batch=batch_per_replica, context_tokens=context_tokens, roofline=roofline, mfu=mfu,
        profile=profile, bound=judge,
    )


def measured_ttft_seconds(
    dep: Deployment,
    context_tokens: int,
    *,
    roofline: bool = False,
    mfu: float | None = None,
    profile: DecodeProfile | None = None,
) -> float | None:
    """The TTFT `max_ttft_ms` is held to: the prefill of one prompt of ``context_tokens`` (an
    eviction policy's own prompt aside), estimated or at the bound as for TPOT."""
    from kvcalc.engine.latency import can_time_communication, prompt_tokens_at, ttft_seconds

    if not roofline and not can_time_communication(dep):
        return None
    prompt = prompt_tokens_at(dep, context_tokens)
    return ttft_seconds(dep, prompt_tokens=prompt, roofline=roofline, mfu=mfu, profile=profile)


def tokens_per_second(batch: int, tpot_seconds: float) -> float:
    """Output tokens per second of ``batch`` sequences decoding at ``tpot_seconds`` a step."""
    return batch / tpot_seconds
