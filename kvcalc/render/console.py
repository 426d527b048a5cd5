"""Where output goes: the width tables must fit and whether to colour them."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

#: Width used when stdout is not a terminal (pipes, CI logs) and COLUMNS is not set. Tables never
#: cut a number at any width (`kvcalc.render.terminal`); this only decides when they wrap text.
PIPE_WIDTH = 160


def output_target() -> tuple[int, bool]:
    """(width, colour) for stdout: the terminal's size and colour unless NO_COLOR is set; for a
    pipe, COLUMNS or PIPE_WIDTH and no colour."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns, not os.environ.get("NO_COLOR")
    try:
        width = int(os.environ.get("COLUMNS") or PIPE_WIDTH)
    except ValueError:  # a malformed COLUMNS is the shell's business, not a kvcalc error
        width = PIPE_WIDTH
    return max(width, 20), False


def console(**kwargs: Any):  # noqa: ANN201 - rich is imported lazily
    """A rich console for stdout at the output width (commands not yet converted to reports)."""
    from rich.console import Console

    width, color = output_target()
    return Console(
        no_color=not color, highlight=False, width=None if sys.stdout.isatty() else width, **kwargs
    )


def fix_column_widths(table: Any) -> Any:
    """Give every column of a table of plain strings its exact width.

    rich measures every cell of a column without a fixed width, which dominates the time of long
    tables (the registry-wide `batch` table); the widths are simply the longest strings.
    """
    from rich.cells import cell_len

    for column in table.columns:
        cells = [column.header, *column.cells]
        if all(isinstance(c, str) for c in cells):
            column.width = max(cell_len(c) for c in cells)
    return table
