"""Shared CLI test helpers: the one-line error check and every command, loaded."""

from __future__ import annotations

import click
import pytest

from simulator.cli import app, main


def one_line_error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run the CLI on `args`; assert exit 2 with one `axsim: error:` line and return it."""
    assert main(args) == 2, args
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error:") and err.count("\n") == 0, err
    return err


def all_commands() -> dict[str, click.Command]:
    """Every `axsim` command by name, imported (the group loads commands lazily, so
    `app.commands` alone holds only those some earlier call happened to load)."""
    ctx = click.Context(app)
    commands = {name: app.get_command(ctx, name) for name in app.list_commands(ctx)}
    return {name: cmd for name, cmd in commands.items() if cmd is not None}


def output_schema(name: str) -> dict[str, object]:
    """The JSON Schema `axsim schema --output NAME` prints."""
    from simulator.commands.schema import json_outputs

    return json_outputs(app)[name]()


def assert_valid_output(name: str, document: object) -> None:
    """`document` (a parsed JSON output of command `name`) validates against its schema."""
    import jsonschema

    jsonschema.Draft202012Validator(output_schema(name)).validate(document)
