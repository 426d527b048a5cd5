"""`kvcalc sweep`: KV per sequence, max batch and TPOT along log-spaced contexts (or batches),
one line per model and GPU set, as tables, a terminal chart and optionally a plot file."""

from __future__ import annotations

from typing import Any

import typer

from kvcalc.cli.app import (
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
)
from kvcalc.cli.deploy import deployment_sets_options
from kvcalc.command_inputs import SWEEP_INPUTS
from kvcalc.completion import complete_models
from kvcalc.deploy import DeploymentOptions

command_app = command_typer()

ModelsArgument = typer.Argument(
    ...,
    metavar="MODEL",
    help="registry names, Hugging Face repo ids or config.json paths; one line each",
    autocompletion=complete_models,
)


@command_app.command()
@deployment_sets_options
@declared_options(SWEEP_INPUTS)
def sweep(
    models: list[str] = ModelsArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
    deploys: list[DeploymentOptions],
) -> None:
    """KV bytes per sequence, max batch and decode TPOT at each context (default 4k..128k), one
    line per MODEL and --gpus set: a table per line and a chart of each quantity."""
    from kvcalc.api import given_inputs
    from kvcalc.api import sweep as sweep_of

    result = sweep_of(
        models, gpus=[d.gpus or "" for d in deploys], **given, **given_inputs(deploys[0])
    )
    emit_report(result.report(), fmt)
