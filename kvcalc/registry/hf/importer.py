"""Reading a config.json and turning it into a ModelSpec through its family's adapter."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import AliasChoices

from kvcalc.engine.quant import CheckpointFormat
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import MAX_CONTEXT_TOKENS, number_text_problem, shown
from kvcalc.registry.hf.base import Adapter, HFConfig, Where
from kvcalc.registry.hf.families import ADAPTERS, SUPPORTED_MODEL_TYPES, WRAPPERS
from kvcalc.registry.hf.quantization import checkpoint_format
from kvcalc.registry.hf.wrappers import WrapperConfig
from kvcalc.registry.load import RegistryError, exists_at, is_dir, read_text, validate

if TYPE_CHECKING:
    from kvcalc.registry.schema import Architecture

#: The engine's default KV dtype when a config names none (gpt-oss ships no torch_dtype).
DEFAULT_DTYPE = "bf16"


def read_config_json(path: Path) -> tuple[Path, dict[str, Any]]:
    """Locate and parse a config.json (a file, or a folder holding one); returns the file path."""
    if is_dir(path):
        folder = path
        path = path / "config.json"
        if not exists_at(path):
            raise RegistryError(f"{folder}: no config.json in this folder")
    text = read_text(path, "a config.json")
    try:
        data = json.loads(
            text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant
        )
    except json.JSONDecodeError as exc:
        raise RegistryError(
            f"{path}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except _NumberError as exc:
        raise RegistryError(f"{path}: invalid JSON: {exc}") from None
    except RecursionError:
        raise RegistryError(f"{path}: invalid JSON: nested too deeply") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"{path}: cannot read: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a JSON object at the top level")
    return path, data


class _NumberError(ValueError):
    """A number in a config.json that kvcalc does not read."""


def _json_int(text: str) -> int:
    # The number rule of every input (units.number_text_problem): int() of more than 4,300
    # digits would fail with Python's own error, not a line naming the file.
    problem = number_text_problem(text)
    if problem is not None:
        raise _NumberError(f"number {shown(text)}: {problem}")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or number_text_problem(text) is not None:
        raise _NumberError(f"number {shown(text)} is not a finite number kvcalc reads")
    return value


class NonFinite(float):
    """JSON's ``Infinity``, ``-Infinity`` or ``NaN``, which Python's json writes and Hugging Face
    configs carry (Nemotron-H's ``time_step_limit``). Read as the float it names, so a key no
    formula reads may hold one; a field the sizing reads refuses it by name
    (:func:`kvcalc.registry.hf.base.non_finite_problem`)."""

    name: str

    def __new__(cls, name: str) -> NonFinite:
        value = super().__new__(cls, name)
        value.name = name
        return value

    def __repr__(self) -> str:
        return self.name


def _json_constant(name: str) -> float:
    return NonFinite(name)


def model_type(where: Where, value: Any) -> str:
    """A supported model_type (a language model or a wrapper), else a one-line refusal."""
    supported = ", ".join(SUPPORTED_MODEL_TYPES)
    if value is None:
        where.fail("model_type", f"missing required field; supported: {supported}")
    if not isinstance(value, str) or value not in SUPPORTED_MODEL_TYPES:
        where.fail(
            "model_type",
            f"unsupported model_type {value!r}; supported: {supported} "
            "(for another architecture, write a registry file)",
        )
    return value


#: The keys that give a model its size. transformers' save_pretrained writes every top-level
#: key a model's config class adds (``to_diff_dict`` drops only keys of the base
#: PretrainedConfig), so a top-level config stating none of them describes no checkpoint, and
#: the family defaults alone would size some other model (a bare ``{"model_type": "llama"}``
#: has Llama-7B's 32 layers). A wrapper's ``text_config`` is diffed against the class's own
#: defaults, so there a missing key is legitimate and takes the default.
SHAPE_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads")


def text_adapter(
    where: Where, data: dict[str, Any], text_type: str, top_level: bool = True
) -> Adapter[Any]:
    """The adapter of a language model config, its keys validated with the family defaults."""
    adapter = ADAPTERS[text_type]
    if top_level:
        require_shape(where, adapter.config_class, data)
    return adapter(where.parse(adapter.config_class, data), where)


def require_shape(where: Where, config_class: type[HFConfig], data: dict[str, Any]) -> None:
    """Refuse a config stating none of :data:`SHAPE_FIELDS` (under any key its family reads
    them from); a config stating some takes the family defaults for the rest, as transformers
    does."""
    keys = [key for name in SHAPE_FIELDS for key in _keys_read(config_class, name)]
    if keys and not any(key in data for key in keys):
        where.fail(
            ", ".join(SHAPE_FIELDS),
            "missing: the config states none of the fields that size the model; "
            "give the checkpoint's own config.json",
        )


def _keys_read(config_class: type[HFConfig], name: str) -> list[str]:
    """The config.json keys a field is read from: its name, or its alias choices."""
    info = config_class.model_fields.get(name)
    if info is None:
        return []
    alias = info.validation_alias
    if isinstance(alias, AliasChoices):
        return [c for c in alias.choices if isinstance(c, str)]
    return [alias] if isinstance(alias, str) else [name]


def wrapped_text_type(where: Where, wrapper: WrapperConfig) -> str:
    """The model_type of a wrapper's text_config (``where`` is the text_config's)."""
    stated = wrapper.text_config.get("model_type")
    if wrapper.fixed_text_class or stated is None:
        return wrapper.text_model_type
    stated = model_type(where, stated)
    if stated in WRAPPERS:
        where.fail("model_type", f"{stated!r} is a wrapper, not a language model")
    return stated


def slug(text: str) -> str:
    """A registry id made of ``text``: lowercase letters, digits, '.' and '-'."""
    return re.sub(r"[^a-z0-9.\-]+", "-", text.lower()).strip(".-") or "hf-model"


def stated_repo(top: dict[str, Any]) -> str | None:
    """``_name_or_path`` when it is a Hub repo id ("org/model"), else None."""
    repo = top.get("_name_or_path")
    if isinstance(repo, str) and re.fullmatch(r"[\w.\-]+/[\w.\-]+", repo):
        return repo
    return None


def _names(path: Path, top: dict[str, Any]) -> tuple[str, str]:
    """id and name: those of the repo for a file in the Hugging Face cache (as a repo id
    names it), else the id from the folder name (or the file name when it is not config.json)
    and the name from ``_name_or_path`` when it is a Hub repo id, else the same folder name."""
    from kvcalc.registry.hub import cache_origin

    origin = cache_origin(path)
    if origin is not None:
        return slug(origin.repo.name), origin.repo.repo
    stem = path.parent.resolve().name if path.name == "config.json" else path.stem
    return slug(stem), stated_repo(top) or stem


@dataclass(frozen=True)
class ImportedConfig:
    """A config.json read through its family's adapter: the validated architecture and the
    model-level facts a registry entry or a spec needs besides it."""

    path: Path
    family: str
    architecture: Architecture
    dtype: str
    max_context: int
    model_id: str
    name: str
    repo: str | None
    checkpoint: CheckpointFormat | None = None
    """The weight format its quantization_config states; None: every weight at ``dtype``."""
    assumed: tuple[str, ...] = ()
    """Warnings: each family default a figure rests on that the file does not state."""

    def to_spec(self, model_id: str | None = None, name: str | None = None) -> ModelSpec:
        from dataclasses import replace

        spec = self.architecture.to_spec(
            model_id or self.model_id,
            name or self.name,
            self.dtype,
            self.max_context,
            self.checkpoint,
        )
        return replace(spec, assumed=self.assumed) if self.assumed else spec


def defaults_taken(adapter: Adapter[Any], top_level: bool) -> tuple[str, ...]:
    """The warning naming the family defaults the figures rest on (none when the file states
    every key read), after refusing a top-level default the family does not document.

    A top-level config.json written by save_pretrained states every key its class adds, so a
    key a formula reads and the file lacks is a broken or hand-written file: transformers would
    size the class's default model (LlamaConfig's 32 layers, 32 heads, 4096 wide). A wrapper's
    text_config is written as its difference from the text class's defaults, so there an absent
    key is the class default by transformers' own rule, and is taken with the warning."""
    taken = adapter.reads.defaulted()
    config_class = type(adapter.reads.target)
    defaults = [_shown_default(config_class.model_fields[n].default) for n in taken]
    documented = config_class.documented_defaults
    needed = [n for n in taken if n not in documented] if top_level else []
    if needed:
        values = [d for n, d in zip(taken, defaults, strict=True) if n in needed]
        many = "s" * (len(needed) > 1)
        adapter.fail(
            ", ".join(needed),
            f"missing required field{many}: kvcalc needs {'them' if many else 'it'} and will "
            f"not assume {config_class.__name__}'s default{many} ({', '.join(values)}), "
            "another model's; give the checkpoint's own config.json",
        )
    if not taken:
        return ()
    return (f"{adapter.where.path}: {taken_defaults(adapter.where.prefix, config_class, taken)}",)


