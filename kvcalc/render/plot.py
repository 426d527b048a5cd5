"""``--plot``: a report's charts drawn into a PNG or SVG file with matplotlib.

matplotlib is an optional extra (the ``plot`` extra: ``pip install -e '.[plot]'`` from a source
checkout) imported only here and only when ``--plot`` is given, so no other command, and no sweep
without ``--plot``, pays for it. The figure is built without pyplot: no global state, no GUI
backend.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.errors import fail
from kvcalc.install import pip_install_hint
from kvcalc.render.chart import Chart

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: File types --plot writes, by suffix (matplotlib picks the format from it).
PLOT_SUFFIXES = (".png", ".svg")
#: The plot extra's requirement (pyproject.toml), installable wherever kvcalc runs.
MATPLOTLIB_REQUIREMENT = "matplotlib>=3.7"
#: How to install it, with the pip of the Python running kvcalc (:mod:`kvcalc.install`).
INSTALL_HINT = pip_install_hint(MATPLOTLIB_REQUIREMENT)
#: Beyond this many x values, matplotlib's own log ticks read better than one label per point.
MAX_LABELLED_TICKS = 12


def matplotlib_available() -> bool:
    """Whether matplotlib imports (checked before a sweep is computed, to fail early)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plot(charts: Sequence[Chart], path: Path, title: str) -> None:
    """The charts' figure (:func:`plot_figure`) written to ``path``; raises OSError when the file
    cannot be written."""
    from matplotlib import rc_context

    figure = plot_figure(charts, title)
    # No creation date and fixed element ids in an SVG, so the same sweep writes the same file.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else {}
    with rc_context({"svg.hashsalt": "kvcalc"}):
        figure.savefig(path, metadata=metadata)


def plot_figure(charts: Sequence[Chart], title: str) -> Figure:
    """One panel per chart, stacked over a shared log x axis spanning the whole sweep, one line
    per series, each panel's legend beside it (never over a line); the points where a series does
    not fit are crosses on the panel's bottom edge, and its legend entry says where."""
    from matplotlib.figure import Figure
    from matplotlib.transforms import blended_transform_factory

    legend = max((len(c.legend(name)) for c in charts for name, _ in c.series), default=0)
    # Room for the legends to the right of the panels: about 0.075 in per character of small text.
    figure = Figure(
        figsize=(6 + min(legend, 80) * 0.075, 2.6 * len(charts) + 0.6), layout="constrained"
    )
    axes = figure.subplots(len(charts), 1, sharex=True, squeeze=False)[:, 0]
    xs = sorted({x for chart in charts for x in chart.x_values()})
    for ax, chart in zip(axes, charts, strict=True):
        edge = blended_transform_factory(ax.transData, ax.transAxes)
        for name, points in chart.drawn():
            ordered = sorted(points)
            (line,) = ax.plot(
                [x for x, _ in ordered], [y for _, y in ordered], marker="o",
                label=chart.legend(name),
            )
            unfit = sorted(chart.unfit.get(name, ()))
            if unfit:
                ax.plot(unfit, [0.0] * len(unfit), transform=edge, linestyle="none", marker="x",
                        markersize=8, color=line.get_color(), clip_on=False)
        ax.set_xscale("log", base=2)
        if chart.log_y:
            ax.set_yscale("log")
        ax.set_ylabel(chart.title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0)
    if len(xs) > 1:
        # The whole sweep, points where nothing fits included, with a margin on a log scale.
        margin = (xs[-1] / xs[0]) ** 0.03
        axes[-1].set_xlim(xs[0] / margin, xs[-1] * margin)
    if 1 < len(xs) <= MAX_LABELLED_TICKS:
        axes[-1].set_xticks(xs, [charts[-1].tick(x) for x in xs])
    axes[-1].set_xlabel(charts[-1].x_label)
    figure.suptitle(title)
    return figure


def plot_target(text: str, swept: bool) -> Path:
    """The --plot file, checked before any work: its type, its folder, that there is a line to
    draw, and matplotlib."""
    from kvcalc.engine.units import shown

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

    try:
        write_plot(charts, target, f"kvcalc sweep (mbu {mbu:g})")
    except OSError as exc:
        fail(f"--plot: cannot write {shown(str(target), 200)}: {exc.strerror or exc}")
