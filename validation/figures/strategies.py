"""AxoNN vs Megatron-LM, Optimus vs Megatron, and ZeRO-3 / ZeRO++ / hierarchical ZeRO++.

AxoNN vs Megatron-LM: each strategy's configuration comes from `axsim
compare-strategies`' search (simulator/trials/strategies.py: memory-feasible degree
combinations, most promising first, the first N simulated, the fastest kept); AxoNN's
from `axsim search` (shared with the weak-scaling figure).

Optimus vs Megatron-LM and the ZeRO family on Frontier reproduce the papers' own setups
(validation/cases/claims.py, the same simulations `axsim validate` checks) and draw the
published ratios beside the simulated ones; `--reduced` runs the claim files' small
stand-in setups.
"""

from __future__ import annotations

from collections.abc import Sequence
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
from validation.figures.weak_scaling import POINTS, REDUCED_BATCH_TOKENS, search_task, search_what
from validation.published import axonn_perlmutter, source

MEGATRON_POINTS = [*POINTS["perlmutter"], (1024, "gpt-80b")]
REDUCED_MEGATRON_POINTS = [(4, "gpt-tiny"), (8, "gpt-tiny")]
ZERO_STRATEGIES = ("zero3", "zeropp", "zeropp-hier")
STAND_IN = (
    " Reduced build: the claim file's small stand-in setup, not the paper's, so the "
    "simulated ratios are not comparable with the published ones."
)


def strategy_task(
    machine: str, gpus: int, model: str, strategy: str, batch: int | None, max_candidates: int
) -> Task:
    """One strategy's search at one point."""
    return task(
        "strategy_best",
        label=f"{strategy} {model} on {gpus} {machine}",
        machine=machine,
        gpus=gpus,
        model=model,
        strategy=strategy,
        batch_tokens=batch,
        max_candidates=max_candidates,
    )


def config_text(res: dict[str, Any]) -> str:
    """The winning configuration of a strategy search, compactly."""
    if res.get("report") is None:
        return f"skipped: {res.get('note')}"
    cfg = {k: v for k, v in (res.get("config") or {}).items() if v is not None and k != "strategy"}
    if "grid" in cfg:
        cfg["grid"] = grid_text(cfg["grid"])
    keep = (
        "grid",
        "tp",
        "pp",
        "shard",
        "q",
        "data",
        "distributed_optimizer",
        "forward_partition",
        "backward_partition",
        "gradient_partition",
        "microbatch_sequences",
    )
    return ", ".join(f"{k}={cfg[k]}" for k in keep if k in cfg).replace(
        "microbatch_sequences", "mbs"
    )


def _time(res: dict[str, Any]) -> float | None:
    rep = res.get("report")
    return None if rep is None else float(rep["iteration_time_s"])


def _grouped(
    ax: Any, labels: Sequence[str], series: dict[str, list[float | None]], ylabel: str
) -> None:
    width = 0.8 / max(len(series), 1)
    for i, (name, vals) in enumerate(series.items()):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(labels))]
        ax.bar(
            [x for x, v in zip(xs, vals, strict=True) if v is not None],
            [v for v in vals if v is not None],
            width * 0.95,
            label=name,
        )
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


# ------------------------------------------------------------------ AxoNN vs Megatron
def _megatron_tasks(reduced: bool) -> list[Task]:
    pts = REDUCED_MEGATRON_POINTS if reduced else MEGATRON_POINTS
    batch = REDUCED_BATCH_TOKENS if reduced else None
    out = []
    for g, m in pts:
        out.append(search_task("perlmutter", g, m, reduced))
        out.append(strategy_task("perlmutter", g, m, "megatron", batch, 2 if reduced else 6))
    return out


