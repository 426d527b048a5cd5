"""`kvcalc gpus`: the accelerator registry as a table or JSON, and `--check` to validate it."""

from __future__ import annotations

from pathlib import Path

import typer

from kvcalc.cli.app import EXIT_USAGE, FormatOption, OutputFormat, command_typer, emit

NamesArgument = typer.Argument(
    None,
    metavar="GPU...",
    help="ids or aliases to show (e.g. h100 mi300x) [default: all]",
    show_default=False,
)
CheckOption = typer.Option(
    False, "--check", help="validate every accelerator file; exit 2 if any is bad"
)
RegistryOption = typer.Option(
    None, "--registry", help="registry directory holding gpus/ [default: the bundled one]"
)


command_app = command_typer()


@command_app.command()
def gpus(
    names: list[str] = NamesArgument,
    fmt: OutputFormat = FormatOption,
    check: bool = CheckOption,
    registry: Path = RegistryOption,
) -> None:
    """List the accelerators: usable memory, bandwidth, dense BF16/FP8 TFLOPS, links, status."""
    from kvcalc.registry.gpus import all_gpus, check_gpus, find_gpu, gpu_paths

    if check:
        problems = check_gpus(registry)
        for line in problems:
            typer.echo(line, err=True)
        n = len(gpu_paths(registry))
        if problems:
            typer.echo(f"{len(problems)} problem(s) in {n} accelerator files", err=True)
            raise typer.Exit(EXIT_USAGE)
        typer.echo(f"ok: {n} accelerator files are valid")
        return
    files = [find_gpu(n, registry) for n in names] if names else all_gpus(registry)
    from kvcalc.render.gpus import gpu_row, gpus_table

    rows = [gpu_row(g) for g in files]
    if fmt is OutputFormat.json:
        from kvcalc.render.json import dumps

        emit(dumps(rows))
        return
    from kvcalc.render.console import console

    console().print(gpus_table(rows))
