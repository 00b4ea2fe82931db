"""`axsim validate`: every published number the repo holds, simulated and compared.

Cases (validation/published/ holds the numbers and their sources):

| group | published | simulated by | tolerance |
|---|---|---|---|
| perlmutter-* | AxoNN's sustained PFLOP/s, 512-4,096 GPUs | the paper's procedure (published model's top 10 simulated) | 10% (512: info, the paper's outlier) |
| frontier-* | AxoNN's sustained PFLOP/s, 512-32,768 GCDs | the paper's procedure | 10% (16,384 and 32,768: 12%) |
| split-frontier-* | Fig. 7: computation and non-overlapped communication, Kernel tuning and Coll. overlap, 512-8,192 GCDs | the paper's procedure without overlap, then its grid with OAR+ORS+OAG | 5% / 25% |
| frontier-overlap-* | time per batch as OAR, ORS, OAG are added (GPT-80B, 8,192 GCDs) | the paper procedure's best grid, flags removed | 10% |
| bw-* | AxoNN's measured group bandwidths (1 GB concurrent all-reduce) | `axsim collective` on 16 nodes | 30% |
| nvswitch-* | 8-GPU all-reduce bus bandwidth and alpha (Vidur fit) | `axsim collective`, 1 GiB / 1 KiB | 15% / 50% |
| pccl-* | Frontier / Perlmutter all-gather and reduce-scatter, 8-1,024 GPUs (PCCL logs), each under its library build; exclusions only by documented, counted rules | `axsim collective`, one group | median <= 20%, p90 <= 50% |
| pccl-*-hybrid | PCCL's hierarchical all-gather (inter-node ring of one GPU per node + intra-node + permutation) | two `axsim collective` phases + a copy | median <= 25% |
| curve-dgx-h100 | Vidur's 8-GPU H100 all-reduce curve, 2 KiB - 64 MiB | `axsim collective` | median <= 25% |
| gemm-* | total of Vidur's measured large-token GEMM times | the kernel model | 10% |
| overlap-gpt-20b | "nearly 53%" from OAR+ORS+OAG | best grid with and without overlap | informational |

Tolerances, and why: 10% for the Perlmutter points (the brief the simulator is built
to); 30% for the bandwidth table, a consistency check of the network model: each cell is
one 2023 NCCL/RCCL measurement standing for a range of placements ("own >= 8"), the
table is not monotone where topology says it should be (Frontier own 4 < own 8), and
run-to-run variation on a shared dragonfly is 10-20%; 15% for NVSwitch bus bandwidth
(the quoted line fit itself is 6-16% off the measurements); 50% for the fitted alpha (a
line's intercept is only loosely a small-message latency); 10% for the GEMM total
(tests/test_kernels_fit.py's median bound). The overlap case has no tolerance: the
source gives neither machine nor GPU count (see axonn_overlap.yaml), so it is shown but
never fails.

Role: the perlmutter-*, frontier-* and overlap cases are predictions (no constant was
chosen from them); the nvswitch-*, curve-dgx-h100 and gemm-* numbers are measurements the
default link efficiencies and the GEMM curve were set from, and the bw-* cells inside one
Perlmutter node those of the default NVLink efficiency, so those cases check that the
fitted constants reproduce them through the full collective and kernel models. The
other bw-* cells are predictions: Frontier's and Perlmutter's link efficiencies and
protocol terms are now fitted on the PCCL measurements, not on this table. Each pccl-*
machine has a fit case (the rank counts its preset's terms were fitted on) and a
prediction case (every other rank count); bound cases (pccl-*, curve-*) pass when the
simulated error statistic is at most the bound, their "published" column.

Like for like: every AxoNN case runs the software environment its authors ran where
their launch scripts show it (validation/published/data/axonn_environments.yaml, named by
each data file's `environment:`): on Frontier, RCCL without GPUDirect RDMA (network
traffic staged through host memory, topologies/host_staging.py), the bandwidth table's
Frontier cells included; the machine presets keep what a well-configured job gets.

`--reduced` simulates only the published analytical model's best grid (top 1) for the AxoNN
cases instead of the top 10; every other case is unchanged (they take seconds).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from simulator.errors import ConfigError
from simulator.units import split_names
from validation.cases.case import Case, CaseResult
from validation.cases.collectives import collective_cases
from validation.cases.split import split_cases
from validation.experiments.runner import Progress, TaskFailed, run_tasks
from validation.experiments.simulations import gemm_times
from validation.experiments.tasks import Task, task
from validation.published import (
    axonn_bandwidths,
    axonn_environment,
    axonn_frontier,
    axonn_perlmutter,
    load_yaml,
    source,
)

VIDUR_GEMM_SOURCE = (
    "Vidur (microsoft/vidur) operator profiles data/profiling/compute/{a100,h100}/meta-llama/"
    "{Llama-2-7b-hf,Llama-2-70b-hf}/mlp.csv, commit 7d47513, median CUDA kernel times"
)
BW_NODES = 16
VALIDATE_TOP, REDUCED_TOP = 10, 1


# ------------------------------------------------------------------ cases
PAPER_TOLERANCE = {16384: 12.0, 32768: 12.0}  # issue 30: the two largest Frontier points
OUTLIERS = {
    ("perlmutter", 512): "an outlier by the paper's own account: 9.0 s against 7.4 s at "
    "1,024 GPUs with the same work per GPU, which the paper puts down to run-to-run "
    "variability from network congestion on Perlmutter; shown, never failed, no constant "
    "chosen for it",
}


def _weak_scaling_cases(name: str, machine: str, points: list[Any]) -> list[Case]:
    """AxoNN's weak-scaling points on one machine, like for like: the paper's own procedure
    (the published model's top 10 simulated, the fastest kept), compared as sustained
    PFLOP/s (the detail line gives the grid and the compute / exposed-communication split)."""
    data = load_yaml(name)
    cite, src, impl = data["cite"], source(name), data["implementation"]
    env = axonn_environment(data)

    def make(p: Any) -> Case:
        outlier = OUTLIERS.get((machine, p.gpus))

        def tasks(reduced: bool) -> list[Task]:
            return [_paper_task(machine, p.gpus, p.model, reduced, impl, environment=env)]

        def value(res: list[Any]) -> tuple[float, str]:
            r = res[0]
            rep = r["report"]
            g = "x".join(str(v) for v in r["grid"])
            exposed = ", ".join(
                f"{k} {v:.2f}" for k, v in rep["comm_time_by_group_s"].items() if v >= 0.005
            )
            return rep["pflops_total"], (
                f"grid {g} (published model rank {r['model_rank']}, best of {r['top']} "
                f"simulated), {rep['iteration_time_s']:.2f} s per batch (published "
                f"{p.time_per_batch_s} s) = compute {rep['compute_time_s']:.2f} + exposed comm "
                f"{rep['exposed_comm_time_s']:.2f}{f' ({exposed})' if exposed else ''}"
                + (f"; {outlier}" if outlier else "")
            )

        return Case(
            f"{machine}-{p.gpus}-{p.model}",
            "sustained PFLOP/s (outlier: info)" if outlier else "sustained PFLOP/s",
            "PFLOP/s",
            p.pflops,
            None if outlier else PAPER_TOLERANCE.get(p.gpus, 10.0),
            cite,
            src,
            tasks,
            value,
        )

    return [make(p) for p in points]


def _paper_task(
    machine: str,
    gpus: int,
    model: str,
    reduced: bool,
    implementation: str,
    overlap: list[str] | None = None,
    environment: dict[str, Any] | None = None,
) -> Task:
    """The paper's procedure at one point (its best grid only when reduced), with the
    code version and the software environment the authors ran there."""
    extra: dict[str, Any] = {} if overlap is None else {"overlap": overlap}
    if environment:
        extra["environment"] = environment
    return task(
        "axonn_paper",
        label=f"paper procedure {model} on {gpus} {machine}",
        machine=machine,
        gpus=gpus,
        model=model,
        top=REDUCED_TOP if reduced else VALIDATE_TOP,
        batch_tokens=None,
        implementation=implementation,
        **extra,
    )


def _perlmutter_cases() -> list[Case]:
    return _weak_scaling_cases("axonn_perlmutter", "perlmutter", axonn_perlmutter())


def _frontier_cases() -> list[Case]:
    return _weak_scaling_cases("axonn_frontier", "frontier", axonn_frontier())


def _overlap_tasks(
    machine: str,
    gpus: int,
    model: str,
    reduced: bool,
    implementation: str,
    environment: dict[str, Any] | None = None,
) -> list[Task]:
    """The paper's procedure at one point and the overlap steps simulated on its grid (the
    procedure's task is the weak-scaling point's, so it runs once)."""
    found = _paper_task(machine, gpus, model, reduced, implementation, environment=environment)
    extra: dict[str, Any] = {"environment": environment} if environment else {}
    overlap = task(
        "axonn_overlap",
        deps=[found],
        label="overlap steps",
        machine=machine,
        gpus=gpus,
        model=model,
        top=REDUCED_TOP if reduced else VALIDATE_TOP,
        batch_tokens=None,
        implementation=implementation,
        **extra,
    )
    return [found, overlap]


def _frontier_overlap_cases() -> list[Case]:
    """The SC'24 overlap ablation: each step's time per batch on the search's best grid."""
    data = load_yaml("axonn_frontier_overlap")
    machine, gpus, model = data["machine"], data["gpus"], data["model"]
    cite, src = data["cite"], source("axonn_frontier_overlap")

    def tasks(reduced: bool) -> list[Task]:
        return _overlap_tasks(
            machine, gpus, model, reduced, data["implementation"], axonn_environment(data)
        )

    def make(step: Any) -> Case:
        def value(res: list[Any]) -> tuple[float, str]:
            rep = res[1]["steps"][step["name"]]
            g = "x".join(str(v) for v in res[1]["grid"])
            return rep["iteration_time_s"], (
                f"grid {g}, overlap {step['overlap'] or 'none'}: compute "
                f"{rep['compute_time_s']:.2f} + exposed comm {rep['exposed_comm_time_s']:.2f} s"
            )

        return Case(
            f"frontier-overlap-{step['name'].lstrip('+').lower()}",
            f"time per batch, {model} on {gpus} GCDs",
            "s",
            float(step["time_per_batch_s"]),
            10.0,
            cite,
            src,
            tasks,
            value,
        )

    return [make(step) for step in data["steps"]]


