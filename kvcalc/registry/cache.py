"""A cache of validated registry entries, so a command does not pay for pydantic at start-up.

Importing pydantic's BaseModel and building the registry schema costs about 100 ms, more than
the rest of a `kvcalc size` run. A file's validated spec depends only on its bytes and on the
code that builds it, so the spec is cached under a key made of both (the YAML bytes, every
source file of the installed package, the kvcalc version): any edit to the file or to any
module misses the cache and is validated again. Every key is made of content, never of sizes
or modification times, so an edit that keeps both still misses (the source's digest itself is
memoised under the files' stat, whose change time every edit sets:
:func:`memoised_package_digest`). The cache lives in
$KVCALC_CACHE_DIR, else $XDG_CACHE_HOME/kvcalc, else ~/.cache/kvcalc; KVCALC_NO_CACHE=1 turns it
off.

Safe by construction: an entry is plain JSON (:mod:`kvcalc.registry.plain`), never a pickle, so
a writable cache cannot run code; what is read back is checked against the declared type of the
value, and an entry that is not a regular file, is too large, truncated, or of the wrong shape
is a miss (rebuilt from the registry file), never an error. An unwritable cache is ignored.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import kvcalc

T = TypeVar("T")

try:  # CPython's built-in BLAKE2: same digest as hashlib's, without loading OpenSSL (~2 ms).
    from _blake2 import blake2b as _hash
except ImportError:  # pragma: no cover - other interpreters
    from hashlib import blake2b as _hash

def cache_dir() -> Path | None:
    if os.environ.get("KVCALC_NO_CACHE"):
        return None
    explicit = os.environ.get("KVCALC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kvcalc"


def cache_key(data: bytes, kind: str) -> str:
    return _hash(_package_digest() + kind.encode() + b"\0" + data).hexdigest()


#: An entry larger than this is not one kvcalc wrote (the whole registry's specs take ~200 KB).
MAX_ENTRY_BYTES = 16 << 20


def cached_spec(path: Path, build: Callable[[], T], hint: Any, kind: str = "model") -> T:
    """``build()``'s result (of type ``hint``) for the file at ``path``, from the cache when the
    file and the code are unchanged. Errors from ``build`` are never cached: a bad file fails
    every time."""
    from kvcalc.registry.load import RegistryError, read_bytes

    try:
        data = read_bytes(path)
    except RegistryError:
        return build()  # build() reads the file again and reports the problem
    return cached(data, build, kind, hint)


def cached(data: bytes, build: Callable[[], T], kind: str, hint: Any) -> T:
    """``build()``'s result, of type ``hint``, cached under the content ``data`` it is derived
    from."""
    directory = cache_dir()
    if directory is None:
        return build()
    entry = directory / f"{cache_key(data, kind)}.json"
    hit = _read_entry(entry, hint)
    if hit is not None:
        value: T = hit[0]
        return value
    value = build()
    _write_entry(directory, entry, value)
    return value


def _read_entry(entry: Path, hint: Any) -> tuple[Any] | None:
    """(the cached value,) or None for a miss: absent, not a regular file, too large, not
    JSON, or not of type ``hint``."""
    import json

    from kvcalc.registry.plain import PlainError, from_plain

    raw = _regular_file_bytes(entry)
    if raw is None:
        return None
    try:
        return (from_plain(json.loads(raw, parse_constant=_refuse_constant), hint),)
    except (ValueError, RecursionError, PlainError):  # JSONDecodeError and UnicodeError too
        return None


def _regular_file_bytes(entry: Path) -> bytes | None:
    """The entry's bytes, or None for anything :func:`read_bytes` refuses (a FIFO or a link
    planted at the entry's name, an oversized file)."""
    from kvcalc.registry.load import RegistryError, read_bytes

    try:
        return read_bytes(entry, "a cache entry", MAX_ENTRY_BYTES, follow_links=False)
    except RegistryError:
        return None


def _refuse_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number kvcalc caches")


def _write_entry(directory: Path, entry: Path, value: Any) -> None:
    """Store ``value`` as plain JSON; a value without a plain form, or an unwritable cache,
    just stays uncached."""
    import json

    from kvcalc.registry.plain import PlainError, to_plain

    try:
        text = json.dumps(to_plain(value), separators=(",", ":"), allow_nan=False)
    except (PlainError, ValueError, RecursionError):
        return
    _write_file(directory, entry, text)


