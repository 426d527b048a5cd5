"""Every supported model_type and the class that reads it, built once at import."""

from __future__ import annotations

from typing import Any

from kvcalc.registry.hf.base import Adapter
from kvcalc.registry.hf.deepseek import DeepseekV2, DeepseekV3
from kvcalc.registry.hf.deepseek_v4 import DeepseekV4
from kvcalc.registry.hf.deepseek_v32 import DeepseekV32
from kvcalc.registry.hf.falcon import Falcon
from kvcalc.registry.hf.gemma import Gemma, Gemma2, Gemma3Text, Gemma4Text
from kvcalc.registry.hf.glm import Glm4Moe, Glm4MoeLite, GlmMoeDsa
from kvcalc.registry.hf.gpt_oss import GptOss
from kvcalc.registry.hf.granite import GraniteMoeHybrid
from kvcalc.registry.hf.jamba import Jamba
from kvcalc.registry.hf.lfm2 import Lfm2, Lfm2Moe
from kvcalc.registry.hf.llama import Llama, Mistral, Mixtral, Phi, Phi3
from kvcalc.registry.hf.llama4 import Llama4Text
from kvcalc.registry.hf.minimax import MiniMaxM2
from kvcalc.registry.hf.nemotron import NemotronH
from kvcalc.registry.hf.qwen import (
    Qwen,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    Qwen3Next,
    Qwen3VLMoeText,
    Qwen3VLText,
    Qwen35,
    Qwen35Moe,
)
from kvcalc.registry.hf.wrappers import (
    Gemma3Config,
    Gemma4Config,
    KimiVLConfig,
    Lfm2VlConfig,
    Llama4Config,
    Mistral3Config,
    Qwen3VLConfig,
    Qwen3VLMoeConfig,
    Qwen25VLConfig,
    Qwen35Config,
    Qwen35MoeConfig,
    WrapperConfig,
)

_ADAPTER_CLASSES: tuple[type[Adapter[Any]], ...] = (
    Llama, Mistral, Mixtral, Phi, Phi3,
    Qwen, Qwen3, Qwen2Moe, Qwen3Moe, Qwen3Next, Qwen35, Qwen35Moe, Qwen3VLText, Qwen3VLMoeText,
    Gemma, Gemma2, Gemma3Text, Gemma4Text,
    DeepseekV2, DeepseekV3, DeepseekV32, DeepseekV4,
    GptOss, Llama4Text, Falcon, Jamba, GraniteMoeHybrid,
    Glm4Moe, Glm4MoeLite, GlmMoeDsa, MiniMaxM2, NemotronH, Lfm2, Lfm2Moe,
)  # fmt: skip

#: model_type -> the adapter of a language model config.
ADAPTERS: dict[str, type[Adapter[Any]]] = {
    model_type: adapter for adapter in _ADAPTER_CLASSES for model_type in adapter.model_types
}

#: model_type -> the config of a multimodal wrapper holding a language model in text_config.
WRAPPERS: dict[str, type[WrapperConfig]] = {
    model_type: wrapper
    for wrapper in (
        Gemma3Config, Gemma4Config, Llama4Config, Mistral3Config, KimiVLConfig, Qwen25VLConfig,
        Qwen35Config, Qwen35MoeConfig, Qwen3VLConfig, Qwen3VLMoeConfig, Lfm2VlConfig,
    )  # fmt: skip
    for model_type in wrapper.model_types
}

SUPPORTED_MODEL_TYPES = tuple(sorted({*ADAPTERS, *WRAPPERS}, key=str.lower))

#: Per language-model model_type: its transformers class defaults by config.json key.
DEFAULTS: dict[str, dict[str, Any]] = {
    model_type: adapter.config_class.defaults() for model_type, adapter in ADAPTERS.items()
}