def _bandwidth_cases() -> list[Case]:
    cite, src = load_yaml("axonn_bandwidths")["cite"], source("axonn_bandwidths")

    def make(e: Any) -> Case:
        def tasks(reduced: bool) -> list[Task]:
            return [
                task(
                    "group_bandwidth",
                    label=f"{e.machine} {e.label}",
                    machine=e.machine,
                    nodes=BW_NODES,
                    inner=e.inner,
                    own=e.own,
                    **({"environment": e.environment} if e.environment else {}),
                )
            ]

        def value(res: list[Any]) -> tuple[float, str]:
            r = res[0]
            return r["busbw_GBps"], (
                f"{e.label}: group {e.own}, stride {e.inner}, {r['instances']} "
                f"concurrent instances on {BW_NODES} nodes, {r['algorithm']}"
            )

        return Case(
            f"bw-{e.machine}-inner{e.inner}-own{e.own}",
            "group bus bandwidth",
            "GB/s",
            e.GBps,
            30.0,
            cite,
            src,
            tasks,
            value,
            # the default NVLink efficiency was set from Perlmutter's intra-node cells;
            # every inter-node cell, and Frontier's, is predicted (PCCL-fitted presets)
            fitted=e.machine == "perlmutter" and e.inner * e.own <= e.gpus_per_node,
        )

    return [make(e) for e in axonn_bandwidths()]


