"""Runtime memory besides weights and KV cache: the activation peak of a forward pass and the
non-torch memory (communication buffers, workspaces), estimated the way vLLM's profiler measures
them (``Worker.determine_available_memory``; constants from the vLLM 0.19 logs summarised in the
reference). Used by the vLLM model's budget estimate and as the default ``--overhead`` of the
simple capacity model, so the two agree.
"""

from __future__ import annotations

import math
from fractions import Fraction

from kvcalc.engine.spec import DenseMLP, ModelSpec, MoE
from kvcalc.engine.units import GiB, dtype

#: vLLM 0.19's default ``--max-num-batched-tokens`` for the OpenAI server on an 80 GB-class GPU.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM 0.19's default ``--max-num-seqs`` on an 80 GB-class GPU; it sizes the profiled sampler run.
DEFAULT_MAX_NUM_SEQS = 1024

#: Non-torch memory per worker (NCCL / custom all-reduce buffers, cuBLAS workspaces), from the
#: vLLM 0.19.0 H100 logs (llm-d-planner accuracy runs): 0.24-0.26 GiB at TP1 in 20 of 22 runs
#: (Granite 0.46), 2.06-2.21 GiB with TP >= 2, 0.07 GiB on a pipeline stage without TP.
NON_TORCH_TP1 = int(Fraction("0.25") * GiB)
NON_TORCH_TP = int(Fraction("2.1") * GiB)
NON_TORCH_PP_STAGE = int(Fraction("0.07") * GiB)
#: The profile run's forward pass, per token of max_num_batched_tokens: the widest dense MLP's
#: gate/up output and activation (3 x its width per rank) and about five hidden-sized tensors
#: (residual, normed input, attention output, MLP output, a copy). Fitted on Llama-3.1-8B's
#: first PP2 stage, where the forward is the peak (1.10 GiB logged with 0.125 of received
#: tensors; this gives 1.09); CodeLlama-7B (FFN 11008, small vocabulary) logged 0.77 GiB, this
#: gives 0.81; Granite-3.1-8B (FFN 12800) 0.85 and 0.90.
FORWARD_HIDDEN_TENSORS = 5
FORWARD_FFN_TENSORS = 3
#: The sampler run on max_num_seqs rows of fp32 logits holds about 3.72 copies of them beside the
#: forward's last hidden states: fitted on the vLLM 0.19 logs where it is the peak (Llama-3.1-8B
#: 1.89 GiB, Qwen2.5-7B and Qwen3-8B 2.21, Gemma-2 2B/9B/27B 3.62-3.66, Phi-4 1.52, gpt-oss-20b
#: 2.87, Qwen2.5-72B 2.29: 3.67-3.77 copies, 3.83 for 50k vocabularies).
SAMPLER_LOGIT_COPIES = Fraction(372, 100)
LOGIT_BYTES = 4


def non_torch_memory(tp: int, pp: int, scale_up_link: bool = True) -> int:
    """Non-torch memory per worker; TP communication buffers dominate when TP >= 2 over NVLink.
    Over PCIe alone (``scale_up_link`` False) vLLM turns its custom all-reduce off beyond two
    GPUs and NCCL has no NVLink buffers: a TP worker holds about what a TP 1 worker does (8 L40S
    at TP 8 under vLLM 0.10.2: "0.21 GiB for non-torch memory",
    tests/fixtures/vllm_logs/v0102-l40s-qwen3-235b-fp8-tp8.log)."""
    if tp >= 2 and not scale_up_link:
        return NON_TORCH_TP1
    if tp >= 2:
        return NON_TORCH_TP
    return NON_TORCH_PP_STAGE if pp >= 2 else NON_TORCH_TP1


def used_ffns(model: ModelSpec) -> list[DenseMLP | MoE]:
    """The feed-forward blocks the layers use (the dense MLP, the MoE, or both)."""
    used: list[DenseMLP | MoE] = []
    for _, ffn, _ in model.block_counts(range(model.num_layers)):
        if not any(ffn is u for u in used):
            used.append(ffn)
    return used


