"""Calibrating synthetic traces of known costs recovers them (collectives, GEMMs, overlap)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.benchmarks.collectives import collective_sweep
from simulator.cli import main
from simulator.cost.calibration import load_calibration
from simulator.cost.kernels import KernelModel
from tests import calibrate_synth as synth
from tests.cli_helpers import assert_valid_output
from topologies.machines import build_machine
from validation.calibration.calibrate import calibrate, write_calibration
from workloads.ops import ComputeKind, ComputeOp


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("synth")
    synth.write_run(folder)
    return folder


def test_collective_table_reproduces_the_network(run_dir: Path) -> None:
    cal = calibrate([run_dir], tolerance=0.01)
    h100 = cal.gpus["h100"]
    table = cal.collective("h100", "intra_node", "all-reduce", 2)
    assert table is not None and table.group_size == 2 and table.segments
    for s in synth.SIZES:  # minimum over ranks: rank 0's LAG_US of waiting is not in it
        assert table.time_s(s) == pytest.approx(synth.allreduce_s(s), rel=0.01)
    agnostic = [t for t in h100.collectives if t.group_size is None]
    assert len(agnostic) == 1 and agnostic[0].points
    res = cal.provenance.residuals["collectives"]["h100/all-reduce/intra_node/2"]
    assert res["max_rel_error"] <= 0.01 and res["samples"] == synth.STEPS * (len(synth.SIZES) + 1)
    assert res["method"] == "min over members"


def test_gemm_table_and_overlap_slowdown(run_dir: Path) -> None:
    cal = calibrate([run_dir])
    h100 = cal.gpus["h100"]
    assert h100.gemm is not None
    assert {(p.m, p.n, p.k) for p in h100.gemm.points} == set(synth.SHAPES)
    for p in h100.gemm.points:  # clean samples only: the stretched ones are the overlap's
        assert p.time_s == pytest.approx(synth.gemm_s(p.m, p.n, p.k), rel=1e-9)
        assert p.samples == 2 * synth.STEPS and p.dtype_bytes == 2
    assert h100.overlap_slowdown == pytest.approx(synth.SLOWDOWN, rel=1e-6)
    km = KernelModel("h100", calibration=cal)
    m, n, k = synth.SHAPES[1]
    op = ComputeOp(
        "g", ComputeKind.GEMM, 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n), shape=(m, n, k)
    )
    assert km.kernel_time_s(op) == pytest.approx(synth.gemm_s(m, n, k))
    assert km.overlap_slowdown == pytest.approx(synth.SLOWDOWN)


def test_provenance_and_round_trip(run_dir: Path, tmp_path: Path) -> None:
    cal = calibrate([run_dir])
    refs = cal.provenance.traces
    assert {Path(r.path).name for r in refs} == {"rank0.json", "rank1.json"}
    assert all(r.sha256 and len(r.sha256) == 64 and r.samples for r in refs)
    for suffix in (".yaml", ".json"):
        out = write_calibration(cal, tmp_path / f"cal{suffix}")
        assert load_calibration(out) == cal


def test_simulated_collective_matches_the_trace(run_dir: Path) -> None:
    """Through axsim's collective model (engine + pricer) the table holds."""
    cal = calibrate([run_dir], tolerance=0.01)
    rows = collective_sweep(
        build_machine("dgx-h100", 1), "all-reduce", 2, 1, synth.SIZES, instances="one",
        calibration=cal,
    )  # fmt: skip
    for r in rows:
        assert r.time_s == pytest.approx(synth.allreduce_s(r.bytes), rel=0.011)


def test_cli(run_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.yaml"
    assert main(["calibrate", str(run_dir), "-o", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert_valid_output("calibrate", summary)
    assert summary["gpus"]["h100"]["gemm_shapes"] == len(synth.SHAPES)
    assert summary["gpus"]["h100"]["overlap_slowdown"] == pytest.approx(synth.SLOWDOWN)
    assert load_calibration(out).gpus["h100"].collectives
