"""A cache of validated registry entries, so a command does not pay for pydantic at start-up.

Importing pydantic's BaseModel and building the registry schema costs about 100 ms, more than
the rest of a `kvcalc size` run. A file's validated spec depends only on its bytes and on the
code that validates it, so the spec is cached under a key made of both (the YAML bytes, the
schema and spec sources, the kvcalc version): any edit to the file or to the schema misses the
cache and is validated again. The cache lives in $KVCALC_CACHE_DIR, else $XDG_CACHE_HOME/kvcalc,
else ~/.cache/kvcalc; KVCALC_NO_CACHE=1 turns it off. An unwritable or corrupt cache is ignored.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

import kvcalc

T = TypeVar("T")

try:  # CPython's built-in BLAKE2: same digest as hashlib's, without loading OpenSSL (~2 ms).
    from _blake2 import blake2b as _hash
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import blake2b as _hash

_CODE_FILES = (
    "registry/schema.py",
    "registry/gpu_schema.py",
    "registry/load.py",
    "engine/spec.py",
    "engine/hardware.py",
)
#: Folders whose every module is code the cached specs depend on: the mixer kinds, one module
#: each, so that a new or edited kind misses the cache without being listed here.
_CODE_DIRS = ("engine/mixers",)


def cache_dir() -> Path | None:
    if os.environ.get("KVCALC_NO_CACHE"):
        return None
    explicit = os.environ.get("KVCALC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvcalc"


def code_files(package: Path) -> list[str]:
    """The sources, relative to the package, that the cache key covers."""
    names = list(_CODE_FILES)
    for folder in _CODE_DIRS:
        names.extend(sorted(f"{folder}/{p.name}" for p in (package / folder).glob("*.py")))
    return names


@lru_cache(maxsize=1)
def _code_digest() -> bytes:
    package = Path(kvcalc.__file__).parent
    digest = _hash(kvcalc.__version__.encode())
    for name in code_files(package):
        try:
            digest.update((package / name).read_bytes())
        except OSError:
            digest.update(name.encode())
    return digest.digest()


def cache_key(data: bytes, kind: str) -> str:
    return _hash(_code_digest() + kind.encode() + b"\0" + data).hexdigest()


def cached_spec(path: Path, build: Callable[[], T], kind: str = "model") -> T:
    """``build()``'s result for the file at ``path``, from the cache when the file and the code
    are unchanged. Errors from ``build`` are never cached: a bad file fails every time."""
    try:
        data = path.read_bytes()
    except OSError:
        return build()
    return cached(data, build, kind)


def cached(data: bytes, build: Callable[[], T], kind: str) -> T:
    """``build()``'s result, cached under the content ``data`` it is derived from."""
    directory = cache_dir()
    if directory is None:
        return build()
    key = cache_key(data, kind)
    entry = directory / f"{key}.pickle"
    try:
        with entry.open("rb") as fh:
            hit: T = pickle.load(fh)  # our own cache, written below
            return hit
    except Exception:  # noqa: BLE001 - a missing or corrupt entry just means "rebuild"
        pass
    value = build()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, entry)
    except OSError:
        pass
    return value
