"""The calibrator: profiler traces and collective benchmarks in, a calibration file out.

`calibrate(inputs) -> Calibration` (and `axsim calibrate INPUT... -o FILE`) fits, per GPU
type of the catalogue:

- GEMM tables: per shape (m, n, k, batch, dtype bytes) the median kernel time and its
  sample count (validation.calibrate_kernels);
- collective tables per (collective, link tier, group size): piecewise alpha-beta lines
  over the message size, every measured size within `tolerance` of its line, plus a
  size-agnostic bus-bandwidth table for unmeasured group sizes (validation.calibrate_comm);
- the compute slowdown under overlapping communication, when the traces show enough
  same-shape GEMMs with and without it, and the interference factors of compute-bound and
  memory-bound kernels from identical launches with and without it;
- for a GPU, every kernel-model term its traces have the evidence for
  (validation.kernel_terms): the GEMM peak under the efficiency curve and the GEMM fixed
  time, the achieved memory bandwidth and fixed time of memory-bound kernels, the
  attention rate, the launch gap, the host issue time per kernel;
- for a CPU host (no GEMM efficiency curve): the effective GEMM rate, the memory-bound
  rate and fixed time, the attention rate, and, when the traced program is known (a
  torch4d run.json beside the traces), the per-op launch overhead that closes the step's
  time budget (validation.calibrate_host).

Inputs are Kineto trace files or directories (one directory = one run; plain or gzipped
JSON; a torch4d `run.json` in it is used), and Vidur collective benchmark CSVs (detected
by their `time_stats.` header). Provenance records every input with its SHA-256, sample
counts and residuals. Bad input raises TraceError / CalibrationError naming the file (and
rank); nothing usable at all is an error too, never an empty file.
"""

from __future__ import annotations

import hashlib
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from simulator.cost.calibration import (
    Calibration,
    CollectiveTable,
    GemmTable,
    GpuCalibration,
    InterferenceFit,
    KernelRates,
    Provenance,
    TraceRef,
    save_calibration,
)
from topologies.catalogue import machine_preset
from topologies.user_files import MAX_USER_FILE_BYTES, check_regular
from validation.calibrate_bounds import check_collective_tables, check_gemm_rates, check_streams
from validation.calibrate_comm import (
    CalibrationError,
    Sweep,
    build_tables,
    gloo_host_overhead,
    is_vidur_csv,
    merge_sweeps,
    read_vidur_csv,
    trace_sweeps,
)
from validation.calibrate_fit import DEFAULT_TOLERANCE
from validation.calibrate_host import (
    HostStats,
    closure_overhead,
    fit_attention_rate,
    fit_memory,
    host_stats,
)
from validation.calibrate_kernels import (
    GemmKey,
    Statistic,
    fit_gemm_rate,
    fit_overlap_slowdown,
    gemm_samples,
    gemm_table,
    resolve_statistic,
)
from validation.calibrate_network import fit_machine, regime_templates
from validation.collective_logs import (
    EXCLUSION_RULES,
    CollectiveSample,
    drop_unhealthy,
    exclusions,
    is_nccl_tests,
    is_pccl_csv,
    read_nccl_tests,
    read_pccl_csv,
    read_vidur_samples,
)
from validation.kernel_terms import fit_gpu_terms
from validation.measured import MeasuredRun, iteration_time_s, load_run
from validation.simulate_run import simulate_torch4d
from validation.torch4d.config import RunSpec
from validation.trace.model import ParsedTrace
from validation.trace.reader import MAX_TRACE_FILE_BYTES
from workloads.ops import CollectiveKind

__all__ = [
    "CalibrationError",
    "CalibrationInputs",
    "LogOptions",
    "calibrate",
    "collect_inputs",
    "write_calibration",
]
TRACE_SUFFIXES = (".json", ".gz")


