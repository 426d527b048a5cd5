"""NVIDIA Nemotron-H (nemotron_h): blocks of one kind each, Mamba-2 (``M``), attention (``*``),
MLP (``-``) or MoE (``E``), one character per block in ``hybrid_override_pattern`` (transformers
5 writes the list ``layers_block_type`` instead: linear_attention / full_attention / mlp / moe,
the released files' legacy mamba / attention too).

Defaults: transformers 5.24.0, models/nemotron_h/configuration_nemotron_h.py; the modeling code
read is vLLM 0.33's model_executor/models/nemotron_h.py. Its attention has no RoPE and uses
``head_dim`` (the released files say ``attention_head_dim``) or hidden_size / heads; its MLP is
up and down projections with a squared ReLU, no gate; its Mamba-2 mixer is vLLM's MambaMixer2
over mamba_num_heads x mamba_head_dim with n_groups B/C groups.

A kvcalc layer is a mixer and a feed-forward. Nemotron-H's are separate blocks, so each Mamba-2
or attention block is one kvcalc layer, which holds exactly its cache or state (what vLLM and
SGLang allocate per block), and the MLP blocks' weights are spread evenly over those layers: the
``k`` MLPs of ``intermediate_size`` become one MLP of ``k x intermediate_size / layers`` on each
(Nemotron-H-56B: 54 x 32,768 / 64 = 27,648), the same weights, bytes and FLOPs in total. A
pattern whose MLPs do not spread evenly, and MoE blocks (Nemotron-3), are refused rather than
approximated.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, Field

from kvcalc.registry.hf.base import (
    TORCH_DTYPES,
    DecoderAdapter,
    DecoderConfig,
    LayerCount,
    Mixers,
    PosInt,
)

#: layers_block_type names (transformers 5 and the legacy ones) -> pattern characters.
BLOCK_CHARS = {
    "linear_attention": "M",
    "mamba": "M",
    "full_attention": "*",
    "attention": "*",
    "mlp": "-",
    "moe": "E",
}


class NemotronHConfig(DecoderConfig):
    vocab_size: PosInt = 131072
    hidden_size: PosInt = 4096
    intermediate_size: PosInt = 21504
    # None: as many layers as the pattern has blocks (NemotronHConfig derives it).
    num_hidden_layers: LayerCount | None = None  # type: ignore[assignment]
    num_attention_heads: PosInt = 32
    num_key_value_heads: PosInt | None = 8
    head_dim: PosInt | None = Field(
        128, validation_alias=AliasChoices("head_dim", "attention_head_dim")
    )
    max_position_embeddings: PosInt = 4096
    tie_word_embeddings: bool = False
    # NemotronHConfig's __post_init__ falls back to a 4-block toy list when neither is given;
    # kvcalc refuses that instead (see NemotronH.pattern).
    hybrid_override_pattern: str | None = None
    layers_block_type: list[str] | None = Field(
        None, validation_alias=AliasChoices("layers_block_type", "layer_types")
    )
    ssm_state_size: PosInt = 128
    mamba_num_heads: PosInt = 128
    mamba_head_dim: PosInt = 64
    n_groups: PosInt = Field(8, validation_alias=AliasChoices("n_groups", "mamba_n_groups"))
    conv_kernel: PosInt = Field(4, validation_alias=AliasChoices("conv_kernel", "mamba_d_conv"))
    # The temporal state's dtype as the file states it (Nemotron-3's config.json: float32). vLLM
    # 0.19's NemotronHForCausalLMConfig.verify_and_update_config sets --mamba-ssm-cache-dtype
    # auto to it (model_executor/models/config.py; float16 when absent). Not a class field:
    # None (absent) leaves the engines' own default.
    mamba_ssm_cache_dtype: Literal["float32", "bfloat16", "float16"] | None = None


class NemotronH(DecoderAdapter[NemotronHConfig]):
    model_types = ("nemotron_h",)
    family = "nemotron"
    config_class = NemotronHConfig

    def pattern(self) -> str:
        """One character per block, from whichever of the two fields the file states."""
        c = self.config
        if c.hybrid_override_pattern is not None:
            field, pattern = "hybrid_override_pattern", c.hybrid_override_pattern
        elif c.layers_block_type is not None:
            field = "layers_block_type"
            unknown = sorted({repr(t) for t in c.layers_block_type if t not in BLOCK_CHARS})
            if unknown:
                self.fail(field, f"unsupported entries {', '.join(unknown)}")
            pattern = "".join(BLOCK_CHARS[t] for t in c.layers_block_type)
        else:
            self.fail(
                "hybrid_override_pattern",
                "missing required field (or layers_block_type): kvcalc will not assume "
                "NemotronHConfig's default 4-block list, another model's; give the "
                "checkpoint's own config.json",
            )
        self.check_blocks(field, pattern)
        return pattern

    def check_blocks(self, field: str, pattern: str) -> None:
        bad = sorted(set(pattern) - set("M*-E"))
        if bad or not pattern:
            self.fail(field, f"must be blocks M, *, - or E, got {pattern!r}")
        if "E" in pattern:
            self.fail(
                field,
                "MoE blocks (E, Nemotron-3's latent MoE) are not modelled; write a registry file",
            )
        stated = self.config.num_hidden_layers
        if stated is not None and stated != len(pattern):
            self.fail("num_hidden_layers", f"is {stated}, but {field} has {len(pattern)} blocks")

    @property
    def num_layers(self) -> int:
        pattern = self.pattern()
        return pattern.count("M") + pattern.count("*")

    def mamba_mixer(self) -> dict[str, Any]:
        c = self.config
        return {
            "kind": "mamba2",
            "n_heads": c.mamba_num_heads,
            "head_dim": c.mamba_head_dim,
            "n_groups": c.n_groups,
            "d_state": c.ssm_state_size,
            "d_conv": c.conv_kernel,
        }

    def mixers(self) -> Mixers:
        names = ["mamba" if b == "M" else "attn" for b in self.pattern() if b in "M*"]
        if not names:
            self.fail("hybrid_override_pattern", "has no Mamba-2 (M) or attention (*) block")
        return self.hybrid_mixers(names, "attn", "mamba", self.mamba_mixer)

    def dense_mlp(self) -> dict[str, Any]:
        pattern, size = self.pattern(), self.config.intermediate_size
        blocks, layers = pattern.count("-"), self.num_layers
        if blocks == 0 or blocks * size % layers:
            self.fail(
                "hybrid_override_pattern",
                f"its {blocks} MLP blocks of {size:,} do not spread evenly over its {layers} "
                "Mamba-2 and attention layers (kvcalc's layers each hold one feed-forward); "
                "write a registry file",
            )
        return {"intermediate_size": blocks * size // layers, "gated": False}

    def architecture(self, tied_embeddings: bool) -> dict[str, Any]:
        # NemotronHAttention builds no rotary embedding.
        arch = super().architecture(tied_embeddings) | {"rotary_caches": []}
        stated = self.config.mamba_ssm_cache_dtype
        return arch | {"ssm_state_dtype": TORCH_DTYPES[stated]} if stated else arch
