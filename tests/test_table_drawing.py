"""The table format draws its tables itself with rich's box characters: held here to be exactly
what rich's own Table prints for the same columns, widths and cells."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_check import invoke_report
from test_formats import COMMANDS, WIDTHS, ids

from kvcalc.render import terminal
from kvcalc.render.report import Column, Section


def rich_table_text(section: Section, cells: list[list[str]], widths: list[int],
                    compact: bool, color: bool, width: int) -> str:
    """The reference: the same table laid out and drawn by rich.table.Table (cells as Text:
    kvcalc's cells are data, never console markup)."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    if compact:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    else:
        table = Table()
    for col, w in zip(section.columns, widths, strict=True):
        table.add_column(Text(col.header), justify=col.justify, width=w, overflow="fold")
    for row in cells[: len(section.rows)]:
        table.add_row(*map(Text, row))
    if section.totals:
        table.add_section()
        for row in cells[len(section.rows):]:
            table.add_row(*map(Text, row))
    out = io.StringIO()
    console_for(out, width, color).print(table)
    return out.getvalue()


def console_for(out: io.StringIO, width: int, color: bool):  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(file=out, width=width, force_terminal=color, no_color=not color,
                   highlight=False, legacy_windows=False)


def drawn_table_text(section: Section, cells: list[list[str]], widths: list[int],
                     compact: bool, color: bool, width: int) -> str:
    sink = terminal.Sink(width, color)
    terminal.print_table(sink, section, cells, widths, compact)
    return sink.value()


def layouts(section: Section, width: int) -> list[tuple[list[list[str]], list[int], bool]]:
    """The tables ``print_section`` would draw at ``width`` (boxed and compact, when they fit)."""
    cells = section.cells([*section.rows, *section.totals])
    natural = terminal.natural_widths(section, cells)
    minimum = terminal.minimum_widths(section, cells)
    found = []
    for compact in (False, True):
        room = width - terminal.table_chrome(section.columns, compact)
        text_first = [c.kind == "text" for c in section.columns]
        widths = terminal.fitted_widths(natural, minimum, room, text_first)
        if widths is not None:
            found.append((cells, widths, compact))
    return found


def styled_chars(output: str) -> list[tuple[str, str]]:
    """Each character with the style it shows in: colour output compared by what a terminal
    displays, not by how the escape codes are grouped."""
    from rich.text import Text

    text = Text.from_ansi(output)
    styles = [""] * len(text.plain)
    for span in text.spans:
        for i in range(span.start, span.end):
            styles[i] = str(span.style)
    return list(zip(text.plain, styles, strict=True))


def assert_same_as_rich(section: Section, width: int, color: bool = False) -> None:
    for cells, widths, compact in layouts(section, width):
        ours = drawn_table_text(section, cells, widths, compact, color, width)
        reference = rich_table_text(section, cells, widths, compact, color, width)
        if color:
            assert styled_chars(ours) == styled_chars(reference)
        else:
            assert ours == reference
        assert all(len(line) <= width for line in ours.splitlines()) or color


@pytest.mark.parametrize("args", COMMANDS, ids=ids)
@pytest.mark.parametrize("width", WIDTHS)
def test_every_command_table_is_what_rich_draws(
    monkeypatch: pytest.MonkeyPatch, args: list[str], width: int
) -> None:
    _, report = invoke_report(monkeypatch, args, fmt="table")
    for section in report.sections:
        assert_same_as_rich(section, width)


def test_colour_output_is_what_rich_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    _, report = invoke_report(monkeypatch, ["batch", "--gpus", "8xH100"], fmt="table")
    for section in report.sections:
        assert_same_as_rich(section, 120, color=True)


WORD = st.text(alphabet="abcxyz0123456789-.,/[]", min_size=1, max_size=30)
CELL = st.lists(WORD, min_size=0, max_size=6).map(" ".join)
KIND = st.sampled_from(["number", "name", "text"])


@st.composite
def sections(draw: st.DrawFn) -> Section:
    kinds = draw(st.lists(KIND, min_size=1, max_size=7))
    headers = draw(st.lists(CELL.filter(bool), min_size=len(kinds), max_size=len(kinds)))
    columns = [
        Column(h, (lambda r, i=i: str(r[i])), k)  # type: ignore[misc]
        for i, (h, k) in enumerate(zip(headers, kinds, strict=True))
    ]
    row = st.lists(CELL, min_size=len(kinds), max_size=len(kinds))
    rows = draw(st.lists(row, min_size=1, max_size=5))
    totals = draw(st.lists(row, min_size=0, max_size=2))
    return Section(title="", columns=columns, rows=rows, totals=totals)


@settings(max_examples=300, deadline=None)
@given(sections(), st.integers(min_value=20, max_value=200), st.booleans())
def test_any_table_is_what_rich_draws(section: Section, width: int, color: bool) -> None:
    assert_same_as_rich(section, width, color)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet="ab1 ,-\t", min_size=0, max_size=25), max_size=4).map("\n".join),
       st.integers(min_value=1, max_value=30))
def test_cells_wrap_as_rich_wraps_them(text: str, width: int) -> None:
    from rich.console import Console
    from rich.text import Text

    expected = [line.plain.rstrip()
                for line in Text(text).wrap(Console(width=200), width, overflow="fold")]
    assert terminal.cell_lines(text, width, wrap=True) == expected
