"""SGLang's DeepSeek-V4 pools (kvcalc.engine.sglang_dsv4) against two real start-up logs
(tests/fixtures/sglang/, README there), the rules read in the 0.5.15-0.5.20 wheels and in the
rewritten configurator of 0.5.21-0.5.23 worked by hand, their invariants, and the CLI. No
public 0.5.21+ DeepSeek-V4 start-up log was found (issues / code corpora searched for its
"DSV4 SWA sizing" and "DSV4 memory calculation: unified=" lines): those releases are checked
against the rules worked by hand from the official config only.

SGLang logs GiB with two decimals: a logged token count is reproduced when it lies between the
predictions at the two ends of that rounding.
"""

from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from report_check import refused, run_json
from specs import registry_deployment as dep
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.sglang import (
    SGLangConfigError,
    SGLangOptions,
    SGLangPool,
    default_mem_fraction_static,
    sglang_pool,
    sglang_version,
)
from kvcalc.engine.sglang_dsv4 import (
    DSV4Sizes,
    bytes_per_full_token,
    c128_state_fixed_bytes,
    dsv4_sizes,
    stage_layers,
)
from kvcalc.engine.units import GiB
from kvcalc.render import schema

LOGS = Path(__file__).parent / "fixtures" / "sglang"
HALF_CENT_GIB = Fraction("0.005") * GiB
V0518 = sglang_version("0.5.18")
FLASH = dep("deepseek-v4-flash", "4xh100", tp=4)
GEO = stage_layers(FLASH.model, range(43))


def log_line(name: str, marker: str) -> dict[str, str]:
    """The ``key=value`` figures of the fixture's first line containing ``marker``."""
    text = (LOGS / name).read_text()
    line = next(x for x in text.splitlines() if marker in x and not x.startswith("#"))
    return dict(re.findall(r"(\w+)=([0-9.]+)", line))


def gib(text: str, delta: Fraction = Fraction(0)) -> int:
    return int(Fraction(text) * GiB + delta)


# ------------------------------------------------------------------ the per-token cost


def test_flash_costs_what_both_logs_print_per_full_token() -> None:
    for name in ("dsv4-flash-0731-npu-tp4-mrr8.log",
                 "dsv4-flash-0731-npu-tp4-max-total-tokens.log"):
        logged = log_line(name, "DSV4 memory calculation")["bytes_per_full_token"]
        assert f"{bytes_per_full_token(GEO, Fraction('0.1')):.2f}" == logged


def test_flash_layers_are_43_of_which_21_c4_and_20_c128() -> None:
    # config.json compress_ratios over num_hidden_layers 43 (the 44th entry is the MTP layer's).
    assert (GEO.layers, GEO.c4_layers, GEO.c128_layers, GEO.window) == (43, 21, 20, 128)
    assert (GEO.entry_bytes, GEO.index_bytes) == (448 + 2 * 64 + 8, 128 + 4)


def test_per_token_cost_worked_by_hand() -> None:
    # r x 584 x 43 + 584 x 21/4 + 584 x 20/128 + 132 x 21/4 + r x 8/128 x (8192 + 2048) x 21,
    # at r = 0.1: 2511.2 + 3066 + 91.25 + 693 + 1344.
    assert bytes_per_full_token(GEO, Fraction("0.1")) == pytest.approx(7705.45, abs=1e-9)
    assert bytes_per_full_token(GEO, Fraction("0.5")) == pytest.approx(
        0.5 * 584 * 43 + 3066 + 91.25 + 693 + 0.5 * 0.0625 * 10240 * 21, abs=1e-9
    )


def test_c128_state_is_charged_per_request_slot() -> None:
    # (256 + 1) x 128 + 128 + 1 = 33,025 rows, padded to 33,152; x 2 x 512 x 4 B x 20 layers.
    assert c128_state_fixed_bytes(GEO, 256) == 33152 * 4096 * 20 == 2_715_811_840
    # The logs: 8 requests -> 1,408 rows (0.11 GiB), 4 -> 896 rows (0.07 GiB).
    for name, requests in (("dsv4-flash-0731-npu-tp4-mrr8.log", 8),
                           ("dsv4-flash-0731-npu-tp4-max-total-tokens.log", 4)):
        logged = log_line(name, "DSV4 memory calculation")["c128_state_fixed"]
        assert f"{c128_state_fixed_bytes(GEO, requests) / GiB:.2f}" == logged


# ------------------------------------------------------------------ the two logs


def npu_options(**kw: object) -> SGLangOptions:
    return SGLangOptions(version=V0518, page_size=128, **kw)  # type: ignore[arg-type]


