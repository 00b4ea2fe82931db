"""Fitting a machine's collective-library terms to measured collectives.

The model is the one the simulator prices an isolated collective with (NCCL's tuning
model, simulator/network/protocols.py), written per sample as

    t = launch [+ inter-node base] + min over (algorithm, protocol p) of
        base_p + sum over phases [k (far + b_p) + (steps - k) (near + a_p)]
               + sum over phases bytes_factor x S / (rate(eff) x eta_p)

where the phases, their step counts (k of them crossing nodes), route latencies and the
per-link-kind rate limits come from binding the algorithm on the machine's topology
(`LayoutTerms`), rate(eff) = min over link kinds of eff_kind x (raw rate limit of that
kind), a_p is the node-local step latency (in a phase that crosses nodes at least the
proxy's per-step floor c_p: NCCL's max(intraLat, netOverhead)) and the free parameters
are: the launch overhead (only with single-node samples: multi-node ones cannot tell it
from) the base every node-crossing collective pays (only with samples at two node counts
or more); per enabled protocol the step latency inside a node a_p (only with
single-node samples) and the per-hop network latency b_p (only with multi-node samples)
and, for protocols other than Simple, the bandwidth factor eta_p; the efficiency of each
link kind that limits some sample (the NICs across nodes, the GPU links inside one); and
the per-step stall of the library build's measured regime (simulator/network/regimes.py)
where the samples include its window (the protocol is chosen without it, as the
library's tuner does, and the stall paid on every step).

Where every sample has the same GPUs per node k (the PCCL rows: 8 on Frontier, 4 on
Perlmutter) a multi-node ring only tells b_p + (k - 1) x max(a_p, c_p) per node, not how
it splits into the per-hop network term and the per-step proxy floor that a ring with one
member per node does not pay. The fit keeps the library's own split: c_p = b_p x (the
table's netOverhead / its hwLat[NET]) (RCCL's Frontier table: 6 / 19.8 for Simple, 2 /
9.5 for LL; NCCL 2.15: 6 / 9.6, 2 / 2.7 on AMD hosts), so one measured scale per protocol
sets both. Protocols' base latencies stay the library's table values, and a parameter no
sample can inform keeps its prior.

The fit minimises a robust (soft-L1, scale 0.2) sum of log-time residuals with a
Levenberg-Marquardt iteration on log / logit parameters (positivity and the (0, 1] bounds
by construction), from a few starting points; numpy only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from simulator.benchmarks.collectives import per_node_instances
from simulator.errors import CostModelError
from simulator.network.params import (
    NetworkParams,
    default_network_params,
    intra_row_of,
    network_params_for,
)
from simulator.network.pricing import CollectivePricer
from simulator.network.protocols import (
    CollectiveModel,
    CollectiveModelSpec,
    ProtocolTerms,
    host_proxy_step_s,
    spec_from_model,
)
from simulator.network.regimes import Regime, RegimeSpec
from simulator.network.schedules import candidate_algorithms
from topologies.catalogue import machine_preset
from topologies.hardware import gpu_catalogue
from topologies.machines import build_machine
from topologies.types import LINK_KINDS
from validation.calibration.benchmark_logs import CollectiveSample
from validation.calibration.collectives import CalibrationError
from workloads.ops import CollectiveKind

SOFT_L1_SCALE = 0.2
MIN_LATENCY_S = 1e-9


@dataclass(frozen=True)
class PhaseTerms:
    """One bound phase, protocol- and efficiency-free."""

    bytes_factor: float
    steps: int
    crossing: int
    near_s: float
    far_s: float
    rate_by_kind: dict[str, float]  # raw per-flow rate limit of each link kind it uses
    inter: bool = False  # some flow leaves its node
    chunk_factor: float = 0.0  # per-member step message / S


@dataclass(frozen=True)
class LayoutTerms:
    """One algorithm of one measured layout (machine, collective, ranks, nodes)."""

    algorithm: str
    inter: bool
    phases: tuple[PhaseTerms, ...]


def layout_terms(machine: str, kind: CollectiveKind, ranks: int, nodes: int) -> list[LayoutTerms]:
    """Every candidate algorithm of a group of `ranks` GPUs spread evenly over `nodes`
    nodes of `machine`, bound on its topology at raw link speed."""
    topo = build_machine(machine, nodes)
    per = ranks // nodes
    if per > topo.gpus_per_node:
        raise CalibrationError(
            f"{machine}: {ranks} ranks on {nodes} nodes exceed its {topo.gpus_per_node} GPUs per node"
        )
    members = per_node_instances(topo.num_gpus, topo.gpus_per_node, ranks, per, "one")
    pricer = CollectivePricer(topo, NetworkParams.ideal())
    raw = topo.links.bandwidth_Bps
    kinds = topo.links.kind
    out = []
    for algo in candidate_algorithms(kind, pricer.layout(members[0])):
        try:
            (bundle,) = pricer.bind(kind, members, algo)
        except CostModelError:
            continue
        phases = []
        for ph in bundle.phases:
            used = ph.counts > 0  # adaptive mixtures may leave some listed links unused
            per_link = raw[ph.links[used]] / ph.counts[used]
            link_kinds = kinds[ph.links[used]]
            by_kind: dict[str, float] = {}
            for code in np.unique(link_kinds).tolist():
                sel = link_kinds == code
                by_kind[LINK_KINDS[code].value] = float(per_link[sel].min())
            phases.append(
                PhaseTerms(
                    ph.bytes_factor,
                    ph.steps,
                    ph.inter_steps,
                    ph.near_s,
                    ph.far_s,
                    by_kind,
                    ph.inter,
                    ph.chunk_factor,
                )
            )
        out.append(LayoutTerms(algo, bundle.tier == "inter_node", tuple(phases)))
    return out


def prior_params(machine: str) -> NetworkParams:
    """Where a fit starts and what it cannot inform keeps: the GPU vendor's library table
    and the default link efficiencies, with only the preset's enabled protocols (a
    property of the library build, not a fit) taken from the machine; never the preset's
    fitted terms, so re-fitting does not depend on the last fit."""
    topo = build_machine(machine, 1)
    vendor = gpu_catalogue()[topo.gpu_type].vendor
    base = default_network_params(
        vendor if vendor in ("nvidia", "amd", "cpu") else "nvidia",
        intra_row_of(topo),
        str(topo.metadata.get("node_type") or ""),
    )
    enabled = network_params_for(topo).collectives
    model = replace(
        base.collectives,
        enabled_intra=enabled.enabled_intra,
        enabled_inter=enabled.enabled_inter,
        library=enabled.library,
    )
    host = machine_preset(machine).collectives.get("host_net_overhead_us")
    if host is not None:  # the host CPU's network post overhead (not a fit)
        terms = {
            n: replace(t, proxy_step_s=host_proxy_step_s(n, float(host)))
            for n, t in model.terms.items()
        }
        model = replace(model, terms=terms)
    return replace(base, collectives=model)


@dataclass
class _Group:
    """Samples sharing a layout and a library build: sizes, times, the layout's algorithms."""

    terms: list[LayoutTerms]
    nbytes: np.ndarray
    time_s: np.ndarray
    index: np.ndarray  # positions in the sample list
    build: str = ""  # the library build the samples were measured with ("": the preset's)