def _write_file(directory: Path, entry: Path, text: str) -> None:
    """``text`` at ``entry``, whole or not at all (written aside, then renamed); an unwritable
    cache is ignored."""
    tmp = entry.with_name(f"{entry.stem}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # O_EXCL | O_NOFOLLOW: never write through a file or link someone else put there.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(tmp, flags, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, entry)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def files_content(paths: list[Path]) -> bytes:
    """What a cache entry derived from several files is keyed by: each file's name, length and
    bytes. Reading a few dozen small files costs far less than parsing them, and unlike sizes
    and modification times it changes with every edit. An unreadable file is keyed by its
    name alone (building the entry then reports it)."""
    from kvcalc.registry.load import RegistryError, read_bytes

    parts = []
    for path in paths:
        try:
            data = read_bytes(path)
        except RegistryError:
            data = b"\xff unreadable"
        parts.append(b"%s\0%d\0%s" % (os.fsencode(os.path.abspath(path)), len(data), data))
    return b"\0".join(parts)


# ---------------------------------------------------------------- listing rows

#: A row's shape: a mapping of its keys, in order, to a type (``int | None``), a nested shape,
#: or a one-item list of a shape (a list of such values).
Shape = Mapping[str, Any]


@lru_cache(maxsize=1)
def _package_digest() -> bytes:
    """The digest of kvcalc's installed source: every key includes it, so that an edit to any
    module misses the cache. A spec is validated by the schema and rebuilt into engine objects,
    and a listing row is computed by render code as much: no hand-kept list of the modules a
    value depends on can stay true, so the key covers them all."""
    return memoised_package_digest(Path(kvcalc.__file__).parent, kvcalc.__version__, cache_dir())


def package_digest(package: Path, version: str) -> bytes:
    """The digest of every ``.py`` file under ``package`` (names and contents, in a fixed
    order) and the ``version``: content, never sizes or modification times."""
    digest = _hash(version.encode())
    for name, path in _source_files(package):
        digest.update(name.encode() + b"\0")
        try:
            with open(path, "rb") as fh:
                digest.update(fh.read())
        except OSError:
            digest.update(b"\xff unreadable")
        digest.update(b"\0")
    return digest.digest()


#: No memo is written while a source file changed less than this long ago (in ns): within its
#: file system's timestamp granularity (2 s on FAT) a second edit of the same size could leave
#: every stat field as the first left it (git's "racily clean" index entries).
SETTLED_NS = 2_000_000_000


def memoised_package_digest(package: Path, version: str, directory: Path | None) -> bytes:
    """:func:`package_digest`, kept in ``directory`` under a key made of every source file's
    stat (name, size, modification and change times, inode, device), so a warm run reads ~170
    stats instead of 1.6 MB of source (~8 ms on a slow core). Every edit sets the change time,
    which no program can set back, so an edited file always misses the memo and the content is
    hashed again; an unreadable, planted or malformed memo is a miss too."""
    if directory is None:
        return package_digest(package, version)
    files = list(_source_files(package))
    try:
        stats = [os.stat(path) for _, path in files]
    except OSError:
        return package_digest(package, version)
    signature = _hash(version.encode())
    for (name, _), st in zip(files, stats, strict=True):
        signature.update(b"%s\0%d %d %d %d %d\0" % (
            name.encode(), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev
        ))
    memo = directory / f"source-{signature.hexdigest()}.digest"
    raw = _regular_file_bytes(memo)
    if raw is not None:
        try:
            stored = bytes.fromhex(raw.decode("ascii"))
        except ValueError:  # UnicodeDecodeError too
            stored = b""
        if len(stored) == _hash().digest_size:
            return stored
    digest = package_digest(package, version)
    newest_ns = max((max(st.st_mtime_ns, st.st_ctime_ns) for st in stats), default=0)
    if time.time_ns() - newest_ns >= SETTLED_NS:
        _write_file(directory, memo, digest.hex())
    return digest


def _source_files(package: Path) -> Iterator[tuple[str, str]]:
    """(name relative to ``package``, path) of every ``.py`` file under it, in a fixed order."""
    for folder, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(f for f in files if f.endswith(".py")):
            path = os.path.join(folder, name)
            yield os.path.relpath(path, package), path


def shape_hint(shape: Any) -> Any:
    """The type a row of ``shape`` is stored as: a fixed-length tuple per mapping, in key
    order, so every value is read back as exactly the type its key declares."""
    if isinstance(shape, Mapping):
        return tuple[tuple(shape_hint(s) for s in shape.values())]  # type: ignore[misc]
    if isinstance(shape, list):
        return list[shape_hint(shape[0])]  # type: ignore[misc]
    return shape


def packed(value: Any, shape: Any) -> Any:
    """``value`` in its stored form; PlainError when its keys are not the shape's."""
    from kvcalc.registry.plain import PlainError

    if isinstance(shape, Mapping):
        if not isinstance(value, Mapping) or list(value) != list(shape):
            raise PlainError(f"a row's keys differ from its shape's: {_keys(value)}")
        return [packed(value[k], s) for k, s in shape.items()]
    if isinstance(shape, list):
        return [packed(v, shape[0]) for v in value]
    return value


def _keys(value: Any) -> list[str]:
    return list(value) if isinstance(value, Mapping) else []


def unpacked(value: Any, shape: Any) -> Any:
    """The row (dicts and lists, as it was built) of a value read back as ``shape_hint``."""
    if isinstance(shape, Mapping):
        return {k: unpacked(v, s) for (k, s), v in zip(shape.items(), value, strict=True)}
    if isinstance(shape, list):
        return [unpacked(v, shape[0]) for v in value]
    return value


def cached_rows(
    paths: list[Path], build: Callable[[], list[dict[str, Any]]], kind: str, shape: Shape
) -> list[dict[str, Any]]:
    """``build()``'s rows, one per registry file of ``paths``, as a listing command shows them:
    cached as one entry under the files' content and kvcalc's whole source, so `kvcalc models`
    and `kvcalc gpus` neither import pydantic nor validate a file on a hit. A row is stored in
    the form of its ``shape`` and read back checked against it; a row that does not fit its
    shape stays uncached."""
    from kvcalc.registry.plain import PlainError

    directory = cache_dir()
    if directory is None:
        return build()
    key = cache_key(files_content(paths), kind)
    entry = directory / f"{key}.json"
    hit = _read_entry(entry, list[shape_hint(shape)])  # type: ignore[misc]
    if hit is not None:
        return [unpacked(row, shape) for row in hit[0]]
    rows = build()
    try:
        stored = [packed(row, shape) for row in rows]
    except PlainError:
        return rows
    _write_entry(directory, entry, stored)
    return rows
