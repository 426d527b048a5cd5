"""The capacity spec file of `kvcalc check`: deployments and the requirements each must meet.

Reading is hostile-input safe: only regular files up to 1 MiB (the registry's reader); the
parser's events (libyaml's when PyYAML has it) are scanned first, refusing nesting deeper
than :data:`MAX_DEPTH`, more than :data:`MAX_NODES` nodes, anchors, aliases and explicit tags
before anything is composed; the document is then composed into
nodes by PyYAML's safe loader (so that every key keeps its line) and no constructor runs: each
scalar is read from its text by the kind of the field it gives (:func:`read_scalar`), so
YAML 1.1's readings of ``on``, ``010`` or ``0x20`` as numbers never apply, a key with no value
is refused, and token counts read ``8k`` as ``--ctx`` does. Every problem -- of YAML, of a
value or of the schema -- is reported as ``file:line: field: message``, all of them at once.

A deployment's keys are the command-line options of `kvcalc batch` and `kvcalc decode` spelled
with underscores (``kv_memory`` for ``--kv-memory``), plus ``model``, ``ctx``, ``mfu`` and
``require``; a top-level ``defaults:`` gives keys shared by every deployment (its ``require``
is merged requirement by requirement).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    create_model,
    field_validator,
)

from kvcalc.engine.inputs import Input, all_inputs
from kvcalc.engine.serving import ENGINE_NAMES
from kvcalc.engine.units import number_text_problem, shown
from kvcalc.errors import KvcalcError

if TYPE_CHECKING:
    from typing import TypeAlias

    import yaml

    Loader: TypeAlias = type[yaml.SafeLoader] | type[yaml.CSafeLoader]

#: A YAML path: keys and list indexes from the top of the document.
Loc = tuple[str | int, ...]


class Kind(Enum):
    """How a field reads its scalar, marked on its type (``Annotated[..., Kind.TOKENS]``)."""

    TEXT = "text"
    FLAG = "true or false"
    COUNT = "a whole number such as 32"
    NUMBER = "a number such as 0.9 or 40"
    TOKENS = "a token count such as 8192, 8k, 128k or 1m"
    SIZE = "a size such as 80GB"


PosInt = Annotated[int, Field(gt=0, strict=True), Kind.COUNT]
#: A token count: ``8192``, ``8k``, ``128k``, ``1m``, as ``--ctx`` reads them.
PosTokens = Annotated[int, Field(gt=0, strict=True), Kind.TOKENS]
NonNegTokens = Annotated[int, Field(ge=0, strict=True), Kind.TOKENS]
Number = Annotated[float, Kind.NUMBER]
PosNumber = Annotated[float, Field(gt=0), Kind.NUMBER]
Fraction = Annotated[float, Field(gt=0, le=1), Kind.NUMBER]
#: A size such as ``80GB``, as written: the size parser says a bare number needs its unit.
Size = Annotated[str, Kind.SIZE]
#: A context such as ``32k`` or ``32768``.
Context = Annotated[int, Kind.TOKENS]
#: One of the serving engines' names (:data:`kvcalc.engine.serving.ENGINE_NAMES`).
EngineName = Literal[ENGINE_NAMES]  # type: ignore[valid-type]


def context_tokens(value: object) -> int | None:
    """A context as tokens (``32k`` -> 32,768), parsed as the command line parses ``--ctx``."""
    from kvcalc.engine.units import UnitError, parse_context

    if value is None:
        return None
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise ValueError("give a context such as 32k or 32768")
    try:
        return parse_context(str(value))
    except UnitError as exc:
        raise ValueError(str(exc)) from None


#: The problems reported at most: each unknown model or GPU costs the registry's fuzzy search
#: some milliseconds, so a spec of thousands of made-up names would take seconds to refuse, and
#: thousands of lines bury the first; the first hundred say what to fix.
MAX_PROBLEMS = 100


def stopped(file: str, line: int | None, count: int) -> str:
    """The last line of a refusal cut at :data:`MAX_PROBLEMS`: where the rest begins."""
    return (
        f"{file}:{line or 1}: stopped after {count} problems; fix them and check again for the "
        "problems from here on"
    )


class SpecError(KvcalcError):
    """An invalid spec file: one ``file:line: field: message`` line per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _Strict(BaseModel):
    # No infinity or NaN: `reserve: .nan` is no fraction, `max_tpot_ms: .inf` checks nothing.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Requirements(_Strict):
    """What a deployment must meet; each is checked when given."""

    min_batch: PosInt | None = Field(None, description="sequences of ctx that fit (all replicas)")
    min_context: Context | None = Field(None, description="tokens one sequence can hold")
    max_tpot_ms: PosNumber | None = Field(None, description="time per output token at the batch")
    max_ttft_ms: PosNumber | None = Field(None, description="time to first token")
    min_tokens_per_second: PosNumber | None = Field(None, description="batch / TPOT")
    max_kv_fraction: Fraction | None = Field(
        None, description="share of the KV budget the batch at ctx takes"
    )

    @field_validator("min_context", mode="before")
    @classmethod
    def _tokens(cls, value: Context | None) -> int | None:
        return context_tokens(value)


