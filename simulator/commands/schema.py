"""`axsim schema`: print the JSON Schema of a user file or of the report.

Default: the experiment configuration. `--report`: what `axsim simulate --json` and
report.json contain. `--topology`: a custom topology file (`--machine custom`,
`axsim topology custom --file`). `--sweep`: a sweep spec (`axsim sweep SPEC`). One at a
time: the flags are mutually exclusive, since each prints one schema document.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from simulator.config import config_json_schema


def _report() -> dict[str, Any]:
    from simulator.outputs.schema import report_json_schema

    return report_json_schema()


def _topology() -> dict[str, Any]:
    from topologies.custom import custom_topology_json_schema

    return custom_topology_json_schema()


def _sweep() -> dict[str, Any]:
    from simulator.sweep.spec import sweep_spec_json_schema

    return sweep_spec_json_schema()


SCHEMAS: dict[str, Callable[[], dict[str, Any]]] = {
    "report": _report,
    "topology": _topology,
    "sweep": _sweep,
}


def register(app: click.Group) -> None:
    @app.command("schema")
    @click.option(
        "--report",
        "of_report",
        is_flag=True,
        help="The report's schema (simulate --json, report.json) instead of the config's.",
    )
    @click.option(
        "--topology",
        "of_topology",
        is_flag=True,
        help="A custom topology file's schema (devices and links) instead of the config's.",
    )
    @click.option(
        "--sweep",
        "of_sweep",
        is_flag=True,
        help="A sweep spec's schema (base, set, axes) instead of the config's.",
    )
    def schema(of_report: bool, of_topology: bool, of_sweep: bool) -> None:
        """Print the JSON Schema of the experiment config (for editors and validation)."""
        chosen = [
            name
            for name, on in (("report", of_report), ("topology", of_topology), ("sweep", of_sweep))
            if on
        ]
        if len(chosen) > 1:
            given = " and ".join(f"--{c}" for c in chosen)
            raise click.UsageError(f"give one of --report, --topology, --sweep, not {given}")
        document = SCHEMAS[chosen[0]]() if chosen else config_json_schema()
        click.echo(json.dumps(document, indent=2))
