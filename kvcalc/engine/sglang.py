"""SGLang KV-cache sizing: the token pool ``max_total_num_tokens`` and ``max_running_requests``.

A restatement of what SGLang does at start-up, from the reference ``sglang-kv-algorithm.md``
(read from the release tags of the ``bytedance-iaas/sglang`` mirror, v0.5.6 as the primary
reference, and checked against start-up logs of v0.4.1 to v0.5.10). Section numbers below are
the reference's; file names are SGLang's (``python/sglang/srt/...``):

1. the default ``mem_fraction_static`` from nvidia-smi's total, tp x pp, the chunked-prefill
   size and the CUDA-graph batch size, by release (section 7, ``server_args.py``
   ``_handle_gpu_memory_settings``);
2. ``PRE``, the free memory before the weights load, and ``AFTER``, after (section 1,
   ``model_runner.py`` ``init_torch_distributed`` / ``init_memory_pool``): measured figures from
   the log, or estimated here from the GPU, the CUDA context and the weights;
3. ``rest = AFTER - PRE x (1 - mem_fraction_static)`` (``profile_max_num_token``), minus the
   mamba state pool of a hybrid (section 4, ``handle_max_mamba_cache``);
4. ``max_total_num_tokens = rest // cell_size``, clamped by ``--max-total-tokens``, rounded down
   to the page, split between full and sliding-window pools (sections 2, 3 and 5);
5. the request pool and ``max_running_requests`` (section 3, ``tp_worker.py`` / ``scheduler.py``).

Releases v0.5.10 to v0.5.18 were read from their tags (``git show vX.Y.Z:python/sglang/srt/
server_args.py`` and ``model_executor/model_runner_kv_cache_mixin.py`` /
``mem_cache/kv_cache_configurator.py``): their default share also reserves for the prefill CUDA
graph (on by default from v0.5.10), and their request pool is resolved from the final token
capacity. Their mamba / GDN state pool and separate sliding-window pool (on by default from
0.5.10) are :mod:`kvcalc.engine.sglang_hybrid`'s; DeepSeek-V4's pools (``DSV4PoolConfigurator``,
0.5.15 on) are :mod:`kvcalc.engine.sglang_dsv4`'s.

Multimodal models (a vision tower) get, from 0.5.10, the VLM share
(``adjust_mem_fraction_for_vlm``), no default prefill CUDA graph (but Qwen3.5 / Qwen3.6 from
0.5.16) and, from 0.5.18, 100 MiB kept out of the budget (:mod:`kvcalc.engine.sglang_hybrid`).

Not modelled: speculative decoding before 0.5.14 and with hybrid pools, DP attention with a mamba
pool, the VLM share before 0.5.10, FP4 KV caches, DeepSeek-V3.2's NSA indexer, Llama-4's
``--hybrid-kvcache-ratio``, the ROCm aiter adjustment, and the opt-in post-capture sizing of
v0.5.16+ (``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``, off by default).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from functools import total_ordering
from typing import TYPE_CHECKING

from kvcalc.engine.eviction import kept_by_engine
from kvcalc.engine.kv import CacheFormat, layer_bytes_per_token, layer_state_bytes, mixer_counts
from kvcalc.engine.kvformat import KVFormat, plain
from kvcalc.engine.serving.base import EngineRefusal
from kvcalc.engine.sglang_dsv4 import MAX_RUNNING_REQUESTS as DSV4_MAX_RUNNING_REQUESTS
from kvcalc.engine.sglang_dsv4 import (
    DSV4Sizes,
    bytes_per_full_token,
    check_dsv4,
    check_swa_floor,
    dsv4_stage_sizes,
    is_dsv4,
    stage_layers,
)
from kvcalc.engine.sglang_dsv4 import cost_page as dsv4_cost_page
from kvcalc.engine.sglang_dsv4 import page_size as dsv4_page_size
from kvcalc.engine.sglang_dsv4 import requests_per_worker as dsv4_requests
from kvcalc.engine.sglang_dsv4 import swa_ratio as dsv4_swa_ratio
from kvcalc.engine.sglang_hybrid import (
    DIRECT_SWA_CELL_SINCE,
    GEMMA4_SINCE,
    MAMBA_FULL_MEMORY_RATIO,
    SWA_FULL_TOKENS_RATIO,
    VLM_SHARE_SINCE,
    is_gemma4,
    keeps_one_pool,
    mamba_pool_bytes,
    mamba_slots,
    multimodal_prefill_graph,
    slots_per_request,
    swa_floor_refusal,
    swa_pools,
    vlm_reserved_bytes,
    vlm_share_factor,
)
from kvcalc.engine.spec import Mixer, ModelSpec
from kvcalc.engine.units import DType, GiB, MiB, dtype

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment


class SGLangConfigError(EngineRefusal):
    """A set-up SGLang would refuse, or that this model does not cover; one line naming the fix."""


# --------------------------------------------------------------------------------------------
# Releases


@total_ordering
@dataclass(frozen=True)
class SGLangVersion:
    """A release tag: ``0.5.6``, ``v0.4.7.post1``."""

    major: int
    minor: int
    patch: int
    post: int = 0

    @property
    def key(self) -> tuple[int, int, int, int]:
        return (self.major, self.minor, self.patch, self.post)

    def __lt__(self, other: SGLangVersion) -> bool:
        return self.key < other.key

    def __str__(self) -> str:
        post = f".post{self.post}" if self.post else ""
        return f"{self.major}.{self.minor}.{self.patch}{post}"


_VERSION_RE = re.compile(r"^v?([0-9]{1,4})\.([0-9]{1,4})\.([0-9]{1,4})(?:\.post([0-9]{1,4}))?$")
#: The releases whose start-up this module restates: v0.4.0 (Dec 2024) to v0.5.23, the newest on
#: PyPI (its wheel read, as were 0.5.10-0.5.22's). The v0.4 series ended at v0.4.10 (reference
#: section 0).
OLDEST = SGLangVersion(0, 4, 0)
NEWEST = SGLangVersion(0, 5, 23)
LAST_PATCH = {(0, 4): 10, (0, 5): 23}
#: The default: the newest release, what a practitioner starting SGLang today runs (the engine's
#: own defaults for the current release). It sizes every registry model SGLang 0.5.23 serves
#: (DeepSeek-V4's pools from :mod:`kvcalc.engine.sglang_dsv4`'s 0.5.21+ rules); the models it
#: refuses are ones SGLang 0.5.23 does not serve. Rules whose reference is an older release's log
#: are pinned to that release by ``--sglang-version``. The output says which release applied.
DEFAULT_VERSION = NEWEST
SUPPORTED_RANGE = f"{OLDEST} to {NEWEST}"


def sglang_version(text: str) -> SGLangVersion:
    """Parse a release name; refuse one that does not exist or that is not modelled."""
    match = _VERSION_RE.match(text.strip())
    if match is None:
        raise SGLangConfigError.at(
            "sglang_version",
            f"{text!r} is not a release; use X.Y.Z[.postN] such as 0.5.6",
        )
    major, minor, patch = (int(match.group(i)) for i in (1, 2, 3))
    version = SGLangVersion(major, minor, patch, int(match.group(4) or 0))
    if not OLDEST <= version <= SGLangVersion(*NEWEST.key[:3], post=99):
        raise SGLangConfigError.at(
            "sglang_version",
            f"{version} is not supported; kvcalc models SGLang {SUPPORTED_RANGE}",
        )
    if patch > LAST_PATCH[(major, minor)]:
        raise SGLangConfigError.at(
            "sglang_version",
            f"there is no SGLang {version}; the {major}.{minor} series ends at "
            f"{major}.{minor}.{LAST_PATCH[(major, minor)]}",
        )
    return version


def v(text: str) -> SGLangVersion:
    """A version constant, for the rule boundaries below."""
    return sglang_version(text)


# --------------------------------------------------------------------------------------------
# Step 1: the default mem_fraction_static (reference section 7)

#: v0.4.0-v0.4.5 ``ServerArgs.__post_init__``: the share by TP size (section 7.1).
_TP_TABLE = ((16, Fraction("0.79")), (8, Fraction("0.81")), (4, Fraction("0.85")),
             (2, Fraction("0.87")), (1, Fraction("0.88")))


def tp_table_fraction(size: int) -> Fraction:
    """The share of the v0.4 TP table for ``size`` GPUs (0.88 at 1 down to 0.79 at 16+)."""
    return next(share for least, share in _TP_TABLE if size >= least)


def rounded_share(gpu_mem_mib: int, reserved_mib: float) -> Fraction:
    """``round((gpu_mem - reserved) / gpu_mem, 3)`` as SGLang computes it, in floats, then read
    as its decimal text (0.835 is 167/200)."""
    return Fraction(str(round((gpu_mem_mib - reserved_mib) / gpu_mem_mib, 3)))


def default_chunked_prefill_size(version: SGLangVersion, gpu_mem_mib: int) -> int:
    """``--chunked-prefill-size`` by GPU memory tier (sections 7.1, 7.3, 7.4)."""
    if version < v("0.4.7.post1"):
        return 2048 if gpu_mem_mib < 25000 else 8192
    if version < v("0.5.3"):
        if gpu_mem_mib < 35 * 1024:
            return 2048
        return 8192 if gpu_mem_mib < 160 * 1024 else 16384
    # 0.5.20 (arg_groups/memory_hook.py) raised the 20-35 GiB tier (RTX 5090) to 4096.
    small = 4096 if version >= v("0.5.20") else 2048
    tiers = ((20 * 1024, 2048), (35 * 1024, small), (60 * 1024, 4096), (160 * 1024, 8192))
    return next((size for below, size in tiers if gpu_mem_mib < below), 16384)


def default_cuda_graph_max_bs(
    version: SGLangVersion, gpu_mem_mib: int, tp: int, max_running_requests: int | None = None
) -> int:
    """``--cuda-graph-max-bs`` by GPU memory tier and TP (section 7.4 table, v0.5.3 on; the
    20-35 GiB tier moved from 16 to 24 at TP < 4 in v0.5.5, and to 48 / 160 in v0.5.20), capped
    at ``--max-running-requests`` from v0.5.22 (``handle_gpu_memory_settings``)."""
    tiered = tier_cuda_graph_max_bs(version, gpu_mem_mib, tp)
    if max_running_requests is not None and version >= v("0.5.22"):
        return min(tiered, max_running_requests)
    return tiered


def tier_cuda_graph_max_bs(version: SGLangVersion, gpu_mem_mib: int, tp: int) -> int:
    small_tp = tp < 4
    if gpu_mem_mib < 20 * 1024:
        return 8
    if gpu_mem_mib < 35 * 1024:
        if version >= v("0.5.20"):
            return 48 if small_tp else 160
        return (24 if version >= v("0.5.5") else 16) if small_tp else 80
    if gpu_mem_mib < 60 * 1024:
        return 32 if small_tp else 160
    if gpu_mem_mib < 160 * 1024:
        return 256 if small_tp else 512
    return 512


def mfs_uses_graph_inputs(version: SGLangVersion) -> bool:
    """Whether the release's default share reads the chunked-prefill and CUDA-graph sizes (only
    the v0.5.3 formula does)."""
    return version >= v("0.5.3")


def reserved_mib_v053(
    gpu_mem_mib: int,
    tp: int,
    pp: int,
    chunked: int,
    cuda_graph_bs: int,
    prefill_graph_mib: float = 0,
) -> float:
    """Memory v0.5.3-v0.5.18 keep out of the static share, in MiB (section 7.4): 512 + 1.5 x the
    chunked prefill + 2 x the CUDA-graph batch + tp x pp / 8 GiB (+ the prefill CUDA graph from
    v0.5.10, added before the floor), at least 10 GiB above 60 GiB."""
    reserved = (
        512 + max(chunked, 2048) * 1.5 + cuda_graph_bs * 2 + tp * pp / 8 * 1024 + prefill_graph_mib
    )
    return max(reserved, 10 * 1024) if gpu_mem_mib > 60 * 1024 else reserved


@dataclass(frozen=True)
class PrefillGraphInputs:
    """What the prefill CUDA-graph reservation of v0.5.10+ reads besides the release: server
    arguments and two facts about the model."""

    chunked_prefill_size: int
    pp: int
    mla: bool
    """SGLang's ``use_mla_backend()``: an MLA model on the default backends."""
    llama2: bool
    """``"llama-2" in model_path.lower()``, which caps the captured tokens at 4096."""
    max_total_tokens: int | None = None
    context_length: int | None = None
    """``--context-length`` as given (None: the model's own, which does not cap the graph)."""
    dsv4: bool = False
    """A DeepSeek-V4 model, for which 0.5.15+ turn the prefill graph off."""
    multimodal: bool = False
    """SGLang's ``is_multimodal``, which turns the graph off from 0.5.10 ..."""
    multimodal_allowlisted: bool = False
    """... except for the allowlisted architectures (Qwen3.5 / Qwen3.6, 0.5.16+)."""
    qwen3_next: bool = False
    """Qwen3-Next, on the piecewise graph's model blacklist (0.5.10-0.5.14)."""
    dsa: bool = False
    """DeepSeek-V3.2's sparse attention, on that blacklist in 0.5.10-0.5.12."""


