"""The scaling benchmark behind `axsim bench` and `python bench/scale.py`.

Each case runs in its own subprocess (so its peak RSS is its own) and reports wall time,
peak RSS, events and events per second. In the same run a reference loop measures the raw
simpy event rate of this machine (a process yielding timeouts), and every case's event
rate (events per second of event processing; setup - building the topology and
workload, compiling programs, binding collective patterns - is reported separately) is
reported as a ratio to it. Cases use fixed, memory-feasible grids (found once with
`axsim search`) so the benchmark measures the engine, not the search.

`kernel_model_s` is the wall time spent in the kernel model inside that run: pricing
compute ops (KernelModel: GEMM curve, memory-bound and attention roofline, host issue),
stretching the ops that overlap communication (interference), and splitting the report's
compute into its rows. It is measured by wrapping those functions in the child process
(outermost calls only), so it is part of `wall_time_s`, not extra.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any, TypedDict

from simulator.engine.reference import raw_simpy_rate


class BenchResult(TypedDict):
    """What `run_bench` returns (JSON-ready); `cases` are `run_case` rows."""

    raw_simpy_events_per_s: float
    cases: list[dict[str, Any]]
    cases_defined: list[dict[str, Any]]
    python: str
    cpus: int | None


@dataclass(frozen=True)
class Case:
    """One benchmark case: a config as `--set` overrides."""

    name: str
    mode: str
    network: str
    overrides: tuple[str, ...]
    target: str = ""


def _case(
    name: str,
    machine: str,
    gpus: int,
    model: str,
    grid: str,
    mode: str,
    network: str,
    target: str = "",
) -> Case:
    x, y, z, d = grid.split(",")
    return Case(
        name=f"{name} [{mode}, {network}]",
        mode=mode,
        network=network,
        overrides=(
            f"cluster.machine={machine}",
            f"cluster.gpus={gpus}",
            "cluster.nodes=null",
            f"model.name={model}",
            f"parallel.grid={{x: {x}, y: {y}, z: {z}, data: {d}}}",
            f"engine.mode={mode}",
            f"engine.network={network}",
        ),
        target=target,
    )


def default_cases(quick: bool = False) -> list[Case]:
    """The issue's cases: symmetric at scale, full mode at 256/1,024/4,096, both networks."""
    sym = [
        ("GPT-80B, 1,024 Perlmutter GPUs", "perlmutter", 1024, "gpt-80b", "4,4,4,16", ""),
        ("GPT-80B, 8,192 Frontier GCDs", "frontier", 8192, "gpt-80b", "8,2,8,64", ""),
        (
            "GPT-320B, 32,768 Frontier GCDs",
            "frontier",
            32768,
            "gpt-320b",
            "8,1,16,256",
            "< 10 s, < 2 GB",
        ),
        ("GPT-60B, 6,144 Alps GPUs", "alps", 6144, "gpt-60b", "6,1,8,128", ""),
        ("GPT-640B, 65,536 DGX H100 GPUs", "dgx-h100", 65536, "gpt-640b", "8,2,16,256", "< 20 s"),
    ]
    full = [
        ("GPT-80B, 256 Perlmutter GPUs", "perlmutter", 256, "gpt-80b", "4,4,4,4", ""),
        (
            "GPT-80B, 1,024 Perlmutter GPUs",
            "perlmutter",
            1024,
            "gpt-80b",
            "4,4,4,16",
            "< 60 s, < 8 GB",
        ),
        ("GPT-80B, 4,096 Perlmutter GPUs", "perlmutter", 4096, "gpt-80b", "4,4,4,64", ""),
    ]
    if quick:
        sym, full = sym[:1], full[:1]
    cases = []
    for network in ("contention", "alpha-beta"):
        cases += [
            _case(n, m, g, mo, gr, "symmetric", network, t if network == "contention" else "")
            for n, m, g, mo, gr, t in sym
        ]
        cases += [
            _case(n, m, g, mo, gr, "full", network, t if network == "contention" else "")
            for n, m, g, mo, gr, t in full
        ]
    return cases


