"""`kvcalc plan`'s inputs read and its answer worded: the accelerators searched, the dtypes and
KV formats tried, the prices, and the one line of a plan that finds no layout. Used by
:func:`kvcalc.api.plan`."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from kvcalc.errors import fail
from kvcalc.values import option_name

if TYPE_CHECKING:
    from kvcalc.engine.hardware import Accelerator
    from kvcalc.engine.plan import Plan, PlannedLayout, PlanRequest
    from kvcalc.engine.serving.base import ServingEngine
    from kvcalc.engine.spec import ModelSpec

DEFAULT_CONTEXT = "8k"
DEFAULT_MAX_GPUS = 8
DEFAULT_TOP = 5
#: The largest count searched: the search is per count, and 64 GPUs is eight 8-GPU nodes.
MAX_MAX_GPUS = 64


def plan_engines() -> list[ServingEngine]:
    """The engines plan's search sizes layouts with."""
    from kvcalc.engine.serving import engines

    return [engine for engine in engines() if engine.plans]


def duration(text: str | None, option: str) -> float | None:
    from kvcalc.engine.units import UnitError, parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except UnitError as exc:
        fail(f"{option}: {exc}")


def parse_rate(value: float | str | None) -> float | None:
    """Requests per second: a positive number (``10``, ``0.5``, ``10/s``)."""
    import math

    if value is None:
        return None
    text = str(value).strip().removesuffix("/s")
    try:
        rate = float(text)
    except ValueError:
        fail(f"--request-rate: {value!r} is not a rate; give requests per second, e.g. 10")
    if isinstance(value, bool) or not math.isfinite(rate) or rate <= 0:
        fail(f"--request-rate: {value!r} must be a positive number of requests per second")
    return rate


def split_list(text: str, option: str, example: str) -> list[str]:
    """Items of a comma-separated list; an empty item is a typo, not something to skip."""
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        fail(f"{option}: {text!r} has an empty item; give a list such as {example}")
    return items


def dtype_list(text: str | None, option: str, model: ModelSpec) -> list[str | None]:
    """The weight dtypes to try (None: as the checkpoint ships), each checked by name against
    the model (a flat dtype, a format with its scales, or a joined name a table printed for
    it, such as fp8+bf16), two names of the same weights refused."""
    from kvcalc.engine.units import UnitError
    from kvcalc.engine.weight_names import weight_dtype_name, weight_precision

    if text is None:
        return [None]
    names = []
    for item in split_list(text, option, "bf16,fp8"):
        try:
            names.append(weight_dtype_name(model, weight_precision(model, item)))
        except UnitError as exc:
            fail(f"{option}: {exc}")
    if len(set(names)) != len(names):
        fail(f"{option}: {text!r} names the same weights twice; give each once")
    return list(names)


def kv_format_list(
    text: str | None, model: ModelSpec, engine: ServingEngine
) -> list[str | None]:
    """The KV formats to try, by name (None: the model's own), each one the engine stores and
    the model's layers take, duplicates refused."""
    from kvcalc.engine.kvformat import KVFormatError, KVFormatRequest, check_stores, kv_format
    from kvcalc.engine.serving.base import InputRefusal

    if text is None:
        return [None]
    names = []
    for item in split_list(text, "--kv-dtype", "bf16,fp8"):
        try:
            fmt = kv_format(KVFormatRequest(item), model.default_dtype)
            check_stores(fmt, model)
            engine.check_kv_format(fmt)
        except KVFormatError as exc:
            fail(f"--kv-dtype: {str(exc).removeprefix('--kv-dtype: ')}")
        except InputRefusal as exc:
            fail(exc.worded(option_name))
        names.append(fmt.name)
    if len(set(names)) != len(names):
        fail(f"--kv-dtype: {text!r} names a format twice; give each once")
    return list(names)


