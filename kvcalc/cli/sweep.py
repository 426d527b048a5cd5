"""`kvcalc sweep`: KV per sequence, max batch and TPOT along log-spaced contexts (or batches),
one line per model and GPU set, as tables, a terminal chart and optionally a plot file."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import (
    MAX_BATCH,
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
    load_model,
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
    from kvcalc.engine.sweep import sweep as sweep_of
    from kvcalc.engine.units import parse_context
    from kvcalc.render.sweep import sweep_report, swept_axis

    check_mbu(mbu)
    contexts = sweep_values(ctx, "--ctx", parse_context)
    batches = sweep_values(batch, "--batch", parse_batch) if batch is not None else None
    swept = swept_axis(contexts, batches) is not None
    target = plot_target(plot, swept) if plot is not None else None
    refuse_repeats(models, "MODEL")
    refuse_repeats([d.gpus or "" for d in deploys], "--gpus")  # always given here
    if len(models) > 1:
        deploys[0].refuse("weights", because="it is one model's weights; sweep one MODEL with it")
    specs = [load_model(name, None, None, None, attention) for name in models]
    results = [
        sweep_of(d.build(spec, d.resolve_gpus()), contexts, batches, mbu)
        for spec in specs
        for d in deploys
    ]
    report = sweep_report(results, contexts, batches)
    if target is not None:
        draw(report.charts, target, mbu)
    emit_report(report, fmt)


def sweep_values(text: str, option: str, parse_point: Callable[[str], int]) -> list[int]:
    """A range (``4k..1m``, ``4k..1m:8``) or a comma-separated list of values."""
    from kvcalc.engine.units import UnitError, parse_range

    try:
        if ".." in text:
            return parse_range(text, parse_point)
        values = [parse_point(p) for p in text.split(",") if p.strip()]
    except UnitError as exc:
        fail(f"{option}: {exc}")
    if not values:
        fail(f"{option}: give a range such as 4k..1m or a list such as 8k,32k")
    refuse_repeats([str(v) for v in values], option)
    return values


def parse_batch(text: str) -> int:
    from kvcalc.engine.units import UnitError, parse_count

    value = parse_count(text)
    if value > MAX_BATCH:
        raise UnitError(f"invalid batch {text!r}: above the limit of {MAX_BATCH:,} sequences")
    return value


def refuse_repeats(values: list[str], option: str) -> None:
    from kvcalc.engine.units import shown

    seen = set()
    for value in values:
        if value in seen:
            fail(f"{option}: {shown(value, 100)} is given twice; each gives one line, give it once")
        seen.add(value)


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
