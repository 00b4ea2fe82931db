"""The seed papers' headline claims, reproduced under the papers' own setups.

Each claim file (validation/published/data/claims/*.yaml) holds the published numbers
(with where the paper states them and the tolerance the check uses) and the setup the
paper measured, every value with its `source` or, where the paper as available to us
does not say, the `assumption` we made and why. Nothing in these files was set from the
claims' ratios: they are predictions (`axsim validate` marks them so).

The experiment functions below turn a setup into simulations; they take and return
plain JSON-able data so that `axsim validate` and `axsim figures` run them as shared
tasks (validation/figures/base.py):

- `zeropp_point`: one (GCD count, strategy) point of the ZeRO++ / hierarchical ZeRO++
  comparison on Frontier (arXiv 2501.04266): ratio at the largest count, scaling
  efficiency of the hierarchy from the smallest to the largest.
- `optimus_max_batch`, `optimus_point`: Optimus' q x q mesh and Megatron-LM at the same
  model-parallel degree on Frontera (arXiv 2104.05343): the largest batch each fits, and
  one iteration of each at the batch both fit (the setup's batch rule).
- `fernandez_point`: FSDP and FSDP+TP on DGX H100 at one GPU count (arXiv 2411.13055);
  `crossover` finds the smallest count where FSDP+TP's tokens/s per GPU beats FSDP's.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import ValidationError, model_validator

from simulator.errors import ConfigError
from topologies.user_model import UserModel, first_error_line
from validation.figures.experiments import trim
from validation.published import load_yaml

CLAIM_FILES = ("zeropp_frontier", "optimus_frontera", "fernandez_dgx_h100")


class Sourced(UserModel):
    """One setup value and where it comes from (a source, or our stated assumption)."""

    value: Any
    source: str | None = None
    assumption: str | None = None

    @model_validator(mode="after")
    def _one_origin(self) -> Sourced:
        if (self.source is None) == (self.assumption is None):
            raise ValueError("give exactly one of 'source' and 'assumption'")
        return self


class ClaimNumber(UserModel):
    """A published number and how `axsim validate` checks it: relative tolerance (%),
    absolute tolerance, or a lower bound; `missing` explains a number we do not have."""

    quantity: str
    published: float | None
    where: str
    unit: str = ""
    tolerance_pct: float | None = None
    tolerance_abs: float | None = None
    at_least: float | None = None
    at_most: float | None = None  # an upper bound on the simulated value
    missing: str | None = None

    @model_validator(mode="after")
    def _checkable(self) -> ClaimNumber:
        if self.published is None and not self.missing:
            raise ValueError("a claim without a published number must say why ('missing')")
        return self


class ClaimFile(UserModel):
    """A paper's claims and the setup it measured them on."""

    cite: str
    source: str
    claims: dict[str, ClaimNumber]
    setup: dict[str, Sourced]


@cache
def load_claim(name: str) -> ClaimFile:
    """One claim file, validated (ConfigError naming the file if it is malformed)."""
    try:
        return ClaimFile.model_validate(load_yaml(f"claims/{name}"))
    except ValidationError as e:
        raise ConfigError(first_error_line(e, f"claims/{name}.yaml")) from None


def setup_value(name: str, key: str, reduced: bool = False) -> Any:
    """A setup value of claim file `name` (the reduced stand-in's when `reduced` and the
    file has one for `key`)."""
    setup = load_claim(name).setup
    if reduced and "reduced" in setup and key in setup["reduced"].value:
        return setup["reduced"].value[key]
    return setup[key].value


def _simulate(data: dict[str, Any]) -> dict[str, Any]:
    from simulator.api import simulate
    from simulator.config import validate_config

    return trim(simulate(validate_config(data)).report.to_json())


# ------------------------------------------------------------------ ZeRO++ on Frontier
ZEROPP = "zeropp_frontier"
ZEROPP_STRATEGIES = ("zero3", "zeropp", "zeropp-hier")
ZEROPP_SETUP_KEYS = {"zero3": "zero3", "zeropp": "zeropp", "zeropp-hier": "hierarchy"}


