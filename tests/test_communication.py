"""Which link a replica's all-reduces and pipeline sends cross, and their cost
(kvcalc.engine.communication), against NCCL's tuning model, measured small all-reduces and
the registry's links."""

from __future__ import annotations

import pytest
from report_check import run_json, usage_error
from specs import registry_deployment
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.communication import (
    NCCL_BASE_SECONDS,
    link_kind,
    pcie_allreduce_latency,
    pp_links,
    replica_nodes,
    tp_link,
)
from kvcalc.engine.latency import regime_of, tp_communication_seconds, tpot_estimate
from kvcalc.engine.units import UnitError, parse_rate


def test_pcie_allreduce_meets_the_measured_eight_gpu_latency() -> None:
    # voipmonitor/rtx6kpro benchmarks/results.md: NCCL, 8 PCIe 5 GPUs behind switches,
    # 256 B-32 KB: 24.1-24.6 us.
    assert pcie_allreduce_latency(8) == pytest.approx(24.1e-6, rel=0.02)
    # Not set on it: NCCL among 4 PCIe 5 RTX PRO 6000s, 1-16 KB, 13.2-14.7 us
    # (voipmonitor/rtx6kpro optimization/pcie-oneshot-allreduce.md, "Raw AllReduce Latency").
    assert 13.2e-6 * 0.9 <= pcie_allreduce_latency(4) <= 14.7e-6
    # NCCL's ring LL: one base latency and 2(n - 1) steps.
    assert pcie_allreduce_latency(2) < pcie_allreduce_latency(4) < pcie_allreduce_latency(8)
    assert pcie_allreduce_latency(2) > NCCL_BASE_SECONDS


@pytest.mark.parametrize(
    ("gpus", "tp", "kind"),
    [("8xh100", 8, "scale-up"), ("8xmi300x", 8, "scale-up"), ("4xrtx-pro-6000", 4, "pcie"),
     ("8xl40s", 8, "pcie"), ("2xrtx-4090", 2, "pcie"), ("16xh100", 16, "network")],
)
def test_each_replica_crosses_the_link_its_gpus_have(gpus: str, tp: int, kind: str) -> None:
    dep = registry_deployment("llama3-70b", gpus, tp=tp)
    assert link_kind(dep) == kind


def test_pcie_tp4_all_reduces_cost_more_than_nvlink_tp4() -> None:
    # The complaint: TP 4 over PCIe was given a cheaper all-reduce than NVLink H100.
    pcie = tp_communication_seconds(registry_deployment("llama3-70b", "4xrtx-pro-6000"), 1)
    nvlink = tp_communication_seconds(registry_deployment("llama3-70b", "4xh100"), 1)
    assert pcie > nvlink


def test_a_group_beyond_one_node_crosses_the_network() -> None:
    inside = registry_deployment("llama3-70b", "8xh100")
    across = registry_deployment("llama3-70b", "16xh100", tp=16)
    assert replica_nodes(inside) == 1 and replica_nodes(across) == 2
    link = tp_link(across, 9e-6)
    assert link is not None and link.kind == "network"
    assert link.bytes_per_s == 50 * 10**9  # 400 Gb/s, the default NIC
    assert tp_communication_seconds(across, 1) > 2 * tp_communication_seconds(inside, 1)
    assert regime_of(across) == "multi-node"


def test_nodes_spreads_the_gpus_and_internode_sets_the_nic() -> None:
    spread = registry_deployment("llama3-70b", "8xh100", nodes=2)
    assert spread.tp_nodes == 2 and link_kind(spread) == "network"
    slow = registry_deployment(
        "llama3-70b", "8xh100", nodes=2, internode_bytes_per_s=12_500_000_000
    )
    assert tp_communication_seconds(slow, 64) > tp_communication_seconds(spread, 64)


def test_pipeline_across_nodes_sends_over_the_network_once_per_node_boundary() -> None:
    dep = registry_deployment("llama3-70b", "16xh100", tp=8, pp=2)
    links = pp_links(dep, 9e-6)
    assert [link.kind for link in links if link] == ["network"]
    inside = registry_deployment("llama3-70b", "8xh100", tp=4, pp=2)
    assert [link.kind for link in pp_links(inside, 9e-6) if link] == ["scale-up"]


