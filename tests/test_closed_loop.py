"""The CPU closed loop: trace grid A with torch4d, calibrate on A only, predict grid B.

A = (2,2,1,1) and B = (2,1,1,2) on 4 gloo ranks: B swaps A's Y split for data
parallelism, so its GEMM shapes, its collectives (the data-parallel gradient
all-reduces of whole weight shards instead of Y all-reduces of activations), its
parameters per rank and its batch per rank all differ, while every (collective, group
size) it needs was measured on A. CPU timing on a shared host is noisy, so the bound is
loose here; bench/closed_loop.py repeats both runs and reports the spread.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simulator.cli import main
from tests.cli_helpers import assert_valid_output

pytestmark = [pytest.mark.torch, pytest.mark.slow]
MODEL = ["small", "--layers", "2", "--steps", "4", "--warmup", "1", "--timing-steps", "0"]
# The test's bound on B: simulated within a factor of 2 of measured. B is predicted from
# live CPU traces of A on a shared 2-core host, where a load spike during A alone moved B's
# error to +54% and +61% in two full-suite runs (-2% and -15% otherwise); the bench
# (bench/closed_loop.py) repeats both runs and records the real error and its spread.
FACTOR = 2.0


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("torch")
    out = {}
    for name, grid in (("A", "2,2,1,1"), ("B", "2,1,1,2")):  # back to back: same host load
        folder = tmp_path_factory.mktemp(name)
        assert main(["trace-torch", "--grid", grid, "--model", *MODEL, "--out", str(folder)]) == 0
        out[name] = folder
    cal = tmp_path_factory.mktemp("cal") / "cal.yaml"
    assert main(["calibrate", str(out["A"]), "-o", str(cal)]) == 0
    out["cal"] = cal
    return out


def test_program_mirrors_the_traced_collectives(runs: dict[str, Path]) -> None:
    from validation.runs.measured import load_run
    from validation.torch4d.workload import build_torch4d_program, load_run_json, run_spec_from_json
    from workloads.ops import CollectiveOp

    for name in ("A", "B"):
        folder = runs[name]
        run = load_run(sorted(folder.glob("rank*.gz")), folder / "run.json")
        spec = run_spec_from_json(load_run_json(folder / "run.json"))
        program = [
            (op.kind.value, int(op.bytes), op.group)
            for op in build_torch4d_program(spec).ops
            if isinstance(op, CollectiveOp)
        ]
        records = sorted(run.collective_records(), key=lambda r: (r.rank, r.iteration, r.start_s))
        step = records[-1].iteration
        traced = [
            (r.kind, r.bytes, r.group) for r in records if r.rank == 0 and r.iteration == step
        ]
        kinds = {"axsim_X": "x", "axsim_Y": "y", "axsim_Z": "z", "axsim_data": "data"}
        assert sorted(program) == sorted((k, b, kinds[g]) for k, b, g in traced)


def test_calibration_closes_on_a(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    from simulator.cost.calibration import load_calibration

    cal = load_calibration(runs["cal"])
    cpu = cal.gpus["cpu"]
    assert cpu.rates is not None and cpu.rates.launch_overhead_s is not None
    assert cpu.gemm is not None and len(cpu.gemm.points) >= 6
    sizes = {t.group_size for t in cpu.collectives}
    assert {1, 2, None} <= sizes
    code = main(
        ["compare", "--traces", str(runs["A"]), "--calibration", str(runs["cal"]), "--json"]
    )
    report = json.loads(capsys.readouterr().out)
    assert_valid_output("compare", report)
    assert code == 0 and abs(report["iteration_error"]) < 0.05  # the per-op term closes A
    kinds = {r["name"]: r for r in report["rows"] if r["scope"] == "kind"}
    for kind in ("gemm", "attention", "elementwise", "optimizer", "overhead"):
        assert kinds[kind]["measured_s"] > 0 and kinds[kind]["simulated_s"] > 0, kind
    # in sample, the GEMM table and the attention rate reproduce their own ops' busy time,
    # within the noise of live CPU timing on a shared 2-core host: the table keeps one
    # time per shape while the same shape's kernels vary with the load (a full-suite run
    # on 2026-11-25 gave a GEMM error of 12.2%, a run alone under 5%)
    assert abs(kinds["gemm"]["error"]) < 0.25 and abs(kinds["attention"]["error"]) < 0.25


def test_predicts_b(runs: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    main(["compare", "--traces", str(runs["B"]), "--calibration", str(runs["cal"]), "--json"])
    report = json.loads(capsys.readouterr().out)
    err = report["iteration_error"]
    print(f"closed loop B: measured {report['rows'][0]['measured_s']:.3f} s, simulated "
          f"{report['rows'][0]['simulated_s']:.3f} s, error {err:+.1%}")  # fmt: skip
    assert 1 / FACTOR < 1 + err < FACTOR
    groups = {r["name"] for r in report["rows"] if r["scope"] == "group"}
    assert groups == {"x", "y", "z", "data"}


def test_compare_exit_code_beyond_tolerance(
    runs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["compare", "--traces", str(runs["B"]), "--calibration", str(runs["cal"])]
    assert main([*args, "--tolerance", "0"]) == 3
    out = capsys.readouterr().out
    assert "BEYOND tolerance" in out and "iteration" in out and "data" in out


def test_compare_refuses_a_missing_rank_and_a_gpu_machine_for_a_cpu_run(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Either would compare two different things and print a plausible-looking table."""
    import shutil

    partial = tmp_path / "partial"
    shutil.copytree(runs["A"], partial)
    (rank1,) = partial.glob("rank1.*")
    rank1.unlink()
    assert main(["compare", "--traces", str(partial)]) == 2
    err = capsys.readouterr().err.strip()
    assert "no trace of rank 1 (world size 4)" in err and "\n" not in err
    assert main(["compare", "--traces", str(runs["A"]), "--machine", "dgx-h100"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--machine dgx-h100" in err and "is a CPU run" in err and "\n" not in err
