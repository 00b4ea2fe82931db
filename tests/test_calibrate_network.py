"""Collective logs in, network-model terms out: the PCCL and nccl-tests readers, the fit
(closed loop on the simulator's own times, and the presets it produced), and the round
trip of a recorded nccl-tests log through `axsim calibrate` and `axsim collective
--format nccl-tests`."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import validation.published
from simulator.benchmarks.collectives import collective_sweep
from simulator.benchmarks.nccl_tests import format_nccl_tests
from simulator.cli import main
from topologies.catalogue import machine_preset
from topologies.machines import build_machine
from validation.calibration.benchmark_logs import (
    CollectiveSample,
    drop_unhealthy,
    read_nccl_tests,
    read_pccl_csv,
)
from validation.calibration.calibrate import LogOptions, calibrate, write_calibration
from validation.calibration.network import NetworkFit
from workloads.ops import CollectiveKind

from .cli_helpers import one_line_error

PCCL = Path(validation.published.__file__).parent / "data" / "pccl_vendor.csv"
LOG = Path(__file__).parent / "data" / "nccl_tests" / "all_reduce_perf_p5.log"
MiB = 1 << 20


def test_pccl_reader_restores_the_power_of_two_sizes() -> None:
    samples = read_pccl_csv(PCCL)
    assert len(samples) == 560
    assert all(s.nbytes == 2 ** round(math.log2(s.nbytes)) for s in samples)
    rs = [s for s in samples if s.kind is CollectiveKind.REDUCE_SCATTER and s.ranks == 1024]
    # the log prints one rank's output, 0.001 MB at 1,024 GCDs: the input is 1 MiB
    assert min(s.nbytes for s in rs) == MiB
    assert max(s.nbytes for s in samples) == 1024 * MiB


def test_unhealthy_points_are_frontier_stalls() -> None:
    samples = read_pccl_csv(PCCL)
    kept, dropped = drop_unhealthy(samples)
    assert len(kept) + len(dropped) == len(samples)
    assert len(dropped) == 94 and {s.machine for s in dropped} == {"frontier"}
    for s in dropped:  # each is > 2x slower than a larger message of its own job
        larger = [q.time_s for q in kept + dropped if q.job == s.job and q.kind is s.kind
                  and q.ranks == s.ranks and q.nbytes > s.nbytes]  # fmt: skip
        assert s.time_s > 2 * min(larger)


def test_fit_recovers_what_the_simulator_produced() -> None:
    """Closed loop: samples timed by the engine with Perlmutter's preset, fitted at 4, 8
    and 32 GPUs (one node and two node counts: launch, network base and step terms can
    be told apart), predict 16 GPUs within 2% (a model fitted on its own output)."""
    samples = []
    for ranks in (4, 8, 16, 32):
        topo = build_machine("perlmutter", max(ranks // 4, 1))
        sizes = [(64 << 10) << k for k in range(15)]
        for r in collective_sweep(topo, "all-gather", ranks, 1, sizes, instances="one"):
            samples.append(CollectiveSample("perlmutter", CollectiveKind.ALL_GATHER, ranks,
                                            max(ranks // 4, 1), float(r.bytes), r.time_s, "sim"))  # fmt: skip
    fit_on = [s for s in samples if s.ranks in (4, 8, 32)]
    result = NetworkFit("perlmutter", fit_on).fit()
    everything = NetworkFit("perlmutter", samples)
    predicted = everything.predict(result.model, result.link_efficiency)
    measured = np.array([s.time_s for s in samples])
    assert np.abs(predicted / measured - 1).max() < 0.02


def test_fit_recovers_a_regimes_stall() -> None:
    """Closed loop with a measured regime: samples timed by the engine under a build whose
    small-step stall is 250 us per ring step (Frontier, 16 and 32 GCDs), fitted from the
    regime's window and build alone: the stall comes back within 2%."""
    from dataclasses import replace as dc_replace

    from simulator.network.params import network_params_for
    from validation.calibration.network import regime_templates

    template = regime_templates("frontier")[1]
    build = template.libraries[0]
    truth = dc_replace(template, per_step_s=250e-6)
    samples = []
    for ranks in (16, 32):
        topo = build_machine("frontier", ranks // 8)
        base = network_params_for(topo)
        params = dc_replace(base, collectives=dc_replace(base.collectives, regimes=(truth,)))
        sizes = [(1 << 20) << k for k in range(8)]
        for r in collective_sweep(topo, "all-gather", ranks, 1, sizes, instances="one",
                                  params=params.with_library(build)):  # fmt: skip
            samples.append(CollectiveSample("frontier", CollectiveKind.ALL_GATHER, ranks,
                                            ranks // 8, float(r.bytes), r.time_s, "sim",
                                            build=build))  # fmt: skip
    result = NetworkFit("frontier", samples, (template,)).fit()
    (fitted,) = [r for r in result.model.regimes if r.name == template.name]
    assert fitted.per_step_s == pytest.approx(250e-6, rel=0.02)


@pytest.mark.parametrize(("machine", "ranks"), [("frontier", (8, 256)), ("perlmutter", (16, 256))])
def test_presets_hold_what_calibrate_fits(machine: str, ranks: tuple[int, ...]) -> None:
    """machines.yaml's fitted terms are `axsim calibrate` on the PCCL rows (to the
    printed precision): no hand-set constant hides among them."""
    cal = calibrate([PCCL], logs=LogOptions(machine=machine, fit_ranks=ranks))
    spec = cal.gpus[machine_preset(machine).gpu].network
    assert spec is not None
    preset = machine_preset(machine).collectives
    assert spec.fit["ranks"] == list(ranks)
    for key in ("launch_overhead_us", "inter_node_base_us"):
        fitted = getattr(spec, key)
        assert fitted == pytest.approx(preset.get(key, fitted), rel=2e-3), key
    for proto, terms in preset["protocols"].items():
        got = spec.protocols[proto]
        assert got.inter_node_step_us == pytest.approx(terms["inter_node_step_us"], rel=2e-3)
        assert got.intra_node_step_us == pytest.approx(terms["intra_node_step_us"], rel=2e-3)
        assert got.proxy_step_us == pytest.approx(terms["proxy_step_us"], rel=2e-3)
        assert got.bandwidth_factor == pytest.approx(terms["bandwidth_factor"], rel=2e-3)
    for kind, value in preset["link_efficiency"].items():
        assert spec.link_efficiency[kind] == pytest.approx(value, rel=2e-3)
    regimes = {r["name"]: r["per_step_us"] for r in preset.get("regimes", ())}
    assert {r.name: r.per_step_us for r in spec.regimes} == pytest.approx(regimes, rel=2e-3)


def test_nccl_tests_table_reads_back_what_it_wrote(tmp_path: Path) -> None:
    topo = build_machine("perlmutter", 2)
    rows = collective_sweep(
        topo, "reduce-scatter", 8, 1, [MiB, 64 * MiB, 512 * MiB], instances="one"
    )
    text = format_nccl_tests(CollectiveKind.REDUCE_SCATTER, rows, [0, 0, 0, 0, 1, 1, 1, 1], "GPU")
    path = tmp_path / "reduce_scatter_perf.log"
    path.write_text(text)
    back = read_nccl_tests(path, "perlmutter")
    assert [(s.kind, s.ranks, s.nodes) for s in back] == [(CollectiveKind.REDUCE_SCATTER, 8, 2)] * 3
    for s, r in zip(back, rows, strict=True):
        assert s.nbytes == r.bytes and s.time_s == pytest.approx(r.time_s, rel=1e-3)


def test_recorded_nccl_tests_log_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorded all_reduce_perf log (8 H100) -> `axsim calibrate` -> `axsim collective
    --format nccl-tests` with that calibration prints every size within the fit's 3%."""
    recorded = read_nccl_tests(LOG, "dgx-h100")
    assert {(s.kind, s.ranks, s.nodes) for s in recorded} == {(CollectiveKind.ALL_REDUCE, 8, 1)}
    assert len(recorded) == 32
    cal = write_calibration(
        calibrate([LOG], logs=LogOptions(machine="dgx-h100")), tmp_path / "p5.yaml"
    )
    args = ["collective", "--machine", "dgx-h100", "--nodes", "1", "--group", "8", "--op", "all-reduce",
            "--instances", "one", "--bytes", "8:16G", "--factor", "2", "--calibration",
            str(cal), "--format", "nccl-tests"]  # fmt: skip
    capsys.readouterr()
    assert main(args) == 0
    out = tmp_path / "all_reduce_perf_sim.log"
    out.write_text(capsys.readouterr().out)
    simulated = read_nccl_tests(out, "dgx-h100")
    assert [(s.ranks, s.nodes) for s in simulated[:1]] == [(8, 1)]
    assert [s.nbytes for s in simulated] == [s.nbytes for s in recorded]
    for sim, rec in zip(simulated, recorded, strict=True):
        assert sim.time_s == pytest.approx(rec.time_s, rel=0.031), rec.nbytes


def test_network_terms_fitted_on_the_recorded_log() -> None:
    """The protocol model itself (not the exact tables) follows the log: NCCL's LL for
    small sizes, Simple at the NVSwitch rate for large ones."""
    spec = calibrate([LOG], logs=LogOptions(machine="dgx-h100")).gpus["h100"].network
    assert spec is not None
    assert spec.fit["median_rel_error"] < 0.06


@pytest.mark.parametrize(
    ("content", "extra", "match"),
    [
        ("# nothing here\n# busbw out-of-place\n", ["--machine", "dgx-h100"], "no data rows"),
        (
            "  1024  256  float  sum  -1  12.0  0.09  0.16  0  12.0  0.09  0.16  0\n#busbw\n",
            [],
            "needs --machine",
        ),
        (
            "  1024  256  float  sum  -1  -3.0  0.09  0.16  0  12.0  0.09  0.16  0\n#busbw\n",
            ["--machine", "dgx-h100"],
            "time must be positive",
        ),
    ],
)
def test_bad_nccl_tests_logs_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, extra: list[str], match: str
) -> None:
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(content)
    err = one_line_error(["calibrate", str(path), "-o", str(tmp_path / "c.yaml"), *extra], capsys)
    assert match in err and str(path) in err


def test_bad_pccl_rows_and_flags_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "pccl.csv"
    header = "machine,collective,library,gpus,nodes,output_bytes,busbw_GBps,time_ms,source_file\n"
    bad.write_text(header + "frontier,all_gather,nccl,16,3,1049000,1,2,x\n")
    err = one_line_error(["calibrate", str(bad), "-o", str(tmp_path / "c.yaml")], capsys)
    assert "gpus 16 and nodes 3" in err
    err = one_line_error(
        ["calibrate", str(PCCL), "-o", str(tmp_path / "c.yaml"), "--fit-ranks", "8,x"], capsys
    )
    assert "--fit-ranks" in err
    err = one_line_error(
        ["calibrate", str(PCCL), "-o", str(tmp_path / "c.yaml"), "--machine", "frontier",
         "--fit-ranks", "3"], capsys,
    )  # fmt: skip
    assert "no samples left" in err
