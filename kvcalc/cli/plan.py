"""`kvcalc plan`: the fewest GPUs that serve --users sequences of --ctx tokens within the
latency targets, searched over accelerators, counts, tp/pp splits, replicas and dtypes."""

from __future__ import annotations

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
    command_typer,
    complete_gpus,
    complete_kv_dtypes,
    complete_models,
    complete_names,
    complete_weight_dtypes,
    completing_lists,
    emit_report,
)
from kvcalc.engine.serving import DEFAULT_ENGINE
from kvcalc.planning import DEFAULT_MAX_GPUS, DEFAULT_TOP, plan_engines

command_app = command_typer()


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
    from kvcalc.api import plan as plan_of

    result = plan_of(
        model,
        users=users,
        ctx=ctx,
        max_tpot=max_tpot,
        max_ttft=max_ttft,
        attention=attention,
        gpus=gpus,
        max_gpus=max_gpus,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        engine=engine,
        price=price,
        roofline=roofline,
        mfu=mfu,
        top=top,
    )
    emit_report(result.report(), fmt)