def _megatron_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    pts = REDUCED_MEGATRON_POINTS if reduced else MEGATRON_POINTS
    ax_res = [r for t, r in built if t.fn == "axonn_search"]
    mg_res = [r for t, r in built if t.fn == "strategy_best"]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.7 * len(pts)), 4.2))
    labels = [f"{model_label(m)}\n{g} GPUs" for g, m in pts]
    pf = {
        "AxoNN": [r["report"]["pflops_total"] for r in ax_res],
        "Megatron-LM": [
            None if r["report"] is None else r["report"]["pflops_total"] for r in mg_res
        ],
    }
    _grouped(ax, labels, pf, "sustained PFLOP/s")
    if not reduced:  # AxoNN's published points sit on the AxoNN bars (offset -0.2)
        overlay(ax, "axonn-vs-megatron", x_map=lambda i: i - 0.2, connect=False)
    # below the axes: never over the bars or the published markers
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8, frameon=False)
    fig.suptitle("AxoNN vs Megatron-LM on Perlmutter (simulated)")
    numbers, lines = [], []
    for (g, m), a, b in zip(pts, ax_res, mg_res, strict=True):
        ta, tb = a["report"]["iteration_time_s"], _time(b)
        speed = None if tb is None else tb / ta
        numbers.append(
            {
                "gpus": g,
                "model": m,
                "axonn_time_s": ta,
                "megatron_time_s": tb,
                "axonn_speedup": speed,
                "axonn_grid": grid_text(a["grid"]),
                "megatron_config": config_text(b),
            }
        )
        lines.append(
            f"{model_label(m)} on {g} GPUs: AxoNN grid {grid_text(a['grid'])} {ta:.4g} s; "
            f"Megatron-LM ({config_text(b)}) "
            + ("-" if tb is None else f"{tb:.4g} s; AxoNN {speed:.2f}x")
        )
    what = (
        "Same machine, model and global batch for both. Megatron-LM: tensor (sequence) "
        "parallel x 1F1B pipeline x data parallel, with or without the distributed optimizer; "
        f"the first {2 if reduced else 6} memory-feasible configurations in compare-strategies' "
        "order simulated, the fastest shown. AxoNN: " + search_what(reduced)
    )
    reports = [r["report"] for r in ax_res] + [r["report"] for r in mg_res if r["report"]]
    text = caption("AxoNN vs Megatron-LM", what, lines, reports)
    return FigureOutput(
        "axonn-vs-megatron", save(fig, out, "axonn-vs-megatron", text), text, numbers
    )


# ------------------------------------------------------------------ Optimus vs Megatron
def _optimus_tasks(reduced: bool) -> list[Task]:
    from validation.cases.claim_ratios import optimus_tasks

    return optimus_tasks(stand_in=reduced)


def _published_bars(
    ax: Any, labels: list[str], sim: list[float], pub: list[float], units: list[str]
) -> None:
    """Simulated and published values side by side, each bar labelled with its value."""
    xs = range(len(labels))
    for off, vals, name, hatch in ((-0.2, sim, "simulated", None), (0.2, pub, "published", "//")):
        bars = ax.bar([x + off for x in xs], vals, 0.38, label=name, hatch=hatch)
        ax.bar_label(bars, [f"{v:.2f}{u}" for v, u in zip(vals, units, strict=True)], fontsize=8)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)


