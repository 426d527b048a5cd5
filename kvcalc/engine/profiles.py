"""Decode profiles: what the software that runs the model adds to a decode step beyond the GPU's
reads and FLOPs -- the fixed per-step overhead, the all-reduce implementation and whether the
step is replayed as a CUDA graph.

The GPU's ``efficiency`` figures in the registry (model_configs/gpus) are fitted to gpt-fast's
batch-1 decode: compiled PyTorch replayed as CUDA graphs, all-reduces through NCCL
(torch.distributed). A profile keeps those figures where the software behaves the same (a
``None`` field) and replaces a term where it does not, each with its source:

- ``step_overhead_seconds``: the fixed cost of one step (launches, sampling, scheduling);
  None: the GPU's registry figure.
- ``layer_overhead_seconds``: the cost each layer adds when the step is not a CUDA graph (every
  kernel launched from Python: PyTorch eager); 0 with CUDA graphs.
- ``allreduce_latency_seconds``: the latency of one small all-reduce in the software's
  implementation (engines' custom one-shot kernels vs NCCL's ring); None: the GPU's registry
  figure (NCCL, as gpt-fast measured it).

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

    def communication_seconds(
        self, dep: Deployment, eff: Efficiency, registry_seconds: float
    ) -> float:
        """``registry_seconds`` (the replica's all-reduces timed at the GPU's link latency) with
        each all-reduce's latency replaced by the profile's: the bandwidth term is the link's,
        whatever the implementation; the latency is the implementation's."""
        from kvcalc.engine.latency import ALLREDUCES_PER_LAYER

        if self.allreduce_latency_seconds is None or not custom_allreduce_applies(dep):
            return registry_seconds
        count = ALLREDUCES_PER_LAYER * dep.model.num_layers
        delta = self.allreduce_latency_seconds - eff.link_latency_seconds
        return max(0.0, registry_seconds + count * delta)

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
            "profile_sources": list(self.sources),
        }

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
        if not self.tensor_parallel:
            return f"{self.label} profile: {graphs}, {overhead}, {self.allreduce}"
        return f"{self.label} profile: {graphs}, {overhead}, {self.allreduce} ({latency})"


def custom_allreduce_applies(dep: Deployment) -> bool:
    """Whether an engine's custom all-reduce kernel runs for ``dep``'s tensor-parallel group:
    within one node, over a peer-to-peer scale-up link (vLLM's custom_all_reduce.py disables it
    across nodes and for more than two PCIe-only GPUs, falling back to NCCL; SGLang's and
    TensorRT-LLM's kernels have the same IPC requirement)."""
    if dep.tp == 1 or (dep.tp_nodes or 1) > 1:
        return False
    return dep.tp <= 2 or dep.gpus.accelerator.interconnect_bytes_per_s is not None


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

#: The figures as the registry holds them: what every estimate used before profiles, and the
#: budget formula's (``--engine simple``) profile.
REGISTRY_PROFILE = DecodeProfile(
    name="registry",
    label="the GPU's registry figures",
    cuda_graphs=True,
    allreduce="NCCL all-reduce",
    sources=(REGISTRY_FIT,),
)
