"""Import a Hugging Face ``config.json`` as a ModelSpec, so MODEL can be a path as well as a name.

Real config.json files are sparse: ``save_pretrained`` writes what the checkpoint set, and a key
the file omits takes the default of that model_type's configuration class in transformers (the
official Gemma-3 text_config states no vocab_size, sliding_window_pattern or tie flag). Those
defaults are recorded below as data, read from the transformers sources, so importing never needs
transformers itself. A model_type we have no table for is refused, never guessed.

The architecture is validated by the registry schema (:class:`Architecture`), the same checks a
registry file passes, and turned into a ModelSpec by the same code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, NoReturn

from kvcalc.engine.spec import ModelSpec
from kvcalc.registry.load import RegistryError, read_text, validate

#: The transformers release whose configuration_*.py files the defaults below were read from.
TRANSFORMERS_VERSION = "5.24.0"

# ------------------------------------------------------------------------------- defaults
# Per model_type: the class defaults (transformers 5.24.0, models/<type>/configuration_<type>.py)
# of the keys this importer reads. None means "derived": num_key_value_heads None is
# num_attention_heads, head_dim None is hidden_size // num_attention_heads (what the modeling
# code does when the config carries no head_dim).

_LLAMA_LIKE = {  # LlamaConfig; GraniteConfig has the same values for these keys
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": None,
    "head_dim": None,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}

_DEEPSEEK_V3 = {  # DeepseekV3Config
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "qk_nope_head_dim": 128,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    # moe_layer_freq is not a transformers field (DeepSeek's own configuration_deepseek.py has
    # it); transformers makes every layer from first_k_dense_replace on MoE, i.e. a period of 1.
    "moe_layer_freq": 1,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": _LLAMA_LIKE,
    "granite": _LLAMA_LIKE,
    "mistral": {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": None,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "sliding_window": 4096,
    },
    "mixtral": {
        "vocab_size": 32000,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": None,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "sliding_window": None,
        "num_experts_per_tok": 2,
        "num_local_experts": 8,
    },
    "qwen2": {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": None,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
    },
    "qwen2_moe": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": None,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "num_experts_per_tok": 4,
        "num_experts": 60,
        "mlp_only_layers": [],
    },
    "qwen3": {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "intermediate_size": 22016,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 128,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "max_window_layers": 28,
    },
    "qwen3_moe": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": None,  # not a Qwen3MoeConfig field: the modeling code uses hidden/heads
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "use_sliding_window": False,
        "sliding_window": 4096,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 768,
        "num_experts_per_tok": 8,
        "num_experts": 128,
        "mlp_only_layers": [],
    },
    "qwen3_next": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "max_position_embeddings": 32768,
        "tie_word_embeddings": False,
        "full_attention_interval": 4,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "decoder_sparse_step": 1,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "num_experts_per_tok": 10,
        "num_experts": 512,
        "mlp_only_layers": [],
    },
    "gemma": {
        "vocab_size": 256000,
        "hidden_size": 3072,
        "intermediate_size": 24576,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
    },
    "gemma2": {
        "vocab_size": 256000,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "sliding_window": 4096,
    },
    "gemma3_text": {
        "vocab_size": 262208,
        "hidden_size": 2304,
        "intermediate_size": 9216,
        "num_hidden_layers": 26,
        "num_attention_heads": 8,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": True,
        "sliding_window": 4096,
        "sliding_window_pattern": 6,
    },
    "deepseek_v2": {
        "vocab_size": 102400,
        "hidden_size": 4096,
        "intermediate_size": 11008,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
        "first_k_dense_replace": 0,
        "kv_lora_rank": 512,
        "q_lora_rank": 1536,
        "n_routed_experts": 64,
        "n_shared_experts": 2,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "num_experts_per_tok": None,
        "moe_intermediate_size": 1407,
        "moe_layer_freq": 1,  # as for deepseek_v3: not a transformers field
    },
    "deepseek_v3": _DEEPSEEK_V3,
    # Kimi-K2 ships its own copy of DeepseekV3Config (auto_map configuration_deepseek.py);
    # transformers has no kimi_k2 class, so the DeepseekV3Config defaults stand in.
    "kimi_k2": _DEEPSEEK_V3,
    "gpt_oss": {
        "num_hidden_layers": 36,
        "num_local_experts": 128,
        "vocab_size": 201088,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "head_dim": 64,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "sliding_window": 128,
        "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "num_experts_per_tok": 4,
    },
    "llama4_text": {
        "vocab_size": 202048,
        "hidden_size": 5120,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_hidden_layers": 48,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
        "num_experts_per_tok": 1,
        "num_local_experts": 16,
        "moe_layers": None,
        "interleave_moe_layer_step": 1,
        "no_rope_layers": None,
        "no_rope_layer_interval": 4,
        "attention_chunk_size": 8192,
    },
    "phi": {
        "vocab_size": 51200,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "head_dim": None,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": False,
    },
    "phi3": {
        "vocab_size": 32064,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": None,
        "head_dim": None,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "sliding_window": None,
    },
    "falcon": {
        "vocab_size": 65024,
        "hidden_size": 4544,
        "num_hidden_layers": 32,
        "num_attention_heads": 71,
        "num_kv_heads": None,
        "new_decoder_architecture": False,
        "multi_query": True,
        "max_position_embeddings": 2048,
        "ffn_hidden_size": None,  # None: 4 x hidden_size
        "tie_word_embeddings": True,
    },
    "jamba": {
        "vocab_size": 65536,
        "tie_word_embeddings": False,
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "max_position_embeddings": 262144,
        "num_experts_per_tok": 2,
        "num_experts": 16,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "attn_layer_period": 8,
        "attn_layer_offset": 4,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_expand": 2,
        "mamba_dt_rank": "auto",  # "auto": ceil(hidden_size / 16)
    },
}

#: Multimodal wrappers whose language model is the nested ``text_config``: the wrapper's own
#: defaults, and the text model_type used when text_config names none. Gemma3Config and
#: Llama4Config build their text config with a fixed class, whatever model_type it states.
WRAPPERS: dict[str, dict[str, Any]] = {
    "gemma3": {"text_model_type": "gemma3_text", "fixed": True, "tie_word_embeddings": True},
    "llama4": {"text_model_type": "llama4_text", "fixed": True, "tie_word_embeddings": False},
    "mistral3": {"text_model_type": "mistral", "fixed": False, "tie_word_embeddings": True},
    # Kimi-VL is remote code (no transformers class): its text_config is a DeepSeek-V3 model.
    "kimi_vl": {"text_model_type": "deepseek_v3", "fixed": False, "tie_word_embeddings": False},
}

#: Falcon's original remote-code configs (RWConfig): model_type and key names before the port.
_FALCON_OLD_TYPES = ("RefinedWebModel", "RefinedWeb")
_FALCON_OLD_KEYS = {
    "n_head": "num_attention_heads",
    "n_layer": "num_hidden_layers",
    "n_embed": "hidden_size",
    "n_head_kv": "num_kv_heads",
}

SUPPORTED_MODEL_TYPES = tuple(sorted({*DEFAULTS, *WRAPPERS}))

#: torch dtype names in config.json -> kvcalc dtype names.
_TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}

#: The engine's default KV dtype when a config names none (gpt-oss ships no torch_dtype).
_DEFAULT_DTYPE = "bf16"

#: More layers than any model has: the per-layer lists built here stay small.
MAX_LAYERS = 100_000

_UNSET = object()


# ------------------------------------------------------------------------------- reading


class _Config:
    """One config object (top level or text_config) with its model_type defaults.

    A key present in the file wins, even when null; an absent key takes the class default. Every
    failure is a one-line RegistryError naming the file and the field.
    """

    def __init__(self, path: Path, data: dict[str, Any], model_type: str, prefix: str = "") -> None:
        self.path = path
        self.data = data
        self.model_type = model_type
        self.defaults = DEFAULTS[model_type]
        self.prefix = prefix

    def fail(self, key: str, problem: str) -> NoReturn:
        raise RegistryError(f"{self.path}: {self.prefix}{key}: {problem}")

    def key(self, *names: str) -> str:
        """The first of several accepted names (attribute_map aliases) that the file uses."""
        return next((k for k in names if k in self.data), names[0])

    def raw(self, key: str) -> Any:
        if key in self.data:
            return self.data[key]
        return self.defaults.get(key, _UNSET)

    def int(
        self, key: str, minimum: int = 1, default: Any = _UNSET, maximum: int | None = None
    ) -> int:
        value = self.optional_int(key, minimum, default, maximum)
        if value is None:
            self.fail(key, "must be an integer, not null")
        return value

    def optional_int(
        self, key: str, minimum: int = 1, default: Any = _UNSET, maximum: int | None = None
    ) -> int | None:
        value = self.raw(key)
        if value is _UNSET:
            if default is _UNSET:
                self.fail(key, "missing required field")
            value = default
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, f"must be an integer, got {value!r}")
        if value < minimum:
            self.fail(key, f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            self.fail(key, f"must be at most {maximum:,}, got {value:,}")
        return value

    def bool(self, key: str, default: Any = _UNSET) -> bool:
        value = self.raw(key)
        if value is _UNSET:
            if default is _UNSET:
                self.fail(key, "missing required field")
            value = default
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {value!r}")
        return value

    def int_list(self, key: str, minimum: int = 0) -> list[int] | None:
        value = self.raw(key)
        if value is _UNSET or value is None:
            return None
        if not isinstance(value, list) or any(
            isinstance(v, bool) or not isinstance(v, int) or v < minimum for v in value
        ):
            self.fail(key, f"must be a list of integers >= {minimum}")
        return value

    def layer_types(self, num_layers: int, allowed: tuple[str, ...]) -> list[str] | None:
        value = self.raw("layer_types")
        if value is _UNSET or value is None:
            return None
        if not isinstance(value, list) or len(value) != num_layers:
            self.fail("layer_types", f"must be a list of {num_layers} entries, one per layer")
        for entry in value:
            if entry not in allowed:
                expected = ", ".join(allowed)
                self.fail("layer_types", f"unsupported entry {entry!r}; expected {expected}")
        return value


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


def _model_type(path: Path, value: Any, key: str = "model_type") -> str:
    if value is None:
        raise RegistryError(
            f"{path}: {key}: missing required field; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if value in _FALCON_OLD_TYPES:
        return "falcon"
    if not isinstance(value, str) or value not in SUPPORTED_MODEL_TYPES:
        raise RegistryError(
            f"{path}: {key}: unsupported model_type {value!r}; supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)} (for another architecture, write a registry file)"
        )
    return value


def _text_config(path: Path, data: dict[str, Any]) -> tuple[_Config, str]:
    """The language model's config: the top level, or a wrapper's text_config. Returns it and the
    top-level model_type."""
    top_type = _model_type(path, data.get("model_type"))
    if top_type not in WRAPPERS:
        if top_type == "falcon":
            data = _falcon_new_names(data)
        return _Config(path, data, top_type), top_type
    wrapper = WRAPPERS[top_type]
    inner = data.get("text_config")
    if inner is None:
        raise RegistryError(
            f"{path}: text_config: missing required field (a {top_type} config "
            "holds its language model there)"
        )
    if not isinstance(inner, dict):
        raise RegistryError(f"{path}: text_config: expected a JSON object")
    if wrapper["fixed"] or "model_type" not in inner:
        inner_type = wrapper["text_model_type"]
    else:
        inner_type = _model_type(path, inner["model_type"], "text_config.model_type")
        if inner_type in WRAPPERS:
            raise RegistryError(f"{path}: text_config.model_type: {inner_type!r} is a wrapper")
    return _Config(path, inner, inner_type, "text_config."), top_type


def _falcon_new_names(data: dict[str, Any]) -> dict[str, Any]:
    # RWConfig (the remote code Falcon first shipped with) named the keys n_head, n_layer, ...;
    # a new name in the same file wins. n_head_kv exists only in the grouped-KV layout (40B).
    out = dict(data)
    for old, new in _FALCON_OLD_KEYS.items():
        if old in data and new not in data:
            out[new] = data[old]
    if "n_head_kv" in data and "new_decoder_architecture" not in data:
        out["new_decoder_architecture"] = True
    return out


# ------------------------------------------------------------------------------- layers


def _attention_shape(cfg: _Config) -> dict[str, int]:
    """KV heads and head dim of a softmax-attention layer, as the modeling code derives them."""
    hidden = cfg.int("hidden_size")
    heads = cfg.int("num_attention_heads")
    if cfg.model_type == "falcon":
        # modeling_falcon: grouped KV heads with the new decoder, one with multi_query, else MHA.
        if cfg.bool("new_decoder_architecture"):
            kv = cfg.optional_int("num_kv_heads") or heads
        elif cfg.bool("multi_query"):
            kv = 1
        else:
            kv = heads
        return {"kv_heads": kv, "head_dim": _derived_head_dim(cfg, hidden, heads)}
    kv = cfg.optional_int("num_key_value_heads", default=None) or heads
    head_dim = cfg.optional_int("head_dim", default=None) or _derived_head_dim(cfg, hidden, heads)
    return {"kv_heads": kv, "head_dim": head_dim}


def _derived_head_dim(cfg: _Config, hidden: int, heads: int) -> int:
    if hidden % heads:
        cfg.fail("head_dim", f"absent, and hidden_size {hidden} is not divisible by {heads} heads")
    return hidden // heads


def _attention_layer_kinds(cfg: _Config, n: int) -> list[str]:
    """Per layer: full, sliding or chunked, as each configuration class computes layer_types."""
    t = cfg.model_type
    explicit = cfg.layer_types(n, ("full_attention", "sliding_attention", "chunked_attention"))
    if explicit is not None:
        kinds = [k.removesuffix("_attention") for k in explicit]
    elif t in ("mistral", "mixtral", "phi3", "qwen3_moe"):
        kinds = ["sliding"] * n  # one window on every layer (None: no window)
    elif t in ("qwen2", "qwen3"):
        # Qwen2Config/Qwen3Config: layers from max_window_layers on slide, if a window is used.
        first = cfg.int("max_window_layers", minimum=0)
        kinds = ["sliding" if i >= first else "full" for i in range(n)]
    elif t == "qwen2_moe":
        # Qwen2MoeConfig: even-indexed layers below max_window_layers slide.
        below = cfg.int("max_window_layers", minimum=0)
        kinds = ["sliding" if (i + 1) % 2 and i < below else "full" for i in range(n)]
    elif t in ("gemma2", "gpt_oss"):
        kinds = ["sliding" if (i + 1) % 2 else "full" for i in range(n)]
    elif t == "gemma3_text":
        every = cfg.int("sliding_window_pattern")
        kinds = ["sliding" if (i + 1) % every else "full" for i in range(n)]
    elif t == "llama4_text":
        # Llama4TextConfig: RoPE layers (no_rope_layers[i] == 1) are chunked; NoPE layers, by
        # default every no_rope_layer_interval-th, attend to the full context.
        uses_rope = cfg.int_list("no_rope_layers")
        if not uses_rope:  # Llama4TextConfig treats an empty list like an absent one
            every = cfg.int("no_rope_layer_interval")
            uses_rope = [int((i + 1) % every != 0) for i in range(n)]
        if len(uses_rope) != n:
            cfg.fail("no_rope_layers", f"must have {n} entries, one per layer")
        kinds = ["chunked" if r else "full" for r in uses_rope]
    else:
        kinds = ["full"] * n
    return kinds


def _sliding_window(cfg: _Config) -> int | None:
    if cfg.model_type in ("qwen2", "qwen2_moe", "qwen3", "qwen3_moe") and not cfg.bool(
        "use_sliding_window"
    ):
        return None  # Qwen2.5 states a window it never uses: use_sliding_window is false
    return cfg.optional_int("sliding_window", default=None)


def _attention_mixers(cfg: _Config, n: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    kinds = _attention_layer_kinds(cfg, n)
    shape = _attention_shape(cfg)
    window = _sliding_window(cfg) if "sliding" in kinds else None
    chunk = cfg.optional_int("attention_chunk_size", default=None) if "chunked" in kinds else None
    mixers: dict[str, dict[str, Any]] = {}
    names: list[str] = []
    for kind in kinds:
        # A sliding or chunked layer without a size attends to everything, as in transformers.
        if kind == "sliding" and window is not None:
            mixers["sliding"] = {"kind": "sliding", **shape, "window": window}
        elif kind == "chunked" and chunk is not None:
            mixers["chunked"] = {"kind": "chunked", **shape, "chunk": chunk}
        else:
            kind = "full"
            mixers["full"] = {"kind": "full", **shape}
        names.append(kind)
    return mixers, names


def _mla_mixers(cfg: _Config, n: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    mla = {
        "kind": "mla",
        "kv_lora_rank": cfg.int("kv_lora_rank"),
        "qk_rope_head_dim": cfg.int("qk_rope_head_dim"),
        "qk_nope_head_dim": cfg.int("qk_nope_head_dim"),
        "v_head_dim": cfg.int("v_head_dim"),
        # 0 as well as null means uncompressed queries (DeepSeek-V2-Lite).
        "q_lora_rank": cfg.optional_int("q_lora_rank", minimum=0) or None,
    }
    return {"mla": mla}, ["mla"] * n


def _qwen3_next_mixers(cfg: _Config, n: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    explicit = cfg.layer_types(n, ("full_attention", "linear_attention"))
    if explicit is None:
        every = cfg.int("full_attention_interval")
        explicit = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(n)]
    names = ["full" if t == "full_attention" else "linear" for t in explicit]
    mixers: dict[str, dict[str, Any]] = {}
    if "full" in names:
        mixers["full"] = {"kind": "full", **_attention_shape(cfg)}
    if "linear" in names:
        mixers["linear"] = {
            "kind": "gated_deltanet",
            "k_heads": cfg.int("linear_num_key_heads"),
            "v_heads": cfg.int("linear_num_value_heads"),
            "k_head_dim": cfg.int("linear_key_head_dim"),
            "v_head_dim": cfg.int("linear_value_head_dim"),
            "conv_kernel": cfg.int("linear_conv_kernel_dim"),
        }
    return mixers, names


def _jamba_mixers(cfg: _Config, n: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    period = cfg.int("attn_layer_period")
    offset = cfg.int("attn_layer_offset", minimum=0)
    if offset >= period:
        cfg.fail("attn_layer_offset", f"must be smaller than attn_layer_period ({period})")
    names = ["attn" if i % period == offset else "mamba" for i in range(n)]
    hidden = cfg.int("hidden_size")
    dt_rank = cfg.raw("mamba_dt_rank")
    if dt_rank == "auto":
        dt_rank = -(-hidden // 16)  # JambaConfig: ceil(hidden_size / 16)
    else:
        dt_rank = cfg.int("mamba_dt_rank")
    mixers: dict[str, dict[str, Any]] = {}
    if "attn" in names:
        mixers["attn"] = {"kind": "full", **_attention_shape(cfg)}
    if "mamba" in names:
        mixers["mamba"] = {
            "kind": "mamba",
            "d_state": cfg.int("mamba_d_state"),
            "d_conv": cfg.int("mamba_d_conv"),
            "expand": cfg.int("mamba_expand"),
            "dt_rank": dt_rank,
        }
    return mixers, names


def _mixers(cfg: _Config, n: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    if cfg.model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
        return _mla_mixers(cfg, n)
    if cfg.model_type == "qwen3_next":
        return _qwen3_next_mixers(cfg, n)
    if cfg.model_type == "jamba":
        return _jamba_mixers(cfg, n)
    return _attention_mixers(cfg, n)


def shortest_cycle(names: list[str]) -> list[str]:
    """The shortest prefix that, repeated, gives ``names`` (the whole list if none does)."""
    for period in range(1, len(names) + 1):
        if all(names[i] == names[i % period] for i in range(len(names))):
            return names[:period]
    return names


# ------------------------------------------------------------------------------- feed-forward


MoEFlags = tuple[dict[str, Any] | None, list[bool]]
"""An MoE block (registry schema fields, layout excluded) and, per layer, whether it is MoE."""


def _routed(cfg: _Config, experts: int, size_key: str) -> dict[str, Any]:
    return {
        "experts": experts,
        "experts_per_token": cfg.int("num_experts_per_tok"),
        "intermediate_size": cfg.int(size_key),
    }


def _every_layer_moe(cfg: _Config, n: int) -> MoEFlags:
    # Mixtral and gpt-oss: every layer routes over experts of intermediate_size.
    experts = cfg.int(cfg.key("num_local_experts", "num_experts"))
    return _routed(cfg, experts, "intermediate_size"), [True] * n


def _qwen_moe(cfg: _Config, n: int) -> MoEFlags:
    experts = cfg.int(cfg.key("num_experts", "num_local_experts"), minimum=0)
    if not experts:
        return None, [False] * n
    moe = _routed(cfg, experts, "moe_intermediate_size")
    if cfg.model_type != "qwen3_moe":
        shared = cfg.int("shared_expert_intermediate_size", minimum=0)
        if shared:  # one gated shared expert of this width (Qwen2MoeSparseMoeBlock)
            moe |= {"shared_experts": 1, "shared_intermediate_size": shared}
    # Qwen2MoeDecoderLayer: MoE unless listed in mlp_only_layers, every decoder_sparse_step-th.
    step = cfg.int("decoder_sparse_step")
    dense = set(cfg.int_list("mlp_only_layers") or [])
    return moe, [i not in dense and (i + 1) % step == 0 for i in range(n)]


def _deepseek_moe(cfg: _Config, n: int) -> MoEFlags:
    experts = cfg.optional_int(
        cfg.key("n_routed_experts", "num_experts", "num_local_experts"), minimum=0
    )
    if not experts:
        return None, [False] * n
    moe = _routed(cfg, experts, "moe_intermediate_size")
    shared = cfg.optional_int("n_shared_experts", minimum=0) or 0
    if shared:  # DeepSeek fuses the shared experts into one MLP of shared x moe_intermediate_size
        moe |= {"shared_experts": shared, "shared_intermediate_size": moe["intermediate_size"]}
    first = cfg.optional_int("first_k_dense_replace", minimum=0) or 0
    freq = cfg.int("moe_layer_freq")
    return moe, [i >= first and i % freq == 0 for i in range(n)]


def _llama4_moe(cfg: _Config, n: int) -> MoEFlags:
    # Llama4TextMoe: routed experts plus one shared expert, both of intermediate_size.
    moe = _routed(cfg, cfg.int("num_local_experts"), "intermediate_size")
    moe |= {"shared_experts": 1, "shared_intermediate_size": moe["intermediate_size"]}
    listed = cfg.int_list("moe_layers")
    if listed is None:
        step = cfg.int("interleave_moe_layer_step")
        listed = list(range(step - 1, n, step))
    return moe, [i in set(listed) for i in range(n)]


def _jamba_moe(cfg: _Config, n: int) -> MoEFlags:
    experts = cfg.int(cfg.key("num_experts", "num_local_experts"))
    if experts == 1:
        return None, [False] * n
    period = cfg.int("expert_layer_period")
    offset = cfg.int("expert_layer_offset", minimum=0)
    if offset >= period:
        cfg.fail("expert_layer_offset", f"must be smaller than expert_layer_period ({period})")
    return _routed(cfg, experts, "intermediate_size"), [i % period == offset for i in range(n)]


_MOE_READERS = {
    "mixtral": _every_layer_moe,
    "gpt_oss": _every_layer_moe,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "qwen3_next": _qwen_moe,
    "deepseek_v2": _deepseek_moe,
    "deepseek_v3": _deepseek_moe,
    "kimi_k2": _deepseek_moe,
    "llama4_text": _llama4_moe,
    "jamba": _jamba_moe,
}


def moe_layout(flags: list[bool]) -> dict[str, int] | None:
    """first_dense_layers / period / offset reproducing the MoE layers exactly, else None."""
    moe_at = [i for i, f in enumerate(flags) if f]
    if not moe_at:
        return None
    first = moe_at[0]
    period = moe_at[1] - first if len(moe_at) > 1 else len(flags)
    offset = first % period
    layout = {
        "first_dense_layers": 0 if first < period else first,
        "period": period,
        "offset": offset,
    }
    expected = [
        i >= layout["first_dense_layers"] and (i - offset) % period == 0 for i in range(len(flags))
    ]
    return layout if expected == flags else None


def _dense_mlp(cfg: _Config) -> dict[str, Any]:
    t = cfg.model_type
    if t == "falcon":
        # FalconConfig: ffn_hidden_size defaults to 4 x hidden; a plain (ungated) GELU MLP.
        size = cfg.optional_int("ffn_hidden_size") or 4 * cfg.int("hidden_size")
        return {"intermediate_size": size, "gated": False}
    if t == "llama4_text":
        return {"intermediate_size": cfg.int("intermediate_size_mlp")}
    # Phi-1/2 use fc1/fc2 (ungated); Phi-3 fuses gate and up (gate_up_proj).
    return {"intermediate_size": cfg.int("intermediate_size"), "gated": t != "phi"}


def _feed_forward(cfg: _Config, n: int) -> dict[str, Any]:
    reader = _MOE_READERS.get(cfg.model_type)
    moe, flags = reader(cfg, n) if reader else (None, [False] * n)
    if moe is None or not any(flags):
        return {"mlp": _dense_mlp(cfg)}
    layout = moe_layout(flags)
    if layout is None:
        key = "mlp_only_layers" if "mlp_only_layers" in cfg.data else "moe_layers"
        cfg.fail(key, "this set of MoE layers is not a regular pattern kvcalc can represent")
    out: dict[str, Any] = {"moe": moe | layout}
    if not all(flags):
        out["mlp"] = _dense_mlp(cfg)
    return out


# ------------------------------------------------------------------------------- model


def _dtype(path: Path, cfg: _Config, top: dict[str, Any]) -> str:
    """The model dtype (the default KV dtype): ``dtype`` (transformers >= 4.56) or ``torch_dtype``,
    from the text config, else the top level. quantization_config is about weights and is ignored.
    """
    for source, prefix in ((cfg.data, cfg.prefix), (top, "")):
        for key in ("dtype", "torch_dtype"):
            value = source.get(key)
            if value is None:
                continue
            if not isinstance(value, str) or value not in _TORCH_DTYPES:
                raise RegistryError(
                    f"{path}: {prefix}{key}: unsupported dtype {value!r}; "
                    f"expected one of {', '.join(_TORCH_DTYPES)}"
                )
            return _TORCH_DTYPES[value]
    return _DEFAULT_DTYPE


def _tied(cfg: _Config, top: dict[str, Any], top_type: str) -> bool:
    # A wrapper's lm_head lives on the wrapper, so its flag governs; an explicit one in either
    # place wins over the wrapper class default.
    if top_type not in WRAPPERS:
        return cfg.bool("tie_word_embeddings")
    if "tie_word_embeddings" in top:
        return _Config(cfg.path, top, cfg.model_type).bool("tie_word_embeddings")
    if "tie_word_embeddings" in cfg.data:
        return cfg.bool("tie_word_embeddings")
    return WRAPPERS[top_type]["tie_word_embeddings"]


def _names(path: Path, top: dict[str, Any]) -> tuple[str, str]:
    """id from the folder name (or the file name when it is not config.json), name from
    ``_name_or_path`` when it is a Hub repo id ("org/model"), else the same folder name."""
    stem = path.parent.resolve().name if path.name == "config.json" else path.stem
    model_id = re.sub(r"[^a-z0-9.\-]+", "-", stem.lower()).strip(".-") or "hf-model"
    repo = top.get("_name_or_path")
    if isinstance(repo, str) and re.fullmatch(r"[\w.\-]+/[\w.\-]+", repo):
        return model_id, repo
    return model_id, stem


def architecture_dict(cfg: _Config, top: dict[str, Any], top_type: str) -> dict[str, Any]:
    """The ``architecture`` mapping of a registry file, from the config's official field names."""
    n = cfg.int("num_hidden_layers", maximum=MAX_LAYERS)
    mixers, names = _mixers(cfg, n)
    return {
        "hidden_size": cfg.int("hidden_size"),
        "num_layers": n,
        "vocab_size": cfg.int("vocab_size"),
        "tied_embeddings": _tied(cfg, top, top_type),
        "num_attention_heads": cfg.int("num_attention_heads"),
        "mixers": mixers,
        "pattern": shortest_cycle(names),
        **_feed_forward(cfg, n),
    }


def load_hf_config(path: Path | str) -> ModelSpec:
    """Import a Hugging Face config.json (or a folder holding one) as a ModelSpec."""
    from kvcalc.registry.schema import Architecture

    path, top = read_config_json(Path(path))
    cfg, top_type = _text_config(path, top)
    arch = validate(path, architecture_dict(cfg, top, top_type), Architecture)
    model_id, name = _names(path, top)
    return arch.to_spec(model_id, name, _dtype(path, cfg, top), cfg.int("max_position_embeddings"))
