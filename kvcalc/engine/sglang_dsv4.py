"""SGLang's DeepSeek-V4 pools: ``DSV4PoolConfigurator`` (``model_executor/pool_configurator.py``).

Read from the SGLang wheels 0.5.15 to 0.5.23 (PyPI). 0.5.15-0.5.20's configurator is the same on
the default CUDA path (0.5.20 adds the unified-KV path, taken only when its env gate is set, and
the SWA-pool floor :func:`check_swa_floor`); 0.5.21 rewrote it (:data:`REWRITE`, the same on
the default path through 0.5.23; see "0.5.21 on" below); older releases (0.5.14 and before) size
DeepSeek-V4 by another formula. Server defaults for ``DeepseekV4ForCausalLM``
(``arg_groups/overrides.py`` ``_deepseek_v4_overrides`` and ``deepseek_v4_hook.py``
``apply_deepseek_v4_defaults``): ``page_size`` 256 on CUDA, ``swa_full_tokens_ratio`` 0.1
unless given, ``max_running_requests`` 256 unless given, KV ``auto`` -> ``fp8_e4m3`` (only
fp8_e4m3 and bfloat16 are accepted), the prefill CUDA graph off ("DeepSeek-V4 (heavy
capture-pool memory pressure)").

Every layer keeps a sliding window of latents (the SWA pool, ``swa_full_tokens_ratio`` of the
full pool); ratio-4 layers add one compressed latent and one indexer key per 4 tokens, ratio-128
layers one latent per 128; the ratio-4 compressors keep a fp32 state ring of 8 rows per window
page, the ratio-128 compressors 128 rows per request slot, charged up front. What one full-pool
token costs (``_get_bytes_per_full_token``; 7,705.45 B for DeepSeek-V4-Flash), with r the SWA
ratio, L layers, n4 / n128 layers of ratio 4 / 128, W the window::

    r x 584 x L + 584 x n4 / 4 + 584 x n128 / 128 + 132 x n4 / 4
      + r x (8 / W) x (2 x 2 x 512 x 4 + 2 x 2 x 128 x 4) x n4

584 = 448 NoPE (fp8) + 2 x 64 RoPE (bf16) + 8 scale bytes: SGLang sizes the entry unpadded,
whatever the KV dtype, and the pages' 576-byte padding (``DeepSeekV4SingleKVPool``) is not
charged. The MTP layer is not counted: the slice is ``compress_ratios[start:end]`` of the
target's layers; with speculative decoding (EAGLE, topk 1) the cost is inflated by (L + 1) / L
for the draft worker and the state rings double (16 and 256 rows).

0.5.21 on (``_get_bytes_per_swa_token`` / ``_compressed_bytes_per_full_token``, read in the
0.5.21, 0.5.22 and 0.5.23 wheels): each pool's entry is charged as its padded page costs
(``_get_paged_kv_bytes_per_token``: ``KVLayout.V4.page_bytes``, a page of 584-byte entries
rounded up to whole 576-byte rows; the default ``SGLANG_DSV4_KV_LAYOUT`` is ``v4`` on every
GPU), and the ratio-4 state is priced and allocated per SWA *page* (``ring / page_size``,
``swa_tokens // page_size x ring``) where 0.5.20 used the window (sglang#30371 / #40337). At the
CUDA page of 256: 585 B for the SWA and C4 entries, 864 B for the C128 one (2 tokens a page)::

    r x (585 x L + 8 / 256 x 10,240 x n4) + (585 / 4 + 132 / 4) x n4 + 864 / 128 x n128

(7,086.75 B for DeepSeek-V4-Flash.) DeepSeek-V4 keeps ratio sizing: ``_deepseek_v4_overrides``
declares ``swa_full_tokens_ratio`` 0.1 before ``_handle_cache_compatibility`` records it as set,
so the request-cap mode (V4.1 only) is not taken. The ratio-1/2 layers and their page padding
(0.5.23 ``_get_low_ratio_kv_padding_bytes``) are V4.1's, absent from V4's ``compress_ratios``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.kv import mixer_counts
from kvcalc.engine.mixers.compressed import CompressedAttention

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.sglang import SGLangOptions, SGLangVersion
    from kvcalc.engine.spec import ModelSpec

#: The releases whose ``DSV4PoolConfigurator`` this module restates (read in each wheel).
SINCE = "0.5.15"
UNTIL = "0.5.23"
#: The release that rewrote the configurator: padded pages, the ratio-4 state per SWA page.
REWRITE = "0.5.21"
#: ``KVLayout.V4.page_align`` (``kernels/ops/attention/dsv4/kv_layout.py``, 0.5.21+): a page's
#: bytes are padded to whole rows of this many bytes (the reader's TMA row stride).
V4_PAGE_ALIGN = 576
#: ``_deepseek_v4_overrides``: the page on CUDA (NPU: 128).
PAGE_SIZE = 256
#: ``swa_full_tokens_ratio`` for DeepSeek-V4 unless given.
SWA_FULL_TOKENS_RATIO = Fraction("0.1")
#: ``apply_deepseek_v4_defaults``: ``max_running_requests`` unless given.
MAX_RUNNING_REQUESTS = 256
#: ``get_compress_state_ring_size(ratio, is_speculative)``: rows of a state ring, doubled
#: with speculative decoding.
C4_RING, C128_RING = 8, 128
SPEC_C4_RING, SPEC_C128_RING = 16, 256
#: The draft worker's layers (``DSV4PoolConfigurator``: ``draft_layers = 1``).
DRAFT_LAYERS = 1
#: ``SGLANG_DSV4_COMPRESS_STATE_DTYPE`` default float32.
STATE_VALUE_BYTES = 4
#: Rows of the C128 state pool are padded to whole 128-row blocks.
C128_ROW_ALIGN = 128
#: Indexer values per fp32 scale (``quant_block_size``) and the scale's bytes.
INDEX_QUANT_BLOCK, INDEX_SCALE_BYTES = 128, 4


def is_dsv4(model: ModelSpec) -> bool:
    """A DeepSeek-V4 model: its layers are compressed attention."""
    return any(m.kind == "compressed" for m in model.mixer_pattern)


@dataclass(frozen=True)
class DSV4Layers:
    """One pipeline stage's slice of ``compress_ratios`` and the latent geometry."""

    layers: int
    c4_layers: int
    c128_layers: int
    window: int
    nope_dim: int
    rope_dim: int
    index_head_dim: int

    @property
    def entry_bytes(self) -> int:
        """``kv_bytes = qk_nope_head_dim + qk_rope_head_dim x 2 + 8`` (584)."""
        return self.nope_dim + self.rope_dim * 2 + 8

    @property
    def index_bytes(self) -> int:
        """``indexer_bytes``: fp8 values plus an fp32 scale per 128 (132)."""
        d = self.index_head_dim
        return d + d // INDEX_QUANT_BLOCK * INDEX_SCALE_BYTES

    @property
    def head_dim(self) -> int:
        return self.nope_dim + self.rope_dim

    @property
    def c4_state_row_bytes(self) -> int:
        """One ratio-4 state row, main compressor plus indexer compressor:
        ``2 x 2 x head_dim x 4 + 2 x 2 x index_head_dim x 4``."""
        return 2 * 2 * (self.head_dim + self.index_head_dim) * STATE_VALUE_BYTES

    @property
    def c128_state_row_bytes(self) -> int:
        """One ratio-128 state row: ``2 x head_dim x 4`` (4,096)."""
        return 2 * self.head_dim * STATE_VALUE_BYTES


