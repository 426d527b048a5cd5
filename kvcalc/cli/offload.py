"""`kvcalc offload`: what the tiers beyond HBM hold of a model's cache, and whether a cached prefix
is faster to bring back than to recompute."""

from __future__ import annotations

from typing import Any

from kvcalc.cli.app import (
    ModelArgument,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
)
from kvcalc.cli.deploy import estimated_deployment_options
from kvcalc.command_inputs import OFFLOAD_CONTEXT, OFFLOAD_INPUTS
from kvcalc.deploy import DeploymentOptions

command_app = command_typer()


@command_app.command()
@estimated_deployment_options
@declared_options(OFFLOAD_INPUTS)
def offload(
    model: str = ModelArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
    deploy: DeploymentOptions,
) -> None:
    """Tokens and sequences each tier holds at --ctx (default 32k), the time to load a cached
    prefix of that length back into HBM against recomputing its prefill at the GPUs' dense
    peak, and the prefix length from which loading wins."""
    from kvcalc.api import given_inputs
    from kvcalc.api import offload as offload_of

    result = offload_of(
        model, gpus=deploy.gpus or "", ctx=given["ctx"] or OFFLOAD_CONTEXT,
        tier=given["tier"] or None, **given_inputs(deploy),
    )
    emit_report(result.report(), fmt)
