"""`axsim validate` cases for the seed papers' claims (validation/claims.py), as ratios.

| case | published | check |
|---|---|---|
| zeropp-frontier-ratio | 1.71x TFLOP/s per GCD, hierarchical ZeRO++ / ZeRO++, 384 GCDs | ±20% |
| zeropp-frontier-scaling | 0.94 scaling efficiency of the hierarchy, 48 -> 384 GCDs | ±0.05 |
| zeropp-frontier-tflops | ZeRO++ TFLOP/s per GCD at 384 GCDs, at most 73.5 (Dash et al.'s 38.38%) | <= |
| optimus-frontera-speedup | 1.48x training speed of Optimus over Megatron-LM, 64 GPUs | ±20% |
| optimus-frontera-max-batch | 8x maximum batch of Optimus over Megatron-LM, 64 GPUs | >= 4 |
| fernandez-crossover | GPU count where FSDP+TP overtakes FSDP (DGX H100) | info (no number) |

Every case is a prediction: no constant of the simulator or of the setups was chosen
from these ratios (each setup value's source or assumption is in its claim file). The
tolerances are the issue's acceptance criteria. The cases always run the papers' full
setups; `stand_in=True` swaps in the files' small `reduced` setups (tests only).
"""

from __future__ import annotations

from typing import Any

from validation.case import Case
from validation.claims import (
    FERNANDEZ,
    OPTIMUS,
    OPTIMUS_STRATEGIES,
    ZEROPP,
    ClaimNumber,
    fernandez_grid,
    fernandez_summary,
    load_claim,
    optimus_summary,
    setup_value,
    zeropp_gcds,
    zeropp_summary,
)
from validation.figures.base import Task, task

MODULE = "validation.claims"


def zeropp_tasks(stand_in: bool, gcds: list[int] | None = None) -> list[Task]:
    """Simulations of the ZeRO++ experiment (all strategies at the given GCD counts,
    default: the smallest and the largest)."""
    counts = zeropp_gcds(stand_in)
    chosen = gcds if gcds is not None else [counts[0], counts[-1]]
    points = [
        task(
            f"{MODULE}:zeropp_point",
            label=f"{s} on {g} Frontier GCDs",
            gcds=g,
            strategy=s,
            reduced=stand_in,
        )
        for g in chosen
        for s in ("zero3", "zeropp", "zeropp-hier")
    ]
    if gcds is not None:
        return points
    # the other measured library builds at the largest count (reported, not checked)
    libs = [str(x) for x in setup_value(ZEROPP, "sensitivity_libraries")]
    return points + [
        task(
            f"{MODULE}:zeropp_point",
            label=f"{s} on {counts[-1]} Frontier GCDs, {lib}",
            gcds=counts[-1],
            strategy=s,
            reduced=stand_in,
            library=lib,
        )
        for lib in libs
        for s in ("zeropp", "zeropp-hier")
    ]


def optimus_tasks(stand_in: bool) -> list[Task]:
    """The two max-batch searches, then both strategies at the batch both fit."""
    maxima = [
        task(
            f"{MODULE}:optimus_max_batch",
            label=f"{s} max batch",
            strategy=s,
            reduced=stand_in,
        )
        for s in OPTIMUS_STRATEGIES
    ]
    points = [
        task(
            f"{MODULE}:optimus_point",
            deps=maxima,
            label=f"{s} on Frontera{' at its own largest batch' if own else ''}",
            strategy=s,
            reduced=stand_in,
            own_max=own,
        )
        for own in (False, True)
        for s in OPTIMUS_STRATEGIES
    ]
    return [*maxima, *points]


def fernandez_tasks(stand_in: bool) -> list[Task]:
    """FSDP and FSDP+TP at every GPU count of the experiment."""
    gpus, tps = fernandez_grid(stand_in)
    return [
        task(
            f"{MODULE}:fernandez_point",
            label=f"fsdp{'' if t == 1 else f'-tp{t}'} on {g} H100",
            gpus=g,
            tp=t,
            reduced=stand_in,
        )
        for g in gpus
        for t in (1, *tps)
    ]


def _case(
    name: str,
    claim_file: str,
    key: str,
    tasks: Any,
    value: Any,
) -> Case:
    f = load_claim(claim_file)
    n: ClaimNumber = f.claims[key]
    bound = n.at_most is not None
    return Case(
        name,
        n.quantity,
        n.unit,
        n.at_most if bound else n.published,
        n.at_most if bound else n.tolerance_pct,
        f.cite,
        f"{f.source} ({n.where})" if n.published is not None else f"{f.source}. {n.missing}",
        tasks,
        value,
        tolerance_abs=n.tolerance_abs,
        at_least=n.at_least,
        bound=bound,
    )


