"""The accelerator registry, its engine types and GPU-set parsing.

Golden values come from the reference's gpu-specs.yaml / gpu-notes.md (vendor datasheets and
public nvidia-smi / rocm-smi / deviceQuery logs), not from the code under test.
"""

from __future__ import annotations

import re
import shutil
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.engine.hardware import MAX_GPU_COUNT, Accelerator, GpuSet, compute_dtype
from kvcalc.engine.units import GB, TB, GiB, MiB, UnitError
from kvcalc.registry.gpus import (
    GpuSetError,
    all_gpus,
    check_gpus,
    find_gpu,
    gpu_paths,
    gpus_dir,
    load_gpu_file,
    parse_gpu_set,
)
from kvcalc.registry.load import RegistryError, UnknownNameError

PATHS = gpu_paths()


def acc(name: str) -> Accelerator:
    return find_gpu(name).to_accelerator()


# ---------------------------------------------------------------- every file


def test_registry_holds_at_least_44_accelerators() -> None:
    assert len(PATHS) >= 44


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_file_loads_and_id_matches_file_name(path: Path) -> None:
    gpu = load_gpu_file(path)
    assert gpu.id == path.stem
    assert gpu.source


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_usable_memory_lies_between_label_in_gb_and_label_in_gib(path: Path) -> None:
    # Labels are either decimal GB (B300) or ~GiB (most others); whatever figure is used, the
    # capacity must sit between the two readings of the label (1% slack below for a label
    # rounded up). A typo in a MiB figure (8155 for 81559) fails here.
    gpu = load_gpu_file(path)
    label = gpu.memory.marketed_gb
    usable = gpu.to_accelerator().memory_bytes
    assert 0.99 * label * GB <= usable <= label * GiB


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_cuda_total_is_below_the_nvidia_smi_total(path: Path) -> None:
    mem = load_gpu_file(path).memory
    cuda = mem.cuda_total_bytes or (mem.cuda_total_mib and mem.cuda_total_mib * MiB)
    if cuda and mem.nvidia_smi_mib is not None:
        # gpu-notes.md: torch/CUDA report a few hundred MiB less than nvidia-smi.
        assert 300 * MiB <= mem.nvidia_smi_mib * MiB - cuda <= 1024 * MiB


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_usable_memory_follows_one_basis(path: Path) -> None:
    # One rule for every accelerator (gpu-notes.md section 1-2): the figure closest to what an
    # allocator sees wins -- the CUDA/torch total, else the rocm-smi or nvidia-smi total, and a
    # label reading only when no device-reported total is known. An ECC-off nvidia-smi figure is
    # not the running total, so it alone does not count as one.
    mem = load_gpu_file(path).memory
    reported = [
        (basis, figure)
        for basis, figure in (
            ("cuda_total", mem.cuda_total_mib or mem.cuda_total_bytes),
            ("rocm_smi", mem.rocm_smi_bytes),
            ("nvidia_smi", mem.nvidia_smi_mib),
        )
        if figure is not None
    ]
    if reported:
        assert mem.usable == reported[0][0]
    else:
        assert mem.usable in ("label_gib", "label_gb")


def test_bundled_registry_checks_clean() -> None:
    assert check_gpus() == []


def test_all_gpus_returns_every_file() -> None:
    assert [g.id for g in all_gpus()] == [p.stem for p in PATHS]


def test_no_name_is_shared_by_two_files() -> None:
    names = [n.lower() for g in all_gpus() for n in g.names()]
    assert len(names) == len(set(names))


# ---------------------------------------------------------------- golden values


def test_h100_sxm() -> None:
    h100 = acc("h100-sxm")
    # torch total_memory 81082 MiB (~79.18 GiB), not the 80 GB label nor nvidia-smi's 81559 MiB.
    assert h100.memory_bytes == 81082 * MiB
    assert 79.1 < h100.memory_bytes / GiB < 79.2
    assert h100.memory_marketed == "80 GB"
    assert h100.bandwidth_bytes_per_s == 3_350_000_000_000
    assert h100.dense_flops["bf16"] == 989 * TB
    assert h100.dense_flops["fp16"] == 989 * TB
    assert h100.dense_flops["fp8"] == 1979 * TB
    assert h100.dense_flops["fp4"] is None
    assert h100.interconnect_bytes_per_s == 900 * GB
    assert h100.pcie_bytes_per_s == 128 * GB
    assert find_gpu("h100-sxm").memory.nvidia_smi_mib == 81559


def test_h200() -> None:
    h200 = acc("h200")
    assert h200.bandwidth_bytes_per_s == 4_800_000_000_000
    assert h200.memory_bytes == 143771 * MiB
    assert h200.dense_flops["fp8"] == 1979 * TB


