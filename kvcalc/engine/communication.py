"""GPU-to-GPU communication of one forward pass: which link a tensor-parallel group's
all-reduces and a pipeline's sends cross, and how long they take.

Links (one direction per GPU, as :class:`~kvcalc.engine.hardware.Accelerator` gives them):

- **scale-up** (NVLink/NVSwitch, AMD Infinity Fabric/xGMI, a TPU's ICI): a group inside one node
  that the link joins. Serving engines all-reduce small (decode) messages there with one-shot
  custom kernels (vLLM ``custom_all_reduce``, SGLang, TensorRT-LLM's ``allreduce`` plugin), whose
  cost does not grow with the ranks: the registry's ``link_latency_us`` per all-reduce.
- **PCIe** (no scale-up link, or more GPUs than a bridge joins): NCCL's ring with the LL
  protocol, whose latency its tuning model puts at a base plus one hop per ring step,
  ``base + 2(n - 1) x hop`` (NCCL src/graph/tuning.cc, ``baseLat`` ring LL 3.6 us and ``hwLat``
  PCI ring LL 1.0 us). Measured on 8 PCIe 5 RTX PRO 6000s behind switches: 24.1-24.6 us for
  256 B-64 KB (voipmonitor/rtx6kpro benchmarks/results.md, "Custom Allreduce vs NCCL"), which
  the model meets with a 1.46 us hop: :data:`PCIE_HOP_SECONDS` (among 4 of them it then gives
  12.4 us, where 13.2-14.7 us were measured: optimization/pcie-oneshot-allreduce.md there).
  vLLM's custom all-reduce is off on more than two PCIe-only GPUs, so NCCL's is the one that
  runs.
- **network** (a group or a pipeline spanning nodes): the GPUs' NICs, ``--internode`` each
  (default :data:`DEFAULT_INTERNODE_BYTES_PER_S`, one 400 Gb/s NIC per GPU as HGX nodes carry
  them), each node crossing of a ring step adding :data:`NETWORK_HOP_SECONDS` (measured on
  decode runs across nodes).

Every all-reduce moves 2(n - 1)/n of the message over the slowest link it crosses (ring,
Patarasuk & Yuan 2009) plus its latency; engines all-reduce twice per layer under tensor
parallelism (after attention and after the MLP, Megatron-LM's split), in 16-bit activations.
A pipeline hands each stage's activations on once per forward pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from kvcalc.engine.hardware import Accelerator

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment

LinkKind = Literal["scale-up", "pcie", "network"]

#: Bytes of one activation value moved between GPUs: engines exchange bf16/fp16 activations.
ACTIVATION_BYTES = 2
#: All-reduces per layer under tensor parallelism (after attention, after the MLP).
ALLREDUCES_PER_LAYER = 2

#: NCCL's ring LL base latency (src/graph/tuning.cc ``baseLat``, ring LL: 3.6 us).
NCCL_BASE_SECONDS = 3.6e-6
#: One ring step over PCIe: NCCL's tuning model says 1.0 us (``hwLat`` PCI ring LL); 1.46 us
#: meets the 24.1 us measured for a small all-reduce on 8 PCIe 5 GPUs (3.6 + 14 x 1.46).
PCIE_HOP_SECONDS = 1.46e-6
#: One node crossing of a small all-reduce's ring step, set on the two multi-node fit points of
#: tests/fixtures/decode_points.yaml (pairs of DGX Sparks over a 200 Gb/s ConnectX-7 cable:
#: vLLM Qwen3-235B-A22B at TP 2, 43.6 us; SGLang Qwen3.6-27B at TP 2, 221.5 us; their mean).
#: NCCL's tuning model puts a network step at 5 us (``hwLat`` NET tree LL); the engines'
#: decode all-reduces across nodes measure far slower, so the measured figure is the one used,
#: pending points from InfiniBand clusters.
NETWORK_HOP_SECONDS = 133e-6
#: One 400 Gb/s NIC per GPU (HGX H100/H200/B200 nodes' ConnectX-7), one direction.
DEFAULT_INTERNODE_BYTES_PER_S = 400 * 10**9 // 8


@dataclass(frozen=True)
class Link:
    """The link a group's traffic crosses: its kind, one direction's bytes per second per GPU,
    and the latency of one small all-reduce among ``ranks`` over it."""

    kind: LinkKind
    bytes_per_s: int
    allreduce_latency_seconds: float
    send_latency_seconds: float
    """One point-to-point hand-off (a pipeline send)."""


def scale_up_group(accelerator: Accelerator) -> int | None:
    """GPUs one scale-up domain joins: the node's (an HGX board's 8), two for a 2-way bridge;
    None: no limit is known."""
    if accelerator.node_gpus is not None:
        return accelerator.node_gpus
    return 2 if "bridge" in (accelerator.interconnect or "").lower() else None


def scale_up_joins(accelerator: Accelerator, ranks: int) -> bool:
    """Whether the scale-up link (NVLink, Infinity Fabric) joins ``ranks`` GPUs: a known
    bandwidth, and a node it spans (a 2-way bridge joins two)."""
    if accelerator.interconnect_bytes_per_s is None:
        return False
    group = scale_up_group(accelerator)
    return group is None or ranks <= group


def same_group(group: int | None, tp: int, stage: int) -> bool:
    """Whether every send from pipeline ``stage`` to the next stays among ``group`` GPUs (None:
    no limit): rank r of stage s, GPU s x tp + r with the stages' GPUs in order, sends to rank r
    of stage s + 1."""
    if group is None:
        return True
    return all((stage * tp + r) // group == ((stage + 1) * tp + r) // group for r in range(tp))


def nvlink(accelerator: Accelerator) -> bool:
    """Whether the part's scale-up link is NVLink (the fabric engines' custom all-reduce
    latencies were measured on: sglang PR #2904, H100)."""
    return "nvlink" in (accelerator.interconnect or "").lower()


