"""A `Chart` (one quantity against another, several series) and its drawing as plain text for
the terminal: markers on a grid of characters, dots between a series' points, a logarithmic x
axis with the sweep's values as ticks, round values as y ticks, and a legend that says where a
series does not fit.

No plotting library: the table format must work with kvcalc's own dependencies, and a chart of a
few log-spaced points needs only a grid. ``--plot`` draws the same `Chart` with matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kvcalc.render.terminal import wrap_phrases, wrap_words


@dataclass(eq=False)
class Chart:
    """One quantity against another for several series, drawn under the tables in the table
    format (:func:`chart_lines`) and into a file by ``--plot`` (`kvcalc.render.plot`); the
    machine formats carry the same figures in the payload. The x axis is logarithmic: sweeps
    are log-spaced."""

    title: str
    """The quantity and its unit: ``TPOT (ms)``."""
    x_label: str
    """The x quantity and its unit: ``context (tokens)``."""
    series: Sequence[tuple[str, Sequence[tuple[int, float]]]]
    """(legend, points) per line; points with a non-positive y are not drawn on a log axis."""
    x_tokens: bool = True
    """Whether x is a token count, whose ticks read as contexts are written (``4k``, ``1m``,
    binary); other counts (batches) are ticked whole."""
    unfit: Mapping[str, Sequence[int]] = field(default_factory=dict)
    """Per series name, the x values at which it does not fit: its line has no point (or a zero)
    there, and its legend says so, so a line that stops does not read as missing data."""

    def tick(self, x: int) -> str:
        return tick_label(x) if self.x_tokens else f"{x:,}"

    def legend(self, name: str) -> str:
        """A series' legend entry: its name, and where it does not fit."""
        unfit = sorted(set(self.unfit.get(name, ())))
        if not unfit:
            return name
        fit = {x for series, points in self.series if series == name for x, _ in points}
        fit -= set(unfit)
        noun = "context" if self.x_tokens else "batch"
        if not fit:
            return f"{name}: does not fit at any {noun}"
        where = "" if self.x_tokens else "batch "
        if len(unfit) > 1 and max(fit) < unfit[0]:
            return f"{name}: does not fit at {where}{self.tick(unfit[0])} and above"
        shown = ", ".join(self.tick(x) for x in unfit[:MAX_LISTED])
        more = f" and {len(unfit) - MAX_LISTED} more" if len(unfit) > MAX_LISTED else ""
        return f"{name}: does not fit at {where}{shown}{more}"

    @property
    def log_y(self) -> bool:
        """A log y axis when the values span a factor of 10 or more, as KV bytes and batch
        sizes across a context sweep do; TPOT often spans less and reads better linearly."""
        ys = [y for _, points in self.series for _, y in points if y > 0]
        return bool(ys) and max(ys) >= 10 * min(ys)

    def x_values(self) -> list[int]:
        """The x axis's values: every drawn point's and every point where a series does not
        fit, so the axis spans the whole sweep and a line stops where its series stops fitting."""
        drawn = {x for _, points in self.drawn() for x, _ in points}
        return sorted(drawn.union(*self.unfit.values()))

    def drawn(self) -> list[tuple[str, list[tuple[int, float]]]]:
        """The points each series draws (positive y only on a log axis)."""
        log = self.log_y
        return [
            (name, [(x, y) for x, y in points if y > 0 or not log]) for name, points in self.series
        ]


#: One marker per series, in legend order (ASCII, so any terminal and any font shows them).
MARKERS = "*o+x#@%&"
#: Rows of the plotting area: enough to tell the series apart, short enough to keep three
#: charts on one screen.
HEIGHT = 10
#: Beyond this the points of a log-spaced sweep are too far apart to read as lines.
MAX_WIDTH = 100
#: Between two points of a series.
TRACE = "."
#: The most x values a legend entry lists where its series does not fit.
MAX_LISTED = 4
#: The most labelled rows on the y axis (of HEIGHT), so labels stay apart.
MAX_Y_TICKS = 4
#: Round steps of a linear y axis, times a power of ten: with 2.5 between 2 and 5 no step is more
#: than twice the one before, so the first with at most MAX_Y_TICKS ticks has at least two.
LINEAR_STEPS = (1, 2, 2.5, 5)
#: Round values of a log y axis within each decade, sparsest first.
LOG_MANTISSAS = ((1,), (1, 3), (1, 2, 5))


def marker(index: int) -> str:
    return MARKERS[index % len(MARKERS)]


def axis_value(value: float) -> str:
    """A y-axis label: four significant figures, thousands separated, no exponent below 10^15."""
    if abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:,.4g}"


def linear_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """At most MAX_Y_TICKS round values in [low, high] (``low < high``), evenly stepped by 1, 2,
    2.5 or 5 times a power of ten, each written with the step's decimals."""
    exponent = math.floor(math.log10((high - low) / MAX_Y_TICKS))
    while True:
        for mantissa in LINEAR_STEPS:
            ticks = stepped(low, high, mantissa, exponent)
            if len(ticks) <= MAX_Y_TICKS:
                return ticks
        exponent += 1


def stepped(low: float, high: float, mantissa: float, exponent: int) -> list[tuple[float, str]]:
    """The multiples of ``mantissa`` x 10^``exponent`` in [low, high], with their labels."""
    # A step of 0.25 x 10^k is 25 x 10^(k-2): whole numbers times a power of ten stay exact.
    whole = int(mantissa * 10) if mantissa % 1 else int(mantissa)
    scale = exponent - (1 if mantissa % 1 else 0)
    unit = 10.0**scale
    first, last = math.ceil(low / unit / whole - 1e-9), math.floor(high / unit / whole + 1e-9)
    decimals = max(0, -scale)
    return [
        (value, f"{value:,.{decimals}f}")
        for i in range(first, last + 1)
        for value in [i * whole / 10**-scale if scale < 0 else float(i * whole * 10**scale)]
    ]