@dataclass
class CalibrationInputs:
    """Trace runs (files, run.json), Vidur benchmark CSVs, PCCL-shaped CSVs and
    nccl-tests / rccl-tests logs named on the command line."""

    runs: list[tuple[list[Path], Path | None]] = field(default_factory=list)
    benchmarks: list[Path] = field(default_factory=list)
    pccl: list[Path] = field(default_factory=list)
    nccl_tests: list[Path] = field(default_factory=list)


def collect_inputs(paths: Sequence[str | Path]) -> CalibrationInputs:
    """Sort inputs into runs (by directory) and benchmark CSVs; CalibrationError if none."""
    by_dir: dict[Path, list[Path]] = defaultdict(list)
    run_json: dict[Path, Path] = {}
    out = CalibrationInputs()
    for item in paths:
        p = Path(item)
        try:
            found = p.exists()
        except OSError as e:  # e.g. a name too long for the file system (found by the suite)
            raise CalibrationError(f"{str(p)[:200]}: {e.strerror or e}") from None
        if not found:
            raise CalibrationError(f"{p}: no such file or directory")
        # in a folder, hidden files are not inputs (the marker of an axsim output folder,
        # simulator/outputs/staging.py, is JSON but no trace)
        files = (
            sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith("."))
            if p.is_dir()
            else [p]
        )
        for f in files:
            _check_input_file(f)
            if f.name == "run.json":
                run_json[f.parent] = f
            elif f.suffix == ".csv":
                if is_pccl_csv(f):
                    out.pccl.append(f)
                elif is_vidur_csv(f):
                    out.benchmarks.append(f)
                else:
                    raise CalibrationError(
                        f"{f}: neither a Vidur collective benchmark CSV (time_stats. columns) "
                        "nor a PCCL-shaped CSV (machine, collective, library, gpus, nodes, "
                        "output_bytes, time_ms)"
                    )
            elif f.name.endswith(TRACE_SUFFIXES):
                by_dir[f.parent].append(f)
            elif is_nccl_tests(f):
                out.nccl_tests.append(f)
            elif not p.is_dir():
                raise CalibrationError(
                    f"{f}: neither a trace (.json, .json.gz), a benchmark CSV nor a nccl-tests log"
                )
    out.runs = [(files, run_json.get(d)) for d, files in sorted(by_dir.items())]
    if not (out.runs or out.benchmarks or out.pccl or out.nccl_tests):
        raise CalibrationError(
            f"{', '.join(map(str, paths)) or '(no input)'}: no traces, benchmark CSVs or "
            "nccl-tests logs found"
        )
    return out


def _check_input_file(f: Path) -> None:
    """An input is a regular file within its reader's bound (a FIFO blocked the reader,
    /dev/zero never ended): traces are streamed (validation/trace/reader.py), every other
    input is read whole (topologies/user_files.py)."""
    limit = MAX_TRACE_FILE_BYTES if f.name.endswith(TRACE_SUFFIXES) else MAX_USER_FILE_BYTES
    try:
        check_regular(f, limit)
    except OSError as e:
        raise CalibrationError(f"{f}: cannot read ({e.strerror or e})") from None


