"""DeepSeek-V4's compressed attention (``deepseek_v4``): a sliding window on every layer plus, per
``compress_ratios``, a history compressed along time.

Each layer has a ratio r (config.json ``compress_ratios``, one entry per layer; the entries past
``num_hidden_layers`` describe the MTP layer):

- r = 0: the sliding window only (the last ``sliding_window`` tokens' latents);
- r = 4 (compressed sparse attention): the window, plus one compressed latent per 4 tokens, plus
  the lightning indexer's key per compressed entry (index_head_dim fp8 values and one fp32 scale
  per 128: 132 bytes for 128), from which the indexer picks the ``index_topk`` entries attended;
- r = 128 (heavily compressed attention): the window plus one compressed latent per 128 tokens.

What one entry takes (vLLM 0.33 ``DeepseekV4SWACache`` / ``DeepseekV4MLAAttention``, SGLang
0.5.23 ``DeepSeekV4SingleKVPool``; ../shared/reference/arch-2026.md section 1): the latent is one
vector of ``head_dim`` (512) values, of which ``rope_dim`` (64) carry RoPE. With an fp8 cache --
what both engines store by default on NVIDIA (vLLM's ``fp8_ds_mla``) -- an entry is packed as
448 fp8 NoPE values, 64 bf16 RoPE values, one UE8M0 scale per 64 NoPE values (7) and one pad
byte: 584 bytes. Other dtypes store the 512 values as a plain row (bf16: 1,024 bytes; the
FlashInfer backends). The compressor keeps a state in fp32 whatever the KV dtype: ``coff x r``
rows of ``2 x coff x head_dim`` values (coff = 2 for the overlapping r = 4 compressor, 1 for
r = 128), and the indexer's own compressor the same over index_head_dim. Nothing is split by
tensor parallelism (every DSV4 cache spec has ``max_tp_shards = 1``): each rank keeps it all.

Compressed entries are counted as the whole groups of r tokens a sequence has (the compressor
emits one when a group completes); an engine's blocks round that up.

Weights (DeepSeek-V4 inference/model.py Attention, Compressor, Indexer): wq_a (hidden x
q_lora_rank, replicated) with its norm, wq_b (q_lora_rank x heads x head_dim), wkv (hidden x
head_dim, one shared head, replicated) with its norm, the grouped output projection wo_a
(heads x head_dim x o_lora_rank, split by group) and wo_b (o_groups x o_lora_rank x hidden,
row-parallel), one attention-sink logit per head, the two hyper-connections' mixing weights;
per compressor wkv and wgate (hidden x
coff x dim each), its positional bias ape (r x coff x dim) and norm; the indexer's wq_b
(q_lora_rank x index_heads x index_head_dim) and weights_proj (hidden x index_heads).

Decode FLOPs (per held token): latent attention (2 x heads x 2 x head_dim) per entry, plus the
indexer's score of every compressed entry on ratio-4 layers, an entry standing for r held tokens.
The ratio-4 attention reads at most ``index_topk`` entries, so counting every entry is an upper
bound (as for DeepSeek-V3.2); the compressing layers' own 128-token window (a fixed term) is not
counted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from kvcalc.engine.mixers.base import AttentionMixer, split_heads
from kvcalc.engine.tensors import CacheVectors, Tensor, linear, replicated, row_parallel
from kvcalc.engine.units import DType

if TYPE_CHECKING:
    from kvcalc.engine.kvformat import KVFormat
    from kvcalc.engine.mixers.base import Mixer
    from kvcalc.engine.mixers.caches import PageLayout
    from kvcalc.engine.variant import AttentionVariant

#: The ratios DeepSeek-V4 defines (transformers DeepseekV4Config _COMPRESS_RATIO_TO_LAYER_TYPE).
RATIOS = (0, 4, 128)
#: The ratio whose layers carry the lightning indexer.
INDEXED_RATIO = 4
#: NoPE values per UE8M0 scale in the packed fp8 entry.
PACKED_SCALE_BLOCK = 64
#: The packed entry is padded to whole 8-byte words (583 -> 584).
PACKED_ALIGN = 8
#: Values per fp32 scale of the indexer keys, and the scale's bytes.
INDEX_QUANT_BLOCK, INDEX_SCALE_BYTES = 128, 4
#: The KV dtypes the engines store an entry in: fp8 (packed) or a plain row of these.
ROWS = ("fp8", "bf16", "fp16", "fp32")
#: Bytes of one compressor-state value (fp32 whatever the KV dtype).
STATE_VALUE_BYTES = 4


def packed_entry_bytes(head_dim: int, rope_dim: int) -> int:
    """vLLM's fp8_ds_mla entry: NoPE values in fp8, RoPE values in bf16, one UE8M0 byte per 64
    NoPE values, padded to 8 bytes (448 + 128 + 7 + 1 = 584 for 512 with 64 RoPE)."""
    nope = head_dim - rope_dim
    raw = nope + 2 * rope_dim + -(-nope // PACKED_SCALE_BLOCK)
    return -(-raw // PACKED_ALIGN) * PACKED_ALIGN


def index_key_bytes(index_head_dim: int) -> int:
    """The indexer's key: fp8 values plus one fp32 scale per 128 (132 for 128)."""
    return index_head_dim + index_head_dim // INDEX_QUANT_BLOCK * INDEX_SCALE_BYTES


