"""FSDP vs FSDP+TP / FSDP+PP scaling on DGX H100, and NCCL bus-bandwidth curves.

After Fernandez et al. (arXiv 2411.13055): Llama-2 models on up to 2,048 H100s with a
fixed per-GPU batch; per-GPU throughput falls with scale, and beyond some scale small
tensor- or pipeline-parallel degrees beat pure FSDP because FSDP's collectives become
exposed. The bus-bandwidth figure shows why: all-reduce bus bandwidth over all GPUs of
4 ... 512 nodes against message size, with the single-node NVSwitch fit from Vidur's
measurements overlaid.
"""

from __future__ import annotations

from pathlib import Path

from validation.experiments.tasks import Built, Figure, FigureOutput, Task, task
from validation.figures.plotting import caption, model_label, pyplot, save
from validation.figures.published_overlay import (
    PublishedSeries,
    register,
    register_missing,
)
from validation.figures.strategies import config_text, strategy_task
from validation.published import load_yaml, source

GPU_COUNTS = [16, 64, 256, 1024, 2048]
MODELS = ["llama2-7b", "llama2-70b"]
REDUCED_GPU_COUNTS, REDUCED_MODELS = [8, 16], ["gpt-tiny"]
STRATEGIES = ("fsdp", "fsdp-tp", "fsdp-pp")
SEQ_PER_GPU = 2
NODES = [4, 8, 16, 32, 64, 128, 256, 512]
SIZES = [2**20 * 4**i for i in range(7)]  # 1 MiB ... 4 GiB
REDUCED_NODES, REDUCED_SIZES = [2], [2**20, 2**26]


def _seq(model: str) -> int:
    return 32 if model == "gpt-tiny" else 4096


def _fsdp_setup(reduced: bool) -> tuple[list[int], list[str]]:
    return (REDUCED_GPU_COUNTS, REDUCED_MODELS) if reduced else (GPU_COUNTS, MODELS)


def _fsdp_tasks(reduced: bool) -> list[Task]:
    gpus, models = _fsdp_setup(reduced)
    return [
        strategy_task("dgx-h100", g, m, s, g * SEQ_PER_GPU * _seq(m), 2 if reduced else 4)
        for m in models
        for g in gpus
        for s in STRATEGIES
    ]


