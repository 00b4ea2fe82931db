"""AxoNN weak scaling (time per batch and sustained flop/s) on Perlmutter, Frontier, Alps.

The paper's points (GPU count doubles with the model): Perlmutter 512 GPT-5B ... 4,096
GPT-40B; Frontier 512 GCDs GPT-5B ... 32,768 GCDs GPT-320B; Alps 1,024 GPT-10B ...
6,144 GPT-60B. Each point is `axsim search`'s procedure (`search_task`, shared with the
overlap and Megatron figures and with `axsim validate`). The published Perlmutter values
are overlaid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from validation.experiments.tasks import Built, Figure, FigureOutput, Task, task
from validation.figures.plotting import caption, grid_text, model_label, pyplot, save
from validation.figures.published_overlay import (
    PublishedSeries,
    overlay,
    register,
    register_missing,
)
from validation.published import ScalingPoint, axonn_frontier, axonn_perlmutter, source

POINTS: dict[str, list[tuple[int, str]]] = {
    "perlmutter": [(512, "gpt-5b"), (1024, "gpt-10b"), (2048, "gpt-20b"), (4096, "gpt-40b")],
    "frontier": [
        (512, "gpt-5b"),
        (1024, "gpt-10b"),
        (2048, "gpt-20b"),
        (4096, "gpt-40b"),
        (8192, "gpt-80b"),
        (16384, "gpt-160b"),
        (32768, "gpt-320b"),
    ],
    "alps": [(1024, "gpt-10b"), (2048, "gpt-20b"), (4096, "gpt-40b"), (6144, "gpt-60b")],
}
REDUCED_POINTS: dict[str, list[tuple[int, str]]] = {
    "perlmutter": [(4, "gpt-tiny"), (8, "gpt-tiny")],
    "frontier": [(8, "gpt-tiny"), (16, "gpt-tiny")],
    "alps": [(4, "gpt-tiny"), (8, "gpt-tiny")],
}
TOP, REDUCED_TOP = 10, 2
REDUCED_BATCH_TOKENS = 2048  # 64 sequences of GPT-tiny's 32 tokens
UNIT = {"frontier": "GCDs"}


def batch_tokens(reduced: bool) -> int | None:
    """The global batch: the paper's 2^24 tokens (the default), or a tiny one."""
    return REDUCED_BATCH_TOKENS if reduced else None


def search_task(machine: str, gpus: int, model: str, reduced: bool) -> Task:
    """The search for one point (identical everywhere it is used, so it runs once)."""
    return task(
        "axonn_search",
        label=f"search {model} on {gpus} {machine}",
        machine=machine,
        gpus=gpus,
        model=model,
        top=REDUCED_TOP if reduced else TOP,
        batch_tokens=batch_tokens(reduced),
    )


def points(machine: str, reduced: bool) -> list[tuple[int, str]]:
    return (REDUCED_POINTS if reduced else POINTS)[machine]


def search_what(reduced: bool) -> str:
    """The search procedure, for captions."""
    top = REDUCED_TOP if reduced else TOP
    setup = (
        f"a reduced run: GPT-tiny (2 layers, hidden 64, sequence 32, vocabulary 256), global batch {REDUCED_BATCH_TOKENS} tokens"
        if reduced
        else "sequence length 2048, vocabulary 51,200, global batch 2^24 tokens"
    )
    return (
        "AxoNN 4D with the paper's setup (bf16, fp32 master weights, activation "
        f"checkpointing, {setup}; OAR, ORS and OAG on). Grid per point: `axsim search`'s procedure: every valid, "
        "memory-feasible X x Y x Z x data grid ranked by the paper's analytical "
        "communication model (Eqs. 1-7) with group bandwidths measured by axsim's own "
        f"collective model on the machine (1 GiB concurrent all-reduces), the top {top} "
        "simulated, the fastest shown; microbatch = the largest that fits. Where Y "
        "does not divide the vocabulary (a factor 3 at 6,144 GPUs) it is padded to a "
        "multiple of Y, as Megatron-LM pads it; model FLOPs count the real vocabulary."
    )


def point_line(gpus: int, model: str, res: dict[str, Any], unit: str = "GPUs") -> str:
    """One caption line for a search result."""
    r = res["report"]
    return (
        f"{gpus} {unit}, {model_label(model)}: grid {grid_text(res['grid'])} (model rank "
        f"{res['model_rank']} of {res['candidates']}), microbatch "
        f"{res['microbatch_sequences']} seq; {r['iteration_time_s']:.4g} s per batch, "
        f"{r['pflops_total']:.4g} PFLOP/s ({r['percent_of_advertised_peak']:.3g}% of "
        "advertised peak)"
    )


