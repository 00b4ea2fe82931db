"""Trace export at scale: wall time, bytes on disk and peak memory of `--out`.

Target (issue 21): writing the traces of a 1,024-GPU symmetric run takes <= 10 s and
<= 100 MB on disk. Cases (GPT-80B on 1,024 Perlmutter GPUs, the embedded default, every
microbatch expanded as `--out` does):

- `classes`: `--trace-ranks all` in symmetric mode: one file per rank class + rank_map;
- `ranks-128`: 128 explicitly chosen ranks (the issue's case: 128 of 1,024 ranks);
- `default`: no `--trace-ranks`.

Each case writes every output of `write_outputs` (report, timeline.csv, links.csv,
trace.json.gz, kineto/*.json.gz; pictures off, measured apart with `--pictures`) into a
fresh folder and reports the time of the export alone (the simulation is run once, before)
and the bytes written. `--hta` also times Holistic Trace Analysis loading the Kineto folder.

    python bench/trace_export.py [--pictures] [--hta] [--only NAME]
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.api import simulate
from simulator.config import load_config
from simulator.outputs.files import write_outputs

CASES: dict[str, object] = {"classes": "all", "default": None, "ranks-128": list(range(0, 1024, 8))}


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pictures", action="store_true", help="also draw the pictures")
    ap.add_argument("--hta", action="store_true", help="time HTA loading the Kineto folder")
    ap.add_argument("--only", default=None, help="run only this case")
    args = ap.parse_args()
    t0 = time.perf_counter()
    result = simulate(load_config(None, ["engine.virtual_microbatches=false"]))
    sim_s = time.perf_counter() - t0
    rows = []
    for name, ranks in CASES.items():
        if args.only and args.only != name:
            continue
        out = Path(tempfile.mkdtemp(prefix=f"axsim-trace-{name}-"))
        t0 = time.perf_counter()
        write_outputs(result, out, ranks, pictures=args.pictures)  # type: ignore[arg-type]
        wall = time.perf_counter() - t0
        row = {
            "case": name,
            "export_s": round(wall, 2),
            "MB_on_disk": round(folder_bytes(out) / 1e6, 2),
            "kineto_files": len(list((out / "kineto").iterdir())),
            "peak_rss_GiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        }
        if args.hta:
            from hta.trace_analysis import TraceAnalysis

            t0 = time.perf_counter()
            TraceAnalysis(trace_dir=str(out / "kineto"))
            row["hta_load_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(out)
    ops = len(result.engine.timeline.rank(0))
    print(json.dumps({"simulate_s": round(sim_s, 2), "ops_per_rank": ops,
                      "mode": result.engine.mode, "classes": len(result.engine.timeline.ranks)}))  # fmt: skip


if __name__ == "__main__":
    main()
