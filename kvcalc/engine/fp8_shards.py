"""The tensor-parallel shards vLLM and SGLang refuse to load from a block-scaled FP8 checkpoint
(the ``-FP8`` releases of Qwen, DeepSeek, Kimi and MiniMax: one scale per 128 x 128 tile,
``weight_block_size`` in their config.json). A rank's slice of a matrix must hold whole tiles
along the dimension TP splits, or the engine stops while it builds the model. One walk over the
model's tensors; each engine's rules (:class:`ShardRules`) say which checks it makes.

vLLM, read in the wheels (``Fp8LinearMethod.create_weights`` / ``validate_fp8_block_shape`` and
``Fp8MoEMethod.create_weights`` / ``validate_fp8_block_shape_moe``,
vllm/model_executor/layers/quantization/fp8.py and utils/fp8_utils.py of 0.10.2, 0.13.0, 0.14.0,
0.19.0, 0.27.1, 0.28.0, 0.29.0 and 0.34.0; ``ColumnParallelLinear``, layers/linear.py):

- **row-parallel layers** (o_proj, down_proj: TP splits the inputs): the rank's inputs a
  multiple of ``block_k`` ("Weight input_size_per_partition = 64
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

SGLang, read in the wheels (``Fp8LinearMethod.validate_block_quant_shapes`` and
``Fp8MoEMethod.create_weights``, sglang/srt/layers/quantization/fp8.py of 0.4.3, 0.5.1 and
0.5.23; ``ColumnParallelLinear`` and ``QKVParallelLinear``, layers/linear.py): the row-parallel
check as vLLM's; every output partition of a split column layer checked in every release, as
vLLM up to 0.13; the routed experts' rows as vLLM before 0.29, never refined (ROCm's aiter
path pads the rows instead, not modelled); ``--ep-size`` holds them whole, and its shared
experts stay split over tp. Under DP attention the attention layers split over tp / dp ranks,
the rest over tp.

Not checked, in either engine: a Gated DeltaNet's projections (in_proj, out_proj), which
kvcalc describes without a matrix shape (sglang #19045: Qwen3.5-397B-A17B-FP8 at TP 8 stops on
its in_proj_ba in SGLang, "output_partition_size = 8").

Public reports: Qwen3.6-35B-A3B-FP8 at TP 8 fails on its 512-row shared expert (64 a rank;
vllm PR #52915, 2026-08), Qwen3-Next-80B-A3B-FP8 at TP 8 on its 512 expert rows in SGLang
(sglang #10852: "The output_size of gate's and up's weight = 64 is not divisible").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvcalc.engine.quant import BlockScaled
from kvcalc.engine.vllm_releases import dotted_version
from kvcalc.engine.weights import as_precision, model_tensor_counts

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.weights import WeightPrecision

#: The first vLLM release that lets a merged column layer's partitions off the tiles (0.14.0).
MERGED_MISMATCH_SINCE = (0, 14, 0)
#: The first vLLM release that refines an expert shard's block scales (0.29.0).
EXPERT_REFINE_SINCE = (0, 29, 0)
#: The finest tile the refinement goes to.
EXPERT_REFINE_MIN = 32


@dataclass(frozen=True)
class ShardRules:
    """Which of the shard checks an engine release makes."""

    engine: str
    """The release as the refusal names it: "vLLM 0.28.0", "SGLang 0.5.23"."""
    column_partitions: bool
    """Every output partition of a split column layer is checked (vLLM up to 0.13, SGLang)."""
    refines_experts: bool
    """An expert shard off the tiles is refined to a finer one where it can be (vLLM 0.29+)."""
    attention_dp: int = 1
    """SGLang's DP attention: the attention layers split over tp / this many ranks."""


def vllm_rules(version: tuple[int, int, int]) -> ShardRules:
    return ShardRules(
        f"vLLM {dotted_version(version)}",
        column_partitions=version < MERGED_MISMATCH_SINCE,
        refines_experts=version >= EXPERT_REFINE_SINCE,
    )


def sglang_rules(version: str, attention_dp: int = 1) -> ShardRules:
    return ShardRules(f"SGLang {version}", column_partitions=True, refines_experts=False,
                      attention_dp=attention_dp)


def expert_rows_refusal(
    model: ModelSpec, weights: WeightPrecision, moe_ranks: int, tp: int,
    expert_parallel: bool, rules: ShardRules,
) -> str | None:
    """Why the routed experts' shards cannot be loaded (None: they can)."""
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
    if rules.refines_experts and refine >= EXPERT_REFINE_MIN:
        return None
    return (f"its routed experts' {moe.intermediate_size} rows are {rows} a rank over "
            f"{moe_ranks} ranks, not whole {fmt.block_rows}x{fmt.block_cols} scale tiles")


