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
Column widths are computed here rather than by rich, which guarantees the rule above, and the
table is drawn here with rich's box characters: rich's Table would measure and lay out every cell
again, which was most of the time of the whole-registry ``batch`` (61 rows). tests/
test_table_drawing.py holds the drawing identical to what rich's Table prints.
"""

from __future__ import annotations

import io
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvcalc.render.report import Column, Report, Section

if TYPE_CHECKING:
    from rich.box import Box

#: Longest word a text column must show unbroken; longer words (paths, URLs) fold inside it.
LONGEST_UNBROKEN_WORD = 20
#: Indent of the fields of a record in the vertical layout.
FIELD_INDENT = "  "


def cell_width(text: str) -> int:
    if text.isascii() and text.isprintable():
        return len(text)  # most cells: one cell per character, no need to ask rich
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


def table_box(compact: bool) -> Box:
    """A boxed table, or a compact one (a rule under the header, no borders, two spaces between
    columns) that is narrower by one to two characters per column."""
    from rich import box

    return box.SIMPLE_HEAD if compact else box.HEAVY_HEAD


def table_chrome(columns: Sequence[Column], compact: bool) -> int:
    """Width the table's borders and padding add to its columns: a boxed table has one rule per
    column plus one and a space each side of every cell; a compact one, two spaces between
    columns."""
    n = len(columns)
    return 2 * (n - 1) if compact else 3 * n + 1


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


#: One piece of an output line and its rich style ("" for none; headers are "table.header").
Part = tuple[str, str]


class Sink:
    """Where a report's lines go. Plain output is the lines' text: it needs nothing of rich's
    console, whose import is most of a command's start-up. Colour output goes through rich's
    console, which styles the parts (headers bold)."""

    def __init__(self, width: int, color: bool) -> None:
        self.width = width
        self.color = color
        self.lines: list[list[Part]] = []

    def write(self, line: str = "") -> None:
        self.lines.append([(line, "")])

    def write_parts(self, parts: list[Part]) -> None:
        self.lines.append(parts)

    def value(self) -> str:
        if not self.lines:
            return ""
        if not self.color:
            return "".join("".join(text for text, _ in parts) + "\n" for parts in self.lines)
        from rich.console import Console
        from rich.text import Text

        out = io.StringIO()
        console = Console(file=out, width=self.width, force_terminal=True, highlight=False,
                          emoji=False, legacy_windows=False)
        text = Text("\n").join(Text.assemble(*parts) for parts in self.lines)
        # soft_wrap: the lines are already wrapped; rich must not wrap (or cut) them again.
        console.print(text, soft_wrap=True, markup=False, highlight=False)
        return out.getvalue()


def print_lines(sink: Sink, lines: list[str]) -> None:
    for line in lines:
        sink.write(line)


def print_wrapped(sink: Sink, text: str, width: int, indent: str = "") -> None:
    """A title or a summary line: broken between phrases, continued with a hanging indent."""
    print_lines(sink, wrap_phrases(text, width, indent))


def print_paragraph(sink: Sink, text: str, width: int) -> None:
    """A note: prose filled at word boundaries."""
    print_lines(sink, wrap_words(text, width, "", "") or [""])


#: A word and the whitespace after it (rich's definition, which the cells must wrap by).
WORD = re.compile(r"\s*\S+\s*")


def break_offsets(line: str, width: int) -> list[int]:
    """Where rich's word wrap (``rich.text.Text.wrap`` with ``overflow="fold"``) breaks one
    line: before a word that does not fit what is left of the line; a word wider than the
    whole width is folded into width-sized pieces. Restated so that plain output needs no rich
    console; tests hold it to rich's own wrapping."""
    from rich.cells import cell_len, chop_cells

    breaks: list[int] = []
    offset = 0
    for match in WORD.finditer(line):
        start, word = match.start(), match.group(0)
        length = cell_len(word.rstrip())
        if width - offset >= length:
            offset += cell_len(word)
        elif length > width:
            pieces = chop_cells(word, width)
            for n, piece in enumerate(pieces):
                if start:
                    breaks.append(start)
                if n == len(pieces) - 1:
                    offset = cell_len(piece)
                else:
                    start += len(piece)
        elif offset and start:
            breaks.append(start)
            offset = cell_len(word)
    return breaks


def cell_lines(text: str, width: int, wrap: bool) -> list[str]:
    """A cell's lines: numbers and names fit by construction; text and headers are wrapped
    at word boundaries as rich wraps them, folding only a word wider than the column."""
    if cell_width(text) <= width:
        if not wrap:
            return text.splitlines() or [""]
        if text.isprintable():  # one line (no newline or tab) that fits: nothing to break
            return [text.rstrip()]
    lines = []
    for line in text.expandtabs(8).split("\n"):
        cuts = [0, *break_offsets(line, width), len(line)]
        lines += [line[a:b].rstrip() for a, b in zip(cuts, cuts[1:], strict=False)]
    return lines


