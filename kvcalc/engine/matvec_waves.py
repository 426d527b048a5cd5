"""How full the waves of a one-warp-per-row matrix-vector kernel are: llama.cpp's F16 mat-vec
before build 3916 (:data:`kvcalc.engine.runtimes.LLAMA_CPP_PRE_B3916_KERNELS`).

What the code of that kernel does (llama.cpp at d46dbc76, build 2833, read for this):

- ggml-cuda.cu ``ggml_cuda_mul_mat`` (line 1868 on): an F16 weight times one F32 token
  (``src1->ne[1] == 1``, ``ne[0] % GGML_CUDA_DMMV_X == 0``) sets ``use_dequantize_mul_mat_vec``
  (line 1896); mmvq is for quantised types only, so line 1934 does not turn it off. Of the
  branches before it (line 1945 on), the p021/nc mat-vecs need ``!fp16_performance_good``
  (false from compute capability 6.0) and batched cuBLAS ``src1->ne[2] * ne[3] > 1`` (the
  attention's heads, not a weight's one token), so line 1954 calls ``ggml_cuda_op_mul_mat(...,
  ggml_cuda_op_dequantize_mul_mat_vec)``: one launch for all of a weight's rows on its GPU
  (``row_low = 0, row_high = ne01`` without a split buffer; layer split, the default, puts
  whole tensors on each GPU).
- ggml-cuda/dmmv.cu ``convert_mul_mat_vec_f16_cuda`` (line 729): grid ``nrows /
  GGML_CUDA_MMV_Y`` blocks of ``(WARP_SIZE, GGML_CUDA_MMV_Y)`` threads; ``GGML_CUDA_MMV_Y`` is 1
  (ggml-cuda/dmmv.cuh, the Makefile's and CMakeLists.txt's default), so one 32-thread block --
  one warp -- per output row, which walks the row's ``ncols`` halves two at a time
  (``dequantize_mul_mat_vec<1, 1, convert_f16>``, line 577; ``convert_f16``, line 568: two scalar
  half loads) and uses no shared memory.
- llama.cpp ``build_llama`` (line 6983 on) and ``llm_build_ffn``: wq, wk, wv, wo, ffn_up,
  ffn_gate, ffn_down and the output head are separate ``ggml_mul_mat`` calls, so separate
  launches; ``ggml_cuda_mul_mat_id`` runs each selected expert as one more such launch at one
  token.

So a matrix of R rows runs as R one-warp blocks. An SM holds at most B resident blocks
(:data:`RESIDENT_BLOCKS_PER_SM`; a one-warp block reaches the block limit, 32, before the
64-warp limit), so S SMs run S x B rows at a time and a matrix takes ceil(R / (S x B)) waves of
blocks of equal work. A scalar-load warp is bound by its loads' latency rather than by the
DRAM's bandwidth (issue 9817: far below peak on HBM parts), so a wave takes as long however
few of its slots are filled: the kernel reaches its full-wave share times
:func:`wave_fill`. Not modelled: the compiled kernel's register count (it would bind below 32
blocks only above 64 registers a thread; the source holds a handful of scalars and no arrays),
which no document gives.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.weights import model_tensor_counts

if TYPE_CHECKING:
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.tensors import Tensor

#: "Maximum number of resident blocks per SM" by compute capability, NVIDIA CUDA C++
#: Programming Guide, "Technical Specifications per Compute Capability"
#: (https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html#features-and-technical-specifications-technical-specifications-per-compute-capability):
#: 32 on 7.0 (V100), 8.0 (A100) and 9.0 (H100/H200); the same table's resident-warp limit there
#: is 64, so one-warp blocks stop at 32. Only the HBM parts' capabilities: the kernel's slowdown
#: is modelled on NVIDIA HBM GPUs alone.
RESIDENT_BLOCKS_PER_SM: dict[tuple[int, int], int] = {(7, 0): 32, (8, 0): 32, (9, 0): 32}
RESIDENT_BLOCKS_SOURCE = (
    "https://docs.nvidia.com/cuda/cuda-c-programming-guide/index.html (Technical "
    "Specifications per Compute Capability: maximum number of resident blocks per SM, 32 on "
    "7.0, 8.0 and 9.0; resident warps per SM, 64)"
)

#: The roles whose column-parallel tensor stacks several matrices that llama.cpp launches one by
#: one: gate and up (``[up; gate]`` rows of ``units``), per expert for routed experts.
_STACKED_FFN_ROLES = ("mlp", "routed_experts", "shared_experts")


def wave_fill(rows: int, rows_per_wave: int) -> Fraction:
    """The share of a kernel's block slots its waves fill: ``rows`` one-row blocks run in
    ceil(rows / rows_per_wave) waves of ``rows_per_wave``. 1 for an exact multiple, never above
    1; a matrix smaller than one wave fills ``rows / rows_per_wave`` of it."""
    if rows <= 0 or rows_per_wave <= 0:
        raise ValueError("rows and rows_per_wave must be positive")
    waves = -(-rows // rows_per_wave)
    return Fraction(rows, waves * rows_per_wave)


def matvec_launches(tensor: Tensor, hidden: int) -> list[tuple[int, int]]:
    """The (rows, values) of each mat-vec launch llama.cpp makes for ``tensor`` at one token, on
    one GPU (llama.cpp splits layers, not tensors): one per matrix, the FFN's stacked gate, up
    and experts' matrices each their own. Empty for what is not a linear weight (norms,
    embedding tables: no mat-vec)."""
    if tensor.cols is None or tensor.role == "encoder":  # the encoder runs at prefill only
        return []
    rows, cols = tensor.rank_matrix(1)
    if tensor.role not in _STACKED_FFN_ROLES:
        return [(rows, rows * cols)]
    if tensor.split_cols:  # down: ``rows // hidden`` matrices of [hidden, intermediate]
        return [(hidden, hidden * cols)] * (rows // hidden)
    matrices = tensor.per_unit // tensor.cols  # gate and up (per expert): [intermediate, hidden]
    return [(tensor.units, tensor.units * cols)] * matrices


def read_share(tensor: Tensor, model: ModelSpec) -> Fraction:
    """The share of ``tensor``'s matrices one token reads: its routed experts' top-k of the
    experts, else all."""
    if tensor.role == "routed_experts" and model.moe is not None:
        return Fraction(model.moe.top_k, model.moe.experts)
    return Fraction(1)


def step_wave_fill(model: ModelSpec, rows_per_wave: int) -> Fraction:
    """The wave fill of one decode step's weight reads: each launch's :func:`wave_fill`, weighted
    by the values it reads, as times add (the harmonic mean: reads / sum of reads / fill). The
    same for any pipeline split, which runs every layer's launches in turn."""
    values = Fraction(0)
    slots = Fraction(0)
    for tensor, count in model_tensor_counts(model):
        share = read_share(tensor, model) * count
        for rows, read in matvec_launches(tensor, model.hidden_size):
            values += read * share
            slots += read * share / wave_fill(rows, rows_per_wave)
    return Fraction(1) if not values else values / slots