def candidate_accelerators(text: str | None, prices: dict[str, float] | None) -> list[Accelerator]:
    """The accelerators searched: those named (each once), else every registry entry (only the
    priced ones when --price is given, so that every result has a price)."""
    from kvcalc.registry.gpus import find_accelerator, gpu_paths

    if text is None:
        if prices is not None:
            return [find_accelerator(gpu_id) for gpu_id in prices]
        return [find_accelerator(path.stem) for path in gpu_paths()]
    found: dict[str, Accelerator] = {}
    for name in split_list(text, "--gpus", "H100,H200,MI300X"):
        accelerator = find_accelerator(name)
        if accelerator.id in found:
            fail(f"--gpus: {name!r} is {accelerator.id}, already listed; give each GPU once")
        found[accelerator.id] = accelerator
    if prices is not None:
        unpriced = [gpu_id for gpu_id in found if gpu_id not in prices]
        if unpriced:
            fail(f"--price: no price for {', '.join(unpriced)}; price every GPU in --gpus")
        extra = [gpu_id for gpu_id in prices if gpu_id not in found]
        if extra:
            fail(f"--price: {', '.join(extra)} is not in --gpus; drop it or add it to --gpus")
    return list(found.values())


def parse_prices(text: str) -> dict[str, float]:
    """``H100=2.5,H200=3.1`` -> {accelerator id: price per GPU-hour}."""
    import math

    from kvcalc.registry.gpus import find_accelerator

    prices: dict[str, float] = {}
    for item in split_list(text, "--price", "H100=2.5,H200=3.1"):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            fail(f"--price: {item!r} is not GPU=PRICE; give a list such as H100=2.5,H200=3.1")
        try:
            amount = float(value)
        except ValueError:
            fail(f"--price: {value!r} in {item!r} is not a number, e.g. H100=2.5")
        if not math.isfinite(amount) or amount <= 0:
            fail(f"--price: {item!r}: the price must be a positive number")
        gpu_id = find_accelerator(name.strip()).id
        if gpu_id in prices:
            fail(f"--price: {gpu_id} is priced twice; give each GPU once")
        prices[gpu_id] = amount
    return prices


def describe(layout: PlannedLayout) -> str:
    from kvcalc.engine.weights import precision_name

    dep = layout.deployment
    return (
        f"{layout.label} tp {dep.tp} pp {dep.pp} x{dep.replicas} "
        f"({precision_name(dep.weights)} weights, {dep.kv_dtype.name} KV)"
    )


def targets(request: PlanRequest) -> str:
    wanted = []
    if request.max_tpot_seconds is not None:
        wanted.append(f"TPOT <= {request.max_tpot_seconds * 1000:g} ms")
    if request.max_ttft_seconds is not None:
        wanted.append(f"TTFT <= {request.max_ttft_seconds * 1000:g} ms")
    basis = " (roofline)" if request.roofline else ""
    return (" with " + " and ".join(wanted) + basis) if wanted else ""


