"""What-ifs that add resources are never slower (found by an audit of what-if runs).

The collective tuner chooses for every instance of a group at once. Found by the audit: choosing ring or tree on one instance alone favoured the tree
where the group's concurrent instances then collide on the fabric, so more fabric
bandwidth (or a larger message) could be slower, and the full mode (one activation per
instance) chose differently from the symmetric mode (all instances at once).
"""

from __future__ import annotations

import os
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from simulator.api import simulate
from simulator.benchmarks.collectives import collective_sweep
from simulator.config import load_config
from simulator.errors import ConfigError
from simulator.network.params import network_params_for
from topologies.machines import build_machine
from workloads.errors import WorkloadError
from workloads.strategies import STRATEGY_NAMES

CASE = [
    "cluster.gpus=512",
    "model.name=gpt-5b",
    "training.batch_tokens=1048576",
    "parallel.grid={x: 1, y: 1, z: 8, data: 64}",
]


def _time(*extra: str) -> float:
    return simulate(load_config(None, [*CASE, *extra])).report.iteration_time_s


def test_more_fabric_bandwidth_is_never_slower() -> None:
    times = [_time(f"cluster.fabric_link_bandwidth_GBps={f}") for f in (25, 30, 35, 40, 80)]
    assert all(b <= a * (1 + 1e-9) for a, b in pairwise(times)), times


@pytest.mark.slow
def test_full_and_symmetric_modes_choose_alike() -> None:
    fabric = "cluster.fabric_link_bandwidth_GBps=35"
    full = _time(fabric, "engine.mode=full")
    assert full == pytest.approx(_time(fabric, "engine.mode=symmetric"), rel=1e-9)


def test_a_larger_message_is_never_faster_with_every_instance_running() -> None:
    topo = build_machine("perlmutter", 128)
    sizes = [int(2**22 * 2 ** (k / 2)) for k in range(5)]  # 4 MiB ... 16 MiB
    rows = collective_sweep(
        topo, "all-reduce", 64, 8, sizes, "auto", "contention", network_params_for(topo), "all"
    )
    times = [r.time_s for r in rows]
    assert all(b >= a for a, b in pairwise(times)), times


@pytest.mark.parametrize(
    "machine,gpus,model,grid",
    [
        ("perlmutter", 256, "gpt-20b", "{x: 2, y: 2, z: 16, data: 4}"),
        ("alps", 128, "gpt-10b", "{x: 2, y: 2, z: 8, data: 4}"),
    ],
)
def test_more_nics_per_node_are_never_slower(
    machine: str, gpus: int, model: str, grid: str
) -> None:
    """Removing NICs must not move nodes onto other switches (it did: 3 NICs re-packed
    the chassis and ran slower than 2)."""
    base = [f"cluster.machine={machine}", f"cluster.gpus={gpus}", f"model.name={model}"]
    base += ["training.batch_tokens=1048576", f"parallel.grid={grid}"]
    times = [
        simulate(load_config(None, [*base, f"cluster.nics_per_node={k}"])).report.iteration_time_s
        for k in (1, 2, 3, 4)
    ]
    assert all(b <= a * (1 + 1e-9) for a, b in pairwise(times)), times


# ------------------------------------------------------------------ properties (issue 33)
# The tuner's choice is monotone in bandwidth: a what-if with less bandwidth never makes a
# collective, or (with the alpha-beta model, where collectives do not share links with one
# another) a whole iteration, faster. Found by the campaign: the tuner bounded the tree by
# the ring's transfer under the ring's own best protocol (LL, 2% of the link on Frontier)
# while the tree ran Simple, so a 463 KiB all-reduce over 4 Frontier nodes took 1.155 ms
# (ring) at 40 GB/s per NIC and 0.687 ms (tree) at 11.25 GB/s: an AxoNN iteration on 32
# GCDs ran 7.6% faster on slower NICs. Under the contention model a slower link can still
# speed an iteration up by a fraction of a percent to about 1% (a throttled overlapped
# collective then takes less of the links a blocking one shares), which is how max-min
# sharing behaves, not a tuner's choice: docs/DESIGN.md, "What-ifs".
PROFILE_EXAMPLES = {"default": 10, "nightly": 300}[os.environ.get("AXSIM_FUZZ_PROFILE", "default")]
KNOBS = {
    "nic": ("nic_bandwidth_GBps", "nic_bandwidth_GBps"),
    "fabric": ("fabric_link_bandwidth_GBps", "fabric_link_bandwidth_GBps"),
    "intra": ("intra_node_bandwidth_scale", "intra_node_bandwidth_scale"),
}
PER_NODE = {"dgx-h100": 8, "dgx-a100": 8, "perlmutter": 4, "frontier": 8}


def _what_if(machine: str, knob: str, factor: float) -> dict[str, float]:
    """build_machine keywords scaling `knob` (or every link: "uniform") by `factor`."""
    from topologies.catalogue import machine_preset

    preset = machine_preset(machine)
    nic = preset.nic_bandwidth_GBps * factor
    fabric = float(preset.fabric.get("link_bandwidth_GBps") or 25.0) * factor
    every = {"nic_bandwidth_GBps": nic, "fabric_link_bandwidth_GBps": fabric,
             "intra_node_bandwidth_scale": factor}  # fmt: skip
    if knob == "uniform":
        return every
    return {KNOBS[knob][0]: every[KNOBS[knob][0]]}


