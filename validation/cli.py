"""Commands of the `validation` package, plugged into `axsim` by the `axsim.commands`
entry point (the simulator never imports validation).

Each command lives in its own module and exposes `register(app)`; this function only
names them, so adding a command is one line here. A group that loads commands lazily
(simulator/cli.py `LazyGroup`) imports a module only when its command is called.
"""

from __future__ import annotations

from importlib import import_module

import click

COMMANDS = {
    "trace-torch": "validation.torch4d.command",
    "calibrate": "validation.commands.calibrate",
    "compare": "validation.commands.compare",
    "figures": "validation.commands.figures",
    "validate": "validation.commands.validate",
}


def register(app: click.Group) -> None:
    """Add every validation command to the axsim group (lazily where it can)."""
    add_lazy = getattr(app, "add_lazy_command", None)
    for name, module in COMMANDS.items():
        if add_lazy is not None:
            add_lazy(name, module)
        else:
            import_module(module).register(app)
