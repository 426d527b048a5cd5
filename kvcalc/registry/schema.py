"""Pydantic schemas of the model registry files (model_configs/models/*.yaml).

Strict on purpose: unknown keys are rejected, numbers must be positive, and cross-field rules
(query heads divisible by KV heads, every pattern name defined) are checked, so a typo in a
registry file fails loudly instead of silently changing a number.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcalc.engine import spec, units
from kvcalc.engine.quant import NAMED_FORMATS, CheckpointFormat, plain
from kvcalc.engine.units import MAX_CONTEXT_TOKENS
from kvcalc.registry.load import REGISTRY_ID

# Every number of a model file is bounded, so that no file can make the engine's arithmetic
# absurd: a dimension or count below 2^31 (no tensor dimension of any model comes near), at most
# MAX_LAYERS layers (the bound config.json imports have), a context within kvcalc's limit of
# 2^30 tokens, and finite parameter counts below 10^15 (the largest models have ~2 x 10^12).
MAX_DIMENSION = (1 << 31) - 1
MAX_LAYERS = 100_000
MAX_PARAMS = 1e15
PosInt = Annotated[int, Field(gt=0, le=MAX_DIMENSION, strict=True)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_DIMENSION, strict=True)]
LayerCount = Annotated[int, Field(gt=0, le=MAX_LAYERS, strict=True)]
ContextTokens = Annotated[int, Field(gt=0, le=MAX_CONTEXT_TOKENS, strict=True)]
ParamCount = Annotated[float, Field(gt=0, le=MAX_PARAMS, allow_inf_nan=False)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- mixers


class _AttentionBase(Strict):
    kv_heads: PosInt
    head_dim: PosInt
    head_dim_v: PosInt | None = Field(None, description="V head dim when it differs from K")
    q_heads: PosInt | None = Field(None, description="defaults to num_attention_heads")
    sinks: bool = Field(False, description="learned attention-sink logits (gpt-oss); no KV cost")
    output_gate: bool = Field(
        False, description="a sigmoid gate on the output (Qwen3.5 attn_output_gate); no KV cost"
    )

    def _fields(self, q_heads: int) -> dict:
        fields = {
            "kv_heads": self.kv_heads,
            "head_dim_k": self.head_dim,
            "head_dim_v": self.head_dim_v or self.head_dim,
            "q_heads": self.q_heads or q_heads,
        }
        return fields | {"output_gate": True} if self.output_gate else fields


class FullAttention(_AttentionBase):
    kind: Literal["full"]

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.FullAttention(**self._fields(arch.num_attention_heads))


class SlidingAttention(_AttentionBase):
    kind: Literal["sliding"]
    window: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.SlidingWindowAttention(
            **self._fields(arch.num_attention_heads), window=self.window
        )


class ChunkedAttention(_AttentionBase):
    kind: Literal["chunked"]
    chunk: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.ChunkedLocalAttention(
            **self._fields(arch.num_attention_heads), chunk=self.chunk
        )


class MLAttention(Strict):
    kind: Literal["mla"]
    kv_lora_rank: PosInt
    qk_rope_head_dim: PosInt
    qk_nope_head_dim: PosInt
    v_head_dim: PosInt
    q_lora_rank: PosInt | None = Field(None, description="null when queries are not compressed")
    q_heads: PosInt | None = None

    def _fields(self, q_heads: int) -> dict:
        return {
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "qk_nope_head_dim": self.qk_nope_head_dim,
            "v_head_dim": self.v_head_dim,
            "q_heads": self.q_heads or q_heads,
            "q_lora_rank": self.q_lora_rank,
        }

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.MultiHeadLatentAttention(**self._fields(arch.num_attention_heads))


class IndexedMLAttention(MLAttention):
    """MLA plus DeepSeek Sparse Attention's indexer (config.json index_n_heads, index_head_dim,
    index_topk)."""

    kind: Literal["mla_indexed"]  # type: ignore[assignment]
    index_heads: PosInt
    index_head_dim: PosInt
    index_topk: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.IndexedLatentAttention(
            **self._fields(arch.num_attention_heads),
            index_heads=self.index_heads,
            index_head_dim=self.index_head_dim,
            index_topk=self.index_topk,
        )


class CompressedMixer(Strict):
    """DeepSeek-V4 compressed attention, one layer type per ``compress_ratios`` value (0: the
    window only; 4: compressed sparse attention with the indexer; 128: heavily compressed).
    config.json names: sliding_window, head_dim, qk_rope_head_dim, q_lora_rank, o_lora_rank,
    o_groups, index_n_heads, index_head_dim, index_topk."""

    kind: Literal["compressed"]
    compress_ratio: Literal[0, 4, 128]
    window: PosInt
    head_dim: PosInt
    rope_dim: PosInt
    q_lora_rank: PosInt
    o_lora_rank: PosInt
    o_groups: PosInt
    index_heads: NonNegInt = 0
    index_head_dim: NonNegInt = 0
    index_topk: NonNegInt = 0
    hc_mult: NonNegInt = Field(0, description="hyper-connection streams (config.json hc_mult)")
    q_heads: PosInt | None = None

    @model_validator(mode="after")
    def _check(self) -> CompressedMixer:
        if self.rope_dim >= self.head_dim:
            raise ValueError(f"rope_dim {self.rope_dim} must be below head_dim {self.head_dim}")
        if self.compress_ratio == 4 and not (
            self.index_heads and self.index_head_dim and self.index_topk
        ):
            raise ValueError("a compress_ratio 4 layer needs index_heads, index_head_dim and "
                             "index_topk (its indexer)")
        return self

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        q_heads = self.q_heads or arch.num_attention_heads
        if q_heads % self.o_groups:
            raise ValueError(f"{q_heads} query heads do not split into {self.o_groups} o_groups")
        indexed = self.compress_ratio == 4
        return spec.CompressedAttention(
            compress_ratio=self.compress_ratio,
            window=self.window,
            head_dim=self.head_dim,
            rope_dim=self.rope_dim,
            q_heads=q_heads,
            q_lora_rank=self.q_lora_rank,
            o_lora_rank=self.o_lora_rank,
            o_groups=self.o_groups,
            index_heads=self.index_heads if indexed else 0,
            index_head_dim=self.index_head_dim if indexed else 0,
            index_topk=self.index_topk if indexed else 0,
            hc_mult=self.hc_mult,
        )


class MambaMixer(Strict):
    kind: Literal["mamba"]
    d_state: PosInt
    d_conv: PosInt
    expand: PosInt = 2
    d_inner: PosInt | None = Field(None, description="defaults to expand x hidden_size")
    dt_rank: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.Mamba(
            d_inner=self.d_inner or self.expand * arch.hidden_size,
            d_state=self.d_state,
            d_conv=self.d_conv,
            dt_rank=self.dt_rank,
        )


class Mamba2Mixer(Strict):
    """Mamba-2: d_inner is n_heads x head_dim (config.json mamba_n_heads x mamba_d_head)."""

    kind: Literal["mamba2"]
    n_heads: PosInt
    head_dim: PosInt
    n_groups: PosInt
    d_state: PosInt
    d_conv: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.Mamba2(
            n_heads=self.n_heads,
            head_dim=self.head_dim,
            n_groups=self.n_groups,
            d_state=self.d_state,
            d_conv=self.d_conv,
        )


class GatedDeltaNetMixer(Strict):
    kind: Literal["gated_deltanet"]
    k_heads: PosInt
    v_heads: PosInt
    k_head_dim: PosInt
    v_head_dim: PosInt
    conv_kernel: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.GatedDeltaNet(
            k_heads=self.k_heads,
            v_heads=self.v_heads,
            k_head_dim=self.k_head_dim,
            v_head_dim=self.v_head_dim,
            conv_kernel=self.conv_kernel,
        )


class ShortConvMixer(Strict):
    """LFM2's gated short convolution: ``channels`` (config.json conv_dim, its hidden_size) and
    ``conv_kernel`` taps (conv_L_cache), whose last conv_kernel - 1 inputs are the state."""

    kind: Literal["short_conv"]
    channels: PosInt
    conv_kernel: int = Field(
        ge=2, le=64, strict=True, description="taps (conv_L_cache); the state keeps one fewer"
    )
    bias: bool = Field(False, description="conv_bias: in_proj, conv1d and out_proj biases")

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.ShortConv(channels=self.channels, conv_kernel=self.conv_kernel, bias=self.bias)


class LightningMixer(Strict):
    kind: Literal["lightning"]
    heads: PosInt
    head_dim: PosInt

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        return spec.LightningAttention(heads=self.heads, head_dim=self.head_dim)


class SharedKVMixer(Strict):
    """A layer that reads the KV cache of another layer and stores none (Gemma 4's last
    ``num_kv_shared_layers``): ``source`` names the mixer of the layer whose cache it reuses."""

    kind: Literal["shared_kv"]
    source: str = Field(description="the full or sliding mixer whose cache this layer reads")
    wide_mlp: NonNegInt = Field(
        0, description="extra gated-MLP intermediate rows of this layer (use_double_wide_mlp)"
    )

    def to_spec(self, arch: Architecture) -> spec.Mixer:
        source = arch.mixers[self.source].to_spec(arch)
        assert isinstance(source, spec.FullAttention)  # Architecture._check refuses others
        return spec.SharedKVAttention(source=source, wide_mlp=self.wide_mlp)


MixerSchema = Annotated[
    FullAttention
    | SlidingAttention
    | ChunkedAttention
    | CompressedMixer
    | MLAttention
    | IndexedMLAttention
    | MambaMixer
    | Mamba2Mixer
    | GatedDeltaNetMixer
    | ShortConvMixer
    | LightningMixer
    | SharedKVMixer,
    Field(discriminator="kind"),
]

# ---------------------------------------------------------------- feed-forward


class MLPSchema(Strict):
    intermediate_size: PosInt
    gated: bool = Field(True, description="gate+up+down (SwiGLU/GeGLU); false: up+down")


class MoESchema(Strict):
    experts: PosInt
    experts_per_token: PosInt
    intermediate_size: PosInt
    shared_experts: NonNegInt = 0
    shared_intermediate_size: PosInt | None = Field(
        None, description="defaults to intermediate_size"
    )
    gated: bool = True
    first_dense_layers: NonNegInt = 0
    period: PosInt = 1
    offset: NonNegInt = 0

    @model_validator(mode="after")
    def _check(self) -> MoESchema:
        if self.experts_per_token > self.experts:
            raise ValueError(
                f"experts_per_token ({self.experts_per_token}) exceeds experts ({self.experts})"
            )
        return self


class VisionSchema(Strict):
    """A multimodal checkpoint's image encoder (config.json ``vision_config``) and projector."""

    num_layers: LayerCount
    hidden_size: PosInt
    intermediate_size: PosInt
    num_attention_heads: PosInt
    patch_size: PosInt
    image_size: PosInt
    tokens_per_image: PosInt = Field(description="text tokens one image becomes")
    num_channels: PosInt = 3
    temporal_patch_size: PosInt = Field(1, description="frames one patch spans (Qwen2.5-VL: 2)")
    patch_bias: bool = True
    class_token: bool = False
    outer_norms: NonNegInt = 1
    projector: list[tuple[PosInt, PosInt]] = Field(
        [], description="linears after the tower, as [inputs, outputs]"
    )
    projector_norm: NonNegInt = 0
    projector_bias: bool = Field(False, description="biases on the projector's linears")
    norm_bias: bool = Field(True, description="LayerNorms with biases; false: RMSNorms")
    attention_bias: bool = True
    mlp_bias: bool = True
    gated_mlp: bool = False
    position_table: bool = Field(True, description="false: rotary positions (Pixtral)")
    sharded: bool = Field(True, description="false: whole on every TP rank (Gemma 4)")
    position_rows: NonNegInt = Field(
        0, description="position-table rows when not one per patch (Gemma 4); 0: per patch"
    )
    profile_image_size: NonNegInt = Field(
        0,
        description="side in pixels of the largest image the processor admits when it is not "
        "image_size (Qwen3-VL, Qwen3.5: 4096); 0: image_size",
    )
    prefix_lm: bool = Field(
        False, description="image tokens attend both ways in the language model (vLLM's "
        "is_mm_prefix_lm: Gemma 3; Gemma 4 where use_bidirectional_attention is vision)"
    )
    prefix_window_clamped: bool = Field(
        False, description="vLLM's model clamps its sliding windows under the image prefix "
        "mask, so FULL decode graphs stay (Gemma 4)"
    )
    max_item_tokens: NonNegInt = Field(
        0, description="tokens of the largest image, video or audio item vLLM's processor "
        "states (get_mm_max_tokens_per_item; Gemma 4: 2496); 0: none stated"
    )

    def to_spec(self) -> spec.VisionEncoder:
        return spec.VisionEncoder(
            layers=self.num_layers,
            hidden=self.hidden_size,
            intermediate=self.intermediate_size,
            heads=self.num_attention_heads,
            patch=self.patch_size,
            image=self.image_size,
            tokens_per_image=self.tokens_per_image,
            channels=self.num_channels,
            temporal_patch=self.temporal_patch_size,
            patch_bias=self.patch_bias,
            class_token=self.class_token,
            outer_norms=self.outer_norms,
            projector=tuple(self.projector),
            projector_norm=self.projector_norm,
            projector_bias=self.projector_bias,
            norm_bias=self.norm_bias,
            attention_bias=self.attention_bias,
            mlp_bias=self.mlp_bias,
            gated_mlp=self.gated_mlp,
            position_table=self.position_table,
            sharded=self.sharded,
            position_rows=self.position_rows,
            profile_image=self.profile_image_size,
            prefix_lm=self.prefix_lm,
            prefix_window_clamped=self.prefix_window_clamped,
            max_item_tokens=self.max_item_tokens,
        )


