"""Reading a config.json and turning it into a ModelSpec through its family's adapter."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvcalc.engine.spec import ModelSpec
from kvcalc.registry.hf.base import Adapter, Where
from kvcalc.registry.hf.families import ADAPTERS, SUPPORTED_MODEL_TYPES, WRAPPERS
from kvcalc.registry.hf.quantization import checkpoint_format
from kvcalc.registry.hf.wrappers import WrapperConfig
from kvcalc.registry.load import RegistryError, read_text, validate

#: The engine's default KV dtype when a config names none (gpt-oss ships no torch_dtype).
DEFAULT_DTYPE = "bf16"


def read_config_json(path: Path) -> tuple[Path, dict[str, Any]]:
    """Locate and parse a config.json (a file, or a folder holding one); returns the file path."""
    if path.is_dir():
        folder = path
        path = path / "config.json"
        if not path.is_file():
            raise RegistryError(f"{folder}: no config.json in this folder")
    text = read_text(path, "a config.json")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegistryError(
            f"{path}: invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    except (OSError, UnicodeDecodeError, RecursionError) as exc:
        raise RegistryError(f"{path}: cannot read: {type(exc).__name__}") from None
    if not isinstance(data, dict):
        raise RegistryError(f"{path}: expected a JSON object at the top level")
    return path, data


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


def text_adapter(where: Where, data: dict[str, Any], text_type: str) -> Adapter[Any]:
    """The adapter of a language model config, its keys validated with the family defaults."""
    adapter = ADAPTERS[text_type]
    return adapter(where.parse(adapter.config_class, data), where)


def wrapped_text_type(where: Where, wrapper: WrapperConfig) -> str:
    """The model_type of a wrapper's text_config (``where`` is the text_config's)."""
    stated = wrapper.text_config.get("model_type")
    if wrapper.fixed_text_class or stated is None:
        return wrapper.text_model_type
    stated = model_type(where, stated)
    if stated in WRAPPERS:
        where.fail("model_type", f"{stated!r} is a wrapper, not a language model")
    return stated


def _names(path: Path, top: dict[str, Any]) -> tuple[str, str]:
    """id from the folder name (or the file name when it is not config.json), name from
    ``_name_or_path`` when it is a Hub repo id ("org/model"), else the same folder name."""
    stem = path.parent.resolve().name if path.name == "config.json" else path.stem
    model_id = re.sub(r"[^a-z0-9.\-]+", "-", stem.lower()).strip(".-") or "hf-model"
    repo = top.get("_name_or_path")
    if isinstance(repo, str) and re.fullmatch(r"[\w.\-]+/[\w.\-]+", repo):
        return model_id, repo
    return model_id, stem


def load_hf_config(path: Path | str) -> ModelSpec:
    """Import a Hugging Face config.json (or a folder holding one) as a ModelSpec."""
    from kvcalc.registry.schema import Architecture

    path, top = read_config_json(Path(path))
    where = Where(path)
    top_type = model_type(where, top.get("model_type"))
    wrapper_class = WRAPPERS.get(top_type)
    if wrapper_class is None:
        adapter = text_adapter(where, top, top_type)
        tied = adapter.config.tie_word_embeddings
        # The model dtype is the default KV dtype; quantization_config is about weights.
        dtype = adapter.config.stated_dtype()
    else:
        wrapper = where.parse(wrapper_class, top)
        inner = where.nested("text_config")
        adapter = text_adapter(inner, wrapper.text_config, wrapped_text_type(inner, wrapper))
        tied = wrapper.tied_embeddings(adapter.config)
        dtype = adapter.config.stated_dtype() or wrapper.stated_dtype()
    arch = validate(path, adapter.architecture(tied), Architecture)
    model_id, name = _names(path, top)
    model_dtype = dtype or DEFAULT_DTYPE
    checkpoint = checkpoint_format(where, top.get("quantization_config"), model_dtype)
    return arch.to_spec(
        model_id, name, model_dtype, adapter.config.max_position_embeddings, checkpoint
    )