def justified(line: str, width: int, justify: str) -> str:
    pad = " " * (width - cell_width(line))
    return pad + line if justify == "right" else line + pad


def table_row_lines(cells: list[str], columns: Sequence[Column],
                    widths: list[int], header: bool) -> list[list[str]]:
    """Each cell of one row as lines of exactly its column's width, all as tall as the
    tallest; headers sit at the bottom of their row, values at the top (as rich aligns them)."""
    blocks = [
        [justified(line, width, col.justify) for line in
         cell_lines(text, width, wrap=header or col.kind == "text")]
        for text, col, width in zip(cells, columns, widths, strict=True)
    ]
    height = max(map(len, blocks))
    for block, width in zip(blocks, widths, strict=True):
        blank = [" " * width] * (height - len(block))
        block[:] = blank + block if header else block + blank
    return blocks


def print_table(sink: Sink, section: Section, cells: list[list[str]],
                widths: list[int], compact: bool) -> None:
    """The table drawn with rich's box characters (``Box.get_top``/``get_row``/``get_bottom``)
    around cells laid out here. rich's own Table would lay out every cell again, which for the
    whole registry cost most of the command's time; tests hold the two outputs identical."""
    box = table_box(compact)
    # Cell padding: one space each side in the boxed table; in the compact one, one space
    # after every column but the last (rich's pad_edge=False, collapse_padding=True).
    last = len(widths) - 1
    pads = [("", " " if i < last else "") if compact else (" ", " ") for i in range(len(widths))]
    outer = [len(left) + w + len(right) for w, (left, right) in zip(widths, pads, strict=True)]

    def rows(row_cells: list[str], header: bool, edges: tuple[str, str, str]) -> None:
        left, vertical, right = edges if not compact else ("", edges[1], "")
        style = "table.header" if header else ""
        blocks = table_row_lines(row_cells, section.columns, widths, header)
        for n in range(len(blocks[0])):
            parts: list[Part] = [(left, "")]
            for i, block in enumerate(blocks):
                if i:
                    parts.append((vertical, ""))
                parts += [(pads[i][0], style), (block[n], style), (pads[i][1], style)]
            parts.append((right, ""))
            sink.write_parts(parts)

    if not compact:
        sink.write(box.get_top(outer))
    rows([c.header for c in section.columns], True,
         (box.head_left, box.head_vertical, box.head_right))
    sink.write(box.get_row(outer, "head", edge=not compact))
    body = cells[: len(section.rows)]
    totals = cells[len(section.rows):] if section.totals else []
    every = [*body, *totals]
    for n, row in enumerate(every):
        final = n == len(every) - 1
        rows(row, False, (box.foot_left, box.foot_vertical, box.foot_right) if final
             else (box.mid_left, box.mid_vertical, box.mid_right))
        if totals and n == len(body) - 1 and not final:
            sink.write(box.get_row(outer, "row", edge=not compact))
    if not compact:
        sink.write(box.get_bottom(outer))


def print_records(sink: Sink, section: Section, cells: list[list[str]], width: int) -> None:
    """The vertical layout: the first cell of each record as its heading, then one
    ``header  value`` line per non-empty cell."""
    headers = [c.header for c in section.columns]
    pad = max(map(cell_width, headers[1:]), default=0)
    for n, row in enumerate(cells):
        if n:
            sink.write()
        print_lines(sink, [row[0]])
        for col, header, value in zip(section.columns[1:], headers[1:], row[1:], strict=True):
            if not value:
                continue
            line = f"{header.ljust(pad)}  {value}"
            if col.kind == "text":
                print_lines(sink, wrap_words(line, width, FIELD_INDENT, FIELD_INDENT + "  "))
            else:
                print_lines(sink, [FIELD_INDENT + line])


def print_section(sink: Sink, section: Section, width: int) -> None:
    """Title, table and notes, in the first layout of the module docstring that fits."""
    if section.title:
        print_wrapped(sink, section.title, width)
    cells = section.cells([*section.rows, *section.totals])
    natural = natural_widths(section, cells)
    minimum = minimum_widths(section, cells)
    for compact in (False, True):
        room = width - table_chrome(section.columns, compact)
        text_first = [c.kind == "text" for c in section.columns]
        widths = fitted_widths(natural, minimum, room, text_first)
        if widths is not None:
            print_table(sink, section, cells, widths, compact)
            break
    else:
        print_records(sink, section, cells, width)
    for note in section.notes:
        print_paragraph(sink, note, width)


def render_report(report: Report, width: int, color: bool) -> str:
    sink = Sink(width, color)
    for line in report.lines:
        print_wrapped(sink, line, width)
    for section in report.sections:
        print_section(sink, section, width)
    if report.charts:
        from kvcalc.render.chart import chart_lines

        for chart in report.charts:
            lines = chart_lines(chart, width)
            if lines:  # a quantity no point has (TPOT where nothing fits) draws nothing
                sink.write()
                print_lines(sink, lines)
    return sink.value()
