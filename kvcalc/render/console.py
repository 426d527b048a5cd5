"""The rich console used for tables: plain text when stdout is not a terminal or NO_COLOR is set."""

from __future__ import annotations

import os
import sys
from typing import Any

#: Width used when stdout is not a terminal (pipes, CI logs): wide enough that no table is
#: truncated; COLUMNS overrides it.
PIPE_WIDTH = 160


def console(**kwargs: Any):  # noqa: ANN201 - rich is imported lazily
    from rich.console import Console

    no_color = bool(os.environ.get("NO_COLOR"))
    width = None
    if not sys.stdout.isatty():
        width = int(os.environ.get("COLUMNS") or PIPE_WIDTH)
    return Console(no_color=no_color, highlight=False, width=width, **kwargs)


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
