"""Where output goes: the width tables must fit and whether to colour them."""

from __future__ import annotations

import os
import shutil
import sys

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
