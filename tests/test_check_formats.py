"""Every output format of `kvcalc check` holds whatever a deployment's name or the spec's path
holds: each is parsed by its own reader (JSON, YAML, CSV, XML, GitHub's workflow commands) or
checked for the characters a terminal or log would act on."""

from __future__ import annotations

import csv
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

from kvcalc.cli.app import app
from kvcalc.render.formats import visible

#: A name with every kind of character a format may not hold, as a YAML double-quoted escape:
#: NUL and other C0 controls, an ANSI colour, tab and line breaks, a GitHub command, the
#: characters its properties split on, a markdown pipe, C1 (NEL), U+2028, U+FFFE and a lone
#: surrogate.
NAME_YAML = r'"n\0\x01\e[31m|%,:\t\r\n::error::x\x85\L\ufffe\ud800end"'
NAME = yaml.safe_load(NAME_YAML)

#: Characters no line of the line formats (nor XML) may hold.
UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff\u2028\u2029]")

SPEC = f"""\
deployments:
  - name: {NAME_YAML}
    model: llama3-8b
    gpus: h100
    ctx: 32k
    require: {{min_batch: 1000}}
"""
FORMATS = ["table", "json", "yaml", "csv", "markdown", "junit", "github"]


def run(runner: CliRunner, path: Path, fmt: str) -> Result:
    return runner.invoke(app, ["check", str(path), "--format", fmt])


@pytest.fixture
def spec(tmp_path: Path) -> Path:
    path = tmp_path / "capacity.yaml"
    path.write_text(SPEC)
    return path


def test_the_name_holds_everything() -> None:
    assert "\x00" in NAME and "\x1b" in NAME and "\n" in NAME and "\ud800" in NAME
    assert "\x85" in NAME and "\u2028" in NAME and "\ufffe" in NAME


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_parses_whatever_the_name_holds(
    runner: CliRunner, spec: Path, fmt: str
) -> None:
    result = run(runner, spec, fmt)
    assert result.exit_code == 1, result.stderr  # 1,000 sequences of 32k do not fit
    out = result.stdout
    # A ctx beyond llama3-8b's 8,192 warns, with the name, on stderr in every format.
    assert "warning: " in result.stderr and not UNSAFE.search(result.stderr)
    out.encode("utf-8")  # no lone surrogate reaches the output
    if fmt == "json":
        document = json.loads(out)
        assert document["deployments"][0]["deployment"] == NAME  # JSON escapes it: exact
        assert document["warnings"][0].startswith(f"{NAME}: ")
    elif fmt == "yaml":
        assert yaml.safe_load(out)["deployments"][0]["deployment"] == NAME  # YAML escapes it too
    elif fmt == "csv":
        (row,) = list(csv.DictReader(io.StringIO(out)))
        assert row["deployment"] == visible(NAME)
        assert not UNSAFE.search(out) and "\t" not in out
    elif fmt == "junit":
        root = ET.fromstring(out)
        (suite,) = root.findall("testsuite")
        assert suite.get("name") == visible(NAME)
        failure = suite.find("testcase/failure")
        assert failure is not None and failure.get("message", "").startswith(visible(NAME))
    elif fmt == "github":
        check_github(out, spec)
    else:
        assert not UNSAFE.search(out)
        assert visible(NAME) in out
        assert "\t" not in out and "\r" not in out
    if fmt == "markdown":
        rows = [line for line in out.splitlines() if line.startswith("|")]
        # Every row has the header's cells: a name's pipe is escaped, its line break shown.
        assert len({len(re.findall(r"(?<!\\)\|", row)) for row in rows}) == 1


def check_github(out: str, spec: Path) -> None:
    """Each line is one workflow command the runner parses back to the text, or a log line
    that no runner takes for a command."""
    lines = out.splitlines()
    assert lines, out
    commands = [line for line in lines if line.lstrip().startswith(("::", "##["))]
    assert [c.split(" ", 1)[0] for c in commands] == ["::error", "::warning"]
    for command in commands:
        head, data = command[2:].split("::", 1)
        properties = dict(p.split("=", 1) for p in head.split(" ", 1)[1].split(","))
        assert unescape_property(properties["file"]) == str(spec)
        assert int(properties["line"]) in (6, 5)  # min_batch's line; the warning at ctx's
        assert "\r" not in data and not UNSAFE.search(data)
        assert unescape_data(data).startswith(visible(NAME) + ": ")
    title = dict(p.split("=", 1) for p in commands[0].split("::")[1].split(" ", 1)[1].split(","))
    assert unescape_property(title["title"]).startswith(visible(NAME) + ": min_batch")


def unescape_data(text: str) -> str:
    """As the runner reads a command's data (actions/runner ActionCommand.UnescapeData)."""
    return text.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")


def unescape_property(text: str) -> str:
    """As the runner reads a property (actions/runner ActionCommand.UnescapeProperty)."""
    for escaped, char in (("%0D", "\r"), ("%0A", "\n"), ("%3A", ":"), ("%2C", ","), ("%25", "%")):
        text = text.replace(escaped, char)
    return text


@pytest.mark.parametrize("fmt", ["junit", "github"])
def test_an_invalid_spec_in_the_ci_formats_parses_too(
    runner: CliRunner, tmp_path: Path, fmt: str
) -> None:
    path = tmp_path / "capacity.yaml"
    path.write_text(SPEC.replace("llama3-8b", "nosuch-model"))
    result = run(runner, path, fmt)
    assert result.exit_code == 2
    assert "unknown model" in result.stderr and not UNSAFE.search(result.stderr)
    if fmt == "junit":
        failure = ET.fromstring(result.stdout).find("testsuite/testcase/failure")
        assert failure is not None and visible(NAME) in failure.get("message", "")
    else:
        (line,) = result.stdout.splitlines()
        assert line.startswith(f"::error file={path},line=3,")
        assert not UNSAFE.search(line) and visible(NAME) in unescape_data(line)


@pytest.mark.parametrize("name", ["::error::forged.yaml", "x\n::error::forged.yaml"])
def test_a_spec_path_cannot_forge_a_workflow_command(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # The summary line starts with the spec's path: a path starting with `::` or holding a line
    # break would be a command of its own in the job's log.
    monkeypatch.chdir(tmp_path)
    Path(name).write_text(SPEC.replace("1000", "1"))
    result = runner.invoke(app, ["check", name, "--format", "github"])
    assert result.exit_code == 0, result.stderr
    (warning, summary) = result.stdout.splitlines()
    assert warning.startswith("::warning file=")
    assert not summary.lstrip().startswith(("::", "##["))
    assert summary.endswith("the requirement holds (1 deployment)")
    missing = runner.invoke(app, ["check", f"{name}.missing", "--format", "github"])
    assert missing.exit_code == 2
    (line,) = missing.stdout.splitlines()  # the one annotation of the refusal
    assert line.startswith("::error file=")


@given(st.text(st.characters(exclude_categories=())))  # lone surrogates included
def test_visible_text_is_one_encodable_xml_line(text: str) -> None:
    shown = visible(text)
    assert not UNSAFE.search(shown) and "\n" not in shown and "\r" not in shown
    shown.encode("utf-8")
    element = ET.Element("case", name=shown)
    element.text = shown
    parsed = ET.fromstring(ET.tostring(element, "unicode"))
    assert parsed.get("name") == shown and parsed.text == (shown or None)
    assert visible(shown) == shown  # an escape is plain text