def test_mi300x_uses_rocm_smi_bytes() -> None:
    mi300x = acc("mi300x")
    assert mi300x.memory_bytes == 205_822_885_888
    assert mi300x.bandwidth_bytes_per_s == 5_300_000_000_000
    assert mi300x.dense_flops["bf16"] == 1_307_400_000_000_000
    assert mi300x.dense_flops["fp8"] == 2_614_900_000_000_000


def test_a100_40gb_uses_device_query_bytes() -> None:
    # deviceQuery: "40339 MBytes (42298834944 bytes)".
    assert acc("a100-sxm-40gb").memory_bytes == 42_298_834_944


def test_b300_label_is_decimal() -> None:
    b300 = acc("b300")
    assert b300.memory_bytes == 275040 * MiB
    assert 288 * GB < b300.memory_bytes < 269 * GiB


def test_b200_180_and_192_labels_are_the_same_memory() -> None:
    smi = find_gpu("b200").memory.nvidia_smi_mib
    assert smi is not None
    assert 179 * GiB < smi * MiB < 180 * GiB
    assert 192 * GB < smi * MiB < 193 * GB


def test_mi355x_and_mi350x_labels_are_gib() -> None:
    # AMD's ROCm GPU specs table lists both under "VRAM (GiB)": 288.
    assert acc("mi355x").memory_bytes == 288 * GiB
    assert acc("mi350x").memory_bytes == 288 * GiB


def test_goldens_of_the_2025_additions() -> None:
    assert acc("gb300").memory_bytes == 288 * GB  # decimal, as the B300; no device total seen
    assert acc("gb300").dense_flops["fp4"] == 15_000 * TB  # NVL72 1,080 PF dense / 72
    assert acc("h200-nvl").memory_bytes == 143771 * MiB  # same memory as the H200 SXM
    assert acc("h200-nvl").dense_flops["bf16"] == 835_500_000_000_000  # half of sparse 1,671
    assert acc("h800").interconnect_bytes_per_s == 400 * GB  # NVLink capped from 900
    assert acc("h800").dense_flops["fp8"] == acc("h100-sxm").dense_flops["fp8"]
    assert acc("a800").memory_bytes == 81920 * MiB
    assert acc("a800").interconnect_bytes_per_s == 400 * GB  # NVLink capped from 600
    assert acc("l20").memory_bytes == 46068 * MiB  # ECC on
    assert acc("rtx-3090").memory_bytes == 24576 * MiB
    assert acc("rtx-3090").dense_flops["fp8"] is None  # Ampere: no FP8
    assert acc("rtx-a6000").memory_bytes == 48 * GB  # only the ECC-off total (49140 MiB) seen
    assert acc("tpu-v7").memory_bytes == 192 * GiB
    assert acc("tpu-v7").bandwidth_bytes_per_s == 7_370_000_000_000
    assert acc("trainium2").memory_bytes == 96 * GiB
    assert acc("trainium2").dense_flops["fp8"] == 1299 * TB


def test_other_goldens() -> None:
    assert acc("h100-pcie").dense_flops["bf16"] == 756 * TB  # not the sparse 1513
    assert acc("l40s").memory_bytes == 46068 * MiB  # ECC on
    assert acc("rtx-4090").dense_flops["bf16"] == 165_200_000_000_000  # FP32 accumulate
    assert acc("mi250x").memory_bytes == 64 * GiB  # one GCD, not the 128 GB module
    assert acc("mi325x").memory_bytes == 256 * GiB
    assert acc("gaudi2").memory_bytes == 96 * GB  # no reported figure: the smaller reading
    assert acc("tpu-v5p").dense_flops["fp8"] == 459 * TB
    assert acc("b200").dense_flops["fp4"] == 9000 * TB


def test_dgx_spark_is_its_unified_memory() -> None:
    # unsloth PR #10486 (two GB10 nodes): torch total_memory = mem_get_info()[1] = MemTotal =
    # 130663006208 B (the other node 130663231488); the smaller is the one used.
    spark = acc("gb10")
    assert spark.memory_bytes == 130_663_006_208
    assert round(spark.memory_bytes / GiB, 2) == 121.69  # "121.69 GiB" in vLLM's start-up logs
    # The 128 GB of LPDDR5x are 128 GiB of chips, less what the kernel and firmware keep.
    assert 128 * GB < spark.memory_bytes < 128 * GiB
    assert spark.unified_memory
    # nvidia-smi reports memory.total [N/A] on GB10 (NVIDIA's DGX Spark known issues).
    assert spark.smi_memory_bytes is None
    assert spark.bandwidth_bytes_per_s == 273 * GB  # 273 GB/s LPDDR5x
    assert spark.dense_flops["fp4"] == 1000 * TB // 2  # "1 PFLOP FP4 with sparsity", halved
    # A measured BF16 matmul of 92.3 TFLOPS (huggingface/kernels PR #283) must sit below peak.
    bf16 = spark.dense_flops["bf16"]
    assert bf16 is not None and 92.3 * TB < bf16
    # Two Sparks join over ConnectX-7 Ethernet, not a scale-up link: one GPU per node.
    assert spark.node_gpus == 1 and spark.interconnect is None and spark.pcie_bytes_per_s is None
    assert find_gpu("dgx-spark").memory.label() == "128 GB unified"


