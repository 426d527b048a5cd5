"""`kvcalc gpus`: the accelerator registry as a table or JSON, and `--check` to validate it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from kvcalc.cli.app import (
    EXIT_USAGE,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
    fail,
)
from kvcalc.command_inputs import REGISTRY_INPUTS
from kvcalc.completion import complete_gpus

NamesArgument = typer.Argument(
    None,
    metavar="GPU...",
    help="ids or aliases to show (e.g. h100 mi300x) [default: all]",
    autocompletion=complete_gpus,
    show_default=False,
)

command_app = command_typer()


@command_app.command()
@declared_options(REGISTRY_INPUTS)
def gpus(
    names: list[str] = NamesArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
) -> None:
    """List the accelerators: usable memory, bandwidth, dense BF16/FP8 TFLOPS, links, status."""
    check, registry = given["check"], given["registry"] and Path(given["registry"])
    from kvcalc.registry.gpus import check_gpus, find_gpu_path, gpu_paths, load_gpu_file

    if check:
        from kvcalc.render.check import check_report

        if names:
            fail(f"--check validates every accelerator file; drop the names ({' '.join(names)})")
        problems = check_gpus(registry)
        count = len(gpu_paths(registry))
        emit_report(check_report(problems, count, "accelerator", EXIT_USAGE), fmt)
        return
    from kvcalc.registry.cache import cached_rows
    from kvcalc.render.gpus import GPU_ROW_SHAPE, gpu_row, gpus_report

    # Two names of one accelerator (h100, h100-sxm) list it once.
    paths = (
        list(dict.fromkeys(find_gpu_path(n, registry) for n in names))
        if names
        else gpu_paths(registry)
    )
    rows = cached_rows(
        paths, lambda: [gpu_row(load_gpu_file(p)) for p in paths], "gpu-rows", GPU_ROW_SHAPE
    )
    emit_report(gpus_report(rows), fmt)