class KernelModelTimer:
    """Accumulates the wall time of the kernel model's entry points while active."""

    TARGETS = (
        ("simulator.cost.kernels", "KernelModel", "duration_s"),
        ("simulator.cost.kernels", "KernelModel", "durations_s"),
        ("simulator.cost.kernels", "KernelModel", "issue_s"),
        ("simulator.cost.kernels", "KernelModel", "describe"),
        ("simulator.engine.compiled", None, "_stretch"),
        ("simulator.outputs.analysis", None, "compute_by_kind"),
    )

    def __init__(self) -> None:
        self.seconds = 0.0
        self.calls = 0
        self._depth = 0
        self._saved: list[tuple[object, str, object]] = []

    def _wrap(self, fn: Any) -> Any:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.seconds += time.perf_counter() - t0
                    self.calls += 1

        return timed

    def __enter__(self) -> KernelModelTimer:
        import importlib

        for module, cls, name in self.TARGETS:
            owner: Any = importlib.import_module(module)
            if cls is not None:
                owner = getattr(owner, cls)
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._wrap(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, original in reversed(self._saved):
            setattr(owner, name, original)
        self._saved.clear()


def run_case_inprocess(overrides: list[str]) -> dict[str, object]:
    """Run one case here and return its measurements (peak RSS of this process)."""
    import resource

    from simulator.api import simulate
    from simulator.config import load_config

    cfg = load_config(None, overrides)
    t0 = time.perf_counter()
    with KernelModelTimer() as kernel_model:
        result = simulate(cfg)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    eng = result.engine
    return {
        "wall_time_s": wall,
        "peak_rss_bytes": rss,
        "events": eng.events,
        "events_per_s": eng.events_per_s,
        "setup_time_s": eng.setup_time_s,
        "ops_simulated": eng.ops_processed,
        "ops_represented": eng.ops_represented,
        "skipped_segments": eng.skipped_segments,
        "iteration_time_s": result.report.iteration_time_s,
        "kernel_model_s": kernel_model.seconds,
        "kernel_model_calls": kernel_model.calls,
        "engine_mode": eng.mode,
        "microbatches": result.plan.parameters.get("microbatches"),
    }


def run_case(case: Case, timeout_s: float = 1800) -> dict[str, Any]:
    """Run a case in a fresh subprocess (the child's JSON measurements plus the case's fields,
    or its name and an error)."""
    cmd = [
        sys.executable,
        "-m",
        "simulator.trials.scaling",
        "--child",
        json.dumps(list(case.overrides)),
    ]
    env = dict(os.environ, PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired:
        return {"name": case.name, "error": f"timed out after {timeout_s:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        return {"name": case.name, "error": tail[0]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out.update(
        {
            "name": case.name,
            "mode": case.mode,
            "network": case.network,
            "target": case.target,
            "process_wall_time_s": time.perf_counter() - t0,
        }
    )
    return out


def run_bench(cases: list[Case], progress: object = None) -> BenchResult:
    """Run the reference loop and all cases; the result is JSON-ready."""
    raw = raw_simpy_rate()
    rows = []
    for c in cases:
        row = run_case(c)
        if "events_per_s" in row:
            row["ratio_to_raw_simpy"] = float(row["events_per_s"]) / raw
        rows.append(row)
        if callable(progress):
            progress(row)
    return {
        "raw_simpy_events_per_s": raw,
        "cases": rows,
        "cases_defined": [asdict(c) for c in cases],
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
    }


def _child(argv: list[str]) -> int:
    overrides = json.loads(argv[0])
    print(json.dumps(run_case_inprocess(overrides)))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        raise SystemExit(_child(sys.argv[2:]))
    raise SystemExit("use `axsim bench` or bench/scale.py")
