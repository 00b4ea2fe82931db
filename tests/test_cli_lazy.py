"""The CLI imports a command only when it is called: `axsim --version` loads neither the
pydantic config, the engine, numpy nor the validation package, and a call loads only its
own command's module."""

from __future__ import annotations

import json
import subprocess
import sys

WATCHED = [
    "pydantic",
    "simpy",
    "numpy",
    "simulator.config",
    "simulator.engine.core",
    "validation",
    "simulator.commands.simulate",
    "simulator.commands.collective",
    "simulator.cost.calibration",
    "simulator.outputs.report",
]


def _modules_after(code: str) -> dict[str, bool]:
    """Which WATCHED modules a fresh interpreter has imported after running `code`."""
    probe = (
        f"import sys, json\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {WATCHED!r}}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_version_imports_no_command() -> None:
    loaded = _modules_after(
        "from simulator.cli import main\n"
        "try:\n    main(['--version'])\nexcept SystemExit:\n    pass"
    )
    assert not any(loaded.values()), [m for m, v in loaded.items() if v]


def test_a_call_imports_only_its_command() -> None:
    loaded = _modules_after("from simulator.cli import main\nmain(['collective', '--help'])")
    assert loaded["simulator.commands.collective"]
    assert not loaded["simulator.commands.simulate"]
    assert not loaded["simulator.config"] and not loaded["validation"]
    assert not loaded["pydantic"] and not loaded["simpy"]


def test_a_collective_run_needs_no_config_report_or_calibration_models() -> None:
    loaded = _modules_after(
        "from simulator.cli import main\n"
        "try:\n    main(['collective', '--machine', 'dgx-h100', '--nodes', '1', '--group', '8',"
        " '--bytes', '64M'])\nexcept SystemExit:\n    pass"
    )
    assert loaded["simulator.commands.collective"] and loaded["simpy"]
    # pydantic itself loads since issue 18: the pricer's protocol tables
    # (simulator/network/protocols.py) are user-file models
    for heavy in (
        "simulator.config",
        "simulator.outputs.report",
        "simulator.cost.calibration",
    ):
        assert not loaded[heavy], heavy


def test_help_lists_every_command_including_plugins() -> None:
    from click.testing import CliRunner

    from simulator.cli import COMMANDS, app

    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    for name in [*COMMANDS, "validate", "calibrate", "compare", "figures", "trace-torch"]:
        assert f"  {name} " in result.output


def test_the_collective_command_names_the_protocols_the_model_has() -> None:
    from simulator.commands import collective
    from simulator.network import protocols

    assert collective.PROTOCOLS == protocols.PROTOCOLS