def test_only_shared_memory_parts_are_unified() -> None:
    unified = {g.id for g in all_gpus() if g.memory.unified}
    assert unified == {
        "dgx-spark", "jetson-agx-thor", "apple-m2-ultra", "apple-m3-max", "apple-m4-max",
        "apple-m3-ultra", "ryzen-ai-max-395",
    }


def test_rtx_pro_blackwell_goldens() -> None:
    # 48 GB card: no device total seen, so the decimal label (48e9 B), the smaller reading.
    assert acc("rtx-pro-5000").memory_bytes == 48_000_000_000
    # 72 GB card: an nvidia-smi inventory shows memory.total 73415 MiB.
    assert acc("rtx-pro-5000-72gb").memory_bytes == 73415 * MiB
    for gpu in ("rtx-pro-5000", "rtx-pro-5000-72gb"):
        assert acc(gpu).bandwidth_bytes_per_s == 1344 * GB  # 1,344 GB/s on both
        assert acc(gpu).dense_flops["fp4"] == 2064 * TB // 2  # 2,064 AI TOPS sparse, halved
        assert acc(gpu).tdp_watts == 300
    # Max-Q: the 600 W card's 96 GB GDDR7 and 1,792 GB/s at 300 W and lower clocks.
    max_q, full = acc("rtx-pro-6000-max-q"), acc("rtx-pro-6000")
    assert max_q.memory_bytes == full.memory_bytes == 97887 * MiB
    assert max_q.bandwidth_bytes_per_s == full.bandwidth_bytes_per_s == 1792 * GB
    assert (max_q.tdp_watts, full.tdp_watts) == (300, 600)
    # FP32 110.1 of the full card's 125 TFLOPS: the tensor rates scale the same way.
    max_q_bf16, full_bf16 = max_q.dense_flops["bf16"], full.dense_flops["bf16"]
    assert max_q_bf16 is not None and full_bf16 is not None
    assert abs(max_q_bf16 / full_bf16 - 110.1 / 125) < 0.005
    # PCIe cards: Gen5 x16 (128 GB/s both ways), no NVLink, no scale-up node.
    for gpu in ("rtx-pro-5000", "rtx-pro-5000-72gb", "rtx-pro-6000", "rtx-pro-6000-max-q"):
        assert acc(gpu).pcie_bytes_per_s == 128 * GB
        assert acc(gpu).interconnect is None and acc(gpu).node_gpus is None


def test_h20_3e_and_jetson_thor_goldens() -> None:
    # H20-3e: nvidia-smi inventories show 143771 MiB, the H200's HBM3e; the H20's capped
    # compute (148 BF16 / 296 FP8 dense) at the H200's 4.8 TB/s, on the HGX 8-GPU board.
    h20e = acc("h20e")
    assert h20e.memory_bytes == 143771 * MiB == acc("h200").memory_bytes
    assert h20e.bandwidth_bytes_per_s == 4800 * GB
    assert (h20e.dense_flops["bf16"], h20e.dense_flops["fp8"]) == (148 * TB, 296 * TB)
    assert h20e.node_gpus == 8
    # Jetson AGX Thor (NVIDIA's launch blog): 2070 sparse / 1035 dense FP4, 517 dense FP8,
    # 128 GB LPDDR5X at 273 GB/s, shared with the CPU; no device total seen: 128e9 B.
    thor = acc("thor")
    assert thor.dense_flops["fp4"] == 1035 * TB and thor.dense_flops["fp8"] == 517 * TB
    assert thor.bandwidth_bytes_per_s == 273 * GB
    assert thor.memory_bytes == 128 * GB and thor.unified_memory
    assert thor.node_gpus == 1


def test_apple_m3_ultra_and_strix_halo_goldens() -> None:
    # M3 Ultra (Mac Studio 2025; techpowerup, inforeader's table): up to 512 GB of unified
    # memory at 819.2 GB/s on every configuration; no device total seen: 512e9 B.
    m3 = acc("m3-ultra")
    assert m3.memory_bytes == 512 * GB and m3.unified_memory
    assert m3.bandwidth_bytes_per_s == 819_200_000_000
    # Ryzen AI Max+ 395: LPDDR5X-8000 on a 256-bit bus is 8,000 MT/s x 32 B = 256 GB/s, the
    # figure reviews quote (modelfit.io); 128 GB shared with the CPU.
    halo = acc("strix-halo")
    assert halo.bandwidth_bytes_per_s == 8_000_000_000 * 256 // 8
    assert halo.memory_bytes == 128 * GB and halo.unified_memory
    assert halo.dense_flops["bf16"] is None  # AMD publishes no matrix rate for the 8060S


