"""A config.json's ``quantization_config`` as the checkpoint's weight format.

Each ``quant_method`` is read the way its loader in vLLM / transformers reads the checkpoint:

- ``fp8`` (DeepSeek-V3, Kimi-K2, Qwen3-FP8): FP8 e4m3, one fp32 scale per ``weight_block_size``
  block, or per tensor without one;
- ``mxfp4`` (gpt-oss): the routed experts only, E2M1 with one E8M0 scale per 32;
- ``compressed-tensors`` (llm-compressor: RedHat ``w8a8``, ``w4a16``, ``FP8-dynamic``): each
  ``config_groups`` entry's ``weights``: ``type`` int/float, ``num_bits``, ``strategy``
  tensor/channel/group/block, ``group_size``, ``block_structure``, ``symmetric``;
- ``gptq`` / ``awq``: ``bits`` packed in int32, fp16 scales per ``group_size`` (-1: per output
  channel) and, when asymmetric (GPTQ ``sym: false``, AWQ ``zero_point``), packed zero points;
- ``modelopt`` (NVIDIA's NVFP4 / FP8 repos): NVFP4 as E2M1 with one FP8 scale per 16, FP8 with
  one fp32 scale per tensor or per row;
- ``bitsandbytes``: NF4/FP4 with one fp32 absmax per 64 (8-bit absmax plus one fp32 per 256
  blocks with double quantization), or LLM.int8 with one fp32 scale per row.

Modules named in ``ignore`` / ``modules_to_not_convert`` / ``llm_int8_skip_modules`` keep the
model dtype, as do the embeddings, LM head, norms and router. An ignore entry is matched against
one module name per role (layer 0's attention, MLP, experts, router, and the LM head), so a
checkpoint that leaves only some layers unquantized is counted as quantizing them all. Any other
quant_method is refused: sizing it as bf16 would be silently 2-4x off.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, NoReturn

from kvcalc.engine.quant import (
    MXFP4,
    NVFP4,
    BlockScaled,
    ChannelScaled,
    CheckpointFormat,
    GroupScaled,
    TensorScaled,
    WeightFormat,
    plain,
)
from kvcalc.engine.tensors import Role
from kvcalc.engine.units import dtype
from kvcalc.registry.hf.base import Where

SUPPORTED_METHODS = (
    "bitsandbytes", "awq", "compressed-tensors", "fp8", "gptq", "modelopt", "mxfp4"
)

#: One module name per role, as the transformers / vLLM checkpoints of the supported families
#: name them, to match ``ignore`` entries against (a wrapper's prefixes are tried too).
_ROLE_MODULES: dict[Role, tuple[str, ...]] = {
    "mixer": ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.o_proj"),
    "mlp": ("model.layers.0.mlp.down_proj", "model.layers.0.mlp.gate_proj"),
    "routed_experts": (
        "model.layers.0.mlp.experts.0.down_proj",
        "model.layers.0.block_sparse_moe.experts.0.w2",
        "model.layers.0.mlp.experts",
    ),
    "shared_experts": (
        "model.layers.0.mlp.shared_experts.down_proj",
        "model.layers.0.mlp.shared_expert.down_proj",
    ),
}
# No "lm_head": the LM head is at the model dtype whatever an ignore list says
# (CheckpointFormat.format_for), so naming it (MiniMax-M2's modules_to_not_convert does) keeps
# nothing, and the format stays the one a registry ``weights:`` block states.
_PREFIXES = ("", "language_model.", "model.language_model.")


def _matches(entry: str, module: str) -> bool:
    """compressed-tensors' rule: ``re:`` entries are regular expressions matched from the
    start, others exact names; transformers' ``modules_to_not_convert`` are name parts;
    ModelOpt's ``ignore`` / ``exclude_modules`` entries with a ``*`` are wildcards (vLLM's
    ModelOptQuantConfigBase matches them with fnmatch)."""
    if "*" in entry and not entry.startswith("re:"):
        return fnmatch.fnmatchcase(module, entry)
    if entry.startswith("re:"):
        try:
            return re.match(entry[3:], module) is not None
        except re.error:
            return False
    return entry == module or entry in module.split(".") or module.endswith("." + entry)


def kept_roles(entries: list[str]) -> frozenset[Role]:
    """The roles an ignore list leaves unquantized."""
    return frozenset(
        role
        for role, modules in _ROLE_MODULES.items()
        if any(
            _matches(entry, prefix + module)
            for entry in entries
            for module in modules
            for prefix in _PREFIXES
        )
    )


@dataclass(frozen=True)
class _Reader:
    where: Where
    config: dict[str, Any]
    model_dtype: str

    def fail(self, key: str, problem: str) -> NoReturn:
        self.where.fail(f"quantization_config.{key}", problem)

    def int_of(
        self, key: str, default: int | None = None, data: dict[str, Any] | None = None
    ) -> int:
        source = self.config if data is None else data
        value = source.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            return self.fail(key, f"must be an integer, got {value!r}")
        return value

    def names(self, *keys: str) -> list[str]:
        out: list[str] = []
        for key in keys:
            value = self.config.get(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                self.fail(key, "must be a list of module names")
            out.extend(value)
        return out

    @property
    def keep(self) -> WeightFormat:
        return plain(dtype(self.model_dtype))

    def layers(self, fmt: WeightFormat, *ignore_keys: str) -> CheckpointFormat:
        kept = kept_roles(self.names(*ignore_keys))
        return CheckpointFormat(fmt, fmt, self.keep, kept, source="config.json quantization_config")


def _fp8(r: _Reader) -> CheckpointFormat:
    block = r.config.get("weight_block_size")
    if block is None:
        fmt: WeightFormat = TensorScaled("fp8", 8, 32)
    elif (
        isinstance(block, list)
        and len(block) == 2
        and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)
    ):
        fmt = BlockScaled("fp8-block", 8, 32, block[0], block[1])
    else:
        return r.fail("weight_block_size", f"must be two positive integers, got {block!r}")
    return r.layers(fmt, "modules_to_not_convert", "ignored_layers")


def _mxfp4(r: _Reader) -> CheckpointFormat:
    # gpt-oss: only the MoE experts are MXFP4 (modules_to_not_convert lists the rest).
    keep = r.keep
    return CheckpointFormat(MXFP4, keep, keep, source="config.json quantization_config")


def _group_or_channel(
    name: str, bits: int, group: int, zero_bits: int, scale_bits: int = 16
) -> WeightFormat:
    if group == -1:
        return ChannelScaled(f"{name}-channel", bits, scale_bits + zero_bits)
    return GroupScaled(f"{name}-g{group}", bits, scale_bits, group, zero_bits)


def _gptq(r: _Reader) -> CheckpointFormat:
    bits = r.int_of("bits")
    group = r.int_of("group_size", 128)
    if bits not in (2, 3, 4, 8) or group == 0 or group < -1:
        return r.fail("bits", f"unsupported bits {bits} / group_size {group}")
    sym = r.config.get("sym", True)
    fmt = _group_or_channel(f"int{bits}", bits, group, 0 if sym else bits)
    return r.layers(fmt, "modules_to_not_convert")


def _awq(r: _Reader) -> CheckpointFormat:
    bits = r.int_of("bits", r.config.get("w_bit", 4))
    group = r.int_of("group_size", r.config.get("q_group_size", 128))
    if bits not in (4, 8) or group == 0 or group < -1:
        return r.fail("bits", f"unsupported bits {bits} / group_size {group}")
    zeros = bits if r.config.get("zero_point", True) else 0
    return r.layers(_group_or_channel(f"int{bits}", bits, group, zeros), "modules_to_not_convert")


def _bitsandbytes(r: _Reader) -> CheckpointFormat:
    skip = ("llm_int8_skip_modules",)
    if r.config.get("load_in_4bit"):
        # One absmax per 64 values; double quantization stores it in 8 bits with one fp32
        # constant per 256 absmax values.
        double = bool(r.config.get("bnb_4bit_use_double_quant"))
        scale: Fraction | int = Fraction(8) + Fraction(32, 256) if double else 32
        kind = str(r.config.get("bnb_4bit_quant_type", "fp4"))
        return r.layers(GroupScaled(kind, 4, scale, 64, word_bits=8), *skip)
    if r.config.get("load_in_8bit"):
        return r.layers(ChannelScaled("int8-bnb", 8, 32), *skip)
    return r.fail("load_in_4bit", "neither load_in_4bit nor load_in_8bit is true")


def _compressed_weights(r: _Reader, group_name: str, weights: Any) -> WeightFormat:
    key = f"config_groups.{group_name}.weights"
    if not isinstance(weights, dict):
        return r.fail(key, "must be a JSON object with num_bits, type and strategy")
    if "num_bits" not in weights:
        r.fail(f"{key}.num_bits", "missing required field")
    bits = r.int_of("num_bits", None, weights)
    kind = weights.get("type", "int")
    strategy = weights.get("strategy", "tensor")
    name = f"{kind}{bits}"
    zeros = 0 if weights.get("symmetric", True) else bits
    word = 32 if bits < 8 else bits  # pack-quantized packs sub-byte ints into int32
    if kind not in ("int", "float"):
        return r.fail(f"{key}.type", f"unsupported type {kind!r}; expected int or float")
    if strategy == "tensor":
        return TensorScaled(f"{name}-tensor", bits, 32)
    if strategy == "channel":
        return ChannelScaled(f"{name}-channel", bits, 16 + zeros)
    if strategy in ("group", "tensor_group"):
        group = r.int_of("group_size", None, weights)
        if group < 1:
            return r.fail(f"{key}.group_size", f"must be at least 1, got {group}")
        scale_bits = 8 if strategy == "tensor_group" else 16  # nvfp4: fp8 scales per 16
        return GroupScaled(f"{name}-g{group}", bits, scale_bits, group, zeros, word)
    if strategy == "block":
        block = weights.get("block_structure")
        if not (isinstance(block, list) and len(block) == 2 and all(
            isinstance(b, int) and b > 0 for b in block
        )):
            return r.fail(f"{key}.block_structure", f"must be two positive integers, got {block!r}")
        return BlockScaled(f"{name}-block", bits, 32, block[0], block[1])
    return r.fail(
        f"{key}.strategy",
        f"unsupported strategy {strategy!r}; expected tensor, channel, group or block",
    )


def _targets_experts_only(targets: Any) -> bool:
    return isinstance(targets, list) and bool(targets) and all(
        isinstance(t, str) and "expert" in t for t in targets
    )


def _compressed_tensors(r: _Reader) -> CheckpointFormat:
    groups = r.config.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return r.fail("config_groups", "must be a non-empty JSON object")
    layers: WeightFormat | None = None
    experts: WeightFormat | None = None
    for group_name, group in groups.items():
        if not isinstance(group, dict):
            return r.fail(f"config_groups.{group_name}", "must be a JSON object")
        if group.get("weights") is None:
            continue  # activations only: the weights stay at the model dtype
        fmt = _compressed_weights(r, group_name, group.get("weights"))
        if _targets_experts_only(group.get("targets")):
            experts = fmt
        else:
            layers = fmt
    keep = r.keep
    kept = kept_roles(r.names("ignore"))
    return CheckpointFormat(
        experts=experts or layers or keep,
        layers=layers or keep,
        other=keep,
        kept=kept,
        source="config.json quantization_config",
    )


#: ModelOpt's weight formats by quant_algo (vLLM 0.19 model_executor/layers/quantization/
#: modelopt.py): NVFP4 is ModelOptNvFp4LinearMethod's E2M1 values two to a uint8, one FP8 e4m3
#: scale per group_size (16) inputs, and two fp32 scalars per matrix (weight_scale_2,
#: input_scale; not counted: 8 bytes a matrix); FP8 is one fp32 scale per tensor, and
#: FP8_PER_CHANNEL_PER_TOKEN one per output row.
def _modelopt_format(r: _Reader, algo: str, group: int) -> WeightFormat:
    if algo in ("NVFP4", "W4A16_NVFP4"):  # the weights are the same; W4A16 leaves activations
        return NVFP4 if group == NVFP4.group else GroupScaled(f"nvfp4-g{group}", 4, 8, group, 0, 8)
    if algo == "FP8":
        return TensorScaled("fp8", 8, 32)
    if algo == "FP8_PER_CHANNEL_PER_TOKEN":
        return ChannelScaled("fp8-channel", 8, 32)
    return r.fail(
        "quant_algo",
        f"unsupported ModelOpt quant_algo {algo!r}; kvcalc reads NVFP4, FP8 and "
        "FP8_PER_CHANNEL_PER_TOKEN (MIXED_PRECISION states a format per layer: write a registry "
        "file)",
    )


def _modelopt(r: _Reader) -> CheckpointFormat:
    """NVIDIA ModelOpt checkpoints (the nvidia/*-NVFP4 and *-FP8 repos), read as vLLM 0.19's
    ModelOptQuantConfigBase.from_config reads them: config.json's ``quant_algo``,
    ``group_size`` (default 16) and ``ignore``, or the legacy ``quantization`` object's
    ``quant_algo``, ``group_size`` and ``exclude_modules``."""
    legacy = r.config.get("quantization")
    data = legacy if isinstance(legacy, dict) else r.config
    where = "quantization." if isinstance(legacy, dict) else ""
    algo = data.get("quant_algo")
    if not isinstance(algo, str) or not algo:
        return r.fail(f"{where}quant_algo", "missing required field (NVFP4, FP8, ...)")
    group = data.get("group_size", 16)
    if group is None:
        group = 16
    if not isinstance(group, int) or isinstance(group, bool) or group < 1:
        return r.fail(f"{where}group_size", f"must be a positive integer, got {group!r}")
    fmt = _modelopt_format(r, algo.upper(), group)
    ignore = _Reader(r.where, data, r.model_dtype).names(
        "exclude_modules" if where else "ignore"
    )
    return CheckpointFormat(
        fmt, fmt, r.keep, kept_roles(ignore), source="config.json quantization_config"
    )


_METHODS = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "gptq": _gptq,
    "awq": _awq,
    "bitsandbytes": _bitsandbytes,
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
}


def checkpoint_format(where: Where, config: Any, model_dtype: str) -> CheckpointFormat | None:
    """The weight format a ``quantization_config`` states (None when there is none)."""
    if config is None:
        return None
    if not isinstance(config, dict):
        where.fail("quantization_config", "must be a JSON object")
    method = config.get("quant_method")
    reader = _METHODS.get(method) if isinstance(method, str) else None
    if reader is None:
        where.fail(
            "quantization_config.quant_method",
            f"unsupported quant_method {method!r}; supported: {', '.join(SUPPORTED_METHODS)} "
            "(sizing it as the model dtype would be wrong)",
        )
    return reader(_Reader(where, config, model_dtype))
