"""SGLang 0.5.19-0.5.23, DP attention and EAGLE/MTP drafts: the rules read in the release wheels
(PyPI), each worked by hand here from the source's formula, and the CLI.

No public start-up log of 0.5.19+ (plain models), of DP attention with its free-memory lines, or
of an EAGLE target was found to check against; these are the source's rules, worked by hand.
"""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from report_check import refused, run_json
from specs import registry_deployment as dep
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.deployment import deployment
from kvcalc.engine.serving.sglang import ENGINE
from kvcalc.engine.sglang import (
    DEFAULT_VERSION,
    NEWEST,
    OLDEST,
    PrefillGraphInputs,
    SGLangConfigError,
    SGLangOptions,
    SGLangPool,
    default_chunked_prefill_size,
    default_cuda_graph_max_bs,
    default_mem_fraction_static,
    prefill_graph_capture_sizes,
    prefill_graph_enabled,
    sglang_pool,
    sglang_version,
)
from kvcalc.engine.sglang_dsv4 import bytes_per_full_token, c128_state_fixed_bytes, stage_layers
from kvcalc.render import schema

H100_MIB, H200_MIB, RTX5090_MIB = 81559, 143771, 32607


def v(text: str):  # type: ignore[no-untyped-def]
    return sglang_version(text)


def pool(d, **kw: object) -> SGLangPool:  # type: ignore[no-untyped-def]
    result = sglang_pool(d, SGLangOptions(**kw))  # type: ignore[arg-type]
    assert isinstance(result, SGLangPool), result
    return result


# ------------------------------------------------------------------ the releases


def test_the_newest_release_is_modelled_and_named_in_the_help() -> None:
    assert str(NEWEST) == "0.5.23"
    span = f"{OLDEST}-{NEWEST}"
    assert span in ENGINE.summary
    help_text = next(i.help for i in ENGINE.inputs if i.name == "sglang_version")
    assert span in help_text and f"default: {DEFAULT_VERSION}" in help_text
    with pytest.raises(SGLangConfigError, match="0.4.0 to 0.5.23"):
        sglang_version("0.5.24")


@pytest.mark.parametrize("version", ["0.5.19", "0.5.20", "0.5.21", "0.5.22", "0.5.23"])
def test_h100_share_is_unchanged_from_0518(version: str) -> None:
    # memory_hook.handle_gpu_memory_settings: 512 + 8192 x 1.5 + 256 x 2 + 1/8 GiB + 58 captured
    # prefill sizes x 8 MiB = 13,904 MiB -> floor 10 GiB -> round(67,655 / 81,559, 3) = 0.83.
    graph = len(prefill_graph_capture_sizes(8192)) * 8
    assert graph == 464
    share = default_mem_fraction_static(v(version), H100_MIB, 1, 1, 8192, 256, graph)
    assert share == Fraction("0.83")
    assert round((H100_MIB - (512 + 8192 * 1.5 + 512 + 128 + 464)) / H100_MIB, 3) == 0.83


def test_0520_raised_the_32_gib_tier() -> None:
    # 0.5.20: "(chunked_prefill_size 4k, max_bs 48 if tp < 4 else 160)" for 20-35 GiB GPUs.
    assert default_chunked_prefill_size(v("0.5.19"), RTX5090_MIB) == 2048
    assert default_cuda_graph_max_bs(v("0.5.19"), RTX5090_MIB, 1) == 24
    assert default_chunked_prefill_size(v("0.5.20"), RTX5090_MIB) == 4096
    assert default_cuda_graph_max_bs(v("0.5.20"), RTX5090_MIB, 1) == 48
    assert default_cuda_graph_max_bs(v("0.5.23"), RTX5090_MIB, 4) == 160
    # 512 + 4096 x 1.5 + 48 x 2 + 1/8 GiB + 50 captured sizes up to 4096 x 8 = 7,280 MiB, no
    # floor below 60 GiB: round(25,327 / 32,607, 3) = 0.777.
    sizes = len(prefill_graph_capture_sizes(4096))
    assert sizes == 50
    share = default_mem_fraction_static(v("0.5.20"), RTX5090_MIB, 1, 1, 4096, 48, sizes * 8)
    assert share == Fraction("0.777")


