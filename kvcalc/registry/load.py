"""Loading registry files: locate them, parse YAML safely, validate, and resolve names.

Loading is lazy: resolving ``llama3-70b`` reads ``models/llama3-70b.yaml`` and nothing else; the
other files are read only to resolve an alias or to suggest close names after a miss.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kvcalc.engine.units import shown

# Defined beside every other error, read from here by the registry.
from kvcalc.errors import RegistryError as RegistryError
from kvcalc.errors import UnknownNameError as UnknownNameError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from kvcalc.engine.spec import ModelSpec
    from kvcalc.registry.hub import HubConfig
    from kvcalc.registry.schema import ModelFile
    from kvcalc.registry.variants import Variant

    M = TypeVar("M", bound=BaseModel)

#: Registry files larger than this are refused before parsing (a hostile or mistaken file).
MAX_FILE_BYTES = 1 << 20


def registry_root() -> Path:
    """The registry directory: $KVCALC_REGISTRY, else the copy shipped in the wheel, else the
    source tree's model_configs/ (editable installs)."""
    env = os.environ.get("KVCALC_REGISTRY")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent.parent
    packaged = here / "model_configs"
    return packaged if packaged.is_dir() else here.parent / "model_configs"


def read_bytes(
    path: Path,
    what: str = "a registry file",
    limit: int = MAX_FILE_BYTES,
    *,
    follow_links: bool = True,
) -> bytes:
    """A file's bytes, refusing with one line what is not a regular file of at most ``limit``
    bytes: a device (/dev/zero, /dev/urandom) would fill memory, a FIFO would block, so both
    are refused from their type before any byte is read. ``follow_links=False`` refuses a
    symbolic link too (a file kvcalc writes itself, such as a cache entry)."""
    # O_NONBLOCK: opening a FIFO (even behind a symlink) would otherwise wait for a writer.
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise RegistryError(f"{path}: file not found") from None
    except OSError as exc:
        raise RegistryError(f"{shown(str(path), 200)}: cannot read: {exc.strerror}") from None
    except UnicodeEncodeError:  # a lone surrogate: no file of this name can exist here
        raise RegistryError(
            f"{shown(str(path), 200)}: cannot name a file (a character no file name encodes)"
        ) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RegistryError(
                f"{path}: not a regular file ({_file_type(info.st_mode)}); give {what}"
            )
        # Refused by its size before reading, and by what was read if it grew meanwhile.
        data = _read_at_most(fd, limit + 1, info.st_size) if info.st_size <= limit else None
    except OSError as exc:
        raise RegistryError(f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if data is None or len(data) > limit:
        raise RegistryError(f"{path}: more than {limit:,} bytes is too large for {what}")
    return data


def _read_at_most(fd: int, most: int, expected: int) -> bytes:
    """Up to ``most`` bytes of ``fd``: a file that grows while read is still bounded. Plain
    ``os.read`` calls, the first sized by ``fstat``: wrapping the descriptor in a buffered file
    cost more than the read itself, over the hundred-odd files a whole-registry command keys
    its cache by."""
    chunks: list[bytes] = []
    size = 0
    while size < most:
        chunk = os.read(fd, min(most - size, expected + 1 if not chunks else 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _file_type(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a socket or special file"


def read_text(path: Path, what: str = "a registry file") -> str:
    """A file's UTF-8 text, refusing missing, unreadable, special and oversized files."""
    try:
        return read_bytes(path, what).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RegistryError(f"{path}: cannot read: not UTF-8 text ({exc.reason})") from None


def is_file(path: Path) -> bool:
    """Whether ``path`` names an existing file; False for a name the system cannot even look up
    (too long, invalid), which then gets the error of an unknown name."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def read_yaml(path: Path) -> Any:
    """Parse one YAML file with the safe loader; every failure becomes a one-line RegistryError."""
    import yaml

    text = read_text(path)
    try:
        data = yaml.load(text, Loader=_strict_loader())  # a safe loader, never yaml.Loader
    except yaml.YAMLError as exc:
        raise RegistryError(f"{path}: invalid YAML: {_one_line(exc)}") from None
    except (ValueError, RecursionError) as exc:  # a value the safe constructors cannot build
        raise RegistryError(f"{path}: invalid YAML: {_one_line(exc)}") from None
    _refuse_aliases(path, data)
    return data


@functools.lru_cache(maxsize=1)
def _strict_loader() -> type:
    """The safe loader (C-accelerated where available), refusing a key given twice in one
    mapping (YAML keeps the last silently, so a pasted duplicate would change a number) and
    integers that break the number rule of every input (:func:`number_text_problem`)."""
    import yaml

    from kvcalc.engine.units import number_text_problem

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    def construct_mapping(loader: Any, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: the base constructor refuses it
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is given twice", key_node.start_mark
                )
        return base.construct_mapping(loader, node, deep)

    def construct_int(loader: Any, node: Any) -> Any:
        problem = number_text_problem(str(node.value))
        if problem is not None:
            raise yaml.constructor.ConstructorError(
                None, None, f"number {shown(str(node.value))}: {problem}", node.start_mark
            )
        return base.construct_yaml_int(loader, node)

    loader = type("StrictSafeLoader", (base,), {"construct_mapping": construct_mapping})
    loader.add_constructor("tag:yaml.org,2002:int", construct_int)  # type: ignore[attr-defined]
    return loader


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
        loc = ".".join(str(p) for p in first["loc"])
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        # A rule of the whole entry (a model validator) has no field, and pydantic prefixes its
        # message; the message names its fields itself.
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            msg = "unknown key"
        elif first["type"] == "missing":
            msg = "missing required field"
        raise RegistryError(f"{path}: {loc + ': ' if loc else ''}{msg}{more}") from None


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


def require_files(paths: list[Path], directory: Path) -> list[Path]:
    """``paths``, refusing an empty list: nothing checked is not "all valid" (a mistyped
    --registry would pass CI)."""
    if not paths:
        raise RegistryError(
            f"{directory}: no registry files (*.yaml) to check; point --registry at the folder "
            "holding models/ and gpus/"
        )
    return paths


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
    return yaml_files(directory)


def yaml_files(directory: Path) -> list[Path]:
    """The ``*.yaml`` entries of a registry directory, by name (one ``scandir``: pathlib's glob
    took four times as long, and a whole-registry command lists two directories)."""
    with os.scandir(directory) as entries:
        names = sorted(e.name for e in entries if e.name.endswith(".yaml"))
    return [directory / name for name in names]


def _name_index(directory: Path) -> dict[str, str]:
    """Every name (id, HF repo id, alias; lowercased) of a registry directory -> its file's name
    in that directory (plain strings: a lookup builds one Path, not one per name).

    Cached under the content of every file of the directory, so an alias lookup does not parse
    every file on every run; any edit rebuilds it.
    """
    from kvcalc.registry.cache import cached, files_content

    paths = yaml_files(directory)
    return cached(
        files_content(paths), lambda: _build_name_index(paths), "names", dict[str, str]
    )


def _build_name_index(paths: list[Path]) -> dict[str, str]:
    index: dict[str, str] = {}
    for path in paths:
        data = read_yaml(path)
        if not isinstance(data, dict):
            continue
        names = [path.stem, data.get("id"), data.get("hf_repo"), *(data.get("aliases") or [])]
        for name in names:
            if isinstance(name, str):
                index.setdefault(name.strip().lower(), path.name)
    return index


def find_model_path(name: str, root: Path | None = None) -> Path:
    """The registry file of a name (id, HF repo id or alias, case-insensitive)."""
    return find_path("model", name, models_dir(root))


#: The registry's id rule (ModelFile.id, GpuFile.id): a registry file is
#: ``<directory>/<id>.yaml``. Test a whole name with ``fullmatch`` (``match`` lets ``$`` accept a
#: trailing newline).
REGISTRY_ID = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")
#: Longer than any registry name or alias (the longest Hugging Face repo ids are ~100): a longer
#: name is refused before it reaches the file system, which refuses names over 255 bytes.
MAX_NAME_CHARS = 200


def find_path(what: str, name: str, directory: Path) -> Path:
    """The file of ``name`` in a registry directory: ``<name>.yaml`` directly (reading nothing
    else), else through the name index of ids and aliases; a miss suggests the closest names."""
    key = name.strip().lower()
    if len(key) > MAX_NAME_CHARS:
        raise RegistryError(
            f"unknown {what} {shown(key, 100)!r}: {len(key):,} characters is longer than any "
            f"registry name (at most {MAX_NAME_CHARS}); list them with `kvcalc {what}s`"
        )
    if REGISTRY_ID.match(key):  # key is stripped: no trailing newline
        direct = directory / f"{key}.yaml"
        if is_file(direct):
            return direct
    if not directory.is_dir():
        raise RegistryError(f"{directory}: registry directory not found (set KVCALC_REGISTRY)")
    index = _name_index(directory)
    if key in index:
        return directory / index[key]
    raise UnknownNameError(what, name, close_names(key, index))


def find_model(name: str, root: Path | None = None) -> ModelFile:
    """Resolve a registry name (id, HF repo id or alias, case-insensitive) to its model file."""
    return load_model_file(find_model_path(name, root))


def close_names(key: str, index: dict[str, str], n: int = 3) -> list[str]:
    """The closest registry names, by similarity of the lowercased strings."""
    import difflib

    candidates = difflib.get_close_matches(key, list(index), n=n * 3, cutoff=0.5)
    # Prefer the file id over its aliases, and do not list one model twice.
    out: list[str] = []
    seen: set[str] = set()
    for cand in candidates:
        file = index[cand]
        stem = file.removesuffix(".yaml")
        if file not in seen:
            seen.add(file)
            out.append(stem if cand != stem and cand.count("/") else cand)
        if len(out) == n:
            break
    return out


def all_models(root: Path | None = None) -> list[ModelFile]:
    return [load_model_file(p) for p in model_paths(root)]


def check_models(root: Path | None = None) -> list[str]:
    """Validate every model file; returns one message per problem (empty when all are good)."""
    return check_entries(require_files(model_paths(root), models_dir(root)), load_model_file)


def is_config_path(name: str) -> bool:
    """Whether MODEL names a config.json (or the folder holding one) rather than a name:
    anything at the path counts (a folder included: whatever stat finds, lstat finds), and is
    refused by its type if it is not a regular file."""
    return name.endswith(".json") or exists_at(Path(name))


def resolve_model(name: str) -> ModelSpec:
    """MODEL as the CLI takes it: a path to a config.json (or its folder), a registry name, or
    else a Hugging Face repo id (``org/name[@revision]``). Registry names win over repo ids:
    a repo the registry lists resolves to its reviewed entry, with no cache or network read."""
    from kvcalc.engine.spec import ModelSpec

    if is_config_path(name):
        from kvcalc.registry.hf import load_hf_config

        return load_hf_config(name)
    from kvcalc.registry.cache import cached_spec

    try:
        path = find_model_path(name)
    except UnknownNameError:
        from kvcalc.registry.hub import cached_hub_config, is_repo_id_like

        # The repo's own config.json when the cache has it (exact, and no network), else a
        # published variant of a registry model (offline), else a download.
        repo_like = is_repo_id_like(name)
        found = cached_hub_config(name) if repo_like else None
        if found is not None:
            return hub_spec(found)
        variant = find_model_variant(name)
        if variant is not None:
            return variant_spec(variant)
        if not repo_like:
            raise
        return hub_model(name)
    return cached_spec(path, lambda: load_model_file(path).to_spec(), ModelSpec)


def find_model_variant(name: str, root: Path | None = None) -> Variant | None:
    """The registry model a published Hugging Face variant of it names (``-Instruct``, a dated
    release, an FP8 repo; :mod:`kvcalc.registry.variants`), else None."""
    from kvcalc.registry.variants import find_variant

    directory = models_dir(root)
    if len(name) > MAX_NAME_CHARS or not directory.is_dir():
        return None
    return find_variant(name, directory, _name_index(directory))


def variant_spec(variant: Variant) -> ModelSpec:
    """The registry entry's spec, named as the repo asked for, in the repo's weight format
    and with its context where they differ from the entry's."""
    from dataclasses import replace

    from kvcalc.engine.spec import ModelSpec
    from kvcalc.registry.cache import cached_spec

    path = variant.path
    spec = cached_spec(path, lambda: load_model_file(path).to_spec(), ModelSpec)
    checkpoint = spec.checkpoint
    release = variant.release
    if release is not None:
        from kvcalc.engine.weights import checkpoint_precision

        checkpoint = replace(
            checkpoint_precision(spec, release.format),
            source=f"{variant.repo}: the organisation's {release.what} release "
            f"({release.format.name})",
        )
    return replace(
        spec,
        name=variant.repo,
        checkpoint=checkpoint,
        max_context=variant.max_context or spec.max_context,
    )


def exists_at(path: Path) -> bool:
    """Whether anything (a file, a FIFO, a device, a dangling link) is at ``path``: such a MODEL
    is read as a config.json path, and refused by its type if it is not a regular file."""
    try:
        os.lstat(path)
    except (OSError, ValueError):
        return False
    return True


def hub_model(name: str) -> ModelSpec:
    """A Hub repo's config.json as a spec, named after the repo (``Qwen/Qwen2.5-7B-Instruct``,
    id ``qwen2.5-7b-instruct``) rather than its snapshot folder."""
    from kvcalc.registry.hub import hub_config

    return hub_spec(hub_config(name, registry_checked=True))


def hub_spec(found: HubConfig) -> ModelSpec:
    """A Hub config.json on disk as a spec, named after its repo."""
    from kvcalc.registry.hf import load_hf_config, slug

    return load_hf_config(found.path, slug(found.repo.name), str(found.repo))


def all_model_specs(root: Path | None = None) -> list[ModelSpec]:
    """Every registry model as an engine spec, cached as one entry under the content of every
    model file: one cache read instead of one per file."""
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.registry.cache import cached, files_content

    paths = model_paths(root)
    return cached(
        files_content(paths),
        lambda: [load_model_file(p).to_spec() for p in paths],
        "all-models",
        list[ModelSpec],
    )
