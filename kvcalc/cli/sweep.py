"""`kvcalc sweep`: KV per sequence, max batch and TPOT along log-spaced contexts (or batches),
one line per model and GPU set, as tables, a terminal chart and optionally a plot file."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import (
    MODEL_PANEL,
    OUTPUT_PANEL,
    TOKENS,
    AttentionOption,
    MbuOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    complete_models,
    emit_report,
)
from kvcalc.cli.deploy import deployment_sets_options
from kvcalc.deploy import DeploymentOptions

if TYPE_CHECKING:
    pass

DEFAULT_CONTEXTS = "4k..128k"

command_app = command_typer()

ModelsArgument = typer.Argument(
    ...,
    metavar="MODEL",
    help="registry names, Hugging Face repo ids or config.json paths; one line each",
    autocompletion=complete_models,
)


@command_app.command()
@deployment_sets_options
def sweep(
    models: list[str] = ModelsArgument,
    ctx: str = typer.Option(
        DEFAULT_CONTEXTS,
        "--ctx",
        "-c",
        metavar=TOKENS,
        rich_help_panel=MODEL_PANEL,
        help="contexts: START..END (both ends and the powers of two between), START..END:N "
        "(N log-spaced points) or a list such as 8k,32k",
    ),
    batch: str = typer.Option(
        None,
        "--batch",
        "-b",
        metavar="N",
        rich_help_panel=MODEL_PANEL,
        help="sequences timed, as --ctx: 1..256, 1..256:N or 8,64 [default: the most that fit "
        "at each context]",
        show_default=False,
    ),
    attention: str = AttentionOption,
    mbu: float = MbuOption,
    plot: str = typer.Option(
        None,
        "--plot",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="also draw the charts into a .png or .svg file (needs matplotlib: the plot extra)",
        show_default=False,
    ),
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploys: list[DeploymentOptions],
) -> None:
    """KV bytes per sequence, max batch and decode TPOT at each context (default 4k..128k), one
    line per MODEL and --gpus set: a table per line and a chart of each quantity."""
    from kvcalc.api import given_inputs
    from kvcalc.api import sweep as sweep_of

    result = sweep_of(
        models,
        gpus=[d.gpus or "" for d in deploys],
        ctx=ctx,
        batch=batch,
        attention=attention,
        mbu=mbu,
        plot=plot,
        **given_inputs(deploys[0]),
    )
    emit_report(result.report(), fmt)