#: The requirement keys, in the order they are reported.
REQUIREMENT_KEYS = tuple(Requirements.model_fields)


def _spec_type(inp: Input) -> Any:
    """The type a spec file's key for a declared input reads (:mod:`kvcalc.engine.inputs`)."""
    if inp.unit == "tokens":
        return NonNegTokens if inp.minimum == 0 else PosTokens
    return {
        "bytes": Size,
        "context": Context,
        "count": PosInt,
        "fraction": Number,
        "flag": StrictBool,
        "text": str,
        "path": str,
    }[inp.unit]


#: The keys read as a context such as ``32k`` (one length, as ``--ctx`` reads it).
_CONTEXT_KEYS = (
    "ctx", *(i.name for i in all_inputs().values() if i.unit == "context"), "prompt", "gen"
)


class _Entry(_Strict):
    """One deployment (or the defaults): every key optional here; ``model`` and ``gpus`` are
    required once the defaults are merged in (:func:`merged_deployments`). Its keys: ``name``,
    ``model``, ``ctx``, ``mfu``, ``engine``, every declared input (the deployment's, the KV
    format's, each engine's own, named as :mod:`kvcalc.engine.inputs` names them), the
    eviction and bounding options (:class:`kvcalc.cli.eviction.EvictionOptions`, named as
    there) and ``require``."""

    name: str | None = None

    @field_validator(*_CONTEXT_KEYS, mode="before", check_fields=False)
    @classmethod
    def _tokens(cls, value: Context | None) -> int | None:
        return context_tokens(value)


def _optional(kind: Any) -> Any:
    return (kind | None, None)


_EVICTION_FIELDS: dict[str, Any] = {
    "window": PosTokens,
    "sinks": NonNegTokens,
    "recent": PosTokens,
    "h2o_budget": PosTokens,
    "snapkv_budget": PosTokens,
    "observation_window": PosTokens,
    "prompt": Context,
    "gen": Context,
    "keep_ratio": Number,
}

if TYPE_CHECKING:
    DeploymentEntry = _Entry
else:
    DeploymentEntry = create_model(
        "DeploymentEntry",
        __base__=_Entry,
        __module__=__name__,
        model=_optional(str),
        gpus=_optional(str),
        ctx=_optional(Context),
        mfu=_optional(Fraction),
        judge=_optional(Literal["estimate", "high"]),
        engine=_optional(EngineName),
        **{
            name: _optional(_spec_type(inp))
            for name, inp in all_inputs().items()
            if name != "gpus"
        },
        **{name: _optional(kind) for name, kind in _EVICTION_FIELDS.items()},
        require=_optional(Requirements),
    )


class SpecFile(_Strict):
    defaults: DeploymentEntry | None = None
    deployments: list[DeploymentEntry] = Field(min_length=1)

    @field_validator("defaults")
    @classmethod
    def _no_default_name(cls, value: DeploymentEntry | None) -> DeploymentEntry | None:
        if value is not None and value.name is not None:
            raise ValueError("a name belongs to one deployment, not to the defaults")
        return value


# ---------------------------------------------------------------- merged deployments


