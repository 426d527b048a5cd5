"""``--plot``: a report's charts drawn into a PNG or SVG file with matplotlib.

matplotlib is an optional extra (``pip install 'kvcalc[plot]'``) imported only here and only when
``--plot`` is given, so no other command, and no sweep without ``--plot``, pays for it. The
figure is built without pyplot: no global state, no GUI backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kvcalc.render.chart import Chart

#: File types --plot writes, by suffix (matplotlib picks the format from it).
PLOT_SUFFIXES = (".png", ".svg")
INSTALL_HINT = "pip install 'kvcalc[plot]'"
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
    """One panel per chart, stacked over a shared log x axis, one line per series; raises
    OSError when the file cannot be written."""
    from matplotlib import rc_context
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8, 2.6 * len(charts) + 0.6), layout="constrained")
    axes = figure.subplots(len(charts), 1, sharex=True, squeeze=False)[:, 0]
    xs: set[int] = set()
    for ax, chart in zip(axes, charts, strict=True):
        for name, points in chart.drawn():
            ordered = sorted(points)
            xs.update(x for x, _ in ordered)
            ax.plot([x for x, _ in ordered], [y for _, y in ordered], marker="o", label=name)
        ax.set_xscale("log", base=2)
        if chart.log_y:
            ax.set_yscale("log")
        ax.set_ylabel(chart.title)
        ax.grid(True, alpha=0.3)
    if 1 < len(xs) <= MAX_LABELLED_TICKS:
        values = sorted(xs)
        axes[-1].set_xticks(values, [charts[-1].tick(x) for x in values])
    axes[-1].set_xlabel(charts[-1].x_label)
    axes[0].legend(fontsize="small")
    figure.suptitle(title)
    # No creation date and fixed element ids in an SVG, so the same sweep writes the same file.
    metadata = {"Date": None} if path.suffix.lower() == ".svg" else {}
    with rc_context({"svg.hashsalt": "kvcalc"}):
        figure.savefig(path, metadata=metadata)
