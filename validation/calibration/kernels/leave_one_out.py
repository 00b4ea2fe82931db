"""Leave one trace out: calibrate the kernel model on the other traces, predict this one.

For every case (one run: a trace file, or a directory of one run's rank traces) the
kernel model is built for the case's GPU from the presets and the terms fitted on all
*other* cases (validation.calibration.kernels.terms): the case's GPU type's own fits where other traces
of that type exist, else the terms pooled over the other GPU types (`Transfer`). A preset
that was itself fitted on the held-out trace (a silicon profile naming it) is replaced by
the next branch of the GEMM-peak rule. The model then prices the case's own work, unit by
unit (the kernels of one CPU op: GEMM shape, attention FLOPs, bytes moved), exactly as the
simulator prices a workload's ops, and the totals are compared per row:

- gemm, attention, elementwise (norms, activations, residuals, copies, casts), optimizer:
  the kernels' busy time, over the units whose work the trace records;
- launch_gaps: the idle gaps between back-to-back kernels the host had already issued;
- comm_overlapped: the busy time of compute kernels while a collective of the same rank
  was in flight (predicted: the overlapped part of each unit, stretched by the
  interference factor of its class);
- compute: the sum of the above (the step's compute time).

`coverage` is the share of the case's measured kernel time whose work is known: kernels
a trace cannot size (no `record_shapes`, torch.compile graphs, fbgemm lookups) can be
predicted by no model and are left out of both sides.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from simulator.cost.calibration import Calibration, GpuCalibration
from simulator.cost.kernel_params import kernel_params, raw_defaults, resolve_gemm_peak
from simulator.cost.kernels import KernelModel
from simulator.cost.terms import Interference
from topologies.hardware import gpu_spec
from validation.calibration.kernels.evidence import KernelSample, WorkUnit, launch_gaps
from validation.calibration.kernels.terms import (
    GpuEvidence,
    GpuTerms,
    fit_gpu_terms,
    gpu_terms,
    transfer_for,
)
from validation.errors import TraceError
from validation.runs.measured import catalogue_gpu
from validation.trace import parse_trace
from validation.trace.model import ParsedTrace
from workloads.ops import ComputeKind, ComputeOp

ROWS = ("gemm", "attention", "elementwise", "optimizer", "launch_gaps", "comm_overlapped")
KIND_ROWS = ("gemm", "attention", "elementwise", "optimizer")
TOLERANCE = 0.10
_KIND = {
    "gemm": ComputeKind.GEMM,
    "attention": ComputeKind.ATTENTION,
    "elementwise": ComputeKind.ELEMENTWISE,
    "optimizer": ComputeKind.OPTIMIZER,
    "memcpy": ComputeKind.MEMCPY,
}


@dataclass
class TraceCase:
    """One run's traces on one GPU type, with the evidence they hold."""

    label: str
    gpu: str
    traces: list[ParsedTrace]
    evidence: GpuEvidence = field(init=False)

    def __post_init__(self) -> None:
        self.evidence = GpuEvidence(self.gpu)
        for t in self.traces:
            self.evidence.add(t)

    @property
    def files(self) -> list[str]:
        return [t.info.path for t in self.traces]


def load_case(path: str | Path, gpu: str | None = None) -> TraceCase:
    """A trace file, or a directory holding the rank traces of one run (TraceError if the
    GPU is not in the catalogue and `gpu` does not say)."""
    p = Path(path)
    files = (
        sorted(f for f in p.iterdir() if f.name.endswith((".json", ".gz"))) if p.is_dir() else [p]
    )
    if not files:
        raise TraceError(f"{p}: no traces (.json, .json.gz)")
    traces = [parse_trace(f) for f in files]
    if gpu is None:
        found = {
            catalogue_gpu(t.info.gpu, t.info.vendor, t.info.sm_count, t.info.memory_bytes)
            for t in traces
        }
        if None in found or len(found) != 1:
            raise TraceError(
                f"{p}: device '{traces[0].info.gpu}' is not one GPU of the catalogue (give --gpu)"
            )
        gpu = found.pop()
    assert gpu is not None
    return TraceCase(p.name.removesuffix(".json.gz").removesuffix(".json"), gpu, traces)


# ----------------------------------------------------------------- the model for a case
def _fitted(cases: Sequence[TraceCase]) -> dict[str, GpuTerms]:
    by_gpu: dict[str, list[ParsedTrace]] = defaultdict(list)
    for c in cases:
        by_gpu[c.gpu] += c.traces
    return fit_gpu_terms(by_gpu)


def _peak_without(gpu: str, held_out: Sequence[str]) -> tuple[float, str] | None:
    """The GEMM-peak rule's answer when the preset's silicon profile was fitted on a
    held-out trace (its `source_trace` names the file; a trimmed copy of it counts): the
    rule re-run without that profile. None when the preset does not rest on them."""
    raw = dict(raw_defaults(None))
    silicon = dict(raw.get("silicon") or {})
    own = silicon.get(gpu_spec(gpu).silicon) or {}
    source = str(own.get("source_trace") or "")
    stem = source.removesuffix(".gz").removesuffix(".json")
    if not stem or not any(Path(f).name.startswith(stem) for f in held_out):
        return None
    silicon.pop(gpu_spec(gpu).silicon)
    raw["silicon"] = silicon
    vendor = float(raw["vendors"][gpu_spec(gpu).vendor]["gemm_peak_fraction"])
    return resolve_gemm_peak(gpu_spec(gpu), raw, vendor)