def zeropp_parallel(strategy: str) -> dict[str, Any]:
    """The `parallel` section of one strategy of the ZeRO++ experiment."""
    return dict(setup_value(ZEROPP, ZEROPP_SETUP_KEYS[strategy]))


def zeropp_config(
    gcds: int, strategy: str, reduced: bool = False, library: str | None = None
) -> dict[str, Any]:
    """The raw experiment config of one point of the ZeRO++ experiment (`library`: a
    collective library build other than the setup's, for the sensitivity points)."""
    mbs = int(setup_value(ZEROPP, "micro_batch_sequences", reduced))
    model = dict(setup_value(ZEROPP, "model", reduced))
    micro = int(setup_value(ZEROPP, "microbatches"))
    seq = int(model.get("seq_len", 2048))
    engine = dict(setup_value(ZEROPP, "engine"))
    engine["collective_library"] = library or setup_value(ZEROPP, "collective_library")
    return {
        "cluster": {"machine": setup_value(ZEROPP, "machine"), "gpus": gcds},
        "model": model,
        "parallel": zeropp_parallel(strategy),
        "training": {
            "batch_tokens": gcds * mbs * micro * seq,
            "microbatch_sequences": mbs,
            "activation_checkpointing": bool(setup_value(ZEROPP, "activation_checkpointing")),
            "flash_attention": bool(setup_value(ZEROPP, "flash_attention")),
        },
        "engine": engine,
    }


def zeropp_point(
    gcds: int, strategy: str, reduced: bool = False, library: str | None = None
) -> dict[str, Any]:
    """One simulated point: the report and the program's identity (to tell when two
    strategies ran the same program)."""
    from dataclasses import asdict

    from simulator.build import build_topology
    from simulator.config import validate_config
    from simulator.search.plans import resolve_hybrid
    from topologies.hardware import gpu_spec

    data = zeropp_config(gcds, strategy, reduced, library)
    cfg = validate_config(data)
    topology = build_topology(cfg.cluster)
    setup = resolve_hybrid(cfg, topology, gpu_spec(cfg.cluster.gpu or topology.gpu_type))
    program = {k: v for k, v in asdict(setup).items() if k != "strategy"}
    return {
        "gcds": gcds,
        "strategy": strategy,
        "library": library,
        "parallel": data["parallel"],
        "program": program,
        "report": _simulate(data),
    }


def zeropp_gcds(reduced: bool) -> list[int]:
    """The GCD counts of the experiment (ascending)."""
    return sorted(int(g) for g in setup_value(ZEROPP, "gcds", reduced))


