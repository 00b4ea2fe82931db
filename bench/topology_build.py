"""Benchmark: build time, peak memory and routing throughput of the largest machine presets.

Each case runs in its own subprocess so its peak RSS (`ru_maxrss`) is its own. For every
case we report wall and CPU seconds to build the Topology, to route N random GPU pairs
through `Topology.route` (cache cold, pairs distinct from each other with high
probability), and the peak RSS. Then a doubling search finds the largest Frontier node
count that builds within the time budget (build only, no routing).

    python bench/topology_build.py                 # default cases, 100k pairs
    python bench/topology_build.py --pairs 20000 --budget 10 --max-nodes 262144
    python bench/topology_build.py --case frontier 1024 --pairs 1000   # one case, JSON

Not a timed test: numbers depend on the machine (and on its load: compare CPU seconds
when the host is shared).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from typing import Any

DEFAULT_CASES: tuple[tuple[str, int], ...] = (
    ("frontier", 1024),
    ("frontier", 4096),
    ("perlmutter", 1024),
    ("alps", 2688),
    ("dgx-h100", 8192),
)


def run_case(machine: str, nodes: int, pairs: int, seed: int = 0) -> dict[str, Any]:
    """Build one machine and route `pairs` random GPU pairs; timings and peak RSS."""
    import numpy as np

    from topologies.machines import build_machine

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    w0, c0 = time.perf_counter(), time.process_time()
    topo = build_machine(machine, nodes)
    build_wall, build_cpu = time.perf_counter() - w0, time.process_time() - c0
    build_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(seed)
    src = rng.integers(0, topo.num_gpus, size=pairs).tolist()
    dst = rng.integers(0, topo.num_gpus - 1, size=pairs).tolist()
    dst = [d + (d >= s) for s, d in zip(src, dst, strict=True)]  # never src == dst
    paths = 0
    w0, c0 = time.perf_counter(), time.process_time()
    for s, d in zip(src, dst, strict=True):
        paths += len(topo.route(s, d).paths)
    route_wall, route_cpu = time.perf_counter() - w0, time.process_time() - c0
    return {
        "machine": machine,
        "nodes": nodes,
        "gpus": topo.num_gpus,
        "devices": topo.num_devices,
        "links": topo.num_links,
        "build_wall_s": build_wall,
        "build_cpu_s": build_cpu,
        "pairs": pairs,
        "paths_per_route": paths / pairs if pairs else 0.0,
        "route_wall_s": route_wall,
        "route_cpu_s": route_cpu,
        "import_rss_MB": base_rss,
        "build_peak_rss_MB": build_rss,
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _subprocess(machine: str, nodes: int, pairs: int, timeout_s: float) -> dict[str, Any] | None:
    cmd = [sys.executable, __file__, "--case", machine, str(nodes), "--pairs", str(pairs)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(
            f"  {machine} x {nodes}: failed ({done.stderr.strip().splitlines()[-1:]})",
            file=sys.stderr,
        )
        return None
    return dict(json.loads(done.stdout))


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'machine':<12}{'nodes':>7}{'GPUs':>8}{'links':>10}{'build s':>9}{'(cpu)':>7}"
        f"{'pairs':>8}{'route s':>9}{'(cpu)':>7}{'us/route':>9}{'paths':>6}{'peak MB':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        per = 1e6 * r["route_cpu_s"] / r["pairs"] if r["pairs"] else 0.0
        lines.append(
            f"{r['machine']:<12}{r['nodes']:>7}{r['gpus']:>8}{r['links']:>10}"
            f"{r['build_wall_s']:>9.3f}{r['build_cpu_s']:>7.3f}{r['pairs']:>8}"
            f"{r['route_wall_s']:>9.2f}{r['route_cpu_s']:>7.2f}{per:>9.1f}"
            f"{r['paths_per_route']:>6.1f}{r['peak_rss_MB']:>9.0f}"
        )
    return "\n".join(lines)


def largest_within(
    machine: str, budget_s: float, start: int, max_nodes: int
) -> tuple[int, list[dict[str, Any]]]:
    """Doubling search: the largest node count (start * 2^k <= max_nodes) building in budget."""
    best, rows, nodes = 0, [], start
    while nodes <= max_nodes:
        row = _subprocess(machine, nodes, 0, timeout_s=budget_s * 3 + 30)
        if row is None or row["build_wall_s"] > budget_s:
            break
        rows.append(row)
        best = nodes
        nodes *= 2
    return best, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--case", nargs=2, metavar=("MACHINE", "NODES"), help="run one case, print JSON"
    )
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument(
        "--budget", type=float, default=10.0, help="build-time budget for the search (s)"
    )
    parser.add_argument(
        "--max-nodes", type=int, default=262_144, help="stop the doubling search here"
    )
    parser.add_argument("--no-search", action="store_true")
    args = parser.parse_args(argv)
    if args.case:
        print(json.dumps(run_case(args.case[0], int(args.case[1]), args.pairs)))
        return 0
    rows = [r for m, n in DEFAULT_CASES if (r := _subprocess(m, n, args.pairs, 600)) is not None]
    print(_table(rows))
    if not args.no_search:
        best, search = largest_within("frontier", args.budget, 1024, args.max_nodes)
        print(
            f"\nfrontier: doubling search, build only (budget {args.budget:g} s, cap {args.max_nodes} nodes)"
        )
        print(_table(search))
        capped = " (search cap reached)" if best * 2 > args.max_nodes else ""
        print(f"largest frontier node count building within {args.budget:g} s: {best}{capped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
