"""`kvcalc sweep`: KV per sequence, max batch and TPOT along log-spaced contexts (or batches),
one line per model and GPU set, as tables, a terminal chart and optionally a plot file."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import (
    MODEL_PANEL,
    OUTPUT_PANEL,
    TOKENS,
    AttentionOption,
    MbuOption,
    ReportFormat,
    ReportFormatOption,
    check_mbu,
    command_typer,
    complete_models,
    emit_report,
    fail,
)
from kvcalc.cli.deploy import DeploymentOptions, deployment_sets_options

if TYPE_CHECKING:
    from kvcalc.render.chart import Chart

DEFAULT_CONTEXTS = "4k..128k"

command_app = command_typer()

ModelsArgument = typer.Argument(
    ...,
    metavar="MODEL",
    help="registry names, Hugging Face repo ids or config.json paths; one line each",
    autocompletion=complete_models,
)


@command_app.command()
@deployment_sets_options
def sweep(
    models: list[str] = ModelsArgument,
    ctx: str = typer.Option(
        DEFAULT_CONTEXTS,
        "--ctx",
        "-c",
        metavar=TOKENS,
        rich_help_panel=MODEL_PANEL,
        help="contexts: START..END (both ends and the powers of two between), START..END:N "
        "(N log-spaced points) or a list such as 8k,32k",
    ),
    batch: str = typer.Option(
        None,
        "--batch",
        "-b",
        metavar="N",
        rich_help_panel=MODEL_PANEL,
        help="sequences timed, as --ctx: 1..256, 1..256:N or 8,64 [default: the most that fit "
        "at each context]",
        show_default=False,
    ),
    attention: str = AttentionOption,
    mbu: float = MbuOption,
    plot: str = typer.Option(
        None,
        "--plot",
        metavar="FILE",
        rich_help_panel=OUTPUT_PANEL,
        help="also draw the charts into a .png or .svg file (needs matplotlib: the plot extra)",
        show_default=False,
    ),
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploys: list[DeploymentOptions],
) -> None:
    """KV bytes per sequence, max batch and decode TPOT at each context (default 4k..128k), one
    line per MODEL and --gpus set: a table per line and a chart of each quantity."""
    from kvcalc.api import given_inputs
    from kvcalc.api import sweep as sweep_of
    from kvcalc.render.sweep import swept_axis

    if plot is not None:  # the file is checked before any work
        from kvcalc.api import parse_batch, sweep_values
        from kvcalc.engine.units import parse_context

        check_mbu(mbu)
        contexts = sweep_values(ctx, "--ctx", parse_context)
        batches = sweep_values(batch, "--batch", parse_batch) if batch is not None else None
        target = plot_target(plot, swept_axis(contexts, batches) is not None)
    result = sweep_of(
        models,
        gpus=[d.gpus or "" for d in deploys],
        ctx=ctx,
        batch=batch,
        attention=attention,
        mbu=mbu,
        **given_inputs(deploys[0]),
    )
    report = result.report()
    if plot is not None:
        draw(report.charts, target, mbu)
    emit_report(report, fmt)


def plot_target(text: str, swept: bool) -> Path:
    """The --plot file, checked before any work: its type, its folder, that there is a line to
    draw, and matplotlib."""
    from kvcalc.engine.units import shown
    from kvcalc.render.plot import INSTALL_HINT, PLOT_SUFFIXES, matplotlib_available

    path = Path(text)
    named = shown(text, 200)
    if path.suffix.lower() not in PLOT_SUFFIXES:
        fail(f"--plot: {named!r} is not a .png or .svg file name; give e.g. sweep.png")
    folder = path.parent
    if path.is_dir():
        fail(f"--plot: {named} is a folder; give a file name in it such as {named}/sweep.png")
    if not folder.is_dir():
        fail(f"--plot: cannot write {named}: the folder {shown(str(folder), 200)} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        fail(f"--plot: cannot write {named}: permission denied")
    if not swept:
        fail("--plot: one point has nothing to draw; give a range such as --ctx 4k..1m")
    if not matplotlib_available():
        fail(f"--plot: needs matplotlib, an optional extra; install it with {INSTALL_HINT}")
    return path


def draw(charts: Sequence[Chart], target: Path, mbu: float) -> None:
    from kvcalc.engine.units import shown
    from kvcalc.render.plot import write_plot

    try:
        write_plot(charts, target, f"kvcalc sweep (mbu {mbu:g})")
    except OSError as exc:
        fail(f"--plot: cannot write {shown(str(target), 200)}: {exc.strerror or exc}")