class AudioSchema(Strict):
    """Gemma 4's audio encoder (config.json ``audio_config``, a conformer) and its projector."""

    num_layers: LayerCount
    hidden_size: PosInt
    num_attention_heads: PosInt
    conv_kernel_size: PosInt
    subsampling_conv_channels: tuple[PosInt, PosInt]
    output_proj_dims: PosInt
    text_hidden_size: PosInt = Field(description="the projector's outputs: the text hidden size")

    def to_spec(self) -> spec.ConformerAudioEncoder:
        return spec.ConformerAudioEncoder(
            layers=self.num_layers,
            hidden=self.hidden_size,
            heads=self.num_attention_heads,
            conv_kernel=self.conv_kernel_size,
            channels=self.subsampling_conv_channels,
            output_dims=self.output_proj_dims,
            text_hidden=self.text_hidden_size,
        )


class PerLayerInputSchema(Strict):
    """Gemma 4's per-layer embeddings: a table of ``vocab_size`` rows of ``hidden_size`` values
    per decoder layer, with a gate and projection in every layer."""

    vocab_size: PosInt
    hidden_size: PosInt


# ---------------------------------------------------------------- architecture


class Architecture(Strict):
    hidden_size: PosInt
    num_layers: LayerCount
    vocab_size: PosInt
    tied_embeddings: bool
    num_attention_heads: PosInt
    mixers: dict[str, MixerSchema] = Field(min_length=1)
    pattern: list[str] | None = Field(
        None,
        description="mixer names, repeated cyclically over the layers; optional with one mixer",
    )
    mlp: MLPSchema | None = None
    moe: MoESchema | None = None
    vision: VisionSchema | None = None
    audio: AudioSchema | None = None
    per_layer_input: PerLayerInputSchema | None = Field(
        None, description="Gemma 4 per-layer embeddings (vocab_size_per_layer_input and "
        "hidden_size_per_layer_input)"
    )
    rotary_caches: list[tuple[PosInt, PosInt]] | None = Field(
        None,
        description="[positions, rotary dims] of each RoPE cos/sin table vLLM builds (a linear "
        "rope_scaling factor multiplies the positions); default: max_context x head dim",
    )
    ssm_state_dtype: Literal["fp32", "bf16", "fp16"] | None = Field(
        None,
        description="the dtype the config states for the recurrent (SSM) state (Qwen3.5's "
        "mamba_ssm_dtype, which vLLM and SGLang store it in); default: the model dtype",
    )
    mtp_layers: NonNegInt = Field(
        0,
        description="multi-token-prediction layers past num_layers (num_nextn_predict_layers, "
        "mtp_num_hidden_layers), loaded only with speculative decoding; default: none",
    )

    @model_validator(mode="after")
    def _check(self) -> Architecture:
        pattern = self.pattern_names()
        unknown = sorted(set(pattern) - set(self.mixers))
        if unknown:
            raise ValueError(f"pattern names {unknown} are not defined under mixers")
        unused = sorted(set(self.mixers) - set(pattern))
        if unused:
            raise ValueError(f"mixers {unused} are never used by the pattern")
        if len(pattern) > self.num_layers:
            raise ValueError(
                f"pattern has {len(pattern)} entries but the model has {self.num_layers} layers"
            )
        for name, mixer in self.mixers.items():
            if isinstance(mixer, SharedKVMixer) and not isinstance(
                self.mixers.get(mixer.source), _AttentionBase
            ):
                raise ValueError(
                    f"mixers.{name}: source {mixer.source!r} must name a full, sliding or "
                    "chunked mixer defined under mixers"
                )
            if isinstance(mixer, _AttentionBase):
                q = mixer.q_heads or self.num_attention_heads
                if q % mixer.kv_heads:
                    raise ValueError(
                        f"mixers.{name}: {q} query heads are not divisible by "
                        f"{mixer.kv_heads} kv_heads"
                    )
        if self.mlp is None and (self.moe is None or self._has_dense_layers()):
            raise ValueError("mlp is required: some layers are not MoE")
        return self

    def _has_dense_layers(self) -> bool:
        assert self.moe is not None
        layout = spec.MoELayout(self.moe.first_dense_layers, self.moe.period, self.moe.offset)
        return not all(layout.is_moe(i) for i in range(self.num_layers))

    def to_spec(
        self,
        model_id: str,
        name: str,
        dtype: str,
        max_context: int,
        checkpoint: CheckpointFormat | None = None,
    ) -> spec.ModelSpec:
        """The engine spec of this architecture. The one conversion path: a registry file passes
        its own id/name/dtype/max_context/released format, an imported config.json the ones it
        derives."""
        mixers = {key: m.to_spec(self) for key, m in self.mixers.items()}
        moe = self.moe
        return spec.ModelSpec(
            id=model_id,
            name=name,
            num_layers=self.num_layers,
            hidden_size=self.hidden_size,
            vocab_size=self.vocab_size,
            tied_embeddings=self.tied_embeddings,
            mixer_pattern=tuple(mixers[n] for n in self.pattern_names()),
            dense_mlp=spec.DenseMLP(self.mlp.intermediate_size, self.mlp.gated)
            if self.mlp
            else None,
            moe=spec.MoE(
                experts=moe.experts,
                top_k=moe.experts_per_token,
                intermediate_size=moe.intermediate_size,
                shared_experts=moe.shared_experts,
                shared_intermediate_size=moe.shared_intermediate_size or moe.intermediate_size,
                gated=moe.gated,
            )
            if moe
            else None,
            moe_layout=spec.MoELayout(moe.first_dense_layers, moe.period, moe.offset)
            if moe
            else spec.MoELayout(),
            default_dtype=dtype,
            max_context=max_context,
            checkpoint=checkpoint,
            vision=self.vision.to_spec() if self.vision else None,
            rotary_caches=None if self.rotary_caches is None else tuple(self.rotary_caches),
            ssm_state_dtype=self.ssm_state_dtype,
            mtp_layers=self.mtp_layers,
            audio=self.audio.to_spec() if self.audio else None,
            per_layer_input=None
            if self.per_layer_input is None
            else (self.per_layer_input.vocab_size, self.per_layer_input.hidden_size),
        )

    def pattern_names(self) -> list[str]:
        if self.pattern is not None:
            if not self.pattern:
                raise ValueError("pattern must not be empty")
            return self.pattern
        if len(self.mixers) != 1:
            raise ValueError("pattern is required when more than one mixer is defined")
        return list(self.mixers)


