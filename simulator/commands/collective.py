"""`axsim collective`: nccl-tests-style micro-benchmark of one collective on a machine."""

from __future__ import annotations

import json
from typing import Any

import click

from simulator.commands.options import (
    json_option,
    machine_option,
    positional_machine,
    resolve_machine,
    set_option,
    size_options,
)
from simulator.commands.params import (
    ALGORITHM_HELP,
    BANDWIDTH_GBPS,
    NETWORK_HELP,
    FiniteFloat,
)
from simulator.network.schedules import ALGORITHMS
from simulator.outputs.versions import stamp
from simulator.units import format_bytes, parse_size_sweep
from topologies.fabric import ROUTING_POLICIES
from workloads.ops import CollectiveKind

# The same list simulator.benchmarks.collectives checks; defined here so that registering
# the command does not load the engine.
OPS = tuple(k.value for k in CollectiveKind)
# simulator/network/protocols.py PROTOCOLS, named here because that module loads the
# calibration models (pydantic), which `axsim collective --help` must not
# (tests/test_cli_lazy.py checks that the two lists agree)
PROTOCOLS = ("LL", "LL128", "Simple")


def _nccl_tests_text(
    topo: Any,
    op: str,
    group: int,
    placement: int,
    instances: str,
    per_node: int | None,
    rows: list[Any],
) -> str:
    """The sweep as nccl-tests prints it, its ranks being the first instance's GPUs."""
    from simulator.benchmarks.collectives import member_table
    from simulator.benchmarks.nccl_tests import format_nccl_tests
    from topologies.hardware import gpu_spec

    first = member_table(topo, group, placement, instances, per_node)[0]
    nodes = [topo.gpu_node(int(g)) for g in first]
    title = f"{topo.name}, group {group}, {rows[0].instances} instance(s)"
    device = gpu_spec(topo.gpu_type).display_name if topo.gpu_type else "GPU"
    return format_nccl_tests(CollectiveKind(op), rows, nodes, device, title)


def collective_schema() -> dict[str, object]:
    """`axsim collective --json` (simulator/outputs/json_schemas.py)."""
    from simulator.outputs.json_schemas import collective_json_schema

    return collective_json_schema()