@dataclass(frozen=True)
class SpecDeployment:
    """One deployment with the defaults merged in, and the line of each of its keys."""

    index: int
    name: str
    values: Mapping[str, Any]
    """Every key given (here or in the defaults) but ``name`` and ``require``."""
    requirements: Mapping[str, Any]
    line: int
    """The line of the deployment's first key."""
    lines: Mapping[str, int] = field(default_factory=dict)
    """Key (or ``require.<key>``) -> the line that gives it, here or in the defaults."""
    own: frozenset[str] = frozenset()
    """The keys the deployment gives itself (not through the defaults)."""

    def line_of(self, key: str) -> int:
        return self.lines.get(key, self.line)

    @property
    def where(self) -> str:
        return f"deployments[{self.index}] ({self.name})"


@dataclass(frozen=True)
class Spec:
    path: Path
    deployments: tuple[SpecDeployment, ...]
    """The deployments that can be built: each one without a problem of its own."""
    problems: tuple[tuple[int, str], ...] = ()
    """``(line, "file:line: field: message")`` for every problem of the file itself."""

    @property
    def file(self) -> str:
        return str(self.path)


def load_spec(path: Path) -> Spec:
    """Read, validate and merge a spec file. Problems that stop the whole file (YAML that cannot
    be read, hostile YAML, no deployments) raise :class:`SpecError`; the others are collected
    in :attr:`Spec.problems`, one per field, and a deployment with a problem is left out."""
    doc = read_spec_yaml(path)
    where = _Locator(str(path), doc.lines)
    if not isinstance(doc.data, dict):
        if doc.problems:
            raise SpecError([text for _, text in doc.problems])
        raise SpecError([where.line((), "expected a mapping with a 'deployments:' list")])
    problems = list(doc.problems)
    try:
        SpecFile.model_validate(doc.data)
        errors: list[Any] = []
    except ValidationError as exc:
        errors = exc.errors()
    problems += validation_problems(errors, where, doc.refused)
    bad = {_entry_of(loc) for loc in [*doc.refused, *(_field_loc(e["loc"]) for e in errors)]}
    listed = doc.data.get("deployments")
    deployments: list[SpecDeployment] = []
    # Without valid defaults no deployment's merge is known; other keys of the file do not
    # stop the deployments from being checked.
    if ("defaults",) not in bad and isinstance(listed, list) and ("deployments",) not in bad:
        deployments = _valid_deployments(doc, bad, where, problems)
    return Spec(path, tuple(deployments), tuple(problems))


def _entry_of(loc: Loc) -> Loc | None:
    """The entry a location is in: ``("deployments", i)`` or ``("defaults",)``,
    ``("deployments",)`` for the list itself; None for the file's other keys."""
    if loc[:1] == ("deployments",):
        return loc[:2]
    if loc[:1] == ("defaults",):
        return ("defaults",)
    return None


def _valid_deployments(
    doc: SpecDocument, bad: set[Loc | None], where: _Locator, problems: list[tuple[int, str]]
) -> list[SpecDeployment]:
    """The deployments without a problem, merged with the defaults; the problems found by
    merging (no model or gpus, no requirement, a name given twice) are added to ``problems``,
    and a deployment that lacks what it needs is left out."""
    defaults = DeploymentEntry.model_validate(doc.data.get("defaults") or {})
    entries = [
        (index, DeploymentEntry.model_validate(item))
        for index, item in enumerate(doc.data["deployments"])
        if ("deployments", index) not in bad
    ]
    complete = []
    for d in merged_deployments(defaults, entries, doc.lines):
        found = [
            where.at(d.line, f"deployments[{d.index}]", f"{key}: missing; {hint}")
            for key, hint in _REQUIRED.items()
            if key not in d.values
        ]
        if not d.requirements:
            found.append(where.at(
                d.line, f"deployments[{d.index}]", "require: give at least one requirement, "
                f"e.g. require: {{min_batch: 64}} (choose {', '.join(REQUIREMENT_KEYS)})"
            ))
        problems += [(d.line, problem) for problem in found]
        if not found:
            complete.append(d)
    problems += _duplicate_names(complete, where)
    return complete