def zeropp_summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Ratio of the hierarchy over ZeRO++ at the largest count, the hierarchy's scaling
    efficiency from the smallest to the largest, ZeRO++'s own TFLOP/s there, whether the
    two strategies ever ran the same program (then the ratio is 1 by construction and
    says so), and the ratio under the other library builds (sensitivity points)."""
    main = [p for p in points if not p.get("library")]
    by = {(p["gcds"], p["strategy"]): p for p in main}
    counts = sorted({p["gcds"] for p in main})
    lo, hi = counts[0], counts[-1]

    def tflops(g: int, s: str) -> float:
        return float(by[(g, s)]["report"]["tflops_per_gpu"])

    same = [g for g in counts if by[(g, "zeropp")]["program"] == by[(g, "zeropp-hier")]["program"]]
    other: dict[str, dict[str, float]] = {}
    for p in points:
        if p.get("library"):
            other.setdefault(p["library"], {})[p["strategy"]] = float(p["report"]["tflops_per_gpu"])
    return {
        "gcds": counts,
        "ratio": tflops(hi, "zeropp-hier") / tflops(hi, "zeropp"),
        "scaling_efficiency": tflops(hi, "zeropp-hier") / tflops(lo, "zeropp-hier"),
        "zeropp_scaling_efficiency": tflops(hi, "zeropp") / tflops(lo, "zeropp"),
        "zeropp_tflops": tflops(hi, "zeropp"),
        "same_program_at": same,
        "tflops": {f"{s}@{g}": tflops(g, s) for g in counts for s in ZEROPP_STRATEGIES},
        "ratio_by_library": {
            lib: t["zeropp-hier"] / t["zeropp"]
            for lib, t in other.items()
            if "zeropp" in t and "zeropp-hier" in t
        },
    }


# ------------------------------------------------------------------ Optimus vs Megatron
OPTIMUS = "optimus_frontera"
OPTIMUS_STRATEGIES = ("megatron", "optimus")


def optimus_parallel(strategy: str, reduced: bool = False) -> dict[str, Any]:
    """The `parallel` section of Optimus or of Megatron-LM at the same degree."""
    par = dict(setup_value(OPTIMUS, strategy))
    if reduced:
        key = "q" if strategy == "optimus" else "tp"
        par[key] = int(setup_value(OPTIMUS, key, True))
    return par


def optimus_config(strategy: str, batch: int, reduced: bool = False) -> dict[str, Any]:
    """The raw experiment config of one strategy at `batch` sequences."""
    model = dict(setup_value(OPTIMUS, "model", reduced))
    return {
        "cluster": {
            "machine": setup_value(OPTIMUS, "machine"),
            "gpus": int(setup_value(OPTIMUS, "gpus", reduced)),
        },
        "model": model,
        "parallel": optimus_parallel(strategy, reduced),
        "training": {
            "batch_tokens": batch * int(model["seq_len"]),
            "microbatch_sequences": batch,
            "activation_checkpointing": bool(setup_value(OPTIMUS, "activation_checkpointing")),
            "flash_attention": bool(setup_value(OPTIMUS, "flash_attention")),
        },
        "engine": dict(setup_value(OPTIMUS, "engine")),
    }


def _mesh_q(reduced: bool) -> int:
    return int(optimus_parallel("optimus", reduced)["q"])


def optimus_max_batch(strategy: str, reduced: bool = False) -> dict[str, Any]:
    """The largest batch (sequences, one microbatch) the strategy fits on the machine."""
    from simulator.build import build_topology
    from simulator.config import validate_config
    from simulator.search.plans import resolve_hybrid, resolve_optimus
    from topologies.hardware import gpu_spec
    from workloads.hybrid.memory import max_batch_sequences
    from workloads.optimus.memory import optimus_max_batch_sequences

    cfg = validate_config(optimus_config(strategy, _mesh_q(reduced), reduced))
    topology = build_topology(cfg.cluster)
    gpu = gpu_spec(cfg.cluster.gpu or topology.gpu_type)
    spec = cfg.model.spec()
    if strategy == "optimus":
        best = optimus_max_batch_sequences(
            spec, resolve_optimus(cfg, topology, gpu), gpu.memory_bytes
        )
    else:
        best = max_batch_sequences(spec, resolve_hybrid(cfg, topology, gpu), gpu.memory_bytes)
    return {"strategy": strategy, "max_batch_sequences": int(best)}


def optimus_batch(max_batches: dict[str, int], reduced: bool = False) -> int:
    """The batch both strategies run (the setup's rule): the released batch if both fit
    it, else the largest multiple of q below it that both fit (0: none)."""
    q = _mesh_q(reduced)
    released = int(setup_value(OPTIMUS, "batch_sequences", reduced))
    fit = min(released, *max_batches.values())
    return (fit // q) * q


def optimus_point(
    strategy: str,
    reduced: bool = False,
    deps: dict[str, Any] | None = None,
    own_max: bool = False,
) -> dict[str, Any]:
    """One iteration of `strategy` at the common batch (from the max-batch tasks), or
    with `own_max` at its own largest batch (the other reading of the speedup, info)."""
    maxima = {r["strategy"]: int(r["max_batch_sequences"]) for r in (deps or {}).values()}
    batch = maxima[strategy] if own_max else optimus_batch(maxima, reduced)
    if own_max and strategy == "optimus":
        batch -= batch % _mesh_q(reduced)
    if batch < 1:
        raise ConfigError(f"no batch that is a multiple of q fits both strategies ({maxima})")
    data = optimus_config(strategy, batch, reduced)
    return {
        "strategy": strategy,
        "batch_sequences": batch,
        "own_max": own_max,
        "report": _simulate(data),
    }


def optimus_summary(points: list[dict[str, Any]], maxima: list[dict[str, Any]]) -> dict[str, Any]:
    """Megatron / Optimus iteration time at the common batch; Optimus / Megatron max batch;
    the samples/s ratio with each at its own largest batch (when those points ran)."""
    common = [p for p in points if not p.get("own_max")]
    t = {p["strategy"]: float(p["report"]["iteration_time_s"]) for p in common}
    mb = {m["strategy"]: int(m["max_batch_sequences"]) for m in maxima}
    rate = {
        p["strategy"]: p["batch_sequences"] / float(p["report"]["iteration_time_s"])
        for p in points
        if p.get("own_max")
    }
    return {
        "batch_sequences": common[0]["batch_sequences"],
        "speedup": t["megatron"] / t["optimus"],
        "time_s": t,
        "breakdown": {
            p["strategy"]: {
                "compute_s": float(p["report"]["compute_time_s"]),
                "exposed_comm_s": float(p["report"]["exposed_comm_time_s"]),
            }
            for p in common
        },
        "max_batch": mb,
        "max_batch_ratio": mb["optimus"] / mb["megatron"] if mb["megatron"] else float("inf"),
        "own_max_throughput_ratio": (
            rate["optimus"] / rate["megatron"] if {"optimus", "megatron"} <= set(rate) else None
        ),
    }


# ------------------------------------------------------------------ Fernandez et al.
FERNANDEZ = "fernandez_dgx_h100"


def fernandez_point(gpus: int, tp: int, reduced: bool = False) -> dict[str, Any]:
    """FSDP (tp = 1) or FSDP+TP (tp > 1, sequence parallel) at a fixed per-GPU batch."""
    model = dict(setup_value(FERNANDEZ, "model", reduced))
    per_gpu = int(setup_value(FERNANDEZ, "sequences_per_gpu"))
    from workloads.models import model_preset

    seq = int(model.get("seq_len") or model_preset(model["name"]).seq_len)
    par: dict[str, Any] = {"strategy": "fsdp"}
    if tp > 1:
        par = {"strategy": "fsdp-tp", "tp": tp, "sequence_parallel": True}
    data = {
        "cluster": {"machine": setup_value(FERNANDEZ, "machine"), "gpus": gpus},
        "model": model,
        "parallel": par,
        "training": {
            "batch_tokens": gpus * per_gpu * seq,
            "activation_checkpointing": bool(setup_value(FERNANDEZ, "activation_checkpointing")),
        },
        "engine": dict(setup_value(FERNANDEZ, "engine")),
    }
    rep = _simulate(data)
    return {
        "gpus": gpus,
        "tp": tp,
        "report": rep,
        "tokens_per_s_per_gpu": rep["batch_tokens"] / rep["iteration_time_s"] / gpus,
    }


def fernandez_grid(reduced: bool) -> tuple[list[int], list[int]]:
    """GPU counts and tensor-parallel degrees of the experiment."""
    gpus = [int(g) for g in setup_value(FERNANDEZ, "gpus", reduced)]
    tps = [int(t) for t in setup_value(FERNANDEZ, "tensor_parallel", reduced)]
    return sorted(gpus), tps


def fernandez_summary(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Per GPU count: FSDP's and the best FSDP+TP's tokens/s per GPU; the crossover is
    the smallest count where FSDP+TP is faster (None: not within the counts)."""
    rows = []
    for g in sorted({p["gpus"] for p in points}):
        here = [p for p in points if p["gpus"] == g]
        fsdp = next(p for p in here if p["tp"] == 1)
        best = max((p for p in here if p["tp"] > 1), key=lambda p: p["tokens_per_s_per_gpu"])
        rows.append(
            {
                "gpus": g,
                "fsdp": fsdp["tokens_per_s_per_gpu"],
                "fsdp_tp": best["tokens_per_s_per_gpu"],
                "best_tp": best["tp"],
            }
        )
    cross = next((r["gpus"] for r in rows if r["fsdp_tp"] > r["fsdp"]), None)
    return {"rows": rows, "crossover_gpus": cross}