def test_mrr8_log_from_its_free_memory() -> None:
    """The whole start-up: Load weight begin / end (the least of the ranks), the share, the
    budget, the split and max_running_requests."""
    name = "dsv4-flash-0731-npu-tp4-mrr8.log"
    pools = log_line(name, "DSV4 pool sizes")
    logged = log_line(name, "max_total_num_tokens=")

    def start(delta: Fraction) -> SGLangPool:
        result = sglang_pool(FLASH, npu_options(
            mem_fraction_static=Fraction("0.88"), max_running_requests=8,
            free_before_load_bytes=gib("60.50", delta), free_after_load_bytes=gib("19.15", -delta),
        ))
        assert isinstance(result, SGLangPool)
        return result

    low, high = start(HALF_CENT_GIB), start(-HALF_CENT_GIB)
    assert low.max_total_num_tokens <= int(pools["full"]) <= high.max_total_num_tokens
    assert high.max_total_num_tokens - low.max_total_num_tokens < 2000
    mid = start(Fraction(0))
    assert mid.dsv4 is not None
    assert f"{mid.dsv4.budget_bytes / GiB:.2f}" == log_line(name, "DSV4 memory")["available_bytes"]
    assert mid.swa_tokens == int(pools["swa"])
    assert mid.max_running_requests == int(logged["max_running_requests"]) == 8
    assert mid.context_length == int(logged["context_len"])


def test_mrr8_log_splits_its_full_pool_exactly() -> None:
    pools = log_line("dsv4-flash-0731-npu-tp4-mrr8.log", "DSV4 pool sizes")
    opts = npu_options(max_running_requests=8, max_total_tokens=int(pools["full"]))
    sizes = dsv4_sizes(GEO, 12 * GiB, opts)
    assert sizes is not None
    assert (sizes.full_tokens, sizes.swa_tokens, sizes.c4_tokens, sizes.c128_tokens,
            sizes.c4_state_rows) == tuple(
        int(pools[k]) for k in ("full", "swa", "c4", "c128", "c4_state"))  # fmt: skip


def test_max_total_tokens_log_before_and_after_the_clamp() -> None:
    name = "dsv4-flash-0731-npu-tp4-max-total-tokens.log"
    memory = log_line(name, "DSV4 memory calculation")
    opts = npu_options(max_running_requests=4)
    budget = [gib(memory["available_bytes"], d) for d in (-HALF_CENT_GIB, HALF_CENT_GIB)]
    low, high = (dsv4_sizes(GEO, b, opts) for b in budget)
    assert low is not None and high is not None
    assert low.full_tokens <= int(memory["full_token"]) <= high.full_tokens
    clamped = dsv4_sizes(GEO, budget[0], replace(opts, max_total_tokens=32768))
    text = (LOGS / name).read_text().splitlines()[-1]
    after = dict(re.findall(r"(\w+)=([0-9]+)", text))
    assert clamped is not None
    assert (clamped.full_tokens, clamped.swa_tokens, clamped.c4_tokens, clamped.c128_tokens,
            clamped.c4_state_rows) == tuple(
        int(after[k]) for k in ("full", "swa", "c4", "c128", "c4_state"))  # fmt: skip


# ------------------------------------------------------------------ defaults and rules


def test_cuda_defaults_page_256_ratio_01_and_256_requests() -> None:
    result = sglang_pool(FLASH, SGLangOptions(version=V0518))
    assert isinstance(result, SGLangPool) and result.dsv4 is not None
    assert result.page_size == 256
    assert result.max_total_num_tokens % 256 == 0 and result.swa_tokens is not None
    assert result.swa_tokens == int(result.max_total_num_tokens * 0.1) // 256 * 256
    assert result.max_running_requests == 256
    assert result.dsv4.c128_state_fixed_bytes == 2_715_811_840
    assert result.dsv4.c128_state_rows == 257 * 128
    assert result.dsv4.c4_state_rows == result.swa_tokens // 128 * 8


