"""`kvcalc check SPEC`: whether every deployment of a spec file meets its requirements, as
:func:`kvcalc.api.check` measures them (:mod:`kvcalc.capacity_check`). Exit 0 when every requirement
holds, 1 when any fails, 2 when the spec is invalid.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any

import typer

from kvcalc.cli.app import (
    EXIT_USAGE,
    OUTPUT_PANEL,
    command_typer,
    declared_options,
    emit_report,
    file_name,
    note_exit,
)
from kvcalc.command_inputs import CHECK_INPUTS

command_app = command_typer()


class CheckFormat(str, Enum):
    """The formats of `kvcalc check`: every ReportFormat, and the CI formats of a report of
    test cases (`kvcalc.render.formats.CASE_FORMATS`), which no other command offers. Defined
    here, not beside ReportFormat, so other commands' start-up does not build it."""

    table = "table"
    json = "json"
    yaml = "yaml"
    csv = "csv"
    markdown = "markdown"
    junit = "junit"
    github = "github"


CheckFormatOption = typer.Option(
    CheckFormat.table,
    "--format",
    "-f",
    case_sensitive=False,
    rich_help_panel=OUTPUT_PANEL,
    help="table for people; json, yaml or csv for machines; markdown for docs; junit (JUnit "
    "XML) or github (Actions annotations) for CI",
)


SpecArgument = typer.Argument(
    ..., help="capacity spec file (YAML), e.g. capacity.yaml", callback=file_name("SPEC")
)


@command_app.command()
@declared_options(CHECK_INPUTS)
def check(
    spec: str = SpecArgument,
    fmt: CheckFormat = CheckFormatOption,
    *,
    given: dict[str, Any],
) -> None:
    """Check every deployment of SPEC against its requirements (min_batch, min_context,
    max_tpot_ms, max_ttft_ms, min_tokens_per_second, max_kv_fraction): exit 0 when all hold, 1
    when any fails, 2 when the spec is invalid (one line per problem, with its file and line)."""
    from kvcalc.api import check as check_spec
    from kvcalc.registry.check_spec import SpecError

    try:
        result = check_spec(spec, **given)
    except SpecError as exc:
        refuse(exc.problems, spec, fmt)
    emit_report(result.report(), fmt)


def refuse(problems: list[str], spec: str, fmt: CheckFormat) -> None:
    """Exit 2 with one line per problem on stderr. The CI formats also print them as they print
    failures (an annotation on the line, a failed JUnit test), so a pipeline that only reads
    stdout still shows why the spec is bad."""
    from kvcalc.render.formats import visible

    note_exit(EXIT_USAGE)  # the verdict, should the reader close the pipe mid-write
    for problem in problems:  # one line each, whatever a path or value holds (as _error_line)
        # first: stdout may be gone
        sys.stderr.write(f"Error: {visible(' '.join(problem.split()))}\n")
    if fmt in (CheckFormat.github, CheckFormat.junit):
        from kvcalc.render.capacity_check import spec_problems_report
        from kvcalc.render.formats import render

        sys.stdout.write(render(spec_problems_report(problems, str(spec)), fmt.value, 0))
    raise typer.Exit(EXIT_USAGE)
