"""How a deployment is laid out over its GPUs, in the same words and JSON keys for every command:
the split, why the default tp is what it is, a tensor-parallel group across nodes, and KV heads
replicated over more ranks than there are heads.

JSON keys (merged into each command's deployment object): ``replicas``, ``tp_given`` (false:
kvcalc chose tp), ``tp_reason`` (why the chosen tp is not every GPU of a stage, or null),
``tp_nodes`` (nodes one tensor-parallel group spans; null when the registry has no node size
for the GPU), ``kv_head_copies`` (ranks holding each KV head; null without KV heads) and
``layout_notes`` (the notes the text output prints). Only figures the text shows are keys: the
node size and the heads are in `kvcalc gpus` and `kvcalc models`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.hardware import GpuSet


def gpus_id(gpus: GpuSet) -> str:
    """The GPU set as a user types it to ``--gpus`` (``8xH100``)."""
    return f"{gpus.count}x{gpus.accelerator.id.upper()}"


def gpus_payload(gpus: GpuSet) -> dict[str, Any]:
    """JSON ``gpus`` in every command: ``id`` (``8xH100``, what ``--gpus`` takes), ``label``
    (``8x NVIDIA H100 SXM5 80GB``, what the text output prints), ``accelerator`` (the registry
    id, ``h100``) and ``count``."""
    return {
        "id": gpus_id(gpus),
        "label": str(gpus),
        "accelerator": gpus.accelerator.id,
        "count": gpus.count,
    }


def split_label(dep: Deployment) -> str:
    """``tp 4 x 2 replicas``, ``tp 4 x pp 2``, ``tp 8``."""
    parts = [f"tp {dep.tp}", *([f"pp {dep.pp}"] if dep.pp > 1 else [])]
    replicas = [f"{dep.replicas} replicas"] if dep.replicas > 1 else []
    return " x ".join([*parts, *replicas])


def node_note(dep: Deployment) -> str | None:
    nodes = dep.tp_nodes
    if nodes is None or nodes < 2:
        return None
    link = dep.gpus.accelerator.interconnect or "in-node link"
    return (
        f"tp {dep.tp} spans {nodes} nodes of {dep.gpus_per_node} GPUs: its all-reduces cross "
        f"the inter-node network, slower than the {link} within a node"
    )


def replication_note(dep: Deployment) -> str | None:
    copies, heads = dep.kv_head_copies, dep.kv_heads
    if copies is None or heads is None or copies < 2:
        return None
    return (
        f"tp {dep.tp} over {heads} KV heads: each KV head is replicated on {copies} ranks, "
        f"so the KV cache per GPU stops shrinking beyond tp {heads}"
    )


def unified_note(dep: Deployment) -> str | None:
    """On a unified-memory part the engine's share is of the system's memory, which the OS and
    other processes hold part of: the share a discrete GPU takes may not be free at start-up."""
    acc = dep.gpus.accelerator
    if not acc.unified_memory:
        return None
    from kvcalc.engine.units import GiB

    return (
        f"{acc.id} memory is unified: the CPU, the OS and other processes share its "
        f"{dep.memory_bytes_per_gpu / GiB:,.2f} GiB with the engine, so leave them room in the "
        "engine's share (vLLM up to 0.33 starts only when the OS reports the share it requests "
        "available, MemAvailable; 0.34 sizes its cache from what is free after warmup)"
    )


def layout_notes(dep: Deployment) -> list[str]:
    """What the text output says about the layout (nothing for a plain one)."""
    chosen = f"layout {split_label(dep)}: {dep.tp_reason}" if dep.tp_reason else None
    notes = (chosen, node_note(dep), replication_note(dep), unified_note(dep))
    return [n for n in notes if n]


def layout_note(dep: Deployment) -> str | None:
    """One table row's layout note (the whole-registry `batch`): the split when it is not the
    plain one, and a group across nodes; None when there is nothing to say."""
    parts = [
        *([f"{split_label(dep)} ({dep.tp_reason})"] if dep.tp_reason else []),
        *([n] if (n := node_note(dep)) else []),
    ]
    return "; ".join(parts) or None


def layout_payload(dep: Deployment) -> dict[str, Any]:
    return {
        "replicas": dep.replicas,
        "tp_given": dep.tp_given,
        "tp_reason": dep.tp_reason,
        "tp_nodes": dep.tp_nodes,
        "kv_head_copies": dep.kv_head_copies,
        "layout_notes": layout_notes(dep),
    }