def nothing_meets(result: Plan) -> str:
    """The one line of a plan without an answer: what was asked and what came closest."""
    request = result.request
    served = (
        f"{request.request_rate:g} requests/s" if request.request_rate is not None
        else f"{request.users:,} users"
    )
    asked = (
        f"no layout of up to {request.max_gpus} GPUs serves {served} at "
        f"{request.context_tokens:,} tokens{targets(request)}"
    )
    closest = result.closest
    if request.disaggregated and result.weights_fit:
        return (
            f"{asked}: no prefill and decode pools of up to {request.max_gpus} GPUs keep up "
            "within the targets; raise --max-gpus, relax the targets or lower --request-rate"
        )
    if closest is None and not result.weights_fit:
        return f"{asked}: no GPU set holds the weights; raise --max-gpus or try --weight-dtype fp8"
    if closest is None and request.request_rate is not None:
        return (
            f"{asked}: no GPU set holds the weights and one request's cache of "
            f"{request.context_tokens:,} tokens; raise --max-gpus, lower --input-len or "
            "--output-len, or try --kv-dtype fp8"
        )
    if closest is None:
        return (
            f"{asked}: no GPU set holds the weights and {request.users:,} caches of "
            f"{request.context_tokens:,} tokens; raise --max-gpus, lower --users or --ctx, "
            "or try --kv-dtype fp8"
        )
    if closest.serving is not None and not closest.serving.stable:
        return (
            f"{asked}; closest: {describe(closest)}, whose replicas cannot keep up: "
            f"{closest.serving.why}; raise --max-gpus or lower --request-rate"
        )
    if closest.tpot_seconds is None and closest.max_batch >= request.users:
        return (
            f"{asked}; closest: {describe(closest)} holds them, but the registry has no link "
            f"speed for {closest.accelerator.id}, so its GPUs together cannot be timed"
        )
    if closest.tpot_seconds is None:
        return (
            f"{asked}; closest: {describe(closest)} holds {closest.max_batch:,} of them; "
            "raise --max-gpus or try smaller --kv-dtype/--weight-dtype"
        )
    ttft = "" if closest.ttft_seconds is None else f", TTFT {closest.ttft_seconds * 1000:,.0f} ms"
    return (
        f"{asked}; closest: {describe(closest)} at TPOT {closest.tpot_seconds * 1000:,.1f} ms"
        f"{ttft}; relax the targets or raise --max-gpus"
    )


def workload_payload(request: PlanRequest) -> dict[str, Any]:
    """The JSON ``workload`` object: what plan assumed the layouts serve."""
    workload = request.workload
    rate = request.request_rate
    return {
        "workload_kind": (
            "closed_batch" if rate is None
            else "disaggregated" if request.disaggregated else "request_rate"
        ),
        "input_len": None if workload is None else workload.input_len,
        "output_len": None if workload is None else workload.output_len,
        "request_rate": rate,
        # Given, else null: each layout's engine runs its own (the layout's key of that name).
        "max_num_batched_tokens": None if rate is None else request.max_num_batched_tokens,
        "ttft_prompt_tokens": request.prompt_tokens,
        "arrivals": "poisson" if rate is not None else None,
        "queueing": "M/D/1" if rate is not None else None,
    }


def step_words(request: PlanRequest, steps: Collection[int]) -> str:
    """The tokens a step carries, as the workload line says it: the given count, or the one
    every layout shown takes, else each engine's own for its GPU."""
    given = request.max_num_batched_tokens
    if given is not None:
        return f"{given:,} tokens"
    if len(set(steps)) == 1:
        return f"{next(iter(steps)):,} tokens (the engine's step)"
    return "the engine's step for each GPU (each layout's max_num_batched_tokens)"


def workload_line(request: PlanRequest, steps: Collection[int] = ()) -> str:
    """plan's workload in one line, as its answer states it."""
    workload = request.workload
    rate = request.request_rate
    if workload is not None and rate is not None and request.disaggregated:
        return (
            f"workload: {rate:g} requests/s (Poisson) of {workload.input_len:,} prompt + "
            f"{workload.output_len:,} output tokens, prefill and decode pools apart: prompts "
            f"prefilled in steps of up to {step_words(request, steps)} (TTFT with M/D/1 "
            "queueing), decode steps carrying no prompt tokens (concurrency by Little's law)"
        )
    if workload is not None and rate is not None:
        return (
            f"workload: {rate:g} requests/s (Poisson) of {workload.input_len:,} prompt + "
            f"{workload.output_len:,} output tokens, spread evenly over the replicas; prefill "
            f"chunks of up to {step_words(request, steps)} per step mixed into decode "
            "steps (concurrency by Little's law, TTFT with M/D/1 queueing)"
        )
    prompt = request.prompt_tokens
    return (
        f"workload: {request.users:,} users decoding together at {request.context_tokens:,} "
        f"tokens each; TTFT of one prompt of {prompt:,} tokens, no queueing"
    )
