"""The CPU closed loop, repeated: trace grid A and grid B with torch4d (gloo), calibrate
on A only, simulate both, report measured vs simulated with the spread.

Each repetition traces A and B back to back (alternating which goes first), so both see
the same host load; calibrates on that A; and compares that A (closed by construction of
the per-op overhead) and that B (the prediction). Cross predictions (A of repetition i
for B of repetition j) show how much of the error is the host's load changing between
runs. `--extra GRID` adds a third grid predicted from the same calibrations (e.g.
1,2,2,1, whose Z all-gathers and reduce-scatters A never measured).

    python bench/closed_loop.py                       # 3 repetitions, model small
    python bench/closed_loop.py --reps 5 --layers 4 --steps 6 --json out.json
    python bench/closed_loop.py --extra 1,2,2,1

Not a timed test: CPU timings depend on the host and on everything else running there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any


def _loadavg() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def trace(grid: str, out: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Run torch4d on `grid`; return the folder and the measured profiled steps."""
    from validation.torch4d import parse_grid, run_trace

    before = _loadavg()
    run_trace(
        parse_grid(grid), args.model, steps=args.steps, out_dir=out, layers=args.layers,
        warmup=1, timing_steps=0,
    )  # fmt: skip
    return {"grid": grid, "dir": str(out), "load_before": before, "load_after": _loadavg()}


def compare_one(traces: str, cal: Path) -> dict[str, Any]:
    from validation.compare import compare

    c = compare(traces, calibration=cal)
    it = c.iteration
    steps = c.measured_steps_s
    return {
        "measured_s": it.measured_s, "simulated_s": it.simulated_s, "error": it.error,
        "steps_s": steps, "steps_min_s": min(steps), "steps_max_s": max(steps),
        "rows": [(r.scope, r.name, r.measured_s, r.simulated_s) for r in c.rows],
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--grid-a", default="2,2,1,1")
    p.add_argument("--grid-b", default="2,1,1,2")
    p.add_argument("--extra", default=None, help="a third grid to predict")
    p.add_argument("--model", default="small")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--out", type=Path, default=None, help="keep traces here")
    p.add_argument("--json", type=Path, default=None, help="write the full results here")
    args = p.parse_args()
    from validation.calibration.calibrate import calibrate, write_calibration

    root = args.out or Path(tempfile.mkdtemp(prefix="axsim-closed-loop-"))
    reps: list[dict[str, Any]] = []
    for i in range(args.reps):
        order = [("A", args.grid_a), ("B", args.grid_b)]
        order = order if i % 2 == 0 else order[::-1]
        if args.extra:
            order.append(("C", args.extra))
        runs = {name: trace(grid, root / f"rep{i}" / name, args) for name, grid in order}
        cal = write_calibration(calibrate([runs["A"]["dir"]]), root / f"rep{i}" / "cal.yaml")
        rep = {"rep": i, "order": [n for n, _ in order], "runs": runs, "calibration": str(cal)}
        for name in runs:
            rep[name] = compare_one(runs[name]["dir"], cal)
        reps.append(rep)
        print(f"rep {i}: " + ", ".join(
            f"{n} meas {rep[n]['measured_s'] * 1e3:.0f} ms sim {rep[n]['simulated_s'] * 1e3:.0f} ms "
            f"({rep[n]['error']:+.1%})" for n in runs
        ), flush=True)  # fmt: skip
    cross = [
        compare_one(rb["runs"]["B"]["dir"], Path(ra["calibration"]))["error"]
        for ra in reps for rb in reps if ra is not rb
    ]  # fmt: skip
    summary: dict[str, Any] = {"host_cpus": os.cpu_count(), "reps": args.reps}
    for name in ("A", "B", "C"):
        if name in reps[0]:
            errs = [r[name]["error"] for r in reps]
            meas = [r[name]["measured_s"] for r in reps]
            summary[name] = {
                "measured_s_median": statistics.median(meas), "measured_s_range": [min(meas), max(meas)],
                "error_median": statistics.median(errs), "error_range": [min(errs), max(errs)],
            }  # fmt: skip
    if cross:
        summary["B_cross_error_range"] = [min(cross), max(cross)]
    print(json.dumps(summary, indent=2))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "reps": reps}, indent=2, default=str))


if __name__ == "__main__":
    main()