def prefill_graph_enabled(version: SGLangVersion, graph: PrefillGraphInputs) -> bool:
    """Whether the default prefill CUDA graph survives the release's compatibility rules, for
    the set-ups modelled here (CUDA, no speculation, DP attention, LoRA or VLM).

    v0.5.10-v0.5.14 default to the torch.compile piecewise graph, which ``pp_size > 1`` turns
    off (``server_args.py`` ``_handle_piecewise_cuda_graph``, from v0.5.14
    ``_disable_tc_piecewise_cudagraph_if_incompatible``). v0.5.15 makes the breakable graph
    the CUDA default (``cuda_graph_config.py`` ``default_prefill_backend``), which pipeline
    parallelism keeps but MLA turns off in v0.5.15-v0.5.17
    (``_disable_breakable_cudagraph_if_incompatible``: "MLA attention", then "MLA attention
    (non-DSA)"); v0.5.18 drops that rule."""
    if version < v("0.5.10"):
        return False
    if graph.multimodal and not multimodal_prefill_graph(
        version.key[:3], graph.multimodal_allowlisted
    ):
        return False
    if version < v("0.5.15") and (graph.qwen3_next or (graph.dsa and version < v("0.5.13"))):
        # piecewise_cuda_graph_disabled_model_archs ("model-arch blacklist"), which the
        # breakable graph of 0.5.15+ does not read.
        return False
    if version < v("0.5.15") or version >= v("0.5.19"):
        # 0.5.19+ (arg_groups/cuda_graph_hook.py apply_cuda_graph_compatibility): "Disabling
        # breakable prefill CUDA graph by default for pipeline parallelism".
        if graph.pp > 1:
            return False
        if version < v("0.5.15"):
            return True
    if graph.dsv4:
        # _disable_breakable_cudagraph_if_incompatible: "DeepSeek-V4 (heavy capture-pool
        # memory pressure)" (0.5.15 on).
        return False
    return not (graph.mla and version < v("0.5.18"))


def prefill_graph_max_tokens(version: SGLangVersion, graph: PrefillGraphInputs) -> int:
    """``piecewise_cuda_graph_max_tokens`` (v0.5.14+: ``cuda_graph_config.prefill.max_bs``) in
    ``_handle_gpu_memory_settings``: the chunked prefill (2048 for MLA), capped by
    ``--max-total-tokens``, at 4096 for Llama-2, and by an explicit ``--context-length`` in
    v0.5.13-v0.5.16 (added for #21112, gone from v0.5.17)."""
    tokens = 2048 if graph.mla else graph.chunked_prefill_size
    if graph.max_total_tokens is not None:
        tokens = min(tokens, graph.max_total_tokens)
    if graph.llama2:
        tokens = min(tokens, 4096)
    if graph.context_length is not None and v("0.5.13") <= version < v("0.5.17"):
        tokens = min(tokens, graph.context_length)
    return tokens


