"""The tensor-parallel shards vLLM refuses to load from a block-scaled FP8 checkpoint (the
``-FP8`` releases of Qwen, DeepSeek, Kimi and MiniMax: one scale per 128 x 128 tile,
``weight_block_size`` in their config.json). A rank's slice of a matrix must hold whole tiles
along the dimension TP splits, or the engine stops while it builds the model.

Read in the wheels (``Fp8LinearMethod.create_weights`` / ``validate_fp8_block_shape`` and
``Fp8MoEMethod.create_weights`` / ``validate_fp8_block_shape_moe``,
vllm/model_executor/layers/quantization/fp8.py and utils/fp8_utils.py of 0.10.2, 0.13.0, 0.14.0,
0.19.0, 0.27.1, 0.28.0, 0.29.0 and 0.34.0; ``ColumnParallelLinear``, layers/linear.py):

- **row-parallel layers** (o_proj, down_proj, a Gated DeltaNet's out_proj: TP splits the
  inputs): the rank's inputs a multiple of ``block_k`` ("Weight input_size_per_partition = 64
  is not divisible by weight quantization block_k = 128"), every release;
- **column-parallel layers** (q/k/v, gate/up): each output partition a multiple of ``block_n``
  up to 0.13; from 0.14 a merged layer with a partition off the tiles is let through
  (``_maybe_allow_fp8_block_shape_mismatch``), and the registry's other column layers split
  whole heads;
- **routed experts**: the rank's intermediate rows a multiple of ``block_n`` and, under TP, of
  ``block_k`` ("The output_size of gate's and up's weight = 192 is not divisible by weight
  quantization block_n = 128"); from 0.29 the scales are refined to a finer tile when
  gcd(block_n, block_k, rows, hidden) >= 32 (``refine_fp8_moe_block_shape``,
  layers/fused_moe/oracle/fp8.py of 0.29.0 and 0.34.0), and only smaller rows are refused.
  Expert parallelism holds whole experts, so nothing is split.

Public reports: Qwen3.6-35B-A3B-FP8 at TP 8 fails on its 512-row shared expert (64 a rank;
vllm PR #52915, 2026-08), Qwen3-Next-80B-A3B-FP8 at TP 8 the same in SGLang (sglang #10852).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from kvcalc.engine.quant import BlockScaled
from kvcalc.engine.vllm_releases import dotted_version
from kvcalc.engine.weights import as_precision, model_tensor_counts

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.weights import WeightPrecision

#: The first release that lets a merged column layer's partitions off the tiles (0.14.0).
MERGED_MISMATCH_SINCE = (0, 14, 0)
#: The first release that refines an expert shard's block scales (0.29.0).
EXPERT_REFINE_SINCE = (0, 29, 0)
#: The finest tile the refinement goes to.
EXPERT_REFINE_MIN = 32


def expert_rows_refusal(
    model: ModelSpec, weights: WeightPrecision, moe_ranks: int, tp: int,
    expert_parallel: bool, version: tuple[int, int, int],
) -> str | None:
    """Why vLLM ``version`` cannot load the routed experts' shards (None: it can)."""
    fmt = weights.format_for("routed_experts")
    moe = model.moe
    if moe is None or expert_parallel or not isinstance(fmt, BlockScaled):
        return None
    if moe.intermediate_size % moe_ranks:
        return None  # not a split kvcalc sizes at all (check_parallelism refuses it)
    rows = moe.intermediate_size // moe_ranks
    if rows % fmt.block_rows == 0 and (tp == 1 or rows % fmt.block_cols == 0):
        return None
    refine = math.gcd(fmt.block_rows, fmt.block_cols, rows, model.hidden_size)
    if version >= EXPERT_REFINE_SINCE and refine >= EXPERT_REFINE_MIN:
        return None
    return (f"its routed experts' {moe.intermediate_size} rows are {rows} a rank over "
            f"{moe_ranks} ranks, not whole {fmt.block_rows}x{fmt.block_cols} scale tiles")


def layer_shard_refusal(
    model: ModelSpec, weights: WeightPrecision, tp: int, version: tuple[int, int, int]
) -> str | None:
    """Why vLLM ``version`` cannot load a block-FP8 layer matrix split ``tp`` ways (None: it
    can): the first row-parallel input, or (before 0.14) column-parallel output, off the tiles."""
    if tp == 1:
        return None
    for tensor, _ in model_tensor_counts(model):
        fmt = weights.format_for(tensor.role)
        if (not isinstance(fmt, BlockScaled) or tensor.cols is None or tensor.units == 1
                or tensor.role == "routed_experts" or tensor.units % tp):
            continue
        rows, cols = tensor.rank_matrix(tp)
        if tensor.split_cols and cols % fmt.block_cols:
            return (f"its {_role_name(tensor.role)} take {cols} inputs a rank, not whole "
                    f"{fmt.block_cols}-wide scale tiles")
        if (not tensor.split_cols and version < MERGED_MISMATCH_SINCE
                and rows % fmt.block_rows):
            return (f"its {_role_name(tensor.role)} give {rows} outputs a rank, not whole "
                    f"{fmt.block_rows}-row scale tiles")
    return None


def _role_name(role: str) -> str:
    return {"mixer": "attention projections", "mlp": "MLP projections",
            "shared_experts": "shared experts"}.get(role, role)


def fp8_shard_refusal(dep: Deployment, version: tuple[int, int, int]) -> str | None:
    """Why vLLM ``version`` cannot load ``dep``'s block-FP8 weights at its tp (None: it can),
    with the fix: a tp that loads, expert parallelism, or the release that refines the experts'
    tiles. A template naming those inputs (``{tp}``)."""
    weights = as_precision(dep.weights)
    tiled = (weights.layers, weights.experts)
    if dep.moe_ranks == 1 or not any(isinstance(f, BlockScaled) for f in tiled):
        return None  # nothing split, or no tiles: skip the walk over the tensors (every start)

    def why(tp: int, moe_ranks: int, release: tuple[int, int, int]) -> str | None:
        return layer_shard_refusal(dep.model, weights, tp, release) or expert_rows_refusal(
            dep.model, weights, moe_ranks, tp, dep.expert_parallel, release
        )

    reason = why(dep.tp, dep.moe_ranks, version)
    if reason is None:
        return None
    fixes = []
    per_tp = dep.moe_ranks // dep.tp
    smaller = next((t for t in range(dep.tp - 1, 0, -1)
                    if dep.tp % t == 0 and why(t, t * per_tp, version) is None), None)
    if smaller is not None:
        fixes.append(f"{{tp}} {smaller}")
    if layer_shard_refusal(dep.model, weights, dep.tp, version) is None:
        if dep.model.moe is not None and not dep.expert_parallel:
            fixes.append("{enable_expert_parallel} (whole experts a rank)")
        refined = why(dep.tp, dep.moe_ranks, EXPERT_REFINE_SINCE) is None
        if version < EXPERT_REFINE_SINCE and refined:
            fixes.append("{vllm_version} 0.29 or later (it refines the tiles)")
    release = dotted_version(version)
    fix = ", ".join(fixes[:-1]) + " or " + fixes[-1] if len(fixes) > 1 else "".join(fixes)
    return (f"vLLM {release} cannot load {dep.model.id}'s block-FP8 weights at tp {dep.tp}: "
            f"{reason}; give " + (fix or "a tp that splits whole tiles"))
