"""Writing a simulation's outputs: report.json, config.resolved.yaml, timeline.csv,
links.csv, a Chrome/Perfetto trace and per-rank Kineto traces (kineto/rank-<r>.json, for
Holistic Trace Analysis; simulator/export_kineto.py).

The trace (`trace.json`) is Chrome trace-event JSON in the shape the PyTorch profiler
writes (Kineto): one process per GPU (pid = rank), one thread per stream (tid), complete
events (`ph: X`, µs) with `cat` "kernel" for GPU work, NCCL-style names and comm metadata
for collectives (`Collective name`, `In msg nelems`, `Group size`, ...), a
`ProfilerStep#0` annotation per rank, and flow arrows (`ph: s`/`f`) from each collective
to the same collective on the other selected ranks. It opens in ui.perfetto.dev and
chrome://tracing.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from simulator.api import Result
from simulator.export_kineto import COLLECTIVE_NAMES, kernel_name, write_kineto_traces
from simulator.timeline import COMM_KINDS, RankTimeline


def default_trace_ranks(world: int, limit: int = 8) -> list[int]:
    """Ranks exported by default: all when few, else the first `limit`."""
    return list(range(min(world, limit)))


def parse_trace_ranks(text: str | None, world: int) -> list[int]:
    """'0-3,16' -> [0, 1, 2, 3, 16]; None -> the default selection."""
    from simulator.errors import ConfigError

    if text is None:
        return default_trace_ranks(world)
    if text.strip() == "all":
        return list(range(world))
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            lo, hi = (int(x) for x in part.split("-", 1)) if "-" in part else (int(part),) * 2
        except ValueError:
            raise ConfigError(
                f"--trace-ranks: cannot read '{part}' (use e.g. 0-3,16 or all)"
            ) from None
        if hi < lo:
            raise ConfigError(f"--trace-ranks: range '{part}' ends before it starts")
        out.extend(range(lo, hi + 1))
    bad = [r for r in out if not 0 <= r < world]
    if bad:
        raise ConfigError(f"--trace-ranks: rank {bad[0]} is outside 0..{world - 1}")
    return sorted(set(out))


def make_out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create an output folder; a path that cannot be one is a ConfigError naming it."""
    from simulator.errors import ConfigError

    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{flag} {path}: exists and is not a folder") from None
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ConfigError(f"{flag} {path}: the folder is not writable")
    return out


def resolved_config_yaml(result: Result) -> str:
    """The run's config with its automatic choices filled in and explained (comments):
    loading it reruns the same simulation without choosing again."""
    from simulator.choices import Choice, resolved_yaml

    choices = [Choice(**c) for c in result.report.choices]
    return resolved_yaml(result.config.model_dump(mode="json"), result.plan.parameters, choices)


def write_outputs(
    result: Result, out_dir: str | Path, trace_ranks: list[int] | None = None
) -> list[Path]:
    """Write all output files; returns their paths."""
    out = make_out_dir(out_dir)
    ranks = (
        trace_ranks
        if trace_ranks is not None
        else default_trace_ranks(result.engine.timeline.world_size)
    )
    paths = [
        _write_json(out / "report.json", result.report.to_json()),
        _write_text(out / "config.resolved.yaml", resolved_config_yaml(result)),
        write_timeline_csv(out / "timeline.csv", (result.engine.timeline.rank(r) for r in ranks)),
        write_links_csv(out / "links.csv", result),
        write_chrome_trace(
            out / "trace.json", [result.engine.timeline.rank(r) for r in ranks], result
        ),
    ]
    paths += write_kineto_traces(
        out / "kineto",
        [result.engine.timeline.rank(r) for r in ranks],
        result.engine.timeline.world_size,
        result.report.gpu,
    )
    return paths


def _write_json(path: Path, data: object) -> Path:
    path.write_text(json.dumps(data, indent=2, default=_jsonable))
    return path


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _jsonable(x: object) -> object:
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    return str(x)