def register(app: click.Group) -> None:
    @app.command("collective")
    @positional_machine()
    @machine_option()
    @size_options()
    @click.option("--file", "file", default=None, help="Custom topology file (--machine custom).")
    @click.option(
        "--op", "op", default="all-reduce", show_default=True, help=f"One of: {', '.join(OPS)}."
    )
    @click.option("--group", type=int, required=True, help="GPUs per group instance.")
    @click.option(
        "--placement",
        type=int,
        default=None,
        help="Stride between group members (GPU index; default 1).",
    )
    @click.option(
        "--per-node",
        type=int,
        default=None,
        help="Place each group as K GPUs on each of group/K nodes (instead of --placement).",
    )
    @click.option(
        "--bytes",
        "size",
        default="1K:1G",
        show_default=True,
        help="A size (64M) or a sweep START:END.",
    )
    @click.option(
        "--factor",
        type=FiniteFloat(min=1.0, min_open=True),
        default=4.0,
        show_default=True,
        help="Sweep multiplier.",
    )
    @click.option(
        "--algorithm",
        type=click.Choice(("auto", *ALGORITHMS)),
        default="auto",
        show_default=True,
        help=ALGORITHM_HELP,
    )
    @click.option(
        "--network",
        type=click.Choice(("contention", "alpha-beta")),
        default="contention",
        show_default=True,
        help=NETWORK_HELP,
    )
    @click.option(
        "--instances",
        type=click.Choice(("all", "one")),
        default="all",
        show_default=True,
        help="All instances tiling the machine concurrently, or one alone.",
    )
    @click.option(
        "--protocol",
        type=click.Choice(("auto", *PROTOCOLS)),
        default="auto",
        show_default=True,
        help="NCCL/RCCL protocol (auto: the tuner's choice per size, as NCCL_PROTO unset).",
    )
    @click.option(
        "--routing",
        type=click.Choice(ROUTING_POLICIES),
        default=None,
        help="What-if: the fabric's routing policy (default: the preset's).",
    )
    @click.option(
        "--no-gpudirect-rdma",
        "no_gdr",
        is_flag=True,
        help="Stage GPU <-> NIC traffic through host memory, as RCCL does on Frontier without "
        "NCCL_NET_GDR_LEVEL=PHB (topologies/host_staging.py).",
    )
    @click.option("--nics-per-node", type=int, default=None, help="What-if: NICs per node.")
    @click.option(
        "--nic-bandwidth", type=BANDWIDTH_GBPS, default=None, help="What-if: GB/s per NIC."
    )
    @click.option(
        "--calibration", type=click.Path(), default=None, help="Calibration file (network tables)."
    )
    @click.option(
        "--library",
        default=None,
        help="The collective library build (default: the preset's, e.g. 'RCCL 2.18.6'); "
        "decides the algorithms it enables and the measured regimes it shows "
        "(machines.yaml collectives.regimes).",
    )
    @click.option(
        "--format",
        "fmt",
        type=click.Choice(("table", "json", "nccl-tests")),
        default="table",
        show_default=True,
        help="A rich table, a JSON list, or the table nccl-tests / rccl-tests print.",
    )
    @set_option("Here cluster.FIELD only: the machine's fields.")
    @json_option("collective", collective_schema, "Same as --format json: one list of rows.")
    def collective(
        machine_arg: str | None,
        machine: str | None,
        gpus: int | None,
        nodes: int | None,
        file: str | None,
        op: str,
        group: int,
        placement: int | None,
        per_node: int | None,
        size: str,
        factor: float,
        algorithm: str,
        network: str,
        instances: str,
        protocol: str,
        routing: str | None,
        no_gdr: bool,
        nics_per_node: int | None,
        nic_bandwidth: float | None,
        calibration: str | None,
        library: str | None,
        fmt: str,
        sets: tuple[str, ...],
        as_json: bool,
    ) -> None:
        """Time a collective for a sweep of message sizes (time, algbw, busbw)."""
        from simulator.benchmarks.collectives import collective_sweep
        from simulator.commands.topology import build_from_flags
        from simulator.errors import ConfigError
        from simulator.network.params import network_params_for

        if group < 2:
            raise ConfigError(f"--group {group}: a collective needs at least 2 GPUs")
        if per_node is not None and placement is not None:
            raise ConfigError("give --placement or --per-node, not both")
        placement = 1 if placement is None else placement
        what_if = {
            "nics_per_node": nics_per_node,
            "nic_bandwidth_GBps": nic_bandwidth,
            "routing": routing,
            "gpudirect_rdma": False if no_gdr else None,
        }
        name = resolve_machine(machine_arg, machine, "collective")
        topo = build_from_flags(
            name, (gpus, nodes), file, {"intra_node_bandwidth_scale": None, **what_if}, sets
        )
        sizes = parse_size_sweep(size, factor)
        params = network_params_for(topo)
        if library is not None and not library.strip():
            raise ConfigError("--library: give a library build, e.g. 'RCCL 2.18.6'")
        cal = None
        if calibration:
            from simulator.cost.calibration import load_calibration

            cal = load_calibration(calibration)
        rows = collective_sweep(
            topo, op, group, placement, sizes, algorithm, network, params, instances, cal,
            per_node, protocol, library=library,
        )  # fmt: skip
        if as_json or fmt == "json":
            click.echo(json.dumps([stamp(r.as_dict()) for r in rows], indent=2))
            return
        if fmt == "nccl-tests":
            click.echo(
                _nccl_tests_text(topo, op, group, placement, instances, per_node, rows), nl=False
            )
            return
        from rich.table import Table

        from simulator.outputs.render import markup_safe, stdout_console

        table = Table(
            title=f"{op} on {markup_safe(topo.name)}: group {group}, "
            + (f"{per_node} per node" if per_node else f"stride {placement}")
            + f", {rows[0].instances} instance(s), {network}"
        )
        for col in ("size", "time (µs)", "algbw (GB/s)", "busbw (GB/s)", "algorithm", "protocol"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(
                format_bytes(r.bytes),
                f"{r.time_s * 1e6:.2f}",
                f"{r.algbw_GBps:.2f}",
                f"{r.busbw_GBps:.2f}",
                r.algorithm,
                r.protocol,
            )
        stdout_console().print(table)
