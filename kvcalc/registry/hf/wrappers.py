"""Multimodal wrappers whose language model is the nested ``text_config``: gemma3, llama4,
mistral3, kimi_vl. Each declares its own defaults and which text model_type it holds.

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py (the wrapper classes).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import model_validator

from kvcalc.registry.hf.base import HFConfig, TextConfig, field_error


class WrapperConfig(HFConfig):
    """A wrapper config: the text config is required (kvcalc sizes the language model), the
    wrapper's own keys are the lm_head's tie flag and the dtype."""

    #: The config.json model_type values of this wrapper.
    model_types: ClassVar[tuple[str, ...]]
    #: The text model_type used when text_config names none.
    text_model_type: ClassVar[str]
    #: True when the wrapper builds its text config with a fixed class, whatever model_type the
    #: text_config states (Gemma3Config, Llama4Config).
    fixed_text_class: ClassVar[bool]

    text_config: dict[str, Any]
    tie_word_embeddings: bool

    @model_validator(mode="before")
    @classmethod
    def _text_config_stated(cls, data: Any) -> Any:
        # The wrapper classes would build a default text config; a default model is no answer.
        if isinstance(data, dict) and data.get("text_config") is None:
            raise field_error(
                "text_config",
                f"missing required field (a {data.get('model_type')} config holds its "
                "language model there)",
            )
        return data

    def tied_embeddings(self, text: TextConfig) -> bool:
        # The lm_head lives on the wrapper, so its flag governs; an explicit one in either place
        # wins over the wrapper class default.
        if "tie_word_embeddings" in self.model_fields_set:
            return self.tie_word_embeddings
        if "tie_word_embeddings" in text.model_fields_set:
            return text.tie_word_embeddings
        return self.tie_word_embeddings


class Gemma3Config(WrapperConfig):
    model_types = ("gemma3",)
    text_model_type = "gemma3_text"
    fixed_text_class = True
    tie_word_embeddings: bool = True


class Llama4Config(WrapperConfig):
    model_types = ("llama4",)
    text_model_type = "llama4_text"
    fixed_text_class = True
    tie_word_embeddings: bool = False


class Mistral3Config(WrapperConfig):
    model_types = ("mistral3",)
    text_model_type = "mistral"
    fixed_text_class = False
    tie_word_embeddings: bool = True


class KimiVLConfig(WrapperConfig):
    # Kimi-VL is remote code (no transformers class): its text_config is a DeepSeek-V3 model.
    model_types = ("kimi_vl",)
    text_model_type = "deepseek_v3"
    fixed_text_class = False
    tie_word_embeddings: bool = False