def test_rtx_pro_4500_goldens() -> None:
    # technical.city and hmc-tech: 32 GB GDDR7, 256-bit at 1.75 GHz (28 Gbps a pin):
    # 28e9 x 256 / 8 = 896 GB/s; 200 W; PCIe 5.0 x16; FP4 1.76 PFLOPS sparse, 879 dense.
    card = acc("rtx-pro-4500")
    assert card.bandwidth_bytes_per_s == 28_000_000_000 * 256 // 8 == 896 * GB
    assert card.memory_bytes == 32 * GB and not card.unified_memory
    assert card.tdp_watts == 200 and card.pcie_bytes_per_s == 128 * GB
    fp4 = card.dense_flops["fp4"]
    assert fp4 is not None and abs(2 * fp4 - 1760 * TB) <= 2 * TB  # 1.76 rounded from 1.758


def test_rtx_pro_4000_goldens() -> None:
    # cputronic: 24 GB GDDR7 on 192 bits at 672.0 GB/s (28 Gbps a pin: 28e9 x 192 / 8);
    # technical.city: 140 W, PCIe 5.0 x16. Not the 70 W SFF edition (432 GB/s).
    card = acc("rtx-pro-4000")
    assert card.bandwidth_bytes_per_s == 28_000_000_000 * 192 // 8 == 672 * GB
    assert card.memory_bytes == 24 * GB and card.tdp_watts == 140
    assert card.pcie_bytes_per_s == 128 * GB and card.node_gpus is None


NEW_PARTS = (
    "dgx-spark", "rtx-pro-5000", "rtx-pro-5000-72gb", "rtx-pro-6000-max-q", "h20-3e",
    "jetson-agx-thor", "apple-m3-ultra", "ryzen-ai-max-395", "rtx-pro-4500",
    "rtx-pro-4000",
)


