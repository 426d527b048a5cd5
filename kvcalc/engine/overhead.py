"""Runtime memory besides weights and KV cache: the activation peak of a forward pass and the
non-torch memory (communication buffers, workspaces), estimated the way vLLM's profiler measures
them (``Worker.determine_available_memory``; constants from the vLLM 0.19 logs summarised in the
reference). Used by the vLLM model's budget estimate and as the default ``--overhead`` of the
simple capacity model, so the two agree.
"""

from __future__ import annotations

from fractions import Fraction

from kvcalc.engine.spec import ModelSpec, MoE
from kvcalc.engine.units import GiB, dtype

#: vLLM 0.19's default ``--max-num-batched-tokens`` for the OpenAI server on an 80 GB-class GPU.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM 0.19's default ``--max-num-seqs`` on an 80 GB-class GPU; it sizes the profiled sampler run.
DEFAULT_MAX_NUM_SEQS = 1024

#: Non-torch memory per worker (NCCL / custom all-reduce buffers, cuBLAS workspaces), from the
#: vLLM 0.19.0 H100 logs summarised in the reference: 0.25-0.46 GiB at TP1 (midpoint taken),
#: about 2.1 GiB with TP >= 2, 0.07 GiB on a pipeline stage without TP.
NON_TORCH_TP1 = int(Fraction("0.35") * GiB)
NON_TORCH_TP = int(Fraction("2.1") * GiB)
NON_TORCH_PP_STAGE = int(Fraction("0.07") * GiB)
#: Activation peak of the profile run, per token of max_num_batched_tokens: about 4 live tensors
#: of (hidden + FFN width per rank) in the model dtype. Calibrated on the reference's Llama-3.1-8B
#: PP2 run (non-KV 8.69 GiB on the first stage = 7.48 GiB of weights + 0.07 non-torch + 1.14
#: activations; 4 x 8192 x (4096 + 14336) x 2 bytes = 1.125 GiB).
ACTIVATION_TENSORS_PER_TOKEN = 4
#: The last stage also runs the sampler on max_num_seqs rows of fp32 logits, about two copies
#: (same run: the last stage's non-KV was 9.60 GiB, 0.91 GiB more; 2 x 1024 x 128256 x 4 bytes
#: = 0.98 GiB). Cross-check: Qwen3-14B (hidden 5120, FFN 17408, vocab 151,936 per its config.json)
#: logged 2.23 GiB on v0.17 (settings not in the reference); this gives 2.53 GiB at 8192 tokens and
#: 1024 sequences, i.e. it errs towards less KV memory. Expect +-0.3 GiB; versions differ (the
#: same model logged 5.64 GiB on v0.16).
LOGIT_COPIES = 2
LOGIT_BYTES = 4


def non_torch_memory(tp: int, pp: int) -> int:
    """Non-torch memory per worker; TP communication buffers dominate when TP >= 2."""
    if tp >= 2:
        return NON_TORCH_TP
    return NON_TORCH_PP_STAGE if pp >= 2 else NON_TORCH_TP1


def ffn_width_per_token(model: ModelSpec) -> int:
    """The widest FFN activation a token produces in any layer (MoE: its routed top-k plus shared
    experts)."""
    widths = []
    for ffn in {model.ffn_at(i) for i in range(model.num_layers)}:
        if isinstance(ffn, MoE):
            widths.append(
                ffn.top_k * ffn.intermediate_size
                + ffn.shared_experts * ffn.shared_intermediate_size
            )
        else:
            widths.append(ffn.intermediate_size)
    return max(widths)


def activation_peak(
    model: ModelSpec,
    tp: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    last_stage: bool,
) -> int:
    """Estimated "PyTorch activation peak memory" of the profile run (see the constants): the
    FFN width is split by TP, the hidden state is not; only the last stage samples."""
    act = dtype(model.default_dtype)
    width = model.hidden_size + ffn_width_per_token(model) // tp
    body = act.bytes_for(ACTIVATION_TENSORS_PER_TOKEN * max_num_batched_tokens * width)
    logits = LOGIT_COPIES * max_num_seqs * model.vocab_size * LOGIT_BYTES if last_stage else 0
    return body + logits


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
    return activation_peak(model, tp, max_num_batched_tokens, max_num_seqs, last_stage=last) + (
        non_torch_memory(tp, pp)
    )
