"""One formatter per output format, each a function of a `Report` returning text, and `emit`,
which writes a report's text to stdout and its diagnostics to stderr.

Libraries are imported inside each formatter, so a run pays only for the format it prints.

Text comes from users (a deployment's name, a spec's path), so each format escapes what it
cannot hold: JSON and YAML escape within their own syntax; the line formats
(table, markdown, github, stderr), CSV and JUnit XML show every control character, line break and
lone surrogate as its escape (``\\x01``, ``\\n``), which XML 1.0 cannot hold at all and a
terminal or a CI log would act on.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from kvcalc.render.json import finite
from kvcalc.render.report import Case, Column, Record, Report, Section

#: What no line of text may hold: C0 controls (tab and line breaks included), DEL, C1 controls,
#: lone surrogates (no UTF-8 encoding; a path read with surrogateescape holds them), U+FFFE and
#: U+FFFF (no XML), and the Unicode line and paragraph separators.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u2028\u2029]")


def visible(text: str) -> str:
    """``text`` with every character no line may hold shown as its escape (``\\x1b``)."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return {9: "\\t", 10: "\\n", 13: "\\r"}.get(code) or (
        f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    )


def _encodable(text: str) -> str:
    """``text`` with lone surrogates, which no UTF-8 output can write, shown as escapes."""
    return re.sub("[\ud800-\udfff]", _escape, text)


def visible_report(report: Report) -> Report:
    """The report as the line formats show it: its lines, titles, notes and cells visible."""
    from dataclasses import replace

    sections = [
        replace(
            s,
            title=visible(s.title),
            columns=[_visible_column(c) for c in s.columns],
            notes=[visible(n) for n in s.notes],
        )
        for s in report.sections
    ]
    return replace(report, lines=[visible(line) for line in report.lines], sections=sections)


def _visible_column(column: Column) -> Column:
    def cell(record: Record) -> str:
        return visible(column.cell(record))

    return Column(visible(column.header), cell, column.kind)


def render_json(report: Report, width: int, color: bool = False) -> str:
    from kvcalc.render.json import dumps

    return dumps(report.document())


def render_yaml(report: Report, width: int, color: bool = False) -> str:
    import yaml

    text = yaml.safe_dump(finite(report.document()), sort_keys=False, allow_unicode=True)
    return _encodable(text)


def csv_value(value: Any) -> Any:
    """A raw CSV cell: numbers unformatted, booleans as JSON spells them, None as empty."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    # RFC 4180 text holds no control characters, so they are shown as escapes.
    return visible(value) if isinstance(value, str) else value


def render_csv(report: Report, width: int, color: bool = False) -> str:
    import csv
    import io

    fields = report.csv_fields()
    if not fields:
        return ""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([visible(f) for f in fields])
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
    report = visible_report(report)
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

    return render_report(visible_report(report), width, color)


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
        element = ET.SubElement(root, "testsuite", _counts(cases), name=visible(suite))
        for case in cases:
            element.append(_testcase(case))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _counts(cases: Sequence[Case]) -> dict[str, str]:
    failures = sum(not c.passed for c in cases)
    return {"tests": str(len(cases)), "failures": str(failures), "errors": "0"}


def _testcase(case: Case) -> Any:
    import xml.etree.ElementTree as ET

    attributes = {"classname": visible(case.suite), "name": visible(case.name)}
    if case.file is not None:
        attributes["file"] = visible(case.file)
    if case.line is not None:
        attributes["line"] = str(case.line)
    element = ET.Element("testcase", attributes)
    if not case.passed:
        message = visible(case.message)
        failure = ET.SubElement(element, "failure", message=message, type=visible(case.kind))
        failure.text = message
    return element


def render_github(report: Report, width: int, color: bool = False) -> str:
    """GitHub Actions workflow commands: an ``::error`` annotation on the line of each failing
    case, a ``::warning`` per warning (on its file and line when the report knows them), then
    the report's summary lines as plain log lines."""
    out = [
        github_annotation(c.file, c.line, c.message, f"{c.suite}: {c.name}")
        for c in report.cases
        if not c.passed
    ]
    # Warnings (also on stderr) as warning annotations, which the run's summary lists.
    out += [
        github_annotation(*report.warning_lines.get(w, (None, None)), w, command="warning")
        for w in report.warnings
    ]
    out += [_github_log_line(line) for line in report.lines]
    return "".join(f"{line}\n" for line in out)


def github_annotation(
    file: str | None,
    line: int | None,
    message: str,
    title: str | None = None,
    command: str = "error",
) -> str:
    """One ``::error`` (or ``::warning``) workflow command, which GitHub shows on ``file`` at
    ``line``."""
    # Property values escape ':' and ',' too, as the runner splits on them (actions/toolkit
    # command.ts, escapeProperty).
    props = {"file": file, "line": line, "title": title}
    fields = ",".join(
        f"{k}={_github_data(str(v)).replace(':', '%3A').replace(',', '%2C')}"
        for k, v in props.items()
        if v is not None
    )
    return f"::{command}{' ' if fields else ''}{fields}::{_github_data(message)}"


def _github_data(text: str) -> str:
    """Escaped as the runner unescapes a command's data (actions/toolkit command.ts,
    escapeData: ``%``, and ``\\r`` and ``\\n``, which :func:`visible` has already shown as
    ``\\\\r`` and ``\\\\n`` as every other control character, so a line break in a name is
    shown as in the other formats and never ends the command)."""
    return visible(text).replace("%", "%25")


def _github_log_line(line: str) -> str:
    """A plain log line that the runner cannot take for a command: one that would start with
    ``::`` or ``##[`` (after the blanks the runner trims) starts with a backslash."""
    line = visible(line)
    return "\\" + line if line.lstrip().startswith(("::", "##[")) else line


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
        sys.stderr.write(f"{visible(line)}\n")
    return report.exit_code
