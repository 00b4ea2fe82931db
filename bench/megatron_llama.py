"""Llama 3 405B under Megatron at 8,192 DGX H100 GPUs: `python bench/megatron_llama.py
[--only TEXT] [--out FILE]`.

The issue-20 cases (Dubey et al. 2024, Table 4: TP 8, PP 16 over 126 layers with one layer
fewer on the first and the last stage, DP 64 at 8,192-token sequences; the long-context
stage with CP 16 at 131,072 tokens, DP 4 on 8,192 GPUs), each in its own process as
`axsim bench` runs its cases: wall time, peak RSS, events, ops and the simulated
iteration. Pipelines are simulated stage by stage today (one representative per stage in
symmetric mode, every microbatch), so these are the slow cases issue 22 speeds up.
"""

from __future__ import annotations

import argparse
import json
import sys

from simulator.trials.scaling import Case, run_bench

BASE = (
    "cluster.machine=dgx-h100",
    "cluster.gpus=8192",
    "cluster.nodes=null",
    "model.name=llama3-405b",
    "parallel.strategy=megatron",
    "parallel.tp=8",
    "parallel.pp=16",
    "parallel.account_for_embedding=true",
    "parallel.account_for_loss=true",
    "parallel.sequence_parallel=true",
    "parallel.distributed_optimizer=true",
    "training.batch_tokens=16777216",  # 16M tokens per batch (Table 4)
    "training.microbatch_sequences=1",
)
CASES = [
    Case("Llama 3 405B, TP8 PP16 DP64, full recompute", "auto", "contention",
         (*BASE, "parallel.recompute=full")),
    Case("Llama 3 405B, TP8 PP16 DP64, selective (does not fit)", "auto", "contention",
         (*BASE, "parallel.recompute=selective")),
    Case("Llama 3 405B, 131K tokens, TP8 CP16 PP16 DP4, full recompute", "auto", "contention",
         (*BASE, "model.seq_len=131072", "parallel.cp=16", "parallel.recompute=full")),
]  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run the cases whose name contains this")
    ap.add_argument("--out", default="megatron-llama-bench.json")
    args = ap.parse_args()
    cases = [c for c in CASES if args.only in c.name]

    def show(row: dict[str, object]) -> None:
        if "error" in row:
            print(f"{row['name']}: {row['error']}", flush=True)
            return
        print(
            f"{row['name']}: iteration {float(row['iteration_time_s']):.3f} s, wall "  # type: ignore[arg-type]
            f"{float(row['wall_time_s']):.1f} s, peak RSS "  # type: ignore[arg-type]
            f"{float(row['peak_rss_bytes']) / 2**30:.2f} GiB, {row['ops_simulated']:,} ops, "  # type: ignore[arg-type]
            f"{row['events']:,} events ({row['engine_mode']} mode)",
            flush=True,
        )

    result = run_bench(cases, progress=show)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
