"""Commands of the `validation` package, plugged into `axsim` by the `axsim.commands`
entry point (the simulator never imports validation).

Each command lives in its own module and exposes `register(app)`; this function only
calls them, so adding a command is one line here.
"""

from __future__ import annotations

import click


def register(app: click.Group) -> None:
    """Add every validation command to the axsim group."""
    from validation.commands.calibrate import register as register_calibrate
    from validation.commands.compare import register as register_compare
    from validation.commands.figures import register as register_figures
    from validation.commands.validate import register as register_validate
    from validation.torch4d.command import register as register_trace_torch

    register_trace_torch(app)
    register_calibrate(app)
    register_compare(app)
    register_figures(app)
    register_validate(app)
