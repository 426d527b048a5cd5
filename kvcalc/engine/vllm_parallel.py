"""vLLM's serving options beyond tp and pp, as vLLM 0.19's code applies them to the KV pool:
decode context parallelism, data parallelism, expert parallelism, multi-token-prediction
(speculative) layers and prefix caching's Mamba cache modes.

Read from the vllm 0.19.0 wheel:

- **DCP** (``--decode-context-parallel-size``, ``parallel.py``/``model.py``): tp % dcp = 0;
  for GQA/MQA tp > total KV heads, dcp <= tp // KV heads and dcp divides the query heads per
  KV head (MLA takes any dcp dividing tp). The ranks of a DCP group hold the same heads and
  split a request's tokens, so a rank's page is its tp page and a request takes
  ``cdiv(cdiv(L, dcp), block)`` pages (``FullAttentionSpec.max_memory_usage_bytes``); up to
  0.20 the block token line is multiplied by dcp ("Multiplying the GPU KV cache size by the
  cp_world_size", ``_report_kv_cache_config``); from 0.21 the line is max_concurrency x L,
  which counts DCP through the pages per request, and that log line is gone
  (``kv_cache_utils.py`` of 0.20.0 and 0.21.0). Sliding-window, chunked, Mamba and
  multi-group (hybrid) caches assert dcp == 1 (``single_type_kv_cache_manager.py``,
  ``kv_cache_coordinator.py``). The option exists from 0.10.2, for MLA caches alone up to 0.11.0
  (:data:`DCP_SINCE`, :data:`DCP_GQA_SINCE`).
- **DP** (``--data-parallel-size``): every replica profiles and sizes its own pool; only the
  MoE layers span the group (``FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp``: experts
  over dp x tp ranks), see :attr:`kvcalc.engine.deployment.Deployment.moe_ranks`.
- **EP** (``--enable-expert-parallel``): those ranks hold whole experts, ceil(E / ep) each
  (:func:`kvcalc.engine.weights.expert_parallel_counts`).
- **MTP** (``--speculative-config '{"method": "mtp", "num_speculative_tokens": k}'``): the
  draft's attention layers register KV specs like the target's and join the same pool
  (``GPUModelRunner.get_kv_cache_spec`` walks every attention layer, the drafter's included);
  k above the checkpoint's n_predict must be a multiple of it (``config/speculative.py``); the
  drafter shares the target's embedding and LM head (``EagleProposer._maybe_share_*``); a
  Mamba-type state gets k more conv rows and k speculative pages per request
  (``mamba_utils.py``, ``MambaSpec.num_speculative_blocks``).
- **Prefix caching** on a Mamba hybrid (off by default in 0.19: ``is_prefix_caching_supported``
  is False for hybrids; on from 0.28 in "align" mode, ../shared/reference/vllm-releases.md
  section 5): "align" mode gives a state 2 pages (+ k) per request and the attention block as
  its block; "all" mode (the Mamba1/2 models that declare ``supports_mamba_prefix_caching``)
  pages states along the whole request at a chunk-aligned block, which is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from kvcalc.engine.hardware import capability_family
from kvcalc.engine.serving.base import EngineRefusal
from kvcalc.engine.vllm_releases import NEWEST_VERSION, parse_version
from kvcalc.engine.vllm_releases import dotted_version as _dotted
from kvcalc.errors import literal

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.spec import Mixer, ModelSpec
    from kvcalc.engine.vllm import VLLMInputs
    from kvcalc.engine.vllm_releases import VLLMRelease

MambaCacheMode = Literal["none", "align", "all"]

#: State mixers whose vLLM model declares ``supports_mamba_prefix_caching`` (Mamba, Mamba2:
#: mamba.py, mamba2.py, jamba.py, nemotron_h.py, granitemoehybrid.py, falcon_h1.py, bamba.py,
#: zamba2.py): with prefix caching vLLM picks "all" mode for them, "align" for the others.
ALL_MODE_KINDS = frozenset({"mamba", "mamba2"})
#: State mixers whose conv state gains a row per speculative token (``mamba2_state_shape``,
#: ``gated_delta_net_state_shape`` take ``num_spec``).
SPECULATIVE_CONV_KINDS = frozenset({"mamba2", "gated_deltanet"})


class VLLMParallelError(EngineRefusal):
    """A set-up vLLM 0.19 refuses (or that is not modelled), naming the input at fault."""


@dataclass(frozen=True)
class VLLMServing:
    """vLLM's own serving options (None: not given, vLLM's default applies)."""

    decode_context_parallel_size: int = 1
    enable_prefix_caching: bool | None = None
    num_speculative_tokens: int = 0
    max_num_seqs: int | None = None
    """The scheduler's cap on running requests; None: vLLM's default for the GPU and release
    (:func:`kvcalc.engine.vllm.max_num_seqs_for`)."""
    data_parallel_size: int | None = None
    enable_expert_parallel: bool = False
    enforce_eager: bool = False
    """``--enforce-eager``: no CUDA graphs captured, so none estimated or measured."""
    enable_extensible_kv_cache: bool | None = None
    """0.34's extensible KV cache, sized after warmup (None: vLLM's default, on from 0.34;
    :func:`kvcalc.engine.vllm.release_as_run`)."""
    vllm_version: str | None = None
    """The release whose rules apply (None: the newest, :mod:`kvcalc.engine.vllm_releases`);
    among them whether a hybrid caches prefixes by default (:func:`mamba_cache_mode`)."""


# ------------------------------------------------------------------ decode context parallelism


#: The first release with ``--decode-context-parallel-size`` (``ParallelConfig`` of 0.10.2;
#: 0.10.1.1's has no such field, and ``vllm serve`` refuses an argument it does not know).
DCP_SINCE = (0, 10, 2)
#: The first release whose GQA backends (FlashAttention, FlashInfer) return the softmax LSE a
#: DCP decode merges (``can_return_lse_for_decode`` in v1/attention/backends of 0.11.1); before,
#: only the MLA backends do, and ``GPUModelRunner.initialize_kv_cache`` asserts it of every
#: attention layer ("DCP requires attention impls to return the softmax lse", 0.10.2, 0.11.0).
DCP_GQA_SINCE = (0, 11, 1)
#: The first release that runs DCP on a hybrid of full attention and recurrent states
#: (``HybridKVCacheCoordinator``: "DCP shards full-attention KV across ranks and replicates
#: Mamba state", kv_cache_coordinator.py of 0.26.0; 0.25.0 asserts "DCP not support hybrid
#: attn now"). Sliding-window and chunked layers still refuse it (0.34.0).
DCP_STATE_HYBRID_SINCE = (0, 26, 0)


def check_dcp(
    model: ModelSpec, tp: int, dcp: int, version: tuple[int, int, int] | None = None
) -> None:
    """Refuse a DCP size vLLM refuses for ``model`` at ``tp`` under the release ``version``
    (None: the newest's rules; the rules in the module doc)."""
    if dcp == 1:
        return
    field = "decode_context_parallel_size"
    if version is not None and version < DCP_SINCE:
        raise VLLMParallelError(
            f"{{{field}}}: vLLM {_dotted(version)} has no such option (decode context "
            f"parallelism came in {_dotted(DCP_SINCE)}); drop it, or give {{vllm_version}} "
            f"{_dotted(DCP_SINCE)} or later",
            field, "vllm_version",
        )
    if tp % dcp:
        raise VLLMParallelError.at(field, f"{dcp} must divide the tensor-parallel size {tp}")
    kinds = {_cache_kind(m) for m in model.mixer_pattern if m.owns_cache}
    release = version or parse_version(NEWEST_VERSION)
    if has_states(model) and release >= DCP_STATE_HYBRID_SINCE:
        # vLLM runs it (the attention sharded, the states replicated); kvcalc has no rule for
        # the hybrid's pages under DCP, and says so rather than size it as if it had.
        raise VLLMParallelError.at(field, (
            f"vLLM {_dotted(release)} shards the attention of a hybrid with recurrent states "
            f"over DCP ranks and replicates the states, and kvcalc does not model that pool "
            f"for {model.id} yet; drop it to size the pool without DCP"
        ))
    if not kinds <= {"full", "mla"} or len(kinds) != 1:
        others = ", ".join(sorted(kinds - {"full", "mla"})) or "mixed attention kinds"
        raise VLLMParallelError.at(
            field,
            f"vLLM {_dotted(release)} splits only full-attention or MLA caches over DCP "
            f"ranks, and {model.id} has {others} layers; drop it",
        )
    if kinds == {"mla"}:
        return
    if version is not None and version < DCP_GQA_SINCE:
        raise VLLMParallelError(
            f"{{{field}}}: vLLM {_dotted(version)} splits only MLA caches over DCP ranks (its "
            f"GQA backends return no softmax LSE for decode before {_dotted(DCP_GQA_SINCE)}), "
            f"and {literal(model.id)} has none; drop it, or give {{vllm_version}} "
            f"{_dotted(DCP_GQA_SINCE)} or later",
            field, "vllm_version",
        )
    heads = min(h for m in model.mixer_pattern if (h := m.kv_head_count()) is not None)
    if tp <= heads or dcp > tp // heads:
        raise VLLMParallelError(
            f"{{{field}}}: vLLM needs tp > the {heads} KV heads of {literal(model.id)} and "
            f"dcp <= tp // KV heads (= {tp // heads}) for GQA; raise {{tp}} or lower "
            f"{{{field}}}",
            field, "tp",
        )
    query = next(q for m in model.mixer_pattern if (q := getattr(m, "q_heads", None)))
    if (query // heads) % dcp:
        raise VLLMParallelError.at(
            field,
            f"{dcp} must divide the {query // heads} query heads per KV head of {model.id}",
        )


def _cache_kind(mixer: Mixer) -> str:
    layout = mixer.page_layout()
    return mixer.kind if layout is None else layout.kind


def dcp_tokens(max_model_len: int, dcp: int) -> int:
    """The tokens of one request a DCP rank stores: ``cdiv(max_model_len, dcp)``."""
    return -(-max_model_len // dcp)


# ------------------------------------------------------------------ prefix caching, Mamba modes


def has_states(model: ModelSpec) -> bool:
    return any(not m.holds_tokens for m in model.mixer_pattern if m.owns_cache)


def mamba_cache_mode(
    model: ModelSpec, enable_prefix_caching: bool | None, *, hybrid_default_on: bool = False
) -> MambaCacheMode:
    """The Mamba cache mode vLLM starts ``model`` with. ``enable_prefix_caching`` None: the
    release's default, off for models with states in 0.19 (``hybrid_default_on`` False) and on
    in "align" mode from 0.28 (True, #50991). Given: in 0.19 "all" for Mamba1/2 models, else
    "align"; from 0.28 "align" for every model (``MambaModelConfig.verify_and_update_config``
    turns the default "none" into "align" when prefix caching is on, and "all" is taken only
    from ``--mamba-cache-mode all``, which kvcalc does not offer: vllm/model_executor/models/
    config.py of 0.28.0; 0.33.0 and 0.34.0 have no "all" mode, ``MambaCacheMode`` in
    vllm/config/cache.py)."""
    if not has_states(model):
        return "none"
    if enable_prefix_caching is None:
        return "align" if hybrid_default_on else "none"
    if not enable_prefix_caching:
        return "none"
    if hybrid_default_on:
        return "align"
    kinds = {m.kind for m in model.mixer_pattern if not m.holds_tokens}
    return "all" if kinds <= ALL_MODE_KINDS else "align"


def check_cache_mode(model: ModelSpec, mode: MambaCacheMode) -> None:
    if mode == "all":
        raise VLLMParallelError.at(
            "enable_prefix_caching",
            f"vLLM caches {model.id}'s Mamba states in 'all' mode, a state per block along "
            "each request, which is not modelled; drop it",
        )


def state_pages(
    mode: MambaCacheMode, num_speculative_tokens: int, checkpoint: bool = False
) -> int:
    """Pages one request's state takes (``MambaSpec.max_memory_usage_bytes``): 1 (+ k) in
    "none" mode, 2 (+ k) in "align" mode, and a prefill-checkpoint page where the layer
    exports one (``checkpoint``: :func:`checkpoint_kinds`)."""
    if mode == "align":
        return 2 + num_speculative_tokens + int(checkpoint)
    return 1 + num_speculative_tokens


#: ``FLASHINFER_GDN_CHECKPOINT_ALIGNMENT`` (vllm/v1/attention/backends/gdn_attn.py of 0.33.0
#: and 0.34.0): in align mode the attention block is a multiple of it where Gated DeltaNet
#: exports prefill checkpoints (``Platform._align_hybrid_block_size`` takes the lcm).
GDN_CHECKPOINT_ALIGNMENT = 64


def checkpoint_kinds(
    release: VLLMRelease, capability: tuple[int, int] | None
) -> frozenset[str]:
    """The state mixers whose align-mode state takes a prefill-checkpoint page under
    ``release`` on a GPU of compute ``capability``: Mamba2 from 0.32
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.mamba2_checkpoint_page`), Gated
    DeltaNet from 0.33 where FlashInfer runs its prefill, Hopper
    (:attr:`~kvcalc.engine.vllm_releases.VLLMRelease.gdn_checkpoint_page`,
    ``_resolve_gdn_prefill_backend``: "Hopper (SM90) - no further constraints")."""
    kinds = set()
    if release.mamba2_checkpoint_page:
        kinds.add("mamba2")
    if release.gdn_checkpoint_page and capability_family(capability, 9):
        kinds.add("gated_deltanet")
    return frozenset(kinds)


# ------------------------------------------------------------------ MTP (speculative) layers


def check_speculative(model: ModelSpec, num_speculative_tokens: int, pp: int) -> None:
    """Refuse speculative tokens vLLM 0.19 would refuse for ``model``'s MTP layers, or a draft
    that is not modelled."""
    if not num_speculative_tokens:
        return
    field = "num_speculative_tokens"
    model_id = literal(model.id)
    n_predict = model.mtp_layers
    if not n_predict:
        raise VLLMParallelError.at(
            field,
            f"{model_id} carries no multi-token-prediction layers; a separate draft model "
            "is not modelled, drop it",
        )
    if num_speculative_tokens > n_predict and num_speculative_tokens % n_predict:
        raise VLLMParallelError.at(
            field,
            f"vLLM needs a multiple of the {n_predict} MTP layers of {model_id} above "
            f"{n_predict}; give {n_predict * (num_speculative_tokens // n_predict)}",
        )
    if pp > 1:
        raise VLLMParallelError.at(field, "the draft layers under pipeline parallelism are not "
                                   "modelled; drop it or use pp 1")
    odd = {m.kind for m in model.mixer_pattern if not m.holds_tokens} - SPECULATIVE_CONV_KINDS
    if odd:
        raise VLLMParallelError.at(
            field,
            f"speculative states of {', '.join(sorted(odd))} layers are not modelled; drop it",
        )


def mtp_mixers(model: ModelSpec) -> tuple[Mixer, ...]:
    """The attention of each MTP layer: a full-attention (or MLA) layer of the model, as
    DeepSeek-V3's and Qwen3.5's MTP modules build one (``deepseek_mtp.py``,
    ``qwen3_5_mtp.py``: full_attention); DeepSeek-V4's is a window-only layer (compress ratio
    1 past num_hidden_layers, arch-2026.md section 7)."""
    from kvcalc.engine.mixers.compressed import CompressedAttention

    for mixer in model.mixer_pattern:
        if isinstance(mixer, CompressedAttention):
            return (replace(mixer, compress_ratio=0),) * model.mtp_layers
    full = next(
        (m for m in model.mixer_pattern if _cache_kind(m) in ("full", "mla") and m.owns_cache),
        None,
    )
    if full is None:
        raise VLLMParallelError.at(
            "num_speculative_tokens", f"{literal(model.id)} has no full-attention layer to "
            "model its MTP layers on; drop it",
        )
    return (full,) * model.mtp_layers


def speculative_state(mixer: Mixer, num_speculative_tokens: int) -> Mixer:
    """A state mixer as vLLM sizes it with k speculative tokens: k more conv rows."""
    if not num_speculative_tokens or mixer.kind not in SPECULATIVE_CONV_KINDS:
        return mixer
    kernel: int = getattr(mixer, "conv_kernel")  # noqa: B009 (both kinds have one)
    return replace(mixer, conv_kernel=kernel + num_speculative_tokens)  # type: ignore[type-var]


def mtp_weight_bytes(
    model: ModelSpec,
    precision: object,
    tp: int,
    moe_ranks: int | None = None,
    expert_parallel: bool = False,
) -> int:
    """Weight bytes one GPU holds for the MTP layers: each a decoder layer (its attention, the
    last layer's feed-forward, two norms) plus the projection of [embedding, hidden] (2 x hidden
    -> hidden) and its two input norms; the embedding and LM head are the target's
    (``EagleProposer._maybe_share_*``), but DeepSeek's MTP layer (an MLA one) keeps its own
    ``shared_head.head`` (``DeepSeekMultiTokenPredictorLayer``), a vocab x hidden head split by
    tp."""
    from kvcalc.engine.spec import MoE
    from kvcalc.engine.tensors import linear, replicated
    from kvcalc.engine.weights import (
        Bits,
        _layer_tensors,
        add_tensor_bits,
        as_precision,
        bytes_of,
        expert_parallel_tensors,
    )

    prec = as_precision(precision)  # type: ignore[arg-type]
    hidden = model.hidden_size
    ffn = model.ffn_at(model.num_layers - 1)
    ranks = tp if moe_ranks is None else moe_ranks
    bits: Bits = {}
    for mixer in mtp_mixers(model):
        for tensor in _layer_tensors(mixer, ffn, hidden):
            if tensor.role != "routed_experts":
                add_tensor_bits(bits, tensor, prec, tp)
            elif not expert_parallel:
                add_tensor_bits(bits, tensor, prec, ranks)
        for tensor in (linear("mixer", hidden, 1, 2 * hidden), replicated("norm", 2 * hidden)):
            add_tensor_bits(bits, tensor, prec, tp)
        if _cache_kind(mixer) == "mla":
            add_tensor_bits(bits, linear("lm_head", model.vocab_size, 1, hidden), prec, tp)
    if expert_parallel and isinstance(ffn, MoE):
        for tensor in expert_parallel_tensors(ffn, hidden, prec.experts, ranks):
            add_tensor_bits(bits, tensor, prec, 1, model.mtp_layers)
    return bytes_of(bits)


# ------------------------------------------------------------------ one deployment


@dataclass(frozen=True)
class ServingSetup:
    """What vLLM's serving options make of one deployment's start-up."""

    budgets: tuple[int, ...]
    """"Available KV cache memory" per stage, the MTP layers' weights taken from the last."""
    dcp: int
    mamba_cache_mode: MambaCacheMode
    num_speculative_tokens: int
    draft_mixers: tuple[Mixer, ...]
    mtp_weight_bytes: int


def serving_setup(
    dep: Deployment, serving: VLLMServing, inputs: VLLMInputs | None = None
) -> ServingSetup:
    """Check vLLM's options against ``dep`` and apply them under the release of ``inputs``
    (None: those of ``serving.vllm_version``, :func:`kvcalc.engine.vllm.vllm_inputs`): the DCP
    size, the Mamba cache mode (the release's default when prefix caching is not given:
    :attr:`~kvcalc.engine.vllm_releases.VLLMRelease.mamba_align`), the MTP layers and their
    weights taken from the release's budget (:func:`kvcalc.engine.vllm.vllm_budget_per_stage`;
    none from a KV budget given directly: vLLM's ``--kv-cache-memory`` is the pool)."""
    from kvcalc.engine.vllm import serving_inputs, vllm_budget_per_stage
    from kvcalc.engine.vllm_backends import given_block_refusal

    inputs = inputs or serving_inputs(dep, serving)
    model = dep.model
    version = parse_version(inputs.version)
    check_dcp(model, dep.tp, serving.decode_context_parallel_size, version)
    if dep.block_size_given:
        why = given_block_refusal(model, dep.block_size)
        if why is not None:
            raise VLLMParallelError.at("block_size", why)
    mode = mamba_cache_mode(
        model, serving.enable_prefix_caching, hybrid_default_on=inputs.release.mamba_align
    )
    check_cache_mode(model, mode)
    spec = serving.num_speculative_tokens
    check_speculative(model, spec, dep.pp)
    drafts = mtp_mixers(model) if spec else ()
    budgets = vllm_budget_per_stage(dep, inputs)
    weights = 0
    if drafts and dep.kv_memory_bytes is None:
        weights = mtp_weight_bytes(
            model, dep.weights, dep.tp, dep.moe_ranks, dep.expert_parallel
        )
        budgets = (*budgets[:-1], budgets[-1] - weights)
    return ServingSetup(
        budgets, serving.decode_context_parallel_size, mode, spec, drafts, weights
    )


def serving_deployment(dep: Deployment, serving: VLLMServing) -> Deployment:
    """``dep`` as vLLM's options lay it out: ``--data-parallel-size`` must be the replicas the
    GPUs hold (each sizes its own pool; their MoE layers share the experts), expert parallelism
    holds whole experts, ``--max-num-seqs`` given sizes the sampler's profile and the CUDA-graph
    capture (not given: the release's default, :func:`kvcalc.engine.vllm.max_num_seqs_for`)."""
    dp = serving.data_parallel_size
    if dp is not None and dp != dep.replicas:
        raise VLLMParallelError(
            f"{{data_parallel_size}} {dp} x tp {dep.tp} x pp {dep.pp} is "
            f"{dp * dep.gpus_per_replica} GPUs, but {{gpus}} gives {dep.gpus.count}; "
            + _dp_fix(dep, dp),
            "data_parallel_size", "gpus", "tp",
        )
    if serving.enable_expert_parallel:
        if dep.model.moe is None:
            raise VLLMParallelError.at(
                "enable_expert_parallel", f"{dep.model.id} has no routed experts; drop it"
            )
        if dep.tp * (dp or 1) == 1:
            raise VLLMParallelError.at(
                "enable_expert_parallel",
                "one rank holds every expert, there is nothing to split (vLLM enables EP "
                "only above one rank); drop it",
            )
    changes: dict[str, object] = {}
    if dp is not None and dp > 1:
        changes["data_parallel"] = True
    if serving.enable_expert_parallel:
        changes["expert_parallel"] = True
    if serving.max_num_seqs is not None:
        changes["max_num_seqs"] = serving.max_num_seqs
    return replace(dep, **changes) if changes else dep  # type: ignore[arg-type]


def _dp_fix(dep: Deployment, dp: int) -> str:
    """Give the tp that makes ``dp`` replicas of the GPUs, else the GPUs ``dp`` replicas need."""
    count = dep.gpus.count
    if count % (dp * dep.pp) == 0:
        return f"give {{tp}} {count // (dp * dep.pp)}"
    return f"give {dp * dep.gpus_per_replica} GPUs in {{gpus}}"