_REQUIRED = {
    "model": "give a registry name, HF repo id or config.json path (here or in defaults:)",
    "gpus": "give COUNTxGPU such as 8xH100 (here or in defaults:)",
}


def _duplicate_names(
    deployments: list[SpecDeployment], where: _Locator
) -> list[tuple[int, str]]:
    seen: dict[str, int] = {}
    problems = []
    for d in deployments:
        if d.name in seen:
            problems.append((d.line_of("name"), where.at(
                    d.line_of("name"),
                    f"deployments[{d.index}].name",
                    f"{d.name!r} is already the name of deployments[{seen[d.name]}]; "
                    "give each deployment its own name",
                )
            ))
        seen.setdefault(d.name, d.index)
    return problems


def merged_deployments(
    default: DeploymentEntry,
    entries: list[tuple[int, DeploymentEntry]],
    lines: Mapping[Loc, int],
) -> list[SpecDeployment]:
    """Each deployment (with its index) over the defaults: its own keys win, requirements merge
    one by one."""
    defaults = default.model_dump(exclude_none=True)
    default_require = defaults.pop("require", {})
    out = []
    for index, entry in entries:
        own = entry.model_dump(exclude_none=True)
        require = {**default_require, **own.pop("require", {})}
        name = own.pop("name", None)
        values = {**defaults, **own}
        key_lines = {
            **{k: lines[("defaults", k)] for k in defaults if ("defaults", k) in lines},
            **{
                f"require.{k}": lines[("defaults", "require", k)]
                for k in default_require
                if ("defaults", "require", k) in lines
            },
            **{k: lines[("deployments", index, k)] for k in [*own, "name"]
               if ("deployments", index, k) in lines},
            **{
                f"require.{k}": lines[("deployments", index, "require", k)]
                for k in require
                if ("deployments", index, "require", k) in lines
            },
        }
        out.append(
            SpecDeployment(
                index=index,
                name=name or f"{values.get('model', '?')} on {values.get('gpus', '?')}",
                values=values,
                requirements={k: require[k] for k in REQUIREMENT_KEYS if k in require},
                line=lines.get(("deployments", index), 1),
                lines=key_lines,
                own=frozenset(own),
            )
        )
    return out


# ---------------------------------------------------------------- pydantic errors as lines


@dataclass(frozen=True)
class _Locator:
    """Words a problem as ``file:line: field: message``, the line being the nearest key's."""

    file: str
    lines: Mapping[Loc, int]

    def line_for(self, loc: Loc) -> int:
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.lines:
                return self.lines[loc[:end]]
        return 1

    def at(self, line: int, field: str, message: str) -> str:
        named = f"{field}: " if field else ""
        return f"{self.file}:{line}: {named}{message}"

    def line(self, loc: Loc, message: str) -> str:
        return self.at(self.line_for(loc), dotted(loc), message)


