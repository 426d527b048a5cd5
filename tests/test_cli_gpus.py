"""`kvcalc gpus` through the typer app: table, JSON, filtering, --check and errors."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.registry.gpus import gpu_paths, gpus_dir

JSON_KEYS = {
    "id",
    "name",
    "vendor",
    "aliases",
    "memory_bytes",
    "memory_basis",
    "memory_marketed",
    "memory_type",
    "memory_unified",
    "memory_reported",
    "bandwidth_bytes_per_s",
    "dense_flops",
    "interconnect",
    "interconnect_bytes_per_s",
    "pcie_bytes_per_s",
    "tdp_w",
    "node_gpus",
    "compute_capability",
    "sm_count",
    "efficiency",
    "status",
    "unverified",
}


def test_table_lists_every_accelerator(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus"])
    assert result.exit_code == 0, result.stderr
    for path in gpu_paths():
        assert path.stem in result.stdout
    assert "\x1b[" not in result.stdout  # no colour when not a terminal


def test_table_row_for_h100(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "h100"])
    assert result.exit_code == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "h100-sxm" in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells == [
        "h100-sxm",
        "NVIDIA H100 SXM5 80GB",
        "79.18 (80 GB)",
        "3.35",
        "989",
        "1,979",
        "900 GB/s NVLink 4",
        "verified",
    ]


def test_table_shows_fp16_rate_where_bf16_is_missing(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "v100"])
    assert result.exit_code == 0, result.stderr
    assert "125 (fp16)" in result.stdout


def test_json_lists_every_accelerator_with_stable_keys(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["accelerators"]
    assert [r["id"] for r in rows] == [p.stem for p in gpu_paths()]
    for row in rows:
        assert set(row) == JSON_KEYS
        assert set(row["dense_flops"]) == {"bf16", "fp16", "fp8", "fp4"}
        assert isinstance(row["memory_bytes"], int)


def test_json_filtered_by_alias_keeps_order_and_raw_numbers(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "-f", "json", "mi300x", "H100"])
    assert result.exit_code == 0, result.stderr
    mi300x, h100 = json.loads(result.stdout)["accelerators"]
    assert mi300x["id"] == "mi300x"
    assert mi300x["memory_bytes"] == 205_822_885_888
    assert mi300x["memory_basis"] == "rocm_smi"
    assert h100["id"] == "h100-sxm"
    assert h100["memory_bytes"] == 81082 * 2**20
    assert h100["memory_reported"]["nvidia_smi_mib"] == 81559
    assert h100["bandwidth_bytes_per_s"] == 3_350_000_000_000
    assert h100["dense_flops"] == {
        "bf16": 989 * 10**12,
        "fp16": 989 * 10**12,
        "fp8": 1979 * 10**12,
        "fp4": None,
    }


def test_two_names_of_one_accelerator_list_it_once(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "-f", "json", "h100", "mi300x", "H100-SXM", "h100"])
    assert result.exit_code == 0, result.stderr
    ids = [a["id"] for a in json.loads(result.stdout)["accelerators"]]
    assert ids == ["h100-sxm", "mi300x"]


def test_unknown_gpu_exits_2_with_a_suggestion(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "h101"])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("Error: unknown gpu 'h101'; did you mean h100")
    assert "Traceback" not in result.stderr


def test_bad_format_exits_2(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "--format", "xml"])
    assert result.exit_code == 2
    assert "xml" in result.stderr


def test_check_passes_on_the_bundled_registry(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "--check"])
    assert result.exit_code == 0, result.stderr
    assert f"ok: {len(gpu_paths())} accelerator files are valid" in result.stdout


def test_check_fails_on_bad_data_naming_file_and_field(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    data = yaml.safe_load((gpus_dir() / "h200.yaml").read_text())
    data["bandwidth_tbps"] = 0
    (tmp_path / "gpus" / "h200.yaml").write_text(yaml.safe_dump(data))
    result = runner.invoke(app, ["gpus", "--check", "--registry", str(tmp_path)])
    assert result.exit_code == 2
    assert "h200.yaml: bandwidth_tbps:" in result.stderr
    assert "1 problem(s) in 1 accelerator files" in result.stderr


def test_bad_registry_file_exits_2_when_listing(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "h200.yaml").write_text("id: [unclosed\n")
    result = runner.invoke(app, ["gpus", "--registry", str(tmp_path)])
    assert result.exit_code == 2
    assert "h200.yaml: invalid YAML" in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_json_carries_the_decode_efficiency(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "h100", "b200", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    rows = {row["id"]: row["efficiency"] for row in json.loads(result.stdout)["accelerators"]}
    assert rows["h100-sxm"] == {
        "bandwidth_fraction": 0.82,
        "step_overhead_seconds": 0.001,
        "link_latency_seconds": 9e-06,  # vLLM's custom all-reduce (sgl-project/sglang#2904)
        "matmul_fraction": 0.803,
    }
    assert set(rows["b200"].values()) == {None}


def test_cached_gpu_rows_print_exactly_what_a_fresh_validation_prints(
    runner: CliRunner, tmp_path: Path
) -> None:
    cache: dict[str, str | None] = {"KVCALC_CACHE_DIR": str(tmp_path / "cache")}
    for names in ([], ["mi300x", "H100", "v100"]):
        args = ["gpus", "--format", "json", *names]
        outputs = []
        for env in ({"KVCALC_NO_CACHE": "1"}, cache, cache):  # fresh, miss, hit
            result = runner.invoke(app, args, env=env)
            assert result.exit_code == 0, result.stderr
            outputs.append(result.stdout)
        # Byte for byte: an int read back as a float (0.001 s vs 1 ms) would show.
        assert outputs[0] == outputs[1] == outputs[2]
    assert [r["id"] for r in json.loads(outputs[2])["accelerators"]] == [
        "mi300x", "h100-sxm", "v100-sxm-32gb"
    ]


def test_an_edited_gpu_file_misses_the_listing_cache(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "gpus").mkdir()
    path = tmp_path / "gpus" / "h200.yaml"
    data = yaml.safe_load((gpus_dir() / "h200.yaml").read_text())
    env: dict[str, str | None] = {"KVCALC_CACHE_DIR": str(tmp_path / "cache")}
    args = ["gpus", "--format", "json", "--registry", str(tmp_path)]
    for tbps in (4.8, 2.4):
        path.write_text(yaml.safe_dump({**data, "bandwidth_tbps": tbps}))
        for _ in range(2):  # a miss, then a hit
            result = runner.invoke(app, args, env=env)
            assert result.exit_code == 0, result.stderr
            (row,) = json.loads(result.stdout)["accelerators"]
            assert row["bandwidth_bytes_per_s"] == int(tbps * 10) * 10**11


def test_the_2026_workstation_parts_resolve_by_the_names_users_type(runner: CliRunner) -> None:
    result = runner.invoke(app, ["gpus", "-f", "json", "dgx-spark", "gb10", "rtx-pro-6000"])
    assert result.exit_code == 0, result.stderr
    rows = json.loads(result.stdout)["accelerators"]
    assert [r["id"] for r in rows] == ["dgx-spark", "rtx-pro-6000"]  # gb10: the same part
    spark = rows[0]
    # torch total_memory on a GB10 = MemTotal, 130663006208 B (unsloth PR #10486).
    assert spark["memory_bytes"] == 130_663_006_208
    assert spark["memory_unified"] is True and spark["memory_basis"] == "cuda_total"
    assert spark["memory_reported"]["nvidia_smi_mib"] is None  # nvidia-smi: [N/A] on GB10
    assert rows[1]["memory_unified"] is False
    assert rows[1]["memory_bytes"] == 97887 * 2**20  # nvidia-smi 97887MiB


def test_a_batch_on_a_unified_part_says_the_os_shares_its_memory(runner: CliRunner) -> None:
    args = ["batch", "llama3-8b", "--ctx", "8k", "-f", "json", "--gpu-util", "0.85"]
    spark = runner.invoke(app, [*args, "--gpus", "2xgb10"])
    assert spark.exit_code == 0, spark.stderr
    out = json.loads(spark.stdout)
    # 0.85 (vLLM's DGX Spark recipe) of 121.69 GiB, rounded up as vLLM requests it.
    assert out["usable_bytes_per_gpu"] == -(-130_663_006_208 * 85 // 100)
    assert out["replicas"] == 2 and out["tp_nodes"] == 1  # two Sparks: two nodes, not tp 2
    layout, note = out["layout_notes"]
    assert layout.startswith("layout tp 1 x 2 replicas: tp 2 would span 2 nodes")
    assert note.startswith("dgx-spark memory is unified:")
    assert "share its 121.69 GiB with the engine" in note and "MemAvailable" in note
    discrete = runner.invoke(app, [*args, "--gpus", "rtx-pro-5000"])
    assert discrete.exit_code == 0, discrete.stderr
    assert json.loads(discrete.stdout)["layout_notes"] == []
