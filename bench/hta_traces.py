"""Holistic Trace Analysis on simulated traces at scale: does every analysis run, how long
it takes, and whether the critical path agrees with the report.

Cases (issue 34): the embedded default (GPT-80B on 1,024 Perlmutter GPUs, one rank class),
a 256-rank z=16 grid (GPT-20B on 256 Perlmutter GPUs, 2x2x16x4, as in
tests/test_whatif_monotonicity.py) and the 32,768-GCD symmetric run (GPT-320B on
Frontier, 8x1x16x256, as in simulator/trials/scaling.py); `--strag` adds the default
with one 1.3x slower GPU (rank 3: full mode, 1,024 ranks, ~2 min to simulate).
Each case is simulated once, written as `axsim simulate --out` writes it (no pictures)
into a fresh temporary folder, then HTA 0.5 runs every analysis of its TraceAnalysis
(validation/references/hta_summary.py `run_every_analysis`) on the `kineto/` folder. One JSON row per
case: simulate / export / HTA wall times, bytes, the analyses that failed, the critical
path's shares on the report's critical rank next to the report's, and the stragglers.

    python bench/hta_traces.py [--only NAME] [--strag]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.api import simulate
from simulator.config import load_config
from simulator.outputs.files import write_outputs
from validation.references.hta_summary import (
    critical_path_shares,
    potential_stragglers,
    report_shares,
    run_every_analysis,
    written_rank,
)

NO_VIRTUAL = "engine.virtual_microbatches=false"  # what `simulate --out` sets
CASES: dict[str, list[str]] = {
    "default": [],
    "grid-256": [
        "cluster.gpus=256",
        "model.name=gpt-20b",
        "parallel.grid={x: 2, y: 2, z: 16, data: 4}",
    ],
    "frontier-32k": [
        "cluster.machine=frontier",
        "cluster.gpus=32768",
        "cluster.nodes=null",
        "model.name=gpt-320b",
        "parallel.grid={x: 8, y: 1, z: 16, data: 256}",
        "engine.mode=symmetric",
    ],
}
STRAGGLER_CASES: dict[str, list[str]] = {
    "default-straggler-3": ["cluster.stragglers=[{rank: 3, slowdown: 1.3}]"],
}


def run_case(name: str, overrides: list[str]) -> dict[str, object]:
    t0 = time.perf_counter()
    result = simulate(load_config(None, [*overrides, NO_VIRTUAL]))
    row: dict[str, object] = {"case": name, "simulate_s": round(time.perf_counter() - t0, 1)}
    out = Path(tempfile.mkdtemp(prefix=f"axsim-hta-{name}-"))
    try:
        t0 = time.perf_counter()
        write_outputs(result, out, pictures=False)
        row["export_s"] = round(time.perf_counter() - t0, 2)
        kineto = out / "kineto"
        row["kineto_files"] = len(list(kineto.iterdir()))
        row["kineto_MB"] = round(sum(p.stat().st_size for p in kineto.iterdir()) / 1e6, 2)
        rank = written_rank(out, result.report.critical_rank)
        t0 = time.perf_counter()
        results = run_every_analysis(kineto, rank=rank)
        row["hta_every_analysis_s"] = round(time.perf_counter() - t0, 1)
        row["failed"] = {k: repr(v)[:200] for k, v in results.items() if isinstance(v, Exception)}
        found = results["potential_stragglers"]
        row["stragglers"] = repr(found)[:200] if isinstance(found, Exception) else found
        row["critical_rank"] = [result.report.critical_rank, rank]
        cp = critical_path_shares(kineto, rank)
        row["critical_path_pct"] = {k: round(v, 2) for k, v in cp.items() if k != "length_us"}
        row["critical_path_of_iteration_pct"] = round(
            cp["length_us"] / (result.report.iteration_time_s * 1e6) * 100, 2
        )
        row["report_pct"] = {k: round(v, 2) for k, v in report_shares(result.report).items()}
        if name in STRAGGLER_CASES:
            row["stragglers_top1"] = potential_stragglers(kineto, num_candidates=1)
    finally:
        shutil.rmtree(out)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="run only this case")
    ap.add_argument("--strag", action="store_true", help="also the straggler case (slow)")
    args = ap.parse_args()
    cases = dict(CASES, **(STRAGGLER_CASES if args.strag else {}))
    for name, overrides in cases.items():
        if args.only and args.only != name:
            continue
        print(json.dumps(run_case(name, overrides)), flush=True)


if __name__ == "__main__":
    main()