def overlap(ratio: int) -> int:
    """The compressor's ``coff``: the r = 4 compressor overlaps two windows, r = 128 does not."""
    return 2 if ratio == INDEXED_RATIO else 1


@dataclass(frozen=True)
class CompressedAttention(AttentionMixer):
    """One DeepSeek-V4 layer: a window of ``window`` latents and, for ``compress_ratio`` > 0, one
    compressed latent per ``compress_ratio`` tokens (with indexer keys at ratio 4)."""

    kind: ClassVar[str] = "compressed"
    compress_ratio: int
    window: int
    head_dim: int
    rope_dim: int
    q_heads: int
    q_lora_rank: int
    o_lora_rank: int
    o_groups: int
    index_heads: int = 0
    index_head_dim: int = 0
    index_topk: int = 0
    hc_mult: int = 0
    """Residual streams of the layer's two hyper-connections (config.json hc_mult; 0: none)."""

    @property
    def indexed(self) -> bool:
        return self.compress_ratio == INDEXED_RATIO

    def mtp_layer(self) -> CompressedAttention:
        # The MTP layer's index is past num_hidden_layers, so it compresses nothing: a window
        # only (vLLM 0.33 models/deepseek_v4/nvidia/mtp.py and attention.py; arch-2026 sec. 7).
        return replace(self, compress_ratio=0, index_heads=0, index_head_dim=0, index_topk=0)

    # ---- cache

    def cache_elements_per_token(self) -> int:
        return self.head_dim

    def cache_vectors(self) -> tuple[CacheVectors, ...]:
        return (CacheVectors("latent", 1, self.head_dim),)

    def tokens_held(self, context_tokens: int) -> int:
        # The tokens the layer still covers: all of them once it compresses, else the window.
        if self.compress_ratio:
            return context_tokens
        return min(context_tokens, self.window)

    def entry_bytes(self, kv: DType) -> int:
        """One latent entry (window or compressed) at KV dtype ``kv``."""
        if kv.name == "fp8":
            return packed_entry_bytes(self.head_dim, self.rope_dim)
        return kv.bytes_for(self.head_dim)

    def main_token_bytes(self, kv: DType) -> int:
        return self.entry_bytes(kv)

    def compressed_entries(self, tokens: int) -> int:
        return tokens // self.compress_ratio if self.compress_ratio else 0

    def index_bytes(self) -> int:
        """Bytes of one indexer key (0 on layers without the indexer)."""
        return index_key_bytes(self.index_head_dim) if self.indexed else 0

    def held_bytes(self, kv: KVFormat, tokens: int) -> int:
        """Bytes ``tokens`` held tokens take: the window's entries, the compressed entries and
        their indexer keys (the compressor state is :meth:`fixed_state_bytes`)."""
        entry = self.plain_entry_bytes(kv)
        windowed = min(tokens, self.window) * entry
        return windowed + self.compressed_entries(tokens) * (entry + self.index_bytes())

    def slope_bytes(self, kv: KVFormat) -> int:
        """Bytes one token adds while the window is not full, rounded up: its window entry plus
        its share of a compressed entry and indexer key (an upper bound per token, as for every
        windowed kind; past the window only the share remains)."""
        entry = self.plain_entry_bytes(kv)
        if not self.compress_ratio:
            return entry
        return entry + -(-(entry + self.index_bytes()) // self.compress_ratio)

    def plain_entry_bytes(self, kv: KVFormat) -> int:
        """The entry at a plain-dtype format; other formats are refused (:meth:`check_format`)."""
        self.check_format(kv)
        from kvcalc.engine.kvformat import LinearKV

        assert isinstance(kv, LinearKV)
        return self.entry_bytes(kv.element)

    def check_format(self, kv: KVFormat) -> None:
        from kvcalc.engine.kvformat import KVFormatError, LinearKV

        if not isinstance(kv, LinearKV) or kv.scale is not None or kv.element.name not in ROWS:
            raise KVFormatError(
                "--kv-dtype",
                f"DeepSeek-V4's compressed attention is stored as fp8 (the packed 584-byte "
                f"entry) or a bf16/fp16/fp32 row; the engines have no {kv.name} layout for "
                "it; use fp8 or bf16",
            )

    def state_cache_bytes(self) -> int:
        """The fp32 compressor state of one sequence: ``coff x r`` rows of ``2 x coff x dim``
        values for the main compressor, and the indexer's over index_head_dim."""
        r = self.compress_ratio
        if not r:
            return 0
        c = overlap(r)
        rows = c * r
        main = rows * 2 * c * self.head_dim * STATE_VALUE_BYTES
        index = rows * 2 * c * self.index_head_dim * STATE_VALUE_BYTES if self.indexed else 0
        return main + index

    def engine_kv_dtype(self) -> str:
        # vLLM resolves --kv-cache-dtype auto to fp8 (fp8_ds_mla) for DeepSeek-V4 on FlashMLA;
        # SGLang's DeepSeekV4SingleKVPool stores the same entry.
        return "fp8"

    def format_note(self) -> str:
        packed = packed_entry_bytes(self.head_dim, self.rope_dim)
        return (
            f"DeepSeek-V4: an fp8 cache (the engines' default) is the packed fp8_ds_mla entry "
            f"({self.head_dim - self.rope_dim} fp8 + {self.rope_dim} bf16 RoPE + scales = "
            f"{packed} B), other dtypes a plain {self.head_dim}-value row; indexer keys and the "
            "fp32 compressor state are fixed; no cache is split across TP"
        )

    # ---- weights and FLOPs

    def weight_tensors(self, hidden: int) -> tuple[Tensor, ...]:
        dim, heads = self.head_dim, self.q_heads
        tensors = [
            linear("mixer", 1, self.q_lora_rank, hidden),  # wq_a
            replicated("norm", self.q_lora_rank),  # q_norm
            linear("mixer", heads, dim, self.q_lora_rank),  # wq_b
            linear("mixer", 1, dim, hidden),  # wkv (one shared head)
            replicated("norm", dim),  # kv_norm
            # wo_a: each group maps its heads' outputs to o_lora_rank; split with the groups.
            linear("mixer", self.o_groups, self.o_lora_rank, -(-heads // self.o_groups) * dim),
            row_parallel("mixer", self.o_groups, hidden, self.o_lora_rank),  # wo_b
            Tensor("mixer", heads, 1),  # attn_sink
        ]
        if self.hc_mult:
            # attn_hc and ffn_hc: fn ((2 + hc) x hc mixing weights over hc x hidden), base and
            # three scales each (transformers DeepseekV4HyperConnection), kept unquantized.
            mix = (2 + self.hc_mult) * self.hc_mult
            tensors += [replicated("norm", mix * self.hc_mult * hidden + mix + 3)] * 2
        if self.compress_ratio:
            tensors += self._compressor(hidden, dim)
        if self.indexed:
            tensors += [
                linear("mixer", 1, self.index_heads * self.index_head_dim, self.q_lora_rank),
                linear("mixer", 1, self.index_heads, hidden),  # weights_proj
                *self._compressor(hidden, self.index_head_dim),
            ]
        return tuple(tensors)

    def _compressor(self, hidden: int, dim: int) -> list[Tensor]:
        c, r = overlap(self.compress_ratio), self.compress_ratio
        return [
            linear("mixer", 1, c * dim, hidden),  # wkv
            linear("mixer", 1, c * dim, hidden),  # wgate
            replicated("mixer", r * c * dim),  # ape
            replicated("norm", dim),  # norm
        ]

    def attention_flops_per_held_token(self) -> int:
        # Per compressed entry: QK over the latent and AV over it, and the indexer's score on
        # ratio-4 layers; an entry stands for r held tokens (rounded up). A window-only layer
        # attends to each held token.
        entry = 2 * self.q_heads * 2 * self.head_dim
        entry += 2 * self.index_heads * self.index_head_dim if self.indexed else 0
        return -(-entry // self.compress_ratio) if self.compress_ratio else entry

    # ---- vLLM

    def page_layout(self) -> PageLayout | None:
        return None  # several specs per layer: kvcalc.engine.vllm builds them itself

    # ---- text

    def detail(self) -> str:
        head = f"latent {self.head_dim} (rope {self.rope_dim}), window {self.window:,}"
        if not self.compress_ratio:
            return f"{head}, no compression"
        text = f"{head} + 1 entry per {self.compress_ratio} tokens"
        if self.indexed:
            text += f", indexer {self.index_heads}x{self.index_head_dim} top-{self.index_topk:,}"
        return text

    def kv_head_count(self) -> None:
        return None

    def listed_head_dim(self) -> None:
        return None

    def rotary_dims(self) -> int:
        return self.rope_dim

    # ---- what-ifs

    def per_rank(self, tp: int) -> CompressedAttention:
        # Query heads and the output groups split; every cache is replicated.
        return replace(
            self,
            q_heads=split_heads(self.q_heads, tp, "query heads"),
            o_groups=split_heads(self.o_groups, tp, "output groups"),
        )

    def with_heads(self, kv_heads: int | None, head_dim: int | None) -> CompressedAttention:
        return self  # one shared latent: no KV heads to change

    def as_attention(self, variant: AttentionVariant) -> Mixer:
        from kvcalc.engine.variant import VariantError

        raise VariantError(
            "DeepSeek-V4's compressed attention has no plain-attention counterpart "
            "kvcalc derives; size it as released"
        )