def dotted(loc: Loc) -> str:
    """``("deployments", 0, "require", "min_batch")`` -> ``deployments[0].require.min_batch``."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def validation_problems(
    errors: list[Any], where: _Locator, refused: set[Loc]
) -> list[tuple[int, str]]:
    """One readable line per pydantic error, but none within a value already refused while
    reading. Union types report one error per member; only the first of each location is
    kept, worded for the field."""
    problems: list[tuple[int, str]] = []
    seen: set[Loc] = set()
    for error in errors:
        loc = _field_loc(error["loc"])
        if loc in seen or any(loc[:end] in refused for end in range(len(loc) + 1)):
            continue
        seen.add(loc)
        problems.append((where.line_for(loc), where.line(loc, _message(error, loc))))
    return problems


def _field_loc(loc: tuple[Any, ...]) -> Loc:
    # pydantic adds the union member that failed ("str", "int", "function-after[...]") after
    # the field; the field is what the user wrote.
    keep: list[str | int] = []
    for part in loc:
        if isinstance(part, str) and (part in _UNION_TAGS or "[" in part):
            break
        keep.append(part)
    return tuple(keep)


_UNION_TAGS = {"str", "int", "float", "bool", "none"}


def _message(error: Mapping[str, Any], loc: Loc) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        if len(loc) >= 2 and loc[-2] == "require":
            return f"unknown requirement; choose {', '.join(REQUIREMENT_KEYS)}"
        if loc and loc[0] in ("deployments", "defaults"):
            return "unknown key; a deployment takes " + ", ".join(DeploymentEntry.model_fields)
        return "unknown key; a spec has defaults: and deployments:"
    if kind == "missing":
        return "missing required field"
    if kind == "too_short" and loc == ("deployments",):
        return "list at least one deployment"
    msg = str(error["msg"]).removeprefix("Value error, ")
    value = error.get("input")
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"{msg} (got {shown(repr(value))})"
    return msg


# ---------------------------------------------------------------- safe YAML with lines

#: The deepest nesting of mappings and lists a spec may have; a real spec needs four
#: (deployments, an entry, require, a flow list). PyYAML's scanner and composer take time that
#: grows with the square of the depth, so a deeper document is refused from its first events.
MAX_DEPTH = 64

#: The most nodes (keys, values, lists and mappings) a spec may hold: a deployment of a dozen
#: keys and four requirements holds 35, so 500 of them hold 17,500. PyYAML's pure-Python parser
#: reads some 70,000 a second, and a wide 1 MiB document (``[1,1,...]``, 100k keys) holds
#: hundreds of thousands, so the scan stops here, before anything is composed.
MAX_NODES = 20_000


@dataclass
class SpecDocument:
    """A spec file's plain data, the line of every key and list item, the problems found while
    reading its values, and the keys whose values were refused (left out of ``data``)."""

    data: Any
    lines: dict[Loc, int]
    problems: list[tuple[int, str]] = field(default_factory=list)
    refused: set[Loc] = field(default_factory=set)

    def refuse(self, loc: Loc, line: int, message: str) -> None:
        self.problems.append((line, message))
        self.refused.add(loc)


def read_spec_yaml(path: Path) -> SpecDocument:
    """The document of a spec file: its scalars read by the kind of the field they give
    (:func:`read_scalar`), every value's problem collected."""
    text = _read_regular_file(path)
    import yaml

    try:
        node = _document_node(text, path, yaml_loader())
    except _LibyamlError:
        # libyaml words its errors its own way and refuses a few documents PyYAML reads (an
        # escaped lone surrogate, nesting past its own limit): PyYAML in pure Python reads the
        # file again, so the answer is the same whichever is installed.
        node = _document_node(text, path, yaml.SafeLoader)
    if node is None or _no_value(node):
        raise SpecError([f"{path}:1: the file is empty; list deployments: to check"])
    doc = SpecDocument(None, {(): node.start_mark.line + 1})
    doc.data = _value(node, (), doc, str(path))
    return doc


def _read_regular_file(path: Path) -> str:
    """The file's text, through the registry's reader: a regular file of at most
    ``MAX_FILE_BYTES``, refused from its type (a FIFO, a device) before a byte is read."""
    from kvcalc.registry.load import RegistryError, read_text

    try:
        return read_text(path, "a spec file")
    except RegistryError as exc:
        raise SpecError([str(exc)]) from None


class _LibyamlError(Exception):
    """libyaml found the document invalid: PyYAML's pure-Python parser says why."""


def _document_node(text: str, path: Path, loader_class: Loader) -> yaml.Node | None:
    """The document's node, its events scanned first (:func:`_refuse_unsafe_events`)."""
    import yaml

    _refuse_unsafe_events(text, path, loader_class)
    loader = loader_class(text)
    try:
        node: yaml.Node | None = loader.get_single_node()
    except yaml.YAMLError as exc:
        if loader_class is not yaml.SafeLoader:
            raise _LibyamlError from None
        raise SpecError([_yaml_problem(path, exc)]) from None
    finally:
        loader.dispose()
    return node


def yaml_loader() -> Loader:
    """PyYAML's safe loader on libyaml (C) when PyYAML was built with it, ten to twenty times
    faster, else in pure Python. Both give the same events, nodes and lines (a plain scalar's
    style is None in one, '' in the other); a document libyaml finds invalid is read again in
    pure Python (:class:`_LibyamlError`)."""
    import yaml

    return yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader


