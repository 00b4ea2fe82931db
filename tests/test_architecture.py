"""Import rules of docs/DESIGN.md, checked on the source (AST), not at run time.

- topologies/ imports none of our other packages; workloads/ imports exactly one module of
  topologies/, topologies.user_input.model (the user-file base and its error formatter).
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
# single modules a package may import from a package it may not otherwise import
ALLOWED_MODULES = {"workloads": {"topologies.user_input.model"}}
RICH_OK = (
    "simulator/cli.py",
    "simulator/outputs/render.py",
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


def _may_import(own: str, name: str) -> bool:
    """Whether a module of package `own` may import module `name` (ours or not)."""
    top = name.split(".")[0]
    if top not in PACKAGES or top == own:
        return True
    return top in ALLOWED[own] or name in ALLOWED_MODULES.get(own, set())


def test_workloads_sees_only_the_user_model_of_topologies() -> None:
    assert _may_import("workloads", "topologies.user_input.model")
    assert not _may_import("workloads", "topologies.types")
    assert not _may_import("workloads", "topologies")
    assert not _may_import("topologies", "workloads.user_model")
    assert _may_import("simulator", "topologies.types")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_flow_one_way(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    own = rel.split("/")[0]
    for name in _imports(path):
        top = name.split(".")[0]
        assert _may_import(own, name), f"{rel} imports {name}: {own} may not import {top}"
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


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> our modules it imports (anywhere in the file: a function-level import is
    still a dependency). `from pkg import name` counts `pkg.name` when that is a module.
    A package's own __init__ is not an edge (importing pkg.sub runs it by construction)."""
    names = {_module_name(p, root): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [module, *(f"{module}.{a.name}" for a in node.names)]
            deps.update(t for t in targets if t in names and t != name)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module."""
    import networkx as nx

    g = nx.DiGraph([(a, b) for a, deps in graph.items() for b in deps])
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def test_no_import_circles() -> None:
    circles = _cycles(_import_graph(_modules()))
    assert not circles, f"import circles: {circles}"


def test_the_circle_check_sees_a_circle(tmp_path: Path) -> None:
    """The check fails on a circle (two modules importing each other, one lazily)."""
    pkg = tmp_path / "simulator"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from simulator.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from simulator import a\n")
    graph = _import_graph(sorted(pkg.glob("*.py")), root=tmp_path)
    assert _cycles(graph) == [["simulator.a", "simulator.b"]]


def test_simulator_root_holds_no_family_with_a_subpackage() -> None:
    """A family spelled by prefix (strategy_*, export_*) or a module named after a
    subpackage (costmodel beside cost/) belongs in that subpackage."""
    sim = ROOT / "simulator"
    subpackages = {p.name for p in sim.iterdir() if (p / "__init__.py").exists()}
    stems = [p.stem for p in sim.glob("*.py") if p.stem not in {"__init__", "__main__"}]
    for stem in stems:
        family = stem.split("_")[0]
        clash = [s for s in subpackages if stem.startswith(s) or s.startswith(family)]
        assert not clash, f"simulator/{stem}.py belongs in simulator/{clash[0]}/"
        kin = [o for o in stems if o != stem and o.split("_")[0] == family]
        assert not kin, f"simulator/{stem}.py and {kin} are one family: give it a subpackage"
