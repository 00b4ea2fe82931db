"""The simulations behind the figures and `axsim validate`, as picklable task functions.

Every function takes plain JSON-able arguments and returns plain JSON-able data (report
dicts, never Result objects), so the figure runner can execute them in worker processes
and deduplicate identical calls across figures (the same search feeds the weak-scaling,
overlap and Megatron figures).

- `axonn_search`: `axsim search`'s procedure (simulator/search/grids.py): every valid AxoNN
  grid (and weight-cache choice) ranked by the analytical model (group bandwidths
  measured on the topology by axsim's own collective model), the best `screen` replayed
  statically, the top K of those simulated, the fastest kept.
- `axonn_overlap`: the best grid of a search re-simulated with the overlap flags added
  one at a time (baseline, +OAR, +ORS, +OAG).
- `axonn_paper`: the SC'24 paper's own procedure (simulator/trials/procedure.py): the
  published analytical model's top K simulated, the fastest kept; `axonn_split`: its
  grid chosen without overlap (Fig. 7's "Perf model"/"Kernel tuning"), then with
  OAR+ORS+OAG on the same grid ("Coll. overlap"): computation and non-overlapped
  communication of each.
- `axonn_ranking` / `axonn_grid`: the analytical ranking alone, and one grid simulated.
  A grid with a group the bandwidth probe cannot place is ranked last instead of
  failing the search (groups not aligned with nodes, such as the factor 3 that 6,144
  GPUs force, are measured on the nodes they tile).
- `strategy_best`: `axsim compare-strategies`' search for one strategy.
- `collective_curve`: `axsim collective` (nccl-tests style) for one group;
  `group_bandwidth`: AxoNN's bandwidth measurement (1 GiB, all instances at once).
- `gemm_times`: the kernel model against Vidur's measured GEMMs (`axsim validate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.config import ExperimentConfig, default_config_mapping, validate_config
from simulator.errors import ConfigError

Model = str | Mapping[str, Any]
OVERLAP_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("baseline", ()),
    ("+OAR", ("oar",)),
    ("+ORS", ("oar", "ors")),
    ("+OAG", ("oar", "ors", "oag")),
)


def base_mapping(
    machine: str,
    gpus: int,
    model: Model,
    batch_tokens: int | None = None,
    parallel: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The embedded default (the paper's training setup) on another machine/size/model."""
    data = default_config_mapping()
    data["cluster"] = {"machine": machine, "gpus": gpus}
    data["model"] = {"name": model} if isinstance(model, str) else dict(model)
    if batch_tokens is not None:
        data["training"] = {**data.get("training", {}), "batch_tokens": batch_tokens}
    if parallel is not None:
        data["parallel"] = dict(parallel)
    return data


def trim(report: Mapping[str, Any]) -> dict[str, Any]:
    """A report without its bulky per-link list."""
    return {k: v for k, v in report.items() if k != "busiest_links"}


def _simulate(cfg: ExperimentConfig) -> dict[str, Any]:
    from simulator.api import simulate

    return trim(simulate(cfg).report.to_json())


def _axonn_config(
    machine: str,
    gpus: int,
    model: Model,
    batch_tokens: int | None,
    grid: list[int] | None = None,
    microbatch: int | None = None,
    overlap: tuple[str, ...] | None = None,
    weights: Mapping[str, Any] | None = None,
    implementation: str | None = None,
    environment: Mapping[str, Any] | None = None,
) -> ExperimentConfig:
    parallel: dict[str, Any] = {"strategy": "axonn"}
    if implementation is not None:
        parallel["implementation"] = implementation
    if grid is not None:
        parallel["grid"] = dict(zip(("x", "y", "z", "data"), grid, strict=True))
    if overlap is not None:
        parallel["overlap"] = list(overlap)
    parallel.update({k: v for k, v in (weights or {}).items() if v is not None})
    data = base_mapping(machine, gpus, model, batch_tokens, parallel)
    if microbatch is not None:
        data["training"] = {**data.get("training", {}), "microbatch_sequences": microbatch}
    return validate_config(with_environment(data, environment))


def with_environment(data: dict[str, Any], environment: Mapping[str, Any] | None) -> dict[str, Any]:
    """A config mapping with a published run's software environment applied: the data
    file's `environment:` block, whose `cluster` and `engine` entries are config fields
    (e.g. cluster.gpudirect_rdma, engine.collective_library) set like for like."""
    for section, values in (environment or {}).items():
        if section not in ("cluster", "engine"):
            raise ConfigError(f"environment.{section}: only cluster and engine fields")
        data[section] = {**data.get(section, {}), **dict(values)}
    return data


