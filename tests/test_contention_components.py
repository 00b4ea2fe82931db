"""The contention network solves per connected component of links, or as one whole
while a coflow spans much of the machine or an adaptive-routed phase is active (simulator/engine/network.py). Which one it uses is a
matter of speed only: max-min allocations of independent components are their separate
allocations, so forcing either way must give the same run (up to float rounding)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import simulator.engine.network as network
from simulator.api import Result, simulate
from simulator.config import load_config

# a 1F1B pipeline with TP (transfers on disjoint links: several components) and an AxoNN
# run whose collectives span the machine (one component), both small enough for seconds
CASES = {
    "pipeline": (
        "cluster: {machine: dgx-h100, gpus: 16}\n"
        "model: {name: llama3-8b, layers: 8, seq_len: 1024}\n"
        "parallel: {strategy: megatron, tp: 2, pp: 4}\n"
        "training: {batch_tokens: 32768, microbatch_sequences: 1}\n"
    ),
    "axonn": (
        "cluster: {machine: frontier, gpus: 64}\n"
        "model: {name: gpt-tiny}\n"
        "parallel: {strategy: axonn, grid: {x: 2, y: 2, z: 4, data: 4}}\n"
        "engine: {mode: full}\n"
    ),
    # symmetric, part of a large fabric: each activation covers 1/3 or more of the GPUs
    # on well under 1/32 of Frontier's links (the SPANNING_GPUS switch)
    "axonn-part": (
        "cluster: {machine: frontier, gpus: 128}\n"
        "model: {name: gpt-tiny}\n"
        "parallel: {strategy: axonn, grid: {x: 8, y: 1, z: 4, data: 4}}\n"
        "training: {batch_tokens: 65536}\n"
    ),
}


def _run(tmp_path: Path, case: str) -> Result:
    path = tmp_path / f"{case}.yaml"
    path.write_text(CASES[case])
    return simulate(load_config(str(path)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_components_and_whole_machine_solving_agree(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = _run(tmp_path, case)
    monkeypatch.setattr(network, "SPANNING_SHARE", 0.0)  # always one whole
    whole = _run(tmp_path, case)
    monkeypatch.setattr(network, "SPANNING_SHARE", math.inf)  # components (but adaptive)
    monkeypatch.setattr(network, "SPANNING_GPUS", math.inf)
    parts = _run(tmp_path, case)
    for other in (whole, parts):
        a, b = default.report, other.report
        assert a.iteration_time_s == pytest.approx(b.iteration_time_s, rel=1e-12)
        for name in ("comm_total_by_group_s", "comm_time_by_group_s", "compute_by_kind_s"):
            got, want = getattr(a, name), getattr(b, name)
            assert got.keys() == want.keys(), name
            for k, v in want.items():
                assert got[k] == pytest.approx(v, rel=1e-9, abs=1e-12), (name, k)
        assert default.engine.link_bytes == pytest.approx(other.engine.link_bytes, rel=1e-12)


def test_an_activation_on_a_third_of_the_gpus_solves_the_whole_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU-share switch fires where the link share would not (a run on part of a
    large fabric), and only through it."""
    switches: list[int] = []
    go_whole = network.ContentionNetwork._go_whole

    def counted(self: network.ContentionNetwork) -> object:
        switches.append(1)
        return go_whole(self)

    monkeypatch.setattr(network.ContentionNetwork, "_go_whole", counted)
    _run(tmp_path, "axonn-part")
    assert switches
    switches.clear()
    monkeypatch.setattr(network, "SPANNING_GPUS", math.inf)
    _run(tmp_path, "axonn-part")
    assert not switches