@pytest.mark.parametrize("gpu", NEW_PARTS)
def test_a_batch_runs_on_each_new_part(gpu: str) -> None:
    from kvcalc.engine.capacity import capacity
    from kvcalc.engine.deployment import deployment
    from kvcalc.registry.load import resolve_model

    dep = deployment(resolve_model("llama3-8b"), parse_gpu_set(gpu))
    result = capacity(dep, [8192])
    # vLLM's request: ceil(total x 0.9) of the memory the device reports.
    usable = -(-acc(gpu).memory_bytes * 9 // 10)
    budget = usable - result.weights_bytes_per_gpu - result.overhead_bytes_per_gpu
    assert result.kv_budget_bytes_per_gpu == budget
    # Llama-3-8B at bf16: 2 x 32 layers x 8 KV heads x 128 x 2 B = 128 KiB a token, so a
    # 8,192-token sequence is exactly 1 GiB (512 blocks of 16 tokens).
    assert result.contexts[0].max_batch == budget // GiB
    assert result.contexts[0].bytes_per_sequence_per_gpu == GiB


# ---------------------------------------------------------------- aliases and lookup


def test_node_sizes_are_the_scale_up_domains() -> None:
    # HGX and OAM boards join 8 GPUs over NVSwitch / Infinity Fabric; NVL72 racks join 72.
    for gpu in ("h100-sxm", "h200", "h800", "h20", "a100-sxm-80gb", "b200", "mi300x", "mi355x"):
        assert acc(gpu).node_gpus == 8
    assert acc("gb200").node_gpus == acc("gb300").node_gpus == 72
    # PCIe and bridged parts have no one node size: no node rule applies to them.
    for gpu in ("h100-pcie", "l40s", "rtx-4090"):
        assert acc(gpu).node_gpus is None


@pytest.mark.parametrize(
    ("name", "gpu_id"),
    [
        ("h100", "h100-sxm"),
        ("H100", "h100-sxm"),
        ("  h100-SXM  ", "h100-sxm"),
        ("h100_sxm5_80gb", "h100-sxm"),
        ("h200", "h200"),
        ("a100", "a100-sxm-80gb"),
        ("a100-40gb", "a100-sxm-40gb"),
        ("mi300x", "mi300x"),
        ("MI300X", "mi300x"),
        ("b200", "b200"),
        ("4090", "rtx-4090"),
        ("rtx4090", "rtx-4090"),
        ("5090", "rtx-5090"),
        ("gh200", "gh200-96gb"),
        ("trillium", "tpu-v6e"),
        ("v100", "v100-sxm-32gb"),
        ("GB300", "gb300"),
        ("h200-pcie", "h200-nvl"),
        ("h800", "h800"),
        ("a800", "a800"),
        ("l20", "l20"),
        ("3090", "rtx-3090"),
        ("a6000", "rtx-a6000"),
        ("mi350x", "mi350x"),
        ("ironwood", "tpu-v7"),
        ("trn2", "trainium2"),
        ("dgx-spark", "dgx-spark"),
        ("GB10", "dgx-spark"),
        ("rtx-pro-5000", "rtx-pro-5000"),
        ("rtx-pro-5000-72gb", "rtx-pro-5000-72gb"),
        ("rtx-pro-6000-server", "rtx-pro-6000"),
        ("rtx-pro-6000-workstation", "rtx-pro-6000"),
        ("rtx-pro-6000-maxq", "rtx-pro-6000-max-q"),
        ("h20e", "h20-3e"),
        ("thor", "jetson-agx-thor"),
    ],
)
def test_alias_resolution(name: str, gpu_id: str) -> None:
    assert find_gpu(name).id == gpu_id


def test_unknown_name_suggests_close_ones() -> None:
    with pytest.raises(UnknownNameError) as info:
        find_gpu("h101")
    assert "h100" in info.value.suggestions
    assert "\n" not in str(info.value)
    assert "kvcalc gpus" in str(info.value)


def test_path_like_names_do_not_escape_the_registry() -> None:
    for name in ("../models/llama3-70b", "/etc/passwd", ".hidden"):
        with pytest.raises(UnknownNameError):
            find_gpu(name)


def test_id_lookup_reads_only_its_own_file(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvcalc.registry import load

    read: list[Path] = []
    real = load.read_yaml

    def spy(path: Path) -> Any:
        read.append(path)
        return real(path)

    def no_index(directory: Path) -> Any:
        raise AssertionError("an id lookup must not index the registry")

    monkeypatch.setattr(load, "read_yaml", spy)
    monkeypatch.setattr(load, "_name_index", no_index)
    assert find_gpu("H100-SXM").id == "h100-sxm"
    assert read == [gpus_dir() / "h100-sxm.yaml"]


# ---------------------------------------------------------------- engine types


def test_dense_flops_fallbacks() -> None:
    a100 = acc("a100")
    assert a100.dense_flops_for("fp8") == 312 * TB  # no FP8 on Ampere: BF16 rate
    assert a100.dense_flops_for("fp4") == 312 * TB
    h100 = acc("h100")
    assert h100.dense_flops_for("fp4") == 1979 * TB  # no FP4 on Hopper: FP8 rate
    assert h100.dense_flops_for("bfloat16") == 989 * TB
    assert acc("v100").dense_flops_for("bf16") == 125 * TB  # no BF16 on Volta: FP16 rate
    assert acc("gaudi2").dense_flops_for("fp16") == 432 * TB  # FP16 not published: BF16
    assert acc("apple-m4-max").dense_flops_for("bf16") is None
    assert acc("b200").dense_flops_for("nvfp4") == 9000 * TB


def test_unknown_compute_dtype_is_a_unit_error() -> None:
    with pytest.raises(UnitError, match="choose one of bf16, fp16, fp8, fp4"):
        compute_dtype("int3")


def _accelerator(**changes: Any) -> Accelerator:
    fields: dict[str, Any] = {
        "id": "x",
        "name": "X",
        "memory_bytes": GiB,
        "memory_marketed": "1 GB",
        "bandwidth_bytes_per_s": TB,
        "dense_flops": {"bf16": TB},
    }
    fields.update(changes)
    return Accelerator(**fields)


def test_accelerator_fills_missing_dtypes_with_none_and_is_read_only() -> None:
    a = _accelerator()
    assert dict(a.dense_flops) == {"bf16": TB, "fp16": None, "fp8": None, "fp4": None}
    with pytest.raises(TypeError):
        a.dense_flops["bf16"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    "changes",
    [
        {"memory_bytes": 0},
        {"bandwidth_bytes_per_s": -1},
        {"dense_flops": {"int8": TB}},
        {"dense_flops": {"bf16": 0}},
        {"node_gpus": 0},
    ],
)
def test_accelerator_rejects_bad_values(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _accelerator(**changes)


@given(st.integers(min_value=1, max_value=MAX_GPU_COUNT))
def test_gpu_set_aggregates_scale_with_count(count: int) -> None:
    one = _accelerator(memory_bytes=81082 * MiB, bandwidth_bytes_per_s=3_350_000_000_000)
    gpus = GpuSet(one, count)
    assert gpus.memory_bytes == count * 81082 * MiB
    assert gpus.bandwidth_bytes_per_s == count * 3_350_000_000_000
    assert gpus.dense_flops_for("fp8") == count * TB  # falls back to bf16


@pytest.mark.parametrize("count", [0, -1, MAX_GPU_COUNT + 1])
def test_gpu_set_rejects_bad_counts(count: int) -> None:
    with pytest.raises(ValueError):
        GpuSet(_accelerator(), count)


# ---------------------------------------------------------------- parse_gpu_set


@pytest.mark.parametrize(
    ("text", "gpu_id", "count"),
    [
        ("8xH100", "h100-sxm", 8),
        ("h200", "h200", 1),
        ("4xMI300X", "mi300x", 4),
        ("8x h100", "h100-sxm", 8),
        ("8 X H100", "h100-sxm", 8),
        ("2*4090", "rtx-4090", 2),
        ("8×b200", "b200", 8),
        ("4090", "rtx-4090", 1),
        ("rtx4090", "rtx-4090", 1),
        ("mi300x", "mi300x", 1),
        ("1xa100", "a100-sxm-80gb", 1),
        ("0008xh100", "h100-sxm", 8),
        (f"{MAX_GPU_COUNT}xh100", "h100-sxm", MAX_GPU_COUNT),
    ],
)
def test_parse_gpu_set(text: str, gpu_id: str, count: int) -> None:
    gpus = parse_gpu_set(text)
    assert (gpus.accelerator.id, gpus.count) == (gpu_id, count)


@given(st.integers(min_value=1, max_value=MAX_GPU_COUNT))
def test_parse_gpu_set_keeps_any_valid_count(count: int) -> None:
    assert parse_gpu_set(f"{count}xH100").count == count


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0xH100", "at least 1"),
        ("-1xH100", "at least 1"),
        ("-0xH100", "at least 1"),
        ("abcxH100", "COUNTxGPU"),
        ("1.5xH100", "whole number"),
        ("1e3xH100", "whole number"),
        (f"{MAX_GPU_COUNT + 1}xH100", "at most 100,000"),
        ("9" * 5000 + "xH100", "at most 100,000"),
        ("-" + "9" * 5000 + "xH100", "at least 1"),
        ("", "empty GPU set"),
        ("   ", "empty GPU set"),
        ("8x", "names no GPU"),
        ("8", "names no GPU"),
    ],
)
def test_parse_gpu_set_errors(text: str, expected: str) -> None:
    with pytest.raises(GpuSetError) as info:
        parse_gpu_set(text)
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    assert len(message) < 200
    assert isinstance(info.value, RegistryError)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(("text", "suggestion"), [("8xH101", "h100"), ("rtx4091", "rtx4090")])
def test_parse_gpu_set_unknown_gpu(text: str, suggestion: str) -> None:
    with pytest.raises(UnknownNameError) as info:
        parse_gpu_set(text)
    assert suggestion in info.value.suggestions


# ---------------------------------------------------------------- schema strictness


def _registry_with(tmp_path: Path, gpu_id: str, edit: Any, file_name: str | None = None) -> Path:
    directory = tmp_path / "gpus"
    directory.mkdir(exist_ok=True)
    data = yaml.safe_load((gpus_dir() / f"{gpu_id}.yaml").read_text())
    edit(data)
    (directory / f"{file_name or gpu_id}.yaml").write_text(yaml.safe_dump(data))
    return tmp_path


def _set(path: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            data = data[key]
        data[last] = value

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_set("colour", "green"), "colour: unknown key"),
        (_set("memory.nvidia_smi_gb", 80), "memory.nvidia_smi_gb: unknown key"),
        (_set("bandwidth_tbps", -3.35), "bandwidth_tbps:"),
        (_set("dense_tflops.bf16", 0), "dense_tflops.bf16:"),
        (_set("memory.nvidia_smi_mib", "81559"), "memory.nvidia_smi_mib:"),
        (_set("memory.cuda_total_mib", None), "usable is 'cuda_total' but that figure"),
        (_set("memory.cuda_total_mib", 90000), "cannot exceed nvidia_smi_mib"),
        (_set("memory.cuda_total_bytes", 85019590656), "not both"),
        (_set("memory.usable", "marketing"), "memory.usable:"),
        (_set("unverified", ["bandwidth"]), "names no field"),
        (_set("unverified", ["bandwidth_tbps"]), "status is verified"),
        (_set("status", "partial"), "list the unverified fields"),
        (_set("source", []), "source:"),
        (_set("id", "h100"), "must match the file name"),
    ],
)
def test_schema_rejects_bad_files(tmp_path: Path, edit: Any, message: str) -> None:
    root = _registry_with(tmp_path, "h100-sxm", edit)
    with pytest.raises(RegistryError, match="h100-sxm.yaml") as info:
        find_gpu("h100-sxm", root)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert check_gpus(root)


