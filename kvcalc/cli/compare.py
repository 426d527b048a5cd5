"""`kvcalc compare`: one row per KV-cache technique (:mod:`kvcalc.techniques`), for one model or
several side by side; the rows are :func:`kvcalc.api.compare`'s."""

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
from kvcalc.cli.deploy import optional_deployment_options
from kvcalc.cli.eviction import EvictionOptions, eviction_options
from kvcalc.command_inputs import compare_inputs
from kvcalc.completion import complete_models
from kvcalc.deploy import DeploymentOptions

command_app = command_typer()

ModelsArgument = typer.Argument(
    ...,
    metavar="MODEL",
    help="one or more registry names, Hugging Face repo ids or config.json paths, compared "
    "side by side",
    show_default=False,
    autocompletion=complete_models,
)


@command_app.command()
@optional_deployment_options
@eviction_options
@declared_options(compare_inputs())
def compare(
    models: list[str] = ModelsArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
    deploy: DeploymentOptions,
    evict: EvictionOptions,
) -> None:
    """KV-cache techniques side by side at one --ctx (default: the smallest maximum context of
    the models): bytes per token and per sequence, reduction vs the baseline, and with --gpus
    the sequences that fit and the decode TPOT. --prompt L --gen N add the no-cache and SnapKV
    rows; eviction options apply to every row but those of another policy."""
    from kvcalc.api import compare as compare_models
    from kvcalc.api import given_inputs

    result = compare_models(models, gpus=deploy.gpus, **given, **given_inputs(deploy, evict))
    emit_report(result.report(), fmt)