@dataclass
class _GpuEvidence:
    gemm: dict[GemmKey, list[float]] = field(default_factory=lambda: defaultdict(list))
    traces: list[ParsedTrace] = field(default_factory=list)
    host: list[HostStats] = field(default_factory=list)
    runs: list[MeasuredRun] = field(default_factory=list)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _host_rates(
    ev: _GpuEvidence, gemm: GemmTable | None, tables: list[CollectiveTable], notes: dict[str, Any]
) -> KernelRates:
    """Fitted CPU rates (see calibrate_host); the per-op overhead needs a known program."""
    rate = fit_gemm_rate(gemm) if gemm is not None else None
    mem = fit_memory(ev.host)
    attn = fit_attention_rate(ev.host, rate.overhead_s if rate else 0.0)
    rates = KernelRates(
        gemm_flops_per_s=rate.flops_per_s if rate else None,
        gemm_overhead_s=rate.overhead_s if rate else None,
        attention_flops_per_s=attn,
        memory_bandwidth_Bps=mem.bandwidth_Bps if mem else None,
        min_kernel_s=mem.fixed_s if mem else None,
        issue_compute_s=0.0,
        issue_collective_s=0.0,
    )
    notes["gemm_rate"] = rate.__dict__ if rate else "fewer than 2 GEMM shapes"
    notes["memory_bound"] = mem.__dict__ if mem else "fewer than 2 memory-bound op shapes"
    fits: list[dict[str, Any]] = []
    per_op: list[float] = []
    for run in ev.runs:
        measured = iteration_time_s(run)
        if run.spec is None or measured is None:
            continue
        spec = run.spec

        def simulated(overhead: float, spec: RunSpec = spec) -> float:
            r = rates.model_copy(update={"launch_overhead_s": overhead})
            g = GpuCalibration(gemm=gemm, collectives=tuple(tables), rates=r)
            return simulate_torch4d(spec, Calibration(gpus={"cpu": g})).iteration_s

        o, t0 = closure_overhead(measured, simulated)
        per_op.append(o)
        fits.append({"run": run.label, "measured_s": measured, "simulated_without_s": t0,
                     "per_op_s": o})  # fmt: skip
    if not fits:
        notes["launch_overhead"] = "not fitted: needs the traced program (a torch4d run.json)"
        return rates
    overhead = statistics.median(per_op)
    notes["launch_overhead"] = {
        "per_op_s": overhead, "runs": fits,
        "method": "the per-op overhead that makes the simulated traced program take the "
        "measured step time (median over runs)",
    }  # fmt: skip
    return rates.model_copy(update={"launch_overhead_s": overhead})


def _device_terms(
    gpu: str, ev: _GpuEvidence, notes: dict[str, Any]
) -> tuple[KernelRates | None, InterferenceFit | None]:
    """A GPU's kernel-model terms fitted on its traces (validation.kernel_terms)."""
    if gpu == "cpu" or not ev.traces:
        return None, None
    terms = fit_gpu_terms({gpu: ev.traces})[gpu]
    notes["kernel_terms"] = terms.notes()
    return terms.rates(), terms.interference()


def _gpu_calibration(
    gpu: str, ev: _GpuEvidence, tables: list[Any], statistic: Statistic, notes: dict[str, Any]
) -> GpuCalibration:
    stat = resolve_statistic(statistic, gpu)
    gemm = gemm_table(ev.gemm, stat) if ev.gemm else None
    notes["gemm"] = {
        "shapes": len(ev.gemm), "samples": sum(len(v) for v in ev.gemm.values()),
        "statistic": stat,
    }  # fmt: skip
    overlap = fit_overlap_slowdown(ev.traces) if ev.traces else None
    notes["overlap_slowdown"] = overlap.note if overlap else "no traces"
    rates = _host_rates(ev, gemm, tables, notes) if gpu == "cpu" and ev.host else None
    device_rates, interference = _device_terms(gpu, ev, notes)
    return GpuCalibration(
        gemm=gemm,
        collectives=tuple(tables),
        overlap_slowdown=overlap.slowdown if overlap else None,
        interference=interference,
        rates=rates or device_rates,
    )


@dataclass(frozen=True)
class LogOptions:
    """How to read collective benchmark logs: the machine of nccl-tests logs (and their
    ranks, nodes and collective where the log does not say), which rank counts the
    network model is fitted on (None: all), and the smallest message size kept."""

    machine: str | None = None
    ranks: int | None = None
    nodes: int | None = None
    op: CollectiveKind | None = None
    fit_ranks: tuple[int, ...] | None = None
    min_bytes: float = 0.0


