"""Multimodal wrappers whose language model is the nested ``text_config``: gemma3, llama4,
mistral3, kimi_vl. Each declares its own defaults and which text model_type it holds, and reads
its ``vision_config`` as the image encoder and projector the checkpoint carries (gemma3: SigLIP,
llama4: its own ViT, mistral3: Pixtral, kimi_vl: MoonViT). A config.json without
``vision_config`` (a text-only copy) imports the language model only.

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py (the wrapper classes and
the SiglipVisionConfig, Llama4VisionConfig and PixtralVisionConfig they build).
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, model_validator

from kvcalc.registry.hf.base import HFConfig, LayerCount, PosInt, TextConfig, Where, field_error


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
    vision_config: dict[str, Any] | None = None

    def vision(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        """The registry ``architecture.vision`` mapping of the checkpoint's image encoder and
        projector (``where`` is this config's), or None when it carries none kvcalc describes."""
        return None

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


class VisionConfig(HFConfig):
    """The keys of a ViT config every tower here has."""

    hidden_size: PosInt
    intermediate_size: PosInt
    num_hidden_layers: LayerCount
    num_attention_heads: PosInt
    num_channels: PosInt
    image_size: PosInt
    patch_size: PosInt

    def tower(self) -> dict[str, Any]:
        return {
            "num_layers": self.num_hidden_layers,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads,
            "patch_size": self.patch_size,
            "image_size": self.image_size,
            "num_channels": self.num_channels,
        }


class SiglipVisionConfig(VisionConfig):
    hidden_size: PosInt = 768
    intermediate_size: PosInt = 3072
    num_hidden_layers: LayerCount = 12
    num_attention_heads: PosInt = 12
    num_channels: PosInt = 3
    image_size: PosInt = 224
    patch_size: PosInt = 16


class Gemma3Config(WrapperConfig):
    model_types = ("gemma3",)
    text_model_type = "gemma3_text"
    fixed_text_class = True
    tie_word_embeddings: bool = True
    mm_tokens_per_image: PosInt = 256

    def vision(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        if self.vision_config is None:
            return None
        siglip = where.nested("vision_config").parse(SiglipVisionConfig, self.vision_config)
        # Gemma3MultiModalProjector: an RMSNorm of the tower's width and mm_input_projection.
        return siglip.tower() | {
            "tokens_per_image": self.mm_tokens_per_image,
            "projector": [[siglip.hidden_size, text_hidden]],
            "projector_norm": siglip.hidden_size,
        }


class Llama4VisionConfig(VisionConfig):
    hidden_size: PosInt = 768
    intermediate_size: PosInt = 5632
    num_hidden_layers: LayerCount = 34
    num_attention_heads: PosInt = 16
    num_channels: PosInt = 3
    image_size: PosInt = 448
    patch_size: PosInt = 14
    vision_output_dim: PosInt = 7680
    projector_input_dim: PosInt = 4096
    projector_output_dim: PosInt = 4096
    pixel_shuffle_ratio: float = 0.5


class Llama4Config(WrapperConfig):
    model_types = ("llama4",)
    text_model_type = "llama4_text"
    fixed_text_class = True
    tie_word_embeddings: bool = False

    def vision(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        if self.vision_config is None:
            return None
        inner = where.nested("vision_config")
        v = inner.parse(Llama4VisionConfig, self.vision_config)
        shuffle = v.pixel_shuffle_ratio
        if not 0 < shuffle <= 1:
            inner.fail("pixel_shuffle_ratio", f"must be in (0, 1], got {shuffle}")
        patches = (v.image_size // v.patch_size) ** 2
        # The unfold patch linear has no bias; a class token; layernorm_pre and _post; the
        # pixel-shuffle MLP (intermediate_size -> projector_input_dim -> projector_output_dim)
        # and multi_modal_projector (vision_output_dim -> text hidden), without biases.
        return v.tower() | {
            "tokens_per_image": round(patches * shuffle * shuffle),
            "patch_bias": False,
            "class_token": True,
            "outer_norms": 2,
            "projector": [
                [v.intermediate_size, v.projector_input_dim],
                [v.projector_input_dim, v.projector_output_dim],
                [v.vision_output_dim, text_hidden],
            ],
        }


class PixtralVisionConfig(VisionConfig):
    hidden_size: PosInt = 1024
    intermediate_size: PosInt = 4096
    num_hidden_layers: LayerCount = 24
    num_attention_heads: PosInt = 16
    num_channels: PosInt = 3
    image_size: PosInt = 1024
    patch_size: PosInt = 16


class Mistral3Config(WrapperConfig):
    model_types = ("mistral3",)
    text_model_type = "mistral"
    fixed_text_class = False
    # Untied: vLLM builds Mistral3's language model from text_config (MistralForCausalLM, whose
    # default is untied), and the logged "Model loading took 44.76 GiB" of Mistral-Small-3.1-24B
    # (llm-d-planner, vLLM 0.19) is the untied count (43.51 GiB tied); the checkpoint has its
    # own lm_head.weight.
    tie_word_embeddings: bool = False
    spatial_merge_size: PosInt = 2

    def vision(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        if self.vision_config is None:
            return None
        v = where.nested("vision_config").parse(PixtralVisionConfig, self.vision_config)
        merge = self.spatial_merge_size
        side = v.image_size // v.patch_size // merge
        # Pixtral: patch conv without bias, RMSNorms (ln_pre and two per block), bias-free
        # attention and gated SiLU MLP, 2D RoPE. Mistral3MultiModalProjector: an RMSNorm, the
        # patch merger (merge^2 patches -> one) and two linears; one [IMG_BREAK] per row.
        return v.tower() | {
            "tokens_per_image": side * side + side,
            "patch_bias": False,
            "norm_bias": False,
            "attention_bias": False,
            "mlp_bias": False,
            "gated_mlp": True,
            "position_table": False,
            "projector_norm": v.hidden_size,
            "projector": [
                [v.hidden_size * merge * merge, v.hidden_size],
                [v.hidden_size, text_hidden],
                [text_hidden, text_hidden],
            ],
        }


class MoonViTConfig(HFConfig):
    """Kimi-VL's MoonViT (remote code, configuration_kimi_vl.py MoonViTConfig defaults)."""

    hidden_size: PosInt = 1152
    intermediate_size: PosInt = 4304
    num_hidden_layers: LayerCount = 27
    num_attention_heads: PosInt = 16
    patch_size: PosInt = 14
    init_pos_emb_height: PosInt = 64
    init_pos_emb_width: PosInt = 64
    merge_kernel_size: list[PosInt] = Field(default=[2, 2], min_length=2, max_length=2)


class KimiVLConfig(WrapperConfig):
    # Kimi-VL is remote code (no transformers class): its text_config is a DeepSeek-V3 model.
    model_types = ("kimi_vl",)
    text_model_type = "deepseek_v3"
    fixed_text_class = False
    tie_word_embeddings: bool = False

    def vision(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        if self.vision_config is None:
            return None
        inner = where.nested("vision_config")
        v = inner.parse(MoonViTConfig, self.vision_config)
        if v.init_pos_emb_height != v.init_pos_emb_width:
            inner.fail("init_pos_emb_width", "must equal init_pos_emb_height (a square table)")
        merge = v.merge_kernel_size[0] * v.merge_kernel_size[1]
        side = v.init_pos_emb_height
        # MoonViT is SigLIP-shaped (biased patch conv, attention and MLP, LayerNorms, a learned
        # side x side position table, a final LayerNorm). KimiVLMultiModalProjector: a LayerNorm
        # of the tower's width (weight and bias), then merge x width -> merge x width -> text
        # hidden (their biases, 0.01% of it, not counted).
        return {
            "num_layers": v.num_hidden_layers,
            "hidden_size": v.hidden_size,
            "intermediate_size": v.intermediate_size,
            "num_attention_heads": v.num_attention_heads,
            "patch_size": v.patch_size,
            "image_size": v.patch_size * side,  # the position table's side in patches
            "tokens_per_image": side * side // merge,
            "projector_norm": 2 * v.hidden_size,
            "projector": [
                [merge * v.hidden_size, merge * v.hidden_size],
                [merge * v.hidden_size, text_hidden],
            ],
        }
