"""Pictures of one simulated iteration, written by `axsim simulate --out`.

- `timeline.{png,svg,pdf}`: a Gantt chart, one row per stream of a few written ranks
  (compute kernels coloured by kind, communication by process group), so overlap and
  exposed communication are seen rather than read.
- `breakdown.{png,svg,pdf}`: where the critical rank's iteration goes (compute by kind,
  exposed communication by the strategy's own group names, the rest idle) next to the
  communication in flight per group, both on axes from zero.

matplotlib is optional (the `figures` extra); without it no picture is written and
`write_pictures` says so once on stderr. SVG keeps text as text (editable), files carry
no timestamps (reproducible bytes).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from simulator.engine.timeline import COMM_KINDS

MAX_RANKS = 4  # rows of a readable Gantt chart: 4 ranks x (compute + 3-5 comm streams)
COMPUTE_COLOURS = {
    "gemm": "#4477aa",
    "attention": "#66ccee",
    "elementwise": "#228833",
    "optimizer": "#332288",
    "memcpy": "#bbbbbb",
    "quantize": "#44aa99",
}
# Paul Tol's colour-blind-safe palettes; communication in warm colours, compute in cool
COMM_PALETTE = ("#ee7733", "#cc3311", "#ee3377", "#882255", "#ddaa33", "#aa4499")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "axsim"
    matplotlib.rcParams["svg.fonttype"] = "none"
    matplotlib.rcParams["pdf.fonttype"] = 42
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out_dir: Path, name: str) -> list[Path]:
    """NAME.png, NAME.svg (editable text) and NAME.pdf, without timestamps."""
    plt = _pyplot()
    paths = [out_dir / f"{name}.{ext}" for ext in ("png", "svg", "pdf")]
    meta = ({"Software": None}, {"Date": None}, {"CreationDate": None, "ModDate": None})
    for path, md in zip(paths, meta, strict=True):
        fig.savefig(path, dpi=130 if path.suffix == ".png" else None, bbox_inches="tight",
                    metadata=md)  # fmt: skip
    plt.close(fig)
    return paths


def write_pictures(out_dir: Path, result: Any, ranks: list[int]) -> list[Path]:
    """The timeline and breakdown pictures of `result` (module doc)."""
    try:
        _pyplot()
    except ImportError:
        print("axsim: no pictures (pip install 'axsim[figures]' for matplotlib)", file=sys.stderr)
        return []
    shown = ranks[:MAX_RANKS]
    timelines = [result.engine.timeline.rank(r) for r in shown]
    return [
        *save_figure(timeline_figure(timelines, result.report), out_dir, "timeline"),
        *save_figure(breakdown_figure(result.report), out_dir, "breakdown"),
    ]


def timeline_figure(timelines: list[Any], report: Any) -> Any:
    """Gantt chart: one row per (rank, stream)."""
    plt = _pyplot()
    rows: list[tuple[Any, str]] = []
    for tl in timelines:
        streams = list(dict.fromkeys(str(s) for s in tl.stream))
        streams.sort(key=lambda s: (s != "compute", s))
        rows += [(tl, s) for s in streams]
    groups = sorted({str(g) for tl in timelines for g, k in zip(tl.group, tl.kind, strict=True)
                     if k in COMM_KINDS})  # fmt: skip
    comm_colour = {g: COMM_PALETTE[i % len(COMM_PALETTE)] for i, g in enumerate(groups)}
    fig, ax = plt.subplots(figsize=(11, 0.42 * len(rows) + 1.6))
    t_max = max((float(tl.end_s.max(initial=0.0)) for tl in timelines), default=0.0)
    scale, unit = (1e3, "ms") if t_max >= 1e-3 else (1e6, "µs")
    labels = []
    for y, (tl, stream) in enumerate(rows):
        on = (tl.stream == stream) & (tl.kind != "wait")
        kinds = tl.kind[on]
        start, dur = tl.start_s[on] * scale, (tl.end_s[on] - tl.start_s[on]) * scale
        group = tl.group[on]
        for key in np.unique(np.where(np.isin(kinds, list(COMM_KINDS)), group, kinds)):
            pick = (group == key) if key in comm_colour else (kinds == key)
            pick &= np.isin(kinds, list(COMM_KINDS)) == (key in comm_colour)
            colour = comm_colour.get(str(key), COMPUTE_COLOURS.get(str(key), "#777777"))
            ax.broken_barh(list(zip(start[pick], dur[pick], strict=True)), (y - 0.4, 0.8),
                           facecolors=colour, linewidth=0)  # fmt: skip
        labels.append(f"rank {tl.rank}  {stream.replace('comm:', 'comm ')}")
    ax.set_yticks(range(len(rows)), labels)
    ax.invert_yaxis()
    ax.set_xlim(0, t_max * scale * 1.01 if t_max > 0 else 1)
    ax.set_xlabel(f"time in the iteration ({unit})")
    ax.set_title(f"{report.model} on {report.gpus} {report.gpu} GPUs ({report.strategy}): "
                 f"streams of {len(timelines)} rank(s)", fontsize=10)  # fmt: skip
    present = {str(k) for tl in timelines for k in tl.kind}
    shown = [k for k in COMPUTE_COLOURS if k in present]
    handles = [plt.Rectangle((0, 0), 1, 1, color=COMPUTE_COLOURS[k]) for k in shown]
    names = [f"compute: {k}" for k in shown]
    handles += [plt.Rectangle((0, 0), 1, 1, color=comm_colour[g]) for g in groups]
    names += [f"comm: {g}" for g in groups]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def breakdown_figure(report: Any) -> Any:
    """Stacked bars: the iteration (compute, exposed comm, idle) and comm in flight."""
    plt = _pyplot()
    t = report.iteration_time_s
    scale, unit = (1.0, "s") if t >= 1 else (1e3, "ms")
    exposed = report.comm_time_by_native_group_s or report.comm_time_by_group_s
    in_flight = report.comm_total_by_native_group_s or report.comm_total_by_group_s
    parts = [(f"compute: {k}", v, COMPUTE_COLOURS.get(k, "#777777"))
             for k, v in sorted(report.compute_by_kind_s.items(), key=lambda kv: -kv[1])]  # fmt: skip
    groups = sorted(set(exposed) | set(in_flight))
    colour = {g: COMM_PALETTE[i % len(COMM_PALETTE)] for i, g in enumerate(groups)}
    parts += [(f"exposed comm: {g}", exposed.get(g, 0.0), colour[g]) for g in groups]
    idle = max(t - report.compute_time_s - report.exposed_comm_time_s, 0.0)
    parts.append(("idle / other", idle, "#dddddd"))
    fig, ax = plt.subplots(figsize=(9, 3.4))
    left = 0.0
    for label, v, c in parts:
        if v > 0:
            ax.barh(1, v * scale, left=left, color=c, label=label, edgecolor="white")
            left += v * scale
    left = 0.0
    for g in groups:
        v = in_flight.get(g, 0.0)
        if v > 0:
            ax.barh(0, v * scale, left=left, color=colour[g], hatch="//", edgecolor="white")
            left += v * scale
    ax.set_yticks([0, 1], ["communication\nin flight (sum)", "iteration\n(critical rank)"])
    ax.set_xlim(0, max(t * scale, left) * 1.02 if t > 0 else 1)
    ax.set_xlabel(f"time ({unit}); iteration = {t * scale:.4g} {unit}")
    ax.set_title(f"Where the time goes: {report.model}, {report.gpus} {report.gpu} GPUs, "
                 f"{report.strategy}, rank {report.critical_rank}", fontsize=10)  # fmt: skip
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    return fig
