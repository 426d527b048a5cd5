"""The JSON Schemas of docs/schema/ and the vocabulary page docs/json.md, generated from the
declarations of :mod:`kvcalc.render.vocabulary`.

    python -m kvcalc.render.schema --write   # regenerate docs/schema/*.json and docs/json.md
    python -m kvcalc.render.schema --check   # exit 1 when a checked-in file is stale

The tests run the check, validate every command's real output against its schema and check that
a key has one type wherever it appears.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from pydantic import TypeAdapter

DOCS = Path(__file__).resolve().parents[2] / "docs"
SCHEMA_DIR = DOCS / "schema"
JSON_MD = DOCS / "json.md"
DIALECT = "https://json-schema.org/draft/2020-12/schema"

#: The commands whose document is another format's: `import-hf` prints a registry file.
REGISTRY_FORMATS = ("import-hf",)


@cache
def adapter(command: str) -> TypeAdapter[Any]:
    """The strict validator of ``command``'s documents (unknown keys refused)."""
    from pydantic import TypeAdapter

    from kvcalc.render.vocabulary import COMMANDS

    if command == "import-hf":
        from kvcalc.registry.schema import ModelFile

        return TypeAdapter(ModelFile)
    shapes = COMMANDS[command]
    # One shape, or any of the command's shapes (batch's depend on its options).
    shape: Any = shapes[0] if len(shapes) == 1 else Union[shapes]  # noqa: UP007
    return TypeAdapter(shape)


def validate(command: str, document: Any) -> None:
    """Raise pydantic's ValidationError when ``document`` is not one of ``command``'s shapes."""
    adapter(command).validate_python(document)


def command_schema(command: str) -> dict[str, Any]:
    body = adapter(command).json_schema()
    if command not in REGISTRY_FORMATS:
        _describe(body)
    title = f"kvcalc {command} --format json"
    return {"$schema": DIALECT, "title": title, **{k: v for k, v in body.items() if k != "title"}}


def _describe(node: Any) -> None:
    """Give every property the vocabulary's meaning and unit as its description."""
    from kvcalc.render.vocabulary import VOCABULARY

    if isinstance(node, dict):
        for key, prop in node.get("properties", {}).items():
            term = VOCABULARY.get(key)
            if term is not None and isinstance(prop, dict):
                unit = f" ({term.unit})" if term.unit else ""
                prop["description"] = term.meaning + unit
        for value in node.values():
            _describe(value)
    elif isinstance(node, list):
        for value in node:
            _describe(value)


def commands() -> list[str]:
    from kvcalc.render.vocabulary import COMMANDS

    return [*COMMANDS, *REGISTRY_FORMATS]


# ------------------------------------------------------------------ keys and their types


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    return defs[ref.rsplit("/", 1)[-1]] if ref else node


