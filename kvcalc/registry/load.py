"""Loading registry files: locate them, parse YAML safely, validate, and resolve names.

Loading is lazy: resolving ``llama3-70b`` reads ``models/llama3-70b.yaml`` and nothing else; the
other files are read only to resolve an alias or to suggest close names after a miss.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kvcalc.engine.spec import ModelSpec
    from kvcalc.registry.schema import ModelFile

    M = TypeVar("M", bound=BaseModel)

#: Registry files larger than this are refused before parsing (a hostile or mistaken file).
MAX_FILE_BYTES = 1 << 20


class RegistryError(Exception):
    """Bad registry data or an unknown name. The message is one line naming the file and field."""


class UnknownNameError(RegistryError):
    """A model or accelerator name that is not in the registry; carries the closest names."""

    def __init__(self, what: str, name: str, suggestions: list[str]) -> None:
        hint = f"; did you mean {', '.join(suggestions)}?" if suggestions else ""
        super().__init__(f"unknown {what} {name!r}{hint} (list them with `kvcalc {what}s`)")
        self.name = name
        self.suggestions = suggestions


def registry_root() -> Path:
    """The registry directory: $KVCALC_REGISTRY, else the copy shipped in the wheel, else the
    source tree's model_configs/ (editable installs)."""
    env = os.environ.get("KVCALC_REGISTRY")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent
    packaged = here / "model_configs"
    return packaged if packaged.is_dir() else here.parent / "model_configs"


def read_text(path: Path, what: str = "a registry file") -> str:
    """A file's text, refusing missing, unreadable and oversized files with one line."""
    try:
        st = path.stat()  # follows symlinks: the hub cache links snapshots to blobs
    except FileNotFoundError:
        raise RegistryError(f"{path}: file not found") from None
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror}") from None
    # A FIFO or device would block or stream without end; only regular files are read.
    if not stat.S_ISREG(st.st_mode):
        raise RegistryError(f"{path}: not a regular file")
    size = st.st_size
    if size > MAX_FILE_BYTES:
        raise RegistryError(f"{path}: {size:,} bytes is too large for {what}")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{path}: cannot read: {exc}") from None


def read_yaml(path: Path) -> Any:
    """Parse one YAML file with the safe loader; every failure becomes a one-line RegistryError."""
    import yaml

    text = read_text(path)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        data = yaml.load(text, Loader=loader)  # a safe loader, never yaml.Loader
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: invalid YAML: {_one_line(exc)}") from None
    _refuse_aliases(path, data)
    return data


def _refuse_aliases(path: Path, data: Any) -> None:
    # YAML anchors/aliases can make a tiny file expand exponentially ("billion laughs") once
    # validated; registry files have no use for them.
    seen: set[int] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, (dict, list)):
            if id(node) in seen:
                raise RegistryError(f"{path}: YAML anchors and aliases are not allowed")
            seen.add(id(node))
            stack.extend(node.values() if isinstance(node, dict) else node)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())


def validate(path: Path, data: Any, schema: type[M]) -> M:
    """Validate parsed YAML against a schema; the first error names the file and the field."""
    from pydantic import ValidationError

    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a mapping at the top level")
    try:
        validated: M = schema.model_validate(data)
        return validated
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        loc = ".".join(str(p) for p in first["loc"]) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        msg = first["msg"]
        if first["type"] == "extra_forbidden":
            msg = "unknown key"
        elif first["type"] == "missing":
            msg = "missing required field"
        raise RegistryError(f"{path}: {loc}: {msg}{more}") from None


# ---------------------------------------------------------------- models


def models_dir(root: Path | None = None) -> Path:
    return (root or registry_root()) / "models"


def load_entry(path: Path, schema: type[M]) -> M:
    """One registry file validated against ``schema``; its ``id`` must be its file name."""
    entry = validate(path, read_yaml(path), schema)
    entry_id = getattr(entry, "id", None)
    if entry_id != path.stem:
        raise RegistryError(f"{path}: id: {entry_id!r} must match the file name {path.stem!r}")
    return entry


def check_entries(paths: list[Path], load: Callable[[Path], Any]) -> list[str]:
    """Validate registry files: one message per bad file, and one per name (id or alias) that
    two files claim. Empty when all are good."""
    problems: list[str] = []
    seen: dict[str, Path] = {}
    for path in paths:
        try:
            entry = load(path)
        except RegistryError as exc:
            problems.append(str(exc))
            continue
        for name in entry.names():
            key = name.lower()
            if key in seen and seen[key] != path:
                problems.append(f"{path}: name {name!r} is already used by {seen[key].name}")
            seen[key] = path
    return problems


def load_model_file(path: Path) -> ModelFile:
    from kvcalc.registry.schema import ModelFile

    return load_entry(path, ModelFile)


def model_paths(root: Path | None = None) -> list[Path]:
    directory = models_dir(root)
    if not directory.is_dir():
        raise RegistryError(f"{directory}: registry directory not found (set KVCALC_REGISTRY)")
    return sorted(directory.glob("*.yaml"))