def stage_layers(model: ModelSpec, layers: range) -> DSV4Layers:
    mixers = [(m, n) for m, n in mixer_counts(model, layers) if isinstance(m, CompressedAttention)]
    first = mixers[0][0]
    index_dims = {m.index_head_dim for m, _ in mixers if m.indexed}
    return DSV4Layers(
        layers=sum(n for _, n in mixers),
        c4_layers=sum(n for m, n in mixers if m.compress_ratio == 4),
        c128_layers=sum(n for m, n in mixers if m.compress_ratio == 128),
        window=first.window,
        nope_dim=first.head_dim - first.rope_dim,
        rope_dim=first.rope_dim,
        index_head_dim=max(index_dims, default=0),
    )


def rings(speculative: bool) -> tuple[int, int]:
    return (SPEC_C4_RING, SPEC_C128_RING) if speculative else (C4_RING, C128_RING)


def bytes_per_full_token(
    geo: DSV4Layers, swa_ratio: Fraction, speculative: bool = False, page: int | None = None
) -> float:
    """``_get_bytes_per_full_token``, in SGLang's own float arithmetic and term order (its
    ``%.2f`` log line is then reproduced to the digit); with speculative decoding, inflated by
    (L + 1) / L for the draft worker's layer. ``page``: the page size under 0.5.21+'s rule
    (:func:`paged_bytes_per_full_token`); None, 0.5.15-0.5.20's."""
    c4_ring = rings(speculative)[0]
    if page is None:
        cost = target_bytes_per_full_token(geo, swa_ratio, c4_ring)
    else:
        cost = paged_bytes_per_full_token(geo, swa_ratio, c4_ring, page)
    if speculative:
        cost *= (geo.layers + DRAFT_LAYERS) / geo.layers
    return cost