def _refuse_unsafe_events(text: str, path: Path, loader: Loader) -> None:
    """Refuse, from the parser's events and before anything is composed: nesting deeper than
    :data:`MAX_DEPTH` (at once, as the scan's cost grows with the depth), more nodes than
    :data:`MAX_NODES` (at once: a wide document takes the parser seconds), anchors and aliases
    (a few lines can expand to billions of nodes) and explicit tags (a spec is plain data),
    each at the line where it appears."""
    import yaml

    problems: dict[int, str] = {}  # one a line
    depth = nodes = 0
    node_events = (yaml.ScalarEvent, yaml.AliasEvent, yaml.MappingStartEvent,
                   yaml.SequenceStartEvent)
    try:
        for event in yaml.parse(text, Loader=loader):
            line = event.start_mark.line + 1 if event.start_mark else 1
            if isinstance(event, node_events):
                nodes += 1
                if nodes > MAX_NODES:  # alone: beside it, the others do not matter
                    raise SpecError([
                        f"{path}:{line}: the spec holds more than {MAX_NODES:,} keys and values; "
                        "a deployment needs a few dozen: split the spec into several files"
                    ])
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    problems[line] = _too_deep(path, line)
                    break
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            found = _event_problem(event, path, line)
            if found is not None and line not in problems:
                if len(problems) == MAX_PROBLEMS:
                    problems[line] = stopped(str(path), line, MAX_PROBLEMS)
                    break
                problems[line] = found
    except yaml.YAMLError as exc:
        if loader is not yaml.SafeLoader:
            raise _LibyamlError from None
        problems.setdefault(0, _yaml_problem(path, exc))
    if problems:
        raise SpecError(list(problems.values()))


def _event_problem(event: yaml.Event, path: Path, line: int) -> str | None:
    """An anchor, an alias or an explicit tag: not allowed."""
    import yaml

    if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
        return f"{path}:{line}: YAML anchors and aliases are not allowed"
    tag = getattr(event, "tag", None)
    if tag is not None:
        return f"{path}:{line}: YAML tags such as {tag!r} are not allowed"
    return None


def _too_deep(path: Path, line: int) -> str:
    return (
        f"{path}:{line}: invalid YAML: nested deeper than {MAX_DEPTH} levels; a spec needs a "
        "handful"
    )


def _yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    return f"{path}{line}: invalid YAML: {' '.join(str(getattr(exc, 'problem', exc)).split())}"


class _Refused:
    """A value refused while reading (the problem is recorded): its key is left out."""


_REFUSED = _Refused()


def _value(node: yaml.Node, loc: Loc, doc: SpecDocument, file: str) -> Any:
    """The plain value of a node, recording the line of each key and list item; refuses
    duplicate and non-scalar keys and values with no value or of the wrong form, collecting
    every problem."""
    import yaml

    line = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):  # left out, so nothing else reads it
                doc.problems.append((key_line, f"{file}:{key_line}: keys must be plain words"))
                continue
            key = str(key_node.value)
            here = (*loc, key)
            if key in out or here in doc.refused:
                doc.refuse(here, key_line,
                           f"{file}:{key_line}: {dotted(here)}: duplicate key; give it once")
                continue
            doc.lines[here] = key_line
            value = _value(value_node, here, doc, file)
            if value is not _REFUSED:
                out[key] = value
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            here = (*loc, index)
            doc.lines[here] = item.start_mark.line + 1
            value = _value(item, here, doc, file)
            # A refused item keeps its place, so the next one keeps its index.
            items.append(None if value is _REFUSED else value)
        return items
    try:
        return read_scalar(node, field_kind(loc))
    except ValueError as exc:
        doc.refuse(loc, line, f"{file}:{line}: {dotted(loc)}: {exc}")
        return _REFUSED


# ---------------------------------------------------------------- scalars by the field's kind


def _no_value(node: yaml.Node) -> bool:
    """An empty scalar (``min_batch:``, or an environment substitution that came out empty,
    quoted or not) or YAML's null (``~``, ``null``)."""
    import yaml

    if not isinstance(node, yaml.ScalarNode):
        return False
    text = str(node.value).strip()
    plain = node.style in (None, "")  # None in pure Python, '' from libyaml
    return not text or (plain and text in _NULLS)


