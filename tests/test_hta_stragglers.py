"""Holistic Trace Analysis' straggler analysis names the rank `cluster.stragglers` slows
down, through validation/references/hta_summary.py's metric (HTA's late-start metric comparing one
collective across ranks; its docstring says why HTA 0.5's reference metric cannot)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator.api import simulate
from simulator.config import load_config
from simulator.engine.timeline import COMM_KINDS
from simulator.outputs.kineto import write_kineto_traces
from simulator.outputs.trace_context import TraceContext
from validation.references.hta_summary import METRIC, late_start_metric

WIDE = ["cluster.machine=dgx-h100", "model.name=gpt-tiny", "model.heads=32",
        "engine.mode=full", "engine.virtual_microbatches=false"]  # fmt: skip
SIXTEEN = ["cluster.gpus=16", "model.hidden=4096", "training.batch_tokens=65536"]
EIGHT = ["cluster.gpus=8", "model.hidden=2048", "model.layers=12", "training.batch_tokens=32768"]
# name -> (overrides, straggler, candidates asked for). Compute-bound steps (a
# launch-bound one hides a slower GPU: it finishes its kernels before the host issues the
# next ones).
CASES = {
    # HTA's reference metric finds it too
    "2x2x2x2": ([*SIXTEEN, "parallel.grid={x: 2, y: 2, z: 2, data: 2}"], 12, 1),
    # rank 5's last collective (the data all-reduce) follows a Z collective with rank 1,
    # so both start it at the same instant: a tie no start-time metric can break, and HTA
    # names both when asked for two
    "2x2x2x2-tie": ([*SIXTEEN, "parallel.grid={x: 2, y: 2, z: 2, data: 2}"], 5, 2),
    # one Z group of 16: HTA's reference metric compares the straggler's last long
    # collective with a later one of the others and names rank 0
    "z16": ([*SIXTEEN, "parallel.grid={x: 1, y: 1, z: 16, data: 1}"], 12, 1),
    # the main job's shape: many collectives, none reaching 1% of the step (HTA's
    # reference metric finds no kernel to rank and raises)
    "no-1%": ([*EIGHT, "parallel.grid={x: 2, y: 1, z: 4, data: 1}"], 5, 1),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hta_names_the_injected_straggler(case: str, tmp_path: Path) -> None:
    pytest.importorskip("hta")
    from validation.references.hta_summary import potential_stragglers

    overrides, straggler, k = CASES[case]
    slow = f"cluster.stragglers=[{{rank: {straggler}, slowdown: 1.5}}]"
    result = simulate(load_config(None, [*WIDE, *overrides, slow]))
    if case == "no-1%":  # the premise: no collective lasts 1% of the step on any rank
        longest = max(
            float(np.max(tl.end_s[m] - tl.start_s[m]))
            for tl in (result.engine.timeline.rank(r) for r in result.engine.timeline.ranks)
            for m in [np.isin(tl.kind, list(COMM_KINDS))]
        )
        assert longest < 0.01 * result.report.iteration_time_s
    ranks = [int(r) for r in result.engine.timeline.ranks]  # every rank: full mode
    write_kineto_traces(tmp_path, TraceContext.from_result(result), ranks)
    found = potential_stragglers(tmp_path, num_candidates=k)
    assert found == [straggler] if k == 1 else straggler in found and len(found) == k


class _Symbols:
    """The part of HTA's TraceSymbolTable the metric reads (name <-> id)."""

    def __init__(self, names: list[str]) -> None:
        self.names = names

    def get_sym_table(self) -> list[str]:
        return self.names

    def get_sym_id_map(self) -> dict[str, int]:
        return {n: i for i, n in enumerate(self.names)}


def _collectives(prefix: str) -> tuple[pd.DataFrame, _Symbols]:
    """Four ranks, three all-reduces on stream 20 in a 1,000 µs step, rank 2 arriving
    late at each: every kernel ends together; rank 2's lasts 5 µs (0.5% of the step),
    the others' 50-80 µs, with a compute kernel and a CPU event around them."""
    names = [f"{prefix}_AllReduce_Sum_bf16_RING_LL", "gemm", "aten::mm"]
    rows = []
    for rank in range(4):
        rows.append((rank, -1, 1, 2, 0.0, 1000.0))  # a CPU op over the step
        rows.append((rank, 7, 1, 1, 10.0, 900.0))  # compute
        for end in (300.0, 600.0, 900.0):
            dur = 5.0 if rank == 2 else 50.0 + 10 * rank
            rows.append((rank, 20, 1, 0, end - dur, dur))
    df = pd.DataFrame(rows, columns=["rank", "stream", "iteration", "name", "ts", "dur"])
    return df, _Symbols(names)


def test_metric_compares_one_collective_across_ranks() -> None:
    df, symbols = _collectives("ncclDevKernel")
    metric = late_start_metric(df, symbols)
    assert sorted(metric["rank"]) == [0, 1, 2, 3]  # every rank's third all-reduce
    starts = dict(zip(metric["rank"], metric[METRIC], strict=True))
    assert max(starts, key=starts.__getitem__) == 2
    assert starts[2] == pytest.approx((900.0 - 5.0) / 1000.0)


def test_hta_reference_metric_misses_the_straggler_the_adapter_names() -> None:
    pytest.importorskip("hta")
    from hta.analyzers.straggler import find_stragglers_with_late_start_comm_kernels

    from validation.references.hta_summary import straggler_impl

    df, symbols = _collectives("ncclKernel")  # the names HTA 0.5 looks for
    reference = find_stragglers_with_late_start_comm_kernels(df, symbols, 1)
    assert reference.get(2, 0) == 0  # rank 2's 5 µs kernels fail the 1% filter
    ours = straggler_impl(df, symbols, 1, False)
    assert ours[ours > 0].index.tolist() == [2]


def test_one_rank_or_nothing_that_varies_still_answers() -> None:
    df, symbols = _collectives("ncclDevKernel")
    one = df[df["rank"] == 1]
    metric = late_start_metric(one, symbols)
    assert metric["rank"].tolist() == [1]
    same = df.assign(dur=np.where(df["stream"] == 20, 50.0, df["dur"]))
    assert sorted(late_start_metric(same, symbols)["rank"]) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="no communication kernel"):
        late_start_metric(df[df["stream"] != 20], symbols)
