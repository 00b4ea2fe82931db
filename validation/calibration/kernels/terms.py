"""The kernel model's terms fitted from GPU traces, per GPU type and pooled across GPUs.

`fit_gpu_terms(traces_by_gpu)` runs the fits of validation.calibration.kernels.fits on every GPU
type's traces: what a trace shows about its own GPU becomes that GPU's calibration
(`KernelRates`: GEMM peak and fixed time, memory bandwidth, fixed kernel time, launch gap,
host issue, attention rate; `InterferenceFit`). `transfer_for(gpu, terms)` carries the
GPU-independent forms of the same terms (bandwidth as a fraction of the HBM spec,
attention as a fraction of the GEMM peak, microseconds of fixed time and gap, stretch
factors) from other GPU types to one no trace of its own has measured: from its silicon,
else its vendor, else any GPU. That is the leave-one-trace-out check's calibration, and
what the defaults of kernel_defaults.yaml cite.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from simulator.cost.calibration import InterferenceFit, KernelRates
from simulator.cost.kernel_params import KernelParams
from simulator.cost.kernels import KernelModel
from topologies.hardware import gpu_spec
from validation.calibration.kernels.evidence import (
    KernelSample,
    WorkUnit,
    kernel_samples,
    work_units,
)
from validation.calibration.kernels.fits import (
    TermFit,
    fit_attention_rate,
    fit_gemm_fixed,
    fit_gemm_peak,
    fit_interference,
    fit_issue,
    fit_launch_gap,
    fit_memory_bandwidth,
    fit_min_kernel,
)
from validation.trace.model import ParsedTrace


@dataclass
class GpuEvidence:
    """Kernel samples and work units of one GPU type's traces."""

    gpu: str
    samples: list[KernelSample] = field(default_factory=list)
    units: list[WorkUnit] = field(default_factory=list)

    def add(self, trace: ParsedTrace) -> None:
        steps = None if trace.iterations else {-1}
        found = kernel_samples(trace, steps)
        if not found and trace.iterations:  # a toy whose later steps are empty
            found = kernel_samples(trace, {it.step for it in trace.iterations})
        self.samples += found
        self.units += work_units(found)


@dataclass(frozen=True)
class GpuTerms:
    """What the traces of one GPU type say, term by term (None: not enough evidence)."""

    gpu: str
    min_kernel: TermFit | None
    memory_bandwidth: TermFit | None
    gemm_peak: TermFit | None
    gemm_fixed: TermFit | None
    attention_rate: TermFit | None
    launch_gap: TermFit | None
    issue: TermFit | None
    interference_compute: TermFit | None
    interference_memory: TermFit | None

    def rates(self) -> KernelRates | None:
        """The calibration's rates for this GPU (None when nothing was fitted)."""
        values = {
            "gemm_peak_flops": self.gemm_peak,
            "gemm_overhead_s": self.gemm_fixed,
            "memory_bandwidth_Bps": self.memory_bandwidth,
            "min_kernel_s": self.min_kernel,
            "attention_flops_per_s": self.attention_rate,
            "launch_overhead_s": self.launch_gap,
            "issue_compute_s": self.issue,
        }
        kept = {k: v.value for k, v in values.items() if v is not None}
        return KernelRates(**kept) if kept else None

    def interference(self) -> InterferenceFit | None:
        c, m = self.interference_compute, self.interference_memory
        if c is None and m is None:
            return None
        return InterferenceFit(compute=c.value if c else None, memory=m.value if m else None)

    def notes(self) -> dict[str, str]:
        """Per term: the fit's note, or why it was left to the preset."""
        out = {}
        for f in dataclasses.fields(self):
            if f.name == "gpu":
                continue
            fit = getattr(self, f.name)
            out[f.name] = fit.note if fit is not None else "not enough evidence (preset kept)"
        return out

    def relative(self) -> dict[str, float]:
        """The terms in GPU-independent form (see `RELATIVE`), where fitted."""
        spec = gpu_spec(self.gpu)
        peak = self.gemm_peak.value if self.gemm_peak else KernelModel(self.gpu).gemm_peak_flops
        forms: dict[str, tuple[TermFit | None, float]] = {
            "gemm_peak_fraction": (self.gemm_peak, spec.peak_flops),
            "gemm_fixed_s": (self.gemm_fixed, 1.0),
            "hbm_efficiency": (self.memory_bandwidth, spec.hbm_bandwidth_Bps),
            "min_kernel_s": (self.min_kernel, 1.0),
            "launch_overhead_s": (self.launch_gap, 1.0),
            "attention_fraction": (self.attention_rate, peak),
            "interference_compute": (self.interference_compute, 1.0),
            "interference_memory": (self.interference_memory, 1.0),
        }
        return {k: fit.value / unit for k, (fit, unit) in forms.items() if fit is not None}


