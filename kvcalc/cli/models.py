"""`kvcalc models`: the model registry as a table, and `--check` to validate a registry."""

from __future__ import annotations

from pathlib import Path

from kvcalc.cli.app import (
    EXIT_USAGE,
    CheckOption,
    RegistryOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    emit_report,
)

command_app = command_typer()


@command_app.command()
def models(
    fmt: ReportFormat = ReportFormatOption,
    check: bool = CheckOption,
    registry: Path = RegistryOption,
) -> None:
    """List the registry models: attention kinds, KV bytes per token at bf16, parameters."""
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