def test_0522_caps_the_graph_batch_at_the_requests_asked() -> None:
    assert default_cuda_graph_max_bs(v("0.5.21"), H100_MIB, 1, 64) == 256
    assert default_cuda_graph_max_bs(v("0.5.22"), H100_MIB, 1, 64) == 64
    assert default_cuda_graph_max_bs(v("0.5.22"), H100_MIB, 1, 1024) == 256
    # Through the pool: 64 requests asked shrink the reserve (2 MiB a batch) under 0.5.22 only
    # when the floor does not hold it; on one H100 the 10 GiB floor still does.
    d = dep("llama3.1-8b")
    assert pool(d, version=v("0.5.22"), max_running_requests=64).memory.cuda_graph_max_bs == 64
    assert pool(d, version=v("0.5.21"), max_running_requests=64).memory.cuda_graph_max_bs == 256


def test_0519_turns_the_prefill_graph_off_with_pipeline_stages() -> None:
    graph = PrefillGraphInputs(chunked_prefill_size=8192, pp=2, mla=False, llama2=False)
    assert prefill_graph_enabled(v("0.5.18"), graph)
    assert not prefill_graph_enabled(v("0.5.19"), graph)
    assert not prefill_graph_enabled(v("0.5.23"), graph)
    assert prefill_graph_enabled(v("0.5.23"), replace(graph, pp=1))
    assert not prefill_graph_enabled(v("0.5.23"), replace(graph, pp=1, dsv4=True))


def test_requests_asked_replace_the_estimate_capped_at_half_the_pool() -> None:
    d = dep("llama3.1-8b")
    default = pool(d, version=v("0.5.23"))
    asked = pool(d, version=v("0.5.23"), max_running_requests=100)
    assert default.max_running_requests == 2048
    assert asked.max_running_requests == asked.req_pool_size == 100
    capped = pool(d, version=v("0.5.23"), max_running_requests=100, max_total_tokens=150)
    assert capped.max_running_requests == 75
    # Before 0.5.10 the pool is the size asked and the scheduler does not halve it.
    old = pool(d, version=v("0.5.6"), max_running_requests=100, max_total_tokens=150)
    assert (old.req_pool_size, old.max_running_requests) == (100, 100)


# ------------------------------------------------------------------ DP attention


def test_dp_attention_reserve_in_the_default_share() -> None:
    # 8 H200, tp 8, dp 8, DeepSeek-V3 (MLA: a flat 1.5 GiB prefill graph): 512 + 8192 x 1.5 +
    # 512 x 2 + 8/8 GiB + 1,536 + 512 x 8 x 3 + 512 x 8 x 1.5 (graph batch > 300) = 34,816 MiB.
    reserved = 512 + 8192 * 1.5 + 512 * 2 + 1024 + 1536 + 512 * 8 * 3 + 512 * 8 * 1.5
    assert reserved == 34816
    d = dep("deepseek-v3", "8xh200", tp=8)
    on = pool(d, version=v("0.5.18"), enable_dp_attention=True, dp_size=8)
    off = pool(d, version=v("0.5.18"))
    assert on.memory.mem_fraction_static == Fraction("0.758")
    assert round((H200_MIB - reserved) / H200_MIB, 3) == 0.758
    assert off.memory.mem_fraction_static == Fraction("0.886")
    # 0.4.7.post1-0.5.2: a flat 4 GiB more.
    assert default_mem_fraction_static(v("0.5.2"), H200_MIB, 8, 1, 0, 0, 0, 8) == Fraction(
        str(round((H200_MIB - (12 + 8 / 2) * 1024 - 4096) / H200_MIB, 3))
    )


def test_dp_attention_splits_heads_over_attention_tp_and_not_the_latent() -> None:
    # llama3-70b: 8 KV heads of 128, 80 layers, bf16. tp 8 -> 1 head a rank; tp 8 with dp 4 ->
    # attention tp 2 -> 4 heads a rank: 4 x 128 x 2 x 80 x 2 B = 163,840 B.
    d = dep("llama3-70b", "8xh100", tp=8)
    assert pool(d, version=v("0.5.23")).cell_size == 1 * 128 * 2 * 80 * 2
    dp = pool(d, version=v("0.5.23"), enable_dp_attention=True, dp_size=4)
    assert dp.cell_size == 4 * 128 * 2 * 80 * 2 == 163840
    mla = dep("deepseek-v3", "8xh200", tp=8)
    latent = (512 + 64) * 61 * 2
    assert pool(mla, version=v("0.5.23")).cell_size == latent
    assert pool(mla, version=v("0.5.23"), enable_dp_attention=True, dp_size=8).cell_size == latent


def test_dp_attention_requests_per_rank_and_concurrency_over_the_ranks() -> None:
    d = dep("deepseek-v3", "8xh200", tp=8)
    result = pool(d, version=v("0.5.23"), enable_dp_attention=True, dp_size=8,
                  max_running_requests=256)
    assert result.dp_size == 8
    assert result.max_running_requests == 256 // 8
    for tokens in (8192, 32768):
        assert result.replica_concurrency(tokens) == 8 * result.concurrency(tokens)


