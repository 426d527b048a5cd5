"""KV cache formats: golden bytes of the named formats, KIVI's non-linear start, and the
invariants every format keeps (properties)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specs import LLAMA3_8B
from test_engine_kv import mixers, models

from kvcalc.engine import spec
from kvcalc.engine.capacity import Layout, Stage, stage_bytes_per_sequence
from kvcalc.engine.kivi import KiviKV
from kvcalc.engine.kv import (
    CacheFormat,
    cache_format,
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    kv_size,
)
from kvcalc.engine.kvformat import (
    PRESETS,
    KVFormat,
    KVFormatError,
    KVFormatRequest,
    LinearKV,
    check_stores,
    format_bits,
    kv_format,
)
from kvcalc.engine.units import dtype
from kvcalc.engine.vllm import VLLMConfigError, layer_cache_specs

BF16, FP8 = dtype("bf16"), dtype("fp8")


def fmt(**request: object) -> KVFormat:
    return kv_format(KVFormatRequest(**request), "bf16")  # type: ignore[arg-type]


# ------------------------------------------------------------------ golden figures


def test_int4_group_32_fp16_scale_and_zero_is_5_bits(llama3_70b: spec.ModelSpec) -> None:
    int4 = fmt(dtype="int4", group=32, zero_point=True)
    assert int4.name == "int4 g32 fp16+zero"
    # Per layer and token: 2 x 8 heads x 128 values at 4 bits, plus 2048 / 32 = 64 groups of an
    # fp16 scale and an fp16 zero point: 8,192 + 2,048 bits = 1,280 bytes.
    assert int4.effective_bits(llama3_70b.mixer_at(0)) == 5
    assert kv_bytes_per_token(llama3_70b, int4) == (2048 * 4 + 64 * 32) // 8 * 80 == 102_400
    assert kv_size(llama3_70b, 8192, int4).kv_bits == 5
    # Symmetric (scale only): 4.5 bits.
    assert kv_size(llama3_70b, 8192, fmt(dtype="int4", group=32)).kv_bits == Fraction(9, 2)


def test_plain_int4_is_still_4_bits(llama3_70b: spec.ModelSpec) -> None:
    assert kv_bytes_per_token(llama3_70b, fmt(dtype="int4")) == 327_680 // 4


def test_vllm_fp8_keeps_one_scale_per_tensor(llama3_70b: spec.ModelSpec) -> None:
    assert fmt(dtype="fp8_per_tensor") == fmt(dtype="fp8") == fmt(dtype="fp8_e4m3")
    assert kv_bytes_per_token(llama3_70b, fmt(dtype="fp8_per_tensor")) == 327_680 // 2


def test_nvfp4_matches_sglangs_fp4_cell(deepseek_v3: spec.ModelSpec) -> None:
    # sglang-kv-algorithm.md 2.3, MLA: ((r + rope) L elem) // 2 + ((r + rope) // 16) L elem.
    nvfp4 = fmt(dtype="nvfp4")
    assert kv_bytes_per_token(deepseek_v3, nvfp4) == (576 * 61) // 2 + (576 // 16) * 61 == 19_764
    assert nvfp4.effective_bits(deepseek_v3.mixer_at(0)) == Fraction(9, 2)


def test_mxfp4_is_4_25_bits(llama3_70b: spec.ModelSpec) -> None:
    assert kv_size(llama3_70b, 1, fmt(dtype="mxfp4")).kv_bits == Fraction(17, 4)


def test_vllm_per_token_head_adds_fp32_scales_to_the_page() -> None:
    # vllm-kv-algorithm.md: per-token quantisation adds 2 x block x kv_heads x 4 bytes to a page.
    fp8_pth = fmt(dtype="fp8_per_token_head")
    plain = layer_cache_specs(LLAMA3_8B, 1, FP8, 16, 8192)[0]
    scaled = layer_cache_specs(LLAMA3_8B, 1, fp8_pth, 16, 8192)[0]
    assert plain.page_bytes == 16 * 8 * 256 == 32_768
    assert scaled.page_bytes == plain.page_bytes + 2 * 16 * 8 * 4 == 33_792
    int8_pth = layer_cache_specs(LLAMA3_8B, 1, fmt(dtype="int8_per_token_head"), 16, 8192)[0]
    assert int8_pth.page_bytes == 33_792


@pytest.mark.parametrize(
    "request_",
    [
        {"dtype": "kivi2"},
        {"dtype": "int4"},
        {"dtype": "int8", "group": 64},
        {"dtype": "fp8_per_token_head", "scale_dtype": "fp16"},
    ],
)
def test_vllm_refuses_what_it_cannot_store(request_: dict) -> None:
    with pytest.raises(VLLMConfigError, match="vLLM has no"):
        layer_cache_specs(LLAMA3_8B, 1, fmt(**request_), 16, 8192)


# Llama-3-8B per layer and token: 8 KV heads x 128 for keys and as many for values, 2,048
# values, 4,096 bytes in bf16.
KIVI2_SLOPE_PER_LAYER = 2048 * 2 // 8 + 1024 * 4 // 32 + (1024 // 32) * 4  # = 768


def test_kivi2_slope_is_3_bits_per_value() -> None:
    kivi2 = fmt(dtype="kivi2")
    # Values at 2 bits; keys: an fp16 scale and zero per channel per 32 tokens; values: the same
    # per 32 channels of each token.
    assert KIVI2_SLOPE_PER_LAYER == 768
    assert kv_bytes_per_token(LLAMA3_8B, kivi2) == 32 * 768 == 24_576
    assert kv_size(LLAMA3_8B, 8192, kivi2).kv_bits == 3


def test_kivi_keeps_the_newest_tokens_in_full_precision() -> None:
    kivi2 = fmt(dtype="kivi2")
    # Up to the residual (128) every token is bf16.
    assert kv_bytes_per_sequence(LLAMA3_8B, 100, kivi2) == 32 * 100 * 4096 == 13_107_200
    assert kv_bytes_per_sequence(LLAMA3_8B, 128, kivi2) == kv_bytes_per_sequence(
        LLAMA3_8B, 128, BF16
    )
    # At 8,192: 128 bf16 tokens, 8,064 at 2 bits, 252 groups of key scales, a value scale per
    # 32 channels of every old token.
    old = 8192 - 128
    per_layer = 128 * 4096 + old * 2048 * 2 // 8 + 252 * 1024 * 4 + old * 32 * 4
    assert kv_bytes_per_sequence(LLAMA3_8B, 8192, kivi2) == 32 * per_layer == 214_958_080


def test_kivi_options_build_the_paper_setting() -> None:
    assert fmt(quant="kivi", bits=2, group=32, residual=128) == fmt(dtype="kivi2")
    custom = fmt(quant="kivi", bits=4, residual=64)
    assert isinstance(custom, KiviKV)
    assert custom.name == "kivi4 g32 r64"
    old = 8192 - 64
    per_layer = 64 * 4096 + old * 2048 * 4 // 8 + 254 * 1024 * 4 + old * 32 * 4
    assert kv_bytes_per_sequence(LLAMA3_8B, 8192, custom) == 32 * per_layer == 341_311_488


def test_format_names_are_read_as_dtype_names_are() -> None:
    assert fmt(dtype=" KIVI2 ") == fmt(dtype="kivi2")
    assert fmt(dtype="NVFP4") == fmt(dtype="nvfp4")
    assert fmt(dtype="bfloat16") == fmt(dtype="bf16") == fmt()


def test_kivi_cannot_store_an_mla_latent(deepseek_v3: spec.ModelSpec) -> None:
    with pytest.raises(KVFormatError, match="MLA latent"):
        check_stores(fmt(dtype="kivi2"), deepseek_v3)
    check_stores(fmt(dtype="nvfp4"), deepseek_v3)


def test_a_shared_prefix_under_kivi_is_priced_as_old_tokens() -> None:
    kivi2 = fmt(dtype="kivi2")
    stage = Stage(0, range(32), 1 << 40)
    alone = Layout(LLAMA3_8B, (stage,), _cache(kivi2))
    shared = Layout(LLAMA3_8B, (stage,), _cache(kivi2), prefix_shared_tokens=4096)
    own, common = stage_bytes_per_sequence(shared, stage, 8192)
    (whole, nothing) = stage_bytes_per_sequence(alone, stage, 8192)
    assert nothing == 0 and own + common == whole
    # The prefix is 4,096 tokens at 2 bits with their scales, 128 groups of key scales.
    assert common == 32 * (4096 * 2048 * 2 // 8 + 128 * 1024 * 4 + 4096 * 32 * 4)


def _cache(kv: KVFormat) -> CacheFormat:
    return cache_format(LLAMA3_8B, kv)


def test_format_bits_text() -> None:
    assert [format_bits(Fraction(b)) for b in (5, Fraction(9, 2), Fraction(17, 4))] == [
        "5.0",
        "4.5",
        "4.25",
    ]


# ------------------------------------------------------------------ bad requests


@pytest.mark.parametrize(
    ("request_", "option"),
    [
        ({"dtype": "int4", "group": 0}, "--kv-group"),
        ({"dtype": "bf16", "group": 32}, "--kv-group"),
        ({"dtype": "int4", "scale_dtype": "fp16"}, "--kv-scale-dtype"),
        ({"dtype": "int4", "group": 32, "scale_dtype": "fp12"}, "--kv-scale-dtype"),
        ({"dtype": "fp8", "zero_point": True}, "--kv-zero-point"),
        ({"dtype": "int4", "bits": 2}, "--kv-bits"),
        ({"dtype": "int4", "residual": 64}, "--kv-residual"),
        ({"quant": "gptq"}, "--kv-quant"),
        ({"quant": "kivi", "dtype": "int4"}, "--kv-dtype"),
        ({"quant": "kivi", "bits": 3}, "--kv-bits"),
        ({"dtype": "kivi2", "bits": 4}, "--kv-bits"),
        ({"dtype": "fp9"}, "--kv-dtype"),
    ],
)
def test_a_request_that_contradicts_itself_names_its_option(request_: dict, option: str) -> None:
    with pytest.raises(KVFormatError) as info:
        fmt(**request_)
    assert info.value.option == option
    assert str(info.value).startswith(option + ": ")


# ------------------------------------------------------------------ properties

scaled = st.builds(
    LinearKV,
    st.just("custom"),
    st.sampled_from([dtype(n) for n in ("fp8", "int8", "int4", "int2")]),
    st.sampled_from([dtype(n) for n in ("fp16", "fp32", "fp8")] + [None]),
    st.integers(1, 256) | st.none(),
    st.booleans(),
)
kivis = st.builds(
    KiviKV,
    st.just("kivi"),
    st.sampled_from([dtype("int2"), dtype("int4")]),
    st.integers(1, 128),
    st.integers(0, 512),
    st.sampled_from([BF16, dtype("fp32")]),
    st.sampled_from([dtype("fp16"), dtype("fp32")]),
)
formats = st.one_of(st.sampled_from([p(BF16) for p in PRESETS.values()]), scaled, kivis)
token_mixers = mixers.filter(lambda m: m.holds_tokens)
tokens = st.integers(0, 1 << 16)


def _stores(kv: KVFormat, mixer: spec.Mixer) -> bool:
    return not (isinstance(kv, KiviKV) and mixer.kind == "mla")


@given(formats, token_mixers, tokens)
@settings(max_examples=300, deadline=None)
def test_never_fewer_bytes_than_the_element_bits_allow(
    kv: KVFormat, mixer: spec.Mixer, n: int
) -> None:
    if not _stores(kv, mixer):
        return
    floor = -(-n * mixer.cache_elements_per_token() * kv.nominal_bits // 8)
    assert kv.tokens_bytes(mixer, n) >= floor


@given(formats, token_mixers)
@settings(max_examples=300, deadline=None)
def test_effective_bits_are_at_least_the_nominal_bits(kv: KVFormat, mixer: spec.Mixer) -> None:
    if not _stores(kv, mixer):
        return
    bits = kv.effective_bits(mixer)
    assert bits is not None and bits >= kv.nominal_bits
    assert kv.token_bytes(mixer) * 8 >= kv.token_bits(mixer)


@given(formats, token_mixers, tokens, st.integers(1, 4096))
@settings(max_examples=300, deadline=None)
def test_more_tokens_never_take_fewer_bytes(
    kv: KVFormat, mixer: spec.Mixer, n: int, more: int
) -> None:
    if _stores(kv, mixer):
        assert kv.tokens_bytes(mixer, n + more) >= kv.tokens_bytes(mixer, n)


@given(formats, token_mixers, tokens)
@settings(max_examples=200, deadline=None)
def test_a_linear_format_is_tokens_times_its_token_bytes(
    kv: KVFormat, mixer: spec.Mixer, n: int
) -> None:
    if kv.linear and _stores(kv, mixer):
        assert kv.tokens_bytes(mixer, n) == n * kv.token_bytes(mixer)


@given(kivis, token_mixers, st.integers(0, 64))
@settings(max_examples=200, deadline=None)
def test_kivi_grows_by_its_slope_past_the_residual(
    kv: KiviKV, mixer: spec.Mixer, groups: int
) -> None:
    if not _stores(kv, mixer):
        return
    start = kv.residual_tokens + groups * kv.group  # a whole number of key groups are old
    grown = kv.tokens_bytes(mixer, start + kv.group) - kv.tokens_bytes(mixer, start)
    assert abs(grown - kv.group * kv.token_bits(mixer) / 8) <= 1


@given(models(), st.integers(1, 1 << 20))
@settings(max_examples=100, deadline=None)
def test_fp8_is_half_of_bf16_as_formats(model: spec.ModelSpec, ctx: int) -> None:
    # The tokens' bytes halve; recurrent states stay at the model's dtype.
    def tokens(kv: KVFormat) -> int:
        return sum(g.bytes - g.state_bytes for g in kv_size(model, ctx, kv).groups)

    assert 2 * tokens(fmt(dtype="fp8")) == tokens(fmt(dtype="bf16"))


def test_the_page_lists_every_format_and_alias() -> None:
    """docs/kv-formats.md's table has a row for every --kv-dtype preset and names each alias
    beside the preset it stands for (`fp8` (also `fp8_per_tensor`))."""
    import re
    from pathlib import Path

    from kvcalc.engine.kvformat import PRESET_ALIASES, PRESETS

    page = (Path(__file__).resolve().parents[1] / "docs" / "kv-formats.md").read_text()
    table = page.split("| `--kv-dtype` | stores | bits per value |", 1)[1].split("\n\n", 1)[0]
    cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    names = [name for cell in cells for name in re.findall(r"`([^`]+)`", cell)]
    assert sorted(set(names) - set(PRESET_ALIASES)) == sorted(PRESETS)
    for alias, preset in PRESET_ALIASES.items():
        assert f"`{preset}` (also `{alias}`)" in table
