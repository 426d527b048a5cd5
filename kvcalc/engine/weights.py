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
does not describe). Multi-token-prediction modules are not part of the spec. A multimodal
checkpoint's vision tower and projector (:class:`VisionEncoder`) are counted on the first
pipeline stage, never as active parameters nor as bytes read per decode step.

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
from fractions import Fraction
from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

from kvcalc.engine.quant import MXFP4, CheckpointFormat, WeightFormat, as_format, plain
from kvcalc.engine.spec import DenseMLP, Mixer, ModelSpec, MoE
from kvcalc.engine.tensors import Role, Tensor, linear, replicated, row_parallel
from kvcalc.engine.units import DType, dtype

if TYPE_CHECKING:
    from kvcalc.engine.audio import ConformerAudioEncoder
    from kvcalc.engine.vision import VisionEncoder

# --------------------------------------------------------------------------------------------
# Tensors of the feed-forward blocks


def mlp_matrices(gated: bool) -> int:
    """Matrices of hidden x intermediate in one MLP: gate, up, down (gated) or up, down."""
    return 3 if gated else 2


def ffn_tensors(
    role: Role, units: int, matrices: int, hidden: int, gated: bool
) -> tuple[Tensor, ...]:
    """``matrices`` MLPs of ``units`` intermediate rows: gate and up ``[rows, hidden]``
    (column-parallel, one tensor per role so that every expert's rows stack) and down
    ``[hidden, rows]`` (row-parallel), as vLLM's MergedColumnParallelLinear / RowParallelLinear
    and FusedMoE split them by intermediate row."""
    up = 2 if gated else 1
    return (
        linear(role, units, up * matrices, hidden, stacked=up * matrices),
        row_parallel(role, units, matrices * hidden, 1),
    )


def dense_mlp_tensors(mlp: DenseMLP, hidden: int) -> tuple[Tensor, ...]:
    return ffn_tensors("mlp", mlp.intermediate_size, 1, hidden, mlp.gated)


def expert_params(moe: MoE, hidden: int) -> int:
    """Parameters of one routed expert."""
    return mlp_matrices(moe.gated) * hidden * moe.intermediate_size


def moe_tensors(moe: MoE, hidden: int) -> tuple[Tensor, ...]:
    tensors = [
        # Every expert split by intermediate rows across the TP ranks (vLLM FusedMoE without EP).
        *ffn_tensors("routed_experts", moe.intermediate_size, moe.experts, hidden, moe.gated),
        linear("router", 1, moe.experts, hidden),
    ]
    if moe.shared_experts:
        tensors.extend(
            ffn_tensors(
                "shared_experts",
                moe.shared_intermediate_size,
                moe.shared_experts,
                hidden,
                moe.gated,
            )
        )
    return tuple(tensors)


# --------------------------------------------------------------------------------------------
# A whole model


@lru_cache(maxsize=1024)
def _layer_tensors(mixer: Mixer, ffn: DenseMLP | MoE, hidden: int) -> tuple[Tensor, ...]:
    """The weights of one decoder layer: mixer, feed-forward and its two norms. Layers repeat
    (a model has a handful of distinct ones), so each is described once."""
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
    return (norm, linear("lm_head", model.vocab_size, 1, model.hidden_size))


