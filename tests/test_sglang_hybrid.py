"""SGLang 0.5.10-0.5.23's hybrid pools (kvcalc/engine/sglang_hybrid.py): the mamba / GDN /
short-conv state pool and the sliding-window pool, against real logs (tests/fixtures/sglang/)
and the wheels' rules worked by hand.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest
from report_check import refused, run_json
from specs import registry_deployment as dep
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.sglang import (
    SGLangConfigError,
    SGLangOptions,
    SGLangPool,
    SGLangPoolTooSmall,
    rank_cells,
    sglang_pool,
    sglang_version,
)
from kvcalc.engine.units import GiB

FIXTURES = Path(__file__).parent / "fixtures" / "sglang"


def opts(version: str, **kw: object) -> SGLangOptions:
    return SGLangOptions(version=sglang_version(version), **kw)  # type: ignore[arg-type]


def pool(d, version: str, **kw: object) -> SGLangPool:  # type: ignore[no-untyped-def]
    result = sglang_pool(d, opts(version, **kw))
    assert isinstance(result, SGLangPool), result
    return result


def given(before: str, after: str, share: str) -> dict[str, object]:
    return {
        "free_before_load_bytes": int(Fraction(before) * GiB),
        "free_after_load_bytes": int(Fraction(after) * GiB),
        "mem_fraction_static": Fraction(share),
    }


def log_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def gb(nbytes: int) -> str:
    """SGLang's "%.2f GB" of a byte count (GiB)."""
    return f"{nbytes / GiB:.2f}"


# ------------------------------------------------------------------ real logs: the state pool


