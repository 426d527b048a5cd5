"""The vision tower of a multimodal checkpoint, as the engine loads it beside the language
model (:attr:`kvcalc.engine.spec.ModelSpec.vision`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VisionEncoder:
    """The image encoder of a multimodal checkpoint (a ViT: patch embedding, position table,
    ``layers`` pre-norm blocks of attention and an MLP, two norms each) and the projector into
    the text model, as the engine loads them beside the language model. The defaults describe
    SigLIP and Llama-4's tower (LayerNorms with biases, biased attention and GELU MLP, a learned
    position table); Pixtral has RMSNorms, no biases, a gated MLP and 2D RoPE instead.

    ``projector`` lists the bias-free linears after the tower as (inputs, outputs): Llama-4's
    pixel-shuffle MLP and multi_modal_projector; Gemma-3's mm_input_projection (after an RMSNorm
    of ``projector_norm`` values); Qwen2.5-VL's patch merger (an RMSNorm, then a biased MLP over
    2 x 2 merged patches). ``tokens_per_image`` is what one image costs the text model
    (the encoder-cache entry vLLM's profiler holds)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    patch: int
    image: int
    tokens_per_image: int
    channels: int = 3
    temporal_patch: int = 1
    """Frames one patch spans: Qwen2.5-VL's Conv3d patch embedding covers 2 (a still image is
    repeated), so its kernel is ``temporal_patch`` times a 2D one."""
    patch_bias: bool = True
    """SigLIP's patch convolution has a bias; Llama-4's unfold linear has none."""
    class_token: bool = False
    """Llama-4: a class embedding, and one more row of the position table."""
    outer_norms: int = 1
    """Norms around the block stack: SigLIP's post_layernorm; Llama-4's pre and post."""
    projector: tuple[tuple[int, int], ...] = ()
    projector_norm: int = 0
    projector_bias: bool = False
    """Biases on the projector's linears (Qwen2.5-VL's patch-merger MLP); off for Llama-4,
    Gemma-3 and Mistral-3, whose projectors have none."""
    norm_bias: bool = True
    """LayerNorms (weight and bias); False: RMSNorms (weight only)."""
    attention_bias: bool = True
    mlp_bias: bool = True
    gated_mlp: bool = False
    """gate, up and down (Pixtral's SiLU MLP); False: fc1 and fc2."""
    position_table: bool = True
    """A learned position per patch; False: rotary positions (Pixtral's 2D RoPE)."""
    sharded: bool = True
    """Split over tensor-parallel ranks as vLLM's own tower modules split them; False: whole on
    every rank (vLLM builds Gemma 4's tower with transformers' AutoModel)."""
    position_rows: int = 0
    """Rows of a learned position table that is not one row per patch of ``image`` (Gemma 4:
    two axes of position_embedding_size); 0: one per patch."""
    profile_image: int = 0
    """Side in pixels of the largest image the processor admits (the dummy image vLLM's
    profiler encodes) where ``image`` is not it: Qwen3-VL and Qwen3.5 interpolate a learned
    grid (``image``, 768) to images up to the processor's size.longest_edge, 16,777,216 pixels
    = 4,096 x 4,096. 0: ``image``."""
    prefix_lm: bool = False
    """Image tokens attend to each other both ways in the language model (vLLM's
    ``is_mm_prefix_lm``: Gemma 3, whose ``model_type`` "gemma3" is on the fallback list of
    vllm/transformers_utils/model_arch_config_convertor.py, 0.28.0 to 0.34.0), which picks the
    attention backend (:func:`kvcalc.engine.vllm_backends.default_backend_block`). Gemma 4 is
    one where its text config's ``use_bidirectional_attention`` is "vision"
    (``Gemma4ModelArchConfigConvertor.is_mm_prefix_lm``, 0.22.1 to 0.34.0)."""
    prefix_window_clamped: bool = False
    """vLLM's model marks its sliding-window layers ``mm_prefix_clamp_sliding_window`` (Gemma 4,
    gemma4.py of 0.30.0 and 0.34.0), so the composite backend's routing keeps FULL decode
    graphs beside them (``_has_unclamped_window``, composite.py); Gemma 3's are not marked."""
    max_item_tokens: int = 0
    """Tokens of the largest multimodal item vLLM's processor states one can become
    (``get_mm_max_tokens_per_item``): Gemma 4's video, 32 frames x (70 soft tokens + 2 + 6 of
    markers and timestamps) = 2,496 (gemma4_mm.py of 0.22.1 to 0.34.0). 0: none stated, as for
    Gemma 3 (vLLM profiles a dummy input instead). A prefix LM's default batched tokens are
    raised to it (:func:`kvcalc.engine.vllm.max_num_batched_tokens_for`)."""

    @property
    def patches_per_image(self) -> int:
        """Patches of the largest image the tower encodes (before any merge or pooling into
        ``tokens_per_image``), one frame: Qwen3.5's 4,096-pixel side is 256 x 256 patches of
        16; Gemma-3's 896 is 64 x 64 of 14."""
        side = (self.profile_image or self.image) // self.patch
        return side * side
