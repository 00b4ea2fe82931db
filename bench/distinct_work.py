"""The simulator at the cost of its distinct work (issue 22): pipelines, symmetric setup,
full mode and start-up, in CPU seconds and raw-simpy-event equivalents.

`python bench/distinct_work.py [--only TEXT ...] [--tree DIR ...] [--repeat N] [--out FILE]`

Each case runs `simulate()` in a fresh process (so its peak RSS is its own) and reports
the CPU seconds of the call, its wall time, peak RSS, ops simulated / represented and
the iteration time. In the same run a bare simpy loop measures this machine's raw event
rate in CPU time, right before and right after each case (their mean is used); a case's cost in *raw-simpy-event equivalents* is its CPU seconds x
that rate (the issue's unit: it divides out how fast the machine is). `--tree` runs every
case once per source tree, alternating (A/B on a shared, noisy machine): e.g. `--tree
../main --tree .` compares a main checkout beside this one with this checkout in one session. The start-up case
is the CPU time of `python -m simulator --version`.

Cases and their sources:
- Megatron 175B (GPT-3: 96 layers, hidden 12,288, 96 heads; Brown et al. 2020 Table 2.1)
  on 64 DGX A100 GPUs, TP 8 / PP 8 with 3 virtual stages (the interleaved schedule of
  Narayanan et al. 2021), 512 sequences of 2,048 tokens, one per microbatch (the batch is
  this benchmark's choice: it gives 512 microbatches to one pipeline);
- Megatron 1T (Narayanan et al. 2021 Table 1, 1,008B row: 128 layers, hidden 25,600, 160
  heads, TP 8, PP 64, 3,072 GPUs, batch 3,072) — 512 microbatches per pipeline;
- AxoNN GPT-320B on 32,768 Frontier GCDs, symmetric (grid 8 x 1 x 16 x 256, as
  simulator/trials/scaling.py), and on 1,024 / 16,384 GCDs (same X, Y, Z; data 8 / 128);
- GPT-640B on 131,072 DGX H100 GPUs (grid 8 x 2 x 16 x 512: simulator/trials/scaling.py's
  65,536-GPU case with twice the data parallelism);
- full mode GPT-80B on 1,024 Perlmutter GPUs (grid 4 x 4 x 4 x 16, as simulator/trials/scaling.py).

Issue 35 (what differs costs what differs), each read as a CPU-s ratio in one run against
the lockstep run of the same configuration (`RATIOS`; the raw-simpy unit moves by about
35% between CPUs, ratios do not): GPT-80B on 256 (grid 4 x 4 x 4 x 4) and 1,024 (4 x 4 x 4
x 16) Perlmutter GPUs with one straggler (rank 3 at 1.2x), two (rank 517 at 1.1x too:
another replica and node position) and half the nodes A40s, `auto` on the lockstep run;
GPT-80B on 768 Frontier GCDs with x = 3 (groups mixing even and odd GCDs unevenly: the
full mode's case before the refined view), against its full mode and against the
symmetric run of an aligned grid (2 x 4 x 4 x 32 on 1,024 GCDs); and `axsim search` for
GPT-320B on 32,768 Frontier GCDs with its peak RSS (SEARCHES).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _axonn(
    machine: str, gpus: int, model: str, grid: str, mode: str = "symmetric", *extra: str
) -> list[str]:
    x, y, z, d = grid.split(",")
    return [
        f"cluster.machine={machine}",
        f"cluster.gpus={gpus}",
        "cluster.nodes=null",
        f"model.name={model}",
        f"parallel.grid={{x: {x}, y: {y}, z: {z}, data: {d}}}",
        f"engine.mode={mode}",
        *extra,
    ]


ONE_STRAGGLER = "cluster.stragglers=[{rank: 3, slowdown: 1.2}]"
# two stragglers in different data-parallel replicas and node positions
TWO_STRAGGLERS = "cluster.stragglers=[{rank: 3, slowdown: 1.2}, {rank: 517, slowdown: 1.1}]"
# half the nodes carry an NVIDIA A40 (48 GB, 150 bf16 TFLOP/s against the A100's 312)
HALF_A40 = "cluster.node_gpus=[{first_node: 128, nodes: 128, gpu: a40}]"


def _megatron(
    gpus: int, layers: int, hidden: int, heads: int, pp: int, v: int, seqs: int
) -> list[str]:
    return [
        "cluster.machine=dgx-a100",
        f"cluster.gpus={gpus}",
        "cluster.nodes=null",
        "model.name=gpt-80b",
        f"model.layers={layers}",
        f"model.hidden={hidden}",
        f"model.heads={heads}",
        "parallel.strategy=megatron",
        "parallel.tp=8",
        f"parallel.pp={pp}",
        f"parallel.virtual_stages={v}",
        f"training.batch_tokens={seqs * 2048}",
        "training.microbatch_sequences=1",
    ]


CASES: dict[str, list[str]] = {
    "Megatron 175B, 64 A100, TP 8 / PP 8, interleave 3": _megatron(64, 96, 12288, 96, 8, 3, 512),
    "Megatron 1T, 3,072 A100, TP 8 / PP 64 / DP 6": _megatron(3072, 128, 25600, 160, 64, 1, 3072),
    "AxoNN GPT-320B, 32,768 Frontier GCDs, symmetric": _axonn(
        "frontier", 32768, "gpt-320b", "8,1,16,256"
    ),
    "GPT-640B, 131,072 DGX H100 GPUs, symmetric": _axonn(
        "dgx-h100", 131072, "gpt-640b", "8,2,16,512"
    ),
    "AxoNN GPT-320B, 1,024 Frontier GCDs": _axonn("frontier", 1024, "gpt-320b", "8,1,16,8", "auto"),
    "AxoNN GPT-320B, 16,384 Frontier GCDs": _axonn(
        "frontier", 16384, "gpt-320b", "8,1,16,128", "auto"
    ),
    "Full mode GPT-80B, 1,024 Perlmutter GPUs": _axonn(
        "perlmutter", 1024, "gpt-80b", "4,4,4,16", "full"
    ),
    # issue 35: what differs costs what differs (ratios below, against the lockstep run)
    "GPT-80B, 256 Perlmutter GPUs, symmetric": _axonn("perlmutter", 256, "gpt-80b", "4,4,4,4"),
    "GPT-80B, 256 Perlmutter GPUs, one straggler": _axonn(
        "perlmutter", 256, "gpt-80b", "4,4,4,4", "auto", ONE_STRAGGLER
    ),
    "GPT-80B, 1,024 Perlmutter GPUs, symmetric": _axonn("perlmutter", 1024, "gpt-80b", "4,4,4,16"),
    "GPT-80B, 1,024 Perlmutter GPUs, auto (lockstep)": _axonn(
        "perlmutter", 1024, "gpt-80b", "4,4,4,16", "auto"
    ),
    "GPT-80B, 1,024 Perlmutter GPUs, one straggler": _axonn(
        "perlmutter", 1024, "gpt-80b", "4,4,4,16", "auto", ONE_STRAGGLER
    ),
    "GPT-80B, 1,024 Perlmutter GPUs, two stragglers": _axonn(
        "perlmutter", 1024, "gpt-80b", "4,4,4,16", "auto", TWO_STRAGGLERS
    ),
    "GPT-80B, 1,024 Perlmutter GPUs, half the nodes A40": _axonn(
        "perlmutter", 1024, "gpt-80b", "4,4,4,16", "auto", HALF_A40
    ),
    # x = 3 on 8-GCD nodes: groups mix even and odd GCDs unevenly, which the workload's
    # one class cannot represent (auto ran the full mode); the refined view can
    "GPT-80B, 768 Frontier GCDs, grid 3 x 4 x 4 x 16, auto": _axonn(
        "frontier", 768, "gpt-80b", "3,4,4,16", "auto"
    ),
    "GPT-80B, 768 Frontier GCDs, grid 3 x 4 x 4 x 16, full": _axonn(
        "frontier", 768, "gpt-80b", "3,4,4,16", "full"
    ),
    "GPT-80B, 1,024 Frontier GCDs, grid 2 x 4 x 4 x 32, symmetric": _axonn(
        "frontier", 1024, "gpt-80b", "2,4,4,32"
    ),
}

# `axsim search` (rank, screen, simulate the top 10) in a child of its own: CPU and peak RSS
SEARCHES: dict[str, list[str]] = {
    "axsim search, GPT-320B, 32,768 Frontier GCDs": [
        "--machine",
        "frontier",
        "--gpus",
        "32768",
        "--model",
        "gpt-320b",
    ],
}

# (case, reference, target): CPU-s of the case over its reference's, measured in one run
RATIOS: list[tuple[str, str, float | None]] = [
    (
        "GPT-80B, 256 Perlmutter GPUs, one straggler",
        "GPT-80B, 256 Perlmutter GPUs, symmetric",
        None,
    ),
    (
        "GPT-80B, 1,024 Perlmutter GPUs, one straggler",
        "GPT-80B, 1,024 Perlmutter GPUs, symmetric",
        5.0,
    ),
    (
        "GPT-80B, 1,024 Perlmutter GPUs, two stragglers",
        "GPT-80B, 1,024 Perlmutter GPUs, symmetric",
        10.0,
    ),
    (
        "GPT-80B, 1,024 Perlmutter GPUs, half the nodes A40",
        "GPT-80B, 1,024 Perlmutter GPUs, symmetric",
        None,
    ),
    (
        "GPT-80B, 1,024 Perlmutter GPUs, auto (lockstep)",
        "GPT-80B, 1,024 Perlmutter GPUs, symmetric",
        2.0,
    ),
    (
        "GPT-80B, 768 Frontier GCDs, grid 3 x 4 x 4 x 16, auto",
        "GPT-80B, 1,024 Frontier GCDs, grid 2 x 4 x 4 x 32, symmetric",
        None,
    ),
    (
        "GPT-80B, 768 Frontier GCDs, grid 3 x 4 x 4 x 16, full",
        "GPT-80B, 768 Frontier GCDs, grid 3 x 4 x 4 x 16, auto",
        None,
    ),
]

CHILD = """
import json, resource, sys, time
from simulator.api import simulate
from simulator.config import load_config
cfg = load_config(None, json.loads(sys.argv[1]))
c0, w0 = time.process_time(), time.perf_counter()
r = simulate(cfg)
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
e = r.engine
print(json.dumps({
    "cpu_s": cpu, "wall_s": wall,
    "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "iteration_time_s": r.report.iteration_time_s,
    "ops_simulated": e.ops_processed, "ops_represented": e.ops_represented,
    "events": e.events, "setup_s": e.setup_time_s, "mode": e.mode,
    "skipped": e.skipped_segments,
}))
"""


SEARCH_CHILD = """
import json, resource, sys, time
from simulator.cli import main
c0, w0 = time.process_time(), time.perf_counter()
try:
    main(["search", *json.loads(sys.argv[1]), "--json"])
