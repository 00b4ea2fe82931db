"""Published FSDP and DeepSpeed training runs against axsim's predictions.

`python -m validation.framework_runs [--only PREFIX] [--csv FILE]` simulates every run of
validation/published/data/framework_runs.yaml with the frameworks' own settings and
prints predicted against published throughput (or iteration time, or the Megatron
formula's TFLOP/s), the error, the compute / exposed-communication split, the memory
estimate and its verdict. Nothing is fitted on these runs.
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from typing import Any

from validation.published import load_yaml


@dataclass(frozen=True)
class RunResult:
    """One run: published and predicted values of its metric, and the split."""

    name: str
    metric: str
    published: float
    predicted: float
    iteration_s: float
    compute_s: float
    exposed_comm_s: float
    memory_GB: float
    memory_lower_GB: float
    verdict: str
    capacity_GB: float

    @property
    def error_pct(self) -> float:
        """Predicted speed against published speed (positive: axsim too fast); for an
        iteration time the speed is its inverse."""
        if self.metric == "iteration_s":
            return 100.0 * (self.published / self.predicted - 1.0)
        return 100.0 * (self.predicted - self.published) / self.published


def _overrides(run: dict[str, Any]) -> list[str]:
    out = [f"cluster.machine={run['machine']}", f"cluster.gpus={run['gpus']}"]
    for key in ("gpu", "nics_per_node", "nic_bandwidth_GBps"):
        if key in run:
            out.append(f"cluster.{key}={run[key]}")
    for k, v in run["model"].items():
        out.append(f"model.{k}={v}")
    par = run["parallel"]
    out.append(f"parallel.strategy={par['strategy']}")
    for k, v in par.items():
        if k != "strategy":
            out.append(f"parallel.{k}={v}")
    for k, v in run["training"].items():
        out.append(f"training.{k}={v}")
    return out


def framework_of(run: dict[str, Any]) -> str:
    """The software a run used, for the summary by framework."""
    par = run["parallel"]
    strategy = par["strategy"]
    if strategy == "fsdp":
        return "FSDP2 (torchtitan)" if par.get("fsdp_version") == 2 else "FSDP1 (llm-foundry)"
    if strategy == "deepspeed":
        return "DeepSpeed ZeRO-3" if par.get("zero_stage") == 3 else "DeepSpeed pipeline"
    if strategy == "megatron":
        return "Megatron-Core"
    return str(strategy)


def megatron_tflops(cfg: Any, iteration_s: float, gpus: int) -> float:
    """The Megatron / BigScience hardware TFLOP/s (with activation recompute) per GPU:
    96 B s l h^2 (1 + s/6h + V/16lh) per iteration (Narayanan et al. 2021, Eq. 3)."""
    spec = cfg.model.spec()
    b = cfg.training.batch_tokens / spec.seq_len
    s, ll, h, v = spec.seq_len, spec.layers, spec.hidden, spec.vocab
    flops = 96 * b * s * ll * h * h * (1 + s / (6 * h) + v / (16 * ll * h))
    return flops / iteration_s / gpus / 1e12


def run_one(run: dict[str, Any]) -> RunResult:
    """Simulate one published run."""
    from simulator.api import simulate
    from simulator.config import load_config
    from workloads.models import model_flops_per_iteration

    seq = load_config(None, _overrides(run)).model.spec().seq_len
    cfg = load_config(
        None, [*_overrides(run), f"training.batch_tokens={run['batch_sequences'] * seq}"]
    )
    r = simulate(cfg).report
    gpus = run["gpus"]
    pub = run["published"]
    metric = next(iter(pub))
    if metric == "tokens_per_s_per_gpu":
        pred = r.batch_tokens / r.iteration_time_s / gpus
    elif metric == "iteration_s":
        pred = r.iteration_time_s
    elif metric == "tflops_per_gpu_model":
        tokens = cfg.training.batch_tokens
        flops = model_flops_per_iteration(cfg.model.spec(), tokens, recompute=False)
        pred = flops / r.iteration_time_s / gpus / 1e12
    else:
        pred = megatron_tflops(cfg, r.iteration_time_s, gpus)
    return RunResult(
        name=run["name"],
        metric=metric,
        published=float(pub[metric]),
        predicted=pred,
        iteration_s=r.iteration_time_s,
        compute_s=r.compute_time_s,
        exposed_comm_s=r.exposed_comm_time_s,
        memory_GB=r.memory_per_gpu_bytes / 1e9,
        memory_lower_GB=r.memory_lower_bytes / 1e9,
        verdict=r.memory_verdict,
        capacity_GB=r.memory_capacity_bytes / 1e9,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run names starting with this (comma-separated)")
    ap.add_argument("--csv", default=None, help="also write the rows to this CSV file")
    args = ap.parse_args()
    prefixes = [p for p in args.only.split(",") if p]
    runs = [
        r
        for r in load_yaml("framework_runs")["runs"]
        if not prefixes or any(r["name"].startswith(p) for p in prefixes)
    ]
    rows = []
    for run in runs:
        res = run_one(run)
        rows.append(res)
        print(
            f"{res.name:32s} {res.metric:24s} pub {res.published:9.2f} pred {res.predicted:9.2f} "
            f"speed err {res.error_pct:+6.1f}%  it {res.iteration_s:8.3f}s comp {res.compute_s:8.3f} "
            f"exp {res.exposed_comm_s:7.3f}  mem {res.memory_lower_GB:5.1f}-{res.memory_GB:5.1f}/"
            f"{res.capacity_GB:.0f} GB {res.verdict}",
            flush=True,
        )
    if rows:
        errs = [r.error_pct for r in rows]
        print(
            f"mean |error| {sum(map(abs, errs)) / len(errs):.1f}%, mean error "
            f"{sum(errs) / len(errs):+.1f}%, too fast {sum(e > 0 for e in errs)} of {len(errs)}",
            file=sys.stderr,
        )
        by: dict[str, list[float]] = {}
        for run, res in zip(runs, rows, strict=True):
            by.setdefault(framework_of(run), []).append(res.error_pct)
        for name, e in by.items():
            print(
                f"  {name:22s} {len(e):2d} runs: mean |error| {sum(map(abs, e)) / len(e):5.1f}%, "
                f"mean error {sum(e) / len(e):+6.1f}%, too fast {sum(x > 0 for x in e)}",
                file=sys.stderr,
            )
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow([*RunResult.__dataclass_fields__, "error_pct"])
            for r in rows:
                w.writerow([*(getattr(r, k) for k in RunResult.__dataclass_fields__), r.error_pct])


if __name__ == "__main__":
    main()
