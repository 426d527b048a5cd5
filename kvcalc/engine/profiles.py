"""Decode profiles: what the software that runs the model adds to a decode step beyond the GPU's
reads and FLOPs -- the fixed per-step overhead, the all-reduce implementation, the per-layer
kernels and whether the step is replayed as a CUDA graph.

The GPU's ``efficiency`` figures in the registry (model_configs/gpus) are fitted to gpt-fast's
batch-1 decode (compiled PyTorch replayed as CUDA graphs), its scale-up all-reduce latency a
serving engine's one-shot kernel where measured (H100/H200) or fitted (A100 on gpt-fast, MI300X
on vLLM). A profile keeps those figures where the software behaves the same (a ``None`` field)
and replaces a term where it does not, each with its source:

- ``step_overhead_seconds``: the fixed cost of one step (launches, sampling, scheduling);
  None: the GPU's registry figure.
- ``layer_overhead_seconds``: the cost each layer adds when the step is not a CUDA graph (every
  kernel launched from Python: PyTorch eager); 0 with CUDA graphs.
- ``allreduce_latency_seconds``: the latency of one small all-reduce in the software's
  implementation (engines' custom one-shot kernels); None: the GPU's registry figure. It
  replaces the registry's only where the kernel runs: a tensor-parallel group inside one node
  over NVLink (:func:`kvcalc.engine.latency.scale_up_allreduce_latency`); PCIe groups and groups
  across nodes are timed by :mod:`kvcalc.engine.communication`'s NCCL models.
- ``kernels``: the per-layer kernel costs of the stack (:class:`StepKernels`): a serving
  engine's chain of small kernels per layer (:data:`SERVING_KERNELS`), or none beyond the step
  overhead for a stack that compiles the whole step into one graph (:data:`COMPILED_KERNELS`:
  gpt-fast, llama.cpp; PyTorch eager pays its launches as ``layer_overhead_seconds`` instead).

The sum a step pays beyond its reads is therefore: the profile's step overhead (or the
registry's) + its per-layer launch cost (eager only) + its kernel class's per-layer costs + the
all-reduces. Serving engines state no step overhead of their own: the registry's, which
:data:`SERVING_KERNELS` was set on top of, so nothing is counted twice.

Each serving engine (:mod:`kvcalc.engine.serving`) exposes its profile as ``decode_profile``;
single-user runtimes (llama.cpp, ollama, PyTorch eager) are :mod:`kvcalc.engine.runtimes`.
:mod:`kvcalc.engine.latency` takes one through its ``profile`` parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import Efficiency


@dataclass(frozen=True)
class StepKernels:
    """What the stack that runs a decode step costs per layer beyond its reads: the chain of
    small kernels one layer launches at decode batch sizes (norms, rotary, attention, the
    MLP's or the router's, top-k, the grouped expert GEMMs), each a few microseconds however
    few bytes it reads, on top of the registry's per-step overhead."""

    name: str
    dense_layer_seconds: float
    """One layer with a dense MLP (or none)."""
    moe_layer_seconds: float
    """One layer with routed experts: routing, token sorting and two grouped GEMMs."""
    w4a16_moe_layer_seconds: float
    """The same layer when its routed experts are integer 4-bit (GPTQ, AWQ, compressed-tensors
    pack-quantized): weight-only experts that vLLM and SGLang run as fused Marlin MoE kernels
    (vLLM's GPTQMarlinMoEMethod, AWQMarlinMoEMethod, CompressedTensorsWNA16MarlinMoEMethod)
    on 16-bit activations, with no activation-quantising step before the grouped GEMMs."""
    f16_matvec_hbm_share: float = 1.0
    """The share of the achievable bandwidth the stack's F16 weight matrix-vector kernel
    reaches on an NVIDIA HBM GPU at one token per step (1: what the registry's efficiency
    figures, fitted on current stacks, already hold). Below 1 only for an old build whose
    kernel ran far below peak there (llama.cpp before b3916: :mod:`kvcalc.engine.runtimes`).
    With ``f16_matvec_warp_per_row``, the share of a full wave of blocks."""
    f16_matvec_warp_per_row: bool = False
    """Whether that F16 mat-vec runs one one-warp block per output row, so that a matrix takes
    whole waves of the GPU's resident blocks and a part-filled wave costs a full one's time
    (:mod:`kvcalc.engine.matvec_waves`; llama.cpp before b3916)."""

    def __post_init__(self) -> None:
        if not 0 < self.f16_matvec_hbm_share <= 1:
            raise ValueError(f"{self.name}: f16_matvec_hbm_share must be in (0, 1]")


