"""Published Hugging Face variants of registry models, resolved offline to their entries.

A registry file names one repo (``hf_repo``) and lists others among its aliases. Its
organisation publishes more repos of the same model, which resolve here with no cache or
network read, each only where it is documented to share the entry's architecture:

- post-training variants: the dash-separated words :data:`POST_TRAINING` (``-Instruct``,
  ``-Chat``, ``-Base``, ``-it``, ``-pt``, ``-hf``), anywhere in the name, change the weights'
  values, not their shapes (``Qwen/Qwen2.5-7B-Instruct`` is ``Qwen/Qwen2.5-7B``;
  ``mistralai/Mixtral-8x22B-Instruct-v0.1`` is ``...-v0.1`` with the word dropped). Every other
  word counts: ``-1M``, ``-VL-``, ``-Coder-``, ``-Thinking``, a date or a version is another
  model, left to the Hub;
- dated re-releases of the same architecture (:data:`DATED`);
- the releases an organisation publishes in one format (:data:`RELEASES`: Qwen's -FP8 and
  -AWQ repos), sized in it;
- :data:`DIFFERENT` lists variants the word rule would match but whose config.json differs
  (their own config.json is then read, from the Hub), and :data:`MAX_CONTEXT` those that differ
  only in the context they state.

A name without its organisation (``Llama-3.1-70B-Instruct``) resolves when one registry model
matches it under one organisation; several give one line listing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kvcalc.engine.quant import GroupScaled, WeightFormat, weight_format
from kvcalc.registry.load import RegistryError

#: Words naming a post-training stage of the same network (``Llama-2-70b-chat-hf``: chat tuned,
#: transformers format).
POST_TRAINING = frozenset({"instruct", "chat", "base", "it", "pt", "hf"})

#: Dated re-releases -> the registry repo whose architecture they keep (lowercase keys).
DATED: dict[str, str] = {
    # Model card: "DeepSeek-V3-0324 ... uses the same base model as the previous DeepSeek-V3";
    # its config.json is DeepseekV3ForCausalLM with V3's shape and FP8 block quantization.
    "deepseek-ai/deepseek-v3-0324": "deepseek-ai/DeepSeek-V3",
    # Model card: "The DeepSeek R1 model has undergone a minor version upgrade, with the current
    # version being DeepSeek-R1-0528"; same config.json shape and FP8 blocks as R1.
    "deepseek-ai/deepseek-r1-0528": "deepseek-ai/DeepSeek-R1",
}


@dataclass(frozen=True)
class Release:
    """An organisation's ``NAME<suffix>`` repos of its models named from one of ``prefixes``,
    all in one weight format."""

    prefixes: tuple[str, ...]
    suffix: str
    """The repo name's ending, lowercase (``-fp8``, ``-awq``)."""
    weights: str
    """A ``--weight-dtype`` format name, applied as :func:`checkpoint_precision` applies it
    (:data:`AWQ_INT4` for ``awq-int4``, which is no ``--weight-dtype``)."""
    what: str
    """How the source line names the release (``FP8``, ``AWQ``)."""

    @property
    def format(self) -> WeightFormat:
        return AWQ_INT4 if self.weights == "awq-int4" else weight_format(self.weights)


#: Qwen's AWQ repos as they ship (Qwen/Qwen3-32B-AWQ's quantization_config: quant_method awq,
#: bits 4, group_size 128, zero_point true, every layer matrix): int4 packed in int32, one fp16
#: scale and one packed 4-bit zero point per 128 inputs.
AWQ_INT4 = GroupScaled("int4-g128", 4, 16, 128, zero_bits=4)

#: Organisation (lowercase) -> its releases in one format. Qwen publishes every Qwen3 model as
#: NAME-FP8 in fine-grained FP8: quant_method fp8, fmt e4m3, weight_block_size [128, 128], with
#: lm_head, embeddings, norms and the MoE router kept in bf16 (modules_to_not_convert); Meta's
#: -FP8 repos (fbgemm_fp8, per row) are another format and are read from the Hub.
#: Qwen3.5 and Qwen3.6 (Qwen/Qwen3.5-35B-A3B-FP8, Qwen/Qwen3.6-27B-FP8, ...) ship the same
#: format: quant_method fp8, fmt e4m3, activation_scheme dynamic (0xBakeer/inference-atlas#145,
#: read from the served Qwen3.6-35B-A3B-FP8 checkpoint), 128-wide blocks, with the embeddings,
#: LM head, norms, router and shared-expert gates, and the Gated DeltaNet's small in_proj_b /
#: in_proj_a, conv1d, A_log and dt_bias left unconverted (AI-Hypercomputer/maxtext#5076's
#: unquantized_modules, "matching official Hugging Face quantization configs"); the vision tower
#: is partly unconverted (inference-atlas#145): kvcalc keeps it at bf16, as every format does.
#: Qwen's dense Qwen3 models also ship as NAME-AWQ (Qwen/Qwen3-4B/8B/14B/32B-AWQ): AWQ_INT4.
RELEASES: dict[str, tuple[Release, ...]] = {
    "qwen": (
        Release(("qwen3-", "qwen3.5-", "qwen3.6-"), "-fp8", "fp8-block", "FP8"),
        Release(("qwen3-",), "-awq", "awq-int4", "AWQ"),
    ),
}


