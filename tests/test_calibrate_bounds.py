"""Calibration refuses the impossible and says where it extrapolates (issue 33).

Synthetic traces (tests/calibrate_synth.py) damaged the three ways the campaign found:
timestamps in nanoseconds read as microseconds (an H100 at 0.44 TFLOP/s, a 2,419 s
iteration), kernels overlapping on one stream, message sizes 10^12 times too large. The
H100 table fitted on Vidur's CSV (tests/data/vidur_network, the 8-GPU rows up to 64 MiB)
was flat beyond its largest size: every all-reduce from 64 MiB to 16 GiB took 322 us.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simulator.api import simulate
from simulator.benchmarks.collectives import collective_sweep
from simulator.config import load_config
from simulator.cost.calibration import load_calibration
from simulator.network.params import network_params_for
from tests import calibrate_synth as synth
from tests.cli_helpers import one_line_error
from topologies.machines import build_machine
from validation.calibrate import calibrate, write_calibration

DATA = Path(__file__).parent / "data"
VIDUR_H100 = DATA / "vidur_network" / "h100_dgx__all_reduce.csv"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("synth") / "run"
    synth.write_run(folder)
    return folder


def _damaged(run: Path, tmp: Path, damage: Callable[[dict[str, Any]], None]) -> Path:
    out = tmp / "damaged"
    shutil.copytree(run, out)
    for f in out.glob("rank*.json"):
        doc = json.loads(f.read_text())
        damage(doc)
        f.write_text(json.dumps(doc))
    return out


def _ns_as_us(doc: dict[str, Any]) -> None:
    for e in doc["traceEvents"]:
        for k in ("ts", "dur"):
            if isinstance(e.get(k), int | float):
                e[k] *= 1000


def _overlapping(doc: dict[str, Any]) -> None:
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    a, b = kernels[0], kernels[1]
    a["dur"], b["dur"] = max(a["dur"], 100.0), max(b["dur"], 100.0)
    b["ts"], b["tid"] = a["ts"], a["tid"]


def _huge_messages(doc: dict[str, Any]) -> None:
    for e in doc["traceEvents"]:
        args = e.get("args", {})
        for k in ("In msg nelems", "Out msg nelems"):
            if k in args:
                args[k] = int(args[k]) * 10**12


@pytest.mark.parametrize(
    "damage,needle",
    [
        (_ns_as_us, "over 100x its roofline"),
        (_overlapping, "overlap by 100.0 us on one stream"),
        (_huge_messages, "bus bandwidth at"),
    ],
)
def test_impossible_traces_are_refused(
    damage: Callable[[dict[str, Any]], None],
    needle: str,
    run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    traces = _damaged(run, tmp_path, damage)
    err = one_line_error(["calibrate", str(traces), "-o", str(tmp_path / "c.yaml")], capsys)
    assert needle in err
    assert not (tmp_path / "c.yaml").exists()


def test_a_gemm_faster_than_the_gpu_is_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The synthetic GEMMs run at 231 TFLOP/s: fine for an H100, impossible on one MI250X
    GCD (192 TFLOP/s peak) that --gpu claims they ran on."""
    args = ["calibrate", str(run), "--gpu", "mi250x-gcd", "-o", str(tmp_path / "c.yaml")]
    assert "above the AMD MI250X" in one_line_error(args, capsys)


def test_every_real_trace_and_benchmark_we_hold_still_calibrates(tmp_path: Path) -> None:
    """The bounds reject damage, not measurements: the fixtures of real profilers
    (PARAM's V100 workers, a torch4d CPU run) and Vidur's benchmark CSVs pass."""
    for source in (DATA / "traces" / "param", DATA / "traces" / "torch4d_block", VIDUR_H100):
        write_calibration(calibrate([source]), tmp_path / "c.yaml")


@pytest.fixture(scope="module")
def vidur_h100(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vidur") / "h100.yaml"
    write_calibration(calibrate([VIDUR_H100]), path)
    return path


def test_a_table_extends_by_the_model_beyond_its_largest_measurement(vidur_h100: Path) -> None:
    cal = load_calibration(vidur_h100)
    table = cal.collective("h100", "intra_node", "all-reduce", 8)
    assert table is not None and table.measured_max_bytes == 64 * 2**20
    topo = build_machine("dgx-h100", 1)
    sizes = [2**26, 2**28, 2**30, 2**34]  # 64 MiB (the edge) ... 16 GiB
    rows = collective_sweep(
        topo, "all-reduce", 8, 1, sizes, "auto", "contention", network_params_for(topo),
        calibration=cal,
    )  # fmt: skip
    model = collective_sweep(
        topo, "all-reduce", 8, 1, sizes, "auto", "contention", network_params_for(topo)
    )
    times = [r.time_s for r in rows]
    assert times[0] == pytest.approx(322e-6, rel=0.02)  # the measurement at the edge
    # beyond it the table grows as the model does (was 322 us flat up to 16 GiB)
    for r, m in zip(rows[1:], model[1:], strict=True):
        assert r.time_s / times[0] == pytest.approx(m.time_s / model[0].time_s, rel=1e-6)
    assert rows[-1].busbw_GBps < 450  # no faster than the H100's NVLink


def test_bandwidth_what_ifs_beside_calibrated_collectives_are_explained(vidur_h100: Path) -> None:
    sets = ["cluster.machine=dgx-h100", "cluster.gpus=8", "model.name=gpt-tiny"]
    sets += ["training.batch_tokens=4096", f"engine.calibration={vidur_h100}"]
    plain = simulate(load_config(None, sets)).report.choices
    assert not [c for c in plain if c["what"] == "calibrated collectives"]
    scaled = simulate(load_config(None, [*sets, "cluster.intra_node_bandwidth_scale=0.5"]))
    (note,) = [c for c in scaled.report.choices if c["what"] == "calibrated collectives"]
    assert "cluster.intra_node_bandwidth_scale=0.5 do not change them" in note["reason"]
    assert "all-reduce intra_node" in note["reason"]
