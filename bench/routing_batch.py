"""Benchmark: scalar vs batch routing throughput, and the end-to-end effect on `axsim simulate`.

Part 1 routes N random GPU pairs on a large machine twice: pair by pair through
`Topology.route` (cache cold, as `CollectivePricer` used to) and in one call of
`Topology.routes_batch`; it reports pairs/s (wall and CPU), checks that both give the same
flat arrays, and the peak RSS of each mode (each case runs in its own subprocess).

Part 2 runs the profiled command of the batch-routing work,

    axsim simulate --machine frontier --gpus 32768 --model gpt-320b --grid 8,1,16,256 --json

once as is ("batch") and once with `Topology.routes_batch` replaced by the pair-by-pair
loop ("scalar", what `_routed_parts` did before), and reports wall time, peak RSS and the
iteration time (which must be identical).

    python bench/routing_batch.py                      # everything
    python bench/routing_batch.py --pairs 100000 --no-e2e
    python bench/routing_batch.py --case frontier 4096 200000 batch   # one case, JSON

Not a timed test: numbers depend on the machine and its load (compare CPU seconds when
the host is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

CASES: tuple[tuple[str, int], ...] = (("frontier", 4096), ("dgx-h100", 8192))
E2E_ARGS = (
    *("simulate", "--machine", "frontier", "--gpus", "32768"),
    *("--model", "gpt-320b", "--grid", "8,1,16,256", "--json"),
)


def _pairs(num_gpus: int, n: int, seed: int = 0) -> tuple[Any, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_gpus, size=n)
    dst = rng.integers(0, num_gpus - 1, size=n)
    return src, dst + (dst >= src)  # never src == dst


def run_case(machine: str, nodes: int, pairs: int, mode: str) -> dict[str, Any]:
    """Route `pairs` random pairs in `mode` (scalar | batch | both); timings, RSS, check."""
    import numpy as np

    from topologies.machines import build_machine
    from topologies.types import RouteBatch

    topo = build_machine(machine, nodes)
    src, dst = _pairs(topo.num_gpus, pairs)
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    out: dict[str, Any] = {"machine": machine, "nodes": nodes, "pairs": pairs, "mode": mode}
    results: dict[str, RouteBatch] = {}
    for m in ("scalar", "batch") if mode == "both" else (mode,):
        w0, c0 = time.perf_counter(), time.process_time()
        if m == "scalar":
            pairs_iter = zip(src.tolist(), dst.tolist(), strict=True)
            results[m] = RouteBatch.from_routes([topo.route(a, b) for a, b in pairs_iter])
        else:
            results[m] = topo.routes_batch(src, dst)
        out[f"{m}_wall_s"] = time.perf_counter() - w0
        out[f"{m}_cpu_s"] = time.process_time() - c0
    if mode == "both":
        a, b = results["scalar"], results["batch"]
        out["identical"] = all(
            np.array_equal(getattr(a, f), getattr(b, f))
            for f in ("links", "path_len", "path_weight", "paths_per_route")
        )
    any_result = next(iter(results.values()))
    out["paths_per_route"] = float(any_result.paths_per_route.mean())
    out["links_per_route"] = any_result.links.shape[0] / pairs
    out["base_rss_MB"] = base_rss
    out["peak_rss_MB"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _subprocess_json(cmd: list[str]) -> dict[str, Any] | None:
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"  failed: {' '.join(cmd[-5:])}: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _case(machine: str, nodes: int, pairs: int, mode: str) -> dict[str, Any] | None:
    cmd = [sys.executable, __file__, "--case", machine, str(nodes), str(pairs), mode]
    return _subprocess_json(cmd)


def run_e2e(mode: str) -> dict[str, Any]:
    """The simulate command in this process (scalar mode patches routes_batch); JSON out."""
    import contextlib
    import io

    import numpy as np

    from simulator.cli import main
    from topologies.types import RouteBatch, Topology

    if mode == "scalar":

        def loop(self: Topology, src_gpus: np.ndarray, dst_gpus: np.ndarray) -> RouteBatch:
            pairs = zip(np.asarray(src_gpus).tolist(), np.asarray(dst_gpus).tolist(), strict=True)
            return RouteBatch.from_routes([self.route(a, b) for a, b in pairs])

        Topology.routes_batch = loop  # type: ignore[method-assign]
    buf = io.StringIO()
    w0 = time.perf_counter()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main(list(E2E_ARGS))
    wall = time.perf_counter() - w0
    report = json.loads(buf.getvalue())
    return {
        "mode": mode,
        "wall_s": wall,
        "iteration_time_s": report["iteration_time_s"],
        "peak_rss_MB": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def _e2e(mode: str) -> dict[str, Any] | None:
    """Run one e2e mode in a child; the wall time includes interpreter start and imports."""
    w0 = time.perf_counter()
    row = _subprocess_json([sys.executable, __file__, "--e2e-case", mode])
    if row is not None:
        row["process_wall_s"] = time.perf_counter() - w0
    return row


def _case_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'machine':<10}{'nodes':>6}{'pairs':>8}{'paths':>6}{'links':>7}"
        f"{'scalar s':>10}{'(cpu)':>7}{'pairs/s':>10}{'MB':>6}"
        f"{'batch s':>9}{'(cpu)':>7}{'pairs/s':>11}{'MB':>6}{'x cpu':>7}{'same':>6}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        s, b = r["scalar"], r["batch"]
        lines.append(
            f"{r['machine']:<10}{r['nodes']:>6}{r['pairs']:>8}{b['paths_per_route']:>6.1f}"
            f"{b['links_per_route']:>7.1f}{s['scalar_wall_s']:>10.2f}{s['scalar_cpu_s']:>7.2f}"
            f"{r['pairs'] / s['scalar_cpu_s']:>10.0f}{s['peak_rss_MB'] - s['base_rss_MB']:>6.0f}"
            f"{b['batch_wall_s']:>9.3f}{b['batch_cpu_s']:>7.3f}"
            f"{r['pairs'] / b['batch_cpu_s']:>11.0f}{b['peak_rss_MB'] - b['base_rss_MB']:>6.0f}"
            f"{s['scalar_cpu_s'] / b['batch_cpu_s']:>7.1f}{r['identical']!s:>6}"
        )
    lines.append("MB: peak RSS growth while routing (the scalar mode includes the route cache)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs=4, metavar=("MACHINE", "NODES", "PAIRS", "MODE"))
    parser.add_argument("--e2e-case", choices=("scalar", "batch"))
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 500_000])
    parser.add_argument("--no-e2e", action="store_true", help="skip the simulate command")
    args = parser.parse_args(argv)
    if args.case:
        m, nodes, pairs, mode = args.case
        print(json.dumps(run_case(m, int(nodes), int(pairs), mode)))
        return 0
    if args.e2e_case:
        print(json.dumps(run_e2e(args.e2e_case)))
        return 0
    rows = []
    for machine, nodes in CASES:
        for pairs in args.pairs:
            check = _case(machine, nodes, min(pairs, 50_000), "both")
            s, b = _case(machine, nodes, pairs, "scalar"), _case(machine, nodes, pairs, "batch")
            if check and s and b:
                rows.append(
                    {"machine": machine, "nodes": nodes, "pairs": pairs, "scalar": s, "batch": b}
                    | {"identical": check["identical"]}
                )
    print(_case_table(rows))
    if not args.no_e2e:
        print(f"\naxsim {' '.join(E2E_ARGS)}")
        for mode in ("scalar", "batch"):
            r = _e2e(mode)
            if r:
                print(
                    f"  {mode:<7} wall {r['wall_s']:6.2f} s (process {r['process_wall_s']:6.2f} s)"
                    f"  peak RSS {r['peak_rss_MB']:6.0f} MB  iteration {r['iteration_time_s']!r}"
                )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
