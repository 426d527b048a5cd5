"""Single-user runtimes (``--runtime``): the decode profiles of software that runs one model for
one user rather than a serving engine's batch -- llama.cpp, ollama and PyTorch eager. Each is a
:class:`~kvcalc.engine.profiles.DecodeProfile` with its sources; the KV cache they time is the
budget formula's (they size no pool of their own that kvcalc models).
"""

from __future__ import annotations

import dataclasses

from kvcalc.engine.profiles import COMPILED_KERNELS, REGISTRY_FIT, DecodeProfile
from kvcalc.errors import InputError

LLAMA_CPP_FIT = (
    "https://github.com/ggml-org/llama.cpp/pull/15131 (llama 8B BF16 on an RTX 4090, micro-batch "
    "1: 65.21 tokens/s, 0.97 of the peak bandwidth with every fixed cost included: no fixed "
    "per-token cost beyond the reads; reference gpu-notes.md section 4's 1-1.5 ms is older "
    "builds')"
)
LLAMA_CPP_GRAPHS = "https://github.com/ggml-org/llama.cpp/pull/6766 (CUDA graphs for decode)"
LLAMA_CPP_SPLIT = (
    "https://github.com/ggml-org/llama.cpp/blob/master/tools/server/README.md "
    "(--split-mode layer, the default: layers split across GPUs)"
)
PYTORCH_BLOG = "https://pytorch.org/blog/accelerating-generative-ai-2/"

#: llama.cpp's fixed cost per token beyond its reads, set on its fit point
#: (tests/fixtures/decode_points.yaml, PR #15131: llama 8B BF16 on an RTX 4090 at micro-batch 1,
#: 65.21 tokens/s, a 15.34 ms step). That step is shorter than its 15.08 GB of reads at the RTX
#: 4090's achievable bandwidth (16.62 ms), so the fit leaves no fixed cost; even at the full
#: 1.008 TB/s peak it leaves at most 0.38 ms, not the 1-1.5 ms gpu-notes.md section 4 derives
#: from older 7B Q4_0 scoreboard figures. Its CUDA backend replays single-token steps as CUDA
#: graphs (PR #6766), the host's per-token work overlapping the GPU's, so no per-layer launch
#: cost is added either.
LLAMA_CPP_STEP_OVERHEAD = 0.0

#: PyTorch eager: the same Llama-2-7B on the same A100-80GB (330 W, batch 1) runs at 25.5
#: tokens/s eager and 107.0 compiled with CUDA graphs (PyTorch blog, "GPT, Fast"): the eager
#: step spends 1/25.5 - 1/107.0 = 29.9 ms more, launching kernels from Python, over 32 layers.
PYTORCH_EAGER_LAYER_OVERHEAD = (1 / 25.5 - 1 / 107.0) / 32

LLAMA_CPP = DecodeProfile(
    name="llama.cpp",
    label="llama.cpp",
    cuda_graphs=True,
    allreduce="none: layers split across GPUs (--split-mode layer)",
    step_overhead_seconds=LLAMA_CPP_STEP_OVERHEAD,
    tensor_parallel=False,
    kernels=COMPILED_KERNELS,
    sources=(LLAMA_CPP_FIT, LLAMA_CPP_GRAPHS, LLAMA_CPP_SPLIT),
)
# ollama runs llama.cpp's kernels: llama.cpp's profile under its own name.
OLLAMA = dataclasses.replace(
    LLAMA_CPP,
    name="ollama",
    label="ollama",
    sources=(
        "https://github.com/ollama/ollama (runs models on llama.cpp's ggml CUDA kernels, "
        "layers split across GPUs): llama.cpp's per-token figures",
        *LLAMA_CPP.sources,
    ),
)
PYTORCH = DecodeProfile(
    name="pytorch",
    label="PyTorch eager",
    cuda_graphs=False,
    allreduce="NCCL all-reduce (torch.distributed)",
    layer_overhead_seconds=PYTORCH_EAGER_LAYER_OVERHEAD,
    # The eager per-layer cost is measured against the compiled run (gpt-fast's), which pays
    # no serving engine's per-layer kernels: counting them too would count the launches twice.
    kernels=COMPILED_KERNELS,
    sources=(
        PYTORCH_BLOG + " (Llama-2-7B on A100-80GB, batch 1: 25.5 tokens/s eager, 107.0 "
        "with torch.compile and CUDA graphs)",
        REGISTRY_FIT,
    ),
)

#: gpt-fast (torch.compile, CUDA graphs, NCCL all-reduces): the stack the registry's efficiency
#: figures were fitted on, so the GPU's figures with no per-layer kernels beyond the step. Not a
#: ``--runtime`` value; the profile the published gpt-fast points are timed with
#: (tests/fixtures/decode_points.yaml, tests/test_latency_judge.py).
GPT_FAST = DecodeProfile(
    name="gpt-fast",
    label="gpt-fast (torch.compile)",
    cuda_graphs=True,
    allreduce="NCCL all-reduce (torch.distributed)",
    kernels=COMPILED_KERNELS,
    sources=(
        "https://github.com/pytorch-labs/gpt-fast (torch.compile mode reduce-overhead: the "
        "decode step one CUDA graph)",
        REGISTRY_FIT,
    ),
)

RUNTIMES: dict[str, DecodeProfile] = {p.name: p for p in (LLAMA_CPP, OLLAMA, PYTORCH)}
RUNTIME_NAMES = tuple(RUNTIMES)


def runtime_named(name: str) -> DecodeProfile:
    """The runtime called ``name`` (any case); an unknown name is refused with the list."""
    key = str(name).strip().lower()
    if key not in RUNTIMES:
        raise InputError(
            f"--runtime: unknown runtime {name!r}; choose {', '.join(RUNTIME_NAMES)}",
            field="runtime",
            fix=f"give one of {', '.join(RUNTIME_NAMES)}",
        )
    return RUNTIMES[key]


def check_layout(profile: DecodeProfile, tp: int) -> None:
    """Refuse tensor parallelism for a runtime that splits layers instead."""
    if not profile.runs_tp(tp):
        raise InputError(
            f"--runtime {profile.name}: splits layers across GPUs, not tensors; "
            f"give --tp 1 --pp {tp} instead of tp {tp}",
            field="runtime",
            fix="give --tp 1 and --pp N",
        )
