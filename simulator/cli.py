"""The `axsim` command line: the composition root.

Each sub-command lives in `simulator/commands/<name>.py` and exposes `register(app)`,
which adds a click command to the group; the group imports a command's module only when
the command is called or listed (`LazyGroup`), so a call pays only for its own imports.
Commands of the `validation` package (calibrate, compare, trace-torch, figures, validate)
are plugged in through the `axsim.commands` entry-point group, so `simulator` never
imports `validation` (imports flow one way; see docs/DESIGN.md).

Errors: any user mistake (bad flag, config, trace) prints one line `axsim: error: ...` on
stderr and exits with code 2; no traceback.
"""

from __future__ import annotations

import errno
import sys
from importlib import import_module

import click

from simulator.errors import SimulatorError
from simulator.process import GuardedStdout, StdoutError, Terminated, signals_as_exceptions
from topologies.errors import TopologyError
from workloads.errors import WorkloadError

USER_ERRORS: tuple[type[BaseException], ...] = (SimulatorError, TopologyError, WorkloadError)

# command name -> module whose `register(app)` adds it. Listed here (not discovered by
# importing) so that a call imports only its own command: `axsim --version` imports none,
# `axsim collective` only the collective command (the pydantic config, the engine and the
# validation package stay unloaded).
COMMANDS = {
    "schema": "simulator.commands.schema",
    "topology": "simulator.commands.topology",
    "collective": "simulator.commands.collective",
    "simulate": "simulator.commands.simulate",
    "search": "simulator.commands.search",
    "bench": "simulator.commands.bench",
    "compare-strategies": "simulator.commands.compare_strategies",
    "sweep": "simulator.commands.sweep",
    "presets": "simulator.commands.presets",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


class LazyGroup(click.Group):
    """A click group whose commands are imported when they are called or listed.

    Plug-in packages (the `axsim.commands` entry points) are asked for their commands only
    when a name is not one of ours or the command list is shown; a plug-in's `register(app)`
    may declare its commands lazily with `app.add_lazy_command(name, module)`.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy: dict[str, str] = dict(COMMANDS)
        self.plugins_loaded = False

    def add_lazy_command(self, name: str, module: str) -> None:
        """Declare that `module`'s `register(app)` adds the command `name`."""
        self.lazy.setdefault(name, module)

    def _load(self, name: str) -> None:
        module = self.lazy.pop(name, None)
        if module is None:
            return
        for other, mod in list(self.lazy.items()):  # one module may add several commands
            if mod == module:
                del self.lazy[other]
        import_module(module).register(self)

    def _load_plugins(self) -> None:
        if self.plugins_loaded:
            return
        self.plugins_loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group="axsim.commands"):
            try:
                ep.load()(self)
            except ModuleNotFoundError as e:
                if e.name and e.name.startswith("validation"):
                    continue
                raise

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name not in self.lazy:
            self._load_plugins()
        if cmd_name not in self.commands:
            self._load(cmd_name)
        return self.commands.get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_plugins()
        return sorted(set(self.commands) | set(self.lazy))


def one_line(message: str) -> str:
    """A message as one printable line: newlines become spaces and other control
    characters escapes (a user's value may hold them; str.splitlines splits on \x1e)."""
    text = " ".join(message.replace("\r", "\n").split("\n"))
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in text)


def _error(message: str) -> None:
    print(f"axsim: error: {one_line(message)}", file=sys.stderr)


@click.group(name="axsim", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="axsim", prog_name="axsim")
def app() -> None:
    """Discrete-event simulator of distributed LLM training on GPU supercomputers."""


def fail(message: str) -> None:
    """Print one error line and exit with code 2."""
    _error(message)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: the command's exit code. SIGTERM and SIGHUP end it
    like Ctrl-C, through the cleanups (staged outputs removed, worker pools shut down);
    standard output that is closed or fails (a full device) is one error line and exit 2
    (a reader that stops reading, a broken pipe: exit 141 quietly, as `head` expects)."""
    with signals_as_exceptions(), GuardedStdout() as stdout:
        try:
            code = _main(argv)
            stdout.flush()
        except Terminated as e:
            print(f"axsim: terminated by signal {e.signum}", file=sys.stderr)
            return 128 + e.signum
        except StdoutError as e:
            stdout.silence()
            if e.errno == errno.EPIPE:
                return 141
            _error(f"cannot write to standard output ({e.strerror})")
            return 2
        return code


def _main(argv: list[str] | None) -> int:
    try:
        result = app.main(args=argv, prog_name="axsim", standalone_mode=False)
    except click.exceptions.UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError" and e.ctx is not None:
            click.echo(e.ctx.get_help())
            return 0
        _error(e.format_message())
        return 2
    except (click.exceptions.Abort, KeyboardInterrupt):
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