def _settings() -> settings:
    return settings(
        max_examples=PROFILE_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


# Draws lean where the tuner has a choice: all-reduces (ring or tree across nodes, ring
# or direct inside one) and Frontier, whose protocols differ most (RCCL's LL runs at 2% of
# a link there); the other kinds and machines keep their share.
OPS = ["all-reduce"] * 5 + ["all-gather", "reduce-scatter", "broadcast", "reduce", "all-to-all"]
MACHINES = ["frontier", "frontier", "perlmutter", "dgx-h100", "dgx-a100"]


@st.composite
def collectives(draw: st.DrawFn) -> dict[str, object]:
    machine = draw(st.sampled_from(MACHINES))
    nodes = draw(st.sampled_from([2, 4, 8, 16]))
    gpus = nodes * PER_NODE[machine]
    group = draw(st.sampled_from([g for g in (2, 4, 8, 16, 32, 64, 128) if g <= gpus]))
    stride = draw(st.sampled_from([s for s in (1, PER_NODE[machine]) if gpus % (group * s) == 0]))
    return {
        "machine": machine,
        "nodes": nodes,
        "op": draw(st.sampled_from(OPS)),
        "group": group,
        "stride": stride,
        "nbytes": 2 ** draw(st.integers(10, 30)),
        "network": draw(st.sampled_from(["alpha-beta", "contention"])),
        "instances": draw(st.sampled_from(["all", "one"])),
        "knob": draw(st.sampled_from(["nic", "fabric", "intra", "uniform"])),
        "hi": draw(st.sampled_from([0.5, 1.0, 2.0])),
        "ratio": draw(st.sampled_from([0.2, 0.45, 0.8])),
    }


def _collective_time(case: dict[str, object], factor: float) -> tuple[float, str]:
    machine, knob = str(case["machine"]), str(case["knob"])
    topo = build_machine(machine, int(case["nodes"]), **_what_if(machine, knob, factor))  # type: ignore[call-overload]
    (row,) = collective_sweep(
        topo, str(case["op"]), int(case["group"]), int(case["stride"]), [int(case["nbytes"])],  # type: ignore[call-overload]
        "auto", str(case["network"]), network_params_for(topo), str(case["instances"]),
    )  # fmt: skip
    return row.time_s, f"{row.algorithm}/{row.protocol}"


FRONTIER_TREE = {"machine": "frontier", "nodes": 4, "op": "all-reduce", "group": 32, "stride": 1,
                 "nbytes": 474112, "network": "alpha-beta", "instances": "all", "knob": "nic",
                 "hi": 1.6, "ratio": 0.28}  # fmt: skip


@_settings()
@example(FRONTIER_TREE)
@example({**FRONTIER_TREE, "network": "contention"})
@given(collectives())
def test_less_bandwidth_never_makes_a_collective_faster(case: dict[str, object]) -> None:
    """Over all algorithms and protocols the tuner weighs, both network models."""
    hi = float(case["hi"])  # type: ignore[arg-type]
    fast, chosen_fast = _collective_time(case, hi)
    slow, chosen_slow = _collective_time(case, hi * float(case["ratio"]))  # type: ignore[arg-type]
    assert slow >= fast * (1 - 1e-9), (case, fast, chosen_fast, slow, chosen_slow)


@st.composite
def runs(draw: st.DrawFn) -> tuple[list[str], str, float, float]:
    strategy = draw(st.sampled_from(STRATEGY_NAMES))
    machine = draw(st.sampled_from(MACHINES))
    gpus = draw(st.sampled_from([16, 32]))
    sets = [f"cluster.machine={machine}", f"cluster.gpus={gpus}", "model.name=gpt-tiny",
            f"training.batch_tokens={2 ** draw(st.sampled_from([15, 17, 20]))}",
            f"parallel.strategy={strategy}", "engine.network=alpha-beta"]  # fmt: skip
    if strategy == "axonn":  # the grid held: the search's own estimate is another question
        y, z = draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4]))
        sets.append(f"parallel.grid={{x: 1, y: {y}, z: {z}, data: {gpus // (y * z)}}}")
    knob = draw(st.sampled_from(["nic", "fabric", "intra", "uniform"]))
    return sets, knob, draw(st.sampled_from([1.0, 2.0])), draw(st.sampled_from([0.3, 0.6]))


def _run_time(sets: list[str], knob: str, factor: float) -> float:
    machine = sets[0].split("=", 1)[1]
    extra = [f"cluster.{k}={v:g}" for k, v in _what_if(machine, knob, factor).items()]
    return simulate(load_config(None, [*sets, *extra])).report.iteration_time_s


AXONN_FRONTIER = (
    ["cluster.machine=frontier", "cluster.gpus=32", "model.name=gpt-tiny",
     "training.batch_tokens=1048576", "parallel.strategy=axonn", "engine.network=alpha-beta",
     "parallel.grid={x: 1, y: 1, z: 1, data: 32}"],
    "nic", 1.6, 0.28,
)  # fmt: skip


@_settings()
@example(AXONN_FRONTIER)
@given(runs())
def test_less_bandwidth_never_makes_an_iteration_faster(
    case: tuple[list[str], str, float, float],
) -> None:
    """Every strategy, alpha-beta (collectives priced alone, so only a choice the tuner
    gets wrong can invert a what-if); the contention model's version is the collective
    property above and the fixed cases of this file."""
    sets, knob, hi, ratio = case
    try:
        fast = _run_time(sets, knob, hi)
    except (ConfigError, WorkloadError) as exc:  # a drawn size the strategy refuses
        assume(False)
        raise AssertionError from exc
    slow = _run_time(sets, knob, hi * ratio)
    assert slow >= fast * (1 - 1e-9), (case, fast, slow)
