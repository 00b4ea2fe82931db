"""The traces `axsim simulate --out` writes: flows, comm metadata, host launches and sync
events, one file per rank class in symmetric mode, streaming gzip, Chakra ET, pictures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.api import Result, simulate
from simulator.config import load_config
from simulator.outputs.files import write_outputs
from simulator.outputs.trace_io import read_trace_json, write_trace_json
from simulator.outputs.trace_names import GroupRegistry, compact_ranks, message_nelems

BASE = ["cluster.machine=dgx-h100", "cluster.gpus=16", "model.name=gpt-tiny",
        "training.batch_tokens=262144", "engine.virtual_microbatches=false"]  # fmt: skip
AXONN = [*BASE, "parallel.grid={x: 2, y: 2, z: 2, data: 2}"]
MEGATRON = [*BASE, "parallel.strategy=megatron", "parallel.tp=2", "parallel.pp=2"]


@pytest.fixture(scope="module", params=["axonn", "megatron"])
def full_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Every rank simulated and written (full mode), no pictures."""
    over = AXONN if request.param == "axonn" else MEGATRON
    result = simulate(load_config(None, [*over, "engine.mode=full"]))
    out = tmp_path_factory.mktemp(request.param)
    write_outputs(result, out, "all", pictures=False)
    return result, out


def _events(path: Path) -> list[dict]:  # type: ignore[type-arg]
    events = read_trace_json(path)["traceEvents"]
    assert isinstance(events, list)
    return events


