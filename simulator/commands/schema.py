"""`axsim schema`: print the JSON Schema of the experiment configuration."""

from __future__ import annotations

import json

import click

from simulator.config import config_json_schema


def register(app: click.Group) -> None:
    @app.command("schema")
    def schema() -> None:
        """Print the JSON Schema of the experiment config (for editors and validation)."""
        click.echo(json.dumps(config_json_schema(), indent=2))
