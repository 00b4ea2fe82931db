"""parse_traces: all ranks on one aligned clock; traces of different runs refused."""

from __future__ import annotations

import csv
import json
import shutil
from functools import cache
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from simulator.engine.timeline import Timeline
from validation.errors import TraceError
from validation.trace import parse_traces

DATA = Path(__file__).parent / "data" / "traces"
SYNTH = DATA / "synthetic"
H100 = [SYNTH / "h100_2026_rank0.json", SYNTH / "h100_2026_rank1.json"]


@cache
def param(align: str = "collective") -> Timeline:
    return parse_traces(DATA / "param", align=align)  # type: ignore[arg-type]


def _meta(tl: Timeline, key: str) -> dict[int, float]:
    return cast(dict[int, float], tl.metadata[key])


def _comm(tl: Timeline, attr: str) -> np.ndarray:
    return np.array([getattr(tl.rank(r), attr)[tl.rank(r).mask_comm()] for r in tl.ranks])


def test_param_eight_ranks_collective_ends_agree_within_microseconds() -> None:
    tl = param()
    assert tl.ranks == tuple(range(8)) and tl.world_size == 8 and tl.source == "measured"
    ends = _comm(tl, "end_s")
    assert ends.shape == (8, 8)
    skew_us = (ends.max(axis=0) - ends.min(axis=0)) * 1e6
    assert skew_us.max() < 7.5, skew_us
    offsets = _meta(tl, "clock_offsets_s")
    assert (
        set(offsets) == set(range(8)) and max(abs(v) for v in offsets.values()) < 5e-6
    )  # one host, one clock
    assert len(tl.iteration_bounds_s) == 1
    start, end = tl.iteration_bounds_s[0]
    assert 0 <= start < end and end - start > 0.0145  # the longest rank's step (19.9 ms CPU)


def test_param_matches_derived_cross_rank_table() -> None:
    tl = param()
    starts, ends = _comm(tl, "start_s"), _comm(tl, "end_s")
    sync = _comm(tl, "sync_start_s")
    assert np.allclose(sync, starts.max(axis=0))  # the last participant's arrival
    with open(DATA / "expected" / "param_dlrm_cross_rank.csv", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    kinds = tl.rank(0).kind[tl.rank(0).mask_comm()]
    bytes0 = tl.rank(0).bytes[tl.rank(0).mask_comm()]
    dur = (ends - starts) * 1e6
    for i, row in enumerate(rows):
        assert kinds[i] == row["collective"].replace("_", "-")
        assert bytes0[i] == float(row["bytes_rank0"])
        assert dur[:, i].min() == pytest.approx(float(row["dur_min_us"]), abs=0.01)
        assert np.median(dur[:, i]) == pytest.approx(float(row["dur_median_us"]), abs=0.01)
        assert (starts[:, i].max() - starts[:, i].min()) * 1e6 == pytest.approx(
            float(row["start_skew_us"]), abs=4
        )
        post_arrival = (np.median(ends[:, i]) - starts[:, i].max()) * 1e6
        assert post_arrival == pytest.approx(float(row["post_arrival_us"]), abs=4)


def test_alignment_recovers_a_known_clock_skew() -> None:
    tl = parse_traces(H100)
    assert _meta(tl, "clock_offsets_s")[1] == pytest.approx(-37e-6, abs=1e-9)
    ends = _comm(tl, "end_s")
    assert np.allclose(ends[0], ends[1], atol=1e-9)
    sync = _comm(tl, "sync_start_s")
    assert np.allclose(sync[0], sync[1]) and np.allclose(sync[0] - _comm(tl, "start_s")[0], 23e-6)
    raw = parse_traces(H100, align="none")
    assert np.allclose(_comm(raw, "end_s")[1] - _comm(raw, "end_s")[0], 37e-6)
    assert min(_meta(tl, "offsets_s").values()) == 0.0  # the earliest trace starts at t = 0
    assert min(float(tl.rank(r).start_s.min()) for r in tl.ranks) >= 0.0


def test_gloo_run_directory() -> None:
    tl = parse_traces(DATA / "gloo")
    assert tl.ranks == (0, 1, 2, 3) and tl.metadata["backend"] == "gloo"
    assert len(tl.iteration_bounds_s) == 2
    for r in tl.ranks:
        streams = set(tl.rank(r).stream[tl.rank(r).mask_comm()])
        assert streams == ({"gloo:0", "gloo:1"} if r < 2 else {"gloo:0"})


def _copy(src: Path, dst: Path, edit: object = None) -> Path:
    if edit is None:
        shutil.copy(src, dst)
    else:
        trace = json.loads(src.read_text())
        edit(trace)  # type: ignore[operator]
        dst.write_text(json.dumps(trace))
    return dst


def test_duplicated_rank_is_refused(tmp_path: Path) -> None:
    a = _copy(H100[0], tmp_path / "a.json")
    b = _copy(H100[0], tmp_path / "b.json")
    with pytest.raises(TraceError, match="both are rank 0") as err:
        parse_traces([a, b])
    assert "a.json" in str(err.value) and "b.json" in str(err.value)


def test_different_world_sizes_are_refused() -> None:
    with pytest.raises(TraceError, match="different world sizes"):
        parse_traces([DATA / "param" / "worker0_step_12.1694128201545.pt.trace.json.gz", H100[1]])


def test_mismatched_pg_config_is_refused(tmp_path: Path) -> None:
    def edit(trace: dict[str, Any]) -> None:
        trace["distributedInfo"]["pg_config"][1]["ranks"] = [1, 2]

    with pytest.raises(TraceError, match="process group '1' differs"):
        parse_traces([H100[0], _copy(H100[1], tmp_path / "r1.json", edit)])


def test_wildly_different_start_epochs_are_refused(tmp_path: Path) -> None:
    def edit(trace: dict[str, Any]) -> None:
        trace["baseTimeNanoseconds"] += 86_400 * 10**9

    with pytest.raises(TraceError, match="s apart"):
        parse_traces([H100[0], _copy(H100[1], tmp_path / "r1.json", edit)])


def test_2021_and_later_formats_are_refused(tmp_path: Path) -> None:
    def edit(trace: dict[str, Any]) -> None:
        for e in trace["traceEvents"]:
            if e.get("cat") == "cpu_op":
                e["cat"] = "Operator"

    with pytest.raises(TraceError, match="different profiler formats"):
        parse_traces([H100[0], _copy(H100[1], tmp_path / "r1.json", edit)])


def test_ranks_without_world_size_combine(tmp_path: Path) -> None:
    def edit(rank: int) -> object:
        def apply(trace: dict[str, Any]) -> None:
            trace["distributedInfo"] = {"rank": rank}

        return apply

    files = [_copy(p, tmp_path / p.name, edit(r)) for r, p in enumerate(H100)]
    tl = parse_traces(files)
    assert tl.world_size == 2 and tl.ranks == (0, 1)


def test_rank_outside_world_is_refused(tmp_path: Path) -> None:
    def edit(trace: dict[str, Any]) -> None:
        trace["distributedInfo"]["rank"] = 2

    with pytest.raises(TraceError, match="rank outside world size"):
        parse_traces([H100[0], _copy(H100[1], tmp_path / "r1.json", edit)])


def test_empty_or_missing_inputs(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no trace files"):
        parse_traces(tmp_path)
    with pytest.raises(TraceError, match="no such trace"):
        parse_traces(tmp_path / "missing")
