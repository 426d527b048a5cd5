"""`kvcalc plan`: the fewest GPUs that serve --users sequences of --ctx tokens within the
latency targets, searched over accelerators, counts, tp/pp splits, replicas and dtypes."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import (
    DEPLOYMENT_PANEL,
    KV_PANEL,
    MODEL_HELP,
    MODEL_PANEL,
    TOKENS,
    AttentionOption,
    MfuOption,
    ReportFormat,
    ReportFormatOption,
    check_mfu,
    command_typer,
    complete_gpus,
    complete_kv_dtypes,
    complete_models,
    complete_names,
    complete_weight_dtypes,
    completing_lists,
    emit_report,
    fail,
    load_model,
    option_name,
    parse_ctx_list,
)
from kvcalc.engine.serving import DEFAULT_ENGINE, engine_named

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

command_app = command_typer()


def plan_engines() -> list[ServingEngine]:
    """The engines plan's search sizes layouts with."""
    from kvcalc.engine.serving import engines

    return [engine for engine in engines() if engine.plans]


def complete_plan_engines(incomplete: str) -> list[str]:
    return complete_names(incomplete, [engine.name for engine in plan_engines()])


def _plan_engine_names() -> list[str]:
    return [engine.name for engine in plan_engines()]


@command_app.command()
def plan(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_models),
    users: int = typer.Option(
        ..., "--users", "-u", help="sequences served at once", show_default=False
    ),
    ctx: str = typer.Option(
        None,
        "--ctx",
        "-c",
        metavar=TOKENS,
        rich_help_panel=MODEL_PANEL,
        help="tokens of each user's sequence, also the TTFT prompt: 8192, 8k, 128k [default: 8k]",
        show_default=False,
    ),
    max_tpot: str = typer.Option(
        None,
        "--max-tpot",
        metavar="TIME",
        help="time-per-output-token target, e.g. 50ms", show_default=False
    ),
    max_ttft: str = typer.Option(
        None,
        "--max-ttft",
        metavar="TIME",
        help="time-to-first-token target for one prompt of --ctx tokens, e.g. 2s",
        show_default=False,
    ),
    attention: str = AttentionOption,
    gpus: str = typer.Option(
        None,
        "--gpus",
        "-g",
        metavar="GPU[,GPU...]",
        autocompletion=completing_lists(complete_gpus),
        rich_help_panel=DEPLOYMENT_PANEL,
        help="accelerators to consider, e.g. H100,H200,MI300X [default: the whole registry]",
        show_default=False,
    ),
    max_gpus: int = typer.Option(
        DEFAULT_MAX_GPUS,
        "--max-gpus",
        rich_help_panel=DEPLOYMENT_PANEL,
        help="largest GPU count searched per accelerator",
    ),
    weight_dtype: str = typer.Option(
        None,
        "--weight-dtype",
        metavar="DTYPE[,DTYPE...]",
        autocompletion=completing_lists(complete_weight_dtypes),
        rich_help_panel=DEPLOYMENT_PANEL,
        help="weight dtypes to try, e.g. bf16,fp8 [default: as the checkpoint ships]",
        show_default=False,
    ),
    kv_dtype: str = typer.Option(
        None,
        "--kv-dtype",
        metavar="DTYPE[,DTYPE...]",
        autocompletion=completing_lists(complete_kv_dtypes),
        rich_help_panel=KV_PANEL,
        help="KV cache formats to try, e.g. bf16,fp8,nvfp4,kivi2 (any --kv-dtype name) "
        "[default: the model's dtype]",
        show_default=False,
    ),
    engine: str = typer.Option(
        DEFAULT_ENGINE,
        "--engine",
        metavar="[" + "|".join(_plan_engine_names()) + "]",
        autocompletion=complete_plan_engines,
        rich_help_panel=DEPLOYMENT_PANEL,
        help="; ".join(e.summary for e in plan_engines()),
    ),
    price: str = typer.Option(
        None,
        "--price",
        metavar="GPU=PRICE,...",
        help="price per GPU-hour, e.g. H100=2.5,H200=3.1: the tie-break (else fewest watts); "
        "without --gpus only priced GPUs are searched",
        show_default=False,
    ),
    roofline: bool = typer.Option(
        False, "--roofline", help="hold the targets to the roofline bound, not the estimate"
    ),
    mfu: float = MfuOption,
    top: int = typer.Option(DEFAULT_TOP, "--top", help="layouts shown, best first"),
    fmt: ReportFormat = ReportFormatOption,
) -> None:
    """The fewest GPUs that hold --users sequences of --ctx tokens (default 8k) and meet
    --max-tpot / --max-ttft: every accelerator, count up to --max-gpus, tp/pp split, replica
    count and dtype; ranked by GPU count, then price (--price) or watts."""
    from kvcalc.engine.plan import PlanRequest, max_batch_rule
    from kvcalc.engine.plan import plan as search
    from kvcalc.render.plan import plan_report

    check_mfu(mfu)
    if roofline and mfu is not None:
        fail("--mfu: the roofline holds prefill to the dense peak; drop --mfu or --roofline")
    names = _plan_engine_names()
    if engine.lower() not in names:
        fail(f"--engine: plan sizes the cache with {' or '.join(names)}, not {engine.lower()!r}")
    chosen = engine_named(engine)
    if not 1 <= users <= 1_000_000:
        fail(f"--users: {users} is not between 1 and 1,000,000")
    if not 1 <= max_gpus <= MAX_MAX_GPUS:
        fail(f"--max-gpus: {max_gpus} is not between 1 and {MAX_MAX_GPUS}, e.g. 8")
    if top < 1:
        fail(f"--top: {top} must be at least 1")
    spec = load_model(model, None, None, None, attention)
    contexts = parse_ctx_list(ctx or DEFAULT_CONTEXT)
    if len(contexts) != 1:
        fail("--ctx: plan serves one context length; give one, e.g. 16k")
    prices = parse_prices(price) if price else None
    request = PlanRequest(
        model=spec,
        users=users,
        context_tokens=contexts[0],
        accelerators=candidate_accelerators(gpus, prices),
        max_gpus=max_gpus,
        weight_dtypes=dtype_list(weight_dtype, "--weight-dtype", spec),
        kv_dtypes=kv_format_list(kv_dtype, spec, chosen),
        max_tpot_seconds=duration(max_tpot, "--max-tpot"),
        max_ttft_seconds=duration(max_ttft, "--max-ttft"),
        roofline=roofline,
        mfu=mfu,
        prices=prices,
    )
    result = search(request, max_batch_rule(chosen))
    if not result.layouts:
        fail(nothing_meets(result))
    emit_report(plan_report(result, top, chosen), fmt)


def duration(text: str | None, option: str) -> float | None:
    from kvcalc.engine.units import UnitError, parse_duration

    if text is None:
        return None
    try:
        return parse_duration(text)
    except UnitError as exc:
        fail(f"{option}: {exc}")


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
    asked = (
        f"no layout of up to {request.max_gpus} GPUs serves {request.users:,} users at "
        f"{request.context_tokens:,} tokens{targets(request)}"
    )
    closest = result.closest
    if closest is None and not result.weights_fit:
        return f"{asked}: no GPU set holds the weights; raise --max-gpus or try --weight-dtype fp8"
    if closest is None:
        return (
            f"{asked}: no GPU set holds the weights and {request.users:,} caches of "
            f"{request.context_tokens:,} tokens; raise --max-gpus, lower --users or --ctx, "
            "or try --kv-dtype fp8"
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
