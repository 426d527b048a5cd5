"""How far the realistic estimate is from what was measured: the band every TPOT, TTFT and
tokens-per-second estimate carries (``TPOT 26 ms (20-34 ms)``).

The band of a regime is the spread of measured over estimated TPOT on the **fit** points of
tests/fixtures/decode_points.yaml in that regime (the lowest and the highest ratio, widened to
whole hundredths and to 1, so every fit point and the estimate itself lie inside); a regime
with fewer than :data:`MIN_POINTS` fit points takes the spread of all fit points.
tests/test_decode_points.py recomputes every figure below from the points and fails when they
differ, so the band is the data's, not a choice; the held-back points then show how often it
holds the measured value.

TTFT's band uses TPOT's ratios of the same regime (no prefill-only measurements are among the
points); tokens per second's is the batch over TPOT's band.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: A regime needs this many fit points to have its own band. The range of n exchangeable
#: ratios holds the next one with probability (n - 1) / (n + 1) (order statistics): 1/2 at 3
#: points, 2/3 at 5. A band that is to hold most new measurements needs more than 3; below 5 a
#: regime takes the spread of all fit points.
MIN_POINTS = 5


@dataclass(frozen=True)
class Band:
    """Measured over estimated TPOT on the fit points of a regime: ``low`` the smallest,
    ``high`` the largest ratio (low <= 1 <= high)."""

    regime: str
    low: float
    high: float
    points: int
    """Fit points it was derived from."""
    pooled: bool = False
    """True when the regime had too few fit points and the band is all fit points'."""


#: Derived from tests/fixtures/decode_points.yaml (``python tests/test_decode_points.py``
#: prints the figures the points give).
BANDS: dict[str, Band] = {
    "single-gpu": Band("single-gpu", 0.92, 1.09, 11),
    "scale-up": Band("scale-up", 0.64, 1.24, 13),
    "pcie": Band("pcie", 0.64, 1.24, 29, pooled=True),
    "multi-node": Band("multi-node", 0.64, 1.24, 29, pooled=True),
}


def band_for(regime: str) -> Band | None:
    """The band of ``regime`` (None: a regime no point speaks for)."""
    return BANDS.get(regime)


def derive_bands(ratios: dict[str, list[float]], regimes: tuple[str, ...]) -> dict[str, Band]:
    """The bands the fit points' measured/estimated ratios give, per regime (the formula the
    test holds :data:`BANDS` to)."""
    pooled = [r for values in ratios.values() for r in values]
    bands = {}
    for regime in regimes:
        own = ratios.get(regime, [])
        values, shared = (own, False) if len(own) >= MIN_POINTS else (pooled, True)
        bands[regime] = Band(
            regime,
            math.floor(min(1.0, *values) * 100) / 100,
            math.ceil(max(1.0, *values) * 100) / 100,
            len(values),
            pooled=shared,
        )
    return bands