def dense_ffn_width(model: ModelSpec) -> int:
    """The widest dense FFN a token passes through in any layer (an MoE layer's shared experts
    run as a dense MLP), before TP."""
    widths = [0]
    for ffn in used_ffns(model):
        if isinstance(ffn, MoE):
            widths.append(ffn.shared_experts * ffn.shared_intermediate_size)
        else:
            widths.append(ffn.intermediate_size)
    return max(widths)


def forward_peak(model: ModelSpec, tp: int, tokens: int) -> int:
    """Live tensors of the profile run's forward pass over ``tokens`` (see the constants): the
    FFN width is split by TP, the hidden state is not."""
    act = dtype(model.default_dtype)
    width = (
        FORWARD_HIDDEN_TENSORS * model.hidden_size
        + FORWARD_FFN_TENSORS * -(-dense_ffn_width(model) // tp)
    )
    return act.bytes_for(tokens * width)


def sampler_peak(
    model: ModelSpec,
    tokens: int,
    max_num_seqs: int,
    logit_copies: Fraction = SAMPLER_LOGIT_COPIES,
) -> int:
    """The sampler run on the last stage: max_num_seqs rows of fp32 logits over the whole
    vocabulary (gathered across TP), ``logit_copies`` of them (a vLLM release's; 0.19's by
    default), beside the forward's ``tokens`` hidden states."""
    act = dtype(model.default_dtype)
    logits = max_num_seqs * model.vocab_size * LOGIT_BYTES
    return act.bytes_for(tokens * model.hidden_size) + math.ceil(logit_copies * logits)


def v2_sampler_peak(model: ModelSpec, tokens: int, max_num_seqs: int, fp32_copies: int) -> int:
    """Model Runner V2's profiled sampler run, read from its code, not fitted: the forward's
    ``tokens`` hidden states, the logits of max_num_seqs rows (``_dummy_run`` makes
    min(max_num_batched_tokens, max_num_seqs) requests and gathers one row each,
    ``logits_indices``; vllm/v1/worker/gpu/model_runner.py of 0.25.0 to 0.33.0) in the model
    dtype (``LogitsProcessor`` casts nothing), and ``fp32_copies`` fp32 copies of them (the
    release's, :attr:`~kvcalc.engine.vllm_releases.VLLMRelease.dense_sampler_fp32_copies`).
    Left out: ``gumbel_sample``'s per-block partials, 12 bytes per 1,024 logits."""
    act = dtype(model.default_dtype)
    rows = max_num_seqs * model.vocab_size
    return act.bytes_for(tokens * model.hidden_size + rows) + fp32_copies * rows * LOGIT_BYTES


def moe_workspace(model: ModelSpec, tp: int, tokens: int) -> int:
    """vLLM's fused-MoE workspaces for ``tokens``, kept by its workspace manager once the profile
    run has sized them, so they are still held when the sampler peaks
    (``TritonExperts.workspace_shapes`` in vllm/model_executor/layers/fused_moe: workspace1
    (M, top_k, max(N / 2, K)) and workspace2 (M, top_k, max(N, K)), with N the gate/up width
    per rank and K the hidden size). The output (M, K) is a view of workspace1's buffer, not a
    third one: ``FusedMoEModularKernel._allocate_buffers`` reuses workspace13 for it in one
    chunk when it is large enough (0.14.0; a batch of at most VLLM_FUSED_MOE_CHUNK_SIZE, 16,384
    tokens, is one chunk), and asks the workspace manager for max(workspace13, output) and
    workspace2 only (0.19.0, 0.22.1, 0.27.1, 0.28.0 wheels); top_k x max(N / 2, K) >= K, so
    workspace1 is always the larger. Qwen3-30B-A3B logged 2.68 GiB, 0.49 above its sampler;
    this gives 0.50."""
    k = model.hidden_size
    per_token = 0
    for moe in used_ffns(model):
        if isinstance(moe, MoE):
            n = 2 * -(-moe.intermediate_size // tp)
            per_token = max(per_token, moe.top_k * (max(n // 2, k) + max(n, k)))
    return dtype(model.default_dtype).bytes_for(tokens * per_token)


def runner_inputs_embeds(model: ModelSpec, tokens: int) -> int:
    """Model Runner V1's persistent ``inputs_embeds`` buffer: ``tokens`` (max_num_batched_tokens)
    x the hidden size in the model dtype, made for every model, text-only ones too
    (``GPUModelRunner.__init__``, vllm/v1/worker/gpu_model_runner.py of the 0.22.1, 0.27.1,
    0.28.0 and 0.33.0 wheels). It is allocated after the worker's init snapshot and before the
    weights load, so "Model loading took" leaves it out, and so did the profile up to 0.26
    (weights + torch peak increase + non-torch, vllm/utils/mem_utils.py of 0.22.1: torch memory
    held before the profile run is in none of them); 0.27's "consumed memory", the free-memory
    drop since that snapshot (``memory_profiling``, mem_utils.py of 0.27.1, 0.28.0 and 0.33.0),
    holds it."""
    return dtype(model.default_dtype).bytes_for(tokens * model.hidden_size)


def v2_penalty_buffers(model: ModelSpec, max_num_seqs: int) -> int:
    """Model Runner V2's sampler penalty state, allocated whole for every model, penalties used
    or not ("This tensor is rarely used but can be very large, taking up GBs of GPU memory"):
    ``output_bin_counts``, max_num_seqs x the vocabulary in int32, and ``prompt_bin_mask``,
    max_num_seqs x ceil(vocabulary / 32) in int32 (``PenaltiesState.__init__``,
    vllm/v1/worker/gpu/sample/penalties.py of 0.28.0, 0.33.0 and 0.34.0). ``load_model``
    builds the sampler after the weights are measured (vllm/v1/worker/gpu/model_runner.py), so
    "Model loading took" leaves it out and "consumed memory" holds it."""
    int32 = 4
    return max_num_seqs * (model.vocab_size + -(-model.vocab_size // 32)) * int32


def encoder_cache(model: ModelSpec, tokens: int) -> int:
    """A multimodal model's profile run first encodes dummy images filling the encoder budget
    (max(max_num_batched_tokens, tokens of one image), "Encoder cache will be initialized with
    a budget of 8192 tokens" in the logs) and keeps their embeddings, then merges them into the
    input embeddings: two budget x hidden tensors in the model dtype. Gemma-3 4B/12B/27B logged
    0.27-0.33 GiB above Gemma-2's peak; this gives 0.08-0.16 of it (the rest is their larger
    vocabulary's sampler)."""
    if model.vision is None:
        return 0
    budget = max(tokens, model.vision.tokens_per_image)
    return dtype(model.default_dtype).bytes_for(2 * budget * model.hidden_size)


def encoder_run_peak(model: ModelSpec, tp: int, tokens: int) -> int:
    """Live tensors of the profile run's dummy encoder pass, before the text model runs: vLLM
    (``GPUModelRunner.profile_run``, vllm/v1/worker/gpu_model_runner.py of the 0.13.0, 0.22.1,
    0.27.1 and 0.28.0 wheels) encodes as many largest images as the encoder budget holds
    (budget // tokens_per_image: ``_get_max_items``, vllm/v1/worker/utils.py in 0.13.0,
    vllm/multimodal/encoder_budget.py from 0.22) inside ``memory_profiling``, which reset the
    peak counter (vllm/utils/mem_utils.py), so the encoder's peak is the profile's whenever it
    is the larger. Per patch of that batch: the pixel values the batch holds (channels x
    temporal_patch x patch^2, in the model dtype: the processor output is cast to it,
    ``InputProcessingContext._postprocess_output`` in 0.28.0), and at a block's MLP
    activation (0.28.0 ``Qwen3_VisionBlock.forward``: x + mlp(norm2(x)); ``Qwen3_VisionMLP``:
    fc2(act(fc1(x)))) the residual, the normed input, fc1's output and the activation's
    (gate/up and the product for a gated MLP), the MLP width split over TP where the tower
    is. Read from the code, not fitted; the attention half of a block (x, normed, qkv, the
    rotated q and k, its output: 8 hidden-sized tensors) is the smaller at an MLP of 4 x
    hidden. Not counted: ``_get_max_items``' other cap, max_num_seqs x the images one prompt
    holds (min(--limit-mm-per-prompt, max_model_len // tokens_per_image), at least 1), which
    binds only where it is the smaller (a few sequences: at the default 256 it is 256 images
    or more, above every registry tower's budget count at vLLM's default batched tokens, 113
    at most); and
    Qwen3-VL's interpolated position embeddings, which its forward holds
    beside the blocks (one hidden per patch, 0.09 GiB for Qwen3.5-0.8B), a detail of one
    tower (SigLIP adds its table to the patch embeddings in place, ``embeddings +=`` in
    vllm/model_executor/models/siglip.py; Pixtral's positions are rotary)."""
    vision = model.vision
    if vision is None:
        return 0
    items = max(tokens, vision.tokens_per_image) // vision.tokens_per_image
    patches = items * vision.patches_per_image
    pixels = vision.channels * vision.temporal_patch * vision.patch**2
    width = -(-vision.intermediate // (tp if vision.sharded else 1))
    mlp = (3 if vision.gated_mlp else 2) * width
    return dtype(model.default_dtype).bytes_for(patches * (pixels + 2 * vision.hidden + mlp))


def pipeline_buffers(model: ModelSpec, pp: int, tokens: int) -> int:
    """The hidden states and residual a pipeline stage receives (Llama-3.1-8B PP2's last stage
    logged 2.01 GiB against 1.89 without PP: 2 x 8192 x 4096 x 2 bytes = 0.125)."""
    if pp < 2:
        return 0
    return dtype(model.default_dtype).bytes_for(2 * tokens * model.hidden_size)


def activation_peak(
    model: ModelSpec,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    last_stage: bool,
    pp: int = 1,
    logit_copies: Fraction = SAMPLER_LOGIT_COPIES,
    workspace_held: bool = True,
    v2_sampler_fp32_copies: int | None = None,
    workspace_resident: bool = False,
) -> int:
    """Estimated "PyTorch activation peak memory" of the profile run: the larger of the forward
    pass and (on the last stage) the sampler run, plus what both see held: the MoE workspaces
    (``workspace_held``: kept by the release's workspace manager; else freed after each MoE
    layer, so only the forward pass holds them), a multimodal model's encoder cache and a
    pipeline stage's received tensors; or a multimodal model's dummy encoder pass before them
    (:func:`encoder_run_peak`), if larger. ``v2_sampler_fp32_copies`` not None: the sampler is
    Model Runner V2's (:func:`v2_sampler_peak`), not V1's ``logit_copies``.
    ``workspace_resident``: the held workspaces are left out, as memory the profile leaves
    allocated rather than a transient (0.34's sizing after warmup,
    :mod:`kvcalc.engine.vllm_warmup`)."""
    tokens = max_num_batched_tokens
    workspace = moe_workspace(model, tp, tokens)
    body = forward_peak(model, tp, tokens) + (0 if workspace_held else workspace)
    if last_stage and v2_sampler_fp32_copies is not None:
        body = max(body, v2_sampler_peak(model, tokens, max_num_seqs, v2_sampler_fp32_copies))
    elif last_stage:
        body = max(body, sampler_peak(model, tokens, max_num_seqs, logit_copies))
    resident = workspace_held and workspace_resident
    held = (workspace if workspace_held and not resident else 0) + pipeline_buffers(
        model, pp, tokens
    )
    text = body + held + encoder_cache(model, tokens)
    return max(text, encoder_run_peak(model, tp, tokens))


def estimated_overhead(
    model: ModelSpec,
    tp: int,
    pp: int,
    stage: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
) -> int:
    """Runtime memory besides weights and KV on one GPU of pipeline ``stage``: what vLLM's
    profiler subtracts (activation peak + non-torch memory)."""
    last = stage == pp - 1
    peak = activation_peak(model, tp, max_num_batched_tokens, max_num_seqs, last, pp)
    return peak + non_torch_memory(tp, pp)
