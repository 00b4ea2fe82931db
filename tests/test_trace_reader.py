"""Streaming reader: top-level key order, gzip by magic bytes, bounded memory, bad input."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path

import pytest

from validation.errors import TraceError
from validation.trace.reader import TraceStream, iter_events

DATA = Path(__file__).parent / "data" / "traces"
EVENTS = [
    {
        "ph": "X",
        "cat": "cpu_op",
        "name": "aten::mm",
        "pid": 1,
        "tid": 1,
        "ts": 10,
        "dur": 5,
        "args": {"s": 'a,]}"\\'},
    },
    {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 12.5,
        "dur": 1e-3,
        "args": {},
    },
    {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}},
]


def _write(path: Path, text: str, gz: bool = False) -> Path:
    data = text.encode()
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def _trace_text(before: bool) -> str:
    meta = '"schemaVersion": 1, "distributedInfo": {"rank": 3, "world_size": 8}, "baseTimeNanoseconds": 1700000000000000000'
    events = '"traceEvents": [\n' + ",\n  ".join(json.dumps(e) for e in EVENTS) + "\n]"
    return "{" + (f"{meta}, {events}" if before else f"{events}, {meta}") + "}\n"


@pytest.mark.parametrize("before", [True, False], ids=["meta-first", "events-first"])
@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
@pytest.mark.parametrize("chunk", [3, 64, 1 << 20])
def test_streams_events_and_metadata_in_any_key_order(
    tmp_path: Path, before: bool, gz: bool, chunk: int
) -> None:
    # The .json name is a lie for the gzip case: compression is detected by magic bytes.
    path = _write(tmp_path / "trace.json", _trace_text(before), gz)
    stream = TraceStream(path, chunk_chars=chunk)
    assert list(stream) == EVENTS
    assert stream.metadata == {
        "schemaVersion": 1,
        "distributedInfo": {"rank": 3, "world_size": 8},
        "baseTimeNanoseconds": 1700000000000000000,
    }
    assert stream.n_events == 3


@pytest.mark.parametrize(
    "fixture",
    [
        "param/worker0_step_12.1694128201545.pt.trace.json.gz",
        "synthetic/h100_2026_rank0.json",
        "gloo/rank2.json.gz",
    ],
)
def test_real_fixtures_stream_like_json_load(fixture: str) -> None:
    path = DATA / fixture
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        whole = json.load(fh)
    stream = TraceStream(path, chunk_chars=997)
    assert list(stream) == whole["traceEvents"]
    assert stream.metadata == {k: v for k, v in whole.items() if k != "traceEvents"}


def _big_trace(path: Path, n_events: int) -> int:
    event = {"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>" * 3,
             "pid": 0, "tid": 7, "ts": 0.0, "dur": 1.5, "args": {"correlation": 0, "grid": [1, 1, 1]}}  # fmt: skip
    with open(path, "w", encoding="utf-8") as fh:
        fh.write('{"schemaVersion": 1, "traceEvents": [\n')
        for i in range(n_events):
            event["ts"] = float(i)
            fh.write(("," if i else "") + json.dumps(event) + "\n")
        fh.write('], "deviceProperties": []}\n')
    return path.stat().st_size


@pytest.mark.parametrize("gz", [False, True], ids=["plain", "gzip"])
def test_memory_stays_far_below_file_size(tmp_path: Path, gz: bool) -> None:
    path = tmp_path / "big.json"
    size = _big_trace(path, 40_000)
    if gz:
        gz_path = tmp_path / "big.json.gz"
        gz_path.write_bytes(gzip.compress(path.read_bytes(), compresslevel=1))
        path.unlink()
        path = gz_path
    assert size > 8_000_000
    tracemalloc.start()
    try:
        count = sum(1 for _ in TraceStream(path, chunk_chars=1 << 18))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 40_000
    # The reader holds O(chunk) text, never the file: ~1.2 MB for an 11 MB trace.
    assert peak < size / 6, f"peak {peak} B for a {size} B trace"


def _truncated_gzip(tmp: Path) -> Path:
    data = gzip.compress(_trace_text(True).encode() * 1, mtime=0)
    return _write_bytes(tmp / "trunc.json.gz", data[: len(data) // 2])


def _corrupt_gzip(tmp: Path) -> Path:
    data = bytearray(
        gzip.compress(
            ("{" + '"traceEvents": [' + ",".join(['{"ph":"i"}'] * 5000) + "]}").encode(), mtime=0
        )
    )
    data[len(data) // 2 : len(data) // 2 + 8] = b"\xff" * 8
    return _write_bytes(tmp / "corrupt.gz", bytes(data))


def _write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


BAD_TEXT = {
    "truncated-json": _trace_text(True)[:-40],
    "top-level-list": json.dumps(EVENTS),
    "no-traceEvents": '{"schemaVersion": 1, "deviceProperties": []}',
    "traceEvents-not-list": '{"traceEvents": {"a": 1}}',
    "event-not-object": '{"traceEvents": [1, 2]}',
    "trailing-data": _trace_text(True) + "{}",
    "empty": "",
    "malformed-middle": '{"traceEvents": [{"ph": "X"}, {"ph": X}, {"ph": "X"}]}',
    "missing-comma": '{"traceEvents": [{"ph": "X"} {"ph": "X"}]}',
}


@pytest.mark.parametrize("case", sorted(BAD_TEXT))
def test_bad_json_raises_one_line_trace_error_naming_the_file(tmp_path: Path, case: str) -> None:
    path = _write(tmp_path / f"{case}.json", BAD_TEXT[case])
    with pytest.raises(TraceError) as err:
        list(iter_events(path))
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "make", [_truncated_gzip, _corrupt_gzip], ids=["truncated-gzip", "corrupt-gzip"]
)
def test_bad_gzip_raises_instead_of_yielding_a_partial_trace(tmp_path: Path, make: object) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    seen: list[dict[str, object]] = []
    with pytest.raises(TraceError, match=r"gzip|JSON") as err:
        seen.extend(iter_events(path))
    assert str(path) in str(err.value)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        list(iter_events(tmp_path / "nope.json"))
