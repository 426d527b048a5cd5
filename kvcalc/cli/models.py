"""`kvcalc models`: the model registry as a table, and `--check` to validate a registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcalc.cli.app import (
    EXIT_USAGE,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
)
from kvcalc.command_inputs import REGISTRY_INPUTS

command_app = command_typer()


@command_app.command()
@declared_options(REGISTRY_INPUTS)
def models(
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
) -> None:
    """List the registry models: attention kinds, KV bytes per token at bf16, parameters."""
    check, registry = given["check"], given["registry"] and Path(given["registry"])
    from kvcalc.registry.load import all_models, check_models, model_paths

    if check:
        from kvcalc.render.check import check_report

        problems = check_models(registry)
        files = len(model_paths(registry))
        emit_report(check_report(problems, files, "model", EXIT_USAGE), fmt)
        return
    from kvcalc.registry.cache import cached_rows
    from kvcalc.render.models import MODEL_ROW_SHAPE, model_rows, models_report

    rows = cached_rows(
        model_paths(registry), lambda: model_rows(all_models(registry)), "model-rows",
        MODEL_ROW_SHAPE,
    )
    emit_report(models_report(rows), fmt)
