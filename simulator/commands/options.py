"""The options several commands share, declared once (one vocabulary across commands).

Why: the machine was `--machine` on five commands but a positional argument on
`collective` and `topology`, which took `--nodes` where the others took `--gpus`, and
`--set` worked on 3 of 14 commands. Each shared option is declared here with one name,
one type and one help sentence (tests/test_cli_vocabulary.py walks every command and
checks them); a command may add a sentence of its own after the shared one. Old
spellings keep working with one `axsim: warning:` line on stderr.

`--json` records, on the command's callback, the JSON Schema of what it prints (`axsim
schema --output COMMAND` prints it; the tests validate every output against it).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

Decorator = Callable[[Any], Any]

MACHINE_HELP = (
    "Machine preset (axsim presets machines), or custom (a topology file: "
    "cluster.topology_file, or --file where a command takes it)."
)
GPUS_HELP = "Total GPUs (a multiple of the machine's GPUs per node; or give --nodes)."
NODES_HELP = "Number of nodes (GPUs = nodes x the machine's GPUs per node; or give --gpus)."
SET_HELP = (
    "Override a config field: section.field=value, the value in YAML (repeatable; "
    "axsim schema lists the fields)."
)
JSON_HELP = "Print JSON to stdout, stamped with schema_version (axsim schema --output {name})."
MODEL_HELP = "Model preset (axsim presets models), e.g. gpt-5b."
GPU_HELP = "GPU type (axsim presets gpus), e.g. h100-sxm."
BATCH_TOKENS_HELP = "Global batch in tokens."
SEQ_LEN_HELP = "Sequence length."
JOBS_HELP = "Worker processes."
PROGRESS_HELP = "Progress bar on stderr (terminals only)."

SCHEMA_ATTRIBUTE = "axsim_json_schema"
"""Attribute of a command's callback holding the function that returns its JSON Schema."""


def warn(message: str) -> None:
    """One `axsim: warning:` line on stderr (a deprecated spelling, a doubtful input)."""
    print(f"axsim: warning: {message}", file=sys.stderr)


def _compose(*decorators: Decorator) -> Decorator:
    def apply(f: Any) -> Any:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def machine_option(extra: str = "") -> Decorator:
    """`--machine NAME`."""
    return click.option("--machine", default=None, help=f"{MACHINE_HELP} {extra}".strip())


def size_options() -> Decorator:
    """`--gpus N` and `--nodes N`: the machine's size, by GPUs or by nodes."""
    return _compose(
        click.option("--gpus", type=click.IntRange(min=1), default=None, help=GPUS_HELP),
        click.option("--nodes", type=click.IntRange(min=1), default=None, help=NODES_HELP),
    )


def set_option(extra: str = "") -> Decorator:
    """`--set section.field=value` (repeatable), parsed by simulator.config.parse_override."""
    return click.option("--set", "sets", multiple=True, help=f"{SET_HELP} {extra}".strip())


def model_option() -> Decorator:
    """`--model NAME`."""
    return click.option("--model", default=None, help=MODEL_HELP)


def shape_options(batch_default: str = "") -> Decorator:
    """`--batch-tokens N` and `--seq-len N` (the run's batch and sequence)."""
    return _compose(
        click.option(
            "--batch-tokens",
            type=click.IntRange(min=1),
            default=None,
            help=f"{BATCH_TOKENS_HELP} {batch_default}".strip(),
        ),
        click.option("--seq-len", type=click.IntRange(min=1), default=None, help=SEQ_LEN_HELP),
    )


def progress_option() -> Decorator:
    """`--progress/--no-progress`."""
    return click.option("--progress/--no-progress", default=True, help=PROGRESS_HELP)


def json_option(name: str, schema: Callable[[], dict[str, Any]], what: str) -> Decorator:
    """`--json`: print `what` as JSON; `schema()` is its JSON Schema (kept on the callback,
    where `axsim schema --output` and the tests find it without importing the command's
    dependencies)."""
    option = click.option(
        "--json", "as_json", is_flag=True, help=f"{JSON_HELP.format(name=name)} {what}"
    )

    def apply(f: Any) -> Any:
        setattr(f, SCHEMA_ATTRIBUTE, schema)
        return option(f)

    return apply


def output_schema(command: click.Command) -> Callable[[], dict[str, Any]] | None:
    """The JSON Schema function a command's `--json` declared (None: no JSON output)."""
    return getattr(command.callback, SCHEMA_ATTRIBUTE, None)


def positional_machine() -> Decorator:
    """The deprecated positional MACHINE of `topology` and `collective` (use --machine)."""
    return click.argument("machine_arg", metavar="[MACHINE]", required=False)


def resolve_machine(positional: str | None, option: str | None, command: str) -> str:
    """The machine of a command that once took it as a positional argument: `--machine`,
    or the positional form with a deprecation warning; ConfigError when neither or two
    different ones are given."""
    from simulator.errors import ConfigError

    if positional is not None:
        if option is not None and option.strip().lower() != positional.strip().lower():
            raise ConfigError(
                f"--machine {option} and the machine argument {positional} disagree: give "
                "--machine only"
            )
        warn(
            f"the machine as an argument (axsim {command} {positional}) is deprecated: "
            f"use axsim {command} --machine {positional}"
        )
        return positional
    if option is None:
        raise ConfigError(f"--machine: give the machine, e.g. axsim {command} --machine dgx-h100")
    return option


def preset_nodes(machine: str, gpus: int | None, nodes: int | None) -> int | None:
    """The node count `--gpus` / `--nodes` describe on a machine preset; ConfigError naming
    the flags when GPUs do not fill whole nodes or the two disagree."""
    from simulator.errors import ConfigError
    from topologies.catalogue import machine_preset

    if gpus is None:
        return nodes
    per_node = machine_preset(machine).gpus_per_node
    if gpus % per_node:
        raise ConfigError(
            f"--gpus {gpus}: not a multiple of the {per_node} GPUs of a {machine} node"
        )
    if nodes is not None and nodes * per_node != gpus:
        raise ConfigError(disagree_message(machine, per_node, gpus, nodes))
    return gpus // per_node


def disagree_message(machine: str, per_node: int, gpus: int, nodes: int) -> str:
    """The one line for --gpus and --nodes that name different sizes."""
    return (
        f"--gpus {gpus} and --nodes {nodes} disagree: a {machine} node has {per_node} GPUs, "
        f"so {nodes} nodes are {nodes * per_node} GPUs (give one of them)"
    )