def pcie_allreduce_latency(ranks: int) -> float:
    """NCCL's ring LL latency over PCIe among ``ranks`` GPUs: base + 2(n - 1) hops."""
    return NCCL_BASE_SECONDS + 2 * (ranks - 1) * PCIE_HOP_SECONDS


def intra_node_link(
    accelerator: Accelerator, ranks: int, scale_up_latency: float
) -> Link | None:
    """The link among ``ranks`` GPUs of one node (None: no link speed is known)."""
    if scale_up_joins(accelerator, ranks):
        assert accelerator.interconnect_bytes_per_s is not None
        return Link(
            "scale-up",
            accelerator.interconnect_bytes_per_s // 2,
            scale_up_latency,
            scale_up_latency,
        )
    return pcie_link(accelerator, ranks)


def pcie_link(accelerator: Accelerator, ranks: int) -> Link | None:
    """PCIe among ``ranks`` GPUs: NCCL's ring (None: no PCIe speed is known)."""
    if accelerator.pcie_bytes_per_s is None:
        return None
    return Link(
        "pcie",
        accelerator.pcie_bytes_per_s // 2,
        pcie_allreduce_latency(ranks),
        NCCL_BASE_SECONDS + PCIE_HOP_SECONDS,
    )


def across_nodes(inner: Link | None, nodes: int, internode_bytes_per_s: int) -> Link:
    """A group spanning ``nodes`` nodes: its ring crosses the network 2(nodes - 1) times per
    all-reduce, at the NIC's rate when that is the slower."""
    inner_latency = 0.0 if inner is None else inner.allreduce_latency_seconds
    rate = internode_bytes_per_s if inner is None else min(inner.bytes_per_s, internode_bytes_per_s)
    return Link(
        "network",
        rate,
        inner_latency + 2 * (nodes - 1) * NETWORK_HOP_SECONDS,
        NCCL_BASE_SECONDS + NETWORK_HOP_SECONDS,
    )


def allreduce_seconds(
    message_bytes: int, tp: int, link_bytes_per_s: int | None, latency_seconds: float
) -> float:
    """One ring all-reduce of ``message_bytes`` among ``tp`` GPUs: 2(n-1)/n x bytes over one
    direction of the link, plus the link's latency. None of it at tp 1."""
    if tp == 1:
        return 0.0
    if link_bytes_per_s is None:
        raise ValueError("the GPU's link bandwidth is unknown: tensor parallelism cannot be timed")
    return 2 * (tp - 1) / tp * message_bytes / link_bytes_per_s + latency_seconds


# -------------------------------------------------------------------------- a deployment's links


def tp_nodes(dep: Deployment) -> int:
    """Nodes one tensor-parallel group spans (1 when the node size is not known)."""
    return dep.tp_nodes or 1


def replica_nodes(dep: Deployment) -> int:
    """Nodes one replica (tp x pp GPUs) spans (1 when the node size is not known)."""
    per_node = dep.gpus_per_node
    return 1 if per_node is None else -(-dep.gpus_per_replica // per_node)


def internode_rate(dep: Deployment) -> int:
    return dep.internode_bytes_per_s or DEFAULT_INTERNODE_BYTES_PER_S


def tp_link(dep: Deployment, scale_up_latency: float) -> Link | None:
    """The link the tensor-parallel group's all-reduces cross (None: no speed is known)."""
    nodes = tp_nodes(dep)
    per_node = dep.tp if nodes == 1 else -(-dep.tp // nodes)
    inner = intra_node_link(dep.gpus.accelerator, per_node, scale_up_latency)
    if nodes == 1:
        return inner
    return across_nodes(inner, nodes, internode_rate(dep))


def pp_links(dep: Deployment, scale_up_latency: float) -> list[Link | None]:
    """The link each of the pp - 1 stage boundaries crosses: the network between nodes, the
    scale-up link within the GPUs it joins (a 2-way bridge joins GPUs 2k and 2k + 1 only, so pp
    4 at tp 1 on bridged pairs crosses PCIe between the pairs), else PCIe."""
    boundaries = dep.pp - 1
    network = across_nodes(None, 2, internode_rate(dep))
    if tp_nodes(dep) > 1:
        return [network] * boundaries
    acc = dep.gpus.accelerator
    joined, pcie = intra_node_link(acc, 2, scale_up_latency), pcie_link(acc, 2)
    bridge = scale_up_group(acc) if scale_up_joins(acc, 2) else 1

    def crossed(stage: int) -> Link | None:
        if not same_group(dep.gpus_per_node, dep.tp, stage):
            return network
        return joined if same_group(bridge, dep.tp, stage) else pcie

    return [crossed(stage) for stage in range(boundaries)]


def link_kind(dep: Deployment) -> str:
    """What the replica's traffic crosses at its slowest: ``none`` (one GPU), ``scale-up``,
    ``pcie`` or ``network``; ``unknown`` without a link speed."""
    if dep.gpus_per_replica == 1:
        return "none"
    if replica_nodes(dep) > 1:
        return "network"
    # The whole replica: a pipeline over more GPUs than a bridge joins crosses PCIe somewhere.
    link = intra_node_link(dep.gpus.accelerator, max(dep.gpus_per_replica, 2), 0.0)
    return "unknown" if link is None else link.kind
