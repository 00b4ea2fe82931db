"""`axsim schema`: print the JSON Schema of the experiment configuration, or of the
report (`--report`: what `axsim simulate --json` and report.json contain)."""

from __future__ import annotations

import json

import click

from simulator.config import config_json_schema


def register(app: click.Group) -> None:
    @app.command("schema")
    @click.option(
        "--report",
        "of_report",
        is_flag=True,
        help="The report's schema (simulate --json, report.json) instead of the config's.",
    )
    def schema(of_report: bool) -> None:
        """Print the JSON Schema of the experiment config (for editors and validation)."""
        if of_report:
            from simulator.outputs.schema import report_json_schema

            click.echo(json.dumps(report_json_schema(), indent=2))
        else:
            click.echo(json.dumps(config_json_schema(), indent=2))