@dataclass
class Parameters:
    """The vector the optimiser moves, and how it maps onto model terms."""

    names: list[str] = field(default_factory=list)
    x0: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)  # "log" or "logit"

    def add(self, name: str, value: float, kind: str) -> None:
        self.names.append(name)
        self.kinds.append(kind)
        if kind == "log":
            self.x0.append(math.log(max(value, MIN_LATENCY_S)))
        else:
            v = min(max(value, 1e-6), 1 - 1e-6)
            self.x0.append(math.log(v / (1 - v)))

    def values(self, x: np.ndarray) -> dict[str, float]:
        out = {}
        for name, kind, v in zip(self.names, self.kinds, x.tolist(), strict=True):
            # clipped exp and a tanh logistic: no overflow on a runaway direction
            logistic = min(max(0.5 * (1 + math.tanh(v / 2)), 1e-9), 1.0)
            out[name] = math.exp(min(v, 50.0)) if kind == "log" else logistic
        return out


def regime_templates(machine: str) -> tuple[Regime, ...]:
    """The machine's measured regimes as its preset declares them (window, protocol,
    builds); a fit determines their per-step stalls."""
    raw = machine_preset(machine).collectives.get("regimes") or ()
    return tuple(Regime.from_spec(RegimeSpec.model_validate(r)) for r in raw)


