"""Hugging Face repo ids as MODEL: ``org/name`` or ``org/name@revision`` -> its config.json.

The local Hugging Face cache is read first, with no network and no dependency, in the layout
huggingface_hub writes (``file_download.try_to_load_from_cache``): ``HF_HUB_CACHE``, else
``HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` or ``~/.cache/huggingface/hub``; a repo
lives in ``models--org--name/``, ``refs/<branch or tag>`` holds a commit sha, and
``snapshots/<sha>/config.json`` is the file (usually a symlink into ``blobs/``). A revision that
is a 40-hex commit sha names its snapshot folder directly.

Only when the file is not cached is it downloaded, with the optional ``huggingface_hub``
(the ``hub`` extra; missing, the refusal names this Python's ``pip install`` of it,
:mod:`kvcalc.install`), imported here and only then: config.json alone, never weights
and never remote code. ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE``, which huggingface_hub
honours too) forbids the download; ``HF_TOKEN`` is passed for gated repos. Every failure is one
line naming the repo and the fix.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kvcalc.registry.load import RegistryError, is_file, read_text

HUB_URL = "https://huggingface.co"
#: The hub extra's requirement (pyproject.toml), installable wherever kvcalc runs.
HUB_REQUIREMENT = "huggingface_hub>=0.20"

# huggingface_hub's validate_repo_id: ASCII letters, digits, '-', '_', '.', at most 96 per part,
# not starting or ending with '-' or '.', and no '--' or '..' anywhere.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{0,94}[A-Za-z0-9_])?"
_REPO_ID = re.compile(rf"{_PART}/{_PART}")
# A branch, tag or pull-request ref (``refs/pr/1``): path components without '..'.
_REVISION = re.compile(r"[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*")
_COMMIT = re.compile(r"[0-9a-f]{40}")
#: huggingface_hub's truthy spellings of its boolean environment variables (constants._is_true).
_TRUE = {"1", "ON", "YES", "TRUE"}
_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")


class HubError(RegistryError):
    """A repo id that cannot be resolved: malformed, not cached offline, gated, unknown."""


@dataclass(frozen=True)
class RepoId:
    """A Hugging Face model repo and the revision asked for (None: the default branch)."""

    repo: str
    revision: str | None = None

    def __str__(self) -> str:
        return f"{self.repo}@{self.revision}" if self.revision else self.repo

    @property
    def name(self) -> str:
        """The repo's own name, without the organisation: ``Qwen2.5-7B-Instruct``."""
        return self.repo.split("/", 1)[1]

    def cache_folder(self) -> str:
        """The repo's folder in the hub cache (huggingface_hub's ``repo_folder_name``)."""
        return "--".join(("models", *self.repo.split("/")))


@dataclass(frozen=True)
class HubConfig:
    """A repo's config.json on disk and the commit it was read at (None when unknown)."""

    repo: RepoId
    path: Path
    commit: str | None

    def source_url(self) -> str:
        """The config.json's page on the Hub, pinned to its commit when known."""
        revision = self.commit or self.repo.revision or "main"
        return f"{HUB_URL}/{self.repo.repo}/blob/{revision}/config.json"


def is_repo_id_like(name: str) -> bool:
    """Whether MODEL is meant as a repo id: it has an ``org/`` part and is not spelled as a
    path. Single names stay registry names, so their typos get registry suggestions."""
    return "/" in name and not name.startswith(_PATH_PREFIXES)


def parse_repo_id(text: str, registry_checked: bool = False) -> RepoId:
    """``org/name`` or ``org/name@revision``, validated as the Hub validates repo ids.
    ``registry_checked``: MODEL was looked up in the registry first, and the refusal says so."""
    repo, sep, revision = text.strip().partition("@")
    if not _valid_repo(repo) or (sep and not _valid_revision(revision)):
        rule = "ORG/NAME or ORG/NAME@REVISION (letters, digits, '-', '_', '.'; at most 96 each)"
        if registry_checked:
            raise HubError(
                f"{text!r} is neither a registry name nor a Hugging Face repo id: write {rule}, "
                "a registry name (`kvcalc models`) or a path to a config.json"
            )
        raise HubError(f"{text!r} is not a Hugging Face repo id: write {rule}")
    return RepoId(repo, revision or None)


