"""NCCL/RCCL protocols in the collective model: the tuner's choice, the closed form of a
forced protocol, and where the terms come from (library tables, presets, calibration)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.benchmarks.collectives import collective_sweep
from simulator.cost.calibration import Calibration, GpuCalibration
from simulator.errors import CostModelError
from simulator.network.params import network_params_for, parse_spec
from simulator.network.pricing import CollectivePricer
from simulator.network.protocols import CollectiveModelSpec
from topologies.machines import build_machine
from workloads.ops import CollectiveKind

MiB = 1 << 20
AG = CollectiveKind.ALL_GATHER


@pytest.fixture(scope="module")
def perlmutter_pricer() -> CollectivePricer:
    topo = build_machine("perlmutter", 4)
    return CollectivePricer(topo, network_params_for(topo))


@settings(max_examples=12, deadline=None)
@given(size=st.integers(min_value=10, max_value=31).map(lambda k: float(2**k)))
def test_tuner_runs_the_cheapest_enabled_protocol(
    perlmutter_pricer: CollectivePricer, size: float
) -> None:
    """NCCL's tuner: the protocol with the smallest latency + bytes / bandwidth among the
    ones enabled on the bundle's tier (Perlmutter across nodes: LL and Simple)."""
    pricer = perlmutter_pricer
    (bundle,) = pricer.bind(AG, np.arange(16)[None, :], "ring", key="ag16")
    plan = pricer.plan(bundle, AG, size, shared=True)
    assert plan.protocol in ("LL", "Simple")
    totals = {}
    for proto in ("LL", "Simple"):
        forced = CollectivePricer(pricer.topology, pricer.params, protocol=proto)
        (b,) = forced.bind(AG, np.arange(16)[None, :], "ring")
        totals[proto] = forced.estimate_time_s(b, size, AG)
    assert pricer.estimate_time_s(bundle, size, AG) == pytest.approx(min(totals.values()))


def test_small_messages_take_ll_and_large_ones_simple() -> None:
    topo = build_machine("perlmutter", 4)
    rows = collective_sweep(topo, "all-gather", 16, 1, [64 << 10, 1 << 30], instances="one")
    assert [r.protocol for r in rows] == ["LL", "Simple"]


@pytest.mark.parametrize("proto", ["LL", "Simple"])
def test_forced_protocol_follows_its_closed_form(proto: str) -> None:
    """A ring all-gather over 4 Perlmutter nodes with one protocol: launch + the network's
    base + the protocol's base + (P - N) node-local steps (each at least the proxy's
    per-step floor, the ring crossing nodes) + (N - 1) network steps (route latency +
    protocol step) + bytes / (ring rate x bandwidth factor)."""
    topo = build_machine("perlmutter", 4)
    params = network_params_for(topo)
    t = params.collectives.term(proto)
    pricer = CollectivePricer(topo, params, protocol=proto)
    (b,) = pricer.bind(AG, np.arange(16)[None, :], "ring")
    (ph,) = b.phases
    size = 64.0 * MiB
    expected = (
        params.collective_overhead_s
        + params.collectives.inter_node_base_s
        + t.base_latency_s
        + 12 * (ph.near_s + max(t.intra_step_s, t.proxy_step_s))
        + 3 * (ph.far_s + t.inter_step_s)
        + ph.bytes_factor * size / (ph.shared_rate_Bps * t.bandwidth_factor)
    )
    (row,) = collective_sweep(
        topo, "all-gather", 16, 1, [int(size)], instances="one", protocol=proto
    )
    assert row.protocol == proto
    assert row.time_s == pytest.approx(expected, rel=1e-9)


def test_rccl_has_no_ll128_by_default_and_nvidia_nodes_do() -> None:
    frontier = network_params_for(build_machine("frontier", 2)).collectives
    dgx = network_params_for(build_machine("dgx-h100", 2)).collectives
    assert "LL128" not in frontier.protocols(inter=True)
    assert "LL128" in dgx.protocols(inter=True) and "LL128" in dgx.protocols(inter=False)


def test_calibration_network_block_replaces_the_machine_terms() -> None:
    topo = build_machine("dgx-h100", 2)
    spec = CollectiveModelSpec.model_validate(
        {
            "launch_overhead_us": 50,
            "protocols": {"Simple": {"base_latency_us": 1, "intra_node_step_us": 2,
                                     "inter_node_step_us": 300, "bandwidth_factor": 0.5}},
            "enabled": {"inter_node": ["Simple"]},
            "link_efficiency": {"nic": 0.5},
        }
    )  # fmt: skip
    cal = Calibration(gpus={"h100": GpuCalibration(network=spec)})
    pricer = CollectivePricer(topo, network_params_for(topo), calibration=cal)
    model = pricer.params.collectives
    assert model.launch_overhead_s == pytest.approx(50e-6)
    assert model.term("Simple").inter_step_s == pytest.approx(300e-6)
    assert model.protocols(inter=True) == ("Simple",)
    assert pricer.params.efficiency_of("nic") == 0.5
    assert (
        model.term("LL").inter_step_s
        == network_params_for(topo).collectives.term("LL").inter_step_s
    )


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        (
            {
                "protocols": {
                    "LL": {
                        "base_latency_us": 1,
                        "intra_node_step_us": 1,
                        "inter_node_step_us": 1,
                        "bandwidth_factor": 1.5,
                    }
                }
            },
            r"demo\.protocols\.LL\.bandwidth_factor",
        ),
        ({"protocols": {"XL": {}}}, r"demo\.protocols\.XL"),
        ({"enabled": {"inter_node": ["Fast"]}}, r"demo\.enabled\.inter_node"),
        ({"link_efficiency": {"warp": 0.5}}, r"demo\.link_efficiency\.warp"),
        ({"launch_overhead_us": True}, r"demo"),
    ],
)
def test_bad_collective_blocks_name_the_field(raw: object, match: str) -> None:
    with pytest.raises(CostModelError, match=match):
        parse_spec(raw, "demo")


def test_unknown_forced_protocol_is_an_error() -> None:
    topo = build_machine("dgx-h100", 1)
    with pytest.raises(CostModelError, match="unknown protocol 'LL64'"):
        CollectivePricer(topo, network_params_for(topo), protocol="LL64")
