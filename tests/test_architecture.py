"""Import rules of docs/DESIGN.md, checked on the source (AST), not at run time.

- topologies/ imports none of our other packages; workloads/ neither.
- simulator/ may import topologies and workloads, never validation.
- validation/ may import everything.
- only simulator/engine/ imports simpy;
- only the CLI, its commands and the rendering modules import rich.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("topologies", "workloads", "simulator", "validation")
ALLOWED = {
    "topologies": set(),
    "workloads": set(),
    "simulator": {"topologies", "workloads"},
    "validation": {"topologies", "workloads", "simulator"},
}
RICH_OK = (
    "simulator/cli.py",
    "simulator/render.py",
    "simulator/commands/",
    "validation/cli.py",
    "validation/commands/",
    "validation/render",
)


def _modules() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_flow_one_way(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    own = rel.split("/")[0]
    for name in _imports(path):
        top = name.split(".")[0]
        if top in PACKAGES and top != own:
            assert top in ALLOWED[own], f"{rel} imports {name}: {own} may not import {top}"
        if top == "simpy":
            assert rel.startswith("simulator/engine/"), (
                f"{rel} imports simpy (only simulator/engine/ may)"
            )
        if top == "rich":
            assert rel.startswith(RICH_OK), (
                f"{rel} imports rich (only CLI and rendering modules may)"
            )


def test_every_package_is_checked() -> None:
    assert len(_modules()) > 40