class NetworkFit:
    """The model of `validation.calibration.network` over a set of samples of one machine.

    `regimes`: measured regimes whose per-step stalls are fitted too (window, protocol and
    builds as given), each where samples of its builds fall in its window."""

    def __init__(
        self,
        machine: str,
        samples: Sequence[CollectiveSample],
        regimes: Sequence[Regime] = (),
    ) -> None:
        if not samples:
            raise CalibrationError(f"{machine}: no samples to fit")
        self.machine = machine
        self.prior = prior_params(machine)
        self.samples = list(samples)
        self.regimes = tuple(regimes)
        groups: dict[tuple[CollectiveKind, int, int, str], list[int]] = defaultdict(list)
        for i, s in enumerate(self.samples):
            groups[(s.kind, s.ranks, s.nodes, s.build)].append(i)
        terms = {k[:3]: layout_terms(machine, *k[:3]) for k in groups}
        self.groups = [
            _Group(
                terms[(kind, ranks, nodes)],
                np.array([self.samples[i].nbytes for i in idx]),
                np.array([self.samples[i].time_s for i in idx]),
                np.array(idx),
                build,
            )
            for (kind, ranks, nodes, build), idx in groups.items()
        ]
        self.params = self._parameters()

    def _parameters(self) -> Parameters:
        model = self.prior.collectives
        intra = any(not t.inter for g in self.groups for t in g.terms[:1])
        inter = any(t.inter for g in self.groups for t in g.terms[:1])
        p = Parameters()
        if intra:  # single-node samples tell the launch; multi-node ones only launch + base
            p.add("launch", max(model.launch_overhead_s, 1e-6), "log")
        if len({s.nodes for s in self.samples if s.nodes > 1}) >= 2:
            # one multi-node count cannot tell a per-collective base from per-step terms
            p.add("inter_base", max(model.inter_node_base_s, 1e-6), "log")
        protocols = set(model.enabled_inter if inter else ()) | set(
            model.enabled_intra if intra else ()
        )
        for name in sorted(protocols):
            t = model.term(name)
            if intra:
                p.add(f"{name}.intra", max(t.intra_step_s, 1e-7), "log")
            if inter:
                p.add(f"{name}.inter", max(t.inter_step_s, 1e-7), "log")
            if name != "Simple":
                p.add(f"{name}.factor", t.bandwidth_factor, "logit")
        for kind in sorted(self._limiting_kinds()):
            p.add(f"eff.{kind}", self.prior.efficiency_of(kind), "logit")
        for i, r in enumerate(self.regimes):
            if self._in_window(r):
                p.add(f"stall.{i}", max(r.per_step_s, 1e-4), "log")
        return p

    def _in_window(self, regime: Regime) -> bool:
        """Whether some sample of the regime's builds falls in its window."""
        for g in self.groups:
            if not regime.applies_to(g.build):
                continue
            for t in g.terms[:1]:
                for ph in t.phases:
                    if any(regime.in_window(ph.inter, ph.chunk_factor * b) for b in g.nbytes):
                        return True
        return False

    def _limiting_kinds(self) -> set[str]:
        """Link kinds that bound some phase's rate at the prior efficiencies."""
        out = set()
        for g in self.groups:
            for t in g.terms:
                for ph in t.phases:
                    rates = {k: r * self.prior.efficiency_of(k) for k, r in ph.rate_by_kind.items()}
                    if rates:
                        out.add(min(rates, key=lambda k: rates[k]))
        return out

    # ------------------------------------------------------------------ model
    def model(self, values: dict[str, float]) -> tuple[CollectiveModel, dict[str, float]]:
        """The collective model and link efficiencies these parameter values stand for."""
        prior = self.prior.collectives
        terms = {}
        for name, t in prior.terms.items():
            inter = values.get(f"{name}.inter", t.inter_step_s)
            # the library table's split of a multi-node ring's per-node cost (module doc)
            ratio = t.proxy_step_s / t.inter_step_s if t.inter_step_s > 0 else 0.0
            terms[name] = ProtocolTerms(
                t.base_latency_s,
                values.get(f"{name}.intra", t.intra_step_s),
                inter,
                values.get(f"{name}.factor", t.bandwidth_factor),
                inter * ratio,
            )
        regimes = tuple(
            replace(r, per_step_s=values[f"stall.{i}"]) if f"stall.{i}" in values else r
            for i, r in enumerate(self.regimes)
        )
        model = CollectiveModel(
            launch_overhead_s=values.get("launch", prior.launch_overhead_s),
            inter_node_base_s=values.get("inter_base", prior.inter_node_base_s),
            terms=terms,
            enabled_intra=prior.enabled_intra,
            enabled_inter=prior.enabled_inter,
            library=prior.library,
            regimes=regimes,
        )
        eff = {k.removeprefix("eff."): v for k, v in values.items() if k.startswith("eff.")}
        return model, eff

    def predict(self, model: CollectiveModel, eff: dict[str, float]) -> np.ndarray:
        """Modelled time of every sample (the tuner's choice of algorithm and protocol),
        each group under its own library build: where one of the build's measured regimes
        applies, the build runs the regime's protocol and pays its stall."""
        out = np.empty(len(self.samples))
        effic = {k.value: eff.get(k.value, self.prior.efficiency_of(k.value)) for k in LINK_KINDS}
        for g in self.groups:
            regimes = model.with_library(g.build).active_regimes if g.build else ()
            best = np.full(g.nbytes.shape, np.inf)
            for t in g.terms:
                window, forced, stall = self._regime(regimes, t, g.nbytes)
                for proto in model.protocols(t.inter):
                    pt = model.term(proto)
                    lat = model.launch_overhead_s + pt.base_latency_s
                    if t.inter:
                        lat += model.inter_node_base_s
                    per_byte = 0.0
                    for ph in t.phases:
                        lat += ph.crossing * (ph.far_s + pt.inter_step_s)
                        lat += (ph.steps - ph.crossing) * (ph.near_s + pt.local_step_s(ph.inter))
                        rate = min(r * effic[k] for k, r in ph.rate_by_kind.items())
                        per_byte += ph.bytes_factor / (rate * pt.bandwidth_factor)
                    t_p = lat + per_byte * g.nbytes
                    if forced is not None:  # the build runs the regime's protocol there
                        t_p = np.where(window, t_p + stall if proto == forced else np.inf, t_p)
                    best = np.minimum(best, t_p)
            out[g.index] = best
        return out

    @staticmethod
    def _regime(
        regimes: Sequence[Regime], t: LayoutTerms, nbytes: np.ndarray
    ) -> tuple[np.ndarray, str | None, np.ndarray]:
        """(per size: in the first applying regime's window, its protocol or None, its
        stall) for one algorithm of a layout."""
        window = np.zeros(nbytes.shape, dtype=bool)
        stall = np.zeros(nbytes.shape)
        for r in regimes:
            for ph in t.phases:
                if ph.chunk_factor <= 0:
                    continue
                step = ph.chunk_factor * nbytes
                hit = (step >= r.from_step_bytes) & (step < r.below_step_bytes) & ph.inter
                window |= hit
                stall += np.where(hit, ph.steps * r.per_step_s, 0.0)
            if window.any():
                return window, r.protocol, stall
        return window, None, stall

    def residuals(self, x: np.ndarray) -> np.ndarray:
        model, eff = self.model(self.params.values(x))
        t = np.array([s.time_s for s in self.samples])
        return np.log(self.predict(model, eff) / t)

    # -------------------------------------------------------------------- fit
    def fit(self) -> FitResult:
        """The best parameters from several starts (prior; latencies x10; factors halved)."""
        x0 = np.array(self.params.x0)
        starts = [x0]
        lat = np.array([k == "log" for k in self.params.kinds])
        starts.append(np.where(lat, x0 + math.log(10.0), x0))
        starts.append(np.where(lat, x0 + math.log(3.0), x0 - 1.0))
        best = None
        for s in starts:
            x, cost = levenberg_marquardt(self.residuals, s)
            if best is None or cost < best[1]:
                best = (x, cost)
        assert best is not None
        values = self.params.values(best[0])
        model, eff = self.model(values)
        err = np.abs(np.exp(self.residuals(best[0])) - 1.0)
        return FitResult(self.machine, model, eff, values, err, len(self.samples))