def test_check_flags_a_name_used_by_two_files(tmp_path: Path) -> None:
    _registry_with(tmp_path, "h100-sxm", lambda d: None)
    root = _registry_with(tmp_path, "h200", _set("aliases", ["h100"]))
    problems = check_gpus(root)
    assert len(problems) == 1
    assert "'h100' is already used" in problems[0]


def test_missing_registry_directory(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match="registry directory not found"):
        find_gpu("h100", tmp_path)
    with pytest.raises(RegistryError, match="registry directory not found"):
        all_gpus(tmp_path)


def test_a_copied_registry_behaves_like_the_bundled_one(tmp_path: Path) -> None:
    shutil.copytree(gpus_dir(), tmp_path / "gpus")
    assert check_gpus(tmp_path) == []
    assert parse_gpu_set("8xh100", tmp_path).memory_bytes == 8 * 81082 * MiB


CUDA_TOTAL_LINES = Path(__file__).parent / "fixtures" / "cuda_totals" / "README.md"


def _cuda_total_rows() -> list[tuple[str, str]]:
    rows = []
    for line in CUDA_TOTAL_LINES.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 3 and "Free memory on device" in cells[1]:
            rows.append((cells[0], cells[1]))
    return rows


@pytest.mark.parametrize(("gpu", "line"), _cuda_total_rows())
def test_vllm_requests_its_share_of_the_logged_cuda_total(gpu: str, line: str) -> None:
    # vLLM requests total x utilization of torch's mem_get_info total, not nvidia-smi's: the
    # total kvcalc's vLLM model starts from must print as the line's total, and its share must
    # be the line's requested GiB within what the two-decimal rounding of both allows (the true
    # total lies within 0.005 GiB of the printed one: 0.6 x 44.39 prints 26.63, the host's
    # 26.64).
    from specs import registry_model

    from kvcalc.engine.deployment import deployment
    from kvcalc.engine.vllm import requested_memory
    from kvcalc.registry.gpus import parse_gpu_set

    match = re.search(r"\(([\d.]+)/([\d.]+) GiB\).*\((0\.\d+), ([\d.]+) GiB\)", line)
    assert match, line
    total, util, requested = match[2], Fraction(match[3]), float(match[4])
    dep = deployment(registry_model("llama3.1-8b"), parse_gpu_set(gpu))
    assert round(dep.cuda_total_bytes_per_gpu / GiB, 2) == float(total)
    ours = requested_memory(dep.cuda_total_bytes_per_gpu, util) / GiB
    assert abs(ours - requested) <= float(util) * 0.005 + 0.005
    nvidia_smi = dep.gpus.accelerator.smi_memory_bytes
    if nvidia_smi is not None:  # and the nvidia-smi total would not print the line
        assert abs(float(util) * nvidia_smi / GiB - requested) > 0.1


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_a_logged_cuda_total_is_below_nvidia_smi_and_keeps_the_usable_figure(
    path: Path,
) -> None:
    gpu = load_gpu_file(path)
    logged = gpu.memory.cuda_total_logged
    if logged is None:
        return
    if gpu.memory.nvidia_smi_mib is not None:
        gap = gpu.memory.nvidia_smi_mib * MiB - logged.total_bytes()
        assert 300 * MiB <= gap <= 1024 * MiB
    # A rounded log figure moves the engines' start-ups, never the capacity tables: the usable
    # memory stays the figure its basis names.
    accelerator = gpu.to_accelerator()
    assert accelerator.memory_bytes == gpu.memory.usable_bytes()
    if gpu.memory.cuda_total_mib is None and gpu.memory.cuda_total_bytes is None:
        assert accelerator.cuda_total_bytes == logged.total_bytes() != accelerator.memory_bytes