RELATIVE = (
    "gemm_peak_fraction", "gemm_fixed_s", "hbm_efficiency", "min_kernel_s",
    "launch_overhead_s", "attention_fraction", "interference_compute", "interference_memory",
)  # fmt: skip
"""GPU-independent forms of the terms: fractions of the GPU's advertised peak, HBM spec
and GEMM peak, seconds of fixed time and gap, stretch factors."""
SILICON_ONLY = frozenset({"gemm_peak_fraction", "gemm_fixed_s"})
"""Terms that carry over only to the same silicon: a GEMM's fraction of the advertised
peak and its fixed time are properties of the die, its clocks, its power limit and the
library's kernels for it (other GPUs keep the preset's, which rest on profiles of their
own silicon)."""


def gpu_terms(ev: GpuEvidence) -> GpuTerms:
    """Fit every term on one GPU type's evidence (presets where evidence is missing)."""
    model = KernelModel(ev.gpu)
    fixed = fit_min_kernel(ev.units)
    bw = fit_memory_bandwidth(
        ev.units, fixed.value if fixed else model.min_kernel_s, model.spec.hbm_bandwidth_Bps
    )
    compute, memory = fit_interference(ev.samples)
    gemm_fixed = fit_gemm_fixed(ev.units, model)
    attention_fixed = gemm_fixed.value if gemm_fixed else model.gemm_fixed_s
    return GpuTerms(
        gpu=ev.gpu,
        min_kernel=fixed,
        memory_bandwidth=bw,
        gemm_peak=fit_gemm_peak(ev.units, model),
        gemm_fixed=gemm_fixed,
        attention_rate=fit_attention_rate(ev.units, attention_fixed),
        launch_gap=fit_launch_gap(ev.samples),
        issue=fit_issue(ev.samples),
        interference_compute=compute,
        interference_memory=memory,
    )


@dataclass(frozen=True)
class Transfer:
    """The terms for one GPU taken from other GPUs' traces, each from the nearest level
    that has the evidence: the same silicon, then the same vendor (runtime and profiler:
    ROCm's kernel timestamps abut, CUDA's leave a launch gap), then any GPU (the median
    over the GPU types of that level). `values` holds the GPU-independent forms of
    `RELATIVE`; `sources` the GPU types each value rests on."""

    gpu: str = ""
    values: Mapping[str, float] = field(default_factory=dict)
    sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def apply(self, params: KernelParams) -> KernelParams:
        """The preset's constants with every transferred term replacing its own."""
        v = self.values
        up: dict[str, object] = {
            k: v[k]
            for k in (
                "hbm_efficiency", "min_kernel_s", "launch_overhead_s", "interference_compute",
                "interference_memory", "gemm_peak_fraction",
            )
            if k in v
        }  # fmt: skip
        if "gemm_fixed_s" in v:
            up["gemm_fixed_s"] = v["gemm_fixed_s"]
        if "attention_fraction" in v:
            up["attention_fwd_fraction"] = up["attention_bwd_fraction"] = v["attention_fraction"]
        if "gemm_peak_fraction" in v:
            up["gemm_peak_rule"] = "fitted on traces of the same silicon: " + ", ".join(
                self.sources.get("gemm_peak_fraction", ())
            )
        return dataclasses.replace(params, **up)  # type: ignore[arg-type]


def transfer_for(gpu: str, terms: Mapping[str, GpuTerms]) -> Transfer:
    """Each RELATIVE term for `gpu` from the nearest level of other GPU types with evidence
    (same silicon, same vendor, any; `gpu`'s own fits are its calibration, not a transfer)."""
    spec = gpu_spec(gpu)
    others = {g: t.relative() for g, t in terms.items() if g != gpu}
    levels = (
        [g for g in others if gpu_spec(g).silicon == spec.silicon],
        [g for g in others if gpu_spec(g).vendor == spec.vendor],
        list(others),
    )
    values: dict[str, float] = {}
    sources: dict[str, tuple[str, ...]] = {}
    for key in RELATIVE:
        for depth, level in enumerate(levels):
            if key in SILICON_ONLY and depth > 0:
                break
            found = sorted((g, others[g][key]) for g in level if key in others[g])
            if found:
                values[key] = float(statistics.median(v for _, v in found))
                sources[key] = tuple(g for g, _ in found)
                break
    return Transfer(gpu, values, sources)


def fit_gpu_terms(traces: Mapping[str, Sequence[ParsedTrace]]) -> dict[str, GpuTerms]:
    """Per GPU type (CPU hosts excepted) the terms its traces support."""
    terms: dict[str, GpuTerms] = {}
    for gpu, ts in traces.items():
        if gpu == "cpu":
            continue
        ev = GpuEvidence(gpu)
        for t in ts:
            ev.add(t)
        terms[gpu] = gpu_terms(ev)
    return terms