def _nvswitch_cases() -> list[Case]:
    data = load_yaml("nccl_nvswitch")
    cite, src = data["cite"], source("nccl_nvswitch")
    out = []
    for row in data["rows"]:
        m = row["machine"]

        def tasks(reduced: bool, m: str = m) -> list[Task]:
            return [
                task(
                    "collective_curve",
                    label=f"{m} all-reduce",
                    machine=m,
                    nodes=1,
                    op="all-reduce",
                    group=8,
                    sizes=[1024, 2**30],
                )
            ]

        def busbw(res: list[Any]) -> tuple[float, str]:
            r = res[0][1]
            return r["busbw_GBps"], f"1 GiB all-reduce on 8 GPUs, {r['algorithm']}"

        def alpha(res: list[Any]) -> tuple[float, str]:
            r = res[0][0]
            return r["time_s"] * 1e6, f"1 KiB all-reduce on 8 GPUs, {r['algorithm']}"

        out.append(
            Case(
                f"nvswitch-{m}-busbw",
                "8-GPU all-reduce bus bandwidth",
                "GB/s",
                row["busbw_GBps"],
                15.0,
                cite,
                src,
                tasks,
                busbw,
                fitted=True,  # NVLink efficiencies (defaults; DGX A100 preset)
            )
        )
        out.append(
            Case(
                f"nvswitch-{m}-alpha",
                "8-GPU all-reduce latency (alpha)",
                "µs",
                row["alpha_us"],
                50.0,
                cite,
                src,
                tasks,
                alpha,
                fitted=True,  # latency terms chosen with these fits in view
            )
        )
    return out


