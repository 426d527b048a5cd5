"""`kvcalc plan`: the fewest GPUs that serve --users sequences of --ctx tokens within the
latency targets, searched over accelerators, counts, tp/pp splits, replicas and dtypes."""

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
from kvcalc.command_inputs import plan_inputs

command_app = command_typer()


@command_app.command()
@declared_options(plan_inputs())
def plan(
    model: str = ModelArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
) -> None:
    """The fewest GPUs that hold --users sequences of --ctx tokens (default 8k), or serve
    --request-rate, and meet --max-tpot / --max-ttft: every accelerator, count up to
    --max-gpus, tp/pp split, replica count and dtype; ranked by GPU count, then price or watts."""
    from kvcalc.api import plan as plan_of

    emit_report(plan_of(model, **given).report(), fmt)