def test_the_roofline_stays_below_a_multi_node_estimate() -> None:
    dep = registry_deployment("llama3.1-405b", "16xh100", tp=16)
    est = tpot_estimate(dep, batch=8, context_tokens=4096)
    assert est.roofline.tpot_seconds < est.tpot_low_seconds < est.tpot_seconds


def test_parse_rate() -> None:
    assert parse_rate("400Gb/s") == 50 * 10**9
    assert parse_rate("50GB/s") == 50 * 10**9
    assert parse_rate("1.6Tb/s") == 200 * 10**9
    assert parse_rate("200 Gbps") == 25 * 10**9
    for bad in ("400", "fast", "0Gb/s", "-1Gb/s", "400MB/s"):
        with pytest.raises(UnitError):
            parse_rate(bad)


def test_decode_takes_nodes_and_internode(runner: CliRunner) -> None:
    args = ("decode", "llama3-70b", "--gpus", "16xH100", "--tp", "16", "--ctx", "8k",
            "--batch", "1")
    default = run_json(runner, *args)
    slow = run_json(runner, *args, "--internode", "100Gb/s")
    assert default["nodes"] == 2 and default["link"] == "network"
    assert default["accuracy_regime"] == "multi-node"
    assert slow["contexts"][0]["communication_seconds"] > default["contexts"][0][
        "communication_seconds"
    ]
    one = run_json(runner, "decode", "llama3-70b", "--gpus", "8xH100", "--ctx", "8k",
                   "--nodes", "2")
    assert one["nodes"] == 2 and one["tp_nodes"] == 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [(("--internode", "fast"), "--internode"), (("--nodes", "9"), "--nodes"),
     (("--nodes", "0"), "--nodes")],
)
def test_bad_nodes_or_internode_is_one_line(
    runner: CliRunner, args: tuple[str, ...], needle: str
) -> None:
    result = runner.invoke(app, ["decode", "llama3-70b", "--gpus", "8xH100", *args])
    usage_error(result, needle)


def test_the_api_takes_nodes_and_internode_and_gives_the_band() -> None:
    import kvcalc

    one = kvcalc.decode("llama3-70b", gpus="8xH100", ctx="8k", batch=1)
    two = kvcalc.decode("llama3-70b", gpus="8xH100", ctx="8k", batch=1, nodes=2,
                        internode="200Gb/s")
    assert two.tpot_seconds[0] > one.tpot_seconds[0]
    low, est, high = one.tpot_low_seconds[0], one.tpot_seconds[0], one.tpot_high_seconds[0]
    assert low is not None and est is not None and high is not None
    assert one.roofline_tpot_seconds[0] < low <= est <= high


def test_a_pipeline_over_bridged_pairs_crosses_pcie_between_the_pairs() -> None:
    # A 2-way NVLink bridge joins GPUs 2k and 2k + 1 (the H100 PCIe's registry link): at tp 1
    # the sends 0->1 and 2->3 stay on the bridge, 1->2 crosses PCIe; at tp 2 every boundary
    # joins two bridged pairs over PCIe; on an HGX board every boundary stays on NVLink.
    def kinds(gpus: str, tp: int, pp: int) -> list[str]:
        dep = registry_deployment("llama3-70b", gpus, tp=tp, pp=pp)
        return [link.kind for link in pp_links(dep, 9e-6) if link]

    assert kinds("4xh100-pcie", 1, 4) == ["scale-up", "pcie", "scale-up"]
    assert kinds("4xh100-pcie", 2, 2) == ["pcie"]
    assert kinds("2xh100-pcie", 1, 2) == ["scale-up"]
    assert kinds("8xh100", 1, 8) == ["scale-up"] * 7
    # The slowest link a replica's traffic crosses names its regime.
    assert link_kind(registry_deployment("llama3-70b", "4xh100-pcie", tp=1, pp=4)) == "pcie"
    assert link_kind(registry_deployment("llama3-70b", "2xh100-pcie", tp=2)) == "scale-up"
