"""The realistic decode estimate against published measurements no constant was set on
(tests/fixtures/decode_points.yaml, the held-back points): their median error must stay within
20%; the band (kvcalc.engine.accuracy) must be what the fit points give; the roofline must stay
below every estimate and every measurement.

``python tests/test_decode_points.py`` prints the table of every point and the bands the fit
points give (what kvcalc.engine.accuracy.BANDS holds); with ``--update`` it writes the table
into docs/accuracy.md and the held-back median and worst error into README.md's line."""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

import pytest
from decode_points import Point, load_points, table

from kvcalc.engine.accuracy import BANDS, derive_bands

POINTS = load_points()
ACCURACY_PAGE = Path(__file__).parent.parent / "docs" / "accuracy.md"
BLOCK = re.compile(
    r"(<!-- BEGIN decode points [^\n]*-->\n).*?(<!-- END decode points -->)", re.S
)
HELD_BACK = [p for p in POINTS if p.role == "held_back"]
FIT = [p for p in POINTS if p.role == "fit"]


README = ACCURACY_PAGE.parent.parent / "README.md"
README_FIGURES = re.compile(r"median error \d+%, worst \d+%")


def held_back_figures() -> str:
    """The held-back points' median and worst error as README.md and docs/accuracy.md state
    them."""
    errors = [abs(p.error()) for p in HELD_BACK]
    median, worst = round(statistics.median(errors) * 100), round(max(errors) * 100)
    return f"median error {median}%, worst {worst}%"


def readme_with_figures(text: str) -> str:
    """README.md with the held-back figures in its decode line (the first such phrase)."""
    return README_FIGURES.sub(held_back_figures(), text, count=1)


def fit_ratios() -> dict[str, list[float]]:
    """Measured over estimated TPOT of the fit points, by regime."""
    ratios: dict[str, list[float]] = {}
    for p in FIT:
        estimate, measured = p.tpot_parts()
        ratios.setdefault(p.regime, []).append(measured / estimate)
    return ratios


def test_the_points_are_many_and_varied() -> None:
    assert len(HELD_BACK) >= 12 and len(FIT) >= 12
    assert {p.regime for p in HELD_BACK} >= {"single-gpu", "scale-up", "pcie"}
    assert {p.engine for p in HELD_BACK} >= {"vllm", "trtllm"}
    assert len({p.gpu for p in HELD_BACK}) >= 5
    assert len({p.weights for p in HELD_BACK}) >= 4  # bf16, fp8, int4 groups, nvfp4


def test_every_point_cites_its_source_and_role() -> None:
    for p in POINTS:
        assert p.source.startswith("https://"), p.id
        assert p.role in ("fit", "held_back"), p.id
        # A fit point names the constant it set; a held-back one sets none.
        assert (p.fits is not None) == (p.role == "fit"), p.id
    assert len({p.id for p in POINTS}) == len(POINTS)


def test_the_accuracy_page_states_the_held_back_errors() -> None:
    inside = sum(
        p.estimate_ms(bound="low") <= p.measured_ms <= p.estimate_ms(bound="high")
        for p in HELD_BACK
    )
    text = " ".join(ACCURACY_PAGE.read_text(encoding="utf-8").split())
    assert held_back_figures() in text
    readme = README.read_text(encoding="utf-8")
    assert held_back_figures() in " ".join(readme.split())
    assert readme_with_figures(readme) == readme, "run python tests/test_decode_points.py --update"
    assert f"the band holds the measured value on {inside} of {len(HELD_BACK)}" in text


def test_held_back_median_error_within_20_percent() -> None:
    sys.stdout.write("\n" + table(POINTS) + "\n")  # shown with pytest -s

    errors = [abs(p.error()) for p in HELD_BACK]
    assert statistics.median(errors) <= 0.20


#: Held-back points missed by more than half, each with its cause: a term the estimate lacks
#: or a measured build it does not model. Exact both ways (a point leaving or joining fails
#: the test); the figures quoted in README.md and docs/accuracy.md include these misses.
PAST_HALF: dict[str, str] = {}


def test_no_held_back_point_is_off_by_half() -> None:
    # The worst miss is reported in docs/accuracy.md; a miss past 50% is a broken term, and
    # one left unfixed is named in PAST_HALF with its cause.
    past = {p.id for p in HELD_BACK if abs(p.error()) > 0.50}
    assert past == set(PAST_HALF)


def test_the_bands_are_the_fit_points_spread() -> None:
    assert derive_bands(fit_ratios(), tuple(BANDS)) == BANDS


def test_the_band_holds_most_held_back_measurements() -> None:
    inside = [
        p for p in HELD_BACK
        if p.estimate_ms(bound="low") <= p.measured_ms <= p.estimate_ms(bound="high")
    ]
    assert len(inside) > len(HELD_BACK) / 2


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.id)
def test_the_roofline_is_below_the_estimate_and_the_measurement(point: Point) -> None:
    bound = point.estimate_ms(roofline=True)
    # The band's low end is clamped to the roofline (TpotEstimate.tpot_low_seconds), so it may
    # meet it; the estimate itself and the measurement stay above it.
    assert bound <= point.estimate_ms(bound="low") <= point.estimate_ms()
    assert bound < point.estimate_ms()
    assert bound < point.measured_ms


def page_with_table(text: str) -> str:
    """docs/accuracy.md with the current table of points between its markers."""
    fenced = "```text\n" + table(POINTS) + "\n```\n"
    return BLOCK.sub(lambda m: m.group(1) + fenced + m.group(2), text)


def test_the_accuracy_page_shows_the_current_table() -> None:
    text = ACCURACY_PAGE.read_text(encoding="utf-8")
    assert BLOCK.search(text)
    assert page_with_table(text) == text, "run python tests/test_decode_points.py --update"


if __name__ == "__main__":
    if "--update" in sys.argv:
        ACCURACY_PAGE.write_text(
            page_with_table(ACCURACY_PAGE.read_text(encoding="utf-8")), encoding="utf-8"
        )
        README.write_text(readme_with_figures(README.read_text(encoding="utf-8")), encoding="utf-8")
    sys.stdout.write(table(POINTS) + "\n")
    for band in derive_bands(fit_ratios(), tuple(BANDS)).values():
        sys.stdout.write(f"{band}\n")
