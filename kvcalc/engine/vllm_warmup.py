"""vLLM 0.34's extensible KV cache: the cache sized from the memory free after warmup and
CUDA-graph capture, not from the profile run's estimate.

Read in the 0.34.0 wheel (``pip download vllm==0.34.0 --no-deps``): the worker reserves the
cache's address range, runs the profile, warmup and graph capture, then
``measure_kv_cache_blocks`` (vllm/v1/worker/extensible_kv_cache.py) empties torch's cache and
commits

    min(requested - used, headroom - margin) - transient

bytes (``measure_kv_cache_bytes``), where

* ``requested`` is ``ceil(total x gpu_memory_utilization)``, the utilization 1.0 unless given
  (``CacheConfig.resolved_gpu_memory_utilization``, vllm/config/cache.py);
* ``used`` is everything resident beside the cache then: the init snapshot's free memory less
  the free memory now (the weights, non-torch memory, the CUDA graphs' pool, the held MoE
  workspaces);
* ``headroom`` is the free memory now: the device less what was in use at the init snapshot
  (the CUDA context, NCCL) and ``used``;
* ``transient`` is the larger of the profile's peak activation (its transient headroom,
  ``reserved_headroom_bytes`` in ``Worker.initialize_from_config``: the CUDA-graph estimate
  that joins it up to 0.33 is 0 here, since ``profile_cudagraph_memory`` makes none under the
  extensible cache, vllm/v1/worker/gpu/model_runner.py) and the warmup steps' own
  transient peaks (:func:`warmup_transient_bytes`), and of torch's reservation growth over
  them (not modelled: fragmentation has no figure in the code). Each is an allocated peak less
  what stays allocated (``transient_peak_headroom``, vllm/utils/mem_utils.py of 0.34.0;
  ``ExtensibleKVCache.record_transient_peak``), so the fused-MoE workspaces the profile sizes
  and keeps are in ``used`` (``held_workspace_bytes``), not in the transient and its margin;
* ``margin`` is ``max(1 GiB, 0.75 x transient)`` on CUDA, a 3 GiB floor on ROCm
  (``KV_CACHE_MARGIN_FLOOR_BYTES``, ``KV_CACHE_MARGIN_FRACTION``).

At the default utilization the cap is the headroom: the cache takes the device's free memory
less the margin and the transient, where up to 0.33 it took ``0.92 x total`` less the profile's
terms. The figures below that vLLM measures and kvcalc estimates carry no 0.34 log yet
(tests/fixtures/vllm_logs/README.md): each is taken from earlier releases' public lines, and
the output says so (:func:`kvcalc.engine.serving.vllm.release_notes`).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from kvcalc.engine.overhead import LOGIT_BYTES, pipeline_buffers
from kvcalc.engine.spec import ModelSpec
from kvcalc.engine.units import GiB, dtype

#: ``KV_CACHE_MARGIN_FLOOR_BYTES`` and ``KV_CACHE_MARGIN_FRACTION`` (extensible_kv_cache.py of
#: 0.34.0): "ROCr also maps kernel scratch outside the allocator [...], so ROCm keeps a larger
#: floor".
MARGIN_FLOOR_BYTES_CUDA = 1 * GiB
MARGIN_FLOOR_BYTES_ROCM = 3 * GiB
MARGIN_FRACTION = Fraction(3, 4)

#: What a worker has in use when vLLM takes its init snapshot (``Worker.init_device``, after
#: NCCL is set up): the device total less the snapshot's free memory, as the accounting line
#: prints them ("Free memory on device (F/T GiB) on startup"). Alone on its GPU: 79.19 - 78.68
#: GiB in the three vLLM 0.19.0 H100 TP 1 logs of tests/fixtures/calibrate/ (Qwen2.5-7B,
#: Qwen3-8B, Gemma-3-27B; the logs that set kvcalc's other profile constants). In a TP or PP
#: group: 79.19 - 77.66 in the 0.19.0 H100 Llama-3.1-8B TP 2 log there (its PP 2 log prints
#: 77.76, the Mixtral TP 2 log 77.18). Other public lines, held back: 0.23 to 0.91 GiB alone
#: (a 16 GB card, the A100, the RTX PRO 6000), 0.60 for the H200 at TP 2 under 0.11.
IN_USE_AT_SNAPSHOT_ALONE_BYTES = int(Fraction("0.51") * GiB)
IN_USE_AT_SNAPSHOT_GROUP_BYTES = int(Fraction("1.53") * GiB)

#: The CUDA graphs' pool as ``capture_model`` returns it ("X GiB for CUDAGraph memory"), per
#: graph and layer, Model Runner V2: 0.23 GiB for 51 + 35 graphs of Llama-3.1-8B's 32 layers
#: on an A100 under vLLM 0.31.0 (tests/fixtures/vllm_logs/v031-a100-llama31-8b.log, which also
#: set V2's estimate, :data:`kvcalc.engine.vllm.CUDAGRAPH_BYTES_PER_GRAPH_LAYER_V2`). The
#: estimate is not the pool: up to 0.33 the budget lost the estimate; from 0.34 the pool is
#: measured as it stands and the estimate only joins the transient reserve.
GRAPH_POOL_BYTES_PER_GRAPH_LAYER = int(Fraction("0.23") * GiB) // (86 * 32)


def samples_with_flashinfer(capability: tuple[int, int] | None) -> bool:
    """Whether 0.34's sampler runs FlashInfer's top-k/top-p kernel on a GPU of compute
    ``capability`` (None: ROCm, or not known): capability 8.0 to 12.1 (the GPUs of more
    than 16 SMs kvcalc knows)."""
    return capability is not None and (8, 0) <= capability <= (12, 1)


def in_use_at_snapshot_bytes(in_group: bool, unified_in_use_bytes: int | None) -> int:
    """What the worker has in use at the init snapshot: on a unified part, what the OS was
    measured to leave unavailable at start-up (``unified_in_use_bytes``: its free memory is
    the OS's MemAvailable); else the context's and NCCL's, alone or in a TP/PP group."""
    if unified_in_use_bytes is not None:
        return unified_in_use_bytes
    return IN_USE_AT_SNAPSHOT_GROUP_BYTES if in_group else IN_USE_AT_SNAPSHOT_ALONE_BYTES


def graph_pool_bytes(graphs: int, layers: int) -> int:
    """The CUDA graphs' captured pool on one worker (0 with no graphs)."""
    return graphs * layers * GRAPH_POOL_BYTES_PER_GRAPH_LAYER


#: The rows of logits the prompt logprobs of a step are computed over at a time
#: (``CHUNK_SIZE``, vllm/v1/worker/gpu/sample/prompt_logprob.py of 0.34.0).
PROMPT_LOGPROB_CHUNK_ROWS = 1024


def warmup_transient_bytes(
    model: ModelSpec,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    pp: int,
    last_stage: bool,
    flashinfer_sampler: bool,
) -> int:
    """The larger transient of the two warmup steps 0.34 measures beyond the profile run's
    forward (vllm/v1/worker/gpu/warmup.py and gpu_worker.py ``_compile_or_warm_up_model`` of
    0.34.0; the peak counter is reset before both, and each is folded in as its allocated peak
    less what stays allocated), on the last pipeline stage (the others compute no logits, and
    their forwards are the profile's), each beside the step's hidden states and the tensors a
    later stage receives:

    * the sizing step (``run_kv_cache_sizing_warmup``): one step of max_num_batched_tokens
      tokens whose prefill asks for ``max_logprobs`` (20) prompt logprobs, which
      ``compute_prompt_logprobs_with_chunking`` computes 1,024 rows at a time: a chunk's
      logits over the whole vocabulary in the model dtype (``LogitsProcessor`` casts
      nothing), about four times the profile's 256 sampled rows on the small tier; the top-k
      and logprob results beside it are a few values per row;
    * the kernel warmup (``warmup_kernels``, run whenever the extensible cache is on):
      min(max_num_seqs, max_num_batched_tokens // 2) requests of two tokens sampled with
      every sampling feature on (``SamplingParams.for_sampler_warmup``, vllm/sampling_params.py):
      their logits in the model dtype and the fp32 copy ``Sampler.apply_sampling_params`` makes
      of them (vllm/v1/worker/gpu/sample/sampler.py), where the profile's greedy dummy batch
      makes none; where FlashInfer samples (``flashinfer_sampler``: CUDA, capability 8.0 to
      12.1, ``flashinfer_sampler_supported`` in vllm/v1/sample/ops/topk_topp_sampler.py and
      ``FlashInferBackend.supports_compute_capability``), ``flashinfer_sample`` hands the fp32
      logits and a per-request top-k tensor to ``top_k_top_p_sampling_from_logits``, which
      then makes two more fp32 tensors as large, the top-k-masked logits and their softmax
      (flashinfer/sampling.py of flashinfer-python 0.7.2.post1 and 0.7.4, alike here; the
      0.34.0 wheel pins 0.7.3, which the package index does not serve: its fast path takes
      an integer top-k or a ``top_k_max`` only). Elsewhere the Triton top-k/top-p kernels'
      own tensors are not counted. The profile's sampler runs the same pass from 0.33
      (:func:`kvcalc.engine.vllm.dense_sampler_copies`) beside more hidden states, so this
      step does not exceed it; the sizing step can.

    The sizing step's forward runs attention, which the profile skipped; its workspaces are
    not modelled. Not modelled either: a first sizing step of max_model_len tokens where that
    is below max_num_batched_tokens (its chunk is then at most max_model_len rows)."""
    if not last_stage:
        return 0
    act = dtype(model.default_dtype)
    hidden, vocab, tokens = model.hidden_size, model.vocab_size, max_num_batched_tokens
    rows = min(PROMPT_LOGPROB_CHUNK_ROWS, tokens)
    sizing = act.bytes_for(tokens * hidden + rows * vocab) + pipeline_buffers(model, pp, tokens)
    requests = min(max_num_seqs, tokens // 2)
    sampler = (
        act.bytes_for(2 * requests * hidden + requests * vocab)
        + (3 if flashinfer_sampler else 1) * requests * vocab * LOGIT_BYTES
        + pipeline_buffers(model, pp, 2 * requests)
    )
    return max(sizing, sampler)


@dataclass(frozen=True)
class AfterWarmup:
    """What 0.34 measures after warmup beside the profile's terms, on one worker."""

    device_total_bytes: int
    """The CUDA total vLLM reads (``mem_get_info``)."""
    in_use_at_snapshot_bytes: int
    graph_pool_bytes: int
    margin_floor_bytes: int = MARGIN_FLOOR_BYTES_CUDA
    held_workspace_bytes: int = 0
    """The fused-MoE workspaces the profile sized and kept: resident beside the weights, not
    part of a transient (:func:`kvcalc.engine.overhead.moe_workspace`)."""
    warmup_transient_bytes: int = 0
    """The warmup steps' transient (:func:`warmup_transient_bytes`)."""

    def transient_bytes(self, profile_transient_bytes: int) -> int:
        """What 0.34 keeps free: the larger of the profile's transient (its peak activation
        and the CUDA-graph estimate) and the warmup steps' (``reserved_headroom_bytes``)."""
        return max(profile_transient_bytes, self.warmup_transient_bytes)

    @property
    def init_free_bytes(self) -> int:
        """The init snapshot's free memory: the device less what was in use then."""
        return self.device_total_bytes - self.in_use_at_snapshot_bytes

    def margin_bytes(self, transient_bytes: int) -> int:
        return max(self.margin_floor_bytes, int(transient_bytes * MARGIN_FRACTION))

    def kv_cache_bytes(self, requested_bytes: int, used_bytes: int, transient_bytes: int) -> int:
        """``measure_kv_cache_bytes``: what the cache may take (negative: no room), given
        ``used_bytes`` resident beside it and the ``transient_bytes`` kept free."""
        headroom = self.init_free_bytes - used_bytes
        cap = min(requested_bytes - used_bytes, headroom - self.margin_bytes(transient_bytes))
        return cap - transient_bytes
