"""Single-user runtimes (``--runtime``): the decode profiles of software that runs one model for
one user rather than a serving engine's batch -- llama.cpp, ollama and PyTorch eager. Each is a
:class:`~kvcalc.engine.profiles.DecodeProfile` with its sources; the KV cache they time is the
budget formula's (they size no pool of their own that kvcalc models).
"""

from __future__ import annotations

import dataclasses

from kvcalc.engine.matvec_waves import RESIDENT_BLOCKS_SOURCE
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

# ---------------------------------------------------------------- llama.cpp builds

#: The runtimes that run llama.cpp's CUDA kernels, so that a llama.cpp build applies to them.
LLAMA_CPP_RUNTIMES = ("llama.cpp", "ollama")

#: The first llama.cpp release whose F16 matrix-vector kernel no longer uses scalar loads:
#: release b3916 is PR 9816 ("Vectorize load instructions in dmmv f16 CUDA kernel (#9816)",
#: the b3916 release notes). Builds before it run F16 weights at one token per step through
#: ``dequantize_mul_mat_vec<1, 1, convert_f16>`` (ggml-cuda/dmmv.cu, e.g. at commit 08d8a6b:
#: one half per load; no BF16 case, so BF16 weights never took this kernel). From b3916 the
#: current figures apply: PR 9816's kernel until PR 10318 (2024-11-15) replaced it, whose own
#: HBM figure upstream does not give (its tables are GDDR and AMD GPUs), so that interval is
#: not told apart.
LLAMA_CPP_F16_MATVEC_FIX_BUILD = 3916
LLAMA_CPP_9817 = (
    "https://github.com/ggml-org/llama.cpp/issues/9817 (the F16 mat-vec kernel's scalar loads "
    "run far below peak on NVIDIA HBM GPUs, not on GDDR ones; PR 9816 vectorised them: "
    "Meta-Llama-3-8B-Instruct F16 at batch 1, 1.27x overall and 1.33x in the kernel on an "
    "H100 SXM, 1.01x on GDDR GPUs; merged by release b3916)"
)

#: The share of the achievable bandwidth llama.cpp's F16 mat-vec reached on NVIDIA HBM GPUs
#: before b3916 in a full wave of its blocks. That kernel runs one one-warp block per output row
#: (ggml-cuda/dmmv.cu at build 2833), so a matrix takes whole waves of SMs x resident blocks and
#: its time is its reads at this share over its waves' fill (kvcalc.engine.matvec_waves, read
#: from the code and NVIDIA's documents, no constant in it). The share is set on the three
#: one-GPU Llama 3 8B F16 rows of the XiongjieDai table (build 2833;
#: tests/fixtures/decode_points.yaml, role fit: A100 PCIe 54.56, A100 SXM 53.18, H100 PCIe 67.79
#: tokens/s): the median of the shares each row implies (its measured step less its KV reads,
#: over its weight reads at the registry's achievable bandwidth: 0.57, 0.52, 0.62) over its step's
#: wave fill (0.685 on an A100's 3,456 rows a wave, 0.709 on an H100 PCIe's 3,648): 0.83, 0.76,
#: 0.88. Upstream gives no absolute figure: issue 9817's 1.27x on an H100 SXM compares the old
#: kernel with PR 9816's, not with the current one the registry's figures follow.
LLAMA_CPP_PRE_B3916_F16_MATVEC_HBM_SHARE = 0.83
LLAMA_CPP_FIT_PRE_B3916 = (
    "https://github.com/XiongjieDai/GPU-Benchmarks-on-LLM-Inference (llama.cpp build 2833, "
    "Llama 3 8B F16, one GPU: A100 PCIe 54.56, A100 SXM 53.18, H100 PCIe 67.79 tokens/s; the "
    f"pre-b3916 F16 mat-vec at {LLAMA_CPP_PRE_B3916_F16_MATVEC_HBM_SHARE:g} of the achievable "
    "bandwidth in a full wave of its one-warp rows on NVIDIA HBM GPUs, fitted on those rows)"
)
LLAMA_CPP_DMMV_B2833 = (
    "https://github.com/ggml-org/llama.cpp/blob/d46dbc76f8770caec0175f1e57777173c70556a0/"
    "ggml-cuda/dmmv.cu (convert_mul_mat_vec_f16_cuda: one (32, GGML_CUDA_MMV_Y = 1) block per "
    "row; ggml-cuda.cu ggml_cuda_mul_mat sends F16 x one token there)"
)
LLAMA_CPP_PRE_B3916_KERNELS = dataclasses.replace(
    COMPILED_KERNELS,
    # The same per-layer class (a compiled step's: none); only the F16 mat-vec differs: one
    # warp per output row, in waves (kvcalc.engine.matvec_waves), at a full wave's share.
    f16_matvec_hbm_share=LLAMA_CPP_PRE_B3916_F16_MATVEC_HBM_SHARE,
    f16_matvec_warp_per_row=True,
)


def at_build(profile: DecodeProfile, build: int | None) -> DecodeProfile:
    """``profile`` as llama.cpp build ``build`` runs it (None: the current build, unchanged):
    before b3916 its F16 mat-vec runs at the old kernel's share on NVIDIA HBM GPUs. Refused
    for a profile that is not llama.cpp's (or ollama's, which bundles it), and for a build that
    is not a whole number of at least 0."""
    if build is None:
        return profile
    if profile.name not in LLAMA_CPP_RUNTIMES:
        raise InputError(
            f"--llama-cpp-build: applies with --runtime {' or '.join(LLAMA_CPP_RUNTIMES)} "
            f"only, not to {profile.name}'s decode profile; add --runtime llama.cpp or drop "
            "--llama-cpp-build",
            field="llama_cpp_build",
            fix="add --runtime llama.cpp (or ollama), or drop --llama-cpp-build",
        )
    if isinstance(build, bool) or not isinstance(build, int) or build < 0:
        raise InputError(
            f"--llama-cpp-build: {build!r} is not a build number; give the N of llama.cpp's "
            "`build: N (commit)` log line, e.g. 2833",
            field="llama_cpp_build",
            fix="give a whole number, e.g. 2833",
        )
    if build >= LLAMA_CPP_F16_MATVEC_FIX_BUILD:
        return dataclasses.replace(profile, build=build)
    return dataclasses.replace(
        profile,
        build=build,
        kernels=LLAMA_CPP_PRE_B3916_KERNELS,
        sources=(
            *profile.sources, LLAMA_CPP_9817, LLAMA_CPP_FIT_PRE_B3916, LLAMA_CPP_DMMV_B2833,
            RESIDENT_BLOCKS_SOURCE,
        ),
    )


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