@pytest.mark.parametrize(
    ("log", "model_id", "slots", "conv_gb", "ssm_gb", "tokens", "k_gb"),
    [
        ("qwen3.5-397b-a17b-ktransformers-2x4090-tp2.log", "qwen3.5-397b-a17b", 82, "0.13",
         "7.29", 580364, "4.15"),
        ("qwen3.5-9b-tp2-blog.log", "qwen3.5-9b", 186, "0.10", "4.38", 327310, "2.50"),
    ],
)
def test_logged_state_and_kv_sizes(
    log: str, model_id: str, slots: int, conv_gb: str, ssm_gb: str, tokens: int, k_gb: str
) -> None:
    text = log_text(log)
    for figure in (f"max_mamba_cache_size: {slots}", conv_gb, ssm_gb, str(tokens), k_gb):
        assert figure in text
    cells = rank_cells(dep(model_id, "2xh100", tp=2), opts("0.5.23"))
    # MambaPool allocates max_mamba_cache_size + 1 slots (slot 0 pads), the KV pool #tokens + 1.
    ssm = cells.state_bytes_per_request
    per_layer_ssm = {"qwen3.5-397b-a17b": 2 * 2**20 * 45, "qwen3.5-9b": 2**20 * 24}[model_id]
    assert gb((slots + 1) * per_layer_ssm) == ssm_gb
    assert gb((slots + 1) * (ssm - per_layer_ssm)) == conv_gb
    assert gb((tokens + 1) * cells.full_bytes_per_token // 2) == k_gb


@pytest.mark.parametrize(
    ("model_id", "slots", "tokens", "version"),
    [
        ("qwen3.5-397b-a17b", 82, 580364, "0.5.10"),
        ("qwen3.5-397b-a17b", 82, 580364, "0.5.17"),
        ("qwen3.5-9b", 186, 327310, "0.5.10"),
        ("qwen3.5-9b", 186, 327310, "0.5.17"),
    ],
)
def test_logged_slots_follow_from_the_budget_the_tokens_imply(
    model_id: str, slots: int, tokens: int, version: str
) -> None:
    # The logs give no share, so the budget is fitted to the logged #tokens (every budget that
    # leaves tokens x cell .. (tokens + 1) x cell for the KV pool); the r / (1 + r) split must
    # then give the logged slot count, under either slot rule (0.5.17, the padding slot's first
    # release, keeps no multimodal reservation yet).
    d = dep(model_id, "2xh100", tp=2)
    cells = rank_cells(d, opts(version))
    padding = 1 if version == "0.5.17" else 0
    for kv_bytes in (tokens * cells.full_bytes_per_token,
                     (tokens + 1) * cells.full_bytes_per_token - 1):
        rest = kv_bytes + (slots + padding) * cells.state_bytes_per_request
        before = 40 * GiB
        share = 1 - Fraction(30 * GiB - rest, before)
        result = pool(d, version, free_before_load_bytes=before,
                      free_after_load_bytes=30 * GiB, mem_fraction_static=share,
                      context_length=8192)
        assert result.mamba_cache_size == slots
        assert result.max_total_num_tokens == tokens


# ------------------------------------------------------------------ the state pool by release


QWEN35_27B = given("78.43", "27.00", "0.8")


def test_v0523_qwen35_27b_worked_by_hand() -> None:
    # rest = 27.00 - 78.43 x 0.2 GiB less the multimodal cache's 100 MiB (0.5.18+) =
    # 12,043,457,396 B (floor); the pool's share rest x 0.9 / 1.9 = 5,704,795,608 B; per request
    # 48 GDN layers x (61,440 conv + 3,145,728 ssm) = 153,944,064 B; 0.5.17+: (share - per) //
    # per = 36 slots, (36 + 1) x per out of rest, // 65,536 (16 full layers x 4 heads x 256 x 2
    # x 2) = 96,855 tokens; requests min(2048, 36 // 5) = 7 (the extra buffer: 3 + 2 each).
    r = pool(dep("qwen3.5-27b"), "0.5.23", **QWEN35_27B)
    assert (r.mamba_cache_size, r.max_total_num_tokens) == (36, 96855)
    assert (r.req_pool_size, r.max_running_requests) == (7, 7)


def test_v0517_solves_for_the_padding_slot() -> None:
    # 0.5.16: share // per = 37 slots, 37 x per out of the budget (the same 98,455 tokens).
    old = pool(dep("qwen3.5-27b"), "0.5.16", **QWEN35_27B)
    new = pool(dep("qwen3.5-27b"), "0.5.17", **QWEN35_27B)
    assert (old.mamba_cache_size, new.mamba_cache_size) == (37, 36)
    assert old.max_total_num_tokens == new.max_total_num_tokens == 98455


def test_v0514_picks_the_extra_buffer_for_gdn_and_mamba2() -> None:
    # 0.5.13: "no_buffer", 3 slots a request (37 // 3 = 12); 0.5.14: "extra_buffer", 5 (7).
    assert pool(dep("qwen3.5-27b"), "0.5.13", **QWEN35_27B).max_running_requests == 12
    assert pool(dep("qwen3.5-27b"), "0.5.14", **QWEN35_27B).max_running_requests == 7
    nemo = [pool(dep("nemotron-h-8b"), ver, **given("78.43", "60", "0.8"))
            for ver in ("0.5.13", "0.5.14")]
    assert [r.mamba_cache_size // r.req_pool_size for r in nemo] == [3, 5]


def test_lfm2_keeps_no_buffer() -> None:
    # LFM2 is not in _MAMBA_EXTRA_BUFFER_ARCHS: 3 slots a request in every release (30 slots:
    # 10 requests; Granite-4.0-H's extra buffer: 6).
    kw = {**given("21.5", "20", "0.2"), "max_mamba_cache_size": 30}
    lfm2 = pool(dep("lfm2-700m", "l4"), "0.5.23", **kw)
    granite = pool(dep("granite-4.0-h-micro", "l4"), "0.5.23", **kw)
    assert (lfm2.req_pool_size, lfm2.mamba_slots_per_request) == (10, 3)
    assert (granite.req_pool_size, granite.mamba_slots_per_request) == (6, 5)


def test_v0510_has_the_first_hybrid_rules() -> None:
    # 0.5.10: share // per (the 0.5.6 form), 3 slots a request (no_buffer).
    r = pool(dep("qwen3.5-27b"), "0.5.10", **QWEN35_27B)
    assert (r.mamba_cache_size, r.max_total_num_tokens, r.req_pool_size) == (37, 98455, 12)


def test_jamba_is_not_served_from_0510() -> None:
    with pytest.raises(SGLangConfigError, match="no model with Mamba-1 layers"):
        sglang_pool(dep("jamba-v0.1", "2xh100", tp=2), opts("0.5.23"))


def test_mamba_with_dp_attention_or_a_draft_is_refused() -> None:
    with pytest.raises(SGLangConfigError, match="DP attention splits"):
        sglang_pool(dep("qwen3.5-27b", "2xh100", tp=2),
                    opts("0.5.23", enable_dp_attention=True, dp_size=2))
    with pytest.raises(SGLangConfigError, match="draft"):
        sglang_pool(dep("qwen3.5-27b"), opts("0.5.23", speculative_algorithm="EAGLE"))


# ------------------------------------------------------------------ the sliding-window pool


def test_gemma4_cell_matches_the_logged_configurator_line() -> None:
    text = log_text("gemma-4-pool-config-dgx-spark.log")
    for model_id, logged in (("gemma-4-26b-a4b", "184320.0"), ("gemma-4-31b", "737280.0")):
        assert f"cell_size_bytes={logged}" in text
        c = rank_cells(dep(model_id), opts("0.5.23"))
        assert c.full_bytes_per_token + Fraction("0.8") * c.swa_bytes_per_token == Fraction(
            logged
        )


GEMMA4 = given("78.43", "30.00", "0.8")


def test_v0523_gemma4_worked_by_hand() -> None:
    # rest = 30.00 - 78.43 x 0.2 GiB - 100 MiB = 15,264,682,868 B; the cell F + 0.8 S = 20,480 +
    # 0.8 x 204,800 = 184,320 B; full = rest // 184,320 = 82,816; swa = int(82,816 x 0.8) =
    # 66,252.
    r = pool(dep("gemma-4-26b-a4b"), "0.5.23", **GEMMA4)
    assert (r.max_total_num_tokens, r.swa_tokens) == (82816, 66252)


def test_v0510_redistributes_a_budget_priced_as_full() -> None:
    # 0.5.10 (which has no Gemma 4: gpt-oss-20b's 12 full + 12 sliding layers of 8 heads x 64,
    # F = S = 12 x 2,048 = 24,576 B): tokens = rest // (F + S); full = int(tokens x (F + S) /
    # (F + 0.8 S)), one token short of 0.5.11's rest // (F + 0.8 S) here.
    old = pool(dep("gpt-oss-20b"), "0.5.10", **GEMMA4)
    new = pool(dep("gpt-oss-20b"), "0.5.11", **GEMMA4)
    rest = old.memory.rest_bytes
    tokens = math.floor(rest / 49152)
    assert old.max_total_num_tokens == math.floor(Fraction(tokens * 49152) / Fraction("44236.8"))
    assert new.max_total_num_tokens == math.floor(rest / Fraction("44236.8"))
    assert old.swa_tokens == math.floor(old.max_total_num_tokens * Fraction("0.8"))


def test_gemma4_is_served_from_0511() -> None:
    with pytest.raises(SGLangConfigError, match="Gemma 4"):
        sglang_pool(dep("gemma-4-26b-a4b"), opts("0.5.10"))


def test_v0518_keeps_100_mib_of_a_multimodal_budget() -> None:
    # mm_runtime_reservation_gb: 100 MiB out of rest before the pools; 0.5.17 keeps none.
    old = pool(dep("gemma-4-26b-a4b"), "0.5.17", **GEMMA4)
    new = pool(dep("gemma-4-26b-a4b"), "0.5.18", **GEMMA4)
    assert old.memory.rest_bytes - new.memory.rest_bytes == 100 * 2**20
    text_only = pool(dep("gpt-oss-20b"), "0.5.18", **GEMMA4)
    assert text_only.memory.rest_bytes == old.memory.rest_bytes


def test_vlm_share_of_a_vision_tower() -> None:
    # adjust_mem_fraction_for_vlm: score 27 x 1152^2 / (24 x 1024^2) = 1.423828125, factor
    # 0.95 x (1 - 0.0423828125) = 0.909736328125 of the default share. Gemma 4 on one H100 at
    # 0.5.23: the default without a prefill graph (multimodal: off; 1 - (512 + 12,288 + 512 +
    # 128) / 81,559 = 0.835) x 0.909736... = 0.75963...; the text-only gpt-oss keeps 0.83.
    g = pool(dep("gemma-4-26b-a4b"), "0.5.23")
    assert float(g.memory.mem_fraction_static) == pytest.approx(0.835 * 0.909736328125, abs=1e-12)
    assert g.memory.prefill_graph_mib == 0
    assert float(pool(dep("gpt-oss-20b"), "0.5.23").memory.mem_fraction_static) == 0.83


def test_qwen35_keeps_the_prefill_graph_from_0516() -> None:
    # multimodal_breakable_cuda_graph_supported_model_archs holds Qwen3_5(Moe)ForConditional-
    # Generation from 0.5.16: 464 MiB of graph (58 sizes x 8) in the share; none in 0.5.15.
    d = dep("qwen3.5-27b")
    assert pool(d, "0.5.15").memory.prefill_graph_mib == 0
    assert pool(d, "0.5.16").memory.prefill_graph_mib == 464


def test_the_ratio_and_the_cap_apply_to_the_full_pool() -> None:
    r = pool(dep("gemma-4-26b-a4b"), "0.5.23", **GEMMA4, swa_full_tokens_ratio=Fraction("0.5"),
             max_total_tokens=50000)
    assert (r.max_total_num_tokens, r.swa_tokens) == (50000, 25000)


def test_gemma3_keeps_one_pool_and_refuses_the_ratio() -> None:
    one = pool(dep("gemma3-27b", "2xh100", tp=2), "0.5.23")
    assert one.swa_tokens is None
    with pytest.raises(SGLangConfigError, match="one pool"):
        sglang_pool(dep("gemma3-27b", "2xh100", tp=2),
                    opts("0.5.23", swa_full_tokens_ratio=Fraction("0.5")))


def test_gpt_oss_pools_its_window_apart_from_0510() -> None:
    old = pool(dep("gpt-oss-20b"), "0.5.9")
    new = pool(dep("gpt-oss-20b"), "0.5.10")
    assert old.swa_tokens is None and new.swa_tokens is not None
    assert new.swa_tokens == math.floor(new.max_total_num_tokens * Fraction("0.8"))


def test_v0520_refuses_an_swa_pool_below_one_window() -> None:
    # gpt-oss's window is 128: a 100-token full pool at ratio 0.8 leaves 80 SWA slots.
    kw = {**GEMMA4, "max_total_tokens": 100}
    assert pool(dep("gpt-oss-20b"), "0.5.19", **kw).swa_tokens == 80
    small = sglang_pool(dep("gpt-oss-20b"), opts("0.5.20", **kw))
    assert isinstance(small, SGLangPoolTooSmall)
    assert "SWA pool (80 tokens) cannot hold even one request" in small.message


# ------------------------------------------------------------------ the command line


def test_cli_sizes_qwen35_at_the_newest_release(runner: CliRunner) -> None:
    data = run_json(runner, "batch", "qwen3.5-27b", "--gpus", "h100", "--engine", "sglang",
                    "--sglang-version", "0.5.23", "--mem-fraction-static", "0.8",
                    "--free-before-load", "78.43", "--free-after-load", "27")
    text = str(data)
    assert "'max_total_num_tokens': 96855" in text and "'max_mamba_cache_size': 36" in text


def test_cli_an_swa_pool_below_its_window_does_not_fit(runner: CliRunner) -> None:
    result = runner.invoke(app, ["batch", "gemma-4-31b", "--gpus", "h100", "--engine", "sglang",
                                 "--sglang-version", "0.5.23", "--ctx", "8k"])
    assert result.exit_code == 1
    assert "does not fit: SWA pool (" in result.stdout


def test_cli_refuses_jamba_at_the_newest_release(runner: CliRunner) -> None:
    args = ["batch", "jamba-v0.1", "--gpus", "2xh100", "--tp", "2", "--engine", "sglang"]
    for given in ([], ["--sglang-version", "0.5.23"]):  # the default release is the newest
        line = refused(runner, [*args, *given], "no model with Mamba-1 layers",
                       "--sglang-version 0.5.9 or --engine vllm")
        assert "{" not in line


def test_json_names_the_slots_per_request_of_hybrids_only(runner: CliRunner) -> None:
    base = ["--gpus", "h100", "--engine", "sglang", "--sglang-version", "0.5.23"]
    hybrid = str(run_json(runner, "batch", "qwen3.5-27b", *base))
    plain = str(run_json(runner, "batch", "llama3.1-8b", *base))
    assert "'mamba_slots_per_request': 5" in hybrid
    assert "mamba_slots_per_request" not in plain


# ------------------------------------------------------------------ state shapes (0.5.23)


@pytest.mark.parametrize(
    ("model_id", "tp", "layers", "conv_dim", "heads", "head_dim", "state"),
    [
        # Mamba2StateShape.create (configs/mamba_utils.py): conv (conv_dim / tp, kernel - 1) at
        # bf16, temporal (heads / tp, head_dim, state) at fp32; n_groups not divisible by tp is
        # extended (extra_groups_for_head_shards: 1 group -> tp groups).
        ("granite-4.0-h-small", 1, 36, 8192 + 2 * 1 * 128, 128, 64, 128),
        ("granite-4.0-h-small", 2, 36, 8192 + 2 * 2 * 128, 128, 64, 128),
        ("granite-4.0-h-small", 4, 36, 8192 + 2 * 4 * 128, 128, 64, 128),
        ("nemotron-h-8b", 2, 24, 8192 + 2 * 8 * 128, 128, 64, 128),
        # Qwen3-Next's GDN (configs/qwen3_next.py): intermediate 32 x 128, 16 key groups of
        # state 128, kernel 4; temporal (32 / tp, 128, 128).
        ("qwen3-next-80b-a3b", 1, 36, 32 * 128 + 2 * 16 * 128, 32, 128, 128),
    ],
)
def test_state_bytes_per_request_follow_sglangs_state_shapes(
    model_id: str, tp: int, layers: int, conv_dim: int, heads: int, head_dim: int, state: int
) -> None:
    conv = conv_dim // tp * 3 * 2
    temporal = heads // tp * head_dim * state * 4
    cells = rank_cells(dep(model_id, "4xh100", tp=tp), opts("0.5.23"))
    assert cells.state_bytes_per_request == layers * (conv + temporal)


def test_mamba_options_resize_the_state_pool() -> None:
    # --max-mamba-cache-size 20: 21 x 153,944,064 B out of rest (0.5.23), the rest to the KV
    # pool; --mamba-full-memory-ratio 0.45: the share is rest x 0.45 / 1.45.
    d = dep("qwen3.5-27b")
    fixed = pool(d, "0.5.23", **QWEN35_27B, max_mamba_cache_size=20)
    base = pool(d, "0.5.23", **QWEN35_27B)
    assert fixed.mamba_cache_size == 20
    assert fixed.max_total_num_tokens == math.floor(
        (base.memory.rest_bytes - 21 * 153944064) / 65536
    )
    half = pool(d, "0.5.23", **QWEN35_27B, mamba_full_memory_ratio=Fraction("0.45"))
    share = base.memory.rest_bytes * Fraction("0.45") / Fraction("1.45")
    assert half.mamba_cache_size == math.floor((share - 153944064) / 153944064)


def test_mamba_options_are_refused_where_they_do_nothing(runner: CliRunner) -> None:
    refused(runner, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang",
                     "--mamba-full-memory-ratio", "0.5"], "has no mamba")
    refused(runner, ["batch", "qwen3.5-27b", "--gpus", "h100", "--engine", "sglang",
                     "--sglang-version", "0.5.9", "--max-mamba-cache-size", "8"],
            "modelled from SGLang 0.5.10")
    refused(runner, ["batch", "qwen3.5-27b", "--gpus", "h100", "--engine", "vllm",
                     "--max-mamba-cache-size", "8"], "--max-mamba-cache-size")


def test_mamba_ssm_dtype_halves_the_temporal_state(runner: CliRunner) -> None:
    # Qwen3.5-27B: 48 x (61,440 conv + 128 x 128 x 48 x 2 bf16) = 78,446,592 B per request.
    d = dep("qwen3.5-27b")
    assert rank_cells(d, opts("0.5.23", mamba_ssm_dtype="bf16")).state_bytes_per_request == (
        48 * (61440 + 48 * 128 * 128 * 2)
    )
    data = str(run_json(runner, "batch", "qwen3.5-27b", "--gpus", "h100", "--engine", "sglang",
                        "--sglang-version", "0.5.23", "--mamba-ssm-dtype", "bfloat16"))
    assert "'mamba_bytes_per_request': 78446592" in data
    refused(runner, ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang",
                     "--mamba-ssm-dtype", "bf16"], "has no mamba")
    refused(runner, ["batch", "qwen3.5-27b", "--gpus", "h100", "--engine", "sglang",
                     "--mamba-ssm-dtype", "int8"], "not one of fp32, bf16, fp16")