#: A serving engine (vLLM, SGLang, TensorRT-LLM, CUDA graphs on) at small batch, set on the
#: fit points of tests/fixtures/decode_points.yaml (what each measured step leaves beyond the
#: reads, the all-reduces timed with the engine's profile and the registry's step overhead, per
#: layer): dense, the mean of vLLM's CI Llama-3.1-8B at batch 8 on an H200 (47.5 us) and NIM's
#: Llama-3.3-70B FP8 at TP 2 on H100s (43.2 us, TensorRT-LLM's 6 us all-reduces); MoE, vLLM's
#: Qwen3.5-397B-A17B NVFP4 at TP 4 on RTX PRO 6000s (97.5 us); W4A16 MoE, vLLM's
#: Qwen3.5-397B-A17B AWQ at TP 4 on RTX PRO 6000s, batch 1 (65 us: 9.58 ms measured less 2.17 ms
#: of reads, 1.51 ms of all-reduces and the 2 ms step, over 60 MoE layers).
SERVING_KERNELS = StepKernels(
    "serving", dense_layer_seconds=45e-6, moe_layer_seconds=98e-6, w4a16_moe_layer_seconds=65e-6
)
#: One compiled graph of the whole step (gpt-fast's torch.compile, llama.cpp's CUDA graph): the
#: registry's step overhead, fitted on such runs (gpt-fast, llama.cpp), is the whole fixed cost.
COMPILED_KERNELS = StepKernels(
    "compiled", dense_layer_seconds=0.0, moe_layer_seconds=0.0, w4a16_moe_layer_seconds=0.0
)