def _gemm_cases() -> list[Case]:
    out = []
    for gpu in ("a100", "h100"):

        def tasks(reduced: bool, gpu: str = gpu) -> list[Task]:
            return [task("gemm_times", label=f"GEMMs {gpu}", gpu=gpu)]

        def value(res: list[Any]) -> tuple[float, str]:
            return res[0][
                "modelled_s"
            ] * 1e3, f"{res[0]['gemms']} GEMMs, Llama-2 7B/70B shapes, TP 1-8"

        measured = gemm_times(gpu)["measured_s"] * 1e3  # a published number: read, not simulated
        out.append(
            Case(
                f"gemm-{gpu}",
                "total GEMM kernel time (>= 512 tokens)",
                "ms",
                measured,
                10.0,
                "Vidur operator profiles",
                VIDUR_GEMM_SOURCE,
                tasks,
                value,
                fitted=True,  # the GEMM efficiency curve is fitted on these profiles
            )
        )
    return out


def _overlap_case() -> Case:
    data = load_yaml("axonn_overlap")
    machine, gpus, model = data["assumed"]["machine"], data["assumed"]["gpus"], data["model"]

    def tasks(reduced: bool) -> list[Task]:
        return _overlap_tasks(
            machine, gpus, model, reduced, data["implementation"], axonn_environment(data)
        )

    def value(res: list[Any]) -> tuple[float, str]:
        steps = res[1]["steps"]
        t0, t1 = steps["baseline"]["iteration_time_s"], steps["+OAG"]["iteration_time_s"]
        g = "x".join(str(v) for v in res[1]["grid"])
        return 100.0 * (
            t0 / t1 - 1.0
        ), f"{model} on {gpus} {machine} GPUs (assumed), grid {g}: {t0:.2f} s -> {t1:.2f} s"

    return Case(
        "overlap-gpt-20b",
        "throughput gain of OAR+ORS+OAG",
        "%",
        float(data["improvement_percent"]),
        None,
        data["cite"],
        source("axonn_overlap"),
        tasks,
        value,
    )


def all_cases() -> list[Case]:
    """Every case, in table order."""
    from validation.cases.claim_ratios import claim_cases

    return [
        *_perlmutter_cases(),
        *_frontier_cases(),
        *_frontier_overlap_cases(),
        *split_cases(),
        *_bandwidth_cases(),
        *_nvswitch_cases(),
        *collective_cases(Case),
        *_gemm_cases(),
        _overlap_case(),
        *claim_cases(),
    ]


def select_cases(only: str | None) -> list[Case]:
    """Cases named by `--only` (comma-separated names or name prefixes such as 'bw-')."""
    cases = all_cases()
    if only is None:
        return cases
    out: list[Case] = []
    for item in split_names(only, "--only"):
        match = [c for c in cases if c.name == item or c.name.startswith(item)]
        if not match:
            raise ConfigError(
                f"--only: no case '{item}' (cases: {', '.join(c.name for c in cases)})"
            )
        out += [c for c in match if c not in out]
    return out


def run_validation(
    cases: Sequence[Case], *, reduced: bool = False, jobs: int = 1, progress: Progress | None = None
) -> tuple[list[CaseResult], float]:
    """Simulate every case (shared simulations run once) and compare."""
    t0 = time.perf_counter()
    planned = [(c, c.tasks(reduced)) for c in cases]
    results = run_tasks([t for _, ts in planned for t in ts], jobs, progress)
    out = []
    for c, ts in planned:
        res = [results[t.key] for t in ts]
        failed = next((r for r in res if isinstance(r, TaskFailed)), None)
        if failed is not None:
            out.append(CaseResult(c, None, failed.message, failed=True))
            continue
        value, detail = c.value(res)
        out.append(CaseResult(c, None if value is None else float(value), detail))
    return out, time.perf_counter() - t0