def _fsdp_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    gpus, models = _fsdp_setup(reduced)
    res = {(t.kwargs["model"], t.kwargs["gpus"], t.kwargs["strategy"]): r for t, r in built}
    plt = pyplot()
    fig, axes = plt.subplots(1, len(models), figsize=(5.6 * len(models), 4.2), squeeze=False)
    numbers, lines = [], []
    for ax, m in zip(axes[0], models, strict=True):
        for s in STRATEGIES:
            pts = []
            for g in gpus:
                r = res[(m, g, s)]
                rep = r["report"]
                tok = None if rep is None else rep["batch_tokens"] / rep["iteration_time_s"] / g
                exposed = (
                    None if rep is None else rep["exposed_comm_time_s"] / rep["iteration_time_s"]
                )
                numbers.append(
                    {
                        "model": m,
                        "gpus": g,
                        "strategy": s,
                        "tokens_per_s_per_gpu": tok,
                        "exposed_comm_fraction": exposed,
                        "config": config_text(r),
                    }
                )
                lines.append(
                    f"{model_label(m)}, {g} GPUs, {s} ({config_text(r)}): "
                    + (
                        "-"
                        if tok is None or exposed is None
                        else f"{tok:.4g} tokens/s per GPU, "
                        f"{100 * exposed:.1f}% exposed communication"
                    )
                )
                if tok is not None:
                    pts.append((g, tok))
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=s)
        ax.set_xscale("log", base=2)
        ax.set_xticks(gpus, [str(g) for g in gpus])
        ax.minorticks_off()
        ax.set_xlabel("H100 GPUs (8 per node)")
        ax.set_ylabel("tokens/s per GPU")
        ax.set_ylim(bottom=0)  # strategies are compared by ratio: the axis starts at zero
        ax.set_title(model_label(m), fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("FSDP vs FSDP+TP vs FSDP+PP on DGX H100 (simulated)")
    what = (
        f"Fixed per-GPU batch ({SEQ_PER_GPU} sequences per GPU; global batch grows with the "
        "GPU count) on DGX H100 nodes (NVSwitch, 8 x 400 Gb/s rail-optimised InfiniBand fat "
        "tree). Each strategy's degrees (TP / PP size, sharding group) and microbatch from "
        f"compare-strategies' search: the first {2 if reduced else 4} memory-feasible "
        "configurations simulated, the fastest shown."
    )
    reports = [r["report"] for r in res.values() if r["report"]]
    text = caption("FSDP vs FSDP+TP / FSDP+PP scaling", what, lines, reports)
    return FigureOutput("fsdp-scaling", save(fig, out, "fsdp-scaling", text), text, numbers)


def _bus_setup(reduced: bool) -> tuple[list[int], list[int]]:
    return (REDUCED_NODES, REDUCED_SIZES) if reduced else (NODES, SIZES)


def _bus_tasks(reduced: bool) -> list[Task]:
    nodes, sizes = _bus_setup(reduced)
    return [
        task(
            "collective_curve",
            label=f"all-reduce on {n} DGX H100 nodes",
            machine="dgx-h100",
            nodes=n,
            op="all-reduce",
            group=8 * n,
            sizes=sizes,
        )
        for n in [1, *nodes]
    ]


def vidur_busbw(machine: str, sizes: list[int]) -> list[float] | None:
    """Bus bandwidth (GB/s) of the published 8-GPU alpha-beta fit at each size."""
    row = next((r for r in load_yaml("nccl_nvswitch")["rows"] if r["machine"] == machine), None)
    if row is None:
        return None
    alpha, bw = row["alpha_us"] * 1e-6, row["busbw_GBps"] * 1e9
    factor = 2 * 7 / 8
    return [s * factor / (alpha + s * factor / bw) / 1e9 for s in sizes]


def _bus_render(built: Built, out: Path, reduced: bool) -> FigureOutput:
    sizes = _bus_setup(reduced)[1]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    numbers, lines = [], []
    for t, rows in built:
        n = t.kwargs["nodes"]
        ax.plot(
            [r["bytes"] for r in rows],
            [r["busbw_GBps"] for r in rows],
            "o-",
            markersize=3,
            label=f"{n} node{'s' if n > 1 else ''} ({8 * n} GPUs)",
        )
        big = rows[-1]
        numbers.append(
            {
                "nodes": n,
                "gpus": 8 * n,
                "bytes": big["bytes"],
                "busbw_GBps": big["busbw_GBps"],
                "algorithm": big["algorithm"],
            }
        )
        lines.append(
            f"{n} nodes: "
            + ", ".join(
                f"{r['bytes'] / 2**20:g} MiB {r['busbw_GBps']:.1f} GB/s ({r['algorithm']})"
                for r in rows
            )
        )
    fit = vidur_busbw("dgx-h100", sizes)
    if fit is not None:
        ax.plot(sizes, fit, "k--", label="1 node, Vidur NCCL fit (published)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("all-reduce bus bandwidth (GB/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.suptitle("All-reduce bus bandwidth vs message size on DGX H100 clusters (simulated)")
    what = (
        "nccl-tests-style all-reduce over all GPUs of N DGX H100 nodes (`axsim collective "
        "dgx-h100 --nodes N --group 8N`), one engine run per size; bus bandwidth = size x "
        "2(p-1)/p / time; algorithm (ring or NCCL's double binary tree) chosen per size like "
        "NCCL's tuner. Overlay: the single-node alpha-beta fit of Vidur's measurements "
        f"({source('nccl_nvswitch')})."
    )
    text = caption(
        "NCCL all-reduce bus bandwidth",
        what,
        lines,
        [{"engine_mode": "symmetric", "network_model": "contention"}],
    )
    return FigureOutput("nccl-busbw", save(fig, out, "nccl-busbw", text), text, numbers)


def _vidur_published() -> list[PublishedSeries]:
    sizes = _bus_setup(False)[1]
    fit = vidur_busbw("dgx-h100", sizes) or []
    return [
        PublishedSeries(
            "1 node, bus bandwidth of Vidur's 8-GPU NCCL alpha-beta fit (H100)",
            sizes[: len(fit)], fit, source("nccl_nvswitch"),
        )
    ]  # fmt: skip


register("nccl-busbw", _vidur_published)
register_missing(
    "fsdp-scaling",
    "No FSDP / FSDP+TP / FSDP+PP throughput on DGX H100 is held in validation/published/.",
)

FIGURES = (
    Figure(
        "fsdp-scaling",
        "fsdp",
        "FSDP vs FSDP+TP / FSDP+PP per-GPU throughput on DGX H100",
        _fsdp_tasks,
        _fsdp_render,
    ),
    Figure(
        "nccl-busbw",
        "fsdp",
        "All-reduce bus bandwidth vs message size, 4 to 512 DGX H100 nodes",
        _bus_tasks,
        _bus_render,
    ),
)
