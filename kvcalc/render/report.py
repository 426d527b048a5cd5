"""The formatter seam: each command builds one `Report`; `kvcalc.render.formats` renders it.

The design follows pip-audit's ``_format`` package: the result of a command is data, and every
output format is a function of that data alone, so a new format never touches a command and a new
command gets every format for free. Converting a command takes three steps:

1. In ``kvcalc/render/<command>.py``, build a `Report` from the engine results:

   - ``payload``: the JSON object (also the YAML document). One shape per command whatever the
     number of contexts or rows, raw numbers only (bytes, tokens, seconds), stable keys that the
     README documents. Non-finite floats become ``null`` in the formatter, not here.
   - ``records``: the flat rows of CSV, one per record, with the same keys in every row (the CSV
     header is ``fields`` or the first record's keys) and raw, unformatted numbers. `flatten`
     turns a nested payload row into such a record.
   - ``lines``, ``sections``: what people read (the table and markdown formats). A `Section` has a
     title, `Column`s that say how a record becomes a cell, the rows (usually the same records),
     optional totals rows and notes printed under the table.
   - ``diagnostics``: lines for stderr in every format (validation problems), and
     ``exit_code`` (1 = does not fit, 2 = failed check), so data stays on stdout.
   - ``warnings``: answers that hold but rest on an unusual input; stderr in every format and a
     ``warnings`` list in JSON/YAML (:mod:`kvcalc.render.warnings`).
   - ``cases``: for a command that checks requirements, one `Case` per test; the CI formats
     (``junit``, ``github``) render these, and only such a command offers them.

2. Describe the columns once, with `number` for figures and `Column(kind="name"|"text")` for the
   rest. A "number" or "name" cell is never wrapped or cut: the table formatter wraps text
   columns first, then falls back to one block per record when even that does not fit the width.

3. In the typer command, call ``kvcalc.cli.app.emit_report(report, fmt)`` with the shared
   ``fmt: ReportFormat = ReportFormatOption``; nothing else in the command depends on the format.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from kvcalc.render.chart import Chart

#: The version of every JSON/YAML document's shape, its top-level ``schema_version``
#: (docs/json.md). Documents before it had no such key: that unversioned shape is version 1.
SCHEMA_VERSION = 2

#: "number": a figure, right-aligned, never wrapped or cut. "name": an identifier (model or GPU
#: id), left-aligned, never wrapped or cut, so it stays greppable. "text": prose that may wrap at
#: word boundaries (detail, note, interconnect).
ColumnKind = Literal["number", "name", "text"]

Record = Mapping[str, Any]

# The classes below are plain dataclasses without generated __eq__/__hash__ (and not frozen):
# building those methods costs about 0.2 ms per class at every start-up, and nothing compares
# or hashes reports.


@dataclass(eq=False)
class Column:
    """One column of a human table: its header and how a record becomes the cell text."""

    header: str
    cell: Callable[[Record], str]
    kind: ColumnKind = "number"

    @property
    def justify(self) -> Literal["left", "right"]:
        return "right" if self.kind == "number" else "left"


def number(header: str, key: str, spec: str = ",", missing: str = "") -> Column:
    """A figure column showing ``record[key]`` with a format spec (thousands separators by
    default); ``missing`` when the value is None."""

    def cell(record: Record) -> str:
        value = record.get(key)
        return missing if value is None else format(value, spec)

    return Column(header, cell, "number")


def gib(header: str, key: str) -> Column:
    """A figure column showing the bytes ``record[key]`` in GiB (2^30), two decimals; a missing
    value (None) is an empty cell."""
    from kvcalc.engine.units import GiB

    def cell(record: Record) -> str:
        value = record.get(key)
        return "" if value is None else f"{value / GiB:,.2f}"

    return Column(header, cell, "number")


def ms(header: str, key: str, missing: str = "") -> Column:
    """A figure column showing the seconds ``record[key]`` in milliseconds, two decimals;
    ``missing`` when the value is None."""

    def cell(record: Record) -> str:
        value = record.get(key)
        return missing if value is None else f"{value * 1000:,.2f}"

    return Column(header, cell, "number")


def text(header: str, key: str, kind: ColumnKind = "text") -> Column:
    """A column showing ``record[key]`` as it is (empty when None)."""

    def cell(record: Record) -> str:
        value = record.get(key)
        return "" if value is None else str(value)

    return Column(header, cell, kind)


@dataclass(eq=False)
class Section:
    """One titled table of the human formats, with totals rows and notes under it."""

    title: str
    columns: Sequence[Column]
    rows: Sequence[Record]
    totals: Sequence[Record] = ()
    notes: Sequence[str] = ()

    def cells(self, rows: Sequence[Record]) -> list[list[str]]:
        return [[c.cell(r) for c in self.columns] for r in rows]


@dataclass(eq=False)
class Case:
    """One pass/fail test of a report, for the CI formats (JUnit XML, GitHub annotations):
    ``suite`` groups cases (a deployment), ``message`` states the figures in one line, and
    ``file``/``line`` point at what the case tests (a requirement's line in a spec file)."""

    suite: str
    name: str
    passed: bool
    message: str
    file: str | None = None
    line: int | None = None
    kind: str = "requirement"
    """What a failure is (JUnit's failure ``type``): a requirement not met, an invalid spec."""


@dataclass(eq=False)
class Report:
    """Everything one command invocation outputs, in every format."""

    payload: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    """An object, or a list of objects for a command whose answer is a ranking (`plan`)."""
    records: Sequence[Record] = ()
    fields: Sequence[str] = ()
    lines: Sequence[str] = ()
    sections: Sequence[Section] = ()
    diagnostics: Sequence[str] = ()
    exit_code: int = 0
    cases: Sequence[Case] = ()
    """The tests of a checking command (`kvcalc check`); only such a report offers the CI
    formats, junit and github."""
    charts: Sequence[Chart] = ()
    """Drawn under the sections by the table format only (data, not layout, for the others)."""
    warnings: Sequence[str] = ()
    """Answers that hold but rest on an unusual input (:mod:`kvcalc.render.warnings`)."""
    warning_lines: Mapping[str, tuple[str | None, int | None]] = field(default_factory=dict)
    """Warning -> the file and line it is about, where a CI format can annotate it."""
    versioned: bool = True
    """False for a document whose format is another's (`import-hf` prints a registry file,
    which the registry schema defines): no ``schema_version`` is added to it."""

    def document(self) -> Mapping[str, Any] | Sequence[Mapping[str, Any]]:
        """The JSON/YAML document: ``schema_version`` first, the payload, then ``warnings``
        when there are any. A list payload has no key to hold either (no command has one)."""
        if not isinstance(self.payload, Mapping):
            return self.payload
        head = {"schema_version": SCHEMA_VERSION} if self.versioned else {}
        tail = {"warnings": list(self.warnings)} if self.warnings else {}
        return {**head, **self.payload, **tail}

    def csv_fields(self) -> list[str]:
        if self.fields:
            return list(self.fields)
        return list(self.records[0]) if self.records else []


def flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A payload row as one flat CSV record: nested objects become ``parent_child`` keys, lists
    of scalars one ``;``-separated cell (aliases, unverified fields), and lists of scalar pairs
    or tuples ``x``-joined items of one (a registry file's ``[positions, dims]`` RoPE tables,
    ``[inputs, outputs]`` projector linears: ``131072x128;1048576x128``)."""
    flat: dict[str, Any] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}_"))
        elif isinstance(value, (list, tuple)):
            flat[name] = ";".join(_flat_item(name, v) for v in value)
        else:
            flat[name] = value
    return flat


def _flat_item(name: str, value: Any) -> str:
    if isinstance(value, (list, tuple)) and not any(
        isinstance(v, (Mapping, list, tuple)) for v in value
    ):
        return "x".join(str(v) for v in value)
    if isinstance(value, (Mapping, list, tuple)):
        raise TypeError(f"{name}: a list of objects has no flat CSV form; give it one")
    return str(value)