def test_default_share_reserves_no_prefill_graph() -> None:
    # 0.5.15+ turn the prefill CUDA graph off for DeepSeek-V4: on 4 H100 (81,559 MiB), 512 +
    # 8192 x 1.5 + 512 x 2 + 4/8 GiB = 14,336 MiB reserved -> round(67,223 / 81,559, 3) = 0.824.
    result = sglang_pool(FLASH, SGLangOptions(version=V0518))
    assert result.memory.prefill_graph_mib == 0
    assert result.memory.mem_fraction_static == Fraction("0.824")
    assert default_mem_fraction_static(V0518, 81559, 4, 1, 8192, 512) == Fraction("0.824")
    # 0.5.23 caps the graph batch at --max-running-requests, but DeepSeek-V4's 256 is declared
    # after handle_gpu_memory_settings (pipeline.py), so the batch stays 512 and the share too;
    # a 256 given caps it: 14,336 - 512 = 13,824 MiB -> round(67,735 / 81,559, 3) = 0.831.
    newest = sglang_pool(FLASH, SGLangOptions(version=sglang_version("0.5.23")))
    assert (newest.memory.cuda_graph_max_bs, newest.memory.mem_fraction_static) == (
        512, Fraction("0.824"))  # fmt: skip
    given = sglang_pool(FLASH, SGLangOptions(version=sglang_version("0.5.23"),
                                             max_running_requests=256))
    assert (given.memory.cuda_graph_max_bs, given.memory.mem_fraction_static) == (
        256, Fraction("0.831"))  # fmt: skip


def test_requests_are_capped_at_half_the_pool() -> None:
    opts = SGLangOptions(version=V0518, max_total_tokens=256)
    result = sglang_pool(FLASH, opts)
    assert isinstance(result, SGLangPool)
    assert (result.max_total_num_tokens, result.max_running_requests) == (256, 128)


