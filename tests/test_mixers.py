"""Every mixer kind implements the whole Mixer interface, and each kind's numbers match formulas
restated from the references (seed 004 for the caches, vllm-kv-algorithm.md and the
MambaStateShapeCalculator it cites for the state tensors, the FLOP conventions of
kvcalc/engine/flops.py), on shapes drawn by hypothesis rather than on golden values.

The kinds are found, not listed: every module of kvcalc.engine.mixers is imported and the types
that registered a ``kind`` are enumerated, so a new kind is checked as soon as its module exists.
"""

from __future__ import annotations

import importlib
import inspect
import math
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specs import registry_model

import kvcalc.engine.mixers as mixers_package
from kvcalc.engine.kv import layer_bytes_per_token, layer_state_bytes, layer_tokens_bytes
from kvcalc.engine.kvformat import KVFormatError, LinearKV, check_stores
from kvcalc.engine.mixers.base import MIXER_KINDS, Mixer, ParallelismError, RecurrentMixer
from kvcalc.engine.spec import (
    ChunkedLocalAttention,
    CompressedAttention,
    DenseMLP,
    FullAttention,
    GatedDeltaNet,
    IndexedLatentAttention,
    LightningAttention,
    Mamba,
    Mamba2,
    ModelSpec,
    MultiHeadLatentAttention,
    SharedKVAttention,
    ShortConv,
    SlidingWindowAttention,
)
from kvcalc.engine.tensors import StateTensor, Tensor
from kvcalc.engine.units import DType, dtype
from kvcalc.registry.load import model_paths
from kvcalc.registry.schema import MixerSchema


def all_kinds() -> dict[str, type[Mixer]]:
    for module in pkgutil.iter_modules(mixers_package.__path__):
        importlib.import_module(f"{mixers_package.__name__}.{module.name}")
    return dict(MIXER_KINDS)


KINDS = all_kinds()

#: The members every kind must have: class variables, then methods and properties.
CLASS_VARIABLES = ("kind", "holds_tokens")
MEMBERS = (
    "cache_elements_per_token",
    "cache_vectors",
    "tokens_held",
    "state_tensors",
    "state_elements",
    "weight_tensors",
    "attention_flops_per_held_token",
    "state_flops_per_token",
    "page_layout",
    "detail",
    "kv_head_count",
    "listed_head_dim",
    "rotary_dims",
    "has_kv_heads",
    "per_rank",
    "with_heads",
    "as_attention",
)


def missing_members(cls: type) -> list[str]:
    """The interface members ``cls`` lacks or leaves abstract."""
    missing = [name for name in CLASS_VARIABLES if not hasattr(cls, name)]
    for name in MEMBERS:
        member = getattr(cls, name, None)
        if member is None or getattr(member, "__isabstractmethod__", False):
            missing.append(name)
    return missing


def test_the_member_list_covers_the_interface() -> None:
    assert set(Mixer.__abstractmethods__) <= set(MEMBERS)


