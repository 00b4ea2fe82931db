"""The `axsim` command line: the composition root.

Each sub-command lives in `simulator/commands/<name>.py` and exposes `register(app)`,
which adds a click command to the group.
Commands of the `validation` package (calibrate, compare, trace-torch, figures, validate)
are plugged in through the `axsim.commands` entry-point group, so `simulator` never
imports `validation` (imports flow one way; see docs/DESIGN.md).

Errors: any user mistake (bad flag, config, trace) prints one line `axsim: error: ...` on
stderr and exits with code 2; no traceback.
"""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.metadata import entry_points

import click

from simulator.errors import SimulatorError
from topologies.errors import TopologyError
from workloads.errors import WorkloadError

USER_ERRORS: tuple[type[BaseException], ...] = (SimulatorError, TopologyError, WorkloadError)

COMMAND_MODULES = (
    "simulator.commands.schema",
    "simulator.commands.topology",
    "simulator.commands.collective",
    "simulator.commands.simulate",
    "simulator.commands.search",
    "simulator.commands.bench",
    "simulator.commands.compare_strategies",
    "simulator.commands.sweep",
    "simulator.commands.presets",
)


@click.group(name="axsim", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="axsim", prog_name="axsim")
def app() -> None:
    """Discrete-event simulator of distributed LLM training on GPU supercomputers."""


def _register_all() -> None:
    for mod_name in COMMAND_MODULES:
        try:
            mod = import_module(mod_name)
        except ModuleNotFoundError as e:
            if e.name == mod_name:
                continue  # command not built yet
            raise
        mod.register(app)
    for ep in entry_points(group="axsim.commands"):
        try:
            ep.load()(app)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("validation"):
                continue
            raise


_register_all()


def one_line(message: str) -> str:
    """A message as one printable line: newlines become spaces and other control
    characters escapes (a user's value may hold them; str.splitlines splits on \x1e)."""
    text = " ".join(message.replace("\r", "\n").split("\n"))
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _error(message: str) -> None:
    print(f"axsim: error: {one_line(message)}", file=sys.stderr)


def fail(message: str) -> None:
    """Print one error line and exit with code 2."""
    _error(message)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point."""
    try:
        result = app.main(args=argv, prog_name="axsim", standalone_mode=False)
    except click.exceptions.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            click.echo(e.ctx.get_help())
            return 0
        _error(e.format_message())
        return 2
    except click.exceptions.Abort:
        print("axsim: aborted", file=sys.stderr)
        return 130
    except click.exceptions.Exit as e:
        return int(e.exit_code or 0)
    except click.ClickException as e:
        _error(e.format_message())
        return 2
    except USER_ERRORS as e:
        _error(str(e))
        return 2
    except ImportError as e:
        if e.name is not None and e.name in _optional_modules():
            _error(f"{e.name} is not installed ({_optional_modules()[e.name]})")
            return 2
        raise
    except BrokenPipeError:
        return 0
    return int(result or 0)


def _optional_modules() -> dict[str, str]:
    return {
        "torch": "in the axsim checkout: pip install -e '.[torch]'",
        "dask": "in the axsim checkout: pip install -e '.[dask]'",
        "distributed": "in the axsim checkout: pip install -e '.[dask]'",
        "matplotlib": "in the axsim checkout: pip install -e '.[figures]'",
        "hta": "in the axsim checkout: pip install -e '.[hta]'",
    }


if __name__ == "__main__":
    sys.exit(main())