@lru_cache(maxsize=64)
def encoder_tensors(enc: VisionEncoder) -> tuple[Tensor, ...]:
    """A vision tower and its projector, split as vLLM's SigLIP / Llama-4 vision modules split
    them: attention by heads (q/k/v column-parallel, o row-parallel), the MLP by intermediate
    rows; embeddings, norms, biases and the projector replicated (each well under 1% of it)."""
    head_dim = enc.hidden // enc.heads
    norm = (2 if enc.norm_bias else 1) * enc.hidden
    per_patch = (enc.image // enc.patch) ** 2 + int(enc.class_token)
    positions = (enc.position_rows or per_patch) if enc.position_table else 0
    kernel = enc.channels * enc.temporal_patch * enc.patch**2
    patch = kernel * enc.hidden + (enc.hidden if enc.patch_bias else 0)
    stem = patch + positions * enc.hidden + (enc.hidden if enc.class_token else 0)
    mlp_in = 2 if enc.gated_mlp else 1
    # Per block: the q/k/v/o biases, the MLP's biases, two norms.
    block_small = (
        (4 * enc.hidden if enc.attention_bias else 0)
        + ((mlp_in * enc.intermediate + enc.hidden) if enc.mlp_bias else 0)
        + 2 * norm
    )
    block = (
        linear("encoder", enc.heads, 3 * head_dim, enc.hidden),
        row_parallel("encoder", enc.heads, enc.hidden, head_dim),
        linear("encoder", enc.intermediate, mlp_in, enc.hidden),
        row_parallel("encoder", enc.intermediate, enc.hidden, 1),
        replicated("encoder", block_small),
    )
    projector_bias = sum(out for _, out in enc.projector) if enc.projector_bias else 0
    outer = stem + enc.outer_norms * norm + enc.projector_norm + projector_bias
    tensors = (
        *(t._replace(per_unit=t.per_unit * enc.layers) for t in block),
        replicated("encoder", outer),
        *(linear("encoder", 1, outputs, inputs) for inputs, outputs in enc.projector),
    )
    if enc.sharded:
        return tensors
    return (replicated("encoder", sum(t.params for t in tensors)),)


def audio_tensors(enc: ConformerAudioEncoder) -> tuple[Tensor, ...]:
    """An audio tower and its projector, whole on every rank (see ConformerAudioEncoder)."""
    return (replicated("encoder", enc.params()),)


def per_layer_input_tensors(model: ModelSpec) -> tuple[Tensor, ...]:
    """One decoder layer's share of Gemma 4's per-layer embeddings (PLE), as vLLM's gemma4.py
    builds them: its slice of per_layer_model_projection (hidden -> width, column-parallel),
    per_layer_input_gate and per_layer_projection (replicated) and post_per_layer_input_norm."""
    if model.per_layer_input is None:
        return ()
    width, hidden = model.per_layer_input[1], model.hidden_size
    return (
        linear("mlp", width, 1, hidden),  # the layer's slice of per_layer_model_projection
        linear("mlp", 1, width, hidden),  # per_layer_input_gate
        linear("mlp", 1, hidden, width),  # per_layer_projection
        replicated("norm", hidden),  # post_per_layer_input_norm
    )


def per_layer_input_table(model: ModelSpec) -> tuple[Tensor, ...]:
    """Gemma 4's PLE table, vocab rows x (layers x width), vocab-parallel like the embedding
    (a row lookup per token), and its per_layer_projection_norm; on the first stage."""
    if model.per_layer_input is None:
        return ()
    vocab, width = model.per_layer_input
    return (
        Tensor("embedding", vocab, model.num_layers * width),
        replicated("norm", width),
    )


def model_tensor_counts(model: ModelSpec) -> list[tuple[Tensor, int]]:
    """Every weight of ``model`` as (tensor, how many times it occurs): the whole model is one
    stage that is both first and last."""
    return stage_tensor_counts(model, range(model.num_layers), True, True)


# --------------------------------------------------------------------------------------------
# Parameter counts


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up.
class ParamCounts(NamedTuple):
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
    encoder: int = 0
    """A multimodal checkpoint's vision tower and projector: stored and loaded, but no text
    token passes through it, so it is not active."""

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
        return self.non_expert + self.routed_experts + self.encoder

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
    for tensor, n in model_tensor_counts(model):
        by_role[tensor.role] = by_role.get(tensor.role, 0) + tensor.params * n
    active_experts = sum(
        ffn.top_k * expert_params(ffn, model.hidden_size) * n
        for _, ffn, n in model.block_counts(range(model.num_layers))
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
        encoder=by_role.get("encoder", 0),
    )


# --------------------------------------------------------------------------------------------
# Weight bytes


#: The name other modules import; a checkpoint's format per role (:mod:`kvcalc.engine.quant`).
WeightPrecision = CheckpointFormat


def model_dtype_format(model: ModelSpec) -> WeightFormat:
    return plain(dtype(model.default_dtype))


def released_format(model: ModelSpec) -> CheckpointFormat:
    """The format the checkpoint ships in: the spec's, else the model dtype throughout."""
    if model.checkpoint is not None:
        return model.checkpoint
    return CheckpointFormat.uniform(model_dtype_format(model))


def checkpoint_precision(
    model: ModelSpec, chosen: WeightFormat | DType | None = None
) -> CheckpointFormat:
    """How a model's weights are stored: as released (``chosen`` None), else at ``chosen``
    following how quantized checkpoints ship: 8- and 4-bit formats quantize the layer matrices
    and keep the embeddings, LM head, norms and router at the model dtype; MXFP4 quantizes the
    routed experts only (as gpt-oss ships), or the layers of a dense model; 16/32-bit dtypes
    apply to everything."""
    if chosen is None:
        return released_format(model)
    fmt = as_format(chosen)
    keep = model_dtype_format(model)
    if fmt.element_bits >= 16:
        return CheckpointFormat.uniform(fmt)
    if fmt == MXFP4 and model.moe is not None:
        return CheckpointFormat(experts=fmt, layers=keep, other=keep)
    return CheckpointFormat.quantized_layers(fmt, keep)


def compute_dtype(precision: CheckpointFormat) -> str:
    """The dtype the matmuls run in (:attr:`WeightFormat.compute` of the layer matrices)."""
    return precision.layers.compute


def precision_name(precision: CheckpointFormat) -> str:
    """``bf16``, or the distinct formats from the layers outwards (``mxfp4+bf16`` for gpt-oss)."""
    return precision.name


def as_precision(precision: DType | WeightFormat | CheckpointFormat) -> CheckpointFormat:
    if isinstance(precision, CheckpointFormat):
        return precision
    return CheckpointFormat.uniform(as_format(precision))


#: Bits per format object (by identity: hashing a format, Fractions included, for each of a
#: model's tensors was a measurable part of a whole-registry batch); :func:`bytes_of` merges
#: equal formats before rounding.
Bits = dict[int, tuple[WeightFormat, int | Fraction]]


def add_tensor_bits(
    bits: Bits, tensor: Tensor, precision: CheckpointFormat, tp: int, times: Fraction | int = 1
) -> None:
    """Add ``times`` copies of the bits of ``tensor``'s most loaded rank, under its role's
    format, to ``bits`` (kept per format, so each is rounded to bytes once)."""
    fmt = precision.format_for(tensor.role)
    rows, cols = tensor.rank_matrix(tp)
    seen = bits.get(id(fmt))
    total = seen[1] if seen else 0
    bits[id(fmt)] = (fmt, total + times * fmt.matrix_bits(rows, cols))


def bytes_of(bits: Bits) -> int:
    """Bytes of tensors summed per format: each format's bits rounded up to bytes once."""
    per_format: dict[WeightFormat, int | Fraction] = {}
    for fmt, b in bits.values():
        per_format[fmt] = per_format.get(fmt, 0) + b
    return sum(-(-b // 8) for b in per_format.values())


def weight_bytes(model: ModelSpec, precision: DType | WeightFormat | CheckpointFormat) -> int:
    """Bytes of all the weights of ``model`` (one copy, no parallelism)."""
    prec = as_precision(precision)
    bits: Bits = {}
    for tensor, n in model_tensor_counts(model):
        add_tensor_bits(bits, tensor, prec, 1, n)
    return bytes_of(bits)


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


# A NamedTuple, not a frozen dataclass: a plain value, several times cheaper to create at
# start-up (every whole-registry batch loads this module).
class StageWeights(NamedTuple):
    """What one GPU of a pipeline stage holds (the most loaded tensor-parallel rank)."""

    stage: int
    layers: range
    params_per_gpu: int
    bytes_per_gpu: int


def edge_tensors(model: ModelSpec, first: bool, last: bool) -> list[Tensor]:
    """The weights outside the decoder layers that a stage holds: the embedding (and a vision
    tower) on the first, the final norm and LM head on the last."""
    tensors: list[Tensor] = []
    if first:
        tensors.append(embedding_tensor(model))
        tensors.extend(per_layer_input_table(model))
        if model.vision is not None:  # vLLM builds the vision tower on the first PP rank
            tensors.extend(encoder_tensors(model.vision))
        if model.audio is not None:
            tensors.extend(audio_tensors(model.audio))
    if last:
        tensors.extend(head_tensors(model))
        if model.tied_embeddings and not first:
            # A tied head on another stage than the embedding needs its own copy of the matrix
            # (vLLM builds embed_tokens on the last PP rank too when tie_word_embeddings is set).
            tensors.append(linear("lm_head", model.vocab_size, 1, model.hidden_size))
    return tensors


def stage_tensor_counts(
    model: ModelSpec, layers: range, first: bool, last: bool
) -> list[tuple[Tensor, int]]:
    """The weights of a pipeline stage as (tensor, how many times it occurs): each distinct
    layer is described once and counted, since a model has a handful of distinct layers."""
    out = [
        (tensor, n)
        for mixer, ffn, n in model.block_counts(layers)
        for tensor in _layer_tensors(mixer, ffn, model.hidden_size)
    ]
    out.extend((tensor, len(layers)) for tensor in per_layer_input_tensors(model))
    out.extend((tensor, 1) for tensor in edge_tensors(model, first, last))
    return out


def padded_expert_tensors(
    moe: MoE, hidden: int, tp: int, alignment: tuple[int, int]
) -> tuple[Tensor, ...]:
    """The routed experts of one layer as the engine allocates them on each of ``tp`` ranks:
    the shard's intermediate rows and the hidden size rounded up to ``alignment``."""
    rows_align, hidden_align = alignment
    rows = _round_up(-(-moe.intermediate_size // tp), rows_align)
    padded_hidden = _round_up(hidden, hidden_align)
    return ffn_tensors("routed_experts", rows * tp, moe.experts, padded_hidden, moe.gated)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def loaded_tensor_counts(
    model: ModelSpec,
    layers: range,
    counts: list[tuple[Tensor, int]],
    experts: WeightFormat,
    tp: int,
) -> list[tuple[Tensor, int]]:
    """A stage's :func:`stage_tensor_counts` as the engine holds them in memory: routed experts
    in a format the engine pads on load (:attr:`WeightFormat.expert_alignment`) take their
    padded shape; every other tensor is stored as shipped."""
    alignment = experts.expert_alignment
    if alignment is None:
        return counts
    moe_layers: dict[MoE, int] = {}
    for _, ffn, n in model.block_counts(layers):
        if isinstance(ffn, MoE):
            moe_layers[ffn] = moe_layers.get(ffn, 0) + n
    out = [(t, n) for t, n in counts if t.role != "routed_experts"]
    for moe, n in moe_layers.items():
        padded = padded_expert_tensors(moe, model.hidden_size, tp, alignment)
        out.extend((t, n) for t in padded)
    return out


def rotary_caches(model: ModelSpec) -> tuple[tuple[int, int], ...]:
    """(positions, dims) of each RoPE cos/sin table: the spec's, else one of ``max_context``
    positions per distinct rotary width."""
    if model.rotary_caches is not None:
        return model.rotary_caches
    if model.max_context is None:
        return ()
    dims = {m.rotary_dims() for m in model.mixer_pattern} - {None}
    return tuple((model.max_context, d) for d in sorted(d for d in dims if d is not None))


def rotary_cache_bytes(model: ModelSpec) -> int:
    """Bytes of the RoPE tables every rank holds beside its weights: vLLM's RotaryEmbedding
    registers a ``cos_sin_cache`` buffer of positions x rotary dims in the model dtype while the
    model is built, so "Model loading took" includes it (get_rope shares one table per
    configuration). Llama-4-Scout's 10M positions x 128 are 2.5 GiB per GPU; Gemma-3's global
    table, linearly scaled by 8, 1M positions x 256 are 0.5 GiB."""
    act = dtype(model.default_dtype)
    return sum(act.bytes_for(positions * dims) for positions, dims in rotary_caches(model))


def expert_parallel_counts(
    model: ModelSpec, layers: range, experts: WeightFormat, ep: int
) -> list[tuple[Tensor, int]]:
    """A stage's routed experts as one of ``ep`` expert-parallel ranks holds them: whole experts,
    ceil(E / ep) per layer on the most loaded rank (vLLM ``determine_expert_map`` gives the
    remainder to the first ranks), none split by rows (:func:`expert_parallel_tensors`)."""
    moe_layers: dict[MoE, int] = {}
    for _, ffn, n in model.block_counts(layers):
        if isinstance(ffn, MoE):
            moe_layers[ffn] = moe_layers.get(ffn, 0) + n
    return [
        (t, n)
        for moe, n in moe_layers.items()
        for t in expert_parallel_tensors(moe, model.hidden_size, experts, ep)
    ]


def expert_parallel_tensors(
    moe: MoE, hidden: int, experts: WeightFormat, ep: int
) -> tuple[Tensor, ...]:
    """One MoE layer's routed experts on the most loaded of ``ep`` expert-parallel ranks: the
    ceil(E / ep) whole experts it holds, padded as the format pads them on load."""
    from dataclasses import replace

    local = replace(moe, experts=-(-moe.experts // ep))
    alignment = experts.expert_alignment
    if alignment is None:
        return ffn_tensors("routed_experts", local.intermediate_size, local.experts, hidden,
                           local.gated)
    return padded_expert_tensors(local, hidden, 1, alignment)


@lru_cache(maxsize=256)
def weights_per_gpu(
    model: ModelSpec,
    precision: DType | WeightFormat | CheckpointFormat,
    tp: int = 1,
    pp: int = 1,
    moe_ranks: int | None = None,
    expert_parallel: bool = False,
) -> tuple[StageWeights, ...]:
    """Weights on one GPU of each pipeline stage, under ``tp``-way tensor parallelism. Cached:
    a pure function of frozen values, and a plan search asks it again for every accelerator.

    The embedding lives on the first stage, the final norm and LM head on the last. A caller
    sizing a deployment takes the stage with the most bytes (see :func:`max_weight_bytes_per_gpu`).
    Bytes are what the engine holds (routed experts padded as it loads them, and the RoPE
    tables it builds with the weights, :func:`rotary_cache_bytes`); parameters are the model's
    own.

    ``moe_ranks`` (None: ``tp``) are the ranks the routed experts are spread over: vLLM's
    FusedMoE flattens tensor parallelism across data parallelism
    (``FusedMoEParallelConfig.flatten_tp_across_dp_and_pcp``: dp x tp ranks), so data-parallel
    replicas share the experts. Split by intermediate rows, or with ``expert_parallel``
    (``--enable-expert-parallel``: ep = those ranks, tp 1 inside the MoE) as whole experts.
    """
    check_parallelism(model, tp, pp)
    prec = as_precision(precision)
    stages = pipeline_stages(model.num_layers, pp)
    rotary = rotary_cache_bytes(model)  # every rank builds the tables
    expert_ranks = tp if moe_ranks is None else moe_ranks
    out = []
    for s, layers in enumerate(stages):
        counts = stage_tensor_counts(model, layers, s == 0, s == pp - 1)
        bits: Bits = {}
        loaded = loaded_tensor_counts(model, layers, counts, prec.experts, expert_ranks)
        for tensor, n in loaded:
            if tensor.role != "routed_experts":
                add_tensor_bits(bits, tensor, prec, tp, n)
            elif not expert_parallel:
                add_tensor_bits(bits, tensor, prec, expert_ranks, n)
        if expert_parallel:
            for tensor, n in expert_parallel_counts(model, layers, prec.experts, expert_ranks):
                add_tensor_bits(bits, tensor, prec, 1, n)
        params = sum(
            tensor.params_per_rank(expert_ranks if tensor.role == "routed_experts" else tp) * n
            for tensor, n in counts
        )
        out.append(StageWeights(s, layers, params, bytes_of(bits) + rotary))
    return tuple(out)


def max_weight_bytes_per_gpu(
    model: ModelSpec, precision: DType | WeightFormat | CheckpointFormat, tp: int = 1, pp: int = 1
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
    model: ModelSpec,
    batch: int,
    precision: DType | WeightFormat | CheckpointFormat,
    tp: int = 1,
) -> int:
    """Weight bytes read per decode step of ``batch`` tokens, per GPU of ``tp``-way TP (cached,
    as :func:`weights_per_gpu`).

    Every weight is read once per step, scales included, except:

    - the routed experts: each MoE layer reads only the distinct experts the batch touches
      (:func:`expected_distinct_experts`, uniform routing assumed), that share of its experts'
      bytes (every expert is stored alike);
    - an untied embedding table: the step looks up one row per token, min(batch, vocab) rows
      (per rank, at most the rank's vocabulary shard). A tied table is read whole by the head.
    """
    check_parallelism(model, tp, 1)
    if batch < 1:
        raise ValueError(f"batch must be at least 1 (got {batch})")
    prec = as_precision(precision)
    moe = model.moe
    touched_share = (
        expected_distinct_experts(moe.experts, moe.top_k, batch) / moe.experts
        if moe is not None
        else Fraction(1)
    )
    bits: Bits = {}
    for tensor, n in stage_tensor_counts(model, range(model.num_layers), False, True):
        share = touched_share if tensor.role == "routed_experts" else 1
        add_tensor_bits(bits, tensor, prec, tp, n * share)
    if not model.tied_embeddings:  # a tied table is read whole as the head, counted above
        rows = min(batch, -(-model.vocab_size // tp))
        add_tensor_bits(bits, Tensor("embedding", rows, model.hidden_size), prec, 1)
    return bytes_of(bits)