@dataclass(frozen=True)
class FitResult:
    """A fitted machine: its model, efficiencies, parameter values and relative errors."""

    machine: str
    model: CollectiveModel
    link_efficiency: dict[str, float]
    values: dict[str, float]
    errors: np.ndarray
    samples: int

    def spec(self, source: str, notes: dict[str, Any] | None = None) -> CollectiveModelSpec:
        """The `network:` / `collectives:` block of this fit."""
        base = spec_from_model(
            self.model, {k: round(v, 4) for k, v in self.link_efficiency.items()}
        )
        fit_info: dict[str, Any] = {
            "samples": self.samples,
            "fitted": sorted(self.values),
            "median_rel_error": round(float(np.median(self.errors)), 4),
            "p90_rel_error": round(float(np.quantile(self.errors, 0.9)), 4),
            **(notes or {}),
        }
        return base.model_copy(update={"source": source, "fit": fit_info})


def levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray],
    x0: np.ndarray,
    iterations: int = 200,
    scale: float = SOFT_L1_SCALE,
) -> tuple[np.ndarray, float]:
    """Minimise sum 2 s^2 (sqrt(1 + (r/s)^2) - 1) by damped Gauss-Newton (IRLS weights),
    with a forward-difference Jacobian. Returns (x, cost)."""

    def cost_of(r: np.ndarray) -> float:
        return float((2 * scale**2 * (np.sqrt(1 + (r / scale) ** 2) - 1)).sum())

    x = np.asarray(x0, dtype=np.float64).copy()
    r = residuals(x)
    cost = cost_of(r)
    lam = 1e-2
    for _ in range(iterations):
        jac = np.empty((r.size, x.size))
        for j in range(x.size):
            step = 1e-6 * max(1.0, abs(x[j]))
            xj = x.copy()
            xj[j] += step
            jac[:, j] = (residuals(xj) - r) / step
        w = 1.0 / np.sqrt(1.0 + (r / scale) ** 2)
        a = jac.T @ (w[:, None] * jac)
        g = jac.T @ (w * r)
        improved = False
        for _ in range(12):
            try:
                dx = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            r_new = residuals(x + dx)
            c_new = cost_of(r_new)
            if np.isfinite(c_new) and c_new < cost:
                x, r, improved = x + dx, r_new, True
                rel = (cost - c_new) / max(cost, 1e-300)
                cost, lam = c_new, max(lam / 3, 1e-9)
                break
            lam *= 10
        if not improved or rel < 1e-10:
            break
    return x, cost


def fit_machine(
    machine: str,
    samples: Sequence[CollectiveSample],
    source: str,
    notes: dict[str, Any],
    regimes: Sequence[Regime] = (),
) -> tuple[str, CollectiveModelSpec]:
    """(GPU type, fitted block) of one machine's samples (and its regimes' stalls)."""
    result = NetworkFit(machine, samples, regimes).fit()
    gpu = machine_preset(machine).gpu
    return gpu, result.spec(source, notes)


__all__ = [
    "FitResult",
    "NetworkFit",
    "fit_machine",
    "layout_terms",
    "levenberg_marquardt",
    "regime_templates",
]
