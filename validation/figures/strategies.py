"""AxoNN vs Megatron-LM, Optimus vs Megatron, and ZeRO-3 / ZeRO++ / hierarchical ZeRO++.

Each strategy's configuration comes from `axsim compare-strategies`' search
(simulator/strategy_search.py: memory-feasible degree combinations, most promising
first, the first N simulated, the fastest kept); AxoNN's from `axsim search` (shared
with the weak-scaling figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from validation.figures.base import Built, Figure, FigureOutput, Task, task
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
OPTIMUS_POINTS, REDUCED_OPTIMUS_POINTS = [16, 64], [4, 16]
OPTIMUS_MODEL, OPTIMUS_BATCH = "gpt-5b", 2**20
ZERO_GCDS, REDUCED_ZERO_GCDS = [16, 32, 64, 128, 256, 384], [8, 16]
ZERO_STRATEGIES = ("zero3", "zeropp", "zeropp-hier")
SEQ_PER_GCD = 4


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
def _optimus_setup(reduced: bool) -> tuple[list[int], str, int]:
    if reduced:
        return REDUCED_OPTIMUS_POINTS, "gpt-tiny", REDUCED_BATCH_TOKENS
    return OPTIMUS_POINTS, OPTIMUS_MODEL, OPTIMUS_BATCH


def _optimus_tasks(reduced: bool) -> list[Task]:
    gpus, model, batch = _optimus_setup(reduced)
    return [
        strategy_task("frontera-rtx", g, model, s, batch, 2 if reduced else 4)
        for g in gpus
        for s in ("megatron", "optimus")
    ]


def _optimus_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    gpus, model, batch = _optimus_setup(reduced)
    res = {(t.kwargs["gpus"], t.kwargs["strategy"]): r for t, r in built}
    seq = {"gpt-tiny": 32}.get(model, 2048)
    plt = pyplot()
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(10, 4.2))
    labels = [f"{g} GPUs" for g in gpus]
    tput: dict[str, list[float | None]] = {}
    maxb: dict[str, list[float | None]] = {}
    for s, name in (("megatron", "Megatron-LM"), ("optimus", "Optimus (2D)")):
        tput[name] = [None if (t := _time(res[(g, s)])) is None else batch / seq / t for g in gpus]
        maxb[name] = [float(res[(g, s)]["max_batch_sequences"]) or None for g in gpus]
    _grouped(ax_t, labels, tput, "training throughput (sequences/s)")
    _grouped(ax_b, labels, maxb, "largest batch that fits (sequences)")
    fig.suptitle(f"Optimus vs Megatron-LM, {model_label(model)} on Frontera RTX 5000 (simulated)")
    numbers = [
        {
            "gpus": g,
            "strategy": s,
            "time_s": _time(res[(g, s)]),
            "max_batch_sequences": res[(g, s)]["max_batch_sequences"],
            "config": config_text(res[(g, s)]),
        }
        for g in gpus
        for s in ("megatron", "optimus")
    ]
    lines = [
        f"{n['gpus']} GPUs, {n['strategy']} ({n['config']}): "
        + ("-" if n["time_s"] is None else f"{n['time_s']:.4g} s per batch")
        + f", largest batch {n['max_batch_sequences']} sequences"
        for n in numbers
    ]
    what = (
        f"{model_label(model)}, global batch {batch} tokens, on TACC Frontera's Quadro RTX 5000 "
        "nodes (4 per node, PCIe, HDR100 fat tree). Optimus: q x q SUMMA mesh times data "
        "parallel; Megatron-LM: tensor x pipeline x data. Each strategy's first "
        f"{2 if reduced else 4} memory-feasible configurations simulated, the fastest shown; "
        "largest batch = the largest global batch the chosen degrees fit without gradient "
        "accumulation (Optimus partitions activations in 2D, so it fits larger batches)."
    )
    reports = [r["report"] for r in res.values() if r["report"]]
    text = caption("Optimus vs Megatron-LM", what, lines, reports)
    return FigureOutput(
        "optimus-vs-megatron", save(fig, out, "optimus-vs-megatron", text), text, numbers
    )


# ------------------------------------------------------------------ ZeRO family on Frontier
def _zero_setup(reduced: bool) -> tuple[list[int], str, int]:
    return (REDUCED_ZERO_GCDS, "gpt-tiny", 32) if reduced else (ZERO_GCDS, "gpt-20b", 2048)


def _zero_tasks(reduced: bool) -> list[Task]:
    gcds, model, seq = _zero_setup(reduced)
    cands = {"zeropp-hier": 4 if reduced else 27}
    return [
        strategy_task("frontier", g, model, s, g * SEQ_PER_GCD * seq, cands.get(s, 2))
        for g in gcds
        for s in ZERO_STRATEGIES
    ]


def _zero_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    gcds, model, _ = _zero_setup(reduced)
    res = {(t.kwargs["gpus"], t.kwargs["strategy"]): r for t, r in built}
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for s in ZERO_STRATEGIES:
        ys = [
            None if res[(g, s)]["report"] is None else res[(g, s)]["report"]["tflops_per_gpu"]
            for g in gcds
        ]
        ax.plot(
            [g for g, y in zip(gcds, ys, strict=True) if y is not None],
            [y for y in ys if y is not None],
            "o-",
            label=s,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(gcds, [str(g) for g in gcds])
    ax.minorticks_off()
    ax.set_xlabel("GCDs (8 per node)")
    ax.set_ylabel("TFLOP/s per GCD")
    ax.set_ylim(bottom=0)  # strategies are compared by ratio: the axis starts at zero
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(
        f"ZeRO-3, ZeRO++ and hierarchical ZeRO++, {model_label(model)} on Frontier (simulated)"
    )
    numbers = [
        {
            "gcds": g,
            "strategy": s,
            "time_s": _time(res[(g, s)]),
            "tflops_per_gcd": None
            if res[(g, s)]["report"] is None
            else res[(g, s)]["report"]["tflops_per_gpu"],
            "config": config_text(res[(g, s)]),
        }
        for g in gcds
        for s in ZERO_STRATEGIES
    ]
    lines = [
        f"{n['gcds']} GCDs, {n['strategy']} ({n['config']}): "
        + (
            "-"
            if n["time_s"] is None
            else f"{n['time_s']:.4g} s, {n['tflops_per_gcd']:.4g} TFLOP/s per GCD"
        )
        for n in numbers
    ]
    what = (
        f"{model_label(model)}, {SEQ_PER_GCD} sequences per GCD (weak scaling of the batch), "
        "on 2 to 48 Frontier nodes. ZeRO-3: all-gather / reduce-scatter over all GCDs; ZeRO++: "
        "int8 weight all-gather (qwZ), a secondary weight partition per node (hpZ), int4 "
        "hierarchical gradient all-to-all (qgZ); hierarchical ZeRO++: the partition group of "
        "each collective chosen among GCD pair / node / global by simulating the combinations "
        f"(the first {4 if reduced else 27} in compare-strategies' order)."
    )
    reports = [r["report"] for r in res.values() if r["report"]]
    text = caption("ZeRO family on Frontier", what, lines, reports)
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
