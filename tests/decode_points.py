"""The published decode measurements of tests/fixtures/decode_points.yaml and the realistic
estimate of each: loaded by tests/test_decode_points.py (and the band's derivation)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from specs import registry_deployment

from kvcalc.engine.deployment import Deployment
from kvcalc.engine.latency import prefill_estimate, regime_of, tpot_estimate
from kvcalc.engine.profiles import DecodeProfile
from kvcalc.engine.runtimes import GPT_FAST, LLAMA_CPP, at_build
from kvcalc.engine.serving import engine_named
from kvcalc.engine.units import parse_rate

POINTS_FILE = Path(__file__).parent / "fixtures" / "decode_points.yaml"

#: The points' stacks that are no serving engine: gpt-fast (recorded as ``pytorch``: compiled,
#: not the eager ``--runtime pytorch``) and llama.cpp, each timed with its own decode profile
#: (no per-layer kernels beyond the step); a serving engine's points with its ``decode_profile``.
STACK_PROFILES = {"pytorch": GPT_FAST, "llama.cpp": LLAMA_CPP}


@dataclass(frozen=True)
class Point:
    id: str
    source: str
    engine: str
    gpu: str
    count: int
    tp: int
    pp: int
    model: str
    weights: str | None
    kv_dtype: str | None
    nodes: int | None
    internode: str | None
    batch: int
    input_len: int
    output_len: int
    role: str
    fits: str | None
    measured_tpot_ms: float | None
    measured_e2e_ms: float | None
    build: int | None = None
    """The llama.cpp build that was measured (its `build: N (commit)` log line); None: a
    current build, or not llama.cpp."""

    @property
    def measured_ms(self) -> float:
        value = self.measured_tpot_ms if self.measured_tpot_ms is not None else self.measured_e2e_ms
        assert value is not None
        return value

    @property
    def kind(self) -> str:
        return "tpot" if self.measured_tpot_ms is not None else "e2e"

    def deployment(self) -> Deployment:
        return registry_deployment(
            self.model,
            f"{self.count}x{self.gpu}",
            tp=self.tp,
            pp=self.pp,
            weight_dtype=self.weights,
            kv_dtype=self.kv_dtype,
            nodes=self.nodes,
            internode_bytes_per_s=None if self.internode is None else parse_rate(self.internode),
        )

    @property
    def context(self) -> int:
        """The context reached halfway through the output: the steps' average reads."""
        return self.input_len + self.output_len // 2

    @property
    def profile(self) -> DecodeProfile:
        """The decode profile of the stack that was measured (at the build measured)."""
        if self.engine in STACK_PROFILES:
            return at_build(STACK_PROFILES[self.engine], self.build)
        return at_build(engine_named(self.engine).decode_profile, self.build)

    def estimate_ms(self, *, roofline: bool = False, bound: str = "estimate") -> float:
        """The estimate of what was measured (``bound``: estimate, low or high); with
        ``roofline``, the bound (an end-to-end time: output_len steps at the roofline)."""
        dep = self.deployment()
        tpot = tpot_estimate(
            dep, batch=self.batch, context_tokens=self.context, profile=self.profile
        )
        if roofline:
            step = tpot.roofline.tpot_seconds
            return step * 1000 * (1 if self.kind == "tpot" else self.output_len)
        step = {"estimate": tpot.tpot_seconds, "low": tpot.tpot_low_seconds,
                "high": tpot.tpot_high_seconds}[bound]
        if self.kind == "tpot":
            return step * 1000
        # The batch's prompts are prefilled together, then output_len - 1 decode steps.
        prefill = prefill_estimate(
            dep, prompt_tokens=self.input_len * self.batch, profile=self.profile
        )
        first = {"estimate": prefill.ttft_seconds, "low": prefill.ttft_low_seconds,
                 "high": prefill.ttft_high_seconds}[bound]
        return (first + (self.output_len - 1) * step) * 1000

    def tpot_parts(self) -> tuple[float, float]:
        """(estimated TPOT, measured TPOT) in seconds: an end-to-end time less the estimated
        prefill, over its output_len - 1 steps (what the band's ratios compare)."""
        dep = self.deployment()
        tpot = tpot_estimate(
            dep, batch=self.batch, context_tokens=self.context, profile=self.profile
        ).tpot_seconds
        if self.kind == "tpot":
            return tpot, self.measured_ms / 1000
        prefill = prefill_estimate(
            dep, prompt_tokens=self.input_len * self.batch, profile=self.profile
        ).ttft_seconds
        return tpot, (self.measured_ms / 1000 - prefill) / (self.output_len - 1)

    def error(self, **kw: Any) -> float:
        """Estimate over measurement, minus 1: negative is optimistic (too fast)."""
        return self.estimate_ms(**kw) / self.measured_ms - 1

    @property
    def regime(self) -> str:
        return regime_of(self.deployment())


