"""`axsim figures`: every figure builds at reduced size (PNG, SVG, caption, key numbers),
the registry and `--only`, task sharing, failure isolation and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from simulator.cli import main
from simulator.errors import ConfigError
from tests.cli_helpers import assert_valid_output
from validation.experiments.runner import TaskFailed, build_figures, run_tasks
from validation.experiments.tasks import Figure, FigureOutput, task
from validation.figures import all_figures, select
from validation.published import axonn_bandwidths, axonn_perlmutter

pytest.importorskip("matplotlib")
NAMES = [f.name for f in all_figures()]
CALLS: list[int] = []


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, FigureOutput]]:
    out = tmp_path_factory.mktemp("figures")
    outputs, _ = build_figures(all_figures(), out, reduced=True, jobs=2)
    return out, {o.name: o for o in outputs}


def test_registry_has_every_requested_figure() -> None:
    assert len(NAMES) == len(set(NAMES))
    assert set(NAMES) == {
        "weak-scaling-perlmutter",
        "weak-scaling-frontier",
        "weak-scaling-alps",
        "overlap-ablation",
        "optimisation-breakdown",
        "analytical-ranking",
        "axonn-vs-megatron",
        "optimus-vs-megatron",
        "zero-frontier",
        "fsdp-scaling",
        "nccl-busbw",
    }
    assert [f.name for f in select("weak-scaling")] == NAMES[:3]  # a family name selects all
    with pytest.raises(ConfigError, match="unknown figure 'nope'"):
        select("nope")


@pytest.mark.parametrize("name", NAMES)
def test_figure_builds_at_reduced_size(
    built: tuple[Path, dict[str, FigureOutput]], name: str
) -> None:
    out, outputs = built
    o = outputs[name]
    assert o.error is None, o.error
    exts = ("png", "svg", "pdf", "md")
    assert {p.name for p in o.files} == {f"{name}.{ext}" for ext in exts}
    assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    svg = (out / f"{name}.svg").read_text()
    assert "<svg" in svg[:2000] and "<text" in svg  # labels are editable text
    text = (out / f"{name}.md").read_text()
    assert text.startswith("# ") and "Engine mode" in text and "calibration" in text
    # every caption says what is published for the figure: overlaid, or why not
    assert "Published (overlaid" in text or "Published values: not available" in text
    assert o.numbers and all(isinstance(n, dict) and n for n in o.numbers)


def test_published_data_has_sources() -> None:
    pts = axonn_perlmutter()
    assert [(p.gpus, p.model) for p in pts] == [
        (512, "gpt-5b"),
        (1024, "gpt-10b"),
        (2048, "gpt-20b"),
        (4096, "gpt-40b"),
    ]
    assert [p.pflops for p in pts] == [80.8, 197.8, 352.5, 620.1]
    assert {e.machine for e in axonn_bandwidths()} == {"perlmutter", "frontier"}


def counted(x: int) -> int:
    """A task function for the runner tests (counts its calls)."""
    CALLS.append(x)
    return x * 2


def broken() -> None:
    raise RuntimeError("boom")


def test_identical_tasks_run_once_and_deps_see_results() -> None:
    CALLS.clear()
    a = task("tests.test_figures:counted", x=3)
    results = run_tasks([a, task("tests.test_figures:counted", x=3)], jobs=1)
    assert CALLS == [3] and results == {a.key: 6}


def test_a_failing_task_fails_only_its_figure(tmp_path: Path) -> None:
    def render(built: Any, out: Path, reduced: bool) -> FigureOutput:
        return FigureOutput("good", numbers=[{"v": built[0][1]}])

    good = Figure("good", "t", "t", lambda r: [task("tests.test_figures:counted", x=1)], render)
    bad = Figure("bad", "t", "t", lambda r: [task("tests.test_figures:broken")], render)
    outputs, _ = build_figures([bad, good], tmp_path, reduced=True, jobs=1)
    assert "RuntimeError: boom" in (outputs[0].error or "")
    assert outputs[1].error is None and outputs[1].numbers == [{"v": 2}]
    res = run_tasks([task("tests.test_figures:broken")])
    assert isinstance(next(iter(res.values())), TaskFailed)


def test_cli_one_figure_and_unknown_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["figures", "--reduced", "--jobs", "1", "--out", str(tmp_path), "--json"]
    assert main([*args, "--only", "nccl-busbw"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert_valid_output("figures", summary)
    assert [f["name"] for f in summary["figures"]] == ["nccl-busbw"]
    assert summary["figures"][0]["error"] is None and (tmp_path / "summary.json").is_file()
    assert main([*args, "--only", "no-such-figure"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error: --only: unknown figure 'no-such-figure'")
    assert "\n" not in err