def test_every_kind_is_found() -> None:
    # The kinds of the registry; more may be added, none may disappear.
    expected = {
        "full", "sliding", "chunked", "mla", "mla_indexed",
        "mamba", "mamba2", "gated_deltanet", "lightning",
    }  # fmt: skip
    assert expected <= set(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_has_every_member(kind: str) -> None:
    cls = KINDS[kind]
    assert missing_members(cls) == []
    assert not inspect.isabstract(cls)
    assert cls.kind == kind


def test_an_incomplete_kind_is_caught() -> None:
    class HalfState(RecurrentMixer):  # no kind, so it does not register
        def detail(self) -> str:
            return "half"

    assert missing_members(HalfState) == [
        "kind",
        "state_tensors",
        "weight_tensors",
        "state_flops_per_token",
        "per_rank",
    ]
    with pytest.raises(TypeError):
        HalfState()  # type: ignore[abstract]


def test_a_kind_cannot_be_defined_twice() -> None:
    with pytest.raises(TypeError, match="defined twice"):

        class AnotherMamba(Mamba):
            kind: ClassVar[str] = "mamba"


def test_the_registry_schema_builds_every_kind() -> None:
    schema_kinds = {
        kind
        for schema in get_args(get_args(MixerSchema)[0])
        for kind in get_args(schema.model_fields["kind"].annotation)
    }
    assert schema_kinds == set(KINDS)


def test_registry_mixers_are_the_registered_types() -> None:
    for path in model_paths():
        for mixer in registry_model(path.stem).mixer_pattern:
            assert type(mixer) is KINDS[mixer.kind]


# --------------------------------------------------------------------------------------------
# Properties every kind must have, on shapes drawn from its own fields


@st.composite
def mixer_of(draw: st.DrawFn, cls: type[Mixer]) -> Mixer:
    """An instance of ``cls`` with every integer field drawn (even, so that TP 2 splits it)."""
    values: dict[str, Any] = {}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name == "source":  # a KV-shared layer reads a full or sliding layer's cache
            attention = st.sampled_from([FullAttention, SlidingWindowAttention])
            values[f.name] = draw(attention.flatmap(mixer_of))
            continue
        if f.type == "bool":
            values[f.name] = draw(st.booleans())
            continue
        value = st.integers(1, 48).map(lambda x: 2 * x)
        values[f.name] = draw(value | st.none() if "None" in str(f.type) else value)
    return cls(**values)


def any_mixer() -> st.SearchStrategy[Mixer]:
    return st.sampled_from(sorted(KINDS)).flatmap(lambda kind: mixer_of(KINDS[kind]))


@given(any_mixer(), st.integers(1, 10**6))
@settings(max_examples=300, deadline=None)
def test_a_kind_caches_either_tokens_or_a_state(m: Mixer, context: int) -> None:
    assert 0 <= m.tokens_held(context) <= context
    if not m.owns_cache:
        # A KV-shared layer stores nothing and attends over what its source holds.
        source = m.cache_read()
        assert source.owns_cache and source.holds_tokens and m.holds_tokens
        assert m.cache_elements_per_token() == 0 and m.cache_vectors() == ()
        assert m.tokens_held(context) == source.tokens_held(context)
        assert m.attention_flops_per_held_token() == source.attention_flops_per_held_token()
        assert m.state_tensors() == () and m.state_flops_per_token() == 0
    elif m.holds_tokens:
        assert m.cache_elements_per_token() > 0 and m.tokens_held(context) > 0
        assert sum(v.elements for v in m.cache_vectors()) == m.cache_elements_per_token()
        assert m.attention_flops_per_held_token() > 0
        assert m.state_tensors() == () and m.state_elements() == 0
        assert m.state_flops_per_token() == 0
    else:
        assert m.cache_elements_per_token() == 0 and m.tokens_held(context) == 0
        assert m.cache_vectors() == ()
        assert m.attention_flops_per_held_token() == 0
        assert m.state_elements() > 0 and m.state_flops_per_token() > 0


#: vLLM has no spec type of its own for an indexed (sparse) MLA layer: it is an MLAAttentionSpec.
VLLM_PAGE_KIND = {"mla_indexed": "mla"}
#: Kinds that give vLLM several specs per layer (DeepSeek-V4: window, compressed entries,
#: indexer keys, compressor states), so no single page layout.
SEVERAL_SPECS = {"compressed"}


@given(any_mixer())
@settings(max_examples=200, deadline=None)
def test_the_vllm_page_describes_the_cache(m: Mixer) -> None:
    layout = m.page_layout()
    if not m.holds_tokens or not m.owns_cache or m.kind in SEVERAL_SPECS:
        # a state page, no page (KV-shared), or several specs (DeepSeek-V4)
        assert layout is None
        return
    assert layout is not None and layout.kind == VLLM_PAGE_KIND.get(m.kind, m.kind)
    # vLLM's page holds kv_heads x (head_size_k + head_size_v) values per token.
    width = layout.kv_heads * (layout.head_size_k + layout.head_size_v)
    assert width == m.cache_elements_per_token()
    # A window or chunk in the page is what caps the tokens held; without one, all are held.
    unbounded = 10**9
    assert m.tokens_held(unbounded) == (layout.window or layout.chunk or unbounded)


@given(any_mixer(), st.integers(1, 64))
@settings(max_examples=200, deadline=None)
def test_weights_text_and_what_ifs(m: Mixer, hidden: int) -> None:
    tensors = m.weight_tensors(hidden)
    assert tensors and all(isinstance(t, Tensor) and t.params > 0 for t in tensors)
    # A KV-shared layer's extra MLP rows (Gemma 4's double-wide MLP) are its own.
    wide = {"mlp"} if getattr(m, "wide_mlp", 0) else set()
    assert {t.role for t in tensors} <= {"mixer", "norm"} | wide
    assert all(isinstance(t, StateTensor) for t in m.state_tensors())
    assert m.detail()
    assert m.per_rank(1) == m
    if m.has_kv_heads:
        kv = m.kv_head_count()
        assert kv is not None
        mqa = m.with_heads(1, None)  # one KV head always divides the query heads
        assert mqa.cache_elements_per_token() * kv == m.cache_elements_per_token()
    else:
        assert m.with_heads(8, 64) is m


def test_head_overrides_are_refusable_per_model() -> None:
    assert registry_model("llama3-70b").accepts_head_overrides()
    # jamba's 4 attention layers take them
    assert registry_model("jamba-v0.1").accepts_head_overrides()
    assert not registry_model("deepseek-v3").accepts_head_overrides()
    mamba_only = ModelSpec("m", "m", 2, 64, 100, False, (Mamba(128, 16, 4, 8),), DenseMLP(64))
    assert not mamba_only.accepts_head_overrides()


# --------------------------------------------------------------------------------------------
# Each kind's numbers against the references


@dataclass(frozen=True)
class Expected:
    """What one layer of a kind should report, restated from the references."""

    cache_elements_per_token: int
    tokens_held: int
    conv_elements: int
    ssm_elements: int
    attention_flops_per_held_token: int
    state_flops_per_token: int
    detail: str


def _attention(m: FullAttention, held: int, suffix: str = "") -> Expected:
    kv, dk, dv, q = m.kv_heads, m.head_dim_k, m.head_dim_v, m.q_heads
    dims = str(dk) if dk == dv else f"{dk}/{dv}"
    # Seed 004: K and V per KV head; scores q.k and sum p.v, one multiply-add per element.
    return Expected(kv * (dk + dv), held, 0, 0, 2 * q * (dk + dv), 0, f"{kv} kv x {dims}{suffix}")


def _full(m: FullAttention, context: int) -> Expected:
    return _attention(m, context)


def _sliding(m: SlidingWindowAttention, context: int) -> Expected:
    w = m.window
    return _attention(m, min(context, w), f", window {w:,}")


def _chunked(m: ChunkedLocalAttention, context: int) -> Expected:
    c = m.chunk
    return _attention(m, min(context, c), f", chunk {c:,}")


def _mla(m: MultiHeadLatentAttention, context: int) -> Expected:
    r, rope, q = m.kv_lora_rank, m.qk_rope_head_dim, m.q_heads
    # Seed 004: one latent plus one RoPE key, no factor 2; absorbed decode scores against both
    # and sums latents.
    return Expected(r + rope, context, 0, 0, 2 * q * (r + rope + r), 0, f"latent {r} + rope {rope}")


def _mla_indexed(m: IndexedLatentAttention, context: int) -> Expected:
    mla = _mla(m, context)
    # The indexer scores every held token with index_heads q.k products of index_head_dim.
    indexer = 2 * m.index_heads * m.index_head_dim
    detail = f"{mla.detail}, indexer {m.index_heads}x{m.index_head_dim} top-{m.index_topk:,}"
    return replace(
        mla,
        attention_flops_per_held_token=mla.attention_flops_per_held_token + indexer,
        detail=detail,
    )


def _mamba(m: Mamba, context: int) -> Expected:
    d, n, k = m.d_inner, m.d_state, m.d_conv
    # vLLM MambaSpec: conv (d_inner, d_conv - 1), SSM (d_inner, d_state).
    return Expected(0, 0, d * (k - 1), d * n, 0, 4 * d * n, f"d_inner {d}, d_state {n}, conv {k}")


def _mamba2(m: Mamba2, context: int) -> Expected:
    h, p, g, n, k = m.n_heads, m.head_dim, m.n_groups, m.d_state, m.d_conv
    # vLLM mamba2_state_shape: conv over x, B and C (d_inner + 2 g n, d_conv - 1); SSM (h, p, n).
    conv = (h * p + 2 * g * n) * (k - 1)
    detail = f"{h} heads x {p}, d_state {n}, groups {g}, conv {k}"
    return Expected(0, 0, conv, h * p * n, 0, 4 * h * p * n, detail)


def _deltanet(m: GatedDeltaNet, context: int) -> Expected:
    kh, vh = m.k_heads, m.v_heads
    kd, vd, k = m.k_head_dim, m.v_head_dim, m.conv_kernel
    conv = (kh * kd + kh * kd + vh * vd) * (k - 1)  # q, k and v through the causal conv
    return Expected(0, 0, conv, vh * kd * vd, 0, 6 * vh * kd * vd, f"{vh} v heads x {kd}x{vd}")


def _short_conv(m: ShortConv, context: int) -> Expected:
    c, k = m.channels, m.conv_kernel
    # vLLM short_conv_state_shape: (conv_dim, L_cache - 1) and no temporal state; decode
    # multiplies two gates (B * x, C * y) per channel.
    return Expected(0, 0, c * (k - 1), 0, 0, 2 * c, f"{c} channels, conv {k}")


def _lightning(m: LightningAttention, context: int) -> Expected:
    h, d = m.heads, m.head_dim
    return Expected(0, 0, 0, h * d * d, 0, 4 * h * d * d, f"{h} heads x {d}x{d}")


def _shared_kv(m: SharedKVAttention, context: int) -> Expected:
    source = EXPECTED[m.source.kind](m.source, context)
    # Nothing stored; the source's held tokens attended with the source's FLOPs.
    return replace(
        source,
        cache_elements_per_token=0,
        detail=f"reads a {m.source.kind} layer's cache ({source.detail})",
    )


def _compressed(m: CompressedAttention, context: int) -> Expected:
    # One shared latent of head_dim values per entry; a window-only layer (ratio 0) holds its
    # window, a compressing one covers the whole context. Decode scores against the latent and
    # sums latents per entry (2 x q_heads x 2 x head_dim), plus the indexer's index_heads q.k
    # products of index_head_dim on ratio-4 layers; one entry per r held tokens, rounded up.
    held = context if m.compress_ratio else min(context, m.window)
    index = 2 * m.index_heads * m.index_head_dim if m.compress_ratio == 4 else 0
    per_entry = 4 * m.q_heads * m.head_dim + index
    flops = math.ceil(per_entry / m.compress_ratio) if m.compress_ratio else per_entry
    head = f"latent {m.head_dim} (rope {m.rope_dim}), window {m.window:,}"
    if not m.compress_ratio:
        detail = f"{head}, no compression"
    else:
        detail = f"{head} + 1 entry per {m.compress_ratio} tokens"
        if m.compress_ratio == 4:
            detail += f", indexer {m.index_heads}x{m.index_head_dim} top-{m.index_topk:,}"
    return Expected(m.head_dim, held, 0, 0, flops, 0, detail)


# Each takes its own kind; the kind name picks the function.
EXPECTED: dict[str, Callable[[Any, int], Expected]] = {
    "full": _full,
    "sliding": _sliding,
    "chunked": _chunked,
    "mla": _mla,
    "mla_indexed": _mla_indexed,
    "compressed": _compressed,
    "mamba": _mamba,
    "mamba2": _mamba2,
    "gated_deltanet": _deltanet,
    "short_conv": _short_conv,
    "lightning": _lightning,
    "shared_kv": _shared_kv,
}


def test_every_kind_has_a_reference() -> None:
    assert set(EXPECTED) == set(KINDS)


def _elements(m: Mixer, role: str) -> int:
    return sum(t.elements for t in m.state_tensors() if t.role == role)


@given(any_mixer(), st.integers(1, 10**6))
@settings(max_examples=300, deadline=None)
def test_each_kind_matches_its_reference(m: Mixer, context: int) -> None:
    expected = EXPECTED[m.kind](m, context)
    actual = Expected(
        m.cache_elements_per_token(),
        m.tokens_held(context),
        _elements(m, "conv"),
        _elements(m, "ssm"),
        m.attention_flops_per_held_token(),
        m.state_flops_per_token(),
        m.detail(),
    )
    assert actual == expected


# --------------------------------------------------------------------------------------------
# One layer of each kind in a real model, worked by hand from its config.json
# (model-configs.yaml), so the references above are anchored to figures that are not formulas.

#: model -> (layer, cache elements per token, tokens held at 1M, conv + SSM state elements,
#: attention FLOPs per held token, state FLOPs per token)
GOLDEN_LAYERS = {
    # full: 8 KV heads x (128 + 128); 2 x 64 q heads x 256
    "llama3-70b": (0, 8 * 256, 10**6, 0, 2 * 64 * 256, 0),
    # sliding (layer 0): 8 x (64 + 64), window 128; 2 x 64 x 128
    "gpt-oss-120b": (0, 8 * 128, 128, 0, 2 * 64 * 128, 0),
    # chunked (layer 0): 8 x (128 + 128), chunk 8192; 2 x 40 q heads x 256
    "llama4-scout": (0, 8 * 256, 8192, 0, 2 * 40 * 256, 0),
    # MLA: latent 512 + RoPE key 64 (seed 004); 2 x 128 x (512 + 64 + 512)
    "deepseek-v3": (0, 512 + 64, 10**6, 0, 2 * 128 * 1088, 0),
    # Mamba (layer 0): conv 8192 x 3 + SSM 8192 x 16; 4 x 8192 x 16
    "jamba-v0.1": (0, 0, 0, 8192 * 3 + 8192 * 16, 0, 4 * 8192 * 16),
    # Gated DeltaNet (layer 0): conv (2 x 16 x 128 + 32 x 128) x 3 + state 32 x 128 x 128;
    # 6 x 32 x 128 x 128
    "qwen3-next-80b-a3b": (0, 0, 0, 8192 * 3 + 32 * 128 * 128, 0, 6 * 32 * 128 * 128),
    # lightning (layer 0): 64 heads x 128 x 128; 4 x 64 x 128 x 128
    "minimax-text-01": (0, 0, 0, 64 * 128 * 128, 0, 4 * 64 * 128 * 128),
    # Mamba-2 (layer 0): 128 heads x 64, one group, d_state 128, conv 4: conv (8192 + 2 x 128)
    # x 3 + SSM 128 x 64 x 128; 4 x 128 x 64 x 128
    "granite-4.0-h-small": (0, 0, 0, (8192 + 2 * 128) * 3 + 128 * 64 * 128, 0, 4 * 128 * 64 * 128),
    # MLA + indexer: latent 512 + RoPE 64; MLA's FLOPs plus the indexer's 2 x 64 heads x 128
    "deepseek-v3.2-exp": (0, 512 + 64, 10**6, 0, 2 * 128 * 1088 + 2 * 64 * 128, 0),
    # KV-shared (Gemma-4-E2B layer 34, full, one of the last 20): stores nothing, attends over
    # layer 14's whole context with 8 q heads of global_head_dim 512: 2 x 8 x (512 + 512)
    "gemma-4-e2b": (34, 0, 10**6, 0, 2 * 8 * 1024, 0),
    # DeepSeek-V4-Flash layer 2 (compress_ratios[2] = 4): one 512-value latent per entry,
    # covering the whole context; per entry 2 x 64 heads x (512 + 512) plus the indexer's
    # 2 x 64 x 128, one entry per 4 tokens
    "deepseek-v4-flash": (2, 512, 10**6, 0, (2 * 64 * 1024 + 2 * 64 * 128) // 4, 0),
    # short conv (LFM2-700M layer 0): the last conv_L_cache - 1 = 2 inputs of its 1536 channels
    # (61,440 bytes over 10 layers in bf16, SGLang's logged state per request); the gates B * x
    # and C * y multiply 2 x 1536 values per token
    "lfm2-700m": (0, 0, 0, 1536 * 2, 0, 2 * 1536),
}


def test_every_kind_has_a_golden_layer() -> None:
    kinds = {registry_model(m).mixer_at(g[0]).kind for m, g in GOLDEN_LAYERS.items()}
    assert kinds == set(KINDS)


@pytest.mark.parametrize(("model_id", "golden"), sorted(GOLDEN_LAYERS.items()))
def test_golden_layer_of_a_real_model(model_id: str, golden: tuple[int, ...]) -> None:
    layer, *figures = golden
    m = registry_model(model_id).mixer_at(layer)
    assert [
        m.cache_elements_per_token(),
        m.tokens_held(10**6),
        m.state_elements(),
        m.attention_flops_per_held_token(),
        m.state_flops_per_token(),
    ] == figures


# Bytes per token: the main entry at the KV dtype, side caches at their own format

KV_DTYPES = [dtype(name) for name in ("fp32", "bf16", "fp16", "fp8", "int8", "int4")]


@given(any_mixer(), st.sampled_from(KV_DTYPES))
@settings(max_examples=300, deadline=None)
def test_token_bytes_are_the_main_entry_plus_side_caches(m: Mixer, kv: DType) -> None:
    if m.kind == "compressed":
        return  # a window plus compressed entries: test_deepseek_v4_entries
    sides = sum(s.bytes_per_token for s in m.side_caches())
    assert layer_bytes_per_token(m, kv) == m.main_token_bytes(kv) + sides
    if m.kind != "mla_indexed":  # the one kind with a mixed-format entry and a side cache
        assert m.main_token_bytes(kv) == kv.bytes_for(m.cache_elements_per_token())
        assert sides == 0


def test_deepseek_v32_indexer_entry() -> None:
    m = IndexedLatentAttention(
        512, 64, 128, 128, 128, 1536, index_heads=64, index_head_dim=128, index_topk=2048
    )
    # model-configs-2025.yaml: 128 x float8_e4m3fn + 1 x float32 scale = 132 bytes.
    assert [(s.name, s.bytes_per_token) for s in m.side_caches()] == [("indexer keys", 132)]
    assert layer_bytes_per_token(m, dtype("bf16")) == (512 + 64) * 2 + 132
    # fp8: DeepSeek's sparse-MLA entry, 512 fp8 + 4 fp32 scales + 64 bf16 RoPE = 656 bytes.
    assert m.main_token_bytes(dtype("fp8")) == 512 + 4 * 4 + 64 * 2 == 656
    assert layer_bytes_per_token(m, dtype("fp32")) == (512 + 64) * 4 + 132
    # The indexer is replicated: TP splits only the query heads.
    assert m.per_rank(8).side_caches() == m.side_caches()
    assert m.per_rank(8).q_heads == 16


def test_deepseek_v4_entries() -> None:
    # DeepSeek-V4-Flash config.json: head_dim 512, qk_rope_head_dim 64, sliding_window 128,
    # index_head_dim 128, 64 heads, o_groups 8 (arch-2026.md section 1).
    c4 = CompressedAttention(4, 128, 512, 64, 64, 1024, 1024, 8, 64, 128, 512)
    c128 = replace(c4, compress_ratio=128, index_heads=0, index_head_dim=0, index_topk=0)
    fp8, bf16 = dtype("fp8"), dtype("bf16")
    # vLLM's fp8_ds_mla entry: 448 fp8 NoPE + 64 x 2 bf16 RoPE + 448 / 64 = 7 UE8M0 + 1 pad.
    assert c4.main_token_bytes(fp8) == 448 + 128 + 7 + 1 == 584
    assert c4.main_token_bytes(bf16) == 512 * 2  # a plain row
    # 131,072 tokens: 128 window entries + 32,768 compressed, each with a 128 + 4 B key.
    assert layer_tokens_bytes(c4, 131072, fp8) == 128 * 584 + 32768 * (584 + 132)
    assert layer_tokens_bytes(c128, 131072, fp8) == 128 * 584 + 1024 * 584
    # fp32 compressor states: C4 8 rows x 2 x 2 x 512 x 4 + indexer 8 x 2 x 2 x 128 x 4;
    # C128 128 rows x 2 x 1 x 512 x 4 (arch-2026: 8,192 / 2,048 / 4,096 B per row).
    assert layer_state_bytes(c4, fp8) == 8 * 8192 + 8 * 2048
    assert layer_state_bytes(c128, bf16) == 128 * 4096
    # Per token while the window fills: the window entry plus the compressed share, rounded
    # up: 584 + (584 + 132) / 4 = 584 + 179; 584 + 584 / 128 = 584 + 4.56 -> 589.
    assert layer_bytes_per_token(c4, fp8) == 584 + 179 and layer_bytes_per_token(c128, fp8) == 589
    # TP splits the query heads and output groups, never a cache.
    assert c4.per_rank(8) == replace(c4, q_heads=8, o_groups=1)
    with pytest.raises(KVFormatError, match="fp8 or bf16"):
        check_stores(LinearKV("int4", dtype("int4")), _one_layer_model(c4))


def _one_layer_model(m: Mixer) -> ModelSpec:
    return ModelSpec("one", "one", 1, 64, 64, False, (m,), DenseMLP(64))


def test_mamba2_groups_under_tensor_parallelism() -> None:
    m = Mamba2(n_heads=128, head_dim=64, n_groups=8, d_state=128, d_conv=4)
    assert m.per_rank(4) == Mamba2(32, 64, 2, 128, 4)  # groups split with the heads
    single = replace(m, n_groups=1)
    assert single.per_rank(8).n_groups == 1  # one group: a copy on every rank (vLLM)
    with pytest.raises(ParallelismError, match="6 Mamba-2 groups"):
        replace(m, n_groups=6).per_rank(4)
    # Weights: B and C of a replicated group are whole on every rank, the rest splits by heads.
    hidden = 4096
    b_c = next(t for t in single.weight_tensors(hidden) if t.units == 1)
    assert b_c.params_per_rank(8) == b_c.params == 2 * 128 * hidden