# ---------------------------------------------------------------- CUDA total from nvidia-smi's


def measured_pairs() -> set[tuple[int, int]]:
    """(nvidia-smi total, CUDA total) in bytes of every registry GPU where both are known, one
    per distinct pair (the A100 PCIe's CUDA total is the SXM's, measured apart)."""
    pairs = set()
    for gpu in all_gpus():
        acc = gpu.to_accelerator()
        if acc.smi_memory_bytes is not None and acc.cuda_total_bytes is not None:
            pairs.add((acc.smi_memory_bytes, acc.cuda_total_bytes))
    return pairs


def accelerators() -> list[Accelerator]:
    return [gpu.to_accelerator() for gpu in all_gpus()]


def test_the_smi_to_cuda_gap_is_the_median_of_the_gpus_measured() -> None:
    import statistics

    from kvcalc.engine.hardware import SMI_ABOVE_CUDA_BYTES

    gaps = sorted(smi - cuda for smi, cuda in measured_pairs())
    assert len(gaps) >= 9
    assert SMI_ABOVE_CUDA_BYTES == round(statistics.median(gaps) / MiB) * MiB
    # What the output states: the spread, and that each measured GPU lies within 0.2 GiB.
    assert (round(gaps[0] / MiB), round(gaps[-1] / MiB)) == (451, 768)
    assert all(abs(g - SMI_ABOVE_CUDA_BYTES) < 0.2 * GiB for g in gaps)


