"""`axsim validate`'s collective section: measured collective curves against the network
model, each marked fit or prediction.

- pccl-*: the PCCL vendor-library rows (RCCL 2.18.6 on Frontier, NCCL 2.15.5 on
  Perlmutter, all-gather and reduce-scatter over whole nodes, 8 to 1,024 GPUs;
  validation/published/data/pccl_vendor.csv). Unhealthy points (more than 2x slower
  than a larger message of the same job: RCCL/libfabric stalls, connection setup; see
  validation/collective_logs.py) are dropped, the rest simulated one group alone through
  `axsim collective`'s engine. Per machine, the rank counts the preset's terms were
  fitted on (machines.yaml `collectives.fit.ranks`) are the fit set and every other rank
  count the prediction set; each set reports the median and the 90th percentile of
  |simulated / measured - 1|, bounded by 20% and 50%.
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
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from validation.figures.base import Task, task

PCCL_FILE = "pccl_vendor.csv"
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
FLOW = "validation.validate_collectives"


def _data_path(name: str) -> Path:
    return Path(str(resources.files("validation.published").joinpath(f"data/{name}")))


def pccl_samples() -> tuple[list[Any], list[Any]]:
    """(kept, dropped) vendor-library samples of the packaged PCCL file."""
    from validation.collective_logs import drop_unhealthy, read_pccl_csv

    return drop_unhealthy(read_pccl_csv(_data_path(PCCL_FILE)))


def fit_ranks(machine: str) -> tuple[int, ...]:
    """The rank counts a preset's collective terms were fitted on."""
    from topologies.catalogue import machine_preset

    fit = machine_preset(machine).collectives.get("fit", {})
    return tuple(int(r) for r in fit.get("ranks", ()))


# ------------------------------------------------------------------ tasks
def pccl_curve(machine: str, op: str, ranks: int, nodes: int, sizes: list[int]) -> list[Any]:
    """Simulated time of one group of `ranks` GPUs on `nodes` whole nodes, per size."""
    from simulator.benchmarks.collectives import collective_sweep
    from topologies.machines import build_machine

    topo = build_machine(machine, nodes)
    rows = collective_sweep(topo, op, ranks, 1, sizes, instances="one")
    return [{"bytes": r.bytes, "time_s": r.time_s, "protocol": r.protocol} for r in rows]


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
    layouts: dict[tuple[str, int, int], set[int]] = defaultdict(set)
    for s in kept:
        if s.machine == machine:
            layouts[(s.kind.value, s.ranks, s.nodes)].add(int(s.nbytes))
    return [
        task(
            f"{FLOW}:pccl_curve",
            label=f"{machine} {op} {ranks}",
            machine=machine,
            op=op,
            ranks=ranks,
            nodes=nodes,
            sizes=sorted(sizes),
        )
        for (op, ranks, nodes), sizes in sorted(layouts.items())
    ]


def pccl_errors(machine: str, results: list[Any]) -> list[tuple[Any, float]]:
    """(sample, |simulated / measured - 1|) of every kept sample of `machine`."""
    simulated: dict[tuple[str, int, int], float] = {}
    for t, res in zip(_pccl_tasks(machine), results, strict=True):
        kw = t.kwargs
        for row in res:
            simulated[(kw["op"], kw["ranks"], row["bytes"])] = row["time_s"]
    kept, _ = pccl_samples()
    return [
        (s, abs(simulated[(s.kind.value, s.ranks, int(s.nbytes))] / s.time_s - 1.0))
        for s in kept
        if s.machine == machine
    ]


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
        return 100.0 * got, (
            f"{len(values)} measurements at {', '.join(map(str, ranks))} ranks "
            f"({'fitted on' if role == 'fit' else 'predicted; fitted on'} "
            f"{', '.join(map(str, ranks_fit))}); median error by rank count: {detail}"
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
    """The collective section's cases, built with `make` (validation/case.py: Case)."""
    out = [
        _pccl_case(machine, role, stat, make)
        for machine in ("frontier", "perlmutter")
        for role in ("fit", "predict")
        for stat in ("median", "p90")
    ]

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
