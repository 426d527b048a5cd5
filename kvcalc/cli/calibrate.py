"""`kvcalc calibrate`: a vLLM or SGLang start-up log beside kvcalc's model of that start-up."""

from __future__ import annotations

from typing import Any

import typer

from kvcalc.cli import app
from kvcalc.command_inputs import CALIBRATE_INPUTS

command_app = app.command_typer()


@command_app.command()
@app.declared_options(CALIBRATE_INPUTS)
def calibrate(
    log: str = typer.Argument(
        ..., help="a vLLM or SGLang start-up log; - reads stdin", callback=app.file_name("LOG")
    ),
    fmt: app.ReportFormat = app.ReportFormatOption,
    *,
    given: dict[str, Any],
) -> None:
    """Each term the log states as logged, as kvcalc models it, and the difference. Exit 0
    when kvcalc gives the logged token count within the log's rounding, 1 when not, 2 for a
    file that is no start-up log."""
    from kvcalc.api import calibrate as calibrate_of

    result = calibrate_of(log, **{k: v for k, v in given.items() if v is not None})
    app.emit_report(result.report(), fmt)