def layer_shard_refusal(
    model: ModelSpec, weights: WeightPrecision, tp: int, rules: ShardRules
) -> str | None:
    """Why a block-FP8 layer matrix split ``tp`` ways cannot be loaded (None: it can): the
    first row-parallel input, or (where the rules check them) column-parallel output
    partition, off the tiles."""
    for tensor, _ in model_tensor_counts(model):
        fmt = weights.format_for(tensor.role)
        ranks = max(1, tp // rules.attention_dp) if tensor.role == "mixer" else tp
        if (ranks == 1 or not isinstance(fmt, BlockScaled) or tensor.cols is None
                or tensor.units == 1 or tensor.role == "routed_experts" or tensor.units % ranks):
            continue
        rows, cols = tensor.rank_matrix(ranks)
        if tensor.split_cols and cols % fmt.block_cols:
            return (f"its {_role_name(tensor.role)} take {cols} inputs a rank, not whole "
                    f"{fmt.block_cols}-wide scale tiles")
        partition = rows // tensor.stacked
        if not tensor.split_cols and rules.column_partitions and partition % fmt.block_rows:
            return (f"its {_role_name(tensor.role)} give {partition} outputs a rank, not "
                    f"whole {fmt.block_rows}-row scale tiles")
    return None


def _role_name(role: str) -> str:
    return {"mixer": "attention projections", "mlp": "MLP projections",
            "shared_experts": "shared experts"}.get(role, role)


def _tiled(dep: Deployment) -> WeightPrecision | None:
    """``dep``'s weights where some part is block-scaled and split (None: nothing to check,
    which skips the walk over the tensors that every start would make)."""
    weights = as_precision(dep.weights)
    if dep.moe_ranks == 1 or not any(
        isinstance(f, BlockScaled) for f in (weights.layers, weights.experts)
    ):
        return None
    return weights


def _refusal(dep: Deployment, rules: ShardRules, reason: str, fixes: list[str]) -> str:
    fix = ", ".join(fixes[:-1]) + " or " + fixes[-1] if len(fixes) > 1 else "".join(fixes)
    return (f"{rules.engine} cannot load {dep.model.id}'s block-FP8 weights at tp {dep.tp}: "
            f"{reason}; give " + (fix or "a tp that splits whole tiles"))


def _smaller_tp(dep: Deployment, loads: Callable[[int, int], bool]) -> str | None:
    """The largest divisor of tp below it at which ``loads(tp, moe_ranks)``, as a fix."""
    per_tp = dep.moe_ranks // dep.tp
    smaller = next((t for t in range(dep.tp - 1, 0, -1)
                    if dep.tp % t == 0 and loads(t, t * per_tp)), None)
    return None if smaller is None else f"{{tp}} {smaller}"


def shard_refusal(
    dep: Deployment, rules: ShardRules, expert_fix: str,
    refining: tuple[ShardRules, str] | None = None,
) -> str | None:
    """Why the engine of ``rules`` cannot load ``dep``'s block-FP8 weights at its tp (None: it
    can), with the fixes: a smaller tp that loads and, where only the experts' rows fail,
    ``expert_fix`` (whole experts a rank) and a release whose ``refining`` rules refine the
    tiles (that release's rules and the fix). A template naming those inputs (``{tp}``)."""
    weights = _tiled(dep)
    if weights is None:
        return None

    def experts(tp: int, moe_ranks: int, rules: ShardRules = rules) -> str | None:
        return expert_rows_refusal(
            dep.model, weights, moe_ranks, tp, dep.expert_parallel, rules
        )

    layer = layer_shard_refusal(dep.model, weights, dep.tp, rules)
    reason = layer or experts(dep.tp, dep.moe_ranks)
    if reason is None:
        return None
    fixes = [f for f in [_smaller_tp(dep, lambda t, r: (
        layer_shard_refusal(dep.model, weights, t, rules) or experts(t, r)) is None)] if f]
    if layer is None:  # only the experts' rows fail, so they split under no expert parallelism
        fixes.append(expert_fix)
        if refining is not None and experts(dep.tp, dep.moe_ranks, refining[0]) is None:
            fixes.append(refining[1])
    return _refusal(dep, rules, reason, fixes)


def vllm_shard_refusal(dep: Deployment, version: tuple[int, int, int]) -> str | None:
    """:func:`shard_refusal` under vLLM ``version``'s rules: the fixes a tp that loads,
    ``--enable-expert-parallel``, or 0.29, which refines the experts' tiles."""
    rules = vllm_rules(version)
    refining = None if rules.refines_experts else (
        vllm_rules(EXPERT_REFINE_SINCE), "{vllm_version} 0.29 or later (it refines the tiles)"
    )
    return shard_refusal(dep, rules, "{enable_expert_parallel} (whole experts a rank)", refining)


def sglang_shard_refusal(dep: Deployment, rules: ShardRules) -> str | None:
    """:func:`shard_refusal` under SGLang's ``rules``: the fixes a tp that loads, or
    ``--ep-size`` equal to it (``{ep_size}``)."""
    return shard_refusal(dep, rules, f"{{ep_size}} {dep.tp} (whole experts a rank)")