def _valid_repo(repo: str) -> bool:
    return bool(_REPO_ID.fullmatch(repo)) and "--" not in repo and ".." not in repo


def _valid_revision(revision: str) -> bool:
    return (
        len(revision) <= 255
        and bool(_REVISION.fullmatch(revision))
        and ".." not in revision.split("/")
        and "." not in revision.split("/")
    )


def hub_cache_dir() -> Path:
    """The hub cache huggingface_hub uses (constants.HF_HUB_CACHE), from the same variables."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(os.path.expandvars(os.path.expanduser(explicit)))
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "huggingface",
    )
    return Path(os.path.expandvars(os.path.expanduser(home))) / "hub"


def offline() -> str | None:
    """The variable that forbids downloads, read as huggingface_hub reads it (HF_HUB_OFFLINE,
    else TRANSFORMERS_OFFLINE, true when 1/on/yes/true); None when downloads are allowed."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(name)
        if value:
            return name if value.strip().upper() in _TRUE else None
    return None


def cached_commit(repo: RepoId, cache: Path) -> str | None:
    """The commit sha the cache holds for the revision: the revision itself when it is a sha,
    else the sha its ``refs/`` file records; None when the cache does not know the revision."""
    revision = repo.revision or "main"
    if _COMMIT.fullmatch(revision):
        return revision
    ref = cache / repo.cache_folder() / "refs" / revision
    if not is_file(ref):
        return None
    commit = read_text(ref, "a hub cache ref").strip()
    if not _COMMIT.fullmatch(commit):
        raise HubError(f"{ref}: expected a 40-hex commit sha; the hub cache entry is damaged")
    return commit


def cached_config(repo: RepoId, cache: Path) -> HubConfig | None:
    """The cached config.json of the repo at its revision, if the cache has it."""
    commit = cached_commit(repo, cache)
    if commit is None:
        return None
    path = cache / repo.cache_folder() / "snapshots" / commit / "config.json"
    return HubConfig(repo, path, commit) if is_file(path) else None


def cache_origin(path: Path) -> HubConfig | None:
    """The repo and commit of a config.json path inside a hub cache
    (``models--org--name/snapshots/<sha>/config.json``), read from the path as given."""
    parts = path.absolute().parts  # not resolve(): the snapshot entry links into blobs/
    if len(parts) < 4 or parts[-1] != "config.json" or parts[-3] != "snapshots":
        return None
    folder, commit = parts[-4], parts[-2]
    org_name = folder.split("--")
    if org_name[0] != "models" or len(org_name) != 3 or not _COMMIT.fullmatch(commit):
        return None
    repo = "/".join(org_name[1:])
    return HubConfig(RepoId(repo), path, commit) if _valid_repo(repo) else None


def cached_hub_config(text: str) -> HubConfig | None:
    """The cached config.json of a repo id (MODEL, looked up in the registry first), if the
    cache has it; a malformed id is refused."""
    return cached_config(parse_repo_id(text, registry_checked=True), hub_cache_dir())


def hub_config(text: str, registry_checked: bool = False) -> HubConfig:
    """The config.json of a repo id: from the cache, else downloaded when allowed.
    ``registry_checked``: MODEL was looked up in the registry first, and refusals say so."""
    repo = parse_repo_id(text, registry_checked)
    cache = hub_cache_dir()
    found = cached_config(repo, cache)
    if found is not None:
        return found
    missing = (
        f"{repo}: {'not a registry name and ' if registry_checked else ''}its config.json is "
        f"not in the Hugging Face cache ({cache})"
    )
    variable = offline()
    if variable:
        raise HubError(
            f"{missing}; {variable} forbids downloading it: unset {variable}, or download it "
            f"where the network is allowed with `hf download {repo.repo} config.json`"
        )
    return download_config(repo, cache, missing)