_NULLS = ("~", "null", "Null", "NULL")


def read_scalar(node: yaml.Node, kind: Kind) -> Any:
    """A scalar as the field it gives reads it, from its text: YAML 1.1's own readings
    (``on`` and ``yes`` as true, ``010`` as octal 8, ``0x20`` as 32, ``1_000``, ``1:30``) are
    never applied, so a value means what it means on the command line or is refused
    (ValueError)."""
    text = str(node.value)
    if _no_value(node):
        raise ValueError("no value; give one or remove the key")
    if kind is Kind.TEXT:
        return text
    problem = number_text_problem(text)
    if problem is not None:
        raise ValueError(f"{shown(text)}: {problem}")
    if kind is Kind.SIZE:
        return text  # parsed as the command line parses it, bare numbers refused there
    if kind is Kind.FLAG:
        if text.strip().lower() in ("true", "false"):
            return text.strip().lower() == "true"
        raise ValueError(f"{shown(text)!r} is not a boolean; give true or false")
    return read_number(text.strip(), kind)


def read_number(text: str, kind: Kind) -> int | float:
    """A decimal number (``32``, ``0.9``, ``1e3``), or for a token count also ``8k`` and
    ``1m`` as ``--ctx`` reads them; the ranges are the fields' own."""
    if kind is Kind.TOKENS:
        match = _TOKENS.match(text)
        if match and not _LEADING_ZERO.match(text):
            return int(match.group(1)) * _CTX_SCALE[match.group(2).lower()]
    if _DECIMAL.match(text) and not _LEADING_ZERO.match(text):
        return int(text) if _INTEGER.match(text) else float(text)
    raise ValueError(_not_a_number(text, kind))


_INTEGER = re.compile(r"^[-+]?[0-9]+$")
_DECIMAL = re.compile(r"^[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$")
_TOKENS = re.compile(r"^([0-9]+)([km]?)$", re.IGNORECASE)
_CTX_SCALE = {"": 1, "k": 1 << 10, "m": 1 << 20}
#: ``010``: YAML 1.1 reads it as octal 8, a person as 10, so neither reading is safe.
_LEADING_ZERO = re.compile(r"^[-+]?0[0-9]")
_BOOLEANS = ("yes", "no", "on", "off", "true", "false", "y", "n")


def _not_a_number(text: str, kind: Kind) -> str:
    quoted, lowered = repr(shown(text)), text.lower()
    if lowered in _BOOLEANS:
        return f"{quoted}: YAML 1.1 reads it as a boolean, not a number; give {kind.value}"
    if _LEADING_ZERO.match(text):
        return f"{quoted}: YAML 1.1 reads a leading zero as octal; write the number without it"
    if re.match(r"^[-+]?0[xob]", lowered):
        return f"{quoted}: hexadecimal, octal and binary are not read; write it in decimal"
    if lowered.lstrip("+-") in (".inf", ".nan"):
        return f"{quoted}: give a finite number"
    return f"{quoted} is not {kind.value}"


def field_kind(loc: Loc) -> Kind:
    """The kind of the field at ``loc``: a requirement, a deployment's (or the defaults') key,
    else text (an unknown key is refused as such, whatever its value)."""
    if len(loc) >= 2 and loc[-2] == "require":
        model: type[BaseModel] = Requirements
    elif (loc[:1], len(loc)) in ((("defaults",), 2), (("deployments",), 3)):
        model = DeploymentEntry
    else:
        return Kind.TEXT
    info = model.model_fields.get(str(loc[-1]))
    return Kind.TEXT if info is None else kind_of(info.annotation)


def kind_of(annotation: Any) -> Kind:
    """The :class:`Kind` marked on a type, looked for through ``Optional`` and ``Annotated``."""
    from typing import get_args

    if isinstance(annotation, Kind):
        return annotation
    for arg in get_args(annotation):
        kind = kind_of(arg)
        if kind is not Kind.TEXT:
            return kind
    if annotation is bool:
        return Kind.FLAG
    return Kind.TEXT