def _optimus_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    from validation.cases.claims import OPTIMUS, load_claim, optimus_summary, setup_value

    res = [r for _, r in built]
    summ = optimus_summary(res[2:], res[:2])
    claims = load_claim(OPTIMUS).claims
    pub_speed = claims["training_speedup"].published or 0.0
    pub_batch = claims["max_batch_ratio"].published or 0.0
    plt = pyplot()
    fig, (ax_t, ax_r) = plt.subplots(1, 2, figsize=(10, 4.2))
    t = summ["time_s"]
    ax_t.bar(["Megatron-LM", "Optimus"], [t["megatron"], t["optimus"]], color=["C1", "C0"])
    ax_t.set_ylabel(f"iteration time at {summ['batch_sequences']} sequences (s)")
    ax_t.grid(axis="y", alpha=0.3)
    _published_bars(
        ax_r,
        ["training speedup\n(Megatron / Optimus time)", "max batch ratio\n(Optimus / Megatron)"],
        [summ["speedup"], summ["max_batch_ratio"]],
        [pub_speed, pub_batch],
        ["x", "x"],
    )
    model = setup_value(OPTIMUS, "model", reduced)
    gpus = setup_value(OPTIMUS, "gpus", reduced)
    fig.suptitle(
        f"Optimus vs Megatron-LM at the same degree, {gpus} Frontera RTX 5000 (simulated "
        "vs published)"
    )
    mb = summ["max_batch"]
    numbers = [
        {
            "strategy": s,
            "batch_sequences": summ["batch_sequences"],
            "time_s": t[s],
            "max_batch_sequences": mb[s],
        }
        for s in ("megatron", "optimus")
    ] + [
        {
            "speedup": summ["speedup"],
            "published_speedup": pub_speed,
            "max_batch_ratio": summ["max_batch_ratio"],
            "published_max_batch_ratio": pub_batch,
        }
    ]
    lines = [
        f"Megatron-LM ({_parallel_text(res[2])}): {t['megatron']:.4g} s per iteration, "
        f"largest batch {mb['megatron']} sequences",
        f"Optimus ({_parallel_text(res[3])}): {t['optimus']:.4g} s per iteration, "
        f"largest batch {mb['optimus']} sequences",
        f"training speedup {summ['speedup']:.2f}x (published {pub_speed:g}x); max batch ratio "
        f"{summ['max_batch_ratio']:.2f}x (published {pub_batch:g}x)",
    ]
    what = (
        f"{model_label(model)} on {gpus} GPUs, both strategies at the same model-parallel "
        "degree (Optimus one q x q SUMMA mesh, Megatron-LM tensor parallel over all GPUs), "
        f"same batch ({summ['batch_sequences']} sequences: the released benchmark's batch, "
        "or the largest multiple of q below it that both fit). The setup, every value with "
        "its source or stated assumption: validation/published/data/claims/"
        "optimus_frontera.yaml. Published values: the paper's abstract (arXiv 2104.05343)."
    )
    reports = [r["report"] for r in res[2:]]
    text = caption("Optimus vs Megatron-LM", what + (STAND_IN if reduced else ""), lines, reports)
    return FigureOutput(
        "optimus-vs-megatron", save(fig, out, "optimus-vs-megatron", text), text, numbers
    )


def _parallel_text(point: dict[str, Any]) -> str:
    rep = point["report"]
    g = rep.get("grid", {})
    return "grid " + grid_text(g) if g else point["strategy"]


# ------------------------------------------------------------------ ZeRO family on Frontier
def _zero_tasks(reduced: bool) -> list[Task]:
    from validation.cases.claim_ratios import zeropp_tasks
    from validation.cases.claims import zeropp_gcds

    return zeropp_tasks(stand_in=reduced, gcds=zeropp_gcds(reduced))