def _alternatives(node: Mapping[str, Any], defs: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    node = _resolve(node, defs)
    if "anyOf" in node:
        return [a for n in node["anyOf"] for a in _alternatives(n, defs)]
    return [node]


def signature(node: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """A property's JSON type with null left out (a key may be null in one command and not in
    another): ``integer``, ``object``, ``array of string``, ``string or integer``."""
    kinds: list[str] = []
    for alt in _alternatives(node, defs):
        kind = alt.get("type", "object" if "properties" in alt else "any")
        if kind == "null":
            continue
        if kind == "array":
            items = alt.get("items", {})
            kind = f"array of {signature(items, defs)}" if items else "array"
        if kind not in kinds:
            kinds.append(kind)
    return " or ".join(kinds) or "null"


def properties(schema: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """Every (key, signature) of a schema's objects, at every depth."""
    defs = schema.get("$defs", {})
    seen: set[int] = set()

    def walk(node: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
        for alt in _alternatives(node, defs):
            if id(alt) in seen:
                continue
            seen.add(id(alt))
            for key, prop in alt.get("properties", {}).items():
                yield key, signature(prop, defs)
                yield from walk(prop)
            if alt.get("type") == "array" and alt.get("items"):
                yield from walk(alt["items"])
            extra = alt.get("additionalProperties")
            if isinstance(extra, Mapping):
                yield from walk(extra)

    yield from walk(schema)


def key_usage() -> dict[str, dict[str, set[str]]]:
    """key -> signature -> the commands whose documents hold the key with that type."""
    from kvcalc.render.vocabulary import COMMANDS

    usage: dict[str, dict[str, set[str]]] = {}
    for command in COMMANDS:
        for key, sig in properties(command_schema(command)):
            usage.setdefault(key, {}).setdefault(sig, set()).add(command)
    return usage


# ------------------------------------------------------------------ docs/json.md

INTRO = """\
# kvcalc's JSON vocabulary

<!-- Generated by `python -m kvcalc.render.schema --write` from kvcalc/render/vocabulary.py;
tests/test_schema.py fails when it is stale. Edit the declarations, not this file. -->

Every command's `--format json` (and `yaml`) document uses one vocabulary: the same key for the
same quantity in every command, with one type and one unit. Each document starts with
`schema_version`, an integer that changes when a key is renamed or removed or changes its
meaning (adding a key keeps it). This is version **2**; documents before it had no
`schema_version` and are version 1 (CHANGELOG.md lists every key renamed since). `import-hf`
prints a registry file, whose format is the registry's (docs/schema/import-hf.json), without one.

The JSON Schema of each command is in [docs/schema/](schema/) (`batch` has five shapes: one
model, the whole registry, `--engine vllm`, `--engine sglang`, `--engine trtllm`; `models` and
`gpus` one more for `--check`). Keys not listed there are refused by the tests, so a new key is
documented here before it ships.

## Rules

- Bytes, tokens and seconds are raw numbers (integers for bytes and tokens), never humanised.
  Infinity and NaN are `null`.
- A byte figure without a suffix is the whole model's (all the GPUs of a replica); `_per_gpu`
  marks one GPU's share: `kv_bytes_per_sequence` (size, sweep, compare, offload) is one sequence's
  cache, `kv_bytes_per_sequence_per_gpu` (batch) one GPU's part of it. A serving engine's own
  figures, named after what its log prints (SGLang's `cell_size_bytes`, `kv_pool_bytes`,
  `free_before_load_bytes`; vLLM's `available_bytes_per_gpu`), are one rank's, as it reports them.
- `tpot_seconds`, `ttft_seconds` and `tokens_per_second` are the realistic estimate of `kvcalc
  decode` in every command (null when it cannot be made: a multi-GPU replica on a GPU with no
  link speed, or a point that is not timed); the bound is beside them with a `roofline_` prefix.
  The tables print what they printed before (`sweep`'s and `compare`'s TPOT column and charts are
  the roofline, `plan`'s the basis the targets hold to, `latency`).
- `max_batch` is the sequences of the context that fit at once across all replicas;
  `max_batch_per_replica` one replica's. A serving engine's own figures keep its names beside
  them, where they mean something else: vLLM's `max_concurrency` (a ratio for one server, as its
  log prints it; `max_batch_per_replica` is it floored), SGLang's `max_running_requests` (a cap
  on running requests, not what fits).
- `contexts` is the list of per-context entries, each with its `context_tokens`
  (`context_tokens_list` the lengths asked for, where a list of numbers is meant).
- `gpus` is a GPU set: `{"id": "8xH100-SXM", "label": "8x NVIDIA H100 SXM5 80GB", "accelerator":
  "h100-sxm", "count": 8}`; `id` is what `--gpus` takes, `label` what the text prints.
  `kvcalc gpus` lists the registry under `accelerators`.
- `model` is a registry id, `model_name` its name; `reason` says why something does not fit (or
  why a row is left out), null otherwise; `warnings` is present only when there is one.
- CSV rows hold the same keys, nested objects flattened as `parent_child` (`gpus_id`,
  `gpus_label`, ...), lists `;`-joined; `eviction` is its `policy` there.

## Keys

"""


def _commands_cell(usage: Mapping[str, set[str]]) -> str:
    from kvcalc.render.vocabulary import COMMANDS

    used = set().union(*usage.values())
    return ", ".join(c for c in COMMANDS if c in used)


def json_md() -> str:
    from kvcalc.render.vocabulary import VOCABULARY

    usage = key_usage()
    rows = ["| key | type | unit | meaning | commands |", "| --- | --- | --- | --- | --- |"]
    for key in sorted(usage):
        term = VOCABULARY[key]
        types = " / ".join(sorted(usage[key]))
        cell = term.meaning.replace("|", "\\|")
        rows.append(f"| `{key}` | {types} | {term.unit} | {cell} | {_commands_cell(usage[key])} |")
    files = [f"- `{c}`: [schema/{c}.json](schema/{c}.json)" for c in commands()]
    return INTRO + "\n".join(rows) + "\n\n## Schemas\n\n" + "\n".join(files) + "\n"


# ------------------------------------------------------------------ the files


def generated() -> dict[Path, str]:
    """Every generated file and its text."""
    files = {
        SCHEMA_DIR / f"{c}.json": json.dumps(command_schema(c), indent=2) + "\n"
        for c in commands()
    }
    files[JSON_MD] = json_md()
    return files


def stale() -> list[Path]:
    return [p for p, text in generated().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        SCHEMA_DIR.mkdir(parents=True, exist_ok=True)
        for path, text in generated().items():
            path.write_text(text)
        return 0
    if argv == ["--check"]:
        old = stale()
        sys.stderr.writelines(
            f"{path}: stale; run python -m kvcalc.render.schema --write\n" for path in old
        )
        return 1 if old else 0
    sys.stderr.write("usage: python -m kvcalc.render.schema --write | --check\n")
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
