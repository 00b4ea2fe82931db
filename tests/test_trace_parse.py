"""parse_trace on every fixture (2021-2026, NVIDIA/AMD/CPU-gloo), checked against the derived CSVs.

The full-size originals under ../shared/traces (not in the repository) are checked too
when shared/ sits beside the checkout (developers' machines, CI); skipped elsewhere.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections import defaultdict
from functools import cache
from pathlib import Path

import numpy as np
import pytest

from simulator.engine.timeline import COMM_KINDS, COMPUTE_KINDS
from validation.errors import TraceError
from validation.trace import ParsedTrace, collective_kind, parse_trace

DATA = Path(__file__).parent / "data" / "traces"
SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "traces"
SHARED_TRACES = (
    sorted(str(p.relative_to(SHARED)) for p in SHARED.glob("*/*.json.gz"))
    if SHARED.is_dir()
    else []
)


@cache
def parsed(rel: str) -> ParsedTrace:
    return parse_trace(DATA / rel)


# fixture, era, vendor, rank, world size, GPU, records per kind
FIXTURES = [
    ("gloo/rank0.json.gz", "2025+", "cpu", 0, 4, "", {"all-gather": 2, "all-reduce": 6, "all-to-all": 2, "broadcast": 2, "elementwise": 18, "gemm": 4, "optimizer": 2, "reduce-scatter": 2}),
    ("gloo/rank2.json.gz", "2025+", "cpu", 2, 4, "", {"all-gather": 2, "all-reduce": 4, "all-to-all": 2, "broadcast": 2, "elementwise": 16, "gemm": 4, "optimizer": 2, "reduce-scatter": 2}),
    ("hta/amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz", "2025+", "amd", 0, 1, "AMD Radeon Graphics", {"elementwise": 11, "gemm": 2, "memcpy": 2, "optimizer": 1}),
    ("hta/df_index_resolver__df_index_resolver__step2.json.gz", "2022", "nvidia", 1, 2, "Tesla V100-SXM2-32GB", {"all-reduce": 404, "elementwise": 2359, "gemm": 707, "memcpy": 584, "optimizer": 404}),
    ("hta/nccl_parser_config__nccl_data.json.gz", "2024", "nvidia", 0, 2, "NVIDIA A100-PG509-200", {"all-reduce": 15, "broadcast": 6, "elementwise": 2079, "gemm": 573, "memcpy": 1074, "optimizer": 27}),
    ("hta/negative_queue_length_values_check__rank0__step550.json.gz", "2023", "nvidia", 0, 16, "NVIDIA A100-SXM4-80GB", {"all-gather": 2, "all-reduce": 2, "all-to-all": 9, "elementwise": 1024, "gemm": 18, "memcpy": 300, "optimizer": 18, "reduce-scatter": 2}),
    ("hta/trace_diff__control__control__step1009.json.gz", "2022", "nvidia", 3, 8, "NVIDIA A100-PG509-200", {"all-reduce": 3, "all-to-all": 7, "elementwise": 1012, "gemm": 398, "memcpy": 147, "optimizer": 8}),
    ("hta/trace_diff__test__test__step1009.json.gz", "2022", "nvidia", 1, 2, "Tesla V100-SXM2-16GB", {"all-reduce": 3, "all-to-all": 7, "elementwise": 1073, "gemm": 464, "memcpy": 948, "optimizer": 8}),
    ("hta/trace_filter__sampled_rank-0.json.gz", "2023", "nvidia", 0, 128, "", {"all-gather": 2, "all-reduce": 4, "all-to-all": 4, "elementwise": 683, "gemm": 386, "memcpy": 50, "optimizer": 65, "quantize": 10}),
    ("hta/trace_filter__sampled_rank-1.json.gz", "2023", "nvidia", 1, 128, "", {"all-gather": 2, "all-reduce": 4, "all-to-all": 4, "elementwise": 637, "gemm": 386, "memcpy": 50, "optimizer": 61, "quantize": 10}),
    ("param/worker0_step_12.1694128201545.pt.trace.json.gz", "2023", "nvidia", 0, 8, "Tesla V100-SXM2-32GB", {"all-reduce": 3, "all-to-all": 5, "elementwise": 145, "gemm": 28, "memcpy": 16, "optimizer": 64}),
    ("param/worker3_step_12.1694128201557.pt.trace.json.gz", "2023", "nvidia", 3, 8, "Tesla V100-SXM2-32GB", {"all-reduce": 3, "all-to-all": 5, "elementwise": 215, "gemm": 28, "memcpy": 22, "optimizer": 64}),
    ("synthetic/h100_2026_rank1.json", "2025+", "nvidia", 1, 2, "NVIDIA H100 80GB HBM3", {"all-gather": 1, "all-reduce": 1, "all-to-all": 1, "attention": 1, "gemm": 1, "reduce-scatter": 1}),
    ("synthetic/mi300x_rocm_rank0.json", "2024", "amd", 0, 8, "AMD Instinct MI300X", {"all-reduce": 1, "gemm": 2}),
    ("synthetic/pt18_2021_rank0.json", "2021", "nvidia", 0, 1, "", {"all-reduce": 1, "elementwise": 1, "gemm": 2, "memcpy": 1}),
    ("tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005__step6.json.gz", "2025+", "nvidia", 0, 1, "NVIDIA H100 80GB HBM3", {"attention": 24, "elementwise": 836, "gemm": 169, "memcpy": 169}),
    ("tracelens/mi300x__Qwen_Qwen1.5-0.5B-Chat__1016005__step6.json.gz", "2025+", "amd", 0, 1, "AMD Instinct MI300X VF", {"attention": 24, "elementwise": 860, "gemm": 169, "memcpy": 1}),
]  # fmt: skip
ALL_FIXTURES = sorted(str(p.relative_to(DATA)) for p in DATA.glob("*/*.json*"))


@pytest.mark.parametrize(
    ("rel", "era", "vendor", "rank", "world", "gpu", "kinds"),
    FIXTURES,
    ids=[f[0].split("/")[-1][:40] for f in FIXTURES],
)
def test_fixture_metadata_and_kind_counts(rel: str, era: str, vendor: str, rank: int, world: int, gpu: str, kinds: dict[str, int]) -> None:  # fmt: skip
    p = parsed(rel)
    assert (p.info.era, p.info.vendor, p.info.rank, p.info.world_size, p.info.gpu) == (
        era,
        vendor,
        rank,
        world,
        gpu,
    )
    assert p.kind_counts() == kinds


@pytest.mark.parametrize("rel", ALL_FIXTURES)
def test_every_fixture_gives_a_consistent_timeline(rel: str) -> None:
    p = parsed(rel)
    tl = p.timeline
    assert len(tl) > 0 and tl.rank == p.info.rank
    assert set(tl.kind) <= COMPUTE_KINDS | COMM_KINDS
    assert (
        np.all(np.diff(tl.start_s) >= 0) and np.all(tl.end_s >= tl.start_s) and tl.start_s[0] >= 0
    )
    assert all(ph == "" or str(ph).isdigit() for ph in tl.phase)
    assert all(tl.kind[g.index] == "gemm" for g in p.gemms)
    assert all(tl.kind[c.index] == c.kind and tl.bytes[c.index] == c.bytes for c in p.collectives)
    assert {c.index for c in p.collectives} == set(np.flatnonzero(tl.mask_comm()))
    gemm = tl.kind == "gemm"
    assert float(tl.flops[gemm].sum()) == pytest.approx(sum(op.flops for op in p.gemm_ops()))
    assert p.iterations, "every fixture has a ProfilerStep"


def _expected(name: str) -> dict[str, list[dict[str, str]]]:
    rows: dict[str, list[dict[str, str]]] = {}
    with open(DATA / "expected" / name, encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            rows.setdefault(row["fixture"], []).append(row)
    return rows


EXPECTED_COLLECTIVES = _expected("collective_kernels.csv")
EXPECTED_GEMMS = _expected("gemm_ops.csv")


def assert_collectives_match(p: ParsedTrace, rows: list[dict[str, str]]) -> None:
    """Every derived-CSV row has a collective with the same kind, sizes, group and duration."""
    tl = p.timeline
    key = {
        (round(float(tl.start_s[c.index]) * 1e6 + p.info.t0_us, 1), tl.stream[c.index]): c
        for c in p.collectives
    }
    assert len(rows) <= len(p.collectives)
    for row in rows:
        c = key[(round(float(row["ts_us"]), 1), f"stream {row['stream']}")]
        dur_us = float(tl.end_s[c.index] - tl.start_s[c.index]) * 1e6
        assert c.kind == (collective_kind(row["collective"]) or "send-recv")
        assert c.bytes == int(row["bytes"] or 0)
        assert (c.group_size, c.group_size_source) == (
            int(row["group_size"]),
            row["group_size_source"],
        )
        assert (c.dtype, c.in_nelems) == (row["dtype"], int(row["in_nelems"] or 0))
        assert dur_us == pytest.approx(float(row["dur_us"]), abs=0.011)


def assert_gemm_ops_match(p: ParsedTrace, rows: list[dict[str, str]]) -> None:
    """The GEMM ops (op, FLOPs, summed GEMM-kernel time) equal the derived-CSV rows."""
    ops = p.gemm_ops()
    assert len(ops) == len(rows)
    mine = sorted((o.op, o.flops, o.kernel_time_s * 1e6) for o in ops)
    theirs = sorted((r["op"], float(r["flops"]), float(r["gemm_kernel_us"])) for r in rows)
    for (op, flops, us), (op2, flops2, us2) in zip(mine, theirs, strict=True):
        assert (op, flops) == (op2, flops2)
        assert us == pytest.approx(us2, abs=0.011)


@pytest.mark.parametrize("rel", sorted(EXPECTED_COLLECTIVES))
def test_collectives_match_derived_csv(rel: str) -> None:
    assert_collectives_match(parsed(rel), EXPECTED_COLLECTIVES[rel])


@pytest.mark.parametrize("rel", sorted(EXPECTED_GEMMS))
def test_gemm_ops_match_derived_csv(rel: str) -> None:
    assert_gemm_ops_match(parsed(rel), EXPECTED_GEMMS[rel])


def test_2021_format_links_by_lower_case_external_id() -> None:
    p = parsed("synthetic/pt18_2021_rank0.json")
    tl = p.timeline
    assert [g.op for g in p.gemms] == ["aten::addmm", "aten::addmm"]  # sgemm + split-K reduce
    g = p.gemms[0]
    assert (g.m, g.n, g.k, g.batch, g.dtype) == (32, 128, 64, 1, "float")
    assert tl.flops[g.index] == 2 * 32 * 128 * 64 and tl.flops[p.gemms[1].index] == 0
    assert set(tl.stream) == {"stream 7"}
    (c,) = p.collectives
    assert (c.kind, c.bytes, c.kind_source, c.bytes_source) == (
        "all-reduce",
        262144 * 4,
        "annotation",
        "annotation",
    )
    assert tl.bytes[tl.kind == "memcpy"].tolist() == [4096.0]
    assert (p.iterations[0].step, set(tl.phase)) == (5, {"5"})


def test_2026_nccl_metadata_comes_from_kernel_args() -> None:
    p = parsed("synthetic/h100_2026_rank0.json")
    tl = p.timeline
    got = [
        (c.kind, c.bytes, c.in_nelems, c.out_nelems, c.group_size, c.pg_name, tl.group[c.index])
        for c in p.collectives
    ]
    assert got == [
        ("all-gather", 2048 * 2, 1024, 2048, 2, "0", "default_pg"),
        ("reduce-scatter", 4096 * 2, 4096, 2048, 2, "0", "default_pg"),
        ("all-reduce", 4000, 1000, 1000, 2, "1", "tp"),
        ("all-to-all", 2048, 512, 512, 2, "1", "tp"),
    ]
    assert {c.kind_source for c in p.collectives} == {"kernel_args"}
    assert all(c.pg_ranks == (0, 1) for c in p.collectives)
    (g,) = p.gemms
    assert (g.op, g.m, g.n, g.k, g.dtype) == (
        "aten::mm",
        4096,
        2048,
        1024,
        "c10::BFloat16",
    )  # via cuLaunchKernelEx
    assert tl.kind[tl.name == tl.name[tl.kind == "attention"][0]].tolist() == ["attention"]
    it = p.iterations[0]
    assert (
        it.gpu_end_s > it.cpu_end_s and it.end_s == it.gpu_end_s
    )  # NCCL lag outlasts the CPU step


def test_rocm_cijk_ck_and_rccl() -> None:
    p = parsed("synthetic/mi300x_rocm_rank0.json")
    assert [(g.family, g.op, g.m, g.n, g.k) for g in p.gemms] == [
        ("tensile", "aten::addmm", 8944, 2816, 1024),
        ("ck", "aten::mm", 8944, 1024, 2816),
    ]
    (c,) = p.collectives
    assert (c.kind, c.bytes, c.group_size, c.pg_ranks) == (
        "all-reduce",
        1048576 * 2,
        8,
        tuple(range(8)),
    )


def test_gloo_cpu_collectives_on_worker_threads() -> None:
    p = parsed("gloo/rank0.json.gz")
    tl = p.timeline
    first_step = [c for c in p.collectives if c.iteration == p.iterations[0].step]
    got = [
        (c.kind, c.bytes, c.group_size, c.pg_name, tl.stream[c.index])
        for c in sorted(first_step, key=lambda c: tl.start_s[c.index])
    ]
    assert got == [
        ("all-reduce", 64 * 64 * 4, 4, "0", "gloo:0"),
        ("all-reduce", 64 * 4, 4, "0", "gloo:0"),
        ("all-gather", 4096 * 4, 4, "0", "gloo:0"),
        ("reduce-scatter", 1024 * 4, 4, "0", "gloo:0"),  # runs as gloo:all_reduce
        ("broadcast", 1024 * 4, 4, "0", "gloo:0"),
        ("all-to-all", 2048 * 4, 4, "0", "gloo:0"),
        ("all-reduce", 2048 * 4, 2, "1", "gloo:1"),  # the {0, 1} subgroup
    ]
    gemm = tl.kind == "gemm"
    assert set(tl.stream[gemm]) == {"cpu"} and tl.flops[gemm].sum() > 0
    assert p.info.backend == "gloo" and p.info.vendor == "cpu"


def test_rank_from_file_name_and_override(tmp_path: Path) -> None:
    src = DATA / "synthetic" / "pt18_2021_rank0.json"
    (tmp_path / "worker5.json").write_bytes(src.read_bytes())
    assert parse_trace(tmp_path / "worker5.json").info.rank == 5
    assert parse_trace(src, rank=3).timeline.rank == 3


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ts", None, "numeric 'ts'"),
        ("dur", "soon", "numeric 'dur'"),
        ("name", None, "'name'"),
        ("tid", None, "'tid'"),
    ],
)
def test_event_missing_required_field(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    trace = json.loads((DATA / "synthetic" / "h100_2026_rank0.json").read_text())
    kernel = next(e for e in trace["traceEvents"] if e.get("cat") == "kernel")
    if value is None:
        del kernel[field]
    else:
        kernel[field] = value
    path = tmp_path / "bad.json.gz"
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    with pytest.raises(TraceError, match=message) as err:
        parse_trace(path)
    assert str(path) in str(err.value) and "traceEvents[" in str(err.value)


def test_truncated_gzip_trace_raises_and_returns_nothing(tmp_path: Path) -> None:
    data = (DATA / "param" / "worker0_step_12.1694128201545.pt.trace.json.gz").read_bytes()
    path = tmp_path / "worker0.json.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="truncated gzip"):
        parse_trace(path)


def test_json_that_is_not_a_kineto_trace(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model": "gpt", "layers": 24}')
    with pytest.raises(TraceError, match="no 'traceEvents'"):
        parse_trace(path)


@cache
def _shared_derived(name: str) -> dict[str, list[dict[str, str]]]:
    rows: dict[str, list[dict[str, str]]] = defaultdict(list)
    with open(SHARED / "derived" / name, encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            rows[row["file"]].append(row)
    return rows


@pytest.mark.slow
@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces not present")
@pytest.mark.parametrize("rel", SHARED_TRACES)
def test_shared_trace_matches_derived_tables_in_full(rel: str) -> None:
    p = parse_trace(SHARED / rel)
    assert len(p.timeline) > 0 and p.iterations
    colls = _shared_derived("collective_kernels.csv")[rel]
    assert len(p.collectives) == len(colls)
    assert_collectives_match(p, colls)
    assert_gemm_ops_match(p, _shared_derived("gemm_ops.csv")[rel])


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/traces not present")
def test_shared_trace_list_is_complete() -> None:
    assert len(SHARED_TRACES) == 18
    assert set(_shared_derived("collective_kernels.csv")) | set(
        _shared_derived("gemm_ops.csv")
    ) <= set(SHARED_TRACES)


def _cpu_op(
    name: str, ts: float, dur: float, tid: int = 1, cat: str = "cpu_op"
) -> dict[str, object]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 7, "tid": tid, "ts": ts, "dur": dur}


def test_cpu_run_ops_by_kind(tmp_path: Path) -> None:
    """CPU-only runs: each main-thread ATen op counted once, with the kind its GPU kernel
    would have; wrappers, views and ops inside GEMM/attention/optimizer/c10d ranges are not
    counted again, and other threads' ops are not the step's compute."""
    events = [
        _cpu_op("ProfilerStep#1", 0, 1000, cat="user_annotation"),
        _cpu_op("aten::linear", 10, 50), _cpu_op("aten::t", 11, 2), _cpu_op("aten::addmm", 14, 40),
        _cpu_op("aten::layer_norm", 70, 30), _cpu_op("aten::native_layer_norm", 71, 28),
        _cpu_op("aten::empty", 72, 1),
        _cpu_op("aten::scaled_dot_product_attention", 110, 60),
        _cpu_op("aten::_scaled_dot_product_flash_attention_for_cpu", 111, 58),
        _cpu_op("aten::empty", 112, 1),
        _cpu_op("aten::to", 180, 20), _cpu_op("aten::_to_copy", 181, 18),
        _cpu_op("aten::copy_", 182, 16), _cpu_op("aten::view", 210, 1),
        _cpu_op("c10d::allreduce_", 220, 30), _cpu_op("aten::copy_", 222, 5),
        _cpu_op("Optimizer.step#Adam.step", 300, 100, cat="user_annotation"),
        _cpu_op("aten::add_", 310, 10), _cpu_op("aten::mul_", 330, 10),
        _cpu_op("aten::add", 500, 10, tid=2),  # another thread: not the step's compute
    ]  # fmt: skip
    args = {"Input Dims": [[8, 16], [8, 16], [16, 16]], "Input type": ["float"] * 3}
    next(e for e in events if e["name"] == "aten::addmm")["args"] = args
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    tl = parse_trace(path).timeline
    got = sorted(zip(tl.kind.astype(str), tl.name.astype(str), strict=True))
    assert got == [
        ("attention", "aten::_scaled_dot_product_flash_attention_for_cpu"),
        ("elementwise", "aten::copy_"),
        ("elementwise", "aten::native_layer_norm"),
        ("gemm", "aten::addmm"),
        ("optimizer", "Optimizer.step#Adam.step"),
    ]
    assert set(tl.stream.astype(str)) == {"cpu"} and set(tl.phase.astype(str)) == {"1"}
