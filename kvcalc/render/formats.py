"""One formatter per output format, each a function of a `Report` returning text, and `emit`,
which writes a report's text to stdout and its diagnostics to stderr.

Libraries are imported inside each formatter, so a run pays only for the format it prints.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kvcalc.render.json import finite
from kvcalc.render.report import Case, Report, Section


def render_json(report: Report, width: int, color: bool = False) -> str:
    from kvcalc.render.json import dumps

    return dumps(report.document())


def render_yaml(report: Report, width: int, color: bool = False) -> str:
    import yaml

    return yaml.safe_dump(finite(report.document()), sort_keys=False, allow_unicode=True)


def csv_value(value: Any) -> Any:
    """A raw CSV cell: numbers unformatted, booleans as JSON spells them, None as empty."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def render_csv(report: Report, width: int, color: bool = False) -> str:
    import csv
    import io

    fields = report.csv_fields()
    if not fields:
        return ""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(fields)
    for record in report.records:
        if list(record) != fields:
            raise ValueError(f"CSV record keys {list(record)} differ from the header {fields}")
        writer.writerow([csv_value(record[k]) for k in fields])
    return out.getvalue()


def markdown_cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(section: Section) -> list[str]:
    """A GitHub pipe table; totals rows follow the records, as in the terminal table."""
    header = [markdown_cell(c.header) for c in section.columns]
    rule = ["---:" if c.justify == "right" else "---" for c in section.columns]
    rows = section.cells([*section.rows, *section.totals])
    return [
        "| " + " | ".join(cells) + " |"
        for cells in (header, rule, *([markdown_cell(c) for c in row] for row in rows))
    ]


def render_markdown(report: Report, width: int, color: bool = False) -> str:
    blocks: list[list[str]] = []
    if report.lines:
        blocks.append([f"- {line}" for line in report.lines])
    for section in report.sections:
        block = [f"### {section.title}", ""] if section.title else []
        block += markdown_table(section)
        if section.notes:
            block += ["", *section.notes]
        blocks.append(block)
    return "\n\n".join("\n".join(b) for b in blocks) + "\n" if blocks else ""


def render_table(report: Report, width: int, color: bool = False) -> str:
    from kvcalc.render.terminal import render_report

    return render_report(report, width, color)


def render_junit(report: Report, width: int, color: bool = False) -> str:
    """JUnit XML as CI systems read it (Jenkins, GitLab, GitHub test reporters): one
    ``testsuite`` per suite of cases, one ``testcase`` per case, a ``failure`` with the figures
    for each case that fails."""
    import xml.etree.ElementTree as ET

    suites: dict[str, list[Case]] = {}
    for case in report.cases:
        suites.setdefault(case.suite, []).append(case)
    root = ET.Element("testsuites", _counts(report.cases), name="kvcalc")
    for suite, cases in suites.items():
        element = ET.SubElement(root, "testsuite", _counts(cases), name=suite)
        for case in cases:
            element.append(_testcase(case))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _counts(cases: Sequence[Case]) -> dict[str, str]:
    failures = sum(not c.passed for c in cases)
    return {"tests": str(len(cases)), "failures": str(failures), "errors": "0"}


def _testcase(case: Case) -> Any:
    import xml.etree.ElementTree as ET

    attributes = {"classname": case.suite, "name": case.name}
    if case.file is not None:
        attributes["file"] = case.file
    if case.line is not None:
        attributes["line"] = str(case.line)
    element = ET.Element("testcase", attributes)
    if not case.passed:
        failure = ET.SubElement(element, "failure", message=case.message, type=case.kind)
        failure.text = case.message
    return element


def render_github(report: Report, width: int, color: bool = False) -> str:
    """GitHub Actions workflow commands: an ``::error`` annotation on the line of each failing
    case, a ``::warning`` per warning, then the report's summary lines as plain log lines."""
    out = [
        github_annotation(c.file, c.line, c.message, f"{c.suite}: {c.name}")
        for c in report.cases
        if not c.passed
    ]
    # Warnings (also on stderr) as warning annotations, which the run's summary lists.
    out += [f"::warning::{_github_data(w)}" for w in report.warnings]
    out += report.lines
    return "".join(f"{line}\n" for line in out)


def github_annotation(
    file: str | None, line: int | None, message: str, title: str | None = None
) -> str:
    """One ``::error`` workflow command, which GitHub shows on ``file`` at ``line``."""
    # Property values escape ':' and ',' too, as the runner splits on them (actions/toolkit
    # command.ts, escapeProperty).
    props = {"file": file, "line": line, "title": title}
    fields = ",".join(
        f"{k}={_github_data(str(v)).replace(':', '%3A').replace(',', '%2C')}"
        for k, v in props.items()
        if v is not None
    )
    return f"::error{' ' if fields else ''}{fields}::{_github_data(message)}"


def _github_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


#: Format name -> formatter. `kvcalc.cli.app.ReportFormat` has exactly these names (tested).
#: Each takes the report, the width tables must fit and whether to use colour.
FORMATTERS: dict[str, Callable[[Report, int, bool], str]] = {
    "table": render_table,
    "json": render_json,
    "yaml": render_yaml,
    "csv": render_csv,
    "markdown": render_markdown,
    "junit": render_junit,
    "github": render_github,
}
#: The formats only a report of test cases (`kvcalc check`) offers.
CASE_FORMATS = ("junit", "github")


def render(report: Report, fmt: str, width: int, color: bool = False) -> str:
    return FORMATTERS[fmt](report, width, color)


def emit(report: Report, fmt: str) -> int:
    """Write the report in ``fmt``: data on stdout, diagnostics on stderr; returns the exit
    code the command ends with."""
    from kvcalc.render.console import output_target

    width, color = output_target()
    sys.stdout.write(render(report, fmt, width, color))
    for line in [*(f"warning: {w}" for w in report.warnings), *report.diagnostics]:
        sys.stderr.write(f"{line}\n")
    return report.exit_code
