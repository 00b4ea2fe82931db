"""`axsim schema`: print the JSON Schema of a user file or of the report.

Default: the experiment configuration. `--report`: what `axsim simulate --json` and
report.json contain. `--topology`: a custom topology file (`--machine custom`,
`axsim topology --machine custom --file`). `--sweep`: a sweep spec (`axsim sweep SPEC`).
`--output COMMAND`: what COMMAND prints with --json (its schema is declared with the
option: simulator/commands/options.py), or `sweep-row`. One at a time: the flags are
mutually exclusive, since each prints one schema document.
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
    @click.option(
        "--output",
        "output",
        default=None,
        metavar="COMMAND",
        help="The schema of COMMAND's --json output (e.g. simulate, collective, presets), "
        "or sweep-row: one row of a sweep's rows.jsonl.",
    )
    def schema(of_report: bool, of_topology: bool, of_sweep: bool, output: str | None) -> None:
        """Print the JSON Schema of the experiment config (for editors and validation), of
        another user file, or of a command's JSON output."""
        chosen = [
            name
            for name, on in (
                ("report", of_report),
                ("topology", of_topology),
                ("sweep", of_sweep),
                ("output", output is not None),
            )
            if on
        ]
        if len(chosen) > 1:
            given = " and ".join(f"--{c}" for c in chosen)
            raise click.UsageError(
                f"give one of --report, --topology, --sweep, --output, not {given}"
            )
        if output is not None:
            document = output_schema_of(output)
        else:
            document = SCHEMAS[chosen[0]]() if chosen else config_json_schema()
        click.echo(json.dumps(document, indent=2))


def json_outputs(group: click.Group) -> dict[str, Callable[[], dict[str, Any]]]:
    """Every JSON output with a schema: each command's `--json` (plug-ins' too) and a
    sweep's row."""
    from simulator.commands.options import output_schema

    ctx = click.Context(group)
    out: dict[str, Callable[[], dict[str, Any]]] = {}
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        found = None if command is None else output_schema(command)
        if found is not None:
            out[name] = found
    out["sweep-row"] = _sweep_row
    return out


def _sweep_row() -> dict[str, Any]:
    from simulator.outputs.json_schemas import sweep_row_json_schema

    return sweep_row_json_schema()


def output_schema_of(name: str) -> dict[str, Any]:
    """The schema of one JSON output; a usage error lists the known ones."""
    group = click.get_current_context().find_root().command
    assert isinstance(group, click.Group)
    known = json_outputs(group)
    if name not in known:
        raise click.BadParameter(
            f"'{name}' has no JSON output (known: {', '.join(sorted(known))})",
            param_hint="--output",
        )
    return known[name]()
