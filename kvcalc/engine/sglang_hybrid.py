"""SGLang 0.5.10-0.5.23's hybrid pools and multimodal rules: the mamba / linear-attention state
pool beside the full-attention KV pool, the sliding-window pool beside the full one, and what a
vision tower changes (at the end).

Read in the release wheels (``python/sglang/srt/...``):

* the mamba pool, ``handle_max_mamba_cache`` (0.5.10-0.5.15 ``model_executor/
  model_runner_kv_cache_mixin.py``, 0.5.16+ ``mem_cache/kv_cache_configurator.py``
  ``_handle_max_mamba_cache``): the pool takes ``rest x r / (1 + r)`` of the budget
  (``--mamba-full-memory-ratio`` r, 0.9). Up to 0.5.16 that share is cut into whole request
  states, ``int(share // per_req)``; from 0.5.17 the pool's padding slot is solved for too,
  ``int((share - per_req) // per_req)``, and ``(slots + 1) x per_req`` leaves the budget;
* requests per state slot (``_calculate_mamba_ratio``): 3 with the radix cache, plus 2 for
  the ping-pong "extra buffer" of the overlap scheduler, which 0.5.14+ choose by default
  (``mamba_radix_cache_strategy`` "auto" -> "extra_buffer" when the architecture supports it:
  Qwen3.5 / Qwen3.6, Qwen3-Next, Nemotron-H, Granite-4.0-H, Falcon-H1; LFM2's short
  convolutions stay "no_buffer", which turns the overlap scheduler off);
* the sliding-window pool (``_resolve_hybrid_swa_tokens`` in 0.5.10; ``pool_configurator.py``
  ``HybridSWAPoolConfigurator`` from 0.5.11): 0.5.10 prices every layer as full and then
  redistributes, ``full = tokens x (F + S) / (F + r x S)``; 0.5.11+ price the cell as
  ``F + r x S`` directly, ``full = int(available // (F + r x S))``, and ``swa = int(full x r)``,
  both page-aligned (``--swa-full-tokens-ratio`` r, 0.8). It is on by default for every hybrid
  sliding-window model but Gemma 2 / Gemma 3 (``disable_hybrid_swa_memory``: "not yet
  supported"); 0.5.20+ refuse an SWA pool that cannot hold one window plus a page
  (``validate_swa_pool_size``).

Pure formulas: the pool walk is :func:`kvcalc.engine.sglang.sglang_pool`'s.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

#: ``--mamba-full-memory-ratio`` (``mamba_full_memory_ratio`` fallback 0.9 in every release).
MAMBA_FULL_MEMORY_RATIO = Fraction("0.9")
#: ``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``: state slots per running request with the
#: radix cache on.
MAMBA_SLOTS_PER_REQUEST = 3
#: ``MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP`` / ``get_mamba_tracking_slots``: the extra
#: buffer's two ping-pong slots under the (default) overlap scheduler.
EXTRA_BUFFER_SLOTS = 2
#: The release whose "auto" strategy picks the extra buffer (``_handle_mamba_radix_cache``).
EXTRA_BUFFER_DEFAULT_SINCE = (0, 5, 14)
#: The release that solves for the mamba pool's padding slot.
PADDING_SLOT_SINCE = (0, 5, 17)
#: The release whose ``HybridSWAPoolConfigurator`` prices ``F + r x S`` directly.
DIRECT_SWA_CELL_SINCE = (0, 5, 11)
#: The release that refuses an SWA pool below one window plus a page.
SWA_FLOOR_SINCE = (0, 5, 20)
#: ``--swa-full-tokens-ratio`` fallback.
SWA_FULL_TOKENS_RATIO = Fraction("0.8")
#: Mixer kinds whose architectures take the extra buffer (``_MAMBA_EXTRA_BUFFER_ARCHS``:
#: Qwen3.5/3.6 and Qwen3-Next are Gated DeltaNet, Nemotron-H and Granite-4.0-H Mamba2).
#: LFM2 (``short_conv``) is in ``_MAMBA_RADIX_CACHE_ARCHS`` only: no extra buffer.
EXTRA_BUFFER_KINDS = frozenset({"gated_deltanet", "mamba2"})
#: The architectures ``_gemma2_gemma3_overrides`` keep in one shared pool, matched on the
#: registry's id / name as a stand-in for ``architectures[0]`` (Gemma2/Gemma3/Gemma3n).
_SHARED_POOL_RE = re.compile(r"gemma-?(2|3)(?!\d)")


def mamba_slots(
    version: tuple[int, int, int], rest: Fraction, per_request: int,
    ratio: Fraction = MAMBA_FULL_MEMORY_RATIO,
) -> int:
    """``max_mamba_cache_size``: the state slots of the pool's share of ``rest`` bytes."""
    share = rest * ratio / (1 + ratio)
    if version >= PADDING_SLOT_SINCE:
        return max(0, math.floor((share - per_request) / per_request))
    return max(0, math.floor(share / per_request))


