"""KIVI (Liu et al., 2024, "Tuning-Free Asymmetric 2bit Quantization for KV Cache"; seed 004
"KIVI"): a KV format whose bytes are not linear in tokens.

Keys have outlier channels, so each channel gets its own scale and zero point over a group of G
tokens; values are quantised per token over groups of G channels; the R most recent tokens stay
at full precision until they are old enough to be quantised. The paper's setting is G = 32,
R = 128 and fp16 scales and zero points (``kivi2`` / ``kivi4``).

Kept apart from :mod:`kvcalc.engine.kvformat` and imported when a KIVI format is asked for:
every dataclass costs start-up time, and most commands never need this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING

from kvcalc.engine.kvformat import KVFormat, KVFormatError, ceil_bytes
from kvcalc.engine.units import DType, dtype

if TYPE_CHECKING:
    from kvcalc.engine.spec import Mixer

KIVI_GROUP = 32
KIVI_RESIDUAL = 128


@dataclass(frozen=True)
class KiviKV(KVFormat):
    """KIVI: ``element``-bit keys with a scale and zero point per channel per ``group`` tokens,
    values with one per ``group`` channels of each token, and the ``residual_tokens`` most
    recent tokens kept at ``full`` precision (the model's dtype). Asymmetric by construction."""

    name: str
    element: DType
    group: int
    residual_tokens: int
    full: DType
    scale: DType

    @property
    def nominal_bits(self) -> Fraction:
        return self.element.bits

    @property
    def linear(self) -> bool:
        return False

    def metadata_bits(self) -> Fraction:
        return 2 * self.scale.bits  # scale + zero point

    @property
    def precision_note(self) -> str:
        return (
            f"newest {self.residual_tokens:,} tokens at {self.full.name}: "
            "per token is the long-context slope"
        )

    def check(self, mixer: Mixer) -> None:
        mixer.check_format(self)  # a kind with its own layouts refuses first, naming them
        if any(v.role == "latent" for v in mixer.cache_vectors()):
            raise KVFormatError(
                "--kv-dtype",
                f"KIVI quantises keys per channel and values per token; an MLA latent is "
                f"neither, so {self.name} cannot store it; use fp8, int4 or nvfp4",
            )

    def token_bits(self, mixer: Mixer) -> Fraction:
        self.check(mixer)
        values = mixer.cache_elements_per_token() * self.element.bits
        # Keys: each channel's scale covers `group` tokens, i.e. 1/group of a scale per token.
        vectors = mixer.cache_vectors()
        keys = sum(Fraction(v.elements, self.group) for v in vectors if v.role == "key")
        rows = sum(v.groups(self.group) for v in vectors if v.role == "value")
        return values + (keys + rows) * self.metadata_bits()

    def tokens_bytes(self, mixer: Mixer, tokens: int) -> int:
        self.check(mixer)
        recent = min(tokens, self.residual_tokens)
        old = tokens - recent
        elements = mixer.cache_elements_per_token()
        meta = self.metadata_bits()
        bits = Fraction(old * elements) * self.element.bits
        for v in mixer.cache_vectors():
            if v.role == "key":  # a partial group of tokens still has its scales
                bits += -(-old // self.group) * v.elements * meta
            else:
                bits += old * v.groups(self.group) * meta
        return recent * mixer.main_token_bytes(self.full) + ceil_bytes(bits)


def kivi(bits: int, full: DType, group: int = KIVI_GROUP, residual: int = KIVI_RESIDUAL) -> KiviKV:
    """KIVI-``bits`` as the paper runs it: group 32, residual 128, fp16 scales and zeros."""
    return KiviKV(f"kivi{bits}", dtype(f"int{bits}"), group, residual, full, dtype("fp16"))