def prefill_graph_capture_sizes(max_tokens: int) -> list[int]:
    """The token counts captured: ``_generate_piecewise_cuda_graph_tokens`` (v0.5.10-v0.5.13),
    ``_generate_prefill_cuda_graph_batch_sizes`` (v0.5.14-v0.5.18), the same list."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1024 + 1, 64),
        *range(1280, 4096 + 1, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return [s for s in sizes if s <= max_tokens]


def prefill_graph_reserved_mib(version: SGLangVersion, graph: PrefillGraphInputs) -> float:
    """The prefill CUDA graph's share of the reservation, in MiB: 8 per captured size, or a flat
    1.5 GiB for MLA (``_handle_gpu_memory_settings``, from v0.5.16 ``reserve_for_graph_mb``:
    "For MLA backend the memory overhead is much higher than expected with fa3")."""
    if not prefill_graph_enabled(version, graph):
        return 0
    if graph.mla:
        return 1.5 * 1024
    return len(prefill_graph_capture_sizes(prefill_graph_max_tokens(version, graph))) * 8


def reserved_mib_v047(gpu_mem_mib: int, tp: int, pp: int) -> float:
    """Memory v0.4.7.post1-v0.5.2 keep out of the static share, in MiB (section 7.3 table)."""
    p = tp * pp
    if gpu_mem_mib < 35 * 1024:
        return (2.8 + p / 10) * 1024
    if gpu_mem_mib < 90 * 1024:
        return (9.5 + p / 2) * 1024
    if gpu_mem_mib < 160 * 1024:
        return (12 + p / 2) * 1024
    return 32 * 1024


def share_v046(version: SGLangVersion, gpu_mem_mib: int, tp: int, pp: int) -> Fraction:
    """v0.4.6-v0.4.7 (section 7.2): the TP table up to 80 GiB; above, (gpu - 13 GiB) / gpu in
    v0.4.6 and .post1, else 0.88 raised for > 96 GiB GPUs and capped at gpu - 18 GiB, and 0.79
    above 180,000 MiB in v0.4.7."""
    post1 = version <= v("0.4.6.post1")
    if gpu_mem_mib <= 81920:
        return tp_table_fraction(tp if post1 else tp * pp)
    if post1:
        return Fraction(gpu_mem_mib - 13 * 1024, gpu_mem_mib)
    if version >= v("0.4.7") and gpu_mem_mib > 180000:
        return Fraction("0.79")
    share = Fraction("0.88")
    if gpu_mem_mib > 96 * 1024:
        share = min(
            share + Fraction(48 * 1024) * (1 - share) / gpu_mem_mib,
            Fraction(gpu_mem_mib - 18 * 1024, gpu_mem_mib),
        )
    return share


def default_mem_fraction_static(
    version: SGLangVersion,
    gpu_mem_mib: int,
    tp: int,
    pp: int,
    chunked: int,
    cuda_graph_bs: int,
    prefill_graph_mib: float = 0,
    dp_attention: int = 1,
) -> Fraction:
    """SGLang's default ``mem_fraction_static`` for this release (section 7): e.g. 0.835 for one
    H100 (81,559 MiB) and 0.907 for one H200 (143,771 MiB) from v0.5.3; ``prefill_graph_mib``
    is :func:`prefill_graph_reserved_mib` (0 before v0.5.10), ``dp_attention`` the
    ``--dp-size`` of DP attention (1: off)."""
    if version < v("0.4.6"):
        return tp_table_fraction(tp)
    if version < v("0.4.7.post1"):
        return share_v046(version, gpu_mem_mib, tp, pp)
    dp = dp_reserved_mib(version, cuda_graph_bs, dp_attention)
    if version < v("0.5.3"):
        return rounded_share(gpu_mem_mib, reserved_mib_v047(gpu_mem_mib, tp, pp) + dp)
    return rounded_share(
        gpu_mem_mib,
        reserved_mib_v053(gpu_mem_mib, tp, pp, chunked, cuda_graph_bs, prefill_graph_mib + dp),
    )


# --------------------------------------------------------------------------------------------
# Step 2: free memory before and after the weights load (reference sections 1 and 8)

#: CUDA context and allocator state before the weights: an H100 reports 79.18 GiB to torch and
#: SGLang's 2026 builds log ``Load weight begin. avail mem=78.43 GB`` at TP 1 (section 8).
CUDA_CONTEXT_BYTES = int(Fraction("0.75") * GiB)
#: NCCL and custom all-reduce buffers of a multi-GPU group: ``Init torch distributed ends. mem
#: usage`` is about 2.0 GB on H200 TP8 (section 8; PCIe groups log as little as 0.13 GB).
DISTRIBUTED_BUFFERS_BYTES = 2 * GiB


def estimated_free_before_load(memory_bytes: int, world_size: int) -> int:
    """``PRE``: the GPU's CUDA total (torch ``mem_get_info``) less the CUDA context and, with
    more than one rank, the communication buffers (an estimate: logs vary by a few hundred MiB
    between builds)."""
    buffers = DISTRIBUTED_BUFFERS_BYTES if world_size > 1 else 0
    return memory_bytes - CUDA_CONTEXT_BYTES - buffers


# --------------------------------------------------------------------------------------------
# Step 3: what one token and one request cost on one rank (reference sections 2 and 4)

#: ``--kv-cache-dtype`` values SGLang stores (section 2.5): ``auto`` is the model dtype,
#: fp8_e4m3 / fp8_e5m2 are one byte (uint8 storage), and fp4_e2m1 is nvfp4 (section 2.3: half
#: a byte per value plus one byte of scale per 16 values, the nvfp4 format's own bytes).
SGLANG_KV_DTYPES = ("fp32", "bf16", "fp16", "fp8", "nvfp4")
#: From this release an fp4 MHA cache also reserves an FP8 dequant workspace (section 2.3).
FP4_WORKSPACE_SINCE = "0.5.18"
#: ``--mamba-ssm-dtype`` default float32: the temporal state is 4 bytes per value (section 4).
MAMBA_SSM_DTYPE = dtype("fp32")
#: ``--mamba-ssm-dtype`` choices (float32, bfloat16, float16), in kvcalc's spelling.
MAMBA_SSM_DTYPES = ("fp32", "bf16", "fp16")
#: ``--mamba-full-memory-ratio`` default (the mamba pool gets r / (1 + r) of the budget) and
#: ``--swa-full-tokens-ratio`` default (section 5): the same in every release.
DEFAULT_SWA_FULL_TOKENS_RATIO = SWA_FULL_TOKENS_RATIO


def sglang_kv_dtype(kv: KVFormat) -> KVFormat:
    if kv.name not in SGLANG_KV_DTYPES:
        raise SGLangConfigError.at(
            "kv_dtype",
            f"SGLang has no {kv.name} KV cache; use fp32, bf16, fp16, fp8 "
            "(fp8_e4m3 / fp8_e5m2, one byte) or nvfp4 (fp4_e2m1)",
        )
    return kv


def check_fp4_workspace(dep: Deployment, version: SGLangVersion) -> None:
    """Refuse an fp4 cache of a model with per-head attention where SGLang adds a dequant
    workspace to it (0.5.18+), which is not modelled."""
    if dep.cache.kv.name != "nvfp4" or version < v(FP4_WORKSPACE_SINCE):
        return
    if any(m.has_kv_heads for m in dep.model.mixer_pattern):
        raise SGLangConfigError.at(
            "sglang_version",
            f"SGLang {version} adds an FP8 dequant workspace to an fp4 MHA "
            "cache, which is not modelled; use 0.5.17 or an MLA model",
        )


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """``ModelConfig.get_num_kv_heads``: ``max(1, kv_heads // tp)``, a head replicated on each
    rank beyond kv_heads ranks (section 2.1). The same as the engine's split for every tp a
    :class:`Deployment` accepts, which is why the per-rank mixers below are the engine's own."""
    return max(1, kv_heads // tp)


def rank_mixer(mixer: Mixer, tp: int) -> Mixer:
    """One rank's share of a layer, refusing the kinds SGLang has no pool for. MLA stays whole:
    ``MLATokenToKVPool`` keeps the latent on every rank (section 2.2)."""
    if mixer.kind == "lightning":
        raise SGLangConfigError(
            "lightning attention (MiniMax) has no SGLang token or mamba pool kvcalc knows of; "
            "use {engine} vllm or {engine} simple",
            "engine",
        )
    return mixer.per_rank(tp)


def state_bytes_per_request(mixer: Mixer, conv: DType, ssm: DType | None = None) -> int:
    """``mamba_cache_per_req`` for one layer: conv state at the model dtype plus the temporal
    (SSM) state at float32 (section 4, ``MambaPool``), or at the dtype the config states
    (``mamba_ssm_dtype``, which overrides the default in 0.5.23). The conv/temporal split is
    the one vLLM's shape calculator uses, which matches SGLang's Mamba2StateShape for these
    kinds."""
    return layer_state_bytes(mixer, CacheFormat(plain(conv), conv, ssm or MAMBA_SSM_DTYPE))


@dataclass(frozen=True)
class RankCells:
    """What one rank of the widest pipeline stage stores (the stage with the largest cell: it
    runs out first, and SGLang all-reduces the MIN token count over PP ranks)."""

    full_bytes_per_token: int
    """Full-attention and MLA layers (and sliding layers when they share the full pool)."""
    swa_bytes_per_token: int
    """Sliding-window layers in their own pool (hybrid SWA memory on), else 0."""
    full_layers: int
    swa_layers: int
    state_bytes_per_request: int
    """The mamba / linear-attention state of one request over the stage's layers."""
    draft_layers: int = 0
    """Speculative draft layers priced into ``full_bytes_per_token`` (0: none)."""

    @property
    def cell_size(self) -> int:
        """``cell_size``: every layer priced as a full layer (``profile_max_num_token``)."""
        return self.full_bytes_per_token + self.swa_bytes_per_token


def stage_cells(
    model: ModelSpec, layers: range, tp: int, cache: CacheFormat, split_swa: bool
) -> RankCells:
    full = swa = n_full = n_swa = state = 0
    for mixer, count in mixer_counts(model, layers):
        # SGLang gives a KV-shared layer a pool row like its source's, unused but allocated.
        mine = rank_mixer(mixer.pooled_as(), tp)
        if not mine.holds_tokens:
            state += state_bytes_per_request(mine, cache.state, cache.ssm_state) * count
        elif split_swa and window_of(mine):
            swa += layer_bytes_per_token(mine, cache) * count
            n_swa += count
        else:
            full += layer_bytes_per_token(mine, cache) * count
            n_full += count
    return RankCells(full, swa, n_full, n_swa, state)


def is_hybrid_swa(model: ModelSpec) -> bool:
    kinds = {m.kind for m in model.mixer_pattern}
    return "sliding" in kinds and bool(kinds & {"full", "mla"})


# --------------------------------------------------------------------------------------------
# Steps 3-5: the pool


@dataclass(frozen=True)
class SGLangOptions:
    """SGLang's server arguments that size the pool, named as SGLang names them (None: the
    release's default). The two free-memory figures are the ``avail mem`` of ``Load weight
    begin`` and ``Load weight end`` in SGLang's log; None estimates them."""

    version: SGLangVersion = DEFAULT_VERSION
    mem_fraction_static: Fraction | None = None
    page_size: int | None = None
    """None: the model's default page (256 for DeepSeek-V4, else 1)."""
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    max_total_tokens: int | None = None
    free_before_load_bytes: int | None = None
    free_after_load_bytes: int | None = None
    swa_full_tokens_ratio: Fraction | None = None
    """None: sliding layers share the full pool (SGLang turns hybrid SWA memory off for Gemma,
    Olmo and, before 0.5.8, gpt-oss); a ratio pools them apart (section 5). DeepSeek-V4 always
    pools its window apart, at 0.1 unless given."""
    max_running_requests: int | None = None
    """``--max-running-requests`` (None: the request-pool estimate; 256 for DeepSeek-V4)."""
    mamba_full_memory_ratio: Fraction | None = None
    """``--mamba-full-memory-ratio`` (None: 0.9)."""
    max_mamba_cache_size: int | None = None
    """``--max-mamba-cache-size``: the state slots as given (None: from the ratio; 0.5.10+)."""
    mamba_ssm_dtype: str | None = None
    """``--mamba-ssm-dtype`` fp32 / bf16 / fp16 (None: the config's, else float32)."""
    speculative_algorithm: str | None = None
    """``--speculative-algorithm`` EAGLE or NEXTN with the model's own MTP layers as the draft
    (None: no speculative decoding)."""
    enable_dp_attention: bool = False
    """``--enable-dp-attention``: attention data-parallel over ``dp_size`` ranks of the TP
    group, each with its own pool for its own requests (reference section 2)."""
    dp_size: int | None = None
    ep_size: int | None = None
    """``--ep-size``: the routed experts whole over this many ranks of the TP group
    (:func:`expert_parallel_deployment`; None or 1: split by rows)."""

    @property
    def attn_dp(self) -> int:
        """Data-parallel attention ranks (1 without ``--enable-dp-attention``)."""
        return (self.dp_size or 1) if self.enable_dp_attention else 1

    def __post_init__(self) -> None:
        check_options(self)


def check_options(opts: SGLangOptions) -> None:
    """Every rule the options must satisfy; one :class:`SGLangConfigError` naming the flag."""
    mfs = opts.mem_fraction_static
    if mfs is not None and not 0 < mfs < 1:
        raise SGLangConfigError.at(
            "mem_fraction_static", f"{float(mfs):g} is not a fraction in (0, 1), e.g. 0.85"
        )
    for name in ("page_size", "context_length", "chunked_prefill_size", "cuda_graph_max_bs",
                 "max_total_tokens", "max_running_requests", "dp_size", "ep_size"):
        value = getattr(opts, name)
        if value is not None and value < 1:
            raise SGLangConfigError.at(name, f"must be at least 1, not {value}")
    before, after = opts.free_before_load_bytes, opts.free_after_load_bytes
    if before is not None and after is not None and after > before:
        raise SGLangConfigError(
            f"{{free_after_load}}: {after / GiB:.2f} GiB is more than {{free_before_load}} "
            f"{before / GiB:.2f} GiB; loading the weights only takes memory (swap them?)",
            "free_after_load",
            "free_before_load",
        )
    check_dp_attention(opts)
    check_speculative(opts)
    mamba_ratio = opts.mamba_full_memory_ratio
    if mamba_ratio is not None and mamba_ratio <= 0:
        raise SGLangConfigError.at(
            "mamba_full_memory_ratio", f"{float(mamba_ratio):g} is not above 0, e.g. 0.9"
        )
    if opts.mamba_ssm_dtype is not None and opts.mamba_ssm_dtype not in MAMBA_SSM_DTYPES:
        raise SGLangConfigError.at(
            "mamba_ssm_dtype", f"{opts.mamba_ssm_dtype} is not one of fp32, bf16, fp16"
        )
    if opts.max_mamba_cache_size is not None and opts.max_mamba_cache_size < 1:
        raise SGLangConfigError.at("max_mamba_cache_size", "must be at least 1")
    if opts.max_mamba_cache_size is not None and opts.version < v("0.5.10"):
        raise SGLangConfigError.at(
            "max_mamba_cache_size", f"is modelled from SGLang 0.5.10, not {opts.version}"
        )
    ratio = opts.swa_full_tokens_ratio
    if ratio is not None and not 0 < ratio <= 1:
        raise SGLangConfigError.at(
            "swa_full_tokens_ratio", f"{float(ratio):g} is not a fraction in (0, 1], e.g. 0.8"
        )


def check_dp_attention(opts: SGLangOptions) -> None:
    """``--dp-size`` is DP attention's here: without ``--enable-dp-attention`` SGLang's dp ranks
    are whole replicas, which kvcalc counts from the GPUs."""
    if opts.enable_dp_attention and (opts.dp_size or 1) < 2:
        raise SGLangConfigError.at(
            "dp_size", "DP attention needs 2 or more ranks, e.g. --dp-size 8 with --tp 8"
        )
    if opts.enable_dp_attention and opts.version < v("0.4.7.post1"):
        raise SGLangConfigError.at(
            "dp_size",
            f"DP attention's memory share is modelled from SGLang 0.4.7.post1, not "
            f"{opts.version}",
        )


#: ``--speculative-algorithm`` values modelled: the EAGLE worker with the target's own MTP
#: (NEXTN) layers as the draft (SGLang resolves NEXTN to EAGLE).
SPECULATIVE_ALGORITHMS = ("EAGLE", "NEXTN")
#: Releases that price the draft's KV into the target's cell (``DefaultPoolConfigurator``:
#: ``cell_size x (1 + draft_layers / num_layers)``; read in 0.5.14-0.5.23), before which the
#: draft pool was sized apart (reference section 9).
SPECULATIVE_SINCE = "0.5.14"
#: ``_handle_eagle_family``: ``max_running_requests`` unless given.
SPECULATIVE_MAX_RUNNING_REQUESTS = 48


def check_speculative(opts: SGLangOptions) -> None:
    algorithm = opts.speculative_algorithm
    if algorithm is None:
        return
    if algorithm not in SPECULATIVE_ALGORITHMS:
        raise SGLangConfigError.at(
            "speculative_algorithm",
            f"{algorithm} is not modelled; kvcalc models EAGLE / NEXTN drafts made of the "
            "model's own MTP layers",
        )
    if opts.version < v(SPECULATIVE_SINCE):
        raise SGLangConfigError.at(
            "speculative_algorithm",
            f"SGLang {opts.version} sizes the draft pool apart from the target's, which is not "
            f"modelled; use {SPECULATIVE_SINCE} or later",
        )


def draft_layers(dep: Deployment, opts: SGLangOptions) -> int:
    """The draft's layers: the model's MTP layers (``num_nextn_predict_layers``), 0 without
    speculative decoding."""
    if opts.speculative_algorithm is None:
        return 0
    if not dep.model.mtp_layers:
        raise SGLangConfigError.at(
            "speculative_algorithm",
            f"{dep.model.id} has no MTP layers to draft with; kvcalc models no separate "
            "draft model",
        )
    return dep.model.mtp_layers


def dp_reserved_mib(version: SGLangVersion, cuda_graph_bs: int, dp: int) -> float:
    """What ``--enable-dp-attention`` adds to the reserved memory (section 7.3 / 7.4): 4 GiB in
    0.4.7.post1-0.5.2, then ``cuda_graph_max_bs x dp x 3`` MiB, half as much again above a
    graph batch of 300 (0.5.14+ ``reserve_for_graph_mb``)."""
    if dp < 2:
        return 0
    if version < v("0.5.3"):
        return 4096
    extra: float = cuda_graph_bs * dp * 3
    if cuda_graph_bs > 300:
        extra += cuda_graph_bs * dp * 1.5
    return extra


@dataclass(frozen=True)
class SGLangMemory:
    """The inputs of ``profile_max_num_token`` on the tightest rank."""

    gpu_memory_mib: int
    """nvidia-smi's total, from which the default share is computed."""
    mem_fraction_static: Fraction
    chunked_prefill_size: int | None
    """The release's or the user's value where the default share reads it, else None."""
    cuda_graph_max_bs: int | None
    free_before_load_bytes: int
    free_after_load_bytes: int
    estimated: tuple[str, ...]
    """Which inputs were estimated rather than given or read from the registry."""
    prefill_graph_mib: float | None = None
    """The prefill CUDA graph's reservation in the default share (v0.5.10+), else None."""
    share_given: bool = False
    """``--mem-fraction-static`` was given (not the release's default)."""
    multimodal_reserved_bytes: int = 0
    """The multimodal cache 0.5.18+ keep out of the KV budget (``mm_runtime_reservation_gb``)."""
    vlm_factor: float | None = None
    """``adjust_mem_fraction_for_vlm``'s factor on the default share (a vision tower), else None."""

    @property
    def rest_bytes(self) -> Fraction:
        """``rest_memory = AFTER - PRE x (1 - mem_fraction_static)`` (``profile_max_num_token``)."""
        return (
            self.free_after_load_bytes
            - self.free_before_load_bytes * (1 - self.mem_fraction_static)
            - self.multimodal_reserved_bytes
        )


@dataclass(frozen=True)
class SGLangPool:
    """What SGLang logs at start-up for this set-up."""

    version: SGLangVersion
    memory: SGLangMemory
    cells: RankCells
    page_size: int
    context_length: int
    mamba_cache_size: int | None
    """``max_mamba_cache_size`` of a mamba / linear-attention hybrid, else None."""
    max_total_num_tokens: int
    """The full-attention pool (``max_total_num_tokens=`` / ``#tokens:``)."""
    swa_tokens: int | None
    """The sliding-window pool of a hybrid SWA model, else None."""
    req_pool_size: int
    max_running_requests: int
    dsv4: DSV4Sizes | None = None
    """DeepSeek-V4's pools (full, SWA, C4, C128, states), else None."""
    dp_size: int = 1
    """DP-attention ranks of the replica, each with these pools (1: DP attention off)."""
    mamba_slots_per_request: int | None = None
    """State slots one running request holds (``_calculate_mamba_ratio``), else None."""
    swa_ratio: Fraction | None = None
    """``--swa-full-tokens-ratio`` the pools were split at (None: one pool)."""

    @property
    def cell_size(self) -> int:
        return self.cells.cell_size

    @property
    def kv_pool_bytes(self) -> int:
        """Bytes of the token pools on one rank (the padding slot aside); DeepSeek-V4's as its
        sizing charges them."""
        if self.dsv4 is not None:
            return self.dsv4.charged_bytes
        return (
            self.max_total_num_tokens * self.cells.full_bytes_per_token
            + (self.swa_tokens or 0) * self.cells.swa_bytes_per_token
        )

    @property
    def max_req_len(self) -> int:
        """SGLang's ``max_req_len``: ``min(context_len - 1, max_total - 1)`` (``TpModelWorker``)."""
        return min(self.context_length - 1, self.max_total_num_tokens - 1)

    @property
    def max_request_tokens(self) -> int:
        """The longest request, prompt and output together, the scheduler runs to the end:
        ``max_req_len - 1``, since ``init_req_max_new_tokens`` caps a request's new tokens at
        ``max_req_len - input - 1`` (scheduler.py of 0.4.0 and 0.5.23)."""
        return self.max_req_len - 1

    def pool_fraction(self, requests: int, tokens: int, window: int | None = None) -> float:
        """The share of the token pool(s) ``requests`` requests of ``tokens`` tokens take, in
        whole pages (the fuller pool of a sliding-window hybrid), as :meth:`concurrency`
        counts them; above 1 when they do not fit."""
        pages = math.ceil(tokens / self.page_size) * self.page_size
        full = requests * pages / self.max_total_num_tokens
        window = self.dsv4.window if self.dsv4 is not None else window
        if self.swa_tokens is not None and window:
            return max(full, requests * self.swa_need(tokens, window) / self.swa_tokens)
        return full

    def swa_need(self, tokens: int, window: int) -> int:
        """Sliding-window slots one request holds: its last ``window`` tokens, in whole pages
        for DeepSeek-V4 (its SWA pool is paged like the full one)."""
        need = min(tokens, window)
        if self.dsv4 is not None:
            return math.ceil(need / self.page_size) * self.page_size
        return need

    def concurrency(self, tokens: int, window: int | None = None) -> int:
        """Requests of ``tokens`` tokens that run at once: the pages of the pool(s) they take,
        capped by ``max_running_requests``; 0 when the scheduler refuses such a request."""
        if tokens > self.max_request_tokens:
            return 0
        fits = self.max_total_num_tokens // self.page_size // math.ceil(tokens / self.page_size)
        window = self.dsv4.window if self.dsv4 is not None else window
        if self.swa_tokens is not None and window:
            fits = min(fits, self.swa_tokens // self.swa_need(tokens, window))
        return min(self.max_running_requests, fits)

    def replica_concurrency(self, tokens: int, window: int | None = None) -> int:
        """Requests of ``tokens`` tokens one server runs at once: every DP-attention rank's."""
        return self.concurrency(tokens, window) * self.dp_size

    def refusal(self, tokens: int, window: int | None = None) -> str | None:
        """Why no request of ``tokens`` tokens runs (None when one does): the "does not fit"
        of a context, as the other engines say it of a context their cache cannot hold."""
        if self.concurrency(tokens, window) > 0:
            return None
        what = f"a request of {tokens:,} tokens"
        longest = (
            f"is longer than SGLang runs to the end: max_req_len - 1 = "
            f"{self.max_request_tokens:,}"
        )
        if tokens > self.max_request_tokens and self.context_length <= self.max_total_num_tokens:
            return (
                f"{what} {longest} (context_len {self.context_length:,} - 2); raise "
                "--context-length"
            )
        if tokens > self.max_request_tokens:
            return f"{what} {longest} (the token pool holds {self.max_total_num_tokens:,} tokens)"
        return f"{what} takes more pages than the token pool(s) hold"


@dataclass(frozen=True)
class SGLangPoolTooSmall:
    """SGLang refuses to start: "Not enough memory. Please try to increase
    --mem-fraction-static." """

    version: SGLangVersion
    memory: SGLangMemory
    cells: RankCells
    mamba_cache_size: int | None = field(default=None)
    dp_size: int = 1
    reason: str | None = None
    """Why SGLang stops, when not the budget (the SWA pool's floor)."""

    @property
    def message(self) -> str:
        if self.reason is not None:
            return self.reason
        rest = max(Fraction(0), self.memory.rest_bytes)
        return (
            f"Not enough memory: {float(rest) / GiB:.2f} GiB left for the KV cache holds no "
            f"token of {self.cells.cell_size:,} bytes; raise --mem-fraction-static or use "
            "more GPUs"
        )


def mamba_cache_size(
    rest: Fraction, per_request: int, ratio: Fraction = MAMBA_FULL_MEMORY_RATIO
) -> int:
    """``handle_max_mamba_cache`` (v0.5.6, radix cache on, no speculation): the mamba pool takes
    ``rest x r / (1 + r)`` of the budget, in whole request states."""
    share = rest * ratio / (1 + ratio)
    return max(0, math.floor(share / per_request))


def mamba_requests_divisor(dep: Deployment, version: SGLangVersion) -> int:
    """State slots per request: :func:`mamba_request_divisor` up to 0.5.9, then
    ``_calculate_mamba_ratio`` (3, or 5 with the extra buffer 0.5.14+ choose)."""
    if version < v("0.5.10"):
        return mamba_request_divisor(version)
    kinds = frozenset(m.kind for m in dep.model.mixer_pattern)
    return slots_per_request(version.key[:3], kinds)


def mamba_request_divisor(version: SGLangVersion) -> int:
    """Requests per mamba slot cap: ``max_mamba_cache_size // 3`` with the radix cache (v0.5.6);
    v0.5.9 adds one slot per request without the overlap extra buffer (section 4)."""
    return 4 if version >= v("0.5.9") else 3


def swa_split(tokens: int, cells: RankCells, ratio: Fraction, page: int) -> tuple[int, int]:
    """``set_num_tokens_hybrid_swa``: full and SWA pools for a budget of ``tokens`` cells,
    ``full = tokens x (F + S) / (F + r x S)`` and ``swa = full x r`` (per-layer widths summed;
    the v0.5.6 form ``tokens x L / (r x n_swa + n_full)`` when the layers are equally wide)."""
    f, s = cells.full_bytes_per_token, cells.swa_bytes_per_token
    full = math.floor(Fraction(tokens * (f + s)) / (f + ratio * s))
    swa = math.floor(full * ratio)
    return full // page * page, swa // page * page


def request_pool_size(version: SGLangVersion, max_total: int, context_length: int) -> int:
    """``ReqToTokenPool`` size: ``min(max(int(max_total / context_len x 512), 2048), 4096)``,
    plus one padding request up to v0.4.6 (logs show 2049 / 4097; section 3)."""
    pool = min(max(int(max_total / context_length * 512), 2048), 4096)
    return pool + 1 if version < v("0.4.7") else pool


def resolved_request_pool_size(
    version: SGLangVersion, tokens: int, context_length: int
) -> int:
    """v0.5.10+ ``_resolve_max_num_reqs`` (``model_runner_kv_cache_mixin.py``; v0.5.16+
    ``kv_cache_configurator.py`` ``resolve_max_num_reqs``): the same estimate, but from the
    final capacity (after ``--max-total-tokens`` and the page) and capped at half of it."""
    return min(request_pool_size(version, tokens, context_length), tokens // 2)


def smi_memory_bytes(dep: Deployment) -> int | None:
    """The GPU's total as nvidia-smi reports it (SGLang's ``get_device_memory_capacity``):
    given, else the registry's; None when neither holds it."""
    return dep.gpu_memory_bytes or dep.gpus.accelerator.smi_memory_bytes


def chunked_prefill_size(dep: Deployment, opts: SGLangOptions) -> int:
    """``--chunked-prefill-size`` as given, else the release's default for the GPU's total
    (the registry's memory where nvidia-smi's is not known)."""
    smi = smi_memory_bytes(dep) or dep.gpus.accelerator.memory_bytes
    return opts.chunked_prefill_size or default_chunked_prefill_size(opts.version, smi // MiB)


def resolve_memory(dep: Deployment, opts: SGLangOptions) -> SGLangMemory:
    """The share and the free memory SGLang would measure, given or estimated."""
    estimated: list[str] = []
    smi = smi_memory_bytes(dep)
    if smi is None:
        smi = dep.gpus.accelerator.memory_bytes
        estimated.append("gpu_memory")
    gpu_mem_mib = smi // MiB
    chunked = cuda_graph_bs = None
    prefill_graph: float | None = None
    vlm_factor: float | None = None
    if opts.mem_fraction_static is not None:
        share = opts.mem_fraction_static
    else:
        if mfs_uses_graph_inputs(opts.version):
            chunked = chunked_prefill_size(dep, opts)
            # The graph batch is capped at the --max-running-requests given: DeepSeek-V4's and
            # EAGLE's defaults (256, 48) are declared later (0.5.22 / 0.5.23 arg_groups/
            # pipeline.py runs handle_gpu_memory_settings before handle_model_specific_adjustments
            # and handle_speculative_decoding).
            cuda_graph_bs = opts.cuda_graph_max_bs or default_cuda_graph_max_bs(
                opts.version, gpu_mem_mib, dep.tp, opts.max_running_requests
            )
        if opts.version >= v("0.5.10"):
            prefill_graph = prefill_graph_reserved_mib(
                opts.version, prefill_graph_inputs(dep, opts, chunked or 0)
            )
        share = default_mem_fraction_static(
            opts.version,
            gpu_mem_mib,
            dep.tp,
            dep.pp,
            chunked or 0,
            cuda_graph_bs or 0,
            prefill_graph or 0,
            opts.attn_dp,
        )
        vision = dep.model.vision
        if vision is not None and opts.version.key[:3] >= VLM_SHARE_SINCE:
            # mem_fraction_static x factor, in SGLang's floats (not rounded again).
            vlm_factor = vlm_share_factor(vision.layers, vision.hidden)
            share = Fraction(float(share) * vlm_factor)
    before = opts.free_before_load_bytes
    if before is not None and before > dep.memory_bytes_per_gpu:
        raise SGLangConfigError.at(
            "free_before_load",
            f"{before / GiB:.2f} GiB is more than the "
            f"{dep.memory_bytes_per_gpu / GiB:.2f} GiB of one {dep.gpus.accelerator.name}; "
            "give the avail mem of the log's Load weight begin line",
        )
    if before is None:
        before = estimated_free_before_load(dep.cuda_total_bytes_per_gpu, dep.gpus_per_replica)
        estimated.append("free_before_load")
    after = opts.free_after_load_bytes
    if after is None:
        # AFTER is the MIN over ranks: the rank with the most weights (section 1, step 4).
        after = before - max(dep.weights_per_stage)
        estimated.append("free_after_load")
    return SGLangMemory(gpu_mem_mib, share, chunked, cuda_graph_bs, before, after,
                        tuple(estimated), prefill_graph,
                        share_given=opts.mem_fraction_static is not None,
                        vlm_factor=vlm_factor,
                        multimodal_reserved_bytes=(
                            vlm_reserved_bytes(opts.version.key[:3])
                            if is_multimodal(dep.model) else 0
                        ))


def requests_asked(dep: Deployment, opts: SGLangOptions) -> int | None:
    """``--max-running-requests`` as the scheduler reads it: DeepSeek-V4's hook fills in 256 and
    EAGLE's 48 unless given (after the graph batch is chosen)."""
    if opts.max_running_requests is None and is_dsv4(dep.model):
        return DSV4_MAX_RUNNING_REQUESTS
    if opts.max_running_requests is None and opts.speculative_algorithm is not None:
        return SPECULATIVE_MAX_RUNNING_REQUESTS
    return opts.max_running_requests


def prefill_graph_inputs(dep: Deployment, opts: SGLangOptions, chunked: int) -> PrefillGraphInputs:
    """The prefill-graph inputs of this deployment. SGLang matches "llama-2" in the model path;
    the registry's name (Llama-2-70B) or id stands in for it."""
    model = dep.model
    gdn = any(m.kind == "gated_deltanet" for m in model.mixer_pattern)
    return PrefillGraphInputs(
        chunked_prefill_size=chunked,
        pp=dep.pp,
        mla=any(m.kind == "mla" for m in model.mixer_pattern),
        llama2=any("llama-2" in text.lower() for text in (model.id, model.name)),
        max_total_tokens=opts.max_total_tokens,
        context_length=opts.context_length,
        dsv4=is_dsv4(model),
        multimodal=is_multimodal(model),
        # Qwen3_5(Moe)ForConditionalGeneration: the registry's Gated DeltaNet models with a
        # vision tower (Qwen3.5 / Qwen3.6) stand in for the architecture name.
        multimodal_allowlisted=is_multimodal(model) and gdn,
        # Qwen3NextForCausalLM: the registry's Gated DeltaNet models without a vision tower.
        qwen3_next=gdn and not is_multimodal(model),
        dsa=any(m.kind == "mla_indexed" for m in model.mixer_pattern),
    )


def is_multimodal(model: ModelSpec) -> bool:
    """SGLang's ``model_config.is_multimodal``: a vision tower in the checkpoint."""
    return model.vision is not None


def pools_swa_apart(dep: Deployment, opts: SGLangOptions) -> bool:
    """Whether the sliding-window layers get their own pool: up to 0.5.9 only when
    ``--swa-full-tokens-ratio`` is given (kvcalc's stand-in for the v0.5.6-0.5.9 rules, which
    turn it off for Gemma, Olmo and, before 0.5.8, gpt-oss); from 0.5.10 for every hybrid
    sliding-window model but Gemma 2 / Gemma 3 (:mod:`kvcalc.engine.sglang_hybrid`)."""
    given = opts.swa_full_tokens_ratio is not None
    hybrid = is_hybrid_swa(dep.model)
    if given and not hybrid:
        raise SGLangConfigError.at(
            "swa_full_tokens_ratio",
            f"{dep.model.id} has no sliding-window layers beside full ones to pool apart",
        )
    if opts.version < v("0.5.6"):
        if given:
            raise SGLangConfigError.at(
                "swa_full_tokens_ratio",
                f"the separate sliding-window pool is modelled from SGLang 0.5.6, not "
                f"{opts.version}",
            )
        return False
    if opts.version < v("0.5.10"):
        return given
    if hybrid and keeps_one_pool(dep.model.id, dep.model.name):
        if given:
            raise SGLangConfigError.at(
                "swa_full_tokens_ratio",
                f"SGLang keeps {dep.model.id}'s layers in one pool (it turns hybrid SWA "
                "memory off for Gemma 2 / Gemma 3), so the ratio does nothing; leave it out",
            )
        return False
    return hybrid


def rank_cells(dep: Deployment, opts: SGLangOptions) -> RankCells:
    """The cells of the stage whose rank stores the most per token (section 2.4: ``L`` is the
    PP slice)."""
    sglang_kv_dtype(dep.cache.kv)
    check_fp4_workspace(dep, opts.version)
    split = pools_swa_apart(dep, opts)
    attn_tp = attention_tp(dep, opts)
    cache = dep.cache
    if opts.mamba_ssm_dtype is not None:
        # --mamba-ssm-dtype overrides the config's mamba_ssm_dtype (mamba_utils.py).
        cache = replace(cache, ssm_state=dtype(opts.mamba_ssm_dtype))
    cells = [stage_cells(dep.model, s, attn_tp, cache, split) for s in dep.stages]
    if opts.attn_dp > 1 and any(c.state_bytes_per_request for c in cells):
        raise SGLangConfigError.at(
            "dp_size",
            f"DP attention splits {dep.model.id}'s mamba pool over the dp ranks, which is "
            "not modelled; leave it out",
        )
    if opts.version >= v("0.5.10") and any(m.kind == "mamba" for m in dep.model.mixer_pattern):
        # No srt/models/jamba.py (or other Mamba-1 model) in the 0.5.10-0.5.23 wheels.
        raise SGLangConfigError(
            f"{{sglang_version}}: SGLang {opts.version} has no model with Mamba-1 layers such "
            f"as {dep.model.id}'s (no Jamba); use {{sglang_version}} 0.5.9 or {{engine}} vllm",
            "sglang_version",
            "engine",
        )
    if any(c.state_bytes_per_request for c in cells) and opts.version < v("0.5.6"):
        raise SGLangConfigError.at(
            "sglang_version",
            f"the mamba pool of {dep.model.id} is modelled from SGLang 0.5.6, not "
            f"{opts.version}; use 0.5.6 or later",
        )
    if is_gemma4(dep.model.id, dep.model.name) and opts.version.key[:3] < GEMMA4_SINCE:
        raise SGLangConfigError.at(
            "sglang_version",
            f"SGLang serves {dep.model.id} (Gemma 4) from 0.5.11 on, not {opts.version}; "
            "use 0.5.11 or later",
        )
    if dep.model.ssm_state_dtype and opts.version < v("0.5.9"):
        # 0.5.9 is the first release with srt/models/qwen3_5.py and the first to read a config's
        # mamba_ssm_dtype (configs/mamba_utils.py); earlier ones cannot load such a model.
        raise SGLangConfigError.at(
            "sglang_version",
            f"SGLang serves {dep.model.id} (its config states mamba_ssm_dtype, "
            f"as Qwen3.5 does) from 0.5.9 on, not {opts.version}; use 0.5.9",
        )
    widest = max(cells, key=lambda c: (c.cell_size, c.state_bytes_per_request))
    if opts.version >= v("0.5.10") and len(cells) > 1:
        widest = replace(widest, state_bytes_per_request=charged_state(opts.version, cells))
    return with_draft(widest, draft_layers(dep, opts), dep.model.id)


def charged_state(version: SGLangVersion, cells: list[RankCells]) -> int:
    """The state bytes per request every pipeline rank charges its budget: the whole model's
    ``mamba_cache_per_req`` up to 0.5.16, the largest stage's share from 0.5.17
    (``_handle_max_mamba_cache``'s ``pp_layer_scale``), whatever its own layers hold."""
    states = [c.state_bytes_per_request for c in cells]
    return max(states) if version >= v("0.5.17") else sum(states)


def with_draft(cells: RankCells, draft: int, model_id: str) -> RankCells:
    """EAGLE's draft KV priced into the target's cell, in SGLang's float arithmetic:
    ``int(cell_size x (1 + draft_layers / num_layers))`` (the draft holds as many tokens)."""
    if not draft:
        return cells
    if cells.state_bytes_per_request or cells.swa_bytes_per_token:
        raise SGLangConfigError.at(
            "speculative_algorithm",
            f"the draft pool of {model_id}'s hybrid pools is not modelled; leave it out",
        )
    layers = cells.full_layers
    scaled = int(cells.full_bytes_per_token * (1 + draft / layers))
    return RankCells(scaled, 0, layers, 0, 0, draft)


def attention_tp(dep: Deployment, opts: SGLangOptions) -> int:
    """``attn_tp = tp_size // dp_size`` under DP attention (``dp_size`` must divide it)."""
    dp = opts.attn_dp
    if dep.tp % dp:
        raise SGLangConfigError.at(
            "dp_size", f"{dp} does not divide --tp {dep.tp} (SGLang asserts tp % dp == 0)"
        )
    return dep.tp // dp


def expert_parallel_deployment(dep: Deployment, opts: SGLangOptions) -> Deployment:
    """``dep`` under ``--ep-size``: SGLang's MoE layers split the routed experts over ep of the
    TP ranks and each expert over tp / ep (``moe_tp_size``); kvcalc takes ep = tp, whole
    experts on every rank, as SGLang's launch lines for DeepSeek and MiniMax give it
    (``--tp-size 8 --ep-size 8``). The shared experts stay split over tp (Qwen2MoE's and
    MiniMax's shared_expert is a TP MLP, sglang #10852)."""
    ep = opts.ep_size
    if ep is None or ep == 1:
        return dep
    if dep.model.moe is None:
        raise SGLangConfigError.at("ep_size", f"{dep.model.id} has no routed experts; drop it")
    if ep != dep.tp:
        raise SGLangConfigError(
            f"{{ep_size}} {ep} is not {{tp}} {dep.tp}: kvcalc models expert parallelism over "
            f"the whole TP group; give {{ep_size}} {dep.tp}, or drop it",
            "ep_size", "tp",
        )
    return replace(dep, expert_parallel=True)


def check_loads(dep: Deployment, opts: SGLangOptions) -> None:
    """Refuse a tp at which SGLang cannot build the model from its block-FP8 checkpoint
    (:mod:`kvcalc.engine.fp8_shards`): a layout refusal, so a plan passes over it."""
    from kvcalc.engine.fp8_shards import sglang_rules, sglang_shard_refusal
    from kvcalc.engine.serving.base import named_inputs

    why = sglang_shard_refusal(dep, sglang_rules(str(opts.version), opts.attn_dp))
    if why is not None:
        template = "{tp}: " + why
        raise SGLangConfigError(template, *named_inputs(template))


def sglang_pool(dep: Deployment, opts: SGLangOptions) -> SGLangPool | SGLangPoolTooSmall:
    """SGLang's ``init_memory_pool`` for a deployment (reference section 3, in code order)."""
    if dep.eviction.lossy:
        raise SGLangConfigError(kept_by_engine("SGLang", dep.eviction))
    check_loads(dep, opts)
    if is_dsv4(dep.model):
        return dsv4_pool(dep, opts)
    page = opts.page_size or 1
    cells = rank_cells(dep, opts)
    memory = resolve_memory(dep, opts)
    context_length = pool_context_length(dep, opts)
    rest = memory.rest_bytes
    slots = None
    release = opts.version.key[:3]
    mamba_ratio = opts.mamba_full_memory_ratio or MAMBA_FULL_MEMORY_RATIO
    mamba_given = [n for n in ("max_mamba_cache_size", "mamba_full_memory_ratio",
                               "mamba_ssm_dtype") if getattr(opts, n) is not None]
    if not cells.state_bytes_per_request and mamba_given:
        name = mamba_given[0]
        raise SGLangConfigError.at(name, f"{dep.model.id} has no mamba / linear-attention pool")
    if cells.state_bytes_per_request:
        if opts.version >= v("0.5.10"):
            slots = opts.max_mamba_cache_size or mamba_slots(
                release, rest, cells.state_bytes_per_request, mamba_ratio
            )
            rest -= mamba_pool_bytes(release, slots, cells.state_bytes_per_request)
        else:
            slots = mamba_cache_size(rest, cells.state_bytes_per_request, mamba_ratio)
            rest -= slots * cells.state_bytes_per_request
    if rest <= 0 or cells.cell_size == 0 or slots == 0:
        return SGLangPoolTooSmall(opts.version, memory, cells, slots, opts.attn_dp)
    split = pools_swa_apart(dep, opts)
    ratio = opts.swa_full_tokens_ratio or DEFAULT_SWA_FULL_TOKENS_RATIO
    profiled = math.floor(rest / cells.cell_size)
    tokens = min(profiled, opts.max_total_tokens or profiled)
    tokens = tokens // page * page
    swa = None
    if split and opts.version >= v(".".join(map(str, DIRECT_SWA_CELL_SINCE))):
        # HybridSWAPoolConfigurator: the cell is F + r x S, max_total is the full pool.
        tokens, swa = swa_pools(
            release, rest, cells.full_bytes_per_token, cells.swa_bytes_per_token, ratio, page,
            opts.max_total_tokens,
        )
    elif split and opts.version >= v("0.5.10"):
        # _resolve_hybrid_swa_tokens: the request pool is resolved from the full pool.
        tokens, swa = swa_split(tokens, cells, ratio, page)
    # Per DP-attention worker: --max-running-requests // dp_size (48 with EAGLE unless given).
    asked = requests_asked(dep, opts)
    given = None if asked is None else max(1, asked // opts.attn_dp)
    if opts.version >= v("0.5.10"):
        # resolve_max_num_reqs: the request given replaces the estimate, capped at half the pool.
        requests = (
            min(given, tokens // 2) if given is not None
            else resolved_request_pool_size(opts.version, tokens, context_length)
        )
    else:
        requests = given if given is not None else request_pool_size(
            opts.version, profiled, context_length
        )
    per_request = None if slots is None else mamba_requests_divisor(dep, opts.version)
    if slots is not None and per_request is not None:
        requests = min(requests, slots // per_request)
    if split and opts.version < v("0.5.10"):
        tokens, swa = swa_split(tokens, cells, ratio, page)
    if tokens <= 0 or requests <= 0:
        return SGLangPoolTooSmall(opts.version, memory, cells, slots, opts.attn_dp)
    if swa is not None:
        floor = swa_floor_refusal(release, swa, sliding_window(dep.model), page)
        if floor is not None:
            # SGLang raises at start-up, as for a budget too small: the server does not fit.
            return SGLangPoolTooSmall(opts.version, memory, cells, slots, opts.attn_dp, floor)
    # tp_worker: max_total // 2 unless --max-running-requests is given, then the request pool.
    running = requests if given is not None else min(tokens // 2, requests)
    return SGLangPool(
        version=opts.version,
        memory=memory,
        cells=cells,
        page_size=page,
        context_length=context_length,
        mamba_cache_size=slots,
        max_total_num_tokens=tokens,
        swa_tokens=swa,
        req_pool_size=requests,
        max_running_requests=running,
        dp_size=opts.attn_dp,
        mamba_slots_per_request=per_request,
        swa_ratio=ratio if swa is not None else None,
    )


def pool_context_length(dep: Deployment, opts: SGLangOptions) -> int:
    context_length = opts.context_length or dep.model.max_context
    if context_length is None:
        raise SGLangConfigError.at(
            "context_length", f"{dep.model.id} states no maximum context; give one, e.g. 32k"
        )
    return context_length


def dsv4_pool(dep: Deployment, opts: SGLangOptions) -> SGLangPool | SGLangPoolTooSmall:
    """DeepSeek-V4's pools (:mod:`kvcalc.engine.sglang_dsv4`): the same free-memory budget,
    split by ``DSV4PoolConfigurator``; ``max_running_requests`` is the one asked (256 unless
    given), capped at half the full pool."""
    check_dsv4(dep, opts)
    page = dsv4_page_size(opts)
    memory = resolve_memory(dep, opts)
    context_length = pool_context_length(dep, opts)
    budget = math.floor(memory.rest_bytes)
    geo = stage_layers(dep.model, dep.stages[0])
    cost = bytes_per_full_token(
        geo, dsv4_swa_ratio(opts), opts.speculative_algorithm is not None, dsv4_cost_page(opts)
    )
    cells = RankCells(round(cost), 0, geo.layers, 0, 0)
    sizes = dsv4_stage_sizes(dep, opts, budget) if budget > 0 else None
    if sizes is None:
        return SGLangPoolTooSmall(opts.version, memory, cells, None, opts.attn_dp)
    floor = check_swa_floor(opts.version, sizes, page)
    if floor is not None:
        raise SGLangConfigError.at("swa_full_tokens_ratio", floor)
    requests = min(dsv4_requests(opts, opts.attn_dp), sizes.full_tokens // 2)
    return SGLangPool(
        version=opts.version,
        memory=memory,
        cells=cells,
        page_size=page,
        context_length=context_length,
        mamba_cache_size=None,
        max_total_num_tokens=sizes.full_tokens,
        swa_tokens=sizes.swa_tokens,
        req_pool_size=requests,
        max_running_requests=requests,
        dsv4=sizes,
        dp_size=opts.attn_dp,
    )


def swa_pool_cell(result: SGLangPool) -> Fraction | None:
    """``F + r x S`` of a split pool from 0.5.11 (the ratio the pools were split at), else None."""
    if result.swa_tokens is None or result.version < v("0.5.11") or not result.swa_ratio:
        return None
    return result.cells.full_bytes_per_token + result.swa_ratio * result.cells.swa_bytes_per_token


def window_of(mixer: Mixer) -> int:
    """The sliding window of an attention layer, 0 when it attends to the whole context."""
    layout = mixer.page_layout()
    return layout.window if layout is not None else 0


def sliding_window(model: ModelSpec) -> int | None:
    """The window of the model's sliding layers (for the SWA pool's concurrency), if any."""
    windows = [w for m in model.mixer_pattern if (w := window_of(m))]
    return min(windows) if windows else None

