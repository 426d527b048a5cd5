"""The table format: a report's sections as rich tables that never cut a number.

Layout, decided once here for every command, from the widest to the narrowest:

1. every column at its natural width (the longest cell or header);
2. "text" columns narrowed and wrapped at word boundaries (headers wrap too), while "number" and
   "name" cells keep their full width;
3. the same two steps in a compact table without borders;
4. when even that exceeds the width, one block per record (``header  value`` lines), in which no
   value is ever wrapped inside a word.

Titles and summary lines break between phrases (after ``:``, ``,`` or ``;``), notes at word
boundaries; no line is ever broken inside a word.
Column widths are computed here rather than by rich, which both guarantees the rule above and
spares rich from measuring every cell (most of the time of a long table).
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcalc.render.report import Column, Report, Section

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: Longest word a text column must show unbroken; longer words (paths, URLs) fold inside it.
LONGEST_UNBROKEN_WORD = 20
#: Indent of the fields of a record in the vertical layout.
FIELD_INDENT = "  "


def cell_width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.splitlines()), default=0)


def longest_word(text: str) -> int:
    return max((cell_width(w) for w in text.split()), default=0)


def natural_widths(section: Section, cells: list[list[str]]) -> list[int]:
    return [
        max([cell_width(col.header), *(cell_width(row[i]) for row in cells)])
        for i, col in enumerate(section.columns)
    ]


def minimum_widths(section: Section, cells: list[list[str]]) -> list[int]:
    """The narrowest each column may be: numbers and names whole, headers and text wrapped."""
    widths = []
    for i, col in enumerate(section.columns):
        values = [row[i] for row in cells]
        if col.kind == "text":
            words = min(max(map(longest_word, [col.header, *values])), LONGEST_UNBROKEN_WORD)
            widths.append(max(words, 1))
        else:
            widths.append(max([longest_word(col.header), *map(cell_width, values), 1]))
    return widths


def fitted_widths(
    natural: list[int], minimum: list[int], room: int, text_first: list[bool]
) -> list[int] | None:
    """Column widths summing to at most ``room``: natural if they fit, else the minimums with
    the spare room given back first to the ``text_first`` columns (wrapped text costs whole
    rows; a wrapped header costs one), then to the others; None when the minimums do not fit."""
    if sum(natural) <= room:
        return natural
    if sum(minimum) > room:
        return None
    spare = room - sum(minimum)
    widths = list(minimum)
    for first in (True, False):
        for i, want in enumerate(natural):
            if text_first[i] is first:
                grant = min(spare, want - widths[i])
                widths[i] += grant
                spare -= grant
    return widths


def new_table(columns: Sequence[Column], widths: list[int], compact: bool) -> Table:
    """A boxed table, or a compact one (a rule under the header, no borders, two spaces between
    columns) that is narrower by one to two characters per column."""
    from rich import box
    from rich.table import Table

    if compact:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    else:
        table = Table()
    for col, width in zip(columns, widths, strict=True):
        # Cells fit their width by construction; fold (never an ellipsis) is for the text
        # columns' over-long words and for headers wider than their numbers.
        table.add_column(col.header, justify=col.justify, width=width, overflow="fold")
    return table


def table_chrome(console: Console, columns: Sequence[Column], compact: bool) -> int:
    """Width the table's borders and padding add to its columns (measured by rich itself)."""
    from rich.measure import Measurement

    table = new_table(columns, [1] * len(columns), compact)
    options = console.options.update_width(1 << 20)
    return Measurement.get(console, options, table).maximum - len(columns)


#: Where a title or line may break first: after the punctuation that ends a phrase.
PHRASE_END = re.compile(r"(?<=[:;,])\s+")


def wrap_words(text: str, width: int, first: str, rest: str) -> list[str]:
    """Lines broken at spaces only: a word wider than the line overflows it whole."""
    return textwrap.wrap(
        text,
        width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )


def wrap_phrases(text: str, width: int, indent: str = "") -> list[str]:
    """A line as it is when it fits, else broken between phrases (after ``:``, ``,`` or ``;``)
    and only inside a phrase that is itself wider than the line, at a space."""
    if len(indent) + cell_width(text) <= width:
        return [indent + text]
    lines: list[str] = []
    for phrase in PHRASE_END.split(text):
        joined = f"{lines[-1]} {phrase}" if lines else indent + phrase
        if lines and cell_width(joined) <= width:
            lines[-1] = joined
            continue
        hanging = indent + "  "
        lead = hanging if lines else indent
        lines += wrap_words(phrase, width, lead, hanging) or [lead]
    return lines


def print_lines(console: Console, lines: list[str]) -> None:
    # soft_wrap: the lines are already wrapped; rich must not wrap (or cut) them again.
    for line in lines:
        console.print(line, soft_wrap=True, markup=False, highlight=False)


def print_wrapped(console: Console, text: str, width: int, indent: str = "") -> None:
    """A title or a summary line: broken between phrases, continued with a hanging indent."""
    print_lines(console, wrap_phrases(text, width, indent))


def print_paragraph(console: Console, text: str, width: int) -> None:
    """A note: prose filled at word boundaries."""
    print_lines(console, wrap_words(text, width, "", "") or [""])


def print_table(console: Console, section: Section, cells: list[list[str]],
                widths: list[int], compact: bool) -> None:
    table = new_table(section.columns, widths, compact)
    for row in cells[: len(section.rows)]:
        table.add_row(*row)
    if section.totals:
        table.add_section()
        for row in cells[len(section.rows):]:
            table.add_row(*row)
    console.print(table)


def print_records(console: Console, section: Section, cells: list[list[str]], width: int) -> None:
    """The vertical layout: the first cell of each record as its heading, then one
    ``header  value`` line per non-empty cell."""
    headers = [c.header for c in section.columns]
    pad = max(map(cell_width, headers[1:]), default=0)
    for n, row in enumerate(cells):
        if n:
            console.print()
        print_lines(console, [row[0]])
        for col, header, value in zip(section.columns[1:], headers[1:], row[1:], strict=True):
            if not value:
                continue
            line = f"{header.ljust(pad)}  {value}"
            if col.kind == "text":
                print_lines(console, wrap_words(line, width, FIELD_INDENT, FIELD_INDENT + "  "))
            else:
                print_lines(console, [FIELD_INDENT + line])


def print_section(console: Console, section: Section, width: int) -> None:
    """Title, table and notes, in the first layout of the module docstring that fits."""
    if section.title:
        print_wrapped(console, section.title, width)
    cells = section.cells([*section.rows, *section.totals])
    natural = natural_widths(section, cells)
    minimum = minimum_widths(section, cells)
    for compact in (False, True):
        room = width - table_chrome(console, section.columns, compact)
        text_first = [c.kind == "text" for c in section.columns]
        widths = fitted_widths(natural, minimum, room, text_first)
        if widths is not None:
            print_table(console, section, cells, widths, compact)
            break
    else:
        print_records(console, section, cells, width)
    for note in section.notes:
        print_paragraph(console, note, width)


def render_report(report: Report, width: int, color: bool) -> str:
    from rich.console import Console

    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        legacy_windows=False,
    )
    for line in report.lines:
        print_wrapped(console, line, width)
    for section in report.sections:
        print_section(console, section, width)
    if report.charts:
        from kvcalc.render.chart import chart_lines

        for chart in report.charts:
            console.print()
            print_lines(console, chart_lines(chart, width))
    return out.getvalue()
