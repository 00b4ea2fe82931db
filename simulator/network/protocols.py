"""NCCL/RCCL protocols: the latency and bandwidth terms a collective pays per protocol.

NCCL and RCCL move data with one of three protocols (src/graph/tuning.cc): LL (8-byte
stores carrying 4 bytes of data and a flag each: lowest latency, lowest bandwidth),
LL128 (128-byte lines with 8 bytes of flags, NVLink only) and Simple (bulk copies with
fences: highest latency, full bandwidth). Their tuner prices every (algorithm, protocol)
as

    time = base latency + steps x hop latency (by tier) + bytes / (bus bandwidth x factor)

and runs the cheapest. `CollectiveModel` holds exactly those terms for one machine:

- `launch_overhead_s`: once per collective, whatever the protocol (kernel launch and
  the framework's enqueue); `inter_node_base_s` once more per collective that crosses
  nodes (the network proxy's per-operation work: posting, connection progress), which
  measurements of multi-node collectives alone cannot tell from the launch;
- per protocol: `base_latency_s` (NCCL's baseLat); the latency of one algorithm step that
  stays inside a node (`intra_step_s`, hwLat[NVLINK or PCI]) and of one that crosses
  nodes (`inter_step_s`, the per-hop network term: hwLat[NET] plus the transport's
  latency); `proxy_step_s`, the floor of a node-local step of a phase that crosses nodes
  (the network proxy posts and polls every step of a multi-node ring: NCCL's
  `intraLat = max(intraLat, netOverhead)`, netOverhead 1 us on Intel and 2 us on AMD
  hosts, x3 for Simple); so a ring is priced by how many of its steps cross nodes and
  how many members each node holds (see schedules.Phase.inter_steps); and
  `bandwidth_factor`, the fraction of the links' achievable rate the protocol reaches
  (applied by inflating the bytes on the wire: LL's flags travel with the data);
- which protocols the library enables inside a node and across nodes, and which library
  build it is (`library`: the algorithms a version enables, simulator/network/library.py);
- measured regimes a library build shows (simulator/network/regimes.py), on only for
  the builds listed with them.

The defaults per GPU vendor are the libraries' own tables (network_defaults.yaml, with
their source lines); a machine preset replaces them with the values `axsim calibrate`
fitted on that machine's measurements (machines.yaml `collectives:`), and a calibration
file's `network:` block replaces those again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from pydantic import Field

from simulator.network.regimes import Regime, RegimeSpec
from topologies.user_input.model import UserModel

PROTOCOLS: tuple[str, ...] = ("LL", "LL128", "Simple")
TIERS: tuple[str, ...] = ("intra_node", "inter_node")
Protocol = Literal["LL", "LL128", "Simple"]
Tier = Literal["intra_node", "inter_node"]
US = 1e-6


@dataclass(frozen=True)
class ProtocolTerms:
    """One protocol's terms (seconds; bandwidth_factor in (0, 1])."""

    base_latency_s: float
    intra_step_s: float
    inter_step_s: float
    bandwidth_factor: float = 1.0
    proxy_step_s: float = 0.0

    def local_step_s(self, crosses_nodes: bool) -> float:
        """A node-local step's latency: in a phase that crosses nodes every step still
        goes through the network proxy, so it costs at least `proxy_step_s`."""
        return max(self.intra_step_s, self.proxy_step_s) if crosses_nodes else self.intra_step_s


