"""`axsim topology`: build a machine (or a custom topology) and summarise it.

Prints devices and links by kind, injection bandwidth per GPU, bisection bandwidth (see
topologies.summary for the definitions), the fabric parameters and sample routes, as rich
tables or, with `--json`, as one JSON object (same content; non-finite numbers as null).
"""

from __future__ import annotations

import json
import math
from typing import Any

import click

from simulator.commands.options import (
    GPU_HELP,
    json_option,
    machine_option,
    positional_machine,
    resolve_machine,
    set_option,
    size_options,
)
from simulator.commands.params import BANDWIDTH_GBPS, BANDWIDTH_SCALE
from simulator.errors import ConfigError
from simulator.outputs.versions import stamp
from topologies.fabric import ROUTING_POLICIES

_FLAGS = {
    "gpu": "--gpu",
    "nics_per_node": "--nics-per-node",
    "nic_bandwidth_GBps": "--nic-bandwidth",
    "intra_node_bandwidth_scale": "--intra-node-scale",
    "fabric_link_bandwidth_GBps": "--fabric-bandwidth",
    "routing": "--routing",
    "gpudirect_rdma": "--no-gpudirect-rdma",
}
"""CLI flag of each build_machine what-if keyword."""


def _finite(value: Any) -> Any:
    """Replace inf/nan by None recursively so the output is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def build_from_flags(
    machine: str,
    size: tuple[int | None, int | None],
    file: str | None,
    overrides: dict[str, Any],
    sets: tuple[str, ...] = (),
) -> Any:
    """The Topology the flags describe (a preset at --gpus or --nodes, or custom --file);
    ConfigError for flags that do not fit together. Shared by `axsim topology` and
    `axsim collective`; `sets` (--set cluster.FIELD=VALUE) go through the config's own
    parser and validation (`cluster_from_sets`)."""
    gpus, nodes = size
    if sets:
        machine, size, file, overrides = cluster_from_sets(machine, size, file, overrides, sets)
        gpus, nodes = size
    if machine.strip().lower() == "custom":
        if not file:
            raise ConfigError("--machine custom needs --file PATH")
        given = [_FLAGS[k] for k, v in overrides.items() if v is not None]
        if nodes is not None or gpus is not None or given:
            sized = ["--gpus"] if gpus is not None else []
            sized += ["--nodes"] if nodes is not None else []
            flags = ", ".join(sized + given)
            raise ConfigError(
                f"{flags}: not applicable to a custom topology (edit the file instead)"
            )
        from topologies.custom import load_custom_topology

        return load_custom_topology(file)
    if file:
        raise ConfigError("--file is only for --machine custom")
    from simulator.commands.options import preset_nodes
    from topologies.catalogue import machine_preset
    from topologies.machines import build_machine

    machine_preset(machine)  # an unknown name is the error to report, not the missing size
    nodes = preset_nodes(machine, gpus, nodes)
    if nodes is None:
        raise ConfigError(f"--gpus or --nodes: give the size of machine '{machine}'")

    scale = overrides.pop("intra_node_bandwidth_scale")
    if overrides.get("gpudirect_rdma") is None:
        overrides.pop("gpudirect_rdma", None)
    return build_machine(
        machine, nodes, intra_node_bandwidth_scale=1.0 if scale is None else scale, **overrides
    )


SETTABLE = ("machine", "gpus", "nodes", "topology_file", *_FLAGS)
"""The cluster fields `--set` may give `topology` and `collective` (a straggler or a
mixed machine is a simulation's, not a topology's)."""


def cluster_from_sets(
    machine: str,
    size: tuple[int | None, int | None],
    file: str | None,
    overrides: dict[str, Any],
    sets: tuple[str, ...],
) -> tuple[str, tuple[int | None, int | None], str | None, dict[str, Any]]:
    """Flags then `--set cluster.FIELD=VALUE` as `axsim simulate` reads them (the same
    parser, YAML guards and validation), back as (machine, size, file, what-ifs)."""
    from pydantic import ValidationError

    from simulator.config import (
        ClusterConfig,
        apply_overrides,
        format_validation_error,
        parse_override,
    )

    for item in sets:
        parts, _ = parse_override(item)
        if parts[0] != "cluster" or len(parts) != 2 or parts[1] not in SETTABLE:
            raise ConfigError(
                f"--set {item!r}: this command builds a machine; it takes cluster.FIELD for "
                f"FIELD in {', '.join(SETTABLE)}"
            )
    gpus, nodes = size
    cluster: dict[str, Any] = {"machine": machine, "gpus": gpus, "nodes": nodes}
    cluster["topology_file"] = file
    cluster.update(overrides)
    cluster = {k: v for k, v in cluster.items() if v is not None}
    data = apply_overrides({"cluster": cluster}, sets)["cluster"]
    try:
        cfg = ClusterConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, "--set")) from None
    what_if = {k: getattr(cfg, k) for k in _FLAGS}
    if what_if["intra_node_bandwidth_scale"] == 1.0:
        what_if["intra_node_bandwidth_scale"] = None
    return cfg.machine, (cfg.gpus, cfg.nodes), cfg.topology_file, what_if


def _num(x: Any, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{digits}f}" if isinstance(x, float) else f"{x:,}"


def _render(summary: dict[str, Any]) -> None:
    from rich.table import Table

    from simulator.outputs.render import markup_safe, stdout_console

    console = stdout_console()
    name, description = markup_safe(summary["name"]), markup_safe(summary["description"])
    console.print(f"[bold]{name}[/bold] — {description}")
    console.print(
        f"{summary['gpus']:,} GPUs ({summary['gpu_type'] or 'unspecified'}) on {summary['nodes']:,} nodes, "
        f"{'up to ' if not summary['homogeneous_nodes'] else ''}{summary['gpus_per_node']} GPUs and "
        f"{summary['nics_per_node']} NICs per node, "
        f"routing: {summary['routing']}"
    )
    devices = Table(title="Devices")
    devices.add_column("kind")
    devices.add_column("count", justify="right")
    for kind, count in summary["devices"].items():
        devices.add_row(kind, _num(count))
    console.print(devices)
    links = Table(title="Directed links")
    for col in ("kind", "count", "GB/s per link", "total GB/s"):
        links.add_column(col, justify="left" if col == "kind" else "right")
    for kind, st in summary["links"].items():
        bw = (
            _num(st["min_GBps"])
            if st["min_GBps"] == st["max_GBps"]
            else f"{_num(st['min_GBps'])}–{_num(st['max_GBps'])}"
        )
        links.add_row(kind, _num(st["count"]), bw, _num(st["total_GBps"], 0))
    console.print(links)
    figures = Table(title="Bandwidth (per direction) and fabric", show_header=False)
    figures.add_row("injection per GPU", f"{_num(summary['injection_per_gpu_GBps'])} GB/s")
    figures.add_row("bisection", f"{_num(summary['bisection_GBps'])} GB/s")
    figures.add_row("bisection, minimal routes", f"{_num(summary['minimal_bisection_GBps'])} GB/s")
    figures.add_row("node bisection (max flow)", f"{_num(summary['node_bisection_GBps'])} GB/s")
    for key, value in summary["fabric"].items():
        figures.add_row(f"fabric.{key}", str(value))
    console.print(figures)
    routes = Table(title="Sample routes")
    for col in ("pair", "GPUs", "paths", "hops", "bottleneck GB/s", "route GB/s", "latency µs"):
        routes.add_column(col, justify="left" if col in ("pair", "GPUs") else "right")
    samples = summary.get("sample_routes", [])
    for r in samples:
        hops = str(r["hops"]) if r["hops"] == r["max_hops"] else f"{r['hops']} (≤{r['max_hops']})"
        routes.add_row(
            markup_safe(r["label"]),
            f"{r['src_gpu']}→{r['dst_gpu']}",
            str(r["paths"]),
            hops,
            _num(r["bottleneck_GBps"]),
            _num(r["route_bandwidth_GBps"]),
            _num(r["latency_us"], 2),
        )
    console.print(routes)
    for r in samples:
        path = " → ".join(markup_safe(p) for p in r["path"])
        console.print(f"[dim]{markup_safe(r['label'])}:[/dim] {path}", soft_wrap=True)


def topology_schema() -> dict[str, object]:
    """`axsim topology --json` (simulator/outputs/json_schemas.py)."""
    from simulator.outputs.json_schemas import topology_json_schema

    return topology_json_schema()


def register(app: click.Group) -> None:
    """Add `axsim topology` to the CLI group."""

    @app.command("topology")
    @positional_machine()
    @machine_option()
    @size_options()
    @click.option(
        "--file", "file", type=str, default=None, help="Custom topology file (--machine custom)."
    )
    @click.option("--gpu", default=None, help=f"{GPU_HELP} What-if: the nodes' GPUs.")
    @click.option(
        "--nics-per-node",
        type=int,
        default=None,
        help="What-if: NICs per node (fewer: GPUs share).",
    )
    @click.option(
        "--nic-bandwidth",
        "nic_bandwidth",
        type=BANDWIDTH_GBPS,
        default=None,
        metavar="GBPS",
        help="What-if: GB/s per NIC.",
    )
    @click.option(
        "--intra-node-scale",
        type=BANDWIDTH_SCALE,
        default=None,
        help="What-if: scale every intra-node link.",
    )
    @click.option(
        "--fabric-bandwidth",
        type=BANDWIDTH_GBPS,
        default=None,
        metavar="GBPS",
        help="What-if: GB/s per switch link.",
    )
    @click.option(
        "--routing",
        type=click.Choice(ROUTING_POLICIES),
        default=None,
        help="Fabric routing policy.",
    )
    @click.option(
        "--no-gpudirect-rdma",
        "no_gdr",
        is_flag=True,
        help="Stage GPU <-> NIC traffic through host memory (no GPUDirect RDMA).",
    )
    @set_option("Here cluster.FIELD only: the machine's fields.")
    @json_option("topology", topology_schema, "One object instead of tables.")
    def topology(
        machine_arg: str | None,
        machine: str | None,
        gpus: int | None,
        nodes: int | None,
        file: str | None,
        gpu: str | None,
        nics_per_node: int | None,
        nic_bandwidth: float | None,
        intra_node_scale: float | None,
        fabric_bandwidth: float | None,
        routing: str | None,
        no_gdr: bool,
        sets: tuple[str, ...],
        as_json: bool,
    ) -> None:
        """Build the machine (a preset at a size, or `--machine custom --file PATH`) and
        summarise its topology."""
        from topologies.summary import summarize_topology

        overrides: dict[str, Any] = {
            "gpu": gpu,
            "nics_per_node": nics_per_node,
            "nic_bandwidth_GBps": nic_bandwidth,
            "intra_node_bandwidth_scale": intra_node_scale,
            "fabric_link_bandwidth_GBps": fabric_bandwidth,
            "routing": routing,
            "gpudirect_rdma": False if no_gdr else None,
        }
        name = resolve_machine(machine_arg, machine, "topology")
        topo = build_from_flags(name, (gpus, nodes), file, overrides, sets)
        summary = _finite(summarize_topology(topo))
        if as_json:
            click.echo(json.dumps(stamp(summary), indent=2, allow_nan=False))
            return
        _render(summary)
