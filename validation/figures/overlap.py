"""AxoNN's overlap optimisations: the ablation and the per-model-size breakdown.

Each case takes the grid `axsim search` picks with all three optimisations on (the
weak-scaling search, shared) and re-simulates it with the flags added one at a time:
baseline (none), +OAR (backward all-reduce hidden behind the dW GEMM), +ORS (Z
reduce-scatter waited once after the backward), +OAG (next layer's Z all-gather
prefetched). Bars split the time per batch into compute and exposed communication on
the critical rank.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from validation.experiments.simulations import OVERLAP_STEPS
from validation.experiments.tasks import Built, Figure, FigureOutput, Task, task
from validation.figures.plotting import caption, grid_text, model_label, pyplot, save
from validation.figures.published_overlay import (
    PublishedSeries,
    overlay,
    register,
    register_missing,
)
from validation.figures.weak_scaling import (
    REDUCED_TOP,
    TOP,
    batch_tokens,
    points,
    search_task,
    search_what,
)
from validation.published import load_yaml, source

ABLATION = [("frontier", 8192, "gpt-80b"), ("perlmutter", 2048, "gpt-20b")]
REDUCED_ABLATION = [("frontier", 16, "gpt-tiny"), ("perlmutter", 8, "gpt-tiny")]
STEPS = [label for label, _ in OVERLAP_STEPS]


def overlap_task(machine: str, gpus: int, model: str, reduced: bool) -> Task:
    """The overlap steps of one point, after (and reusing) its search."""
    return task(
        "axonn_overlap",
        deps=[search_task(machine, gpus, model, reduced)],
        label=f"overlap steps {model} on {gpus} {machine}",
        machine=machine,
        gpus=gpus,
        model=model,
        top=REDUCED_TOP if reduced else TOP,
        batch_tokens=batch_tokens(reduced),
    )


def _with_searches(cases: list[tuple[str, int, str]], reduced: bool) -> list[Task]:
    out = []
    for m, g, mod in cases:
        out += [search_task(m, g, mod, reduced), overlap_task(m, g, mod, reduced)]
    return out


def _numbers(machine: str, gpus: int, model: str, res: dict[str, Any]) -> dict[str, Any]:
    steps = res["steps"]
    base = steps["baseline"]["iteration_time_s"]
    return {
        "machine": machine,
        "gpus": gpus,
        "model": model,
        "grid": grid_text(res["grid"]),
        **{f"time_s[{s}]": steps[s]["iteration_time_s"] for s in STEPS},
        **{f"exposed_comm_s[{s}]": steps[s]["exposed_comm_time_s"] for s in STEPS},
        "improvement_percent": 100.0 * (base / steps["+OAG"]["iteration_time_s"] - 1.0),
    }


def _bars(ax: Any, x0: float, width: float, res: dict[str, Any], legend: bool) -> None:
    """Stacked bars per step: compute, exposed communication, the rest (host dispatch,
    waiting on other ranks); their sum is the time per batch."""
    colours = (("compute", "#4c72b0"), ("exposed communication", "#dd8452"), ("other", "#bbbbbb"))
    for i, s in enumerate(STEPS):
        r = res["steps"][s]
        comp, comm = r["compute_time_s"], r["exposed_comm_time_s"]
        parts = (comp, comm, max(r["iteration_time_s"] - comp - comm, 0.0))
        bottom = 0.0
        for (label, colour), h in zip(colours, parts, strict=True):
            ax.bar(
                x0 + i * width,
                h,
                width * 0.9,
                bottom=bottom,
                color=colour,
                label=label if legend and i == 0 else None,
            )
            bottom += h


def _case_line(machine: str, gpus: int, model: str, res: dict[str, Any]) -> str:
    steps = res["steps"]
    times = ", ".join(f"{s} {steps[s]['iteration_time_s']:.4g} s" for s in STEPS)
    n = _numbers(machine, gpus, model, res)
    return (
        f"{model_label(model)} on {gpus} {machine} {'GCDs' if machine == 'frontier' else 'GPUs'}, grid {grid_text(res['grid'])}, "
        f"microbatch {res['microbatch_sequences']}: {times} (all three vs none: "
        f"{n['improvement_percent']:+.1f}% throughput)"
    )


def _published_line() -> str:
    """The one published overlap number the repo holds (not plotted: its setup is unknown)."""
    data = load_yaml("axonn_overlap")
    return (
        f"Published (not plotted, machine and GPU count not given): "
        f'"nearly {data["improvement_percent"]}% improvement" for a 20B model. '
        f"Source: {source('axonn_overlap')}."
    )


STEP_TEXT = (
    "Steps: baseline = no overlap; +OAR = asynchronous backward all-reduce of dI behind "
    "the dW GEMM; +ORS = also the Z reduce-scatter of dW waited once after the backward; "
    "+OAG = also the next layer's Z all-gather prefetched. The grid is the one the search "
    "picks with all three on, kept fixed for every step. "
)


def _render_ablation(built: Built, out: Path, reduced: bool) -> FigureOutput:
    cases = REDUCED_ABLATION if reduced else ABLATION
    results = [r for t, r in built if t.fn == "axonn_overlap"]
    plt = pyplot()
    fig, axes = plt.subplots(1, len(cases), figsize=(5.2 * len(cases), 4.2))
    for ax, (m, g, mod), res in zip(axes, cases, results, strict=True):
        _bars(ax, 0.0, 1.0, res, legend=ax is axes[0])
        if not reduced:  # the published times are for the full-size case only
            overlay(ax, "overlap-ablation", m, connect=False)
            ax.legend(fontsize=8, loc="upper right")
        ax.set_xticks(range(len(STEPS)), STEPS)
        unit = "GCDs" if m == "frontier" else "GPUs"
        ax.set_title(
            f"{model_label(mod)}, {g} {m} {unit} (grid {grid_text(res['grid'])})", fontsize=10
        )
        ax.set_ylabel("time per batch (s)")
        ax.grid(axis="y", alpha=0.3)
    # below the bars, never over them
    fig.legend(loc="lower center", ncol=3, fontsize=8, frameon=False, bbox_to_anchor=(0.5, -0.06))
    fig.suptitle("AxoNN overlap ablation (simulated)")
    text = caption(
        "AxoNN overlap ablation",
        STEP_TEXT + search_what(reduced),
        [
            *(_case_line(m, g, mod, r) for (m, g, mod), r in zip(cases, results, strict=True)),
            _published_line(),
        ],
        [s for r in results for s in r["steps"].values()],
    )
    numbers = [_numbers(m, g, mod, r) for (m, g, mod), r in zip(cases, results, strict=True)]
    return FigureOutput("overlap-ablation", save(fig, out, "overlap-ablation", text), text, numbers)


def _render_breakdown(built: Built, out: Path, reduced: bool) -> FigureOutput:
    pts = points("frontier", reduced)
    results = [r for t, r in built if t.fn == "axonn_overlap"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(pts)), 4.4))
    width = 0.2
    for i, res in enumerate(results):
        base = res["steps"]["baseline"]["iteration_time_s"]
        norm = {
            s: {k: v / base for k, v in r.items() if k.endswith("_s") and isinstance(v, float)}
            for s, r in res["steps"].items()
        }
        _bars(ax, i - 1.5 * width, width, {"steps": norm}, legend=i == 0)
    ax.set_xticks(range(len(pts)), [f"{model_label(m)}\n{g} GCDs" for g, m in pts], fontsize=8)
    ax.set_ylabel("time per batch / baseline")
    ax.set_ylim(0, 1.08)
    ax.set_title("bars per size: " + ", ".join(STEPS), fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8, frameon=False)
    fig.suptitle("AxoNN optimisation breakdown per model size on Frontier (simulated)")
    text = caption(
        "AxoNN optimisation breakdown on Frontier",
        STEP_TEXT + "Times are normalised to each size's baseline. " + search_what(reduced),
        [_case_line("frontier", g, m, r) for (g, m), r in zip(pts, results, strict=True)],
        [s for r in results for s in r["steps"].values()],
    )
    numbers = [_numbers("frontier", g, m, r) for (g, m), r in zip(pts, results, strict=True)]
    name = "optimisation-breakdown"
    return FigureOutput(name, save(fig, out, name, text), text, numbers)


def _frontier_ablation() -> list[PublishedSeries]:
    data = load_yaml("axonn_frontier_overlap")
    steps = [s["name"] for s in data["steps"]]
    times = [float(s["time_per_batch_s"]) for s in data["steps"]]
    return [
        PublishedSeries(
            "AxoNN SC'24 Fig. 5",
            [float(STEPS.index(n)) for n in steps],
            times,
            source("axonn_frontier_overlap"),
            "frontier",
            approximate=True,
        )
    ]


# the Frontier panel carries the SC'24 ablation; the 2023 preprint's "nearly 53%" for a
# 20B model names no machine or scale, so it is quoted in the caption, not plotted
register("overlap-ablation", _frontier_ablation)
register_missing(
    "optimisation-breakdown",
    "The AxoNN paper's per-model breakdown on Frontier has not been transcribed into "
    "validation/published/.",
)

FIGURES = (
    Figure(
        "overlap-ablation",
        "overlap",
        "AxoNN overlap ablation: baseline, +OAR, +ORS, +OAG (GPT-80B Frontier, GPT-20B Perlmutter)",
        lambda reduced: _with_searches(REDUCED_ABLATION if reduced else ABLATION, reduced),
        _render_ablation,
    ),
    Figure(
        "optimisation-breakdown",
        "overlap",
        "AxoNN optimisation breakdown per model size on Frontier",
        lambda reduced: _with_searches(
            [("frontier", g, m) for g, m in points("frontier", reduced)], reduced
        ),
        _render_breakdown,
    ),
)