def test_a_gpu_with_only_nvidia_smi_s_total_is_started_from_an_estimate() -> None:
    from kvcalc.engine.hardware import SMI_ABOVE_CUDA_BYTES

    by_id = {acc.id: acc for acc in accelerators()}
    pcie, sxm = by_id["h100-pcie"], by_id["h100-sxm"]
    assert pcie.cuda_total_bytes is None and pcie.engine_total_estimated
    assert pcie.engine_total_bytes == 81559 * MiB - SMI_ABOVE_CUDA_BYTES
    assert not sxm.engine_total_estimated and sxm.engine_total_bytes == 81082 * MiB
    # Never above the nvidia-smi total, which every measured CUDA total lies below.
    for acc in accelerators():
        if acc.smi_memory_bytes is not None:
            assert acc.engine_total_bytes < acc.smi_memory_bytes


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_an_estimated_cuda_total_is_said_and_a_given_one_is_not(engine: str) -> None:
    import json

    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    args = ["batch", "llama3.1-8b", "--engine", engine, "--ctx", "32k", "--gpus"]
    runner = CliRunner()
    estimated = runner.invoke(app, [*args, "h100-pcie"])
    assert estimated.exit_code == 0, estimated.output
    text = " ".join(estimated.output.split())
    assert text.count("CUDA total per GPU estimated at 79.05 GiB") == 1
    doc = json.loads(runner.invoke(app, [*args, "h100-pcie", "-f", "json"]).output)
    assert doc["cuda_total_estimated"] is True
    for measured in (["h100"], ["h100-pcie", "--gpu-memory", "79.18GiB"]):
        out = runner.invoke(app, [*args, *measured])
        assert out.exit_code == 0 and "estimated at" not in out.output, out.output
        assert json.loads(runner.invoke(app, [*args, *measured, "-f", "json"]).output)[
            "cuda_total_estimated"
        ] is False


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_decode_sized_by_an_engine_warns_of_an_estimated_cuda_total(engine: str) -> None:
    import json

    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    args = ["decode", "llama3.1-8b", "--engine", engine, "--ctx", "8k", "-f", "json", "--gpus"]
    runner = CliRunner()
    warned = json.loads(runner.invoke(app, [*args, "h100-pcie"]).stdout)["warnings"]
    assert [w for w in warned if "CUDA total per GPU estimated" in w] == [
        w for w in warned if "--gpu-memory" in w
    ]
    assert len([w for w in warned if "estimated at" in w]) == 1
    given = json.loads(runner.invoke(app, [*args, "h100-pcie", "--gpu-memory", "79.18GiB"]).stdout)
    assert not any("estimated at" in w for w in given.get("warnings") or [])


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])  # plan sizes no SGLang pool
def test_plan_warns_of_an_estimated_cuda_total_beside_the_layouts_it_sizes(engine: str) -> None:
    """plan's max batch is the engine's pool, as decode's is: a layout on a GPU whose CUDA total
    is estimated says so once, named by its GPU; one on a measured GPU says nothing."""
    import json

    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    args = ["plan", "llama3.1-8b", "--engine", engine, "--users", "4", "-f", "json", "--gpus"]
    runner = CliRunner()
    both = json.loads(runner.invoke(app, [*args, "h100-pcie,h100"]).stdout)
    assert {row["gpus"]["accelerator"] for row in both["layouts"]} == {"h100-pcie", "h100-sxm"}
    said = [w for w in both.get("warnings") or [] if "CUDA total per GPU estimated" in w]
    assert len(said) == 1 and said[0].startswith("h100-pcie: ")
    measured = json.loads(runner.invoke(app, [*args, "h100"]).stdout)
    assert not any("estimated at" in w for w in measured.get("warnings") or [])


def test_a_check_spec_warns_of_an_estimated_cuda_total(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    def warnings(extra: str) -> list[str]:
        spec = tmp_path / "capacity.yaml"
        spec.write_text(
            "deployments:\n  - name: a\n    model: llama3.1-8b\n    gpus: h100-pcie\n"
            f"    engine: vllm\n    ctx: 8k\n{extra}    require: {{min_batch: 1}}\n",
            encoding="utf-8",
        )
        out = CliRunner().invoke(app, ["check", str(spec), "-f", "json"])
        assert out.exit_code == 0, out.output
        return list(json.loads(out.stdout).get("warnings") or [])

    assert [w for w in warnings("") if "CUDA total per GPU estimated" in w]
    assert not [w for w in warnings("    gpu_memory: 79.18GiB\n") if "estimated at" in w]