# ---------------------------------------------------------------- model file

class Weights(Strict):
    """The weight format the checkpoint is released in, when it is not the model dtype.

    ``format`` is a :mod:`kvcalc.engine.quant` format (``fp8-block``: FP8 e4m3 with one fp32
    scale per 128x128 block; ``mxfp4``: E2M1 values with one E8M0 scale per 32;
    ``nvfp4``: E2M1 with one FP8 scale per 16; ``int4-g128``,
    ``int4-g32``: int4 with one 16-bit scale per 128 / 32 inputs); ``applies_to`` the matrices
    it quantizes: ``layers`` (every layer matrix: attention, MLPs, shared and routed experts)
    or ``experts`` (the routed experts only, as gpt-oss ships). Embeddings, LM head, norms and
    router stay at the model dtype. ``source`` says where the format is stated (the config.json's
    quantization_config, a model card)."""

    format: Literal["fp8-block", "mxfp4", "nvfp4", "int4-g128", "int4-g32"]
    applies_to: Literal["layers", "experts"] = "layers"
    experts: Literal["fp8-block", "mxfp4", "nvfp4", "int4-g128", "int4-g32"] | None = Field(
        None,
        description="the routed experts' own format when the layers are in another "
        "(DeepSeek-V4: fp8-block layers, FP4 experts); needs applies_to: layers",
    )
    source: str

    @model_validator(mode="after")
    def _check(self) -> Weights:
        if self.experts is not None and self.applies_to != "layers":
            raise ValueError("weights.experts needs applies_to: layers")
        return self

    def to_format(self, model_dtype: str) -> CheckpointFormat:
        fmt = NAMED_FORMATS[self.format]
        keep = plain(units.dtype(model_dtype))
        layers = fmt if self.applies_to == "layers" else keep
        experts = NAMED_FORMATS[self.experts] if self.experts else fmt
        return CheckpointFormat(experts=experts, layers=layers, other=keep, source=self.source)

    @classmethod
    def of(cls, checkpoint: CheckpointFormat, model_dtype: str, source: str) -> Weights | None:
        """The ``weights:`` block that loads back to ``checkpoint``, or None when a registry file
        cannot state it (a format without a name here, an ignore list keeping some roles)."""
        name = checkpoint.experts.name
        if name not in NAMED_FORMATS or checkpoint.experts != NAMED_FORMATS[name]:
            return None
        candidates: list[dict[str, str]] = [
            {"format": name, "applies_to": applies_to} for applies_to in ("layers", "experts")
        ]
        layers = checkpoint.layers.name
        if layers in NAMED_FORMATS and layers != name:
            candidates.append({"format": layers, "applies_to": "layers", "experts": name})
        for data in candidates:
            weights = cls.model_validate(data | {"source": source})
            if weights.to_format(model_dtype) == checkpoint:
                return weights
        return None