#: Variants the word rule matches whose config.json differs from the registry entry's in a
#: figure kvcalc sizes: their own config.json is read (the Hub cache or a download).
DIFFERENT: dict[str, str] = {
    # model_configs/models/mixtral-8x22b.yaml notes: the Instruct tokenizer has 32768 entries.
    "mistralai/mixtral-8x22b-instruct-v0.1": "vocab_size 32768, not 32000",
}

#: Variants identical to their entry but for the context their config.json states.
MAX_CONTEXT: dict[str, int] = {
    # Qwen2.5 Instruct configs state max_position_embeddings 32768 (131072 only with YaRN):
    # tests/fixtures/hub Qwen2.5-7B-Instruct config.json, and the 72B's as copied in public test
    # code (hidden 8192, 80 layers, 8 KV heads, vocab 152064: the base's shape).
    "qwen/qwen2.5-7b-instruct": 32768,
    "qwen/qwen2.5-72b-instruct": 32768,
}


@dataclass(frozen=True)
class Variant:
    """A published repo resolved to its registry file, with what differs from the entry."""

    repo: str
    """The repo id as asked for (with its organisation filled in when it was left out)."""
    path: Path
    release: Release | None = None
    """The organisation's release in one format the repo is; None: the entry's own format."""
    max_context: int | None = None
    """The context its config.json states when it is not the entry's; None: the entry's."""


def key(repo: str) -> str:
    """``org/name`` lowercased without its post-training words: the name every post-training
    variant of one network shares."""
    org, _, name = repo.lower().partition("/")
    return f"{org}/{'-'.join(w for w in name.split('-') if w not in POST_TRAINING)}"


def repo_index(names: dict[str, str]) -> dict[str, set[str]]:
    """Every registry repo id (``hf_repo`` and repo aliases) by :func:`key` -> the files."""
    index: dict[str, set[str]] = {}
    for name, file in names.items():
        if name.count("/") == 1:
            index.setdefault(key(name), set()).add(file)
    return index


def find_variant(name: str, directory: Path, names: dict[str, str]) -> Variant | None:
    """The registry file of a published variant ``org/name`` (or ``name`` alone) that the
    registry does not list; None when it is none (a repo id is then read from the Hub).
    ``names``: the registry's name index (lowercased name -> file name in ``directory``)."""
    text = name.strip()
    if "@" in text or text.count("/") > 1 or not text:
        return None  # a revision asks for that commit's own config.json
    if "/" in text:
        return _variant(text, directory, repo_index(names))
    return _orgless(text, directory, names)


def _variant(repo: str, directory: Path, index: dict[str, set[str]]) -> Variant | None:
    lowered = repo.lower()
    if lowered in DIFFERENT:
        return None
    org, _, rest = lowered.partition("/")
    releases = RELEASES.get(org, ())
    release = next(
        (r for r in releases if rest.startswith(r.prefixes) and rest.endswith(r.suffix)), None
    )
    if release is not None:
        lowered = lowered.removesuffix(release.suffix)
        if lowered in DIFFERENT:
            return None
    lowered = DATED.get(lowered, lowered).lower()
    files = index.get(key(lowered), set())
    if len(files) != 1:
        return None
    (file,) = files
    return Variant(repo, directory / file, release, MAX_CONTEXT.get(lowered))


def _orgless(name: str, directory: Path, names: dict[str, str]) -> Variant | None:
    """``name`` under every organisation the registry knows: one match resolves, several are
    refused with the list."""
    index = repo_index(names)
    orgs = sorted({n.split("/", 1)[0] for n in names if n.count("/") == 1})
    found: dict[Path, str] = {}
    for org in orgs:
        variant = _variant(f"{org}/{name}", directory, index)
        if variant is not None:
            found.setdefault(variant.path, _spelled(org, variant.path))
    if len(found) > 1:
        listed = ", ".join(f"{org}/{name} ({path.stem})" for path, org in found.items())
        raise RegistryError(
            f"{name!r} is the name of more than one registry model's Hugging Face repo: "
            f"{listed}; give the organisation, e.g. {next(iter(found.values()))}/{name}"
        )
    for org in found.values():
        return _variant(f"{org}/{name}", directory, index)
    return None


def _spelled(org: str, path: Path) -> str:
    """The organisation as the registry file spells it (the name index is lowercased)."""
    from kvcalc.registry.load import read_yaml

    data = read_yaml(path)
    repo = data.get("hf_repo") if isinstance(data, dict) else None
    if isinstance(repo, str) and repo.lower().startswith(f"{org}/"):
        return repo.split("/", 1)[0]
    return org
