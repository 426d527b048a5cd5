"""`kvcalc import-hf`: a config.json (a path or a Hub repo id) as a registry file for review.

The entry is the mapping a registry file holds (kvcalc/registry/schema.py ``ModelFile``), in the
key order of the hand-written files, and is validated by that schema before it is returned, so
what `import-hf` prints loads with the registry loader to the spec the config.json imports to.
It is marked ``verification: unreviewed``: a person compares it with the model card, fills in
the parameter count and aliases, and sets the level the sources support.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.registry.hf.importer import ImportedConfig, import_hf_config, slug
from kvcalc.registry.load import REGISTRY_ID, RegistryError, is_config_path, validate

if TYPE_CHECKING:
    from kvcalc.registry.schema import Architecture

UNREVIEWED = "unreviewed"
#: How an ``unverified`` line about a family default the config.json left out starts.
ASSUMED = "architecture: "
PARAMS_STATED = "UNVERIFIED: config.json states no parameter count; take it from the model card"
NOTES = (
    "Written by `kvcalc import-hf` from the config.json under source. Review it against the "
    "model card: fill in params and aliases, then set verification to the level the sources "
    "support."
)


@dataclass(frozen=True)
class ImportOrigin:
    """Where an imported config.json came from: the Hub repo it belongs to, and the source a
    reviewer opens (the Hub page at the commit read, or the path given)."""

    hf_repo: str
    source: str


def import_entry(
    config_or_id: str, name: str | None = None, hf_repo: str | None = None
) -> dict[str, Any]:
    """The registry entry of a config.json path or a Hub repo id (``org/name[@revision]``).
    ``name`` sets the id (default: the repo's name, lowercased); ``hf_repo`` names the repo of
    a config.json path that does not state it."""
    if is_config_path(config_or_id):
        imported = import_hf_config(config_or_id)
        origin = path_origin(imported, hf_repo)
    else:
        from kvcalc.registry.hub import HubError, hub_config, is_repo_id_like

        if not is_repo_id_like(config_or_id):
            if "/" in config_or_id or "\\" in config_or_id:
                raise RegistryError(f"{config_or_id}: no such file or folder")
            raise HubError(
                f"{config_or_id!r} is neither a config.json path nor a Hugging Face repo id "
                "(ORG/NAME or ORG/NAME@REVISION); registry models are already in "
                "model_configs/models/"
            )
        if hf_repo is not None:
            raise RegistryError("--hf-repo: only for a config.json path; a repo id names its repo")
        try:
            found = hub_config(config_or_id)
        except HubError as exc:
            raise HubError(f"{exc}{variant_hint(config_or_id)}") from None
        imported = import_hf_config(found.path)
        origin = ImportOrigin(found.repo.repo, found.source_url())
    repo_name = origin.hf_repo.split("/", 1)[1]
    # None is "not given"; a given blank is checked (and refused) as the id it is not.
    return registry_entry(imported, slug(repo_name) if name is None else name, repo_name, origin)


def path_origin(imported: ImportedConfig, hf_repo: str | None) -> ImportOrigin:
    """A config.json path's repo: ``--hf-repo``, else the repo of the Hugging Face cache
    folder it is in (its source then the Hub page at that commit), else the ``_name_or_path``
    it states (which a re-saved copy may have kept from its base model)."""
    from kvcalc.registry.hub import cache_origin, parse_repo_id

    cached = cache_origin(imported.path)
    if hf_repo is None and cached is not None:
        return ImportOrigin(cached.repo.repo, cached.source_url())
    # None is "not given"; a given blank is parsed (and refused) as the repo id it is not.
    repo = imported.repo if hf_repo is None else hf_repo
    if repo is None:
        raise RegistryError(
            f"--hf-repo: {imported.path} does not state its Hugging Face repo "
            "(_name_or_path); give it, e.g. --hf-repo Qwen/Qwen2.5-7B-Instruct"
        )
    try:
        parsed = parse_repo_id(repo)
    except RegistryError as exc:
        raise RegistryError(f"--hf-repo: {exc}") from None
    if parsed.revision is not None:
        raise RegistryError(f"--hf-repo: {repo!r}: give the repo without @revision")
    return ImportOrigin(parsed.repo, str(imported.path))


def registry_entry(
    imported: ImportedConfig, model_id: str, name: str, origin: ImportOrigin
) -> dict[str, Any]:
    """The registry file mapping of an imported config.json, validated by the registry schema."""
    from kvcalc.registry.schema import ModelFile

    if not REGISTRY_ID.fullmatch(model_id):
        raise RegistryError(
            f"--name: {model_id!r}: use lowercase letters, digits, '.' and '-' (it is the id "
            "and the file name NAME.yaml)"
        )
    entry: dict[str, Any] = {
        "id": model_id,
        "name": name,
        "family": imported.family,
        "hf_repo": origin.hf_repo,
        "aliases": [],
        "verification": UNREVIEWED,
        "unverified": [
            "params: config.json states no parameter count",
            *(f"{ASSUMED}{w.removeprefix(f'{imported.path}: ')}" for w in imported.assumed),
        ],
        "source": [origin.source],
        "notes": NOTES,
        "dtype": imported.dtype,
        "max_context": imported.max_context,
        "params": {"total": None, "active": None, "stated": PARAMS_STATED},
        **weights_mapping(imported),
        "architecture": architecture_mapping(imported.architecture),
    }
    validate(Path(f"{model_id}.yaml"), entry, ModelFile)
    return entry


def weights_mapping(imported: ImportedConfig) -> dict[str, Any]:
    """The ``weights:`` block of a quantized checkpoint (none for one at its dtype); a format a
    registry file cannot state is refused rather than written as the dtype."""
    from kvcalc.registry.schema import NAMED_FORMATS, Weights

    if imported.checkpoint is None:
        return {}
    source = f"{imported.path} quantization_config"
    weights = Weights.of(imported.checkpoint, imported.dtype, source)
    if weights is None:
        raise RegistryError(
            f"{imported.path}: quantization_config: its format ({imported.checkpoint.name}) has "
            f"no registry weights: form (one of {', '.join(NAMED_FORMATS)}, on every layer "
            "matrix, the routed experts only, or one on the layers and another on the experts); "
            "size the config.json itself, e.g. "
            "`kvcalc batch PATH --gpus ...`"
        )
    return {"weights": weights.model_dump(mode="json", exclude_defaults=True)}


def architecture_mapping(arch: Architecture) -> dict[str, Any]:
    """The ``architecture`` block as a registry file writes it: only what differs from the
    schema defaults (the loader restores them), each mixer's ``kind`` first."""
    data: dict[str, Any] = arch.model_dump(mode="json", exclude_defaults=True)
    data["mixers"] = {
        key: {"kind": mixer["kind"], **{k: v for k, v in mixer.items() if k != "kind"}}
        for key, mixer in data["mixers"].items()
    }
    # The schema makes the pattern optional with one mixer, as the hand-written files omit it.
    if len(data["mixers"]) == 1 and data.get("pattern") == list(data["mixers"]):
        del data["pattern"]
    return data


def registry_clashes(entry: dict[str, Any]) -> list[str]:
    """Warnings for an entry whose id or repo already names a registry model: two files
    claiming one name fail `kvcalc models --check`."""
    from kvcalc.registry.load import find_model_path

    owners: dict[Path, list[str]] = {}
    for field in ("id", "hf_repo"):
        try:
            owners.setdefault(find_model_path(entry[field]), []).append(repr(entry[field]))
        except RegistryError:
            continue
    return [
        f"warning: {' and '.join(names)} already name registry model {owner.stem} ({owner}); "
        "give --name, or edit that file instead"
        for owner, names in owners.items()
    ]


def assumed_warnings(entry: dict[str, Any]) -> list[str]:
    """A warning for each family default the entry's architecture rests on (its ``unverified``
    lines about the architecture): the config.json did not state them."""
    return [
        f"warning: {entry['id']}: {line.removeprefix(ASSUMED)}; check it against the model card"
        for line in entry["unverified"]
        if line.startswith(ASSUMED)
    ]


def variant_hint(repo: str) -> str:
    """For a repo the registry resolves as a published variant: that the other commands size it
    offline from the registry entry (empty otherwise)."""
    from kvcalc.registry.load import find_model_variant

    try:
        variant = find_model_variant(repo)
    except RegistryError:
        return ""
    if variant is None:
        return ""
    return (
        f" (the other commands size {repo} offline as registry model {variant.path.stem}, "
        f"e.g. `kvcalc size {repo}`)"
    )
