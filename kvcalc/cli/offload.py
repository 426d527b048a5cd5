"""`kvcalc offload`: what the tiers beyond HBM hold of a model's cache, and whether a cached prefix
is faster to bring back than to recompute."""

from __future__ import annotations

import typer

from kvcalc.cli.app import (
    MODEL_HELP,
    ContextsOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    complete_models,
    emit_report,
)
from kvcalc.cli.deploy import deployment_options
from kvcalc.deploy import DeploymentOptions

DEFAULT_CONTEXT = "32k"

command_app = command_typer()

TierOption = typer.Option(
    None,
    "--tier",
    metavar="NAME:SIZE@RATE",
    help="NAME:SIZE@BANDWIDTH/s, e.g. cpu:512GB@64GB/s (repeatable) "
    "[default: host memory 2x the GPUs' over PCIe, one 4 TB NVMe at 7 GB/s per GPU]",
)


@command_app.command()
@deployment_options
def offload(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_models),
    ctx: str = ContextsOption,
    tier: list[str] = TierOption,
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploy: DeploymentOptions,
) -> None:
    """Tokens and sequences each tier holds at --ctx (default 32k), the time to load a cached
    prefix of that length back into HBM against recomputing its prefill at the GPUs' dense
    peak, and the prefix length from which loading wins."""
    from kvcalc.api import given_inputs
    from kvcalc.api import offload as offload_of

    result = offload_of(
        model, gpus=deploy.gpus or "", ctx=ctx or DEFAULT_CONTEXT, tier=tier or None,
        **given_inputs(deploy),
    )
    emit_report(result.report(), fmt)