def test_pipeline_ranks_charge_the_state_as_their_release_does() -> None:
    # Qwen3.5-27B over 2 stages of 32 layers: 24 GDN layers each (3,207,168 B a layer). Up to
    # 0.5.16 every rank charges the whole model's 48 layers; 0.5.17+ the largest stage's 24.
    d = dep("qwen3.5-27b", "2xh100", pp=2)
    layer = 61440 + 3145728
    assert rank_cells(d, opts("0.5.16")).state_bytes_per_request == 48 * layer
    assert rank_cells(d, opts("0.5.17")).state_bytes_per_request == 24 * layer
    assert rank_cells(dep("qwen3.5-27b"), opts("0.5.16")).state_bytes_per_request == 48 * layer


def test_the_piecewise_graphs_blacklist() -> None:
    # piecewise_cuda_graph_disabled_model_archs: Qwen3NextForCausalLM in 0.5.10-0.5.14 (the
    # breakable graph of 0.5.15+ does not read it), DeepseekV32ForCausalLM in 0.5.10-0.5.12.
    nxt = dep("qwen3-next-80b-a3b", "4xh100", tp=4)
    assert pool(nxt, "0.5.14").memory.prefill_graph_mib == 0
    assert pool(nxt, "0.5.15").memory.prefill_graph_mib == 464
    v32 = dep("deepseek-v3.2", "8xh200", tp=8)
    graph = [sglang_pool(v32, opts(ver)).memory.prefill_graph_mib for ver in ("0.5.12", "0.5.13")]
    assert graph[0] == 0 and graph[1]
