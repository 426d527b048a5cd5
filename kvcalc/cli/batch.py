"""`kvcalc batch`: how many sequences fit on a set of GPUs, for one model or the whole registry."""

from __future__ import annotations

from typing import Any

import typer

from kvcalc.cli.app import (
    MODEL_HELP,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
)
from kvcalc.cli.deploy import deployment_options, engine_options
from kvcalc.cli.eviction import EvictionOptions, eviction_options
from kvcalc.command_inputs import BATCH_INPUTS
from kvcalc.completion import complete_models
from kvcalc.deploy import DeploymentOptions, EngineChoice, EngineFlags

command_app = command_typer()


@command_app.command()
@deployment_options
@engine_options
@eviction_options
@declared_options(BATCH_INPUTS)
def batch(
    model: str = typer.Argument(
        None,
        help=f"{MODEL_HELP} [default: every model]",
        autocompletion=complete_models,
        show_default=False,
    ),
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
    deploy: DeploymentOptions,
    engine: EngineChoice,
    flags: EngineFlags,
    evict: EvictionOptions,
) -> None:
    """Sequences that fit at each context (default 8k,32k,128k; SGLang 8k; vLLM the model's
    maximum; SnapKV --prompt + --gen): memory budget, KV capacity, max context at batch 1."""
    from kvcalc.api import batch as batch_of
    from kvcalc.api import given_inputs

    result = batch_of(
        model, gpus=deploy.gpus or "", engine=engine.engine, **given,
        **given_inputs(deploy, flags, evict),
    )
    emit_report(result.report(), fmt)
