"""The capacity spec file of `kvcalc check`: deployments and the requirements each must meet.

Reading is hostile-input safe: only regular files up to 1 MiB (the registry's reader), parsed with
PyYAML's safe loader (``yaml.SafeLoader``: never a constructor that builds Python objects), with
anchors, aliases, explicit tags and duplicate keys refused before any value is built. The file is
composed into nodes (``yaml.compose`` with the safe loader) so that every key keeps its line,
and every problem -- of YAML or of the schema -- is reported as ``file:line: field: message``.

A deployment's keys are the command-line options of `kvcalc batch` and `kvcalc decode` spelled
with underscores (``kv_memory`` for ``--kv-memory``), plus ``model``, ``ctx``, ``mfu`` and
``require``; a top-level ``defaults:`` gives keys shared by every deployment (its ``require``
is merged requirement by requirement).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
)

from kvcalc.engine.units import number_text_problem, shown

if TYPE_CHECKING:
    import yaml

#: A YAML path: keys and list indexes from the top of the document.
Loc = tuple[str | int, ...]

PosInt = Annotated[int, Field(gt=0, strict=True)]
NonNegInt = Annotated[int, Field(ge=0, strict=True)]
PosNumber = Annotated[float, Field(gt=0)]
#: A size such as ``80GB``; a bare number is passed on so the size parser can say it needs a unit.
Size = str | int | float
#: A context such as ``32k`` or ``32768``.
Context = str | int


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


class SpecError(Exception):
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
    max_kv_fraction: Annotated[float, Field(gt=0, le=1)] | None = Field(
        None, description="share of the KV budget the batch at ctx takes"
    )

    @field_validator("min_context", mode="before")
    @classmethod
    def _tokens(cls, value: Context | None) -> int | None:
        return context_tokens(value)


#: The requirement keys, in the order they are reported.
REQUIREMENT_KEYS = tuple(Requirements.model_fields)


class DeploymentEntry(_Strict):
    """One deployment (or the defaults): every key optional here; ``model`` and ``gpus`` are
    required once the defaults are merged in (:func:`merged_deployments`)."""

    name: str | None = None
    model: str | None = None
    gpus: str | None = None
    ctx: Context | None = None
    mfu: Annotated[float, Field(gt=0, le=1)] | None = None
    engine: Literal["simple", "vllm", "sglang"] | None = None
    # The deployment options (kvcalc.cli.deploy.DeploymentOptions, the KV format options
    # included), named as there.
    tp: PosInt | None = None
    pp: PosInt | None = None
    gpu_util: float | None = None
    reserve: float | None = None
    overhead: Size | None = None
    gpu_memory: Size | None = None
    weights: Size | None = None
    kv_memory: Size | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    kv_group: PosInt | None = None
    kv_scale_dtype: str | None = None
    kv_zero_point: StrictBool | None = None
    kv_quant: str | None = None
    kv_bits: PosInt | None = None
    kv_residual: NonNegInt | None = None
    block_size: PosInt | None = None
    prefix_shared: NonNegInt | None = None
    max_num_batched_tokens: PosInt | None = None
    # SGLang's server arguments (kvcalc.cli.deploy.SGLangFlags), named as there.
    sglang_version: str | None = None
    mem_fraction_static: float | None = None
    page_size: PosInt | None = None
    context_length: Context | None = None
    chunked_prefill_size: PosInt | None = None
    cuda_graph_max_bs: PosInt | None = None
    max_total_tokens: PosInt | None = None
    free_before_load: Size | None = None
    free_after_load: Size | None = None
    swa_full_tokens_ratio: float | None = None
    # The eviction and bounding options (kvcalc.cli.eviction.EvictionOptions), named as there.
    window: PosInt | None = None
    sinks: NonNegInt | None = None
    recent: PosInt | None = None
    h2o_budget: PosInt | None = None
    snapkv_budget: PosInt | None = None
    observation_window: PosInt | None = None
    prompt: Context | None = None
    gen: Context | None = None
    keep_ratio: float | None = None
    require: Requirements | None = None

    @field_validator("ctx", "context_length", "prompt", "gen", mode="before")
    @classmethod
    def _tokens(cls, value: Context | None) -> int | None:
        return context_tokens(value)

    @field_validator("name", "model", "gpus")
    @classmethod
    def _not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("must not be empty")
        return value


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

    @property
    def file(self) -> str:
        return str(self.path)


def load_spec(path: Path) -> Spec:
    """Read, validate and merge a spec file; raises :class:`SpecError` naming every problem."""
    data, lines = read_spec_yaml(path)
    where = _Locator(str(path), lines)
    if not isinstance(data, dict):
        raise SpecError([where.line((), "expected a mapping with a 'deployments:' list")])
    try:
        spec = SpecFile.model_validate(data)
    except ValidationError as exc:
        raise SpecError(validation_problems(exc, where)) from None
    deployments = merged_deployments(spec, lines)
    problems = [
        where.at(d.line, f"deployments[{d.index}]", f"{key}: missing; {hint}")
        for d in deployments
        for key, hint in _REQUIRED.items()
        if key not in d.values
    ]
    problems += _duplicate_names(deployments, where)
    problems += [
        where.at(d.line, f"deployments[{d.index}]", "require: give at least one requirement, "
                 f"e.g. require: {{min_batch: 64}} (choose {', '.join(REQUIREMENT_KEYS)})")
        for d in deployments
        if not d.requirements
    ]
    if problems:
        raise SpecError(problems)
    return Spec(path, tuple(deployments))


_REQUIRED = {
    "model": "give a registry name, HF repo id or config.json path (here or in defaults:)",
    "gpus": "give COUNTxGPU such as 8xH100 (here or in defaults:)",
}


def _duplicate_names(deployments: list[SpecDeployment], where: _Locator) -> list[str]:
    seen: dict[str, int] = {}
    problems = []
    for d in deployments:
        if d.name in seen:
            problems.append(
                where.at(
                    d.line_of("name"),
                    f"deployments[{d.index}].name",
                    f"{d.name!r} is already the name of deployments[{seen[d.name]}]; "
                    "give each deployment its own name",
                )
            )
        seen.setdefault(d.name, d.index)
    return problems


def merged_deployments(spec: SpecFile, lines: Mapping[Loc, int]) -> list[SpecDeployment]:
    """Each deployment over the defaults: its own keys win, requirements merge one by one."""
    defaults = spec.defaults.model_dump(exclude_none=True) if spec.defaults else {}
    default_require = defaults.pop("require", {})
    out = []
    for index, entry in enumerate(spec.deployments):
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


def validation_problems(exc: ValidationError, where: _Locator) -> list[str]:
    """One readable line per pydantic error. Union types report one error per member; only the
    first of each location is kept, worded for the field."""
    problems: list[tuple[int, str]] = []
    seen: set[Loc] = set()
    for error in exc.errors():
        loc = _field_loc(error["loc"])
        if loc in seen:
            continue
        seen.add(loc)
        problems.append((where.line_for(loc), where.line(loc, _message(error, loc))))
    return [problem for _, problem in sorted(problems, key=lambda p: p[0])]


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


def read_spec_yaml(path: Path) -> tuple[Any, dict[Loc, int]]:
    """The document of a spec file and the 1-based line of every key and list item."""
    text = _read_regular_file(path)
    import yaml

    _refuse_unsafe_events(text, path)
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SpecError([f"{path}:1: the file is empty; list deployments: to check"])
        lines: dict[Loc, int] = {(): node.start_mark.line + 1}
        return _value(node, (), lines, loader, str(path)), lines
    except yaml.YAMLError as exc:
        raise SpecError([_yaml_problem(path, exc)]) from None
    except RecursionError:
        raise SpecError([f"{path}: invalid YAML: nested too deeply for a spec file"]) from None
    finally:
        loader.dispose()


def _read_regular_file(path: Path) -> str:
    """The file's text, through the registry's reader: a regular file of at most
    ``MAX_FILE_BYTES``, refused from its type (a FIFO, a device) before a byte is read."""
    from kvcalc.registry.load import RegistryError, read_text

    try:
        return read_text(path, "a spec file")
    except RegistryError as exc:
        raise SpecError([str(exc)]) from None


def _refuse_unsafe_events(text: str, path: Path) -> None:
    """Refuse anchors and aliases (a few lines can expand to billions of nodes) and explicit
    tags (a spec is plain data), at the line where they appear, before anything is composed."""
    import yaml

    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            line = event.start_mark.line + 1 if event.start_mark else 1
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise SpecError([f"{path}:{line}: YAML anchors and aliases are not allowed"])
            tag = getattr(event, "tag", None)
            if tag is not None:
                raise SpecError([f"{path}:{line}: YAML tags such as {tag!r} are not allowed"])
    except yaml.YAMLError as exc:
        raise SpecError([_yaml_problem(path, exc)]) from None


def _yaml_problem(path: Path, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    return f"{path}{line}: invalid YAML: {' '.join(str(getattr(exc, 'problem', exc)).split())}"


def _value(
    node: yaml.Node, loc: Loc, lines: dict[Loc, int], loader: yaml.SafeLoader, file: str
) -> Any:
    """The plain value of a node, recording the line of each key and list item; refuses
    duplicate and non-scalar keys."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode):
                raise SpecError([f"{file}:{line}: keys must be plain words"])
            key = str(key_node.value)
            if key in out:
                where = dotted((*loc, key))
                raise SpecError([f"{file}:{line}: {where}: duplicate key; give it once"])
            here = (*loc, key)
            lines[here] = line
            out[key] = _value(value_node, here, lines, loader, file)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            here = (*loc, index)
            lines[here] = item.start_mark.line + 1
            items.append(_value(item, here, lines, loader, file))
        return items
    if node.tag in _NUMBER_TAGS:
        problem = number_text_problem(str(node.value))
        if problem is not None:
            line = node.start_mark.line + 1
            raise SpecError([f"{file}:{line}: {dotted(loc)}: {shown(str(node.value))}: {problem}"])
    return loader.construct_object(node)


#: The number rule of every input (units.number_text_problem) holds in a spec file too.
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