def _log_samples(
    inputs: CalibrationInputs, opts: LogOptions, refs: list[TraceRef]
) -> tuple[list[CollectiveSample], list[CollectiveSample]]:
    """(samples for the network fit only: PCCL rows, and with --machine Vidur's, whose
    tables come from their own reader; nccl-tests samples, fitted and tabulated), with
    the PCCL and nccl-tests file references."""
    pccl: list[CollectiveSample] = []
    tests: list[CollectiveSample] = []
    for path in inputs.pccl:
        found = read_pccl_csv(path)
        if opts.machine is not None:
            found = [x for x in found if x.machine == opts.machine]
            if not found:
                raise CalibrationError(f"{path}: no rows of machine {opts.machine}")
        pccl += found
        refs.append(TraceRef(path=str(path), sha256=_sha256(path), samples=len(found)))
    if opts.machine is not None:  # Vidur's benchmarks also feed the machine's network fit
        for path in inputs.benchmarks:
            pccl += read_vidur_samples(path, opts.machine)
    for path in inputs.nccl_tests:
        if opts.machine is None:
            raise CalibrationError(f"{path}: a nccl-tests log needs --machine (a preset)")
        found = read_nccl_tests(path, opts.machine, opts.ranks, opts.nodes, opts.op)
        tests += found
        refs.append(TraceRef(path=str(path), sha256=_sha256(path), samples=len(found)))
    return pccl, tests


def _network_blocks(
    samples: list[CollectiveSample], opts: LogOptions, notes: dict[str, Any]
) -> dict[str, Any]:
    """Per GPU type, the collective-library terms fitted on each machine's samples (after
    the documented exclusions of collective_logs.EXCLUSION_RULES, keeping `fit_ranks` and
    sizes >= `min_bytes`), with the per-step stalls of the preset's measured regimes."""
    kept, excluded = exclusions(samples)
    out: dict[str, Any] = {}
    for machine in sorted({s.machine for s in kept}):
        mine = [
            s for s in kept
            if s.machine == machine and s.nbytes >= opts.min_bytes
            and (opts.fit_ranks is None or s.ranks in opts.fit_ranks)
        ]  # fmt: skip
        if not mine:
            raise CalibrationError(f"{machine}: no samples left to fit (check --ranks)")
        ranks = sorted({s.ranks for s in mine})
        info = {
            "machine": machine,
            "ranks": ranks,
            "min_bytes": opts.min_bytes,
            "samples_by_build": dict(sorted(Counter(s.build or "-" for s in mine).items())),
            "excluded": {
                rule: sum(1 for s in rows if s.machine == machine)
                for rule, rows in excluded.items()
            },
            "exclusion_rules": EXCLUSION_RULES,
        }
        source = (
            f"axsim calibrate on {len(mine)} measured {machine} collectives at "
            f"{', '.join(map(str, ranks))} ranks"
        )
        gpu, spec = fit_machine(machine, mine, source, info, regime_templates(machine))
        if gpu in out:
            raise CalibrationError(f"two machines with GPU {gpu}: calibrate them separately")
        out[gpu] = spec
        notes[f"network/{machine}"] = info
    return out


def _test_sweeps(samples: list[CollectiveSample]) -> list[Sweep]:
    """nccl-tests samples as benchmark sweeps (piecewise tables of the exact group)."""
    per: dict[tuple[str, str, str, int], Sweep] = {}
    kept, _ = drop_unhealthy(samples)
    for s in kept:
        gpu = machine_preset(s.machine).gpu
        key = (gpu, s.kind.value, "intra_node" if s.nodes == 1 else "inter_node", s.ranks)
        sweep = per.setdefault(
            key, Sweep(key, sources=[s.job], method="nccl-tests out-of-place", benchmark=True)
        )
        sweep.sizes[int(s.nbytes)] = [s.time_s]
    return list(per.values())