def _zeropp_detail(s: dict[str, Any]) -> str:
    lo, hi = s["gcds"][0], s["gcds"][-1]
    tf = s["tflops"]
    same = (
        f"; zeropp-hier and zeropp are the same program at {s['same_program_at']} GCDs"
        if s["same_program_at"]
        else ""
    )
    others = "; ".join(f"{lib}: {r:.3f}x" for lib, r in s["ratio_by_library"].items())
    return (
        f"TFLOP/s per GCD at {lo} / {hi} GCDs: ZeRO-3 {tf[f'zero3@{lo}']:.1f} / "
        f"{tf[f'zero3@{hi}']:.1f}, ZeRO++ {tf[f'zeropp@{lo}']:.1f} / {tf[f'zeropp@{hi}']:.1f}, "
        f"hierarchical {tf[f'zeropp-hier@{lo}']:.1f} / {tf[f'zeropp-hier@{hi}']:.1f}{same}"
        f" (library build: {setup_value(ZEROPP, 'collective_library')}"
        + (f"; ratio under the other measured builds: {others})" if others else ")")
    )


def claim_cases(stand_in: bool = False) -> list[Case]:
    """The claim cases in table order."""

    def zp_tasks(reduced: bool) -> list[Task]:
        return zeropp_tasks(stand_in)

    def zp_ratio(res: list[Any]) -> tuple[float | None, str]:
        s = zeropp_summary(res)
        return s["ratio"], _zeropp_detail(s)

    def zp_scaling(res: list[Any]) -> tuple[float | None, str]:
        s = zeropp_summary(res)
        return s["scaling_efficiency"], (
            f"hierarchical ZeRO++ {s['gcds'][0]} -> {s['gcds'][-1]} GCDs "
            f"(ZeRO++: {s['zeropp_scaling_efficiency']:.3f}); " + _zeropp_detail(s)
        )

    def op_tasks(reduced: bool) -> list[Task]:
        return optimus_tasks(stand_in)

    def _op(res: list[Any]) -> dict[str, Any]:
        return optimus_summary(res[2:], res[:2])

    def op_speed(res: list[Any]) -> tuple[float | None, str]:
        s = _op(res)
        t, b = s["time_s"], s["breakdown"]
        split = ", ".join(
            f"{k} {v['compute_s']:.2f} + {v['exposed_comm_s']:.2f}" for k, v in b.items()
        )
        other = s["own_max_throughput_ratio"]
        tail = (
            f"; samples/s each at its own largest batch (not the claim's reading): {other:.3f}x"
            if other is not None
            else ""
        )
        return s["speedup"], (
            f"{s['batch_sequences']} sequences: Megatron-LM {t['megatron']:.2f} s, "
            f"Optimus {t['optimus']:.2f} s per iteration (compute + exposed communication: "
            f"{split}){tail}"
        )

    def op_batch(res: list[Any]) -> tuple[float | None, str]:
        s = _op(res)
        mb = s["max_batch"]
        return s["max_batch_ratio"], (
            f"largest batch: Optimus {mb['optimus']} sequences, Megatron-LM {mb['megatron']}"
        )

    def fz_tasks(reduced: bool) -> list[Task]:
        return fernandez_tasks(stand_in)

    def fz_value(res: list[Any]) -> tuple[float | None, str]:
        s = fernandez_summary(res)
        rows = "; ".join(
            f"{r['gpus']}: FSDP {r['fsdp']:.0f} vs TP{r['best_tp']} {r['fsdp_tp']:.0f}"
            for r in s["rows"]
        )
        cross = s["crossover_gpus"]
        head = (
            f"FSDP+TP overtakes FSDP at {cross} GPUs"
            if cross
            else f"no crossover up to {s['rows'][-1]['gpus']} GPUs"
        )
        return cross, f"{head} (tokens/s per GPU by GPU count: {rows})"

    def zp_bound(res: list[Any]) -> tuple[float | None, str]:
        s = zeropp_summary(res)
        return s["zeropp_tflops"], _zeropp_detail(s)

    return [
        _case("zeropp-frontier-ratio", ZEROPP, "tflops_ratio", zp_tasks, zp_ratio),
        _case("zeropp-frontier-scaling", ZEROPP, "scaling_efficiency", zp_tasks, zp_scaling),
        _case("zeropp-frontier-tflops", ZEROPP, "zeropp_tflops_bound", zp_tasks, zp_bound),
        _case("optimus-frontera-speedup", OPTIMUS, "training_speedup", op_tasks, op_speed),
        _case("optimus-frontera-max-batch", OPTIMUS, "max_batch_ratio", op_tasks, op_batch),
        _case("fernandez-crossover", FERNANDEZ, "crossover_gpus", fz_tasks, fz_value),
    ]