def load_points() -> list[Point]:
    data = yaml.safe_load(POINTS_FILE.read_text(encoding="utf-8"))
    points = []
    for row in data["points"]:
        tpot = row.get("tpot_ms")
        if tpot is None and "tokens_per_s" in row:
            tpot = 1000 / row["tokens_per_s"]
        points.append(
            Point(
                id=row["id"], source=row["source"], engine=row["engine"], gpu=row["gpu"],
                count=row["count"], tp=row["tp"], pp=row.get("pp", 1), model=row["model"],
                weights=row.get("weights"), kv_dtype=row.get("kv_dtype"),
                nodes=row.get("nodes"), internode=row.get("internode"), batch=row["batch"],
                input_len=row["input_len"], output_len=row["output_len"], role=row["role"],
                fits=row.get("fits"),
                measured_tpot_ms=tpot, measured_e2e_ms=row.get("e2e_ms"),
                build=row.get("build"),
            )
        )
    return points


def table(points: list[Point]) -> str:
    lines = [f"{'point':44} {'role':9} {'regime':12} {'kind':4} {'measured':>9} "
             f"{'estimate':>9} {'band':>17} {'error':>7}"]
    for p in points:
        est = p.estimate_ms()
        low, high = p.estimate_ms(bound="low"), p.estimate_ms(bound="high")
        inside = "in" if low <= p.measured_ms <= high else "OUT"
        lines.append(
            f"{p.id:44} {p.role:9} {p.regime:12} {p.kind:4} {p.measured_ms:9.2f} {est:9.2f} "
            f"{low:7.2f}-{high:<7.2f}{inside:>3} {p.error():+7.1%}"
        )
    for role in ("fit", "held_back"):
        errs = [abs(p.error()) for p in points if p.role == role]
        lines.append(f"{role}: {len(errs)} points, median |error| {statistics.median(errs):.1%}, "
                     f"worst {max(errs):.1%}")
    return "\n".join(lines)


def implied_f16_matvec_share(point: Point) -> float:
    """The share of the achievable bandwidth ``point``'s F16 weights were read at, as its
    measured step implies: the step less what the estimate spends beside the weight reads
    (KV reads, sends, fixed and per-layer costs), over the weight reads at the part's
    achievable bandwidth. What the fit of the pre-b3916 F16 mat-vec share reads."""
    from kvcalc.engine.latency import efficiency_of

    dep = point.deployment()
    current = STACK_PROFILES[point.engine]  # the current build: no F16 share applied
    tpot = tpot_estimate(dep, batch=point.batch, context_tokens=point.context, profile=current)
    fraction = efficiency_of(dep.gpus.accelerator).bandwidth_fraction
    weights = tpot.roofline.weight_read_seconds / fraction
    others = tpot.tpot_seconds - weights
    return weights / (point.measured_ms / 1000 - others)


def implied_full_wave_share(point: Point) -> float:
    """The share a full wave of the pre-b3916 one-warp-per-row F16 mat-vec reached, as
    ``point``'s measured step implies: :func:`implied_f16_matvec_share` over the step's wave
    fill on its GPU (kvcalc.engine.matvec_waves). What the fit of that share reads."""
    from kvcalc.engine.latency import rows_per_wave
    from kvcalc.engine.matvec_waves import step_wave_fill

    dep = point.deployment()
    fill = step_wave_fill(dep.model, rows_per_wave(dep))
    return implied_f16_matvec_share(point) / float(fill)
