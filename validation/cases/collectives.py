"""`axsim validate`'s collective section: measured collective curves against the network
model, each marked fit or prediction.

- pccl-*: the PCCL vendor-library rows (RCCL on Frontier, NCCL 2.21.5 on Perlmutter, as
  validation/published/data/pccl_builds.yaml reads them off the logs; all-gather and
  reduce-scatter over whole nodes, 8 to 1,024 GPUs; validation/published/data/
  pccl_vendor.csv). Every row is simulated one group alone through `axsim collective`'s
  engine under the library build it was measured with (so the build's measured regimes
  apply: RCCL's small-step stall, simulator/network/regimes.py), except the rows a
  documented rule excludes (validation/calibration/benchmark_logs.py EXCLUSION_RULES; each rule's count
  is in the case's detail). Per machine, the rank counts the preset's terms were fitted
  on (machines.yaml `collectives.fit.ranks`) are the fit set and every other rank count
  the prediction set; each set reports the median and the 90th percentile of
  |simulated / measured - 1|, bounded by 20% and 50%.
- pccl-*-hybrid: PCCL's hierarchical all-gather (validation/published/data/
  pccl_hybrid.csv), predicted from the model fitted on the vendor rows only: the
  inter-node all-gather of S/k among the k GPUs of equal local rank (one per node, all k
  groups at once), the intra-node all-gather of S on every node, and the on-device
  permutation (torch.cat of the splits then a copy: 4 S of memory traffic at the GPU's
  HBM bandwidth), one after the other as the benchmark runs them. Perlmutter's
  `hybrid-nccl-nccl` rows run the inter-node phase through NCCL (like for like: a ring
  with one GPU per node); Frontier's `hybrid` rows through Cray MPICH's MPI_Allgather,
  priced here as the machine's ring (the library differs: a cross-library prediction).
  Median |error| bounded by 25%.
- curve-dgx-h100: Vidur's 8-GPU DGX H100 all-reduce (2 KiB - 64 MiB), the median and
  90th-percentile error over 24 log-spaced sizes, with the dgx-h100 preset's terms, which
  `axsim calibrate` fitted on this very curve (a consistency check of the fit, marked fit),
  bounded like the PCCL cases.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from validation.experiments.tasks import Task, task

PCCL_FILE = "pccl_vendor.csv"
HYBRID_FILE = "pccl_hybrid.csv"
HYBRID_LIBRARIES = {"frontier": "hybrid", "perlmutter": "hybrid-nccl-nccl"}
HYBRID_BOUND = 25.0
PERMUTE_PASSES = 4  # torch.cat of the splits (read S, write S) then copy_ (read S, write S)
VIDUR_FILE = "vidur_h100_allreduce_8gpu.csv"
PCCL_CITE = "PCCL measurements (axonn-ai/sc2025-pccl-reproducer)"
PCCL_SOURCE = (
    "axonn-ai/sc2025-pccl-reproducer data/ Slurm logs (commit cfad79d), vendor-library rows "
    "as extracted in shared/traces/pccl; validation/published/data/pccl_vendor.csv"
)
VIDUR_SOURCE = (
    "Vidur (microsoft/vidur) data/profiling/network/h100_dgx/all_reduce.csv, commit "
    "7d47513, 8 workers on one node; validation/published/data/vidur_h100_allreduce_8gpu.csv"
)
BOUNDS = {"median": 20.0, "p90": 50.0}
CURVE_POINTS = 24
FLOW = "validation.cases.collectives"


def _data_path(name: str) -> Path:
    return Path(str(resources.files("validation.published").joinpath(f"data/{name}")))


@cache
def pccl_samples() -> tuple[list[Any], dict[str, list[Any]]]:
    """(kept, excluded by rule) vendor-library samples of the packaged PCCL file."""
    from validation.calibration.benchmark_logs import exclusions, read_pccl_csv

    return exclusions(read_pccl_csv(_data_path(PCCL_FILE)))


@cache
def hybrid_samples(machine: str) -> list[Any]:
    """PCCL's hierarchical all-gather rows of `machine` (HYBRID_LIBRARIES' variant)."""
    from validation.calibration.benchmark_logs import read_pccl_csv

    rows = read_pccl_csv(_data_path(HYBRID_FILE), libraries=(HYBRID_LIBRARIES[machine],))
    return [s for s in rows if s.machine == machine]


def _excluded_detail(machine: str) -> str:
    from validation.calibration.benchmark_logs import EXCLUSION_RULES

    _, excluded = pccl_samples()
    parts = [
        f"{sum(1 for s in rows if s.machine == machine)} excluded by rule {rule} "
        f"({EXCLUSION_RULES[rule]})"
        for rule, rows in excluded.items()
    ]
    return "; ".join(parts)


def fit_ranks(machine: str) -> tuple[int, ...]:
    """The rank counts a preset's collective terms were fitted on."""
    from topologies.catalogue import machine_preset

    fit = machine_preset(machine).collectives.get("fit", {})
    return tuple(int(r) for r in fit.get("ranks", ()))