def _name_index(directory: Path) -> dict[str, Path]:
    """Every name (id, HF repo id, alias; lowercased) of a registry directory -> its file.

    Cached under the directory's listing with each file's size and modification time, so an
    alias lookup does not parse every file on every run; any edit rebuilds it.
    """
    from kvcalc.registry.cache import cached

    paths = sorted(directory.glob("*.yaml"))
    return cached(_listing(paths), lambda: _build_name_index(paths), "names")


def _build_name_index(paths: list[Path]) -> dict[str, Path]:
    index: dict[str, Path] = {}
    for path in paths:
        data = read_yaml(path)
        if not isinstance(data, dict):
            continue
        names = [path.stem, data.get("id"), data.get("hf_repo"), *(data.get("aliases") or [])]
        for name in names:
            if isinstance(name, str):
                index.setdefault(name.strip().lower(), path)
    return index


def find_model_path(name: str, root: Path | None = None) -> Path:
    """The registry file of a name (id, HF repo id or alias, case-insensitive)."""
    return find_path("model", name, models_dir(root))


_FILE_KEY = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


def find_path(what: str, name: str, directory: Path) -> Path:
    """The file of ``name`` in a registry directory: ``<name>.yaml`` directly (reading nothing
    else), else through the name index of ids and aliases; a miss suggests the closest names."""
    key = name.strip().lower()
    if _FILE_KEY.match(key):
        direct = directory / f"{key}.yaml"
        if direct.is_file():
            return direct
    if not directory.is_dir():
        raise RegistryError(f"{directory}: registry directory not found (set KVCALC_REGISTRY)")
    index = _name_index(directory)
    if key in index:
        return index[key]
    raise UnknownNameError(what, name, close_names(key, index))


def find_model(name: str, root: Path | None = None) -> ModelFile:
    """Resolve a registry name (id, HF repo id or alias, case-insensitive) to its model file."""
    return load_model_file(find_model_path(name, root))


def close_names(key: str, index: dict[str, Path], n: int = 3) -> list[str]:
    """The closest registry names, by similarity of the lowercased strings."""
    import difflib

    candidates = difflib.get_close_matches(key, list(index), n=n * 3, cutoff=0.5)
    # Prefer the file id over its aliases, and do not list one model twice.
    out: list[str] = []
    seen: set[Path] = set()
    for cand in candidates:
        path = index[cand]
        if path not in seen:
            seen.add(path)
            out.append(path.stem if cand != path.stem and cand.count("/") else cand)
        if len(out) == n:
            break
    return out


def all_models(root: Path | None = None) -> list[ModelFile]:
    return [load_model_file(p) for p in model_paths(root)]


def check_models(root: Path | None = None) -> list[str]:
    """Validate every model file; returns one message per problem (empty when all are good)."""
    return check_entries(model_paths(root), load_model_file)


def is_config_path(name: str) -> bool:
    """Whether MODEL names a config.json (or the folder holding one) rather than a name."""
    path = Path(name)
    return name.endswith(".json") or path.is_dir() or path.is_file()


def resolve_model(name: str) -> ModelSpec:
    """MODEL as the CLI takes it: a path to a config.json (or its folder), a registry name, or
    else a Hugging Face repo id (``org/name[@revision]``). Registry names win over repo ids:
    a repo the registry lists resolves to its reviewed entry, with no cache or network read."""
    if is_config_path(name):
        from kvcalc.registry.hf import load_hf_config

        return load_hf_config(name)
    from kvcalc.registry.cache import cached_spec

    try:
        path = find_model_path(name)
    except UnknownNameError:
        from kvcalc.registry.hub import is_repo_id_like

        if not is_repo_id_like(name):
            raise
        return hub_model(name)
    return cached_spec(path, lambda: load_model_file(path).to_spec())


def hub_model(name: str) -> ModelSpec:
    """A Hub repo's config.json as a spec, named after the repo (``Qwen/Qwen2.5-7B-Instruct``,
    id ``qwen2.5-7b-instruct``) rather than its snapshot folder."""
    from kvcalc.registry.hf import load_hf_config, slug
    from kvcalc.registry.hub import hub_config

    found = hub_config(name)
    return load_hf_config(found.path, slug(found.repo.name), str(found.repo))


def all_model_specs(root: Path | None = None) -> list[ModelSpec]:
    """Every registry model as an engine spec, cached as one entry under the directory listing
    (names, sizes, modification times): one cache read instead of one per file."""
    from kvcalc.registry.cache import cached

    paths = model_paths(root)
    return cached(
        _listing(paths), lambda: [load_model_file(p).to_spec() for p in paths], "all-models"
    )


def _listing(paths: list[Path]) -> bytes:
    lines = []
    for path in paths:
        st = path.stat()
        lines.append(f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}")
    return "\n".join(lines).encode()
