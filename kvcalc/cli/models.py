"""`kvcalc models`: the model registry as a table, and `--check` to validate a registry."""

from __future__ import annotations

from pathlib import Path

import typer

from kvcalc.cli.app import EXIT_USAGE, FormatOption, OutputFormat, command_typer, emit

RegistryOption = typer.Option(
    None, "--registry", help="registry directory holding models/ [default: the bundled one]"
)


command_app = command_typer()


@command_app.command()
def models(
    fmt: OutputFormat = FormatOption,
    check: bool = typer.Option(
        False, "--check", help="validate every registry file; exit 2 if any is bad"
    ),
    registry: Path = RegistryOption,
) -> None:
    """List the registry models: attention kinds, KV bytes per token at bf16, parameters."""
    from kvcalc.registry.load import all_models, check_models, models_dir

    if check:
        problems = check_models(registry)
        for line in problems:
            typer.echo(line, err=True)
        n = len(list(models_dir(registry).glob("*.yaml")))
        if problems:
            typer.echo(f"{len(problems)} problem(s) in {n} model files", err=True)
            raise typer.Exit(EXIT_USAGE)
        typer.echo(f"ok: {n} model files are valid")
        return
    from kvcalc.render.models import model_rows

    rows = model_rows(all_models(registry))
    if fmt is OutputFormat.json:
        from kvcalc.render.json import dumps

        emit(dumps(rows))
        return
    from kvcalc.render.console import console
    from kvcalc.render.models import models_table

    console().print(models_table(rows))
