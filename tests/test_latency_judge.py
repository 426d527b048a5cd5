"""The realistic TPOT estimate judged against published single-stream (batch 1) decode
measurements: the median error must stay within 20%, where the roofline misses by about 2x.

Each row is a public measurement: model, GPU set, weight dtype, tokens per second. The context
is short in all of them (gpt-fast: a 5-token prompt and 200 new tokens; llama.cpp: 512 tokens
at micro-batch 1), so the estimate is taken at 128 tokens.

The gpt-fast A100 rows are the ones the A100 efficiency figures were fitted to (in-sample, see
model_configs/gpus/a100-sxm-80gb.yaml); the MI250X row uses the generic figures (no MI250X
efficiency in the registry), the RTX 4090 row its own registry figures, and NVIDIA's NeMo
(TensorRT-LLM) end-to-end latencies test the H100 figures and the prefill: out-of-sample. That
older stack pays several ms per token more than gpt-fast at high TP, which the estimate (of a
well-tuned engine) does not model: those rows are its largest misses, and they are kept.

gpt-fast and llama.cpp compile the whole step, so their rows are timed with their own decode
profiles (runtimes.GPT_FAST, runtimes.LLAMA_CPP: no serving engine's per-layer kernels); NeMo's
with the default (a serving engine's). The wider judgement, on points
no constant was set on, is tests/test_decode_points.py (tests/fixtures/decode_points.yaml).
"""

from __future__ import annotations

import statistics

import pytest
from specs import registry_deployment

from kvcalc.engine.latency import tpot_estimate, tpot_seconds, ttft_seconds
from kvcalc.engine.runtimes import GPT_FAST as GPT_FAST_PROFILE
from kvcalc.engine.runtimes import LLAMA_CPP

GPT_FAST = "https://github.com/pytorch-labs/gpt-fast/blob/0f925b5d4ce457b89a7ca6c9ce50f42bf2576945/README.md"
LLAMA_CPP_15131 = "https://github.com/ggml-org/llama.cpp/pull/15131"

#: (model, gpus, weight dtype, measured tokens/s, source). gpt-fast ran on A100-SXM4-80GB
#: power-limited to 330 W, torch.compile, batch 1; "8-bit" is int8 weight-only quantization.
MEASUREMENTS = [
    ("llama2-7b", "1xa100-sxm-80gb", "bf16", 104.9, GPT_FAST),
    ("llama2-7b", "2xa100-sxm-80gb", "bf16", 168.84, GPT_FAST),
    ("llama2-7b", "4xa100-sxm-80gb", "bf16", 254.02, GPT_FAST),
    ("llama2-7b", "8xa100-sxm-80gb", "bf16", 328.43, GPT_FAST),
    ("llama2-70b", "2xa100-sxm-80gb", "bf16", 21.32, GPT_FAST),
    ("llama2-70b", "4xa100-sxm-80gb", "bf16", 38.01, GPT_FAST),
    ("llama2-70b", "8xa100-sxm-80gb", "bf16", 62.50, GPT_FAST),
    ("llama2-7b", "1xa100-sxm-80gb", "int8", 155.58, GPT_FAST),
    ("llama2-70b", "1xa100-sxm-80gb", "int8", 19.13, GPT_FAST),
    ("llama2-70b", "8xa100-sxm-80gb", "int8", 80.44, GPT_FAST),
    ("mixtral-8x7b", "2xa100-sxm-80gb", "bf16", 96.67, GPT_FAST),
    ("mixtral-8x7b", "4xa100-sxm-80gb", "bf16", 155.35, GPT_FAST),
    ("mixtral-8x7b", "8xa100-sxm-80gb", "bf16", 227.82, GPT_FAST),
    ("mixtral-8x7b", "1xa100-sxm-80gb", "int8", 97.92, GPT_FAST),
    # One GCD of an MI250X (gpt-fast's AMD table).
    ("llama2-7b", "1xmi250x", "bf16", 76.33, GPT_FAST),
    # llama.cpp, "llama 8B BF16", pp512 at micro-batch 1 (one token per step), master column.
    ("llama3.1-8b", "1xrtx-4090", "bf16", 65.21, LLAMA_CPP_15131),
]
CONTEXT = 128

