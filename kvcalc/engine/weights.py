"""Weights: parameter counts from the architecture, weight bytes per GPU, bytes read per decode.

Every layer is described as a list of weight tensors (:class:`Tensor`). Each tensor knows its
*role* (embedding, mixer, MLP, routed experts, ...) and how tensor parallelism splits it, so that
parameter counts, bytes per GPU under TP/PP and bytes read per decode step all come from one
description of the architecture.

What is counted (shapes from the Hugging Face transformers modeling code of each family):

- embeddings: vocab x hidden; the LM head another vocab x hidden unless tied;
- each mixer's own tensors (:meth:`~kvcalc.engine.mixers.base.Mixer.weight_tensors`; the
  modules of :mod:`kvcalc.engine.mixers` list them per kind);
- feed-forward: gate/up/down (gated) or up/down, routed and shared experts, the router;
- norms: two RMSNorms of ``hidden`` per layer plus the final norm.

Left out on purpose, each well under 0.2% of any registry model: linear-layer biases (Qwen2.5
QKV bias, gpt-oss attention and expert biases, Mamba conv/dt biases), per-head QK-norms (Qwen3,
Gemma-3), extra sandwich norms (Gemma-2/3), Jamba's dt/B/C norms, gpt-oss attention-sink logits,
DeepSeek's router correction bias, Qwen3-Next's shared-expert gate and the output gate of its
gated-attention layers (an extra hidden x q_heads x head_dim per attention layer, which the spec
does not describe). Vision towers and multi-token-prediction modules are not part of the spec.

Tensor parallelism (Megatron-style, as vLLM shards these layers): projections are split by heads
(query heads, KV heads, value heads), MLPs and every expert by intermediate rows, Mamba by
d_inner, the embedding and LM head by vocabulary rows (vocab-parallel). Norms, the router and the
MLA down-projections (q_a, kv_a) are replicated on every rank. A dimension that does not divide
evenly gives some ranks one unit more; we report the largest rank (ceil), and when KV heads are
fewer than the ranks every rank holds one whole head (vLLM replicates them). Routed experts are
split by TP, not expert parallelism. vLLM also pads the vocabulary to a multiple of 64 before
splitting it, which changes a rank by fewer than 64 rows; we do not model that padding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from kvcalc.engine.spec import DenseMLP, Mixer, ModelSpec, MoE
from kvcalc.engine.tensors import Role, Tensor, replicated
from kvcalc.engine.units import DType, dtype

# --------------------------------------------------------------------------------------------
# Tensors of the feed-forward blocks


def mlp_matrices(gated: bool) -> int:
    """Matrices of hidden x intermediate in one MLP: gate, up, down (gated) or up, down."""
    return 3 if gated else 2


def dense_mlp_tensors(mlp: DenseMLP, hidden: int) -> tuple[Tensor, ...]:
    return (Tensor("mlp", mlp.intermediate_size, mlp_matrices(mlp.gated) * hidden),)


def expert_params(moe: MoE, hidden: int) -> int:
    """Parameters of one routed expert."""
    return mlp_matrices(moe.gated) * hidden * moe.intermediate_size


def moe_tensors(moe: MoE, hidden: int) -> tuple[Tensor, ...]:
    per_row = mlp_matrices(moe.gated) * hidden
    tensors = [
        # Every expert split by intermediate rows across the TP ranks (vLLM FusedMoE without EP).
        Tensor("routed_experts", moe.intermediate_size, moe.experts * per_row),
        replicated("router", hidden * moe.experts),
    ]
    if moe.shared_experts:
        tensors.append(
            Tensor("shared_experts", moe.shared_intermediate_size, moe.shared_experts * per_row)
        )
    return tuple(tensors)


# --------------------------------------------------------------------------------------------
# A whole model


def layer_tensors(model: ModelSpec, layer: int) -> tuple[Tensor, ...]:
    """The weights of one decoder layer: mixer, feed-forward and its two norms."""
    return _layer_tensors(model.mixer_at(layer), model.ffn_at(layer), model.hidden_size)


@lru_cache(maxsize=1024)
def _layer_tensors(mixer: Mixer, ffn: DenseMLP | MoE, hidden: int) -> tuple[Tensor, ...]:
    # Layers repeat (a model has a handful of distinct ones), so each is described once.
    ffn_tensors = (
        moe_tensors(ffn, hidden) if isinstance(ffn, MoE) else dense_mlp_tensors(ffn, hidden)
    )
    return (
        *mixer.weight_tensors(hidden),
        *ffn_tensors,
        replicated("norm", 2 * hidden),  # pre-mixer and pre-FFN norms
    )


def embedding_tensor(model: ModelSpec) -> Tensor:
    return Tensor("embedding", model.vocab_size, model.hidden_size)


def head_tensors(model: ModelSpec) -> tuple[Tensor, ...]:
    """The final norm and, unless tied to the embedding, the LM head."""
    norm = replicated("norm", model.hidden_size)
    if model.tied_embeddings:
        return (norm,)
    return (norm, Tensor("lm_head", model.vocab_size, model.hidden_size))


def model_tensors(model: ModelSpec) -> tuple[Tensor, ...]:
    layers = (t for i in range(model.num_layers) for t in layer_tensors(model, i))
    return (embedding_tensor(model), *layers, *head_tensors(model))


# --------------------------------------------------------------------------------------------
# Parameter counts


@dataclass(frozen=True)
class ParamCounts:
    """Parameters of a model by component."""

    embedding: int
    lm_head: int
    """0 when the head is tied to the embedding."""
    mixers: int
    """Attention projections and recurrent mixers (Mamba, Gated DeltaNet, lightning)."""
    dense_mlp: int
    routed_experts: int
    routed_experts_active: int
    """The top_k routed experts one token uses, over all MoE layers."""
    shared_experts: int
    router: int
    norms: int

    @property
    def non_expert(self) -> int:
        """Everything but the routed experts (read by every token)."""
        return (
            self.embedding
            + self.lm_head
            + self.mixers
            + self.dense_mlp
            + self.shared_experts
            + self.router
            + self.norms
        )

    @property
    def total(self) -> int:
        return self.non_expert + self.routed_experts

    @property
    def active(self) -> int:
        """Parameters one token uses: top_k routed experts plus everything that is not an expert,
        embedding table and LM head included."""
        return self.non_expert + self.routed_experts_active

    @property
    def active_without_embedding(self) -> int:
        """``active`` less the embedding table, of which a token only looks up one row (the
        convention of the gpt-oss model card's "active parameters")."""
        return self.active - self.embedding

    @property
    def active_non_embedding(self) -> int:
        """``active`` less the embedding table and the LM head (the "non-embedding" parameters
        of scaling-law papers; MiniMax's and GLM's active figures match this count)."""
        return self.active - self.embedding - self.lm_head


@lru_cache(maxsize=64)
def param_counts(model: ModelSpec) -> ParamCounts:
    """Count the parameters of ``model`` by component. Cached: a plan search times hundreds of
    layouts of one model, and the count depends on the (frozen) model alone."""
    by_role: dict[str, int] = {}
    for tensor in model_tensors(model):
        by_role[tensor.role] = by_role.get(tensor.role, 0) + tensor.params
    active_experts = sum(
        ffn.top_k * expert_params(ffn, model.hidden_size)
        for ffn in (model.ffn_at(i) for i in range(model.num_layers))
        if isinstance(ffn, MoE)
    )
    return ParamCounts(
        embedding=by_role.get("embedding", 0),
        lm_head=by_role.get("lm_head", 0),
        mixers=by_role.get("mixer", 0),
        dense_mlp=by_role.get("mlp", 0),
        routed_experts=by_role.get("routed_experts", 0),
        routed_experts_active=active_experts,
        shared_experts=by_role.get("shared_experts", 0),
        router=by_role.get("router", 0),
        norms=by_role.get("norm", 0),
    )


# --------------------------------------------------------------------------------------------
# Weight bytes


@dataclass(frozen=True)
class WeightPrecision:
    """The storage dtype of each part of a model.

    Quantized checkpoints rarely quantize everything: DeepSeek-V3's FP8 release keeps the
    embedding, LM head, norms and router in bf16; gpt-oss stores only its routed experts in
    MXFP4 and the rest in bf16. ``uniform`` stores everything in one dtype.
    """

    experts: DType
    """Routed experts."""
    layers: DType
    """Mixer projections, dense MLPs and shared experts."""
    other: DType
    """Embedding, LM head, norms and router."""

    @classmethod
    def uniform(cls, dtype: DType) -> WeightPrecision:
        return cls(dtype, dtype, dtype)

    @classmethod
    def quantized_layers(cls, dtype: DType, keep: DType) -> WeightPrecision:
        """Layer matrices (experts included) in ``dtype``; embeddings, head, norms, router in
        ``keep`` (the usual FP8 / INT8 / INT4 checkpoint layout)."""
        return cls(dtype, dtype, keep)

    def dtype_for(self, role: Role) -> DType:
        if role == "routed_experts":
            return self.experts
        if role in ("mixer", "mlp", "shared_experts"):
            return self.layers
        return self.other


def checkpoint_precision(model: ModelSpec, chosen: DType | None = None) -> WeightPrecision:
    """How a model's weights are stored at ``chosen`` (None: the model dtype), following how
    quantized checkpoints ship: 8- and 4-bit formats quantize the layer matrices and keep the
    embeddings, LM head, norms and router at the model dtype; MXFP4 quantizes the routed experts
    only (as gpt-oss ships), or the layers of a dense model; 16/32-bit dtypes apply to everything.
    """
    keep = dtype(model.default_dtype)
    if chosen is None or chosen.bits >= 16:
        return WeightPrecision.uniform(chosen or keep)
    if chosen.name == "mxfp4" and model.moe is not None:
        return WeightPrecision(experts=chosen, layers=keep, other=keep)
    return WeightPrecision.quantized_layers(chosen, keep)


def compute_dtype(precision: WeightPrecision) -> str:
    """The dtype the matmuls run in: FP8 weights run FP8 GEMMs; other quantized weights are
    dequantized to 16 bits by weight-only kernels, so they compute at the BF16 rate."""
    return "fp8" if precision.layers.name == "fp8" else "bf16"


def precision_name(precision: WeightPrecision) -> str:
    """``bf16``, or the distinct dtypes from the layers outwards (``mxfp4+bf16`` for gpt-oss)."""
    names = (precision.layers.name, precision.experts.name, precision.other.name)
    return "+".join(dict.fromkeys(names))


def as_precision(precision: DType | WeightPrecision) -> WeightPrecision:
    if isinstance(precision, WeightPrecision):
        return precision
    return WeightPrecision.uniform(precision)


def bytes_of(params_by_role: Mapping[Role, Fraction | int], precision: WeightPrecision) -> int:
    """Bytes of a set of parameters given per role: summed per dtype, rounded up once per dtype."""
    bits_by_dtype: dict[DType, Fraction] = {}
    for role, params in params_by_role.items():
        dt = precision.dtype_for(role)
        bits_by_dtype[dt] = bits_by_dtype.get(dt, Fraction(0)) + params * dt.bits
    return sum(math.ceil(bits / 8) for bits in bits_by_dtype.values())


def params_by_role(tensors: tuple[Tensor, ...] | list[Tensor], tp: int = 1) -> dict[Role, int]:
    out: dict[Role, int] = {}
    for t in tensors:
        out[t.role] = out.get(t.role, 0) + t.params_per_rank(tp)
    return out


def weight_bytes(model: ModelSpec, precision: DType | WeightPrecision) -> int:
    """Bytes of all the weights of ``model`` (one copy, no parallelism)."""
    return bytes_of(params_by_role(model_tensors(model)), as_precision(precision))


def check_parallelism(model: ModelSpec, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise ValueError(
            f"tensor and pipeline parallel sizes must be at least 1 (got tp={tp}, pp={pp})"
        )
    if pp > model.num_layers:
        raise ValueError(
            f"pipeline parallel size {pp} exceeds the {model.num_layers} layers of {model.id}; "
            f"use at most {model.num_layers} stages"
        )


def pipeline_stages(num_layers: int, pp: int) -> tuple[range, ...]:
    """Layers of each pipeline stage, split as vLLM does (``get_pp_indices``).

    Each stage gets num_layers // pp layers; the remainder goes one each to the stages before the
    last, starting from the second-to-last, so the first stage (embedding) and the last stage
    (LM head) get an extra layer only when the remainder forces it.
    """
    sizes = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        sizes[-i] += 1
    starts = [sum(sizes[:s]) for s in range(pp)]
    return tuple(range(starts[s], starts[s] + sizes[s]) for s in range(pp))


@dataclass(frozen=True)
class StageWeights:
    """What one GPU of a pipeline stage holds (the most loaded tensor-parallel rank)."""

    stage: int
    layers: range
    params_per_gpu: int
    bytes_per_gpu: int


def stage_tensors(model: ModelSpec, layers: range, first: bool, last: bool) -> list[Tensor]:
    tensors = [t for i in layers for t in layer_tensors(model, i)]
    if first:
        tensors.append(embedding_tensor(model))
    if last:
        tensors.extend(head_tensors(model))
        if model.tied_embeddings and not first:
            # A tied head on another stage than the embedding needs its own copy of the matrix
            # (vLLM builds embed_tokens on the last PP rank too when tie_word_embeddings is set).
            tensors.append(Tensor("lm_head", model.vocab_size, model.hidden_size))
    return tensors


def stage_params_by_role(
    model: ModelSpec, layers: range, first: bool, last: bool, tp: int
) -> dict[Role, int]:
    """Parameters per role on one rank of a stage: :func:`stage_tensors` summed, with each
    distinct layer described once and multiplied by how often it repeats."""
    repeats: dict[tuple[Mixer, DenseMLP | MoE], int] = {}
    for i in layers:
        key = (model.mixer_at(i), model.ffn_at(i))
        repeats[key] = repeats.get(key, 0) + 1
    out: dict[Role, int] = {}
    for (mixer, ffn), n in repeats.items():
        for role, params in params_by_role(
            _layer_tensors(mixer, ffn, model.hidden_size), tp
        ).items():
            out[role] = out.get(role, 0) + params * n
    for role, params in params_by_role(stage_tensors(model, range(0), first, last), tp).items():
        out[role] = out.get(role, 0) + params
    return out


@lru_cache(maxsize=256)
def weights_per_gpu(
    model: ModelSpec, precision: DType | WeightPrecision, tp: int = 1, pp: int = 1
) -> tuple[StageWeights, ...]:
    """Weights on one GPU of each pipeline stage, under ``tp``-way tensor parallelism. Cached:
    a pure function of frozen values, and a plan search asks it again for every accelerator.

    The embedding lives on the first stage, the final norm and LM head on the last. A caller
    sizing a deployment takes the stage with the most bytes (see :func:`max_weight_bytes_per_gpu`).
    """
    check_parallelism(model, tp, pp)
    prec = as_precision(precision)
    stages = pipeline_stages(model.num_layers, pp)
    out = []
    for s, layers in enumerate(stages):
        by_role = stage_params_by_role(model, layers, s == 0, s == pp - 1, tp)
        out.append(StageWeights(s, layers, sum(by_role.values()), bytes_of(by_role, prec)))
    return tuple(out)


def max_weight_bytes_per_gpu(
    model: ModelSpec, precision: DType | WeightPrecision, tp: int = 1, pp: int = 1
) -> int:
    """Weight bytes on the most loaded GPU: the tightest stage's most loaded rank."""
    return max(s.bytes_per_gpu for s in weights_per_gpu(model, precision, tp, pp))


# --------------------------------------------------------------------------------------------
# Bytes read per decode step


def expected_distinct_experts(experts: int, top_k: int, batch: int) -> Fraction:
    """Expected number of distinct routed experts ``batch`` tokens touch in one MoE layer.

    Assumes uniform, independent routing: each token picks a uniformly random set of ``top_k``
    of the ``experts``, so one expert is missed by a token with probability 1 - k/E and by all
    tokens with (1 - k/E)^B; the expectation is E x (1 - (1 - k/E)^B). Real routers are skewed
    towards popular experts, which touches fewer distinct experts, so this is an upper estimate
    of the expert bytes read.

    Exact rational arithmetic (exactly k at B = 1), except that once E x (1 - k/E)^B is below
    2^-96 of an expert (far below one byte of any model) the result is E itself: the exact
    fraction would have a denominator of B x log2(E) bits.
    """
    if batch < 1:
        raise ValueError(f"batch must be at least 1 (got {batch})")
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be between 1 and experts (got {top_k} of {experts})")
    if top_k == experts:
        return Fraction(experts)
    log2_miss_per_token = math.log2(experts / (experts - top_k))
    if batch * log2_miss_per_token > _NEGLIGIBLE_BITS + math.log2(experts):
        return Fraction(experts)
    miss = Fraction(experts - top_k, experts)
    return experts * (1 - miss**batch)


#: Expected untouched experts below 2^-96 count as none (see expected_distinct_experts).
_NEGLIGIBLE_BITS = 96


@lru_cache(maxsize=256)
def decode_weight_bytes(
    model: ModelSpec, batch: int, precision: DType | WeightPrecision, tp: int = 1
) -> int:
    """Weight bytes read per decode step of ``batch`` tokens, per GPU of ``tp``-way TP (cached,
    as :func:`weights_per_gpu`).

    Every weight is read once per step, except:

    - the routed experts: each MoE layer reads only the distinct experts the batch touches
      (:func:`expected_distinct_experts`, uniform routing assumed);
    - an untied embedding table: the step looks up one row per token, min(batch, vocab) rows
      (per rank, at most the rank's vocabulary shard). A tied table is read whole by the head.
    """
    check_parallelism(model, tp, 1)
    if batch < 1:
        raise ValueError(f"batch must be at least 1 (got {batch})")
    prec = as_precision(precision)
    tensors = [t for i in range(model.num_layers) for t in layer_tensors(model, i)]
    tensors.extend(head_tensors(model))
    if model.tied_embeddings:
        tensors.append(embedding_tensor(model))
    read: dict[Role, Fraction | int] = dict(
        params_by_role([t for t in tensors if t.role != "routed_experts"], tp)
    )
    if not model.tied_embeddings:
        rows = min(batch, -(-model.vocab_size // tp))
        read["embedding"] = rows * model.hidden_size
    moe = model.moe
    moe_layers = sum(isinstance(model.ffn_at(i), MoE) for i in range(model.num_layers))
    if moe is not None and moe_layers:
        # Every MoE layer shares the one MoE spec, so the expectation is computed once.
        expert_on_rank = -(-moe.intermediate_size // tp) * mlp_matrices(moe.gated)
        expert_on_rank *= model.hidden_size
        touched = expected_distinct_experts(moe.experts, moe.top_k, batch)
        read["routed_experts"] = moe_layers * touched * expert_on_rank
    return bytes_of(read, prec)