def _zero_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    from validation.cases.claims import ZEROPP, load_claim, setup_value, zeropp_summary

    points = [r for _, r in built]
    summ = zeropp_summary(points)
    claims = load_claim(ZEROPP).claims
    pub_ratio = claims["tflops_ratio"].published or 0.0
    pub_eff = claims["scaling_efficiency"].published or 0.0
    gcds = summ["gcds"]
    tf = summ["tflops"]
    plt = pyplot()
    fig, (ax, ax_r) = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in ZERO_STRATEGIES:
        ax.plot(gcds, [tf[f"{s}@{g}"] for g in gcds], "o-", label=s)
    ax.set_xscale("log", base=2)
    ax.set_xticks(gcds, [str(g) for g in gcds])
    ax.minorticks_off()
    ax.set_xlabel("GCDs (8 per node)")
    ax.set_ylabel("TFLOP/s per GCD")
    ax.set_ylim(bottom=0)  # strategies are compared by ratio: the axis starts at zero
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    hi, lo = gcds[-1], gcds[0]
    _published_bars(
        ax_r,
        [f"hierarchical / ZeRO++\nat {hi} GCDs", f"scaling efficiency\n{lo} -> {hi} GCDs"],
        [summ["ratio"], summ["scaling_efficiency"]],
        [pub_ratio, pub_eff],
        ["x", ""],
    )
    model = setup_value(ZEROPP, "model", reduced)
    fig.suptitle(
        "ZeRO-3, ZeRO++ and 3-level hierarchical ZeRO++ on Frontier (simulated vs published)"
    )
    same = set(summ["same_program_at"])
    numbers = [
        {
            "gcds": p["gcds"],
            "strategy": p["strategy"],
            "time_s": p["report"]["iteration_time_s"],
            "tflops_per_gcd": p["report"]["tflops_per_gpu"],
            "exposed_comm_s": p["report"]["exposed_comm_time_s"],
            "same_program_as_zeropp": p["strategy"] == "zeropp-hier" and p["gcds"] in same,
        }
        for p in points
    ] + [
        {
            "ratio": summ["ratio"],
            "published_ratio": pub_ratio,
            "scaling_efficiency": summ["scaling_efficiency"],
            "published_scaling_efficiency": pub_eff,
        }
    ]
    lines = [
        f"{n['gcds']} GCDs, {n['strategy']}: {n['time_s']:.4g} s, "
        f"{n['tflops_per_gcd']:.4g} TFLOP/s per GCD, exposed communication "
        f"{n['exposed_comm_s']:.3g} s"
        + (" (same program as zeropp)" if n["same_program_as_zeropp"] else "")
        for n in numbers[:-1]
    ]
    lines.append(
        f"hierarchical / ZeRO++ at {hi} GCDs {summ['ratio']:.3f}x (published {pub_ratio:g}x); "
        f"scaling efficiency {summ['scaling_efficiency']:.3f} (published {pub_eff:g})"
    )
    what = (
        f"{model_label(model)}, weak scaling of the batch (one microbatch per GCD). ZeRO-3: "
        "all-gathers and reduce-scatters over all GCDs; ZeRO++ (DeepSpeed): int8 weight "
        "all-gathers (qwZ), a secondary weight partition per node that the recompute, "
        "backward and later forward gathers read (hpZ), int4 gradients through an "
        "intra-node then inter-node all-to-all (qgZ); hierarchical ZeRO++: the secondary "
        "partition on the GCD pair and gradients reduced pair -> node -> global. The setup, "
        "every value with its source or stated assumption: validation/published/data/claims/"
        "zeropp_frontier.yaml. Published values: the paper's abstract (arXiv 2501.04266)."
    )
    reports = [p["report"] for p in points]
    text = caption("ZeRO family on Frontier", what + (STAND_IN if reduced else ""), lines, reports)
    return FigureOutput("zero-frontier", save(fig, out, "zero-frontier", text), text, numbers)


def _axonn_published() -> list[PublishedSeries]:
    """AxoNN's published Perlmutter PFLOP/s at this figure's points (x = bar index)."""
    pub = {(p.gpus, p.model): p.pflops for p in axonn_perlmutter()}
    idx = [i for i, pt in enumerate(MEGATRON_POINTS) if pt in pub]
    return [
        PublishedSeries(
            "AxoNN sustained PFLOP/s (Megatron-LM's published numbers are not held)",
            idx, [pub[MEGATRON_POINTS[i]] for i in idx], source("axonn_perlmutter"),
        )
    ]  # fmt: skip


register("axonn-vs-megatron", _axonn_published)
register_missing(
    "optimus-vs-megatron",
    "The Optimus paper's throughput and batch numbers have not been transcribed into "
    "validation/published/.",
)
register_missing(
    "zero-frontier",
    "The ZeRO++ / hierarchical ZeRO++ numbers on Frontier have not been transcribed into "
    "validation/published/.",
)

FIGURES = (
    Figure(
        "axonn-vs-megatron",
        "strategies",
        "AxoNN vs Megatron-LM on Perlmutter",
        _megatron_tasks,
        _megatron_render,
    ),
    Figure(
        "optimus-vs-megatron",
        "strategies",
        "Optimus (2D TP) vs Megatron-LM on Frontera RTX 5000",
        _optimus_tasks,
        _optimus_render,
    ),
    Figure(
        "zero-frontier",
        "strategies",
        "ZeRO-3 / ZeRO++ / hierarchical ZeRO++ on Frontier",
        _zero_tasks,
        _zero_render,
    ),
)