@dataclass(frozen=True)
class CollectiveModel:
    """Per-protocol latency and bandwidth terms of one machine's collective library."""

    launch_overhead_s: float = 0.0
    inter_node_base_s: float = 0.0
    terms: Mapping[str, ProtocolTerms] = field(
        default_factory=lambda: {"Simple": ProtocolTerms(0.0, 0.0, 0.0, 1.0)}
    )
    enabled_intra: tuple[str, ...] = ("Simple",)
    enabled_inter: tuple[str, ...] = ("Simple",)
    source: str = ""
    library: str = ""
    regimes: tuple[Regime, ...] = ()

    @property
    def active_regimes(self) -> tuple[Regime, ...]:
        """The regimes this library build shows (listed with its name)."""
        return tuple(r for r in self.regimes if r.applies_to(self.library))

    def with_library(self, library: str) -> CollectiveModel:
        """The same terms for another build of the library (its regimes follow it)."""
        return replace(self, library=library)

    @classmethod
    def ideal(cls) -> CollectiveModel:
        """One protocol, no latency, full bandwidth: what the closed-form oracles need."""
        return cls()

    def protocols(self, inter: bool) -> tuple[str, ...]:
        """Protocols the library may run on a collective that does (not) cross nodes."""
        return self.enabled_inter if inter else self.enabled_intra

    def term(self, protocol: str) -> ProtocolTerms:
        return self.terms[protocol]

    def with_spec(self, spec: CollectiveModelSpec) -> CollectiveModel:
        """These terms with a preset's or calibration's measured values applied on top."""
        terms = dict(self.terms)
        if spec.host_net_overhead_us is not None:  # the library table's proxy floor
            terms = {
                name: replace(t, proxy_step_s=host_proxy_step_s(name, spec.host_net_overhead_us))
                for name, t in terms.items()
            }
        for name, p in spec.protocols.items():
            prior = terms.get(name)
            proxy = (
                p.proxy_step_us * US
                if p.proxy_step_us is not None
                else (prior.proxy_step_s if prior is not None else 0.0)
            )
            terms[name] = ProtocolTerms(
                p.base_latency_us * US,
                p.intra_node_step_us * US,
                p.inter_node_step_us * US,
                p.bandwidth_factor,
                proxy,
            )
        out = replace(self, terms=terms)
        if spec.library is not None:
            out = replace(out, library=spec.library)
        if spec.regimes:
            out = replace(out, regimes=tuple(Regime.from_spec(r) for r in spec.regimes))
        if spec.launch_overhead_us is not None:
            out = replace(out, launch_overhead_s=spec.launch_overhead_us * US)
        if spec.inter_node_base_us is not None:
            out = replace(out, inter_node_base_s=spec.inter_node_base_us * US)
        if "intra_node" in spec.enabled:
            out = replace(out, enabled_intra=tuple(spec.enabled["intra_node"]))
        if "inter_node" in spec.enabled:
            out = replace(out, enabled_inter=tuple(spec.enabled["inter_node"]))
        if spec.source:
            out = replace(out, source=spec.source)
        out._check()
        return out

    def _check(self) -> None:
        for tier, names in (("intra_node", self.enabled_intra), ("inter_node", self.enabled_inter)):
            if not names:
                raise ValueError(f"enabled.{tier}: at least one protocol")
            missing = [p for p in names if p not in self.terms]
            if missing:
                raise ValueError(f"enabled.{tier}: no terms for protocol {', '.join(missing)}")


def host_proxy_step_s(protocol: str, net_overhead_us: float) -> float:
    """The library table's proxy floor for a host whose network post costs
    `net_overhead_us`: NCCL/RCCL tuning.cc multiply it by 3 for Simple."""
    return net_overhead_us * (3 if protocol == "Simple" else 1) * US


class ProtocolSpec(UserModel):
    """One protocol's measured or documented terms (YAML units: microseconds)."""

    base_latency_us: float = Field(ge=0, le=1e6)
    intra_node_step_us: float = Field(ge=0, le=1e6)
    inter_node_step_us: float = Field(ge=0, le=1e6)
    bandwidth_factor: float = Field(gt=0, le=1)
    proxy_step_us: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="Floor of a node-local step of a phase that crosses nodes (the network "
        "proxy's per-step work); omitted: the library table's (NCCL netOverhead).",
    )


class CollectiveModelSpec(UserModel):
    """The `collectives:` block of a machine preset or the `network:` block of a
    calibration file: protocol terms (complete per protocol given), enabled protocols per
    tier, the launch overhead, measured link efficiencies, and where they come from."""

    source: str = ""
    library: str | None = Field(
        default=None,
        description="The library build these terms describe, e.g. 'RCCL 2.18.6' (decides the "
        "algorithms it enables and the regimes it shows).",
    )
    launch_overhead_us: float | None = Field(default=None, ge=0, le=1e6)
    inter_node_base_us: float | None = Field(default=None, ge=0, le=1e6)
    host_net_overhead_us: float | None = Field(
        default=None,
        ge=0,
        le=1e3,
        description="The host CPU's network post overhead in the library's table (NCCL "
        "getNetOverhead: 1 us Intel, 2 us AMD); the proxy floor's prior, x3 for Simple.",
    )
    protocols: dict[Protocol, ProtocolSpec] = Field(default_factory=dict)
    enabled: dict[Tier, tuple[Protocol, ...]] = Field(default_factory=dict)
    link_efficiency: dict[str, float] = Field(default_factory=dict)
    regimes: tuple[RegimeSpec, ...] = ()
    fit: dict[str, object] = Field(
        default_factory=dict,
        description="Free-form provenance of a fit (rows used, residuals); not read.",
    )


def spec_from_model(
    model: CollectiveModel, link_efficiency: Mapping[str, float] | None = None
) -> CollectiveModelSpec:
    """The spec that reproduces `model` (what calibrate writes)."""
    return CollectiveModelSpec.model_validate(
        dict(
            source=model.source,
            library=model.library or None,
            launch_overhead_us=round(model.launch_overhead_s / US, 4),
            inter_node_base_us=round(model.inter_node_base_s / US, 4),
            protocols={
                name: ProtocolSpec(
                    base_latency_us=round(t.base_latency_s / US, 4),
                    intra_node_step_us=round(t.intra_step_s / US, 4),
                    inter_node_step_us=round(t.inter_step_s / US, 4),
                    bandwidth_factor=round(t.bandwidth_factor, 6),
                    proxy_step_us=round(t.proxy_step_s / US, 4),
                )
                for name, t in model.terms.items()
            },
            enabled={"intra_node": model.enabled_intra, "inter_node": model.enabled_inter},
            link_efficiency=dict(link_efficiency or {}),
            regimes=tuple(r.spec() for r in model.regimes),
        )
    )