def _tasks(machine: str) -> Any:
    def tasks(reduced: bool) -> list[Task]:
        return [search_task(machine, g, m, reduced) for g, m in points(machine, reduced)]

    return tasks


def _render(machine: str) -> Any:
    def render(built: Built, out: Path, reduced: bool) -> FigureOutput:
        name = f"weak-scaling-{machine}"
        unit = UNIT.get(machine, "GPUs")
        pts = points(machine, reduced)
        res = [r for _, r in built]
        published = {(p.gpus, p.model): p for p in PUBLISHED.get(machine, list)()}
        plt = pyplot()
        fig, (ax_t, ax_f) = plt.subplots(1, 2, figsize=(11, 4.2))
        xs = [g for g, _ in pts]
        ax_t.plot(xs, [r["report"]["iteration_time_s"] for r in res], "o-", label="axsim")
        ax_f.plot(xs, [r["report"]["pflops_total"] for r in res], "o-", label="axsim")
        for (g, _m), r in zip(pts, res, strict=True):
            ax_f.annotate(
                f"{r['report']['percent_of_advertised_peak']:.3g}%",
                (g, r["report"]["pflops_total"]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
        pub = [(g, published[(g, m)]) for g, m in pts if (g, m) in published]
        if pub:  # the published scales are the simulated ones (not in --reduced figures)
            overlay(ax_t, name, "time")
            overlay(ax_f, name, "pflops")
        for ax, ylabel in ((ax_t, "time per batch (s)"), (ax_f, "sustained PFLOP/s")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [f"{g}\n{model_label(m)}" for g, m in pts], fontsize=8)
            ax.minorticks_off()
            ax.set_xlabel(f"{unit} / model")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        ax_f.set_yscale("log")
        ax_f.margins(y=0.15)  # room for the % of peak labels above the points
        # weak scaling: how far from flat, on an axis from zero (with room above the points)
        tops = [r["report"]["iteration_time_s"] for r in res] + [p.time_per_batch_s for _, p in pub]
        ax_t.set_ylim(0, 1.12 * max(tops))
        fig.suptitle(f"AxoNN weak scaling on {machine.capitalize()} (simulated)")
        rows = [point_line(g, m, r, unit) for (g, m), r in zip(pts, res, strict=True)]
        if pub:
            rows.append(
                "Published: "
                + "; ".join(f"{g} GPUs {p.pflops} PFLOP/s, ≈{p.time_per_batch_s} s" for g, p in pub)
            )
        text = caption(
            f"AxoNN weak scaling on {machine}",
            search_what(reduced),
            rows,
            [r["report"] for r in res],
        )
        numbers = [
            {
                "gpus": g,
                "model": m,
                "grid": grid_text(r["grid"]),
                "time_s": r["report"]["iteration_time_s"],
                "pflops": r["report"]["pflops_total"],
                "percent_of_peak": r["report"]["percent_of_advertised_peak"],
                **({"published_pflops": published[(g, m)].pflops} if (g, m) in published else {}),
            }
            for (g, m), r in zip(pts, res, strict=True)
        ]
        return FigureOutput(name, save(fig, out, name, text), text, numbers)

    return render


PUBLISHED: dict[str, Any] = {"perlmutter": axonn_perlmutter, "frontier": axonn_frontier}


def _published(machine: str) -> Any:
    def load() -> list[PublishedSeries]:
        pts: list[ScalingPoint] = PUBLISHED[machine]()
        src = source(f"axonn_{machine}")
        gpus = [p.gpus for p in pts]
        # Perlmutter's times are read off Fig. 6; Frontier's follow from Table III's flop/s
        approx = machine == "perlmutter"
        return [
            PublishedSeries("AxoNN sustained PFLOP/s", gpus, [p.pflops for p in pts], src,
                            "pflops"),
            PublishedSeries("AxoNN time per batch", gpus, [p.time_per_batch_s for p in pts],
                            src, "time", approximate=approx),
        ]  # fmt: skip

    return load


for _m in PUBLISHED:
    register(f"weak-scaling-{_m}", _published(_m))
register_missing(
    "weak-scaling-alps",
    "the AxoNN paper's Alps numbers are deliberately not in the repository: Alps is the "
    "machine axsim's predictions are checked on blind.",
)

FIGURES = tuple(
    Figure(
        name=f"weak-scaling-{m}",
        family="weak-scaling",
        title=f"AxoNN weak scaling on {m}: time per batch and sustained flop/s",
        tasks=_tasks(m),
        render=_render(m),
    )
    for m in ("perlmutter", "frontier", "alps")
)
