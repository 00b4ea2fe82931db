"""Shared drawing and caption helpers (matplotlib with the Agg backend, imported lazily).

Files are written reproducibly: SVG without a date and with fixed element ids (hashsalt),
PNG and PDF without metadata timestamps, so regenerating a figure from the same
simulation results gives the same bytes. SVG keeps text as text (editable in Inkscape or
Illustrator) and PDF embeds TrueType fonts. Every caption ends with what the repository
publishes for the figure (validation/figures/published_overlay.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CALIBRATION_NOTE = (
    "No calibration file: kernels use the roofline/GEMM-efficiency model with the constants "
    "of simulator/cost/data/kernel_defaults.yaml; links use the per-kind efficiencies of "
    "simulator/network/data/network_defaults.yaml, replaced where a machine preset has "
    "its own measured value (topologies/data/machines.yaml link_efficiency: Frontier's "
    "NICs, DGX A100's NVSwitch ports)."
)


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "axsim"
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG
    matplotlib.rcParams["pdf.fonttype"] = 42  # TrueType in the PDF (editable)
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, out_dir: Path, name: str, caption: str) -> list[Path]:
    """Write NAME.png, NAME.svg, NAME.pdf and NAME.md (the caption, ending with what is
    published for the figure); close the figure."""
    from validation.figures.published_overlay import caption_lines

    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    png, svg, pdf, md = (out_dir / f"{name}.{ext}" for ext in ("png", "svg", "pdf", "md"))
    fig.tight_layout()
    fig.savefig(png, dpi=130, bbox_inches="tight", metadata={"Software": None})
    fig.savefig(svg, bbox_inches="tight", metadata={"Date": None})
    fig.savefig(pdf, bbox_inches="tight", metadata={"CreationDate": None, "ModDate": None})
    plt.close(fig)
    published = "\n".join(f"- {line}" for line in caption_lines(name))
    md.write_text(caption.rstrip() + "\n\n" + published + "\n")
    return [png, svg, pdf, md]


def engine_note(reports: Sequence[Mapping[str, Any]]) -> str:
    """How the runs were simulated (engine modes, network model), from their reports."""
    modes = sorted({str(r.get("engine_mode")) for r in reports if r})
    nets = sorted({str(r.get("network_model")) for r in reports if r})
    return (
        f"Engine mode: {', '.join(modes)}; network model: {', '.join(nets)} (concurrent "
        "transfers share link bandwidth max-min fairly on the machine's topology graph; "
        "collective algorithms chosen per size and scale like NCCL's/RCCL's tuner). "
        + CALIBRATION_NOTE
    )


def caption(
    title: str, what: str, rows: Sequence[str], reports: Sequence[Mapping[str, Any]]
) -> str:
    """A caption: title, what was simulated, one line per point, and the engine note."""
    lines = [f"# {title}", "", what.strip(), ""]
    lines += [f"- {r}" for r in rows]
    lines += ["", engine_note(reports)]
    return "\n".join(lines)


def grid_text(grid: Mapping[str, int] | Sequence[int]) -> str:
    """X x Y x Z x data."""
    if isinstance(grid, Mapping):
        grid = [grid.get(k, 1) for k in ("x", "y", "z", "data")]
    return "x".join(str(v) for v in grid)


def model_label(model: str | Mapping[str, Any]) -> str:
    """A model preset name, or name + overrides for an inline model."""
    if isinstance(model, str):
        return model.upper() if model.startswith("gpt-") else model
    extra = ", ".join(f"{k}={v}" for k, v in model.items() if k != "name")
    return f"{model.get('name', 'model')} ({extra})"
