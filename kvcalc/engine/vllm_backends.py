"""The attention backend vLLM selects by default, and the KV block it forces or prefers, when
``--block-size`` is not given: one rule per era of the releases (the release row's
:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.backend_rule`), by GPU architecture, model kind
and KV dtype.

Read in the wheels (``pip download vllm==X --no-deps``):

* 0.10-0.17, ``CudaPlatform.check_and_update_config`` (vllm/platforms/cuda.py of 0.10.2, 0.13.0,
  0.14.0 and 0.17.0): for an MLA model with no backend chosen, Blackwell gets CUTLASS MLA
  (``is_device_capability(100)``, exactly 10.0, in 0.10.2; the 10.x family from 0.12/0.13)
  whose block is forced to 128; 0.17 gives the 10.x family FlashInfer MLA instead (when
  qk_nope_head_dim is 128, as in every DeepSeek-style model in the registry), a block of 16
  raised to 64 ("not 32 and not a multiple of 64"); Hopper gets FlashMLA, forced to 64
  (``is_flashmla_supported``: capability 9.x); an indexed (sparse, DeepSeek-V3.2) model is
  forced to 64 (FlashMLASparse); every other GPU keeps 16 (Triton MLA).
* 0.18 on, ``Platform.update_block_size_for_backend`` (vllm/platforms/interface.py of 0.18.0,
  0.21.0, 0.25.0, 0.27.0, 0.33.0): the backend is the first valid one of
  ``_get_backend_priorities`` (cuda.py), picked with no block size, and the block is its
  ``get_preferred_block_size(16)``: 16 when its kernel takes 16, else the smallest size it
  declares (``get_supported_kernel_block_sizes``). MLA on Hopper: FLASH_ATTN_MLA
  (``MultipleOf(16)``: 16), which takes no fp8 cache (its ``supported_kv_cache_dtypes`` are
  auto/float16/bfloat16), so an fp8 cache gets FLASHMLA ([64]: 64); on the 10.x family
  FLASHINFER_MLA ([32, 64]: 32); elsewhere (Ampere, Ada, 12.x) TRITON_MLA (16; 0.27 lists
  TRITON_MLA first for 12.x). Sparse MLA: FLASHMLA_SPARSE [64] and the indexer's cache
  (``DeepseekV32IndexerBackend``, [64] on CUDA) take only 64 (0.33 picks the smallest size
  every backend accepts, ``_preferred_block_size_for_backends``: 64). Full and sliding
  attention: FLASH_ATTN (``MultipleOf(16)``) or FLASHINFER ([16, 32, 64]): 16. Hybrids with
  recurrent states keep 16 (0.18-0.32 skip them; their attention block is then raised to hold a
  state, :func:`kvcalc.engine.vllm.hybrid_attention_block_size`).
* A model whose attention layers differ in head size (Gemma 4: 256 and 512) gets one backend
  for all of them (``Gemma4Config``, vllm/model_executor/models/config.py): TRITON_ATTN in
  0.20-0.24 (0.20.0, 0.21.0, 0.22.1: the larger above FlashAttention's 256); from 0.25
  (0.25.0, 0.27.1, 0.28.0, 0.33.0) FlashAttention 4 on capability 9.x-11.x, the priority
  list's backend kept, else TRITON_ATTN (ROCm included, :func:`mixed_head_backend`). Every
  one pages at the default block, but FLASH_ATTN on capability 11.x from 0.29, where FA4's
  head-size-256 kernel prefers 128 (:func:`fa4_hd256`).
* ROCm (vllm/platforms/rocm.py of 0.33.0): AITER is off by default, so MLA is TRITON_MLA and
  attention ROCM_ATTN / TRITON_ATTN: 16. Other platforms (TPU, Gaudi, Apple ...) are not
  modelled: their 16 stands, with no backend named.

DeepSeek-V4's caches are at their backend's own blocks whatever this says
(:func:`kvcalc.engine.vllm.backend_blocks`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import Accelerator
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.vllm_releases import VLLMRelease

#: vLLM's ``CacheConfig.DEFAULT_BLOCK_SIZE`` up to 0.33 (64 from 0.34:
#: :attr:`~kvcalc.engine.vllm_releases.VLLMRelease.default_block`), and ROCM_ATTN's preferred
#: block in every release ("Only 16 (and 32 ...) runs on the native C++ paged-attention
#: kernel", ``RocmAttentionBackend.get_preferred_block_size``, rocm_attn.py of 0.34.0).
DEFAULT_BLOCK = 16


def preferred_block(release: VLLMRelease, sizes: tuple[int, ...] = ()) -> int:
    """``get_preferred_block_size(DEFAULT_BLOCK_SIZE)`` of a backend whose kernel takes the
    block ``sizes`` (empty: any multiple of 16): the release's default when the kernel takes
    it, else the smallest it takes (vllm/v1/attention/backend.py)."""
    default = release.default_block
    return default if not sizes or default in sizes else min(sizes)

ModelKind = Literal["attention", "mla", "sparse_mla", "hybrid"]


@dataclass(frozen=True)
class BackendBlock:
    """The block vLLM pages with when no ``--block-size`` is given, and the backend behind it."""

    backend: str
    block_size: int
    given: int | None = None
    """The ``--block-size`` given, where the release overrode it (0.10-0.17 MLA)."""

    @property
    def note(self) -> str:
        if self.given is not None:
            return f"forced by {self.backend} over --block-size {self.given}"
        return f"backend default, {self.backend}"


def model_kind(model: ModelSpec) -> ModelKind:
    """What the backend choice depends on: MLA (with an indexer: sparse), plain attention or a
    hybrid with recurrent states."""
    mixers = [m for m in model.mixer_pattern if m.owns_cache]
    if any(not m.holds_tokens for m in mixers):
        return "hybrid"
    mla = [m for m in mixers if (layout := m.page_layout()) is not None and layout.kind == "mla"]
    if any(m.side_caches() for m in mla):
        return "sparse_mla"
    return "mla" if mla else "attention"


def head_sizes(model: ModelSpec) -> frozenset[int]:
    """The head sizes of the model's (non-MLA) attention layers: more than one for Gemma 4
    (256 sliding, 512 full), the one architecture of the registry whose layers differ."""
    layouts = (m.page_layout() for m in model.mixer_pattern)
    return frozenset(lay.head_size_k for lay in layouts if lay is not None and lay.kind != "mla")


def mixed_head_backend(
    release: VLLMRelease, capability: tuple[int, int] | None, sizes: frozenset[int]
) -> BackendBlock | None:
    """The one backend vLLM forces on a model whose attention layers differ in head size
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.mixed_head_backend`) on a CUDA device of
    ``capability``, or on ROCm (None); None where the priority list's stands. TRITON_ATTN takes
    any head size, at the default block. ``Gemma4Config`` tests no platform: 0.20-0.24 force
    TRITON_ATTN on ROCm too, and from 0.25 ``is_fa_version_supported(4)`` needs
    vllm_flash_attn's CuTe interface, which only a CUDA build installs (vllm-flash-attn is
    built for VLLM_GPU_LANG CUDA; a ROCm wheel was not read), else False, so ROCm gets
    TRITON_ATTN there as well."""
    rule = release.mixed_head_backend
    if len(sizes) < 2 or rule == "per_layer":
        return None
    if rule == "triton_above_256" and max(sizes) <= 256:
        return None
    if rule == "fa4_or_triton" and capability is not None and capability[0] in (9, 10, 11):
        return None  # FlashAttention 4 for every layer, the backend the list picks
    return BackendBlock("TRITON_ATTN", preferred_block(release))


def mm_prefix_backend(
    release: VLLMRelease, model: ModelSpec, capability: tuple[int, int] | None
) -> str | None:
    """The composite backend vLLM picks first for a model whose image tokens attend both ways
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.mm_prefix_composite`): its attention
    layers' head sizes 256 or 512 (the composites' ``head_sizes``), TRITON_FLASH_ATTN on
    capability 9.x, TRITON_FLASHINFER on 10.x; None elsewhere (ROCm, other GPUs, other
    models)."""
    if not (release.mm_prefix_composite and model.vision and model.vision.prefix_lm):
        return None
    if capability is None or not head_sizes(model) <= {256, 512}:
        return None
    return {9: "TRITON_FLASH_ATTN", 10: "TRITON_FLASHINFER"}.get(capability[0])


#: The one kernel block of TRITON_FLASHINFER (``kernel_block_sizes=(64,)``,
#: vllm/v1/attention/backends/triton_flashinfer.py of 0.30.0 to 0.34.0).
TRITON_FLASHINFER_BLOCK = 64


#: ``FA4_HD256_PAGE_SIZE`` (vllm/v1/attention/backends/fa_utils.py of 0.29.0 to 0.34.0).
FA4_HD256_BLOCK = 128


def fa4_hd256(
    release: VLLMRelease, capability: tuple[int, int], sizes: frozenset[int]
) -> bool:
    """Whether FlashAttention is the backend and prefers FA4's head-size-256 page: a model
    whose layers differ in head size is set to FA4 for every layer (``Gemma4Config``,
    vllm/model_executor/models/config.py, where FA4 is supported), FLASH_ATTN leads the
    priority list off the 10.x family (on it FLASHINFER does, cuda.py), and its preferred
    block is max(default, 128) when the model's head size (``head_dim``, Gemma 4's sliding
    layers' 256; its full layers' 512 is ``global_head_dim``) is 256 on capability 10.x or
    11.x (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.fa4_hd256_block`): so on 11.x
    (Jetson Thor). Not modelled: an fp8 KV cache on Hopper, where Gemma4Config picks
    FA3/FA4 per layer instead."""
    return (
        release.fa4_hd256_block
        and release.mixed_head_backend == "fa4_or_triton"
        and len(sizes) > 1
        and min(sizes) == 256
        and capability[0] == 11
    )


def default_backend_block(
    release: VLLMRelease,
    accelerator: Accelerator,
    kind: ModelKind,
    fp8_cache: bool,
    sizes: frozenset[int] = frozenset(),
    composite: str | None = None,
) -> BackendBlock | None:
    """The default backend and its block for a model of ``kind`` (its attention layers' head
    ``sizes``) on ``accelerator`` under ``release`` (``fp8_cache``: an fp8 KV cache), when
    ``--block-size`` is not given (``composite``: the multimodal prefix LM's,
    :func:`mm_prefix_backend`); None on a platform whose backends are not modelled (neither
    CUDA nor ROCm: 16 stands)."""
    capability = accelerator.compute_capability
    if capability is None and accelerator.vendor != "amd":
        return None
    if kind in ("attention", "hybrid"):
        # Forced before the platform picks (Gemma4Config runs at config time, on any platform).
        if (forced := mixed_head_backend(release, capability, sizes)) is not None:
            return forced
        if capability is None:  # ROCm: ROCM_ATTN first (rocm.py)
            return BackendBlock("ROCM_ATTN", DEFAULT_BLOCK)
        if composite == "TRITON_FLASHINFER":
            return BackendBlock(composite, preferred_block(release, (TRITON_FLASHINFER_BLOCK,)))
        if composite is not None:  # TRITON_FLASH_ATTN: Triton's and FA's multiples of 16
            return BackendBlock(composite, preferred_block(release))
        if fa4_hd256(release, capability, sizes):
            return BackendBlock("FLASH_ATTN", max(preferred_block(release), FA4_HD256_BLOCK))
        # FLASHINFER first on the 10.x family, FLASH_ATTN elsewhere (cuda.py): both take 16
        # and 64 ([16, 32, 64]; a multiple of 16).
        return BackendBlock(
            "FLASHINFER" if capability[0] == 10 else "FLASH_ATTN", preferred_block(release)
        )
    if capability is None:  # ROCm: Triton MLA (AITER off); the sparse kernels take any (1)
        sparse = kind == "sparse_mla"
        return BackendBlock(
            "ROCM_AITER_MLA_SPARSE" if sparse else "TRITON_MLA", preferred_block(release)
        )
    if kind == "sparse_mla":
        return BackendBlock("FLASHMLA_SPARSE", 64)
    major = capability[0]
    if release.backend_rule == "preferred":
        if major == 9:
            if fp8_cache:
                return BackendBlock("FLASHMLA", 64)
            return BackendBlock("FLASH_ATTN_MLA", preferred_block(release))
        if major == 10:
            return BackendBlock("FLASHINFER_MLA", preferred_block(release, (32, 64)))
        return BackendBlock("TRITON_MLA", preferred_block(release))
    blackwell = capability == (10, 0) if release.backend_rule == "cutlass_sm100" else major == 10
    if blackwell:
        if release.backend_rule == "flashinfer_sm10x":
            return BackendBlock("FLASHINFER_MLA", 64)
        return BackendBlock("CUTLASS_MLA", 128)
    if major == 9:
        return BackendBlock("FLASHMLA", 64)
    return BackendBlock("TRITON_MLA", DEFAULT_BLOCK)


#: Full and sliding-window attention pages in multiples of 16 tokens under every CUDA and ROCm
#: backend vLLM picks for it: FlashAttention ("Block size must be a multiple of 16.",
#: v1/attention/backends/flash_attn.py of 0.10.2, 0.14.0, 0.17.0; ``MultipleOf(16)`` in
#: ``get_supported_kernel_block_sizes`` of 0.19.0 and 0.34.0), Triton (``MultipleOf(16)``),
#: FlashInfer ([16, 32, 64], a multiple of which a kernel block divides); from 0.18 no backend
#: is valid for another size ("No common block size", v1/worker/utils.py).
ATTENTION_BLOCK_MULTIPLE = 16


def given_block_refusal(model: ModelSpec, block: int) -> str | None:
    """Why vLLM refuses ``--block-size block`` for ``model`` (None: it takes it): for plain
    attention, a size no backend pages (an MLA backend forces its own block over a given one,
    :func:`forced_over`). ``vllm serve`` up to 0.17 also takes only ``CacheConfig.BlockSize``'s
    values (1, 8, 16, 32, 64, 128, and 256 from 0.12), but that is argparse's choice, which
    ``LLM(block_size=...)`` skips (``SkipValidation``), so it is not refused here."""
    if model_kind(model) == "attention" and block % ATTENTION_BLOCK_MULTIPLE:
        below = max(ATTENTION_BLOCK_MULTIPLE, block - block % ATTENTION_BLOCK_MULTIPLE)
        return (
            f"vLLM's attention backends page in multiples of {ATTENTION_BLOCK_MULTIPLE} tokens "
            f"(FlashAttention: 'Block size must be a multiple of 16.'), not {block}; give e.g. "
            f"{below}"
        )
    return None


def forced_over(release: VLLMRelease, default: BackendBlock, given: int) -> int:
    """The block 0.10-0.17 keep of a given ``--block-size`` under an MLA backend
    (``check_and_update_config`` forces it whether given or not): 0.10.2 replaces any size but
    FlashMLA's 64, CUTLASS MLA's 128, FlashInfer MLA's 32/64 and FlashMLA-sparse's 64; 0.13,
    0.14 and 0.17 keep a multiple of 64 (FlashMLA; FlashInfer MLA also 32) or of 128 (CUTLASS),
    and replace any size but 64 for the sparse backend."""
    if release.backend_rule == "preferred" or default.block_size == DEFAULT_BLOCK:
        return given  # 0.18 on: a given size is kept (the backend is chosen to take it)
    exact = release.backend_rule == "cutlass_sm100" or default.backend == "FLASHMLA_SPARSE"
    if default.backend == "FLASHINFER_MLA" and given == 32:
        return given
    if given == default.block_size or (not exact and given % default.block_size == 0):
        return given
    return default.block_size


def deployment_backend_block(dep: Deployment, release: VLLMRelease) -> BackendBlock | None:
    """The backend block ``dep`` is paged at under ``release``: its default one when no
    ``--block-size`` is given, the one it forces over a given size (0.10-0.17 MLA); None when
    the size given is kept, on a platform not modelled, or when the model is paged at its
    backend's own blocks (DeepSeek-V4)."""
    from kvcalc.engine.vllm import backend_blocks, vllm_kv_dtype

    if backend_blocks(dep.model):
        return None
    fp8 = vllm_kv_dtype(dep.cache.kv).name.startswith("fp8")
    kind = model_kind(dep.model)
    capability = dep.gpus.accelerator.compute_capability
    default = default_backend_block(
        release, dep.gpus.accelerator, kind, fp8, head_sizes(dep.model),
        mm_prefix_backend(release, dep.model, capability),
    )
    if default is None or not dep.block_size_given:
        return default
    kept = forced_over(release, default, dep.block_size)
    return None if kept == dep.block_size else replace(default, given=dep.block_size)


def vllm_block_size(dep: Deployment, release: VLLMRelease) -> int:
    """``cache_config.block_size`` for ``dep`` under ``release``: the one given, else the
    default backend's (:func:`default_backend_block`)."""
    chosen = deployment_backend_block(dep, release)
    return dep.block_size if chosen is None else chosen.block_size