@pytest.mark.parametrize(
    ("kw", "field", "words"),
    [
        ({"version": sglang_version("0.5.14")}, "sglang_version", "0.5.15 to 0.5.23"),
        ({"version": sglang_version("0.5.6")}, "sglang_version", "0.5.15 to 0.5.23"),
        ({"version": V0518, "page_size": 64}, "page_size", "multiple of 128"),
    ],
)
def test_refusals_name_the_input(kw: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(SGLangConfigError) as info:
        sglang_pool(FLASH, SGLangOptions(**kw))  # type: ignore[arg-type]
    assert info.value.field == field and words in str(info.value)


def test_a_bf16_cache_is_refused() -> None:
    d = dep("deepseek-v4-flash", "4xh100", tp=4, kv_dtype="bf16")
    with pytest.raises(SGLangConfigError, match="fp8"):
        sglang_pool(d, SGLangOptions(version=V0518))


@settings(max_examples=40, deadline=None)
@given(
    budget=st.integers(3 * GiB, 200 * GiB),
    more=st.integers(0, 50 * GiB),
    ratio=st.sampled_from(["0.05", "0.1", "0.25", "0.8"]),
    page=st.sampled_from([128, 256, 512]),
)
def test_more_budget_never_fewer_tokens_and_pools_stay_paged(
    budget: int, more: int, ratio: str, page: int
) -> None:
    opts = SGLangOptions(version=V0518, page_size=page, swa_full_tokens_ratio=Fraction(ratio))
    small, large = dsv4_sizes(GEO, budget, opts), dsv4_sizes(GEO, budget + more, opts)
    assert small is not None and large is not None
    assert small.full_tokens <= large.full_tokens
    for s in (small, large):
        assert isinstance(s, DSV4Sizes)
        assert s.full_tokens % page == 0 and s.swa_tokens % page == 0
        assert s.swa_tokens <= s.full_tokens * float(ratio)
        assert s.charged_bytes <= s.budget_bytes


# ------------------------------------------------------------------ 0.5.21-0.5.23

V0523 = sglang_version("0.5.23")
REWRITTEN = [sglang_version(x) for x in ("0.5.21", "0.5.22", "0.5.23")]


def test_rewritten_cost_charges_padded_pages_worked_by_hand() -> None:
    # KVLayout.V4.page_bytes at page 256: 256 x 584 = 149,504 B -> 260 rows of 576 = 149,760,
    # 585 B an entry; the C4 page of 64 entries -> 65 rows, 585 B; the C128 page of 2 entries
    # (1,168 B) -> 3 rows = 1,728 B, 864 B an entry. The C4 state per SWA page: 8 / 256.
    # 0.1 x (585 x 43 + 8/256 x 10,240 x 21) + (585/4 + 132/4) x 21 + 864/128 x 20
    # = 0.1 x (25,155 + 6,720) + 179.25 x 21 + 6.75 x 20 = 3,187.5 + 3,764.25 + 135.
    for version in REWRITTEN:
        opts = SGLangOptions(version=version, max_total_tokens=65536)
        sizes = dsv4_sizes(GEO, 100 * GiB, opts)
        assert sizes is not None
        assert sizes.bytes_per_full_token == pytest.approx(7086.75, abs=1e-9)
    assert bytes_per_full_token(GEO, Fraction("0.1"), page=256) == 7086.75


def test_rewritten_cost_at_page_128_and_with_speculation_worked_by_hand() -> None:
    # Page 128: main 128 x 584 = 74,752 -> 130 rows (585 B); C4 page of 32: 18,688 -> 33 rows
    # = 19,008 / 32 = 594 B; C128 page of 1: 584 -> 2 rows = 1,152 B; state 8 / 128.
    # 0.1 x (25,155 + 0.0625 x 10,240 x 21) + (594/4 + 33) x 21 + 1,152/128 x 20.
    assert bytes_per_full_token(GEO, Fraction("0.1"), page=128) == pytest.approx(
        3859.5 + 3811.5 + 180, abs=1e-9
    )
    # EAGLE: the 16-row ring (16/256 x 10,240 x 21 = 13,440) and x 44/43 for the draft layer.
    assert bytes_per_full_token(GEO, Fraction("0.1"), True, page=256) == pytest.approx(
        (0.1 * (25155 + 13440) + 3764.25 + 135) * 44 / 43, abs=1e-9
    )


def test_rewritten_releases_ring_the_c4_state_per_swa_page() -> None:
    # _compute_dsv4_sizes: swa_tokens // page_size x ring (0.5.20: // window, twice the rows).
    budget = 40 * GiB
    new = dsv4_sizes(GEO, budget, SGLangOptions(version=V0523))
    old = dsv4_sizes(GEO, budget, SGLangOptions(version=sglang_version("0.5.20")))
    assert new is not None and old is not None
    assert new.c4_state_rows == new.swa_tokens // 256 * 8
    assert old.c4_state_rows == old.swa_tokens // 128 * 8
    # The same budget less the 256-request C128 state, at each release's cost.
    for sizes, cost in ((new, 7086.75), (old, 7705.45)):
        assert sizes.full_tokens == int((budget - 2_715_811_840) / cost) // 256 * 256
    assert new.full_tokens > old.full_tokens


def test_rewritten_default_start_on_4_h100() -> None:
    result = sglang_pool(FLASH, SGLangOptions(version=V0523))
    assert isinstance(result, SGLangPool) and result.dsv4 is not None
    sizes = result.dsv4
    assert (result.page_size, result.max_running_requests) == (256, 256)
    assert sizes.c128_state_fixed_bytes == 2_715_811_840
    full = int((sizes.budget_bytes - sizes.c128_state_fixed_bytes) / 7086.75) // 256 * 256
    assert result.max_total_num_tokens == full
    assert result.swa_tokens == int(full * 0.1) // 256 * 256


# ------------------------------------------------------------------ CLI


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cli_json_has_the_dsv4_pools(runner: CliRunner) -> None:
    payload = run_json(runner, "batch", "deepseek-v4-flash", "--gpus", "4xh100",
                       "--engine", "sglang", "--sglang-version", "0.5.18", "--ctx", "128k")
    assert payload["page_size"] == 256
    assert payload["max_running_requests"] == 256
    pools = payload["dsv4_pools"]
    assert pools["bytes_per_full_token"] == pytest.approx(7705.45)
    assert pools["c128_state_fixed_bytes"] == 2_715_811_840
    assert pools["c4_tokens"] == payload["max_total_num_tokens"] // 4
    schema.validate("batch", payload)


def test_cli_text_prints_the_dsv4_log_lines(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "deepseek-v4-flash", "--gpus", "4xh100", "--engine",
                                 "sglang", "--sglang-version", "0.5.18"])
    assert result.exit_code == 0, result.stderr
    assert "DSV4 memory calculation: bytes_per_full_token=7705.45" in result.stdout
    assert "DSV4 pool sizes: full=" in result.stdout


def test_cli_default_release_sizes_deepseek_v4(runner: CliRunner) -> None:
    # The default release (0.5.23) prints its own three DSV4 lines.
    result = runner.invoke(app, ["batch", "deepseek-v4-flash", "--gpus", "4xh100", "--engine",
                                 "sglang"])
    assert result.exit_code == 0, result.stderr
    assert "SGLang 0.5.23" in result.stdout
    assert "DSV4 SWA sizing: mode=ratio (explicit), swa_tokens=" in result.stdout
    assert "bytes_per_full_token=7086.75" in result.stdout


def test_cli_max_running_requests_is_sglang_only(runner: CliRunner) -> None:
    refused(runner, ["batch", "deepseek-v4-flash", "--gpus", "4xh100", "--engine", "vllm",
                     "--max-running-requests", "8"], "--max-running-requests", "sglang only")