@dataclass(frozen=True)
class DecodeProfile:
    """The decode-step behaviour of one serving engine or runtime, each figure sourced."""

    name: str
    """``--engine``'s or ``--runtime``'s value, the JSON ``decode_profile.name``."""
    label: str
    """As prose names it (``vLLM``, ``llama.cpp``)."""
    cuda_graphs: bool
    """Whether decode steps are replayed as CUDA graphs (one launch per step)."""
    allreduce: str
    """The all-reduce implementation under tensor parallelism, in words."""
    sources: tuple[str, ...]
    """Where each figure comes from (engine docs, code, published measurements)."""
    step_overhead_seconds: float | None = None
    """Fixed time per step; None: the GPU's registry figure."""
    layer_overhead_seconds: float = 0.0
    """Time each layer adds to a step (kernel launches from Python without CUDA graphs)."""
    allreduce_latency_seconds: float | None = None
    """Latency of one small all-reduce; None: the GPU's registry figure (NCCL)."""
    tensor_parallel: bool = True
    """Whether it splits a layer's tensors across GPUs (False: layers split, refuse tp > 1)."""
    kernels: StepKernels = SERVING_KERNELS
    """The stack's per-layer kernel costs (a serving engine's, or a compiled step's none)."""
    build: int | None = None
    """The runtime's build the figures follow (llama.cpp's build number, ``--llama-cpp-build``);
    None: the current one."""

    def runs_tp(self, tp: int) -> bool:
        """Whether it can serve a tensor-parallel group of ``tp`` (one GPU always)."""
        return tp == 1 or self.tensor_parallel

    def __post_init__(self) -> None:
        for value in (
            self.step_overhead_seconds, self.layer_overhead_seconds, self.allreduce_latency_seconds
        ):
            if value is not None and value < 0:
                raise ValueError(f"{self.name}: a profile's times must not be negative")

    def overhead_seconds(self, dep: Deployment, eff: Efficiency) -> float:
        """The fixed cost of one step of ``dep``: the profile's (or the GPU's) per-step figure
        plus, without CUDA graphs, the per-layer launch cost."""
        base = eff.step_overhead_seconds if self.step_overhead_seconds is None else (
            self.step_overhead_seconds
        )
        return base + self.layer_overhead_seconds * dep.model.num_layers

    def payload(self) -> dict[str, object]:
        """The JSON ``decode_profile`` object."""
        return {
            "profile": self.name,
            "profile_label": self.label,
            "cuda_graphs": self.cuda_graphs,
            "allreduce": self.allreduce,
            "tensor_parallel": self.tensor_parallel,
            "profile_step_overhead_seconds": self.step_overhead_seconds,
            "layer_overhead_seconds": self.layer_overhead_seconds,
            "allreduce_latency_seconds": self.allreduce_latency_seconds,
            "kernels": self.kernels.name,
            "build": self.build,
            "f16_matvec_hbm_share": self.kernels.f16_matvec_hbm_share,
            "f16_matvec_warp_per_row": self.kernels.f16_matvec_warp_per_row,
            "profile_sources": list(self.sources),
        }

    def build_note(self) -> str:
        """The build the profile follows and what it changes, in words."""
        share = self.kernels.f16_matvec_hbm_share
        if share == 1:
            return f"build {self.build} (the current F16 mat-vec)"
        waves = (
            " in a full wave of its one-warp rows" if self.kernels.f16_matvec_warp_per_row else ""
        )
        return (
            f"build {self.build}: F16 mat-vec at {share:g} of the achievable bandwidth{waves} on "
            "NVIDIA HBM GPUs at one token per step"
        )

    def summary(self) -> str:
        """One line for a report: what the profile does to the step."""
        overhead = (
            "the GPU's step overhead"
            if self.step_overhead_seconds is None
            else f"{self.step_overhead_seconds * 1000:g} ms per step"
        )
        if self.layer_overhead_seconds:
            overhead += f" + {self.layer_overhead_seconds * 1000:.2f} ms per layer"
        graphs = "CUDA graphs" if self.cuda_graphs else "no CUDA graphs"
        latency = (
            "the GPU's all-reduce latency"
            if self.allreduce_latency_seconds is None
            else f"{self.allreduce_latency_seconds * 1e6:g} us per all-reduce"
        )
        kernels = (
            "no serving per-layer kernels"
            if self.kernels.name == COMPILED_KERNELS.name
            else f"{self.kernels.name} per-layer kernels"
        )
        text = f"{self.label} profile: {graphs}, {overhead}, {kernels}, {self.allreduce}"
        if self.tensor_parallel:
            text += f" ({latency})"
        return text if self.build is None else f"{text}; {self.build_note()}"


#: SGLang's custom all-reduce measured on H100 (sglang PR #2904, unit test without CUDA graphs):
#: 3.7-7.8 us for 512 B to 32 KB at tp 2-8, vLLM's custom kernel 8.5-11.8 us at the same sizes.
SGLANG_2904 = "https://github.com/sgl-project/sglang/pull/2904"
#: vLLM's custom all-reduce kernels (one-shot under 512 KB with full NVLink, else NCCL).
VLLM_2192 = "https://github.com/vllm-project/vllm/pull/2192"
#: The registry's figures: gpt-fast's compiled, CUDA-graph decode with NCCL all-reduces.
REGISTRY_FIT = (
    "model_configs/gpus/*.yaml efficiency: fitted to gpt-fast batch-1 decode "
    "(torch.compile + CUDA graphs, NCCL all-reduce; tests/test_latency_judge.py)"
)

#: The figures as the registry holds them, with a serving engine's per-layer kernels: what an
#: estimate without a profile uses, and the budget formula's (``--engine simple``) profile.
REGISTRY_PROFILE = DecodeProfile(
    name="registry",
    label="the GPU's registry figures",
    cuda_graphs=True,
    allreduce="all-reduce by link",
    sources=(REGISTRY_FIT,),
)