def axonn_ranking(
    machine: str, gpus: int, model: Model, batch_tokens: int | None = None
) -> list[dict[str, Any]]:
    """Every valid, memory-feasible candidate ranked by the analytical model (best first)."""
    from simulator.search.grids import bandwidth_provider, rank_grids, search_training
    from topologies.hardware import gpu_spec

    cfg = _axonn_config(machine, gpus, model, batch_tokens)
    bw = bandwidth_provider(cfg, "topology", cfg.cluster.gpus_per_node)
    ranked = rank_grids(
        cfg.model.spec(),
        cfg.parallel,  # type: ignore[arg-type]
        search_training(cfg),
        gpus,
        gpu_spec(cfg.cluster.gpu_type),
        bw,
    )
    return [c.as_dict() for c in ranked]


def _grid_list(candidate: Mapping[str, Any]) -> list[int]:
    g = candidate["grid"]
    return [int(g[k]) for k in ("x", "y", "z", "data")]


def _weights(candidate: Mapping[str, Any]) -> dict[str, Any]:
    return {k: candidate.get(k) for k in ("weight_lifetime", "cached_layers")}


def axonn_grid(
    machine: str,
    gpus: int,
    model: Model,
    grid: list[int],
    microbatch: int | None = None,
    batch_tokens: int | None = None,
    overlap: list[str] | None = None,
    weights: Mapping[str, Any] | None = None,
    implementation: str | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One AxoNN grid simulated (the report); `weights`: weight_lifetime, cached_layers;
    `environment`: a published run's software environment (see `with_environment`)."""
    ov = tuple(overlap) if overlap is not None else None
    return _simulate(
        _axonn_config(
            machine,
            gpus,
            model,
            batch_tokens,
            grid,
            microbatch,
            ov,
            weights,
            implementation,
            environment,
        )
    )


def axonn_search(
    machine: str,
    gpus: int,
    model: Model,
    top: int = 10,
    batch_tokens: int | None = None,
    screen: int | None = None,
    implementation: str | None = None,
) -> dict[str, Any]:
    """`axsim search` (simulator/search/grids.py): rank, screen, simulate the top `top`."""
    from simulator.search.grids import DEFAULT_SCREEN
    from simulator.trials.simulated import search

    cfg = _axonn_config(machine, gpus, model, batch_tokens, implementation=implementation)
    return _search_result(search(cfg, top, DEFAULT_SCREEN if screen is None else screen), top)


def _search_result(out: Any, top: int) -> dict[str, Any]:
    best = out.best_candidate
    assert best is not None and out.best is not None
    tried = [c.as_dict() for c in out.candidates if c.simulated_iteration_time_s is not None]
    return {
        "report": trim(out.best.report.to_json()),
        "grid": [best.grid.x, best.grid.y, best.grid.z, best.grid.data],
        "microbatch_sequences": best.microbatch_sequences,
        "weights": {"weight_lifetime": best.weight_lifetime, "cached_layers": best.cached_layers},
        "model_rank": best.model_rank,
        "estimated_rank": best.estimated_rank,
        "candidates": len(out.candidates),
        "screened": out.screened,
        "top": min(top, len(out.candidates)),
        "tried": tried,
    }


def axonn_paper(
    machine: str,
    gpus: int,
    model: Model,
    top: int = 10,
    batch_tokens: int | None = None,
    overlap: list[str] | None = None,
    implementation: str | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The paper's procedure: the published model's top `top` grids simulated (with the
    given overlap flags, default all three), the fastest kept."""
    from simulator.trials.procedure import paper_procedure

    ov = tuple(overlap) if overlap is not None else None
    cfg = _axonn_config(
        machine,
        gpus,
        model,
        batch_tokens,
        overlap=ov,
        implementation=implementation,
        environment=environment,
    )
    return _search_result(paper_procedure(cfg, top), top)


def axonn_split(
    machine: str,
    gpus: int,
    model: Model,
    top: int = 10,
    batch_tokens: int | None = None,
    deps: Mapping[str, Any] | None = None,
    implementation: str | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Fig. 7's split on the paper procedure's grid chosen without overlap: that grid
    without overlap ("Kernel tuning") and with OAR+ORS+OAG ("Coll. overlap")."""
    found = next(iter((deps or {}).values()), None)
    if found is None:
        found = axonn_paper(
            machine, gpus, model, top, batch_tokens, [], implementation, environment
        )
    on = axonn_grid(
        machine,
        gpus,
        model,
        found["grid"],
        found["microbatch_sequences"],
        batch_tokens,
        ["oar", "ors", "oag"],
        found.get("weights"),
        implementation,
        environment,
    )
    return {"grid": found["grid"], "off": found["report"], "on": on}


def axonn_overlap(
    machine: str,
    gpus: int,
    model: Model,
    top: int = 10,
    batch_tokens: int | None = None,
    deps: Mapping[str, Any] | None = None,
    implementation: str | None = None,
    environment: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The search's best grid with the overlap flags added one at a time.

    `deps` holds the matching `axonn_search` result (its best grid already has all three
    flags, so the last step reuses its report)."""
    found = next(iter((deps or {}).values()), None)
    if found is None:
        found = axonn_search(machine, gpus, model, top, batch_tokens)
    out: dict[str, Any] = {
        "grid": found["grid"],
        "microbatch_sequences": found["microbatch_sequences"],
        "weights": found.get("weights"),
    }
    steps = {}
    for label, flags in OVERLAP_STEPS:
        if set(flags) == {"oar", "ors", "oag"}:
            steps[label] = found["report"]
            continue
        steps[label] = axonn_grid(
            machine,
            gpus,
            model,
            found["grid"],
            found["microbatch_sequences"],
            batch_tokens,
            list(flags),
            found.get("weights"),
            implementation,
            environment,
        )
    out["steps"] = steps
    return out


def strategy_best(
    machine: str,
    gpus: int,
    model: Model,
    strategy: str,
    batch_tokens: int | None = None,
    max_candidates: int = 4,
) -> dict[str, Any]:
    """`axsim compare-strategies` for one strategy: its best configuration's report,
    the configuration, the largest batch it fits and why it was skipped (if it was)."""
    from simulator.trials.strategies import search_strategy

    base = base_mapping(machine, gpus, model, batch_tokens)
    base["engine"] = {**base.get("engine", {}), "mode": "symmetric"}
    o = search_strategy(strategy, base, max_candidates=max_candidates)
    return {
        "strategy": strategy,
        "report": trim(o.report.to_json()) if o.report is not None else None,
        "config": o.config,
        "max_batch_sequences": o.max_batch_sequences,
        "feasible": o.feasible,
        "simulated": len(o.tried),
        "note": o.note,
    }


def collective_curve(
    machine: str,
    nodes: int,
    op: str,
    group: int,
    sizes: list[int],
    stride: int = 1,
    environment: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """nccl-tests-style rows for one group tiling `nodes` nodes of a machine preset (in a
    published run's software `environment`, see `with_environment`)."""
    from simulator.benchmarks.collectives import collective_sweep
    from simulator.build import build_topology

    data = with_environment({"cluster": {"machine": machine, "nodes": nodes}}, environment)
    cfg = validate_config({**default_config_mapping(), **data})
    topo = build_topology(cfg.cluster)
    rows = collective_sweep(topo, op, group, stride, sizes, library=cfg.engine.collective_library)
    return [r.as_dict() for r in rows]


def group_bandwidth(
    machine: str, nodes: int, inner: int, own: int, environment: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Bus bandwidth of a 1 GiB all-reduce on every group of `own` GPUs `inner` apart,
    all instances at once (AxoNN's measurement), on `nodes` nodes."""
    rows = collective_curve(
        machine, nodes, "all-reduce", own, [2**30], stride=inner, environment=environment
    )
    return rows[0]


def gemm_times(gpu: str) -> dict[str, float]:
    """Measured and modelled totals over Vidur's GEMMs with >= 512 tokens."""
    from simulator.cost import KernelModel
    from validation.published import vidur_gemm_rows
    from workloads.ops import ComputeKind, ComputeOp

    km = KernelModel({"h100": "h100", "a100": "a100-80gb"}[gpu])
    measured = modelled = 0.0
    count = 0
    for row in vidur_gemm_rows():
        if row["gpu"] != gpu or int(row["num_tokens"]) < 512:
            continue
        for name, (m, n, k) in _vidur_shapes(row).items():
            op = ComputeOp(
                name=name,
                kind=ComputeKind.GEMM,
                flops=2.0 * m * n * k,
                bytes=2.0 * (m * k + k * n + m * n),
                shape=(m, n, k),
            )
            measured += float(row[f"time_stats.{name}.median"]) * 1e-3
            modelled += km.kernel_time_s(op)
            count += 1
    return {"measured_s": measured, "modelled_s": modelled, "gemms": count}


def _vidur_shapes(row: dict[str, str]) -> dict[str, tuple[int, int, int]]:
    """(m, n, k) of Vidur's four GEMMs (column-parallel ops split n, row-parallel k)."""
    heads, kv, h = int(row["n_head"]), int(row["n_kv_head"]), int(row["n_embd"])
    ffn, tp, m = (
        int(row["n_expanded_embd"]),
        int(row["num_tensor_parallel_workers"]),
        int(row["num_tokens"]),
    )
    hd = h // heads
    up = (2 if row["use_gated_mlp"] == "True" else 1) * ffn // tp
    return {
        "attn_pre_proj": (m, (heads + 2 * kv) * hd // tp, h),
        "attn_post_proj": (m, h, heads * hd // tp),
        "mlp_up_proj": (m, up, h),
        "mlp_down_proj": (m, h, ffn // tp),
    }
