"""Collectives priced by their structure (issue 31): per-hop network latency against the
proxy-floored node-local steps, a library build's measured regime, separate calls of a
hierarchical collective, pipelined broadcast chains, and the PCCL rows' documented
exclusions and builds.

Oracles are closed forms of the model's own terms (NCCL tuning.cc's latency structure,
NCCL's chunk sizes) and counts read off the packaged PCCL file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import validation.published
from simulator.benchmarks.collectives import collective_sweep, per_node_instances
from simulator.network.params import network_params_for
from simulator.network.pricing import CollectivePricer
from simulator.network.regimes import Regime
from simulator.network.schedules import CHAIN_CHUNK_BYTES
from topologies.machines import build_machine
from validation.calibration.benchmark_logs import (
    CONNECTION_SETUP,
    exclusions,
    read_pccl_csv,
)
from workloads.ops import CollectiveKind

AG = CollectiveKind.ALL_GATHER
AR = CollectiveKind.ALL_REDUCE
PCCL = Path(validation.published.__file__).parent / "data" / "pccl_vendor.csv"
MiB = 1 << 20


def frontier_ring(nodes: int, per_node: int) -> tuple[CollectivePricer, object]:
    topo = build_machine("frontier", nodes)
    pricer = CollectivePricer(topo, network_params_for(topo))
    members = per_node_instances(topo.num_gpus, 8, nodes * per_node, per_node, "one")
    (bundle,) = pricer.bind(AG, members, "ring")
    return pricer, bundle


@pytest.mark.parametrize("per_node", [1, 2, 8])
def test_sparse_rings_pay_only_the_per_hop_term(per_node: int) -> None:
    """A ring all-gather over n nodes with k members each: n - 1 steps cross nodes and pay
    the per-hop network latency; the other n (k - 1) steps are node-local and, the ring
    crossing nodes, cost at least the proxy's per-step floor (tuning.cc max(intraLat,
    netOverhead)). With one member per node no step pays the floor."""
    nodes = 4
    pricer, bundle = frontier_ring(nodes, per_node)
    (ph,) = bundle.phases
    t = pricer.params.collectives.term("Simple")
    p = nodes * per_node
    assert (ph.steps, ph.inter_steps) == (p - 1, nodes - 1)
    local = max(t.intra_step_s, t.proxy_step_s)
    expected = (nodes - 1) * (ph.far_s + t.inter_step_s) + (p - nodes) * (ph.near_s + local)
    assert pricer.phase_latency(ph, "Simple") == pytest.approx(expected)
    assert t.proxy_step_s > t.intra_step_s  # Frontier's fit: the floor binds


def test_frontier_split_keeps_rccls_table_ratio() -> None:
    """The fitted per-hop term and proxy floor keep RCCL's Frontier table's ratio (tuning
    model 3: NET ring 9.5 / 19.8 us against the AMD host's 2 / 6 us)."""
    terms = network_params_for(build_machine("frontier", 2)).collectives.terms
    assert terms["Simple"].proxy_step_s / terms["Simple"].inter_step_s == pytest.approx(
        6 / 19.8, rel=2e-3
    )
    assert terms["LL"].proxy_step_s / terms["LL"].inter_step_s == pytest.approx(2 / 9.5, rel=2e-3)


STALL = Regime("stall", "Simple", 512 * 1024, 300e-6, ("RCCL (test build)",), "", 64 * 1024)


def stalled_pricer(nodes: int, library: str) -> CollectivePricer:
    topo = build_machine("frontier", nodes)
    base = network_params_for(topo)
    model = replace(base.collectives, regimes=(STALL,), library=library)
    return CollectivePricer(topo, replace(base, collectives=model))


def test_regime_is_off_for_builds_that_do_not_show_it() -> None:
    quiet = stalled_pricer(2, "RCCL 2.18.6")
    assert quiet.params.collectives.active_regimes == ()
    loud = stalled_pricer(2, "RCCL (test build)")
    assert loud.params.collectives.active_regimes == (STALL,)


@pytest.mark.parametrize("chunk_kib", [16, 64, 128, 256, 512, 1024])
def test_regime_stalls_every_step_in_its_window_only(chunk_kib: int) -> None:
    """In the window (64 KiB <= S/p < 512 KiB) the build runs Simple whatever LL would
    cost, and every ring step pays the stall; outside it nothing changes."""
    p = 16
    size = float(chunk_kib * 1024 * p)
    loud = stalled_pricer(2, "RCCL (test build)")
    quiet = stalled_pricer(2, "RCCL 2.18.6")
    members = np.arange(p)[None, :]
    (b_loud,) = loud.bind(AG, members, "ring")
    (b_quiet,) = quiet.bind(AG, members, "ring")
    plan = loud.plan(b_loud, AG, size, shared=True)
    t_loud = loud.estimate_time_s(b_loud, size, AG)
    t_quiet = quiet.estimate_time_s(b_quiet, size, AG)
    if 64 <= chunk_kib < 512:
        assert plan.protocol == "Simple"
        forced = CollectivePricer(quiet.topology, quiet.params, protocol="Simple")
        (b_simple,) = forced.bind(AG, members, "ring")
        simple = forced.estimate_time_s(b_simple, size, AG)
        assert t_loud == pytest.approx(simple + (p - 1) * STALL.per_step_s)
    else:
        assert t_loud == pytest.approx(t_quiet)


def test_tuner_chooses_the_algorithm_without_the_stall() -> None:
    """RCCL's tuner does not know its build's stall: the algorithm an all-reduce runs is
    the one the same build picks without the regime, and the run then pays the stall
    (one GCD on each of 2 nodes, 512 KiB: the ring's steps of 256 KiB are in the window)."""
    nodes, size = 2, 0.5 * MiB
    members = (np.arange(nodes) * 8)[None, :]
    loud = stalled_pricer(nodes, "RCCL (test build)")
    quiet = stalled_pricer(nodes, "RCCL 2.18.6")
    algo = quiet.choose_algorithm(AR, members, size)
    assert loud.choose_algorithm(AR, members, size) == algo
    (b_loud,) = loud.bind(AR, members, algo)
    (b_quiet,) = quiet.bind(AR, members, algo)
    stall = loud.plan(b_loud, AR, size, shared=True).stall_s
    assert quiet.plan(b_quiet, AR, size, shared=True).stall_s == 0.0
    t_loud = sum(loud.time_terms(b_loud, size, AR, shared=True))
    seen = sum(loud.time_terms(b_loud, size, AR, shared=True, tuner=True))
    assert t_loud == pytest.approx(seen + stall)
    assert algo == "ring"
    assert stall == pytest.approx(2 * (nodes - 1) * STALL.per_step_s)


def test_hierarchical_levels_each_pay_a_call() -> None:
    """A hierarchical all-gather over 2 Frontier nodes is three library calls (across
    nodes, among package leaders, inside the GCD pair): each pays the launch and its
    protocol's base latency, the node-crossing one also the network's base."""
    topo = build_machine("frontier", 2)
    pricer = CollectivePricer(topo, network_params_for(topo), protocol="Simple")
    (bundle,) = pricer.bind(AG, np.arange(16)[None, :], "hierarchical")
    assert bundle.separate_calls and len(bundle.phases) == 3
    assert [ph.inter for ph in bundle.phases] == [True, False, False]
    plan = pricer.plan(bundle, AG, 256.0 * MiB, shared=True)
    model = pricer.params.collectives
    term = model.term("Simple")
    assert plan.overhead_s == 0.0 and plan.protocol == "Simple"
    for ph, lat in zip(bundle.phases, plan.latency_s, strict=True):
        fixed = model.launch_overhead_s + term.base_latency_s
        fixed += model.inter_node_base_s if ph.inter else 0.0
        assert lat == pytest.approx(fixed + pricer.phase_latency(ph, "Simple"))


@settings(max_examples=10, deadline=None)
@given(k=st.integers(min_value=10, max_value=30))
def test_broadcast_chain_pays_its_pipeline_fill(k: int) -> None:
    """NCCL's pipelined chain (broadcast): each flow carries its channel's share S / c
    plus L - 1 chunks of min(S / c, chunk) (Simple: one 512 KiB buffer slot)."""
    size = float(2**k)
    topo = build_machine("perlmutter", 4)
    pricer = CollectivePricer(topo, network_params_for(topo), protocol="Simple")
    (bundle,) = pricer.bind(CollectiveKind.BROADCAST, np.arange(16)[None, :], "ring")
    (ph,) = bundle.phases
    plan = pricer.plan(bundle, CollectiveKind.BROADCAST, size, shared=True)
    share = ph.bytes_factor * size
    fill = (ph.chain_hops - 1) * min(share, CHAIN_CHUNK_BYTES["Simple"])
    assert ph.chain_hops == 15
    assert plan.bytes_per_flow[0] == pytest.approx(share + fill)


def test_broadcast_takes_the_chain_as_nccl_does() -> None:
    topo = build_machine("perlmutter", 2)
    (row,) = collective_sweep(topo, "broadcast", 8, 1, [64 * MiB], instances="one")
    assert row.algorithm == "ring"


def test_pat_is_chosen_only_where_the_build_has_it() -> None:
    """NCCL >= 2.23 weighs PAT for an all-gather with one GPU per node; 2.22 does not."""
    topo = build_machine("dgx-h100", 8)
    members = per_node_instances(topo.num_gpus, 8, 8, 1, "one")
    for library, has_pat in (("NCCL 2.23.4", True), ("NCCL 2.22.3", False)):
        params = network_params_for(topo).with_library(library)
        pricer = CollectivePricer(topo, params)
        pricer.choose_algorithm(AG, members, 64.0 * 1024, key=("g", "all"))
        (_, estimates) = next(iter(pricer.decisions.values()))
        assert ("pat" in estimates) is has_pat


def test_pccl_exclusions_are_documented_and_counted() -> None:
    """Only the connection-setup rule excludes rows: the first size of a job at >= 128
    ranks, more than twice as slow as a larger message of the same job (18 Frontier
    rows, no Perlmutter row); every other row, RCCL's stalls included, is kept."""
    samples = read_pccl_csv(PCCL)
    kept, excluded = exclusions(samples)
    (rows,) = excluded.values()
    assert list(excluded) == [CONNECTION_SETUP]
    assert len(rows) == 18 and {s.machine for s in rows} == {"frontier"}
    assert len(kept) + len(rows) == len(samples) == 560
    for s in rows:
        job = [q for q in samples if q.job == s.job and q.kind is s.kind and q.ranks == s.ranks]
        assert s.ranks >= 128 and s.nbytes == min(q.nbytes for q in job)
        assert s.time_s > 2 * min(q.time_s for q in job if q.nbytes > s.nbytes)


def test_every_pccl_row_has_the_build_its_log_shows() -> None:
    samples = read_pccl_csv(PCCL)
    assert all(s.build for s in samples)
    builds = {(s.machine, s.build) for s in samples}
    assert ("perlmutter", "NCCL 2.21.5 (PCCL runs)") in builds
    assert len({b for m, b in builds if m == "frontier"}) == 3


def test_a_chosen_build_survives_a_calibrations_network_block() -> None:
    """`engine.collective_library` / `--library` name the build the run follows, over the
    preset's and over a calibration file's `library`."""
    from simulator.cost.calibration import Calibration, GpuCalibration
    from simulator.network.protocols import CollectiveModelSpec

    topo = build_machine("frontier", 2)
    spec = CollectiveModelSpec.model_validate({"library": "RCCL 2.18.6"})
    cal = Calibration(gpus={"mi250x-gcd": GpuCalibration(network=spec)})
    build = "RCCL (PCCL runs, 1 GCD per rank)"
    pricer = CollectivePricer(topo, network_params_for(topo), calibration=cal, library=build)
    assert pricer.params.collectives.library == build
    assert pricer.params.collectives.active_regimes  # the preset lists a regime for it
    plain = CollectivePricer(topo, network_params_for(topo), calibration=cal)
    assert plain.params.collectives.active_regimes == ()