@pytest.mark.parametrize(
    ("model", "gpus", "tp", "kw", "words"),
    [
        ("llama3-70b", "8xh100", 8, {"dp_size": 3}, "does not divide --tp 8"),
        ("llama3-70b", "8xh100", 8, {"dp_size": 1}, "2 or more"),
        ("llama3.1-8b", "h100", 1, {"dp_size": 2, "version": "0.4.6"}, "0.4.7.post1"),
        ("qwen3-next-80b-a3b", "4xh200", 4, {"dp_size": 2, "version": "0.5.9"}, "mamba pool"),
    ],
)
def test_dp_attention_refusals_name_dp_size(
    model: str, gpus: str, tp: int, kw: dict[str, object], words: str
) -> None:
    opts = {**kw, "enable_dp_attention": True}
    if "version" in opts:
        opts["version"] = v(str(opts["version"]))
    with pytest.raises(SGLangConfigError) as info:
        sglang_pool(dep(model, gpus, tp=tp), SGLangOptions(**opts))  # type: ignore[arg-type]
    assert info.value.field == "dp_size" and words in str(info.value)


# ------------------------------------------------------------------ speculative decoding


def mtp_deployment():  # type: ignore[no-untyped-def]
    """DeepSeek-V3 with its config's one MTP layer (num_nextn_predict_layers = 1)."""
    base = dep("deepseek-v3", "8xh200", tp=8)
    return deployment(replace(base.model, mtp_layers=1), base.gpus, tp=8)


def test_eagle_draft_is_priced_into_the_cell() -> None:
    # DefaultPoolConfigurator: int(70,272 x (1 + 1 / 61)) = 71,424 (the latent of 62 layers).
    d = mtp_deployment()
    plain = pool(d, version=v("0.5.18"))
    eagle = pool(d, version=v("0.5.18"), speculative_algorithm="EAGLE")
    assert plain.cell_size == 70272
    assert eagle.cell_size == int(70272 * (1 + 1 / 61)) == 71424
    assert eagle.cells.draft_layers == 1
    assert eagle.max_running_requests == 48  # _handle_eagle_family's default
    same = pool(d, version=v("0.5.18"), speculative_algorithm="NEXTN", max_running_requests=100)
    assert same.cell_size == 71424 and same.max_running_requests == 100


@pytest.mark.parametrize(
    ("model", "kw", "words"),
    [
        ("mtp", {"speculative_algorithm": "NGRAM", "version": "0.5.18"}, "not modelled"),
        ("mtp", {"speculative_algorithm": "EAGLE", "version": "0.5.13"}, "0.5.14 or later"),
        ("llama3-70b", {"speculative_algorithm": "EAGLE", "version": "0.5.18"}, "no MTP layers"),
    ],
)
def test_speculative_refusals(model: str, kw: dict[str, object], words: str) -> None:
    d = mtp_deployment() if model == "mtp" else dep(model, "8xh100", tp=8)
    opts = {**kw, "version": v(str(kw["version"]))}
    with pytest.raises(SGLangConfigError) as info:
        sglang_pool(d, SGLangOptions(**opts))  # type: ignore[arg-type]
    assert info.value.field == "speculative_algorithm" and words in str(info.value)


def test_dsv4_speculative_doubles_the_rings_and_adds_the_draft_layer() -> None:
    d = dep("deepseek-v4-flash", "4xh100", tp=4)
    geo = stage_layers(d.model, range(43))
    # Ring 16: 2511.2 + 3066 + 91.25 + 693 + 0.1 x 16/128 x 10,240 x 21 = 9,049.45; x 44 / 43.
    assert bytes_per_full_token(geo, Fraction("0.1"), True) == pytest.approx(
        9049.45 * 44 / 43, abs=1e-9
    )
    # C128 rows: (257 x 256 + 256 + 1) = 66,049 -> padded to 66,176.
    assert c128_state_fixed_bytes(geo, 256, 256) == 66176 * 4096 * 20
    result = pool(d, version=v("0.5.18"), speculative_algorithm="EAGLE")
    assert result.dsv4 is not None
    assert result.max_running_requests == 256  # the DSV4 hook fills it before the EAGLE hook
    assert result.dsv4.c4_state_rows == result.dsv4.swa_tokens // 128 * 16
    assert result.dsv4.c128_state_rows == 257 * 256


# ------------------------------------------------------------------ CLI


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