NEMO = "https://docs.nvidia.com/nemo-framework/user-guide/latest/performance/llama.html"
#: (model, gpus, prompt tokens, output tokens, measured end-to-end ms, source): NeMo's Llama-2
#: inference table, "Chatbot Conversation" (128 in, 20 out), batch 1, TP = GPUs, fp16.
LATENCIES = [
    ("llama2-7b", "1xa100-sxm-80gb", 128, 20, 234.0, NEMO),
    ("llama2-7b", "1xh100-sxm", 128, 20, 153.8, NEMO),
    ("llama2-7b", "2xa100-sxm-80gb", 128, 20, 171.7, NEMO),
    ("llama2-7b", "2xh100-sxm", 128, 20, 128.6, NEMO),
    ("llama2-7b", "4xa100-sxm-80gb", 128, 20, 143.7, NEMO),
    ("llama2-7b", "4xh100-sxm", 128, 20, 107.4, NEMO),
    ("llama2-7b", "8xa100-sxm-80gb", 128, 20, 136.5, NEMO),
    ("llama2-7b", "8xh100-sxm", 128, 20, 97.6, NEMO),
]


def relative_error(
    model: str,
    gpus: str,
    weights: str,
    tokens_per_second: float,
    source: str = GPT_FAST,
    *,
    roofline: bool = False,
) -> float:
    """Single-stream decode: the estimated TPOT (with ``roofline`` the bound) against the
    measured rate."""
    count, _, gpu = gpus.partition("x")
    dep = registry_deployment(model, gpus, weight_dtype=weights)
    assert dep.tp == int(count) and dep.gpus.accelerator.id == gpu
    if roofline:
        tpot = tpot_seconds(dep, batch=1, context_tokens=CONTEXT, roofline=True)
    else:
        # gpt-fast and llama.cpp compile the whole step: each row timed with its stack's profile.
        profile = LLAMA_CPP if source == LLAMA_CPP_15131 else GPT_FAST_PROFILE
        tpot = tpot_estimate(dep, batch=1, context_tokens=CONTEXT, profile=profile).tpot_seconds
    return tpot * tokens_per_second - 1


def latency_error(
    model: str, gpus: str, prompt: int, output: int, measured_ms: float, *, roofline: bool = False
) -> float:
    """End-to-end time of one request: the prefill gives the first token, then output - 1 decode
    steps at the context reached halfway."""
    dep = registry_deployment(model, gpus)
    ttft = ttft_seconds(dep, prompt_tokens=prompt, roofline=roofline)
    context = prompt + output // 2
    tpot = tpot_seconds(dep, batch=1, context_tokens=context, roofline=roofline)
    return (ttft + (output - 1) * tpot) * 1000 / measured_ms - 1


def all_errors(*, roofline: bool = False) -> list[float]:
    return [relative_error(*row, roofline=roofline) for row in MEASUREMENTS] + [
        latency_error(*row[:5], roofline=roofline) for row in LATENCIES
    ]


def test_median_error_within_20_percent() -> None:
    errors = [abs(e) for e in all_errors()]
    assert len(errors) == 24
    assert statistics.median(errors) <= 0.20


def test_roofline_misses_the_same_measurements_by_far_more() -> None:
    # The reason the estimate exists: the bound is optimistic on every row, by ~2x at high TP.
    errors = all_errors(roofline=True)
    assert all(e < 0 for e in errors)
    assert statistics.median(abs(e) for e in errors) > 0.30
    assert statistics.median(abs(e) for e in errors) > 3 * statistics.median(
        abs(e) for e in all_errors()
    )


@pytest.mark.parametrize("row", MEASUREMENTS, ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}")
def test_every_decode_measurement_within_40_percent(row: tuple[str, str, str, float, str]) -> None:
    assert abs(relative_error(*row)) <= 0.40


@pytest.mark.parametrize("row", LATENCIES, ids=lambda r: f"{r[0]}-{r[1]}")
def test_every_end_to_end_latency_within_60_percent(
    row: tuple[str, str, int, int, float, str],
) -> None:
    # Optimistic on every row (the stack's per-token cost), never by more than 60%.
    error = latency_error(*row[:5])
    assert -0.60 <= error < 0