def taken_defaults(prefix: str, config_class: type[HFConfig], taken: list[str]) -> str:
    """``text_config states no vocab_size; took Gemma3TextConfig's default, ...``."""
    where = prefix.rstrip(".") or "the config"
    values = [f"{n} {_shown_default(config_class.model_fields[n].default)}" for n in taken]
    return (
        f"{where} states no {', '.join(taken)}; took {config_class.__name__}'s "
        f"default{'s' * (len(taken) > 1)}, as transformers does: {', '.join(values)}"
    )


def _shown_default(value: Any) -> str:
    return json.dumps(value) if isinstance(value, (bool, list)) else str(value)


def import_hf_config(path: Path | str) -> ImportedConfig:
    """Read a Hugging Face config.json (or a folder holding one) through its family adapter."""
    from kvcalc.registry.schema import Architecture

    path, top = read_config_json(Path(path))
    where = Where(path)
    generic: str | None = None
    stated = top.get("model_type")
    if isinstance(stated, str) and stated not in SUPPORTED_MODEL_TYPES:
        generic = stated  # no adapter: a standard decoder, else refused (hf/generic.py)
    top_type = generic or model_type(where, stated)
    wrapper_class = WRAPPERS.get(top_type)
    adapter: Adapter[Any]
    if generic is not None:
        from kvcalc.registry.hf.generic import standard_decoder

        adapter = standard_decoder(where, top, generic)
        tied = adapter.config.tie_word_embeddings
        dtype = adapter.config.stated_dtype()
    elif wrapper_class is None:
        adapter = text_adapter(where, top, top_type)
        tied = adapter.config.tie_word_embeddings
        # The model dtype is the default KV dtype; quantization_config is about weights.
        dtype = adapter.config.stated_dtype()
    else:
        wrapper = where.parse(wrapper_class, top)
        # A language model stated at the top level (released Qwen2.5-VL configs) is named there.
        inner = where.nested("text_config") if "text_config" in top else where
        text_type = wrapped_text_type(inner, wrapper)
        adapter = text_adapter(inner, wrapper.text_config, text_type, top_level=False)
        tied = wrapper.tied_embeddings(adapter.config)
        dtype = adapter.config.stated_dtype() or wrapper.stated_dtype()
    architecture = adapter.architecture(tied)
    if wrapper_class is not None:
        vision = wrapper.vision(where, adapter.config.hidden_size)
        if vision is not None:
            architecture["vision"] = vision
        audio = wrapper.audio(where, adapter.config.hidden_size)
        if audio is not None:
            architecture["audio"] = audio
    arch = validate(path, architecture, Architecture)
    context = max_context(adapter)
    assumed = defaults_taken(adapter, top_level=wrapper_class is None)
    if generic is not None:
        from kvcalc.registry.hf.generic import StandardDecoder, standard_decoder_warning

        assert isinstance(adapter, StandardDecoder)
        assumed = (standard_decoder_warning(adapter, generic), *assumed)
    model_id, name = _names(path, top)
    model_dtype = dtype or DEFAULT_DTYPE
    return ImportedConfig(
        path=path,
        family=type(adapter).family_of(top_type),
        architecture=arch,
        dtype=model_dtype,
        max_context=context,
        model_id=model_id,
        name=name,
        repo=stated_repo(top),
        checkpoint=adapter.released_checkpoint(
            checkpoint_format(where, top.get("quantization_config"), model_dtype)
        ),
        assumed=assumed,
    )


def load_hf_config(
    path: Path | str, model_id: str | None = None, name: str | None = None
) -> ModelSpec:
    """Import a Hugging Face config.json (or a folder holding one) as a ModelSpec; the id and
    name default to the folder's (see :func:`_names`)."""
    return import_hf_config(path).to_spec(model_id, name)


def max_context(adapter: Adapter[Any]) -> int:
    """The model's maximum context, within kvcalc's limit on every context (a registry file's
    ``max_context`` has the same bound): `kvcalc size` sizes it when no --ctx is given."""
    tokens: int = adapter.config.max_position_embeddings
    if tokens > MAX_CONTEXT_TOKENS:
        adapter.where.fail(
            "max_position_embeddings",
            f"must be at most {MAX_CONTEXT_TOKENS:,} tokens (kvcalc's context limit), "
            f"got {tokens:,}",
        )
    return tokens