def write_timeline_csv(path: Path, timelines: Iterable[RankTimeline]) -> Path:
    """One row per op per rank (the Timeline schema)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "rank",
                "stream",
                "name",
                "kind",
                "group",
                "phase",
                "start_s",
                "end_s",
                "sync_start_s",
                "bytes",
                "flops",
            ]
        )
        for tl in timelines:
            sync = tl.sync_start_s if tl.sync_start_s is not None else tl.start_s
            for i in range(len(tl)):
                w.writerow(
                    [
                        tl.rank,
                        tl.stream[i],
                        tl.name[i],
                        tl.kind[i],
                        tl.group[i],
                        tl.phase[i],
                        f"{tl.start_s[i]:.12g}",
                        f"{tl.end_s[i]:.12g}",
                        f"{sync[i]:.12g}",
                        f"{tl.bytes[i]:.12g}",
                        f"{tl.flops[i]:.12g}",
                    ]
                )
    return path


def write_links_csv(path: Path, result: Result) -> Path:
    """Every link that carried traffic: endpoints, kind, bandwidth, bytes, utilisation."""
    topo = result.topology
    lb = result.engine.link_bytes
    t = result.report.iteration_time_s
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["link", "src", "dst", "kind", "bandwidth_GBps", "bytes", "utilization"])
        for i in np.flatnonzero(lb > 0):
            link = topo.link(int(i))
            util = lb[i] / (link.bandwidth_Bps * t) if t > 0 else 0.0
            w.writerow(
                [
                    int(i),
                    topo.device_name(link.src),
                    topo.device_name(link.dst),
                    link.kind.value,
                    f"{link.bandwidth_Bps / 1e9:g}",
                    f"{lb[i]:.6g}",
                    f"{util:.6g}",
                ]
            )
    return path


def chrome_trace_events(timelines: list[RankTimeline], world_size: int) -> list[dict[str, object]]:
    """Kineto-shaped trace events for the given ranks."""
    events: list[dict[str, object]] = []
    flow_first: dict[tuple[str, str, int], tuple[int, float, int]] = {}
    flow_id = 0
    correlation = 1
    for tl in timelines:
        pid = int(tl.rank)
        streams = {s: i + 7 for i, s in enumerate(dict.fromkeys(str(x) for x in tl.stream))}
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": pid,
                "tid": 0,
                "args": {"name": f"GPU {pid} (rank {pid})"},
            }
        )
        events.append(
            {
                "ph": "M",
                "name": "process_sort_index",
                "pid": pid,
                "tid": 0,
                "args": {"sort_index": pid},
            }
        )
        for s, tid in streams.items():
            events.append(
                {
                    "ph": "M",
                    "name": "thread_name",
                    "pid": pid,
                    "tid": tid,
                    "args": {"name": f"stream {tid} {s}"},
                }
            )
        t0 = float(tl.start_s.min(initial=0.0))
        t1 = float(tl.end_s.max(initial=0.0))
        events.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": "ProfilerStep#0",
                "pid": pid,
                "tid": streams.get("compute", 7),
                "ts": t0 * 1e6,
                "dur": (t1 - t0) * 1e6,
                "args": {},
            }
        )
        occurrence: dict[tuple[str, str], int] = {}
        for i in range(len(tl)):
            kind = str(tl.kind[i])
            if kind == "wait":
                continue
            tid = streams[str(tl.stream[i])]
            ts = float(tl.start_s[i]) * 1e6
            dur = float(tl.end_s[i] - tl.start_s[i]) * 1e6
            args: dict[str, object] = {
                "device": pid,
                "stream": tid,
                "correlation": correlation,
                "External id": correlation,
            }
            correlation += 1
            name = str(tl.name[i])
            if kind in COMM_KINDS:
                group = str(tl.group[i])
                nelems = int(tl.bytes[i] // 2)
                args.update(
                    {
                        "Collective name": COLLECTIVE_NAMES[kind],
                        "In msg nelems": nelems,
                        "Out msg nelems": nelems,
                        "dtype": "BFloat16",
                        "Process Group Name": group,
                        "Process Group Description": group,
                        "bytes": float(tl.bytes[i]),
                        "op": name,
                    }
                )
                name = kernel_name(kind, name)
                key = (group, name, occurrence.setdefault((group, name), 0))
                occurrence[(group, name)] += 1
                first = flow_first.get(key)
                if first is None:
                    flow_first[key] = (pid, ts, tid)
                elif first[0] != pid:
                    flow_id += 1
                    events.append(
                        {
                            "ph": "s",
                            "cat": "collective",
                            "name": "collective",
                            "id": flow_id,
                            "pid": first[0],
                            "tid": first[2],
                            "ts": first[1],
                        }
                    )
                    events.append(
                        {
                            "ph": "f",
                            "bp": "e",
                            "cat": "collective",
                            "name": "collective",
                            "id": flow_id,
                            "pid": pid,
                            "tid": tid,
                            "ts": ts,
                        }
                    )
            else:
                args.update(
                    {"flops": float(tl.flops[i]), "bytes": float(tl.bytes[i]), "kind": kind}
                )
            args["phase"] = str(tl.phase[i])
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "pid": pid,
                    "tid": tid,
                    "ts": ts,
                    "dur": dur,
                    "args": args,
                }
            )
    return events


def write_chrome_trace(path: Path, timelines: list[RankTimeline], result: Result) -> Path:
    world = result.engine.timeline.world_size
    doc = {
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "distributedInfo": {
            "backend": "nccl",
            "rank": timelines[0].rank if timelines else 0,
            "world_size": world,
        },
        "deviceProperties": [{"id": 0, "name": result.report.gpu}],
        "traceName": f"axsim {result.report.model} on {result.report.gpus} {result.report.gpu}",
        "traceEvents": chrome_trace_events(timelines, world),
    }
    path.write_text(json.dumps(doc))
    return path