def test_cli_dp_attention_json(runner: CliRunner) -> None:
    payload = run_json(runner, "batch", "deepseek-v3", "--gpus", "8xh200", "--engine", "sglang",
                       "--sglang-version", "0.5.23", "--dp-size", "8", "--ctx", "8k")
    assert payload["dp_attention_ranks"] == 8
    # 0.5.23 is the default release (given or not).
    assert payload["sglang_version"] == "0.5.23" and payload["sglang_version_default"] is True
    row = payload["contexts"][0]
    assert row["max_batch_per_replica"] % 8 == 0
    schema.validate("batch", payload)


def test_cli_says_the_default_release(runner: CliRunner) -> None:
    payload = run_json(runner, "batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang")
    assert payload["sglang_version"] == str(DEFAULT_VERSION)
    assert payload["sglang_version_default"] is True
    args = ["batch", "llama3.1-8b", "--gpus", "h100", "--engine", "sglang"]
    text = runner.invoke(app, args).stdout
    assert DEFAULT_VERSION == NEWEST
    assert f"SGLang {NEWEST} (kvcalc's default, the newest release)" in text
    older = run_json(runner, *args, "--sglang-version", "0.5.6")
    assert older["sglang_version"] == "0.5.6" and older["sglang_version_default"] is False
    assert "kvcalc's default" not in runner.invoke(app, [*args, "--sglang-version", "0.5.6"]).stdout


def test_cli_speculative_on_dsv4(runner: CliRunner) -> None:
    payload = run_json(runner, "batch", "deepseek-v4-flash", "--gpus", "4xh100", "--engine",
                       "sglang", "--sglang-version", "0.5.18", "--speculative-algorithm", "eagle")
    assert payload["dsv4_pools"]["bytes_per_full_token"] == pytest.approx(
        9049.45 * 44 / 43, abs=1e-3
    )
    schema.validate("batch", payload)


@pytest.mark.parametrize("flag", [["--dp-size", "8"], ["--speculative-algorithm", "EAGLE"]])
def test_cli_new_options_are_sglang_only(runner: CliRunner, flag: list[str]) -> None:
    refused(runner, ["batch", "deepseek-v3", "--gpus", "8xh200", "--engine", "vllm", *flag],
            flag[0], "sglang only")


def test_default_release_sizes_every_registry_model_sglang_serves() -> None:
    """The default (0.5.23) refuses only the registry models SGLang 0.5.23 has no model for:
    Jamba (no Mamba-1 model file in the 0.5.10-0.5.23 wheels) and MiniMax's lightning attention
    (no such pool), and the block-FP8 MiniMax-M2 family at the tp 8 kvcalc picks on 8 GPUs
    (1,536 expert rows, 192 a rank; sglang #23265 "Unable to Load MiniMax 2.7 on 8 GPUs" stops
    in the experts' create_weights, and SGLang's own launch line for it adds --ep-size 8);
    DeepSeek-V4, Qwen3.5 / Qwen3.6 and Gemma 4 are sized."""
    import kvcalc
    from kvcalc.errors import KvcalcError
    from kvcalc.registry.load import all_models

    not_sized: set[str] = set()
    for model in all_models():
        try:
            kvcalc.batch(model.id, gpus="8xH100", engine="sglang")
        except KvcalcError:
            not_sized.add(model.id)
    assert not_sized == {"jamba-v0.1", "minimax-m1", "minimax-text-01", "minimax-m2",
                         "minimax-m2.5", "minimax-m2.7"}
    kvcalc.batch("minimax-m2.7", gpus="8xH100", engine="sglang", tp=4)  # the refusal's fix


def test_the_docs_state_the_releases_and_the_default() -> None:
    """The prose that names the releases SGLang is modelled for and the default one (the README's
    command table, docs/engines.md, calibrate's page, the JSON vocabulary) names this module's,
    so the next release fails the prose still naming the old one."""
    from pathlib import Path

    from kvcalc.render.vocabulary import VOCABULARY

    root = Path(__file__).resolve().parents[1]

    def text(path: str) -> str:
        return " ".join((root / path).read_text().split())

    assert f"`max_running_requests`, v{OLDEST}-{NEWEST} |" in text("README.md")
    engines = text("docs/engines.md")
    assert f"for releases {OLDEST} to {NEWEST}, the newest on PyPI" in engines
    assert f"(`--sglang-version`, default {DEFAULT_VERSION}, the newest;" in engines
    assert f"The default release is {DEFAULT_VERSION}, the newest" in engines
    assert f"the newest, {DEFAULT_VERSION}, without it" in text("docs/commands/calibrate.md")
    assert f"({DEFAULT_VERSION}, the newest)" in VOCABULARY["sglang_version_default"].meaning
