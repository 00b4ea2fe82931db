"""How wall time grows with GPU count, layers and microbatches, per engine mode.

`python bench/scaling_law.py [--out FILE] [--quick]` runs each point in its own process
(simulator/trials/scaling.py's `run_case`, so peak RSS is the point's own) and prints one table per
axis, varying one thing at a time from a base case:

- symmetric mode: GPT-80B on Frontier, grid (8, 1, Z, data): GPUs 512 ... 32,768; layers
  20 ... 160 on 4,096 GCDs; microbatches 4 ... 256 on 4,096 GCDs (batch tokens scaled,
  with virtual microbatches on and off);
- full mode: GPT-20B on Perlmutter, grid (4, 1, 4, data): GPUs 64 ... 1,024; layers
  12 ... 96 on 256 GPUs; microbatches 4 ... 64 on 256 GPUs.

The README's performance section quotes this script's output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.trials.scaling import Case, run_case


def _case(name: str, **fields: object) -> Case:
    overrides = tuple(f"{k}={v}" for k, v in fields.items())
    return Case(
        name=name, mode=str(fields["engine.mode"]), network="contention", overrides=overrides
    )


def _base(
    mode: str, machine: str, gpus: int, model: str, grid: tuple[int, int, int, int]
) -> dict[str, object]:
    x, y, z, d = grid
    return {
        "cluster.machine": machine,
        "cluster.gpus": gpus,
        "cluster.nodes": "null",
        "model.name": model,
        "parallel.grid": f"{{x: {x}, y: {y}, z: {z}, data: {d}}}",
        "engine.mode": mode,
        "engine.network": "contention",
    }


def _axis(
    label: str, values: list[int], point: Callable[[int], dict[str, object]]
) -> list[tuple[str, Case]]:
    """One axis: a case per value, built from `point(value)` (the config overrides)."""
    return [(str(v), _case(f"{label} {v}", **point(v))) for v in values]


def axes(quick: bool) -> dict[str, list[tuple[str, Case]]]:
    """Axis name -> (label, case) points."""

    def pick(full: list[int]) -> list[int]:
        return full[:2] if quick else full

    def frontier(gpus: int, data: int) -> dict[str, object]:
        return _base("symmetric", "frontier", gpus, "gpt-80b", (8, 1, 8, data))

    def perlmutter(gpus: int, data: int) -> dict[str, object]:
        return _base("full", "perlmutter", gpus, "gpt-20b", (4, 1, 4, data))

    out = {
        "symmetric: GPUs (GPT-80B, Frontier, 8x1x8xD)": _axis(
            "sym gpus", pick([512, 2048, 8192, 32768]), lambda g: frontier(g, g // 64)
        ),
        "symmetric: layers (GPT-80B shape, 4,096 Frontier GCDs)": _axis(
            "sym layers",
            pick([20, 40, 80, 160]),
            lambda n: {**frontier(4096, 64), "model.layers": n},
        ),
    }
    # data 64 x Z 8 with 1 sequence per microbatch and Z rank: m microbatches = m x 512 seqs
    for virtual in ("true", "false"):
        out[f"symmetric: microbatches (4,096 GCDs, virtual_microbatches={virtual})"] = _axis(
            f"sym microbatches virtual={virtual}",
            pick([4, 16, 64, 256]),
            lambda m, v=virtual: {
                **frontier(4096, 64),
                "training.batch_tokens": m * 64 * 8 * 2048,
                "training.microbatch_sequences": 1,
                "engine.virtual_microbatches": v,
            },
        )
    out["full: GPUs (GPT-20B, Perlmutter, 4x1x4xD)"] = _axis(
        "full gpus", pick([64, 256, 1024]), lambda g: perlmutter(g, g // 16)
    )
    out["full: layers (GPT-20B shape, 256 Perlmutter GPUs)"] = _axis(
        "full layers", pick([12, 24, 48, 96]), lambda n: {**perlmutter(256, 16), "model.layers": n}
    )
    out["full: microbatches (256 Perlmutter GPUs)"] = _axis(
        "full microbatches",
        pick([4, 16, 64]),
        lambda m: {
            **perlmutter(256, 16),
            "training.batch_tokens": m * 16 * 4 * 2048,
            "training.microbatch_sequences": 1,
        },
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="scaling-law.json")
    ap.add_argument("--quick", action="store_true", help="two points per axis")
    args = ap.parse_args()
    results: dict[str, list[dict[str, object]]] = {}
    for axis, points in axes(args.quick).items():
        print(f"\n{axis}")
        print(
            f"{'value':>8} {'wall s':>8} {'setup s':>8} {'RSS MB':>8} {'events':>10} {'ops sim':>9} {'ops repr':>11} {'mb':>5}"
        )
        rows = []
        for label, case in points:
            row = run_case(case)
            row["value"] = label
            rows.append(row)
            if "error" in row:
                print(f"{label:>8} error: {row['error']}")
                continue
            print(
                f"{label:>8} {row['wall_time_s']:8.2f} {row['setup_time_s']:8.2f} "
                f"{row['peak_rss_bytes'] / 1e6:8.0f} {row['events']:10d} {row['ops_simulated']:9d} "
                f"{row['ops_represented']:11d} {row['microbatches']!s:>5}",
                flush=True,
            )
        results[axis] = rows
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"\nwritten {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