def model_for(gpu: str, terms: dict[str, GpuTerms], held_out: Sequence[str] = ()) -> KernelModel:
    """The kernel model of `gpu` calibrated on `terms`: its own fitted rates where it has
    them, the terms transferred from other GPUs (validation.calibration.kernels.terms.transfer_for) for
    the rest, the presets for what no trace measures."""
    params = kernel_params(gpu_spec(gpu))
    peak = _peak_without(gpu, held_out)
    if peak is not None:
        params = dataclasses.replace(params, gemm_peak_fraction=peak[0], gemm_peak_rule=peak[1])
    params = transfer_for(gpu, terms).apply(params)
    own = terms.get(gpu)
    cal = None
    if own is not None:
        g = GpuCalibration(rates=own.rates(), interference=own.interference())
        cal = Calibration(gpus={gpu: g})
    return KernelModel(gpu, calibration=cal, params=params)


# ----------------------------------------------------------------- pricing a case
def _op(u: WorkUnit) -> ComputeOp:
    kind = _KIND[u.kind]
    phase = "bwd" if "backward" in u.op.lower() else "fwd"
    if kind is ComputeKind.GEMM and u.shape is not None:
        m, n, k, b = u.shape
        nbytes = float(u.dtype_bytes * (m * k + k * n + m * n) * b)
        shape: tuple[int, ...] = (m, n, k) if b == 1 else (m, n, k, b)
        return ComputeOp(u.op, kind, u.flops, nbytes, shape=shape, dtype_bytes=u.dtype_bytes)
    return ComputeOp(u.op, kind, u.flops, float(u.traffic or 0.0), phase=phase)


def _unit_time(model: KernelModel, u: WorkUnit) -> float:
    """The unit's kernels as the simulator prices them: one op, plus the fixed time of
    each further kernel it took."""
    op = _op(u)
    fixed = model.gemm_fixed_s if u.kind in ("gemm", "attention") else model.min_kernel_s
    return model.kernel_time_s(op) + (u.kernels - 1) * fixed


def measured_rows(samples: Sequence[KernelSample], units: Sequence[WorkUnit]) -> dict[str, float]:
    """Seconds per row (see module doc) over the units whose work is known."""
    rows = dict.fromkeys(ROWS, 0.0)
    for u in units:
        if u.known and u.kind in KIND_ROWS:
            rows[u.kind] += u.time_s
            rows["comm_overlapped"] += u.overlap_s
    rows["launch_gaps"] = sum(launch_gaps(samples))
    rows["compute"] = sum(rows[k] for k in KIND_ROWS) + rows["launch_gaps"]
    return rows


def predicted_rows(
    model: KernelModel, samples: Sequence[KernelSample], units: Sequence[WorkUnit]
) -> dict[str, float]:
    """The kernel model's seconds per row for the same units (see module doc)."""
    rows = dict.fromkeys(ROWS, 0.0)
    factors = model.interference or Interference()
    stretch = 0.0
    for u in units:
        if not (u.known and u.kind in KIND_ROWS):
            continue
        t = _unit_time(model, u)
        f = u.overlap_s / u.time_s if u.time_s > 0 else 0.0
        over = f * t * factors.factor(_KIND[u.kind])
        rows[u.kind] += t
        rows["comm_overlapped"] += over
        stretch += over - f * t
    rows["launch_gaps"] = len(launch_gaps(samples)) * model.launch_overhead_s
    rows["compute"] = sum(rows[k] for k in KIND_ROWS) + rows["launch_gaps"] + stretch
    return rows


def coverage(units: Sequence[WorkUnit]) -> float:
    """Share of the measured kernel time (GEMM, attention, element-wise, optimizer) whose
    work the trace records."""
    total = sum(u.time_s for u in units if u.kind in KIND_ROWS)
    known = sum(u.time_s for u in units if u.kind in KIND_ROWS and u.known)
    return known / total if total > 0 else 0.0


@dataclass(frozen=True)
class LooRow:
    """One held-out case: measured and predicted seconds per row, and what it rests on."""

    label: str
    gpu: str
    measured: dict[str, float]
    predicted: dict[str, float]
    coverage: float
    own_gpu_evidence: bool
    gemm_peak_rule: str

    def error(self, row: str) -> float | None:
        """predicted / measured - 1, None where the case has (almost) none of the row."""
        m = self.measured.get(row, 0.0)
        total = self.measured.get("compute", 0.0)
        if m <= 0 or (row != "compute" and m < 0.01 * total):
            return None
        return self.predicted.get(row, 0.0) / m - 1.0

    def within(self, tolerance: float = TOLERANCE) -> bool:
        errors = [e for r in (*ROWS, "compute") if (e := self.error(r)) is not None]
        return all(abs(e) <= tolerance for e in errors)


def leave_one_out(cases: Sequence[TraceCase]) -> list[LooRow]:
    """Each case predicted by the model calibrated on all the others."""
    out = []
    for i, case in enumerate(cases):
        others = [c for j, c in enumerate(cases) if j != i]
        terms = _fitted(others)
        model = model_for(case.gpu, terms, case.files)
        ev = case.evidence
        out.append(
            LooRow(
                case.label, case.gpu, measured_rows(ev.samples, ev.units),
                predicted_rows(model, ev.samples, ev.units), coverage(ev.units),
                case.gpu in terms, model.params.gemm_peak_rule if model.rates.gemm_peak_flops
                is None else "fitted on the other traces of this GPU",
            )
        )  # fmt: skip
    return out


def self_check(case: TraceCase) -> dict[str, float]:
    """The case predicted by a model calibrated on itself (the fits' own residual)."""
    terms = {case.gpu: gpu_terms(case.evidence)}
    model = model_for(case.gpu, terms)
    return predicted_rows(model, case.evidence.samples, case.evidence.units)