def log_ticks(low: float, high: float) -> list[tuple[float, str]]:
    """Round values in [low, high] (``0 < low < high``) for a log axis: powers of ten, else 1 and
    3, else 1, 2 and 5 in each decade, whichever first gives at least three; thinned to at most
    MAX_Y_TICKS by keeping every other one."""
    choices = []
    for mantissas in LOG_MANTISSAS:
        ticks = [
            (value, axis_value(value) if exponent >= 0 else f"{value:.{-exponent}f}")
            for exponent in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
            for m in mantissas
            for value in [m * 10.0**exponent if exponent >= 0 else m / 10**-exponent]
            if low * (1 - 1e-9) <= value <= high * (1 + 1e-9)
        ]
        choices.append(ticks)
        if len(ticks) >= 3:
            break
    ticks = max(choices, key=len)
    while len(ticks) > MAX_Y_TICKS:
        ticks = ticks[::2]
    return ticks


def y_labels(low: float, high: float, log: bool) -> dict[int, str]:
    """Row -> label: round values at the rows they fall on (one per row), or the one value of a
    flat line on its row."""
    if high == low:
        return {scaled(low, low, high, log, HEIGHT - 1): axis_value(low)}
    labels: dict[int, str] = {}
    for value, text in log_ticks(low, high) if log else linear_ticks(low, high):
        labels.setdefault(scaled(value, low, high, log, HEIGHT - 1), text)
    return labels


def tick_label(x: int) -> str:
    """An x-axis label: contexts as they are written (``4k``, ``1m``), other counts whole."""
    for shift, unit in ((20, "m"), (10, "k")):
        if x >= 1 << shift and x % (1 << shift) == 0:
            return f"{x >> shift}{unit}"
    return f"{x:,}"


def scaled(value: float, low: float, high: float, log: bool, steps: int) -> int:
    """Position of ``value`` on an axis of ``steps`` + 1 cells from ``low`` to ``high``."""
    if high == low:
        return steps // 2
    if log:
        value, low, high = math.log(value), math.log(low), math.log(high)
    return round((value - low) / (high - low) * steps)


def chart_lines(chart: Chart, width: int) -> list[str]:
    """The chart in at most ``width`` columns (empty when no series has a point to draw)."""
    series = chart.drawn()
    points = [p for _, pts in series for p in pts]
    if not points:
        return []
    log_y = chart.log_y
    xs = chart.x_values()
    ys = [y for _, y in points]
    x_lo, x_hi, y_lo, y_hi = min(xs), max(xs), min(ys), max(ys)
    labels = y_labels(y_lo, y_hi, log_y)
    pad = max(map(len, labels.values()))
    columns = min(width, MAX_WIDTH) - pad - 2
    grid = [[" "] * columns for _ in range(HEIGHT)]

    def cell(x: float, y: float) -> tuple[int, int]:
        return (
            scaled(x, x_lo, x_hi, True, columns - 1),
            scaled(y, y_lo, y_hi, log_y, HEIGHT - 1),
        )

    for index, (_, pts) in enumerate(series):
        ordered = sorted(pts)
        for (x0, y0), (x1, y1) in zip(ordered, ordered[1:], strict=False):
            trace(grid, cell(x0, y0), cell(x1, y1))
        for x, y in ordered:
            col, row = cell(x, y)
            grid[row][col] = marker(index)

    scales = "log scales" if log_y else "log x"
    lines = wrap_phrases(f"{chart.title} against {chart.x_label}, {scales}", width)
    for row in range(HEIGHT - 1, -1, -1):
        label = labels.get(row, "")
        lines.append(f"{label.rjust(pad)} {'┤' if label else '│'}{''.join(grid[row])}".rstrip())
    ticks = x_ticks(xs, lambda x: cell(x, y_lo)[0], chart.tick, columns)
    axis = "".join("┬" if c in ticks else "─" for c in range(columns))
    lines.append(f"{' ' * pad} └{axis}")
    lines.append(f"{' ' * (pad + 2)}{tick_row(ticks, columns)}".rstrip())
    for i, (name, _) in enumerate(series):
        lines += wrap_words(f"{marker(i)} {chart.legend(name)}", width, "  ", "    ")
    return lines


def trace(grid: list[list[str]], start: tuple[int, int], end: tuple[int, int]) -> None:
    """Dots on the empty cells of the straight line between two markers' cells."""
    (c0, r0), (c1, r1) = start, end
    steps = max(abs(c1 - c0), abs(r1 - r0))
    for i in range(1, steps):
        col = c0 + round((c1 - c0) * i / steps)
        row = r0 + round((r1 - r0) * i / steps)
        if grid[row][col] == " ":
            grid[row][col] = TRACE


def x_ticks(
    values: list[int], place: Callable[[int], int], label: Callable[[int], str], columns: int
) -> dict[int, str]:
    """Column -> label for the x values whose labels fit without touching: the last value
    first (the end of the range), then from the left."""
    chosen: dict[int, str] = {}
    spans: list[tuple[int, int]] = []
    for x in [values[-1], *values[:-1]]:
        col, text = place(x), label(x)
        start = min(col, columns - len(text))
        span = (max(start, 0), max(start, 0) + len(text))
        if all(span[1] < s or span[0] > e for s, e in spans):
            chosen[col] = text
            spans.append(span)
    return chosen


def tick_row(ticks: dict[int, str], columns: int) -> str:
    row = [" "] * columns
    for col, label in ticks.items():
        start = max(min(col, columns - len(label)), 0)
        row[start : start + len(label)] = label
    return "".join(row)
