"""Multimodal wrappers whose language model is the nested ``text_config``: gemma3, gemma4,
llama4, mistral3, kimi_vl, qwen2_5_vl (whose first releases state it at the top level instead),
qwen3_5 and qwen3_5_moe (Qwen3.5 / Qwen3.6), qwen3_vl and qwen3_vl_moe, lfm2_vl (LFM2-VL). Each
declares its own defaults and which text model_type it holds, and reads its ``vision_config`` as
the image encoder and projector the checkpoint carries (gemma3: SigLIP, llama4: its own ViT,
mistral3: Pixtral, kimi_vl: MoonViT, qwen2_5_vl: its window-attention ViT, qwen3_vl: its ViT with
DeepStack mergers, qwen3_5: the same ViT without them). A config.json without
``vision_config`` (a text-only copy) imports the language model only.

Defaults: transformers 5.24.0, models/<type>/configuration_<type>.py (the wrapper classes and
the SiglipVisionConfig, Llama4VisionConfig and PixtralVisionConfig they build).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from pydantic import Field, model_validator

from kvcalc.registry.hf.base import (
    HFConfig,
    LayerCount,
    NonNegInt,
    PosInt,
    TextConfig,
    Where,
    field_error,
)


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
    #: The wrapper's text class defaults where they differ from ``text_model_type``'s adapter
    #: (Qwen2_5_VLTextConfig against Qwen2Config), filled in for keys text_config leaves out.
    text_defaults: ClassVar[dict[str, Any]] = {}

    text_config: dict[str, Any]
    tie_word_embeddings: bool
    vision_config: dict[str, Any] | None = None

    def vision(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        """The registry ``architecture.vision`` mapping of the checkpoint's image encoder and
        projector (``where`` is this config's), or None when it carries none kvcalc describes."""
        if self.vision_config is None:
            return None
        return self._vision(where.nested("vision_config"), self.vision_config, text_hidden)

    def audio(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        """The registry ``architecture.audio`` mapping of an audio tower; None: none (only
        Gemma 4's small models carry one kvcalc describes)."""
        return None

    def _vision(
        self, inner: Where, data: dict[str, Any], text_hidden: int
    ) -> dict[str, Any] | None:
        """The vision mapping of a stated ``vision_config`` (``data``, found at ``inner``); each
        wrapper reads its own tower's config."""
        return None

    @model_validator(mode="before")
    @classmethod
    def _text_config_stated(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        text = data.get("text_config")
        if text is None:
            text = cls.top_level_text(data)
        # The wrapper classes would build a default text config; a default model is no answer.
        if text is None:
            raise field_error(
                "text_config",
                f"missing required field (a {data.get('model_type')} config holds its "
                "language model there)",
            )
        if isinstance(text, dict) and cls.text_defaults:
            text = cls.text_defaults | text
        return data | {"text_config": text}

    @classmethod
    def top_level_text(cls, data: dict[str, Any]) -> dict[str, Any] | None:
        """The language model's keys when a config states them beside the wrapper's own instead
        of in text_config; None when the wrapper never does (text_config is then required)."""
        return None

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

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        siglip = inner.parse(SiglipVisionConfig, data)
        # Gemma3MultiModalProjector: an RMSNorm of the tower's width and mm_input_projection.
        return siglip.tower() | {
            "tokens_per_image": self.mm_tokens_per_image,
            "projector": [[siglip.hidden_size, text_hidden]],
            "projector_norm": siglip.hidden_size,
            # Gemma3ForConditionalGeneration: image tokens attend both ways (vLLM's
            # is_mm_prefix_lm, gemma3_mm.py).
            "prefix_lm": True,
        }


#: The largest item Gemma 4's vLLM processor states: a video of _VIDEO_MAX_FRAMES 32 frames of
#: _VIDEO_MAX_SOFT_TOKENS 70, each with its two image markers and about six timestamp tokens
#: (get_mm_max_tokens_per_item, vllm/model_executor/models/gemma4_mm.py of 0.22.1 to 0.34.0),
#: above an image's 280 and the E models' audio.
GEMMA4_VIDEO_TOKENS = 32 * (70 + 2 + 6)


class Gemma4VisionConfig(HFConfig):
    """Gemma4VisionConfig (transformers 5.24.0 defaults)."""

    hidden_size: PosInt = 768
    intermediate_size: PosInt = 3072
    num_hidden_layers: LayerCount = 16
    num_attention_heads: PosInt = 12
    patch_size: PosInt = 16
    pooling_kernel_size: PosInt = 3
    position_embedding_size: PosInt = 10240


class Gemma4AudioConfig(HFConfig):
    """Gemma4AudioConfig (transformers 5.24.0 defaults)."""

    hidden_size: PosInt = 1024
    num_hidden_layers: LayerCount = 12
    num_attention_heads: PosInt = 8
    conv_kernel_size: PosInt = 5
    subsampling_conv_channels: list[PosInt] = Field(default=[128, 32], min_length=2, max_length=2)
    output_proj_dims: PosInt = 1536


class Gemma4Config(WrapperConfig):
    model_types = ("gemma4",)
    text_model_type = "gemma4_text"
    fixed_text_class = True
    tie_word_embeddings: bool = True
    audio_config: dict[str, Any] | None = None

    def audio(self, where: Where, text_hidden: int) -> dict[str, Any] | None:
        """The registry ``architecture.audio`` mapping of the audio tower (E2B, E4B), if any."""
        if self.audio_config is None:
            return None
        a = where.nested("audio_config").parse(Gemma4AudioConfig, self.audio_config)
        if a.hidden_size % a.num_attention_heads:
            where.nested("audio_config").fail(
                "num_attention_heads", f"must divide hidden_size {a.hidden_size}"
            )
        return {
            "num_layers": a.num_hidden_layers,
            "hidden_size": a.hidden_size,
            "num_attention_heads": a.num_attention_heads,
            "conv_kernel_size": a.conv_kernel_size,
            "subsampling_conv_channels": list(a.subsampling_conv_channels),
            "output_proj_dims": a.output_proj_dims,
            "text_hidden_size": text_hidden,
        }
    #: Soft tokens per image: the processor's default budget (Gemma4ImageProcessor
    #: max_soft_tokens 280; released configs state vision_soft_tokens_per_image 280).
    vision_soft_tokens_per_image: PosInt = 280

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        v = inner.parse(Gemma4VisionConfig, data)
        pool = v.pooling_kernel_size
        side = pool * round(self.vision_soft_tokens_per_image**0.5)
        # Gemma4VisionModel: a bias-free patch linear, a 2 x position_embedding_size position
        # table, RMSNorms, bias-free attention and gated MLP, a parameter-free pooler.
        # Gemma4MultimodalEmbedder: a scale-free RMSNorm, then tower width -> text hidden.
        return {
            "num_layers": v.num_hidden_layers,
            "hidden_size": v.hidden_size,
            "intermediate_size": v.intermediate_size,
            "num_attention_heads": v.num_attention_heads,
            "patch_size": v.patch_size,
            "image_size": v.patch_size * side,  # variable resolution: only positions read it
            "position_rows": 2 * v.position_embedding_size,
            "tokens_per_image": self.vision_soft_tokens_per_image,
            "patch_bias": False,
            "outer_norms": 0,
            "norm_bias": False,
            "attention_bias": False,
            "mlp_bias": False,
            "gated_mlp": True,
            "projector": [[v.hidden_size, text_hidden]],
            "sharded": False,  # vLLM's gemma4_mm builds it with transformers' AutoModel
            # Gemma4ModelArchConfigConvertor.is_mm_prefix_lm (vLLM 0.22.1 to 0.34.0).
            "prefix_lm": self.text_config.get("use_bidirectional_attention") == "vision",
            "prefix_window_clamped": True,  # mm_prefix_clamp_sliding_window, gemma4.py
            "max_item_tokens": GEMMA4_VIDEO_TOKENS,
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

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        v = inner.parse(Llama4VisionConfig, data)
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

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        v = inner.parse(PixtralVisionConfig, data)
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

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        v = inner.parse(MoonViTConfig, data)
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


#: Qwen2_5_VLTextConfig's defaults where they differ from Qwen2Config's (transformers 5.24.0
#: models/qwen2_5_vl/configuration_qwen2_5_vl.py: the 72B shape), filled in for a key the
#: config does not state, as transformers does.
QWEN2_5_VL_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 152064,
    "hidden_size": 8192,
    "intermediate_size": 29568,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "max_window_layers": 80,
}

#: Top-level keys of a Qwen2.5-VL config.json that are not its language model's.
_QWEN2_5_VL_OWN_KEYS = ("model_type", "text_config", "vision_config", "architectures")


class Qwen25VisionConfig(HFConfig):
    """Qwen2_5_VLVisionConfig (transformers 5.24.0 defaults; hidden_size 3584 is its default,
    every released config states 1280)."""

    depth: LayerCount = 32
    hidden_size: PosInt = 3584
    intermediate_size: PosInt = 3420
    num_heads: PosInt = 16
    in_channels: PosInt = 3
    patch_size: PosInt = 14
    spatial_merge_size: PosInt = 2
    temporal_patch_size: PosInt = 2
    out_hidden_size: PosInt = 3584
    window_size: PosInt = 112
    fullatt_block_indexes: list[NonNegInt] = Field(default=[7, 15, 23, 31])


class Qwen25VLConfig(WrapperConfig):
    model_types = ("qwen2_5_vl",)
    # Qwen2_5_VLTextConfig is a Qwen2 decoder (M-RoPE changes positions, not shapes or caches).
    text_model_type = "qwen2"
    fixed_text_class = True
    tie_word_embeddings: bool = False
    #: Qwen2-VL's image processor max_pixels (12,845,056 = 3584^2): the largest image, 256 x 256
    #: patches of 14, merged 2 x 2 into 16,384 tokens (vLLM's max tokens per image).
    max_image_side: ClassVar[int] = 3584

    text_defaults = QWEN2_5_VL_TEXT_DEFAULTS

    @classmethod
    def top_level_text(cls, data: dict[str, Any]) -> dict[str, Any] | None:
        # Released Qwen2.5-VL configs (transformers 4.4x-4.53) state the language model at the
        # top level; later saves nest it in text_config. A top level stating none of the
        # importer's shape fields describes no checkpoint.
        from kvcalc.registry.hf.importer import SHAPE_FIELDS

        if not any(key in data for key in SHAPE_FIELDS):
            raise field_error(
                "text_config",
                "missing: a qwen2_5_vl config states its language model in text_config or at "
                f"the top level ({', '.join(SHAPE_FIELDS)}); give the checkpoint's own config.json",
            )
        return {k: v for k, v in data.items() if k not in _QWEN2_5_VL_OWN_KEYS}

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        v = inner.parse(Qwen25VisionConfig, data)
        if v.out_hidden_size != text_hidden:
            inner.fail("out_hidden_size", f"must equal the text hidden_size {text_hidden}")
        if any(i >= v.depth for i in v.fullatt_block_indexes):
            inner.fail("fullatt_block_indexes", f"must index blocks below depth {v.depth}")
        merged = v.hidden_size * v.spatial_merge_size**2
        side = self.max_image_side // v.patch_size // v.spatial_merge_size
        # Qwen2_5_VisionTransformer: a bias-free Conv3d patch embedding over temporal_patch_size
        # frames, 2D rotary positions, RMSNorms, biased qkv/proj and gated SiLU MLP. Window
        # attention (window_size, fullatt_block_indexes) changes neither weights nor any cache.
        # Qwen2_5_VLPatchMerger: an RMSNorm, then merged -> merged -> out_hidden_size, biased.
        return {
            "num_layers": v.depth,
            "hidden_size": v.hidden_size,
            "intermediate_size": v.intermediate_size,
            "num_attention_heads": v.num_heads,
            "patch_size": v.patch_size,
            "image_size": self.max_image_side,
            "num_channels": v.in_channels,
            "temporal_patch_size": v.temporal_patch_size,
            "tokens_per_image": side * side,
            "patch_bias": False,
            "outer_norms": 0,
            "norm_bias": False,
            "gated_mlp": True,
            "position_table": False,
            "projector_norm": v.hidden_size,
            "projector": [[merged, merged], [merged, v.out_hidden_size]],
            "projector_bias": True,
        }


class Qwen35VisionConfig(HFConfig):
    """Qwen3_5VisionConfig / Qwen3_5MoeVisionConfig (transformers 5.20.2 defaults; every release
    states its own out_hidden_size, the text hidden size)."""

    depth: LayerCount = 27
    hidden_size: PosInt = 1152
    intermediate_size: PosInt = 4304
    num_heads: PosInt = 16
    in_channels: PosInt = 3
    patch_size: PosInt = 16
    spatial_merge_size: PosInt = 2
    temporal_patch_size: PosInt = 2
    out_hidden_size: PosInt = 3584
    num_position_embeddings: PosInt = 2304
    deepstack_visual_indexes: list[NonNegInt] = Field(default=[])


class Qwen3VLVisionConfig(Qwen35VisionConfig):
    """Qwen3VLVisionConfig / Qwen3VLMoeVisionConfig: DeepStack features from blocks 8, 16, 24."""

    deepstack_visual_indexes: list[NonNegInt] = Field(default=[8, 16, 24])


class Qwen35Config(WrapperConfig):
    """Qwen3_5Config / Qwen3_5MoeConfig: the text model in text_config (a fixed class) and
    Qwen3-VL's vision transformer."""

    model_types = ("qwen3_5",)
    text_model_type = "qwen3_5_text"
    fixed_text_class = True
    tie_word_embeddings: bool = False
    #: The largest image vLLM profiles: the image processor's size.longest_edge, 16,777,216
    #: pixels as the releases' preprocessor_config.json state it (not the class default),
    #: 4,096 x 4,096: 256 x 256 patches of 16, merged 2 x 2 into 16,384 tokens.
    max_image_pixels: ClassVar[int] = 16_777_216
    vision_class: ClassVar[type[Qwen35VisionConfig]] = Qwen35VisionConfig

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        v = inner.parse(self.vision_class, data)
        if v.out_hidden_size != text_hidden:
            inner.fail("out_hidden_size", f"must equal the text hidden_size {text_hidden}")
        if any(i >= v.depth for i in v.deepstack_visual_indexes):
            inner.fail("deepstack_visual_indexes", f"must index blocks below depth {v.depth}")
        grid = math.isqrt(v.num_position_embeddings)
        if grid * grid != v.num_position_embeddings:
            inner.fail("num_position_embeddings", "must be a square (a grid of positions)")
        merged = v.hidden_size * v.spatial_merge_size**2
        merge = v.patch_size * v.spatial_merge_size
        side = math.isqrt(self.max_image_pixels) // merge
        # vLLM Qwen3_VisionTransformer: a biased Conv3d patch embedding over
        # temporal_patch_size frames, a learned grid of num_position_embeddings positions
        # (interpolated to the image; image_size below is that grid's side in pixels), 2D
        # rotary positions, LayerNorm blocks with biased qkv/proj and a GELU fc1/fc2 MLP. The
        # merger: a LayerNorm of the tower's width (weight and bias, 2 x hidden values), then
        # merged -> merged -> out_hidden_size, biased; each DeepStack merger (Qwen3-VL) the same
        # after a LayerNorm of the merged width.
        deepstack = len(v.deepstack_visual_indexes)
        merger = [[merged, merged], [merged, v.out_hidden_size]]
        return {
            "num_layers": v.depth,
            "hidden_size": v.hidden_size,
            "intermediate_size": v.intermediate_size,
            "num_attention_heads": v.num_heads,
            "patch_size": v.patch_size,
            "image_size": grid * v.patch_size,
            "profile_image_size": math.isqrt(self.max_image_pixels),
            "num_channels": v.in_channels,
            "temporal_patch_size": v.temporal_patch_size,
            "tokens_per_image": side * side,
            "outer_norms": 0,
            "projector_norm": 2 * v.hidden_size + deepstack * 2 * merged,
            "projector": merger * (1 + deepstack),
            "projector_bias": True,
        }


class Qwen35MoeConfig(Qwen35Config):
    model_types = ("qwen3_5_moe",)
    text_model_type = "qwen3_5_moe_text"


class Qwen3VLConfig(Qwen35Config):
    """Qwen3VLConfig: Qwen3's dense decoder and the ViT with its DeepStack mergers."""

    model_types = ("qwen3_vl",)
    text_model_type = "qwen3_vl_text"
    vision_class = Qwen3VLVisionConfig


class Qwen3VLMoeConfig(Qwen3VLConfig):
    model_types = ("qwen3_vl_moe",)
    text_model_type = "qwen3_vl_moe_text"


class Siglip2VisionConfig(HFConfig):
    """transformers' Siglip2VisionConfig defaults (SigLIP2 base): a NaFlex tower whose learned
    position table has ``num_patches`` rows (a square grid, interpolated to each image)."""

    hidden_size: PosInt = 768
    intermediate_size: PosInt = 3072
    num_hidden_layers: LayerCount = 12
    num_attention_heads: PosInt = 12
    num_channels: PosInt = 3
    num_patches: PosInt = 256
    patch_size: PosInt = 16
    vision_use_head: bool = False


class Lfm2VlConfig(WrapperConfig):
    """Liquid AI LFM2-VL (lfm2_vl): an LFM2 language model, a SigLIP2 tower and a two-layer GELU
    projector over pixel-unshuffled patches. Defaults: transformers 5.0.0
    models/lfm2_vl/configuration_lfm2_vl.py (the text model_type follows text_config, lfm2
    when it names none); the modules read are vLLM 0.19's lfm2_vl.py
    (Lfm2VLMultiModalProjector) and lfm2_siglip2.py (the tower, post_layernorm, no head)."""

    model_types = ("lfm2_vl",)
    text_model_type = "lfm2"
    fixed_text_class = False
    tie_word_embeddings: bool = True
    projector_hidden_size: PosInt = 2560
    projector_bias: bool = True
    projector_use_layernorm: bool = True
    downsample_factor: PosInt = 2
    #: Lfm2VlImageProcessor's default max_image_tokens: one 512 x 512 tile, 32 x 32 patches of
    #: 16 unshuffled by 2 (larger images are tiled and cost more).
    tokens_per_image: ClassVar[int] = 256

    def _vision(self, inner: Where, data: dict[str, Any], text_hidden: int) -> dict[str, Any]:
        siglip = inner.parse(Siglip2VisionConfig, data)
        side = math.isqrt(siglip.num_patches)
        if side * side != siglip.num_patches:
            inner.fail("num_patches", f"must be a square grid, got {siglip.num_patches}")
        if siglip.vision_use_head:
            inner.fail("vision_use_head", "a SigLIP2 head is not what LFM2-VL loads")
        inputs = siglip.hidden_size * self.downsample_factor**2
        hidden = self.projector_hidden_size
        return {
            "num_layers": siglip.num_hidden_layers,
            "hidden_size": siglip.hidden_size,
            "intermediate_size": siglip.intermediate_size,
            "num_attention_heads": siglip.num_attention_heads,
            "patch_size": siglip.patch_size,
            "image_size": side * siglip.patch_size,
            "num_channels": siglip.num_channels,
            "tokens_per_image": self.tokens_per_image,
            "projector": [[inputs, hidden], [hidden, text_hidden]],
            "projector_bias": self.projector_bias,
            # The LayerNorm over the unshuffled patches: weight and bias.
            **({"projector_norm": 2 * inputs} if self.projector_use_layernorm else {}),
        }