#: How well a file's values are confirmed, best first. "unreviewed": written by `kvcalc import-hf`
#: from one config.json and not yet checked against the model card by a person.
Verification = Literal[
    "official_verbatim", "official_partial", "derived_copies", "secondary", "unreviewed"
]


class Params(Strict):
    total: ParamCount | None = Field(
        None, description="officially stated total parameters; null when no source states it"
    )
    active: ParamCount | None = None
    stated: str = Field(description="the official wording and where it is stated")


class ModelFile(Strict):
    id: str = Field(pattern=REGISTRY_ID.pattern)
    name: str
    family: str
    hf_repo: str
    aliases: list[str] = []
    verification: Verification
    unverified: list[str] = Field(
        [], description="fields no consulted source confirmed (marked UNVERIFIED in the reference)"
    )
    source: list[str] = Field(min_length=1)
    notes: str | None = None
    dtype: Literal["bf16", "fp16", "fp32"]
    max_context: ContextTokens
    params: Params
    weights: Weights | None = Field(
        None, description="the released weight format; omitted: every weight at dtype"
    )
    architecture: Architecture

    def to_spec(self) -> spec.ModelSpec:
        checkpoint = self.weights.to_format(self.dtype) if self.weights else None
        return self.architecture.to_spec(
            self.id, self.name, self.dtype, self.max_context, checkpoint
        )

    def names(self) -> list[str]:
        """Every name this model answers to: id, HF repo id and aliases."""
        return [self.id, self.hf_repo, *self.aliases]