except SystemExit:
    pass
cpu, wall = time.process_time() - c0, time.perf_counter() - w0
u = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "cpu_s": cpu, "wall_s": wall, "user_s": u.ru_utime, "system_s": u.ru_stime,
    "peak_rss_bytes": u.ru_maxrss * 1024,
}))
"""


def raw_simpy_cpu_rate(events: int = 400_000) -> float:
    """Events per CPU-second of a bare simpy loop (the engine's reference loop)."""
    from simulator.engine.reference import raw_simpy_rate

    return raw_simpy_rate(events, clock=time.process_time)


def _env(tree: Path) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")


def run_case(
    tree: Path, overrides: list[str], timeout_s: float, child: str = CHILD
) -> dict[str, object]:
    """One case in a fresh interpreter importing the simulator from `tree`."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", child, json.dumps(overrides)],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=_env(tree),
            check=False,
            cwd=tree,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"error": tail[0]}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def startup_cpu_s(tree: Path) -> float:
    """CPU seconds of `python -m simulator --version` (interpreter start included)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(
        [sys.executable, "-m", "simulator", "--version"],
        capture_output=True,
        env=_env(tree),
        check=True,
        cwd=tree,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def ratios(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """`RATIOS` per tree and round from the rows of this run (pairs both measured)."""
    cpu = {
        (r["round"], r["tree"], r["case"]): float(r["cpu_s"])  # type: ignore[arg-type]
        for r in rows
        if "cpu_s" in r
    }
    out: list[dict[str, object]] = []
    for (rnd, tree, case), value in cpu.items():
        for name, ref, target in RATIOS:
            if case != name or (rnd, tree, ref) not in cpu:
                continue
            got = value / cpu[(rnd, tree, ref)]
            out.append(
                {
                    "round": rnd,
                    "tree": tree,
                    "ratio": f"{name} / {ref}",
                    "cpu_ratio": got,
                    "target": target,
                    "met": None if target is None else got <= target,
                }
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only",
        action="append",
        default=None,
        help="cases whose name contains this text (repeatable)",
    )
    ap.add_argument("--tree", action="append", default=None, help="source tree (repeatable)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the alternation")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--out", default="distinct-work.json")
    args = ap.parse_args()
    trees = [Path(t).resolve() for t in (args.tree or [str(ROOT)])]
    chosen = {**CASES, **SEARCHES}
    cases = {
        n: o
        for n, o in chosen.items()
        if args.only is None or any(t.lower() in n.lower() for t in args.only)
    }
    rows: list[dict[str, object]] = []
    for rnd in range(args.repeat):
        for tree in trees:
            rate = raw_simpy_cpu_rate()
            cpu = startup_cpu_s(tree)
            row: dict[str, object] = {"round": rnd, "tree": str(tree), "case": "axsim --version"}
            row.update({"cpu_s": cpu, "raw_rate": rate, "equivalents_M": cpu * rate / 1e6})
            rows.append(row)
            print(json.dumps(row), flush=True)
        for name, overrides in cases.items():
            for tree in trees:  # alternate the trees case by case
                before = raw_simpy_cpu_rate()
                row = {"round": rnd, "tree": str(tree), "case": name}
                child = SEARCH_CHILD if name in SEARCHES else CHILD
                row.update(run_case(tree, overrides, args.timeout, child))
                # the machine is shared: calibrate on both sides of the case and use the
                # mean, so one disturbed calibration moves the unit by half as much
                after = raw_simpy_cpu_rate()
                rate = (before + after) / 2
                row.update({"raw_rate": rate, "raw_rate_before": before, "raw_rate_after": after})
                if "cpu_s" in row:
                    row["equivalents_M"] = float(row["cpu_s"]) * rate / 1e6  # type: ignore[arg-type]
                rows.append(row)
                print(json.dumps(row), flush=True)
    for ratio in ratios(rows):
        rows.append(ratio)
        print(json.dumps(ratio), flush=True)
    Path(args.out).write_text(json.dumps(rows, indent=2))
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