def test_flows_never_point_backwards_nor_join_other_groups(full_run) -> None:  # type: ignore[no-untyped-def]
    result, out = full_run
    doc = read_trace_json(out / "trace.json.gz")
    # a multi-rank file claims no single rank; it says which ranks it holds
    assert "distributedInfo" not in doc and doc["axsim_ranks"] == {
        str(r): str(r) for r in range(16)
    }
    events = _events(out / "trace.json.gz")
    groups = GroupRegistry.build(result.plan.graph.groups).all_groups()
    flows = [e for e in events if e.get("ph") in ("s", "f")]
    assert len({e["id"] for e in flows}) * 2 == len(flows)  # ids unique across kinds
    starts = {e["id"]: e for e in flows if e["ph"] == "s" and e["cat"] == "collective"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f" and e["cat"] == "collective"}
    assert starts and set(starts) == set(ends)
    for fid, s in starts.items():
        f = ends[fid]
        assert f["ts"] >= s["ts"], (s, f)
        assert s["pid"] != f["pid"]
        pg = s["name"].split(" pg ")[1].split(" ")[0]
        assert {s["pid"], f["pid"]} <= set(groups[pg]), (s, f, groups[pg])
    # every arrow lands inside a kernel of its rank and stream (binds to the slice)
    kernels: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for e in events:
        if e.get("ph") == "X":
            kernels.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for e in [*starts.values(), *ends.values()]:
        spans = kernels[(e["pid"], e["tid"])]
        assert any(a - 1e-6 <= e["ts"] <= b + 1e-6 for a, b in spans), e
    # one arrow per other member of each collective: members - 1 per collective instance
    n_comm = sum(
        1 for r in range(16) for k in result.engine.timeline.rank(r).kind
        if k in ("all-reduce", "all-gather", "reduce-scatter")
    )  # fmt: skip
    assert len(starts) >= n_comm - n_comm // 2


def test_collective_metadata_names_the_group_instance(full_run) -> None:  # type: ignore[no-untyped-def]
    result, out = full_run
    groups = GroupRegistry.build(result.plan.graph.groups).all_groups()
    doc = read_trace_json(out / "kineto" / "rank-5.json.gz")
    info = doc["distributedInfo"]
    assert isinstance(info, dict) and info["rank"] == 5 and info["world_size"] == 16
    assert all(5 in groups[pg["pg_name"]] for pg in info["pg_config"])
    nccl = [e for e in _events(out / "kineto" / "rank-5.json.gz")
            if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_")]  # fmt: skip
    assert nccl
    for e in nccl:
        a = e["args"]
        ranks = json.loads(a["Process Group Ranks"])
        assert ranks == groups[a["Process Group Name"]] and 5 in ranks
        assert a["Group size"] == len(ranks)
        if a["Collective name"] == "_allgather_base":
            assert a["In msg nelems"] * a["Group size"] == a["Out msg nelems"]
        if a["Collective name"] == "_reduce_scatter_base":
            assert a["Out msg nelems"] * a["Group size"] == a["In msg nelems"]


def test_launches_precede_kernels_and_syncs_name_recorded_events(full_run) -> None:  # type: ignore[no-untyped-def]
    _, out = full_run
    events = _events(out / "kineto" / "rank-3.json.gz")
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "cuda_runtime"}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    for k in kernels:
        launch = launches[k["args"]["correlation"]]
        assert launch["name"].startswith("cudaLaunchKernel")
        assert launch["ts"] + launch["dur"] <= k["ts"] + 1e-6
    records = {c for c, e in launches.items() if e["name"] == "cudaEventRecord"}
    syncs = [e for e in events if e.get("cat") == "cuda_sync"]
    waits = [s for s in syncs if s["name"] == "Stream Wait Event"]
    assert waits and all(s["args"]["wait_on_cuda_event_record_corr_id"] in records for s in waits)
    # CUPTI records a sync at its runtime call (same correlation), not on the GPU clock
    for s in syncs:
        call = launches[s["args"]["correlation"]]
        assert call["ts"] == s["ts"] and call["name"] in ("cudaStreamWaitEvent",
                                                           "cudaDeviceSynchronize")  # fmt: skip
    # the step ends in one device synchronize that returns after the last kernel
    [done] = [s for s in syncs if s["name"] == "Context Sync"]
    assert done["args"]["stream"] == -1
    assert done["ts"] + done["dur"] >= max(k["ts"] + k["dur"] for k in kernels)
    host = [e for e in events if e.get("ph") == "X" and e.get("tid") == 1]
    assert all(e["ts"] == int(e["ts"]) and e["dur"] >= 0 for e in host)  # whole µs
    steps = [e for e in host if e["name"].startswith("ProfilerStep#")]
    assert [s["name"] for s in steps] == ["ProfilerStep#1"]
    assert steps[0]["ts"] + steps[0]["dur"] >= done["ts"] + done["dur"]
    # Kineto's ac2g arrows: one per kernel, from its launch to its start
    flows = [e for e in events if e.get("cat") == "ac2g"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert set(starts) == set(ends) == {k["args"]["correlation"] for k in kernels}
    for k in kernels:
        c = k["args"]["correlation"]
        assert starts[c]["ts"] == launches[c]["ts"] and starts[c]["pid"] == launches[c]["pid"]
        assert (ends[c]["ts"], ends[c]["pid"], ends[c]["tid"]) == (k["ts"], k["pid"], k["tid"])
    assert all(steps[0]["ts"] <= e["ts"] <= steps[0]["ts"] + steps[0]["dur"] for e in host)


def test_symmetric_mode_writes_one_file_per_class(tmp_path: Path) -> None:
    result = simulate(load_config(None, MEGATRON))
    assert result.engine.mode == "symmetric"
    write_outputs(result, tmp_path, pictures=False)
    files = sorted(p.name for p in (tmp_path / "kineto").iterdir())
    assert files == ["rank-0.json.gz", "rank-8.json.gz"]  # one per pipeline stage
    written = json.loads((tmp_path / "rank_map.json").read_text())["written"]
    assert [(w["rank"], w["stands_for"], w["count"]) for w in written] == [
        (0, "0-7", 8), (8, "8-15", 8)
    ]  # fmt: skip
    explicit = tmp_path / "explicit"
    write_outputs(result, explicit, [2, 3], gzip=False, pictures=False)
    assert sorted(p.name for p in (explicit / "kineto").iterdir()) == [
        "rank-2.json", "rank-3.json"
    ]  # fmt: skip
    assert json.loads((explicit / "trace.json").read_text())["traceEvents"]


def test_one_rank_class_output_has_flows(tmp_path: Path) -> None:
    """The default output of a run of one rank class (the embedded default's shape):
    Perfetto arrows from each awaited collective to the kernel its wait holds back, and
    Kineto's launch arrows."""
    result = simulate(load_config(None, AXONN))
    write_outputs(result, tmp_path, pictures=False)
    written = json.loads((tmp_path / "rank_map.json").read_text())["written"]
    assert [(w["rank"], w["count"]) for w in written] == [(0, 16)]
    events = _events(tmp_path / "trace.json.gz")
    kernels = [e for e in events if e.get("ph") == "X"]

    def at(flow: dict, start: bool) -> dict:  # type: ignore[type-arg]
        """The kernel of the flow's thread that starts (ends) at its time."""
        [k] = [k for k in kernels if (k["pid"], k["tid"]) == (flow["pid"], flow["tid"])
               and abs(k["ts"] + (0 if start else k["dur"]) - flow["ts"]) < 1e-6]  # fmt: skip
        return k

    flows = [e for e in events if e.get("cat") == "stream_wait"]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    finish = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert starts and set(starts) == set(finish)
    for fid, s in starts.items():
        f = finish[fid]
        src, dst = at(s, start=False), at(f, start=True)  # a collective's end, a kernel's start
        assert src["name"].startswith("ncclDevKernel_") and s["tid"] != f["tid"]
        assert f["ts"] >= s["ts"] and dst["name"] and s["name"] == f"wait {src['args']['op']}"
    kineto = _events(tmp_path / "kineto" / "rank-0.json.gz")
    assert sum(1 for e in kineto if e.get("cat") == "ac2g") == 2 * sum(
        1 for e in kineto if e.get("cat") == "kernel"
    )


def test_full_mode_default_writes_the_first_eight(tmp_path: Path) -> None:
    result = simulate(load_config(None, [*AXONN, "engine.mode=full"]))
    write_outputs(result, tmp_path, pictures=False)
    assert len(list((tmp_path / "kineto").glob("rank-*.json.gz"))) == 8


def test_trace_io_streams_any_number_of_events(tmp_path: Path) -> None:
    events = ({"ph": "X", "name": f"k{i}", "ts": float(i), "dur": 0.5} for i in range(10_000))
    path = write_trace_json(tmp_path / "t.json.gz", {"distributedInfo": {"rank": 3}}, events)
    doc = read_trace_json(path)
    assert len(doc["traceEvents"]) == 10_000  # type: ignore[arg-type]
    head = path.read_bytes()[:2]
    assert head == b"\x1f\x8b"  # gzip
    empty = read_trace_json(write_trace_json(tmp_path / "e.json", {}, iter(())))
    assert empty["traceEvents"] == []


@settings(max_examples=50, deadline=None)
@given(st.sets(st.integers(0, 300), max_size=60))
def test_compact_ranks_round_trips(ranks: set[int]) -> None:
    text = compact_ranks(sorted(ranks))
    back: set[int] = set()
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        back.update(range(int(lo), int(hi or lo) + 1))
    assert back == ranks


@given(st.sampled_from(["all-gather", "reduce-scatter", "all-reduce", "broadcast"]),
       st.integers(1, 64), st.integers(1, 1 << 20))  # fmt: skip
def test_message_sizes_conserve_elements(kind: str, group: int, shard: int) -> None:
    n_in, n_out = message_nelems(kind, float(shard * group * 2), group, 2)
    if kind == "all-gather":
        assert (n_in, n_out) == (shard, shard * group)
    elif kind == "reduce-scatter":
        assert (n_in, n_out) == (shard * group, shard)
    else:
        assert n_in == n_out == shard * group


def test_chakra_export_decodes_with_chakras_reader(tmp_path: Path) -> None:
    pytest.importorskip("chakra")
    from chakra.schema.protobuf.et_def_pb2 import (
        COMM_COLL_NODE,
        COMM_RECV_NODE,
        COMM_SEND_NODE,
        GlobalMetadata,
        Node,
    )
    from chakra.src.third_party.utils.protolib import decodeMessage, openFileRd

    result: Result = simulate(load_config(None, MEGATRON))
    write_outputs(result, tmp_path, chakra=True, pictures=False)
    folder = tmp_path / "chakra"
    groups = json.loads((folder / "comm_group.json").read_text())
    assert sorted(int(p.name.split(".")[1]) for p in folder.glob("et.*.et")) == list(range(16))
    for rank in (0, 9):
        f = openFileRd(str(folder / f"et.{rank}.et"))
        meta = GlobalMetadata()
        assert decodeMessage(f, meta) and meta.version
        nodes = []
        node = Node()
        while decodeMessage(f, node):
            nodes.append(node)
            node = Node()
        f.close()
        ops = result.plan.graph.program_of(rank).ops
        assert len(nodes) == sum(1 for op in ops if type(op).__name__ != "WaitOp")
        ids = {n.id for n in nodes}
        for n in nodes:
            assert set(n.data_deps) <= ids and set(n.ctrl_deps) <= ids
            assert all(d < n.id for d in [*n.data_deps, *n.ctrl_deps])
            attrs = {a.name: a for a in n.attr}
            if n.type in (COMM_COLL_NODE, COMM_SEND_NODE, COMM_RECV_NODE):
                assert rank in groups[attrs["pg_name"].string_val]
            if n.type in (COMM_SEND_NODE, COMM_RECV_NODE):
                src, dst = attrs["comm_src"].int32_val, attrs["comm_dst"].int32_val
                assert rank in (src, dst) and abs(src - dst) == 8  # the next pipeline stage
        assert any(n.type == COMM_SEND_NODE for n in nodes)


def test_pictures_are_written_with_editable_text(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    result = simulate(load_config(None, AXONN))
    paths = write_outputs(result, tmp_path, [0, 1])
    for name in ("timeline", "breakdown"):
        for ext in ("png", "svg", "pdf"):
            assert (tmp_path / f"{name}.{ext}") in paths
        svg = (tmp_path / f"{name}.svg").read_text()
        assert "<text" in svg and "Date" not in svg  # text kept as text, no timestamp
    assert np.isfinite(result.report.iteration_time_s)


def test_export_flags_fail_with_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.cli_helpers import one_line_error

    small = ["simulate", "--machine", "dgx-h100", "--gpus", "8", "--model", "gpt-tiny",
             "--batch-tokens", "4096"]  # fmt: skip
    assert "--chakra writes into the --out folder" in one_line_error([*small, "--chakra"], capsys)
    import builtins

    real_import = builtins.__import__

    def no_chakra(name: str, *args: object, **kw: object) -> object:
        if name.startswith("chakra"):
            raise ImportError(name)
        return real_import(name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_chakra)
    err = one_line_error([*small, "--out", str(tmp_path / "o"), "--chakra"], capsys)
    assert "pip install 'axsim[chakra]'" in err
    assert not (tmp_path / "o" / "report.json").exists()  # refused before simulating