def download_config(repo: RepoId, cache: Path, missing: str) -> HubConfig:
    """Download config.json alone into the hub cache with huggingface_hub; ``missing`` says
    what was not found, for the refusal when the extra is not installed."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        from kvcalc.install import pip_install_hint

        raise HubError(
            f"{missing}; downloading it needs huggingface_hub, an optional extra; install it "
            f"with {pip_install_hint(HUB_REQUIREMENT)}"
        ) from None
    from kvcalc import __version__

    try:
        with _quiet_hub():
            path = hf_hub_download(
                repo_id=repo.repo,
                filename="config.json",
                revision=repo.revision,
                cache_dir=str(cache),
                token=os.environ.get("HF_TOKEN") or None,
                library_name="kvcalc",
                library_version=__version__,
            )
    except Exception as exc:  # noqa: BLE001 - every huggingface_hub failure is one line
        raise HubError(download_error(repo, exc)) from None
    # Typed to return a dry-run record too, which only dry_run=True produces: this is a path.
    return _downloaded(repo, Path(str(path)))


@contextmanager
def _quiet_hub() -> Iterator[None]:
    """Silence huggingface_hub on stderr while it fetches one small file: it logs each network
    retry as a warning and draws a progress bar, where kvcalc prints one line per failure."""
    try:
        from huggingface_hub.utils import disable_progress_bars
    except ImportError:  # a release (or a test double) without it
        pass
    else:
        disable_progress_bars()
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _downloaded(repo: RepoId, path: Path) -> HubConfig:
    # hf_hub_download returns snapshots/<sha>/config.json: the folder names the commit.
    commit = path.parent.name if _COMMIT.fullmatch(path.parent.name) else None
    return HubConfig(repo, path, commit)


def download_error(repo: RepoId, exc: BaseException) -> str:
    """huggingface_hub's exception as one line. Matched by class name along the MRO, so it does
    not depend on the module each huggingface_hub release defines its errors in; the most
    specific first (GatedRepoError derives from RepositoryNotFoundError)."""
    kinds = {cls.__name__ for cls in type(exc).__mro__}
    page = f"{HUB_URL}/{repo.repo}"
    if "GatedRepoError" in kinds:
        if os.environ.get("HF_TOKEN"):
            return (
                f"{repo}: gated repo and HF_TOKEN's account has no access: accept its terms at "
                f"{page} with that account"
            )
        return (
            f"{repo}: gated repo and HF_TOKEN is not set: accept its terms at {page} and set "
            "HF_TOKEN to a token of that account"
        )
    if "DisabledRepoError" in kinds:
        return f"{repo}: the repo is disabled on the Hugging Face Hub"
    if "RepositoryNotFoundError" in kinds:
        return (
            f"{repo}: no such model repo on the Hugging Face Hub (a private one needs HF_TOKEN); "
            "check the id, or use a registry name (`kvcalc models`)"
        )
    if "RevisionNotFoundError" in kinds:
        return f"{repo}: the repo has no revision {repo.revision!r}; see {page}/tree/main"
    if "OfflineModeIsEnabled" in kinds:
        return f"{repo}: config.json is not cached and huggingface_hub is in offline mode"
    if "LocalEntryNotFoundError" in kinds:
        return (
            f"{repo}: config.json is not cached and the Hugging Face Hub cannot be reached; "
            "check the network (or pass a path to a config.json)"
        )
    if kinds & {"EntryNotFoundError", "RemoteEntryNotFoundError"}:
        return f"{repo}: the repo has no config.json (kvcalc reads transformers configs only)"
    detail = " ".join(str(exc).split())[:200]
    return f"{repo}: downloading config.json failed: {type(exc).__name__}: {detail}"

