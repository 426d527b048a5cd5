"""Checks that a rendered report shows its numbers whole, reusable for every command.

`invoke_report` runs a command through the CLI and also returns the `Report` it rendered (by
wrapping `kvcalc.render.formats.render`), so a test can compare the text with the data behind it:

    result, report = invoke_report(monkeypatch, ["batch", "--gpus", "8xH100"], columns=80)
    assert missing_numbers(report, result.stdout) == []

It also holds the checks every command test shares: `run_json` (a successful run's JSON) and
`usage_error` / `refused` (a refusal: exit 2, one ``Error:`` line on stderr, nothing on stdout).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from kvcalc.cli.app import app
from kvcalc.render import formats
from kvcalc.render.report import Report

#: A figure as people read it: digits with optional thousands separators and decimals, not part
#: of a word (the 27 of "gemma3-27b" is a name, which a text column may fold like any long word).
#: A number cut or wrapped anywhere ("42,949,67…", "42,949,\n672,960") no longer matches whole.
NUMBER = re.compile(r"(?<![A-Za-z0-9_])\d+(?:,\d{3})*(?:\.\d+)?(?![A-Za-z0-9_])")

#: The seed deployment: Llama-3-70B's 140 GB of weights on eight 80 GB H100s, 10% held back.
SEED = ["--gpus", "8xH100", "--gpu-memory", "80GB", "--weights", "140GB", "--reserve", "0.10"]


def run_json(runner: CliRunner, *args: str, code: int = 0) -> Any:
    """Run ``kvcalc ARGS --format json``; assert exit ``code`` and return the parsed stdout."""
    result = runner.invoke(app, [*args, "--format", "json"])
    assert result.exit_code == code, result.stderr
    return json.loads(result.stdout)


def usage_error(result: Result, *needles: str) -> str:
    """Assert a refusal as every command makes one: exit 2, nothing on stdout, and on stderr
    exactly one ``Error:`` line, no traceback, holding every needle. Returns that line."""
    assert result.exit_code == 2, (result.stdout, result.stderr, result.exception)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def refused(runner: CliRunner, args: list[str], *needles: str) -> str:
    """Run ``kvcalc ARGS`` and assert it is refused (``usage_error``); return the error line."""
    return usage_error(runner.invoke(app, args), *needles)


def invoke_report(
    monkeypatch: pytest.MonkeyPatch, args: list[str], columns: int = 200, fmt: str = "table"
) -> tuple[Result, Report]:
    """Run ``kvcalc ARGS --format FMT`` at a width; return the result and the rendered Report."""
    seen: list[Report] = []
    render = formats.render

    def spy(report: Report, name: str, width: int, color: bool = False) -> str:
        seen.append(report)
        return render(report, name, width, color)

    monkeypatch.setattr(formats, "render", spy)
    result = CliRunner().invoke(
        app, [*args, "--format", fmt], env={"COLUMNS": str(columns), "NO_COLOR": "1"}
    )
    monkeypatch.setattr(formats, "render", render)
    assert len(seen) == 1, (result.stdout, result.stderr)
    return result, seen[0]


def shown_texts(report: Report) -> Iterator[str]:
    """Every string the table format prints: lines, titles, formatted cells and notes."""
    yield from report.lines
    for section in report.sections:
        yield section.title
        for row in section.cells([*section.rows, *section.totals]):
            yield from row
        yield from section.notes


def missing_numbers(report: Report, text: str) -> list[str]:
    """The figures of the report's cells, titles and lines that the text does not show whole
    (as often as the report has them)."""
    expected = Counter(n for s in shown_texts(report) for n in NUMBER.findall(s))
    return sorted((expected - Counter(NUMBER.findall(text))).elements())


def payload_integers(payload: Any) -> Iterator[int]:
    if isinstance(payload, bool):
        return
    if isinstance(payload, int):
        yield payload
    elif isinstance(payload, Mapping):
        for value in payload.values():
            yield from payload_integers(value)
    elif isinstance(payload, list):
        for value in payload:
            yield from payload_integers(value)


def missing_payload_integers(report: Report, text: str) -> list[int]:
    """The non-zero integers of the JSON payload that the text does not show with thousands
    separators (for commands whose table shows every integer of the payload)."""
    shown = set(NUMBER.findall(text))
    return sorted({n for n in payload_integers(report.payload) if n and f"{n:,}" not in shown})


#: Payload objects whose figures a table need not show: ``engine_inputs`` (decode, plan, check)
#: echoes the inputs the engine's pool was sized with for machines, and `kvcalc batch MODEL
#: --engine E`, whose table prints them, is where a reader looks them up.
ECHOED_SUBTREES = frozenset({"engine_inputs"})


def payload_items(payload: Any, key: str = "") -> Iterator[tuple[str, int]]:
    """Every (key, integer) of a payload, nested keys named by their own key."""
    if isinstance(payload, bool):
        return
    if isinstance(payload, int):
        yield key, payload
    elif isinstance(payload, Mapping):
        for k, value in payload.items():
            if k not in ECHOED_SUBTREES:
                yield from payload_items(value, k)
    elif isinstance(payload, list):
        for value in payload:
            yield from payload_items(value, key)


def shown_forms(key: str, value: int) -> list[str]:
    """How a table may show an integer whole: with or without thousands separators, or, for a
    byte count,
    in the binary units of the tables (2 decimals, or 1 in the registry-wide table)."""
    from kvcalc.engine.units import GiB
    from kvcalc.render.humanize import format_binary

    # Unseparated where a line echoes an engine's own log (SGLang's "#tokens: 1084643").
    forms = [f"{value:,}", str(value)]
    if "bytes" in key:
        forms += [format_binary(value), f"{value / GiB:,.2f}", f"{value / GiB:,.1f}"]
    return forms


def missing_payload_figures(
    report: Report, text: str, skip: frozenset[str] = frozenset()
) -> list[tuple[str, int]]:
    """The (key, value) integers of the payload, bar the ``skip`` keys, that the text shows in
    none of their whole forms."""
    return sorted(
        {
            (key, value)
            for key, value in payload_items(report.payload)
            if value and key not in skip and not any(f in text for f in shown_forms(key, value))
        }
    )