# ------------------------------------------------------------------ tasks
def pccl_curve(
    machine: str, op: str, ranks: int, nodes: int, sizes: list[int], build: str = ""
) -> list[Any]:
    """Simulated time of one group of `ranks` GPUs on `nodes` whole nodes, per size, under
    the library build it was measured with ("": the preset's)."""
    from simulator.benchmarks.collectives import collective_sweep
    from simulator.network.params import network_params_for
    from topologies.machines import build_machine

    topo = build_machine(machine, nodes)
    params = network_params_for(topo)
    if build:
        params = params.with_library(build)
    rows = collective_sweep(topo, op, ranks, 1, sizes, instances="one", params=params)
    return [{"bytes": r.bytes, "time_s": r.time_s, "protocol": r.protocol} for r in rows]


def hybrid_curve(machine: str, ranks: int, nodes: int, sizes: list[int]) -> list[Any]:
    """Simulated time of PCCL's hierarchical all-gather over `nodes` whole nodes, per size
    (module doc): inter-node phase + intra-node phase + permutation, in sequence."""
    from simulator.benchmarks.collectives import collective_sweep
    from topologies.hardware import gpu_catalogue
    from topologies.machines import build_machine

    topo = build_machine(machine, nodes)
    k = ranks // nodes
    hbm = gpu_catalogue()[topo.gpu_type].hbm_bandwidth_Bps
    out = []
    for size in sizes:
        inter = 0.0
        if nodes > 1:
            (row,) = collective_sweep(
                topo, "all-gather", nodes, 1, [size // k], instances="all", per_node=1
            )
            inter = row.time_s
        (intra,) = collective_sweep(topo, "all-gather", k, 1, [size], instances="all", per_node=k)
        permute = PERMUTE_PASSES * size / hbm
        out.append(
            {"bytes": size, "time_s": inter + intra.time_s + permute, "inter_s": inter,
             "intra_s": intra.time_s, "permute_s": permute}
        )  # fmt: skip
    return out


def vidur_curve() -> dict[str, Any]:
    """Measured (min over ranks of medians) and simulated 8-GPU H100 all-reduce times."""
    from simulator.benchmarks.collectives import collective_sweep
    from topologies.machines import build_machine

    measured = _vidur_points()
    topo = build_machine("dgx-h100", 1)
    rows = collective_sweep(topo, "all-reduce", 8, 1, [int(b) for b, _ in measured])
    return {
        "bytes": [b for b, _ in measured],
        "measured_s": [t for _, t in measured],
        "simulated_s": [r.time_s for r in rows],
        "protocols": [r.protocol for r in rows],
    }


def _vidur_points() -> list[tuple[float, float]]:
    """CURVE_POINTS log-spaced measured sizes (the nearest measured size to each)."""
    per: dict[int, float] = {}
    with _data_path(VIDUR_FILE).open() as fh:
        for row in csv.DictReader(fh):
            size = int(row["size"])
            ms = float(row["time_stats.all_reduce.median"])
            per[size] = min(per.get(size, math.inf), ms)
    sizes = np.array(sorted(per))
    targets = np.geomspace(sizes[0], sizes[-1], CURVE_POINTS)
    picked = sorted({int(sizes[np.abs(np.log(sizes / t)).argmin()]) for t in targets})
    return [(float(s), per[s] * 1e-3) for s in picked]


# ------------------------------------------------------------------ cases
def _pccl_tasks(machine: str) -> list[Task]:
    kept, _ = pccl_samples()
    layouts: dict[tuple[str, int, int, str], set[int]] = defaultdict(set)
    for s in kept:
        if s.machine == machine:
            layouts[(s.kind.value, s.ranks, s.nodes, s.build)].add(int(s.nbytes))
    return [
        task(
            f"{FLOW}:pccl_curve",
            label=f"{machine} {op} {ranks}{f' ({build})' if build else ''}",
            machine=machine,
            op=op,
            ranks=ranks,
            nodes=nodes,
            sizes=sorted(sizes),
            build=build,
        )
        for (op, ranks, nodes, build), sizes in sorted(layouts.items())
    ]


def pccl_errors(machine: str, results: list[Any]) -> list[tuple[Any, float]]:
    """(sample, |simulated / measured - 1|) of every kept sample of `machine`."""
    simulated: dict[tuple[str, int, str, int], float] = {}
    for t, res in zip(_pccl_tasks(machine), results, strict=True):
        kw = t.kwargs
        for row in res:
            simulated[(kw["op"], kw["ranks"], kw["build"], row["bytes"])] = row["time_s"]
    kept, _ = pccl_samples()
    return [
        (s, abs(simulated[(s.kind.value, s.ranks, s.build, int(s.nbytes))] / s.time_s - 1.0))
        for s in kept
        if s.machine == machine
    ]


def _hybrid_tasks(machine: str) -> list[Task]:
    layouts: dict[tuple[int, int], set[int]] = defaultdict(set)
    for s in hybrid_samples(machine):
        layouts[(s.ranks, s.nodes)].add(int(s.nbytes))
    return [
        task(
            f"{FLOW}:hybrid_curve",
            label=f"{machine} hybrid all-gather {ranks}",
            machine=machine,
            ranks=ranks,
            nodes=nodes,
            sizes=sorted(sizes),
        )
        for (ranks, nodes), sizes in sorted(layouts.items())
    ]


def hybrid_errors(machine: str, results: list[Any]) -> list[tuple[Any, float]]:
    """(sample, |simulated / measured - 1|) of every hybrid all-gather row of `machine`."""
    simulated: dict[tuple[int, int], float] = {}
    for t, res in zip(_hybrid_tasks(machine), results, strict=True):
        for row in res:
            simulated[(t.kwargs["ranks"], row["bytes"])] = row["time_s"]
    return [
        (s, abs(simulated[(s.ranks, int(s.nbytes))] / s.time_s - 1.0))
        for s in hybrid_samples(machine)
    ]


def _hybrid_case(machine: str, make: Callable[..., Any]) -> Any:
    def tasks(reduced: bool) -> list[Task]:
        return _hybrid_tasks(machine)

    def value(res: list[Any]) -> tuple[float, str]:
        errs = hybrid_errors(machine, res)
        values = np.array([e for _, e in errs])
        per_rank: dict[int, list[float]] = defaultdict(list)
        for s, e in errs:
            per_rank[s.ranks].append(e)
        detail = ", ".join(
            f"{r}: {100 * statistics.median(v):.0f}%" for r, v in sorted(per_rank.items())
        )
        inter = (
            "NCCL (like for like)"
            if machine == "perlmutter"
            else "Cray MPICH MPI_Allgather, priced as the machine's ring (cross-library)"
        )
        return 100.0 * float(np.median(values)), (
            f"{len(values)} '{HYBRID_LIBRARIES[machine]}' all-gather measurements, none "
            f"fitted on; inter-node phase through {inter}; p90 "
            f"{100 * float(np.quantile(values, 0.9)):.0f}%; median error by rank count: "
            f"{detail}"
        )

    return make(
        f"pccl-{machine}-hybrid-median",
        "median |error| of hierarchical all-gather time",
        "%",
        HYBRID_BOUND,
        HYBRID_BOUND,
        PCCL_CITE,
        PCCL_SOURCE + "; validation/published/data/pccl_hybrid.csv",
        tasks,
        value,
        fitted=False,
        bound=True,
    )


def _pccl_case(machine: str, role: str, stat: str, make: Callable[..., Any]) -> Any:
    ranks_fit = fit_ranks(machine)

    def tasks(reduced: bool) -> list[Task]:
        return _pccl_tasks(machine)

    def value(res: list[Any]) -> tuple[float, str]:
        errs = [(s, e) for s, e in pccl_errors(machine, res)
                if (s.ranks in ranks_fit) == (role == "fit")]  # fmt: skip
        values = np.array([e for _, e in errs])
        got = float(np.median(values) if stat == "median" else np.quantile(values, 0.9))
        per_rank = defaultdict(list)
        for s, e in errs:
            per_rank[s.ranks].append(e)
        detail = ", ".join(
            f"{r}: {100 * statistics.median(v):.0f}%" for r, v in sorted(per_rank.items())
        )
        ranks = sorted(per_rank)
        excluded = _excluded_detail(machine)
        return 100.0 * got, (
            f"{len(values)} measurements at {', '.join(map(str, ranks))} ranks "
            f"({'fitted on' if role == 'fit' else 'predicted; fitted on'} "
            f"{', '.join(map(str, ranks_fit))}); median error by rank count: {detail}"
            f"{f'; {excluded}' if excluded else ''}"
        )

    return make(
        f"pccl-{machine}-{'fit' if role == 'fit' else 'predicted'}-{stat}",
        f"{stat} |error| of collective time",
        "%",
        BOUNDS[stat],
        BOUNDS[stat],
        PCCL_CITE,
        PCCL_SOURCE,
        tasks,
        value,
        fitted=role == "fit",
        bound=True,
    )


def collective_cases(make: Callable[..., Any]) -> list[Any]:
    """The collective section's cases, built with `make` (validation/cases/case.py: Case)."""
    out = [
        _pccl_case(machine, role, stat, make)
        for machine in ("frontier", "perlmutter")
        for role in ("fit", "predict")
        for stat in ("median", "p90")
    ]
    out += [_hybrid_case(machine, make) for machine in ("frontier", "perlmutter")]

    def tasks(reduced: bool) -> list[Task]:
        return [task(f"{FLOW}:vidur_curve", label="dgx-h100 all-reduce curve")]

    def value_of(stat: str) -> Callable[[list[Any]], tuple[float, str]]:
        def value(res: list[Any]) -> tuple[float, str]:
            r = res[0]
            errs = [abs(s / m - 1) for s, m in zip(r["simulated_s"], r["measured_s"], strict=True)]
            got = np.median(errs) if stat == "median" else np.quantile(errs, 0.9)
            used = sorted(set(r["protocols"]))
            return 100.0 * float(got), (
                f"{len(errs)} sizes 2 KiB - 64 MiB, 8 GPUs (the curve the preset was fitted "
                f"on); worst {100 * max(errs):.0f}%; protocols {', '.join(used)}"
            )

        return value

    for stat in ("median", "p90"):
        out.append(
            make(
                f"curve-dgx-h100-{stat}",
                f"{stat} |error| of all-reduce time",
                "%",
                BOUNDS[stat],
                BOUNDS[stat],
                "Vidur NCCL profile",
                VIDUR_SOURCE,
                tasks,
                value_of(stat),
                fitted=True,
                bound=True,
            )
        )
    return out