def mamba_pool_bytes(version: tuple[int, int, int], slots: int, per_request: int) -> int:
    """What the state pool takes out of the budget: ``slots`` states, plus the padding slot
    from 0.5.17 (``(max_mamba_cache_size + 1) x per_req``)."""
    padding = 1 if version >= PADDING_SLOT_SINCE else 0
    return (slots + padding) * per_request


def slots_per_request(version: tuple[int, int, int], kinds: frozenset[str]) -> int:
    """``_calculate_mamba_ratio`` with the radix cache on: 3, or 5 with the extra buffer that
    0.5.14+ pick for the architectures that support it."""
    extra = version >= EXTRA_BUFFER_DEFAULT_SINCE and bool(kinds & EXTRA_BUFFER_KINDS)
    return MAMBA_SLOTS_PER_REQUEST + (EXTRA_BUFFER_SLOTS if extra else 0)


#: Gemma 4 (``srt/models/gemma4*.py``) first ships in the 0.5.11 wheel.
GEMMA4_SINCE = (0, 5, 11)
_GEMMA4_RE = re.compile(r"gemma-?4(?!\d)")


def is_gemma4(model_id: str, name: str) -> bool:
    """Gemma 4, matched on the registry's id / name (as :func:`keeps_one_pool`)."""
    return any(_GEMMA4_RE.search(text.lower()) for text in (model_id, name))


def keeps_one_pool(model_id: str, name: str) -> bool:
    """Gemma 2 / Gemma 3: SGLang turns their hybrid SWA memory off in every release."""
    return any(_SHARED_POOL_RE.search(text.lower()) for text in (model_id, name))


def swa_pools(
    version: tuple[int, int, int], available: Fraction, full_bytes: int, swa_bytes: int,
    ratio: Fraction, page: int, cap: int | None,
) -> tuple[int, int]:
    """Full and sliding-window tokens of ``available`` bytes (0.5.11+ ``calculate_pool_sizes``,
    then ``calculate_pool_sizes_from_max_tokens`` when ``--max-total-tokens`` ``cap`` is lower).
    """
    full = math.floor(available / (full_bytes + ratio * swa_bytes))
    if cap is not None:
        full = min(full, cap)
    full = full // page * page
    return full, math.floor(full * ratio) // page * page


def swa_floor_refusal(
    version: tuple[int, int, int], swa_tokens: int, window: int | None, page: int
) -> str | None:
    """0.5.20+ ``validate_swa_pool_size``: "SWA pool cannot hold even one request"."""
    if version < SWA_FLOOR_SINCE or window is None or window + page < swa_tokens:
        return None
    return (
        f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill "
        f"admission floor is the window ({window}) + page_size ({page}); raise "
        "--swa-full-tokens-ratio or --mem-fraction-static, or use more GPUs"
    )


# --------------------------------------------------------------------------------------------
# Multimodal models (a vision tower beside the language model)

#: The release from which kvcalc applies the VLM share (read in the 0.5.10-0.5.23 wheels:
#: ``server_args.py`` ``adjust_mem_fraction_for_vlm``, from 0.5.19 ``arg_groups/memory_hook.py``).
VLM_SHARE_SINCE = (0, 5, 10)
#: ``mm_runtime_reservation_gb``: ``SGLANG_VLM_CACHE_SIZE_MB`` (100) of the KV budget kept for
#: the multimodal embedding cache, from 0.5.18 (CPU feature transport, the default).
VLM_CACHE_RESERVED_MIB = 100
VLM_CACHE_SINCE = (0, 5, 18)
#: ``multimodal_breakable_cuda_graph_supported_model_archs`` (0.5.16+): the multimodal
#: architectures that keep the default prefill CUDA graph (Qwen3.5 / Qwen3.6, dense and MoE).
PREFILL_GRAPH_VLM_ALLOWLIST_SINCE = (0, 5, 16)


def vlm_share_factor(vision_layers: int, vision_hidden: int) -> float:
    """``adjust_mem_fraction_for_vlm``: ``0.95 x clamp(1 - 0.1 x (score - 1), 0.8, 1.05)``,
    ``score = layers x hidden^2 / (24 x 1024^2)`` (ViT-L/14 as 1), in SGLang's floats."""
    ratio = vision_layers * vision_hidden**2 / (24 * 1024**2)
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def vlm_reserved_bytes(version: tuple[int, int, int]) -> int:
    """The multimodal cache kept out of the KV budget (0 before 0.5.18)."""
    return VLM_CACHE_RESERVED_MIB * 2**20 if version >= VLM_CACHE_SINCE else 0


def multimodal_prefill_graph(version: tuple[int, int, int], allowlisted: bool) -> bool:
    """Whether a multimodal model keeps the default prefill CUDA graph: never in 0.5.10-0.5.15
    ("Multimodal / VLM models" turn the piecewise graph off; the breakable graph's "multimodal
    model" rule), then only the allowlisted architectures."""
    return allowlisted and version >= PREFILL_GRAPH_VLM_ALLOWLIST_SINCE