def target_bytes_per_full_token(geo: DSV4Layers, swa_ratio: Fraction, c4_ring: int) -> float:
    """0.5.15-0.5.20: the unpadded 584-byte entry, the ratio-4 state per window."""
    r = float(swa_ratio)
    kv, n4 = geo.entry_bytes, geo.c4_layers
    c4_state_ratio = c4_ring / geo.window
    return (
        r * kv * geo.layers
        + 1 / 4 * kv * n4
        + 1 / 128 * kv * geo.c128_layers
        + 1 / 4 * geo.index_bytes * n4
        + r * c4_state_ratio * (2 * 2 * geo.head_dim * STATE_VALUE_BYTES) * n4
        + r * c4_state_ratio * (2 * 2 * geo.index_head_dim * STATE_VALUE_BYTES) * n4
    )


def v4_entry_bytes_in_pages(geo: DSV4Layers, tokens_per_page: int) -> float:
    """0.5.21+ ``_get_paged_kv_bytes_per_token``: a page of ``tokens_per_page`` entries as
    ``KVLayout.V4.page_bytes`` pads it (``ceil(n x 584 / 576) x 576``), per entry."""
    padded = -(-tokens_per_page * geo.entry_bytes // V4_PAGE_ALIGN) * V4_PAGE_ALIGN
    return padded / tokens_per_page


def paged_bytes_per_full_token(
    geo: DSV4Layers, swa_ratio: Fraction, c4_ring: int, page: int
) -> float:
    """0.5.21+: ``swa_ratio x _get_bytes_per_swa_token() + sum(_compressed_bytes_per_full_token
    (ratio) x layers)`` over the ratios 4 then 128 (``collect_sources_by_ratio``'s order); the
    compressed pools' pages hold ``page_size // ratio`` entries."""
    n4, n128 = geo.c4_layers, geo.c128_layers
    c4_state_ratio = (c4_ring if n4 else 0) / page
    per_swa_token = v4_entry_bytes_in_pages(geo, page) * geo.layers + (
        c4_state_ratio * geo.c4_state_row_bytes * n4
    )
    compressed: float = 0
    if n4:
        c4 = 1 / 4 * v4_entry_bytes_in_pages(geo, page // 4) + 1 / 4 * geo.index_bytes
        compressed += c4 * n4
    if n128:
        compressed += 1 / 128 * v4_entry_bytes_in_pages(geo, page // 128) * n128
    return float(swa_ratio) * per_swa_token + compressed


def c128_state_rows(requests: int, ring: int = C128_RING) -> int:
    """``_get_c128_state_fixed_bytes``' rows: a 128-row ring per request slot (one slot more than
    ``max_running_requests``), plus one ring and a row, padded to 128 rows."""
    rows = (requests + 1) * ring + ring + 1
    return math.ceil(rows / C128_ROW_ALIGN) * C128_ROW_ALIGN


def c128_state_fixed_bytes(geo: DSV4Layers, requests: int, ring: int = C128_RING) -> int:
    """The ratio-128 state charged before the token pools: 2,715,811,840 B for
    DeepSeek-V4-Flash at 256 requests."""
    if not geo.c128_layers:
        return 0
    return c128_state_rows(requests, ring) * geo.c128_state_row_bytes * geo.c128_layers


@dataclass(frozen=True)
class DSV4Sizes:
    """``_DSV4PoolSizes`` and what the sizing charged (the ``DSV4 memory calculation`` and
    ``DSV4 pool sizes`` log lines)."""

    bytes_per_full_token: float
    budget_bytes: int
    c128_state_fixed_bytes: int
    full_tokens: int
    swa_tokens: int
    c4_tokens: int
    c128_tokens: int
    c4_state_rows: int
    c128_state_rows: int
    window: int
    swa_ratio: Fraction

    @property
    def charged_bytes(self) -> int:
        """Bytes the sizing sets aside for the pools: the tokens at their per-token cost plus
        the fixed ratio-128 state."""
        return int(self.full_tokens * self.bytes_per_full_token) + self.c128_state_fixed_bytes


def split_pools(
    full: int, ratio: Fraction, page: int, state_page: int, c4_ring: int = C4_RING
) -> tuple[int, ...]:
    """``_compute_dsv4_sizes``: full, SWA, C4, C128 and C4-state sizes from a full-token
    count, each pool in whole pages; a ring of C4 state per ``state_page`` SWA tokens (the
    window through 0.5.20, the page from 0.5.21: :func:`state_page`)."""
    full = full // page * page
    swa = int(full * float(ratio)) // page * page
    return full, swa, full // 4, full // 128, swa // state_page * c4_ring


def rewritten(version: SGLangVersion) -> bool:
    """0.5.21+'s configurator (:data:`REWRITE`)."""
    return version.key[:3] >= release_key(REWRITE)


def cost_page(opts: SGLangOptions) -> int | None:
    """The page :func:`bytes_per_full_token` prices entries in: 0.5.21+, else None."""
    return page_size(opts) if rewritten(opts.version) else None


def state_page(opts: SGLangOptions, geo: DSV4Layers) -> int:
    """SWA tokens per ring of ratio-4 state: ``swa_page_size = cfg.window_size`` through
    0.5.20, ``page_size`` from 0.5.21 (``swa_tokens // page_size * ring``)."""
    return page_size(opts) if rewritten(opts.version) else geo.window


def requests_per_worker(opts: SGLangOptions, attn_dp: int) -> int:
    """``max_running_requests // attn_dp_size`` (256 unless given)."""
    given = opts.max_running_requests
    return max(1, (given if given is not None else MAX_RUNNING_REQUESTS) // attn_dp)


def dsv4_sizes(
    geo: DSV4Layers, budget: int, opts: SGLangOptions, attn_dp: int = 1
) -> DSV4Sizes | None:
    """``calculate_pool_sizes`` then ``calculate_pool_sizes_from_max_tokens`` when
    ``--max-total-tokens`` clamps (``config_from_budget``); None when no token fits."""
    ratio = swa_ratio(opts)
    page = page_size(opts)
    speculative = opts.speculative_algorithm is not None
    c4_ring, c128_ring = rings(speculative)
    cost = bytes_per_full_token(geo, ratio, speculative, cost_page(opts))
    fixed = c128_state_fixed_bytes(geo, requests_per_worker(opts, attn_dp), c128_ring)
    full = int(max(budget - fixed, 0) / cost)
    full = full // page * page
    if opts.max_total_tokens is not None:
        full = min(full, opts.max_total_tokens)
    full, swa, c4, c128, c4_state = split_pools(
        full, ratio, page, state_page(opts, geo), c4_ring
    )
    if full <= 0:
        return None
    requests = min(requests_per_worker(opts, attn_dp), full // 2)
    return DSV4Sizes(
        bytes_per_full_token=cost,
        budget_bytes=budget,
        c128_state_fixed_bytes=fixed,
        full_tokens=full,
        swa_tokens=swa,
        c4_tokens=c4,
        c128_tokens=c128,
        c4_state_rows=c4_state,
        # finalize_with_max_running_requests: a ring per request slot.
        c128_state_rows=(requests + 1) * c128_ring if geo.c128_layers else 0,
        window=geo.window,
        swa_ratio=ratio,
    )


def page_size(opts: SGLangOptions) -> int:
    """``--page-size``, SGLang's DeepSeek-V4 page unless given."""
    return opts.page_size or PAGE_SIZE


def swa_ratio(opts: SGLangOptions) -> Fraction:
    given = opts.swa_full_tokens_ratio
    return given if given is not None else SWA_FULL_TOKENS_RATIO


def release_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def dsv4_release(version: SGLangVersion) -> bool:
    return release_key(SINCE) <= version.key[:3] <= release_key(UNTIL)


def check_dsv4(dep: Deployment, opts: SGLangOptions) -> None:
    """Refuse what the restated configurator does not cover."""
    from kvcalc.engine.sglang import SGLangConfigError

    if not dsv4_release(opts.version):
        raise SGLangConfigError(
            f"{{sglang_version}}: SGLang {opts.version}'s DeepSeek-V4 pools are not modelled "
            f"(kvcalc restates the DSV4PoolConfigurator of {SINCE} to {UNTIL}); use "
            f"{{sglang_version}} {UNTIL}, or {{engine}} vllm or {{engine}} simple",
            "sglang_version",
            "engine",
        )
    if dep.kv_dtype.name != "fp8":
        raise SGLangConfigError.at(
            "kv_dtype",
            f"SGLang sizes DeepSeek-V4's pools for its fp8_e4m3 entry (584 bytes), not "
            f"{dep.kv_dtype.name}; use fp8 (its default)",
        )
    if page_size(opts) % 128:
        raise SGLangConfigError.at(
            "page_size",
            f"{page_size(opts)} is not a multiple of 128, which compressed attention needs "
            f"(SGLang's DeepSeek-V4 page is {PAGE_SIZE})",
        )


def dsv4_stage_sizes(dep: Deployment, opts: SGLangOptions, budget: int) -> DSV4Sizes | None:
    """The pools of the tightest pipeline stage: each stage sizes its own slice, and SGLang
    all-reduces the MIN token count over PP ranks before the pools are built."""
    dp = opts.attn_dp
    results = [dsv4_sizes(stage_layers(dep.model, s), budget, opts, dp) for s in dep.stages]
    if any(r is None for r in results):
        return None
    sizes = [r for r in results if r is not None]
    return min(sizes, key=lambda s: s.full_tokens)


def check_swa_floor(version: SGLangVersion, sizes: DSV4Sizes, page: int) -> str | None:
    """0.5.20 ``validate_swa_pool_size`` on DeepSeek-V4's SWA pool: the floor every SWA pool
    is held to (:func:`kvcalc.engine.sglang_hybrid.swa_floor_refusal`)."""
    from kvcalc.engine.sglang_hybrid import swa_floor_refusal

    return swa_floor_refusal(version.key[:3], sizes.swa_tokens, sizes.window, page)