def calibrate(
    paths: Sequence[str | Path],
    *,
    gpu: str | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
    statistic: Statistic = "auto",
    gpus_per_node: int | None = None,
    host_terms: bool = True,
    logs: LogOptions | None = None,
) -> Calibration:
    """Fit a Calibration from traces, benchmark CSVs and collective logs (see module doc);
    `host_terms` adds the host overhead and arrival jitter of gloo runs to their
    collective tables."""
    inputs = collect_inputs(paths)
    opts = logs or LogOptions()
    sweeps: list[Sweep] = []
    evidence: dict[str, _GpuEvidence] = defaultdict(_GpuEvidence)
    refs: list[TraceRef] = []
    for csv_path in inputs.benchmarks:
        found = read_vidur_csv(csv_path, gpu)
        sweeps += found
        samples = sum(len(s.sizes) for s in found)
        refs.append(TraceRef(path=str(csv_path), sha256=_sha256(csv_path), samples=samples))
    for files, run_json in inputs.runs:
        run = load_run(files, run_json, gpu)
        for trace in run.traces.values():  # the impossible is refused, not fitted
            check_streams(trace)
        ev = evidence[run.gpu]
        ev.runs.append(run)
        ev.traces += list(run.traces.values())
        gemms = gemm_samples(run.traces.values())
        check_gemm_rates(run.gpu, gemms, ", ".join(str(f) for f in files[:1]))
        for key, values in gemms.items():
            ev.gemm[key] += values
        overhead, gloo = 0.0, host_terms and run.backend == "gloo"
        if run.gpu == "cpu":
            stats = [host_stats(t.info.path) for t in run.traces.values()]
            ev.host += stats
            if gloo:
                overhead = gloo_host_overhead(run, stats)
        sweeps += trace_sweeps(run, gpus_per_node, overhead, arrival_wait=gloo)
        for t in run.traces.values():
            refs.append(TraceRef.model_validate({
                "path": t.info.path, "sha256": _sha256(Path(t.info.path)),
                "samples": len(t.timeline), "rank": t.info.rank,
            }))  # fmt: skip
        if run_json is not None:
            refs.append(TraceRef(path=str(run_json), sha256=_sha256(run_json)))
    pccl, tests = _log_samples(inputs, opts, refs)
    sweeps += _test_sweeps(tests)
    tables, residuals = build_tables(merge_sweeps(sweeps), tolerance, statistic)
    for name, found_tables in tables.items():
        check_collective_tables(name, found_tables)
    notes: dict[str, Any] = {}
    networks = _network_blocks(pccl + tests, opts, notes) if pccl or tests else {}
    gpus: dict[str, GpuCalibration] = {}
    for name in sorted(set(tables) | set(evidence) | set(networks)):
        gpu_notes: dict[str, Any] = {}
        cal = _gpu_calibration(name, evidence.get(name, _GpuEvidence()), tables.get(name, []),
                               statistic, gpu_notes)  # fmt: skip
        if name in networks:
            cal = cal.model_copy(update={"network": networks[name]})
        if cal.collectives or cal.gemm is not None or cal.network is not None:
            gpus[name] = cal
            notes[name] = gpu_notes
    if not gpus:
        raise CalibrationError(
            f"{', '.join(map(str, paths))}: nothing usable (no collectives with sizes, no "
            f"GEMMs with shapes)"
        )
    provenance = Provenance.model_validate(
        {
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "tool": "axsim calibrate",
            "traces": refs,
            "residuals": {"collectives": residuals, "tolerance": tolerance, "statistic": statistic},
            "notes": "; ".join(f"{g}: {n.get('overlap_slowdown', '')}" for g, n in notes.items()),
            "fits": notes,
        }
    )
    return Calibration(provenance=provenance, gpus=gpus)


def write_calibration(cal: Calibration, path: str | Path) -> Path:
    """Write the calibration (YAML, or JSON for a .json name); returns the path."""
    save_calibration(cal, path)
    return Path(path)
