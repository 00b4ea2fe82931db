"""Writing a simulation's outputs: report.json, config.resolved.yaml, timeline.csv,
links.csv, a Chrome/Perfetto trace, per-rank Kineto traces (kineto/, for Holistic Trace
Analysis; simulator/outputs/kineto.py), optionally a Chakra execution trace
(simulator/outputs/chakra.py), and pictures (simulator/outputs/pictures.py).

The trace (`trace.json.gz`) is Chrome trace-event JSON in the shape the PyTorch profiler
writes (Kineto): one process per written rank (pid = rank), one thread per stream (tid),
complete events (`ph: X`, µs) for GPU kernels with NCCL's kernel names and comm metadata
(simulator/outputs/trace_names.py), and flow arrows joining the members of one collective: keyed
by group *instance* and the collective's sequence number on it (how the engine matches
collectives), from the member that arrived last to every other traced member at that
instant, so no arrow points backwards in time or joins ranks of different groups; a
send's arrow goes to its receive when the transfer starts. Within each rank, an arrow
goes from every awaited collective to the kernel its `handle.wait()` holds back (so a
symmetric run's single rank class has arrows too). It opens in ui.perfetto.dev and
chrome://tracing.

Which ranks are written: in full mode the first 8 unless `--trace-ranks` says otherwise;
in symmetric mode, by default (and for `all`), one rank per rank class, with
`rank_map.json` saying which ranks each written rank stands for (the others' records are
copies). Files are written streaming and gzip-compressed (simulator/outputs/trace_io.py).
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator
from itertools import count
from pathlib import Path
from typing import Literal

import numpy as np

from simulator.engine.timeline import COMM_KINDS, RankTimeline
from simulator.outputs.finished import FinishedRun
from simulator.outputs.kineto import gpu_event, stream_ids, wait_flows, write_kineto_traces
from simulator.outputs.trace_context import RankInfo, TraceContext
from simulator.outputs.trace_io import write_trace_json
from simulator.outputs.trace_names import compact_ranks

TraceRanks = list[int] | Literal["all"] | None
DEFAULT_TRACE_RANKS = 8  # full mode, no --trace-ranks: ranks 0-7 (one node of most machines)


def parse_trace_ranks(text: str | None, world: int) -> TraceRanks:
    """'0-3,16' -> [0, 1, 2, 3, 16]; 'all' -> "all"; None -> None (the default)."""
    from simulator.errors import ConfigError

    if text is None:
        return None
    if text.strip() == "all":
        return "all"
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
        # checked before the range is built: '0-99999999999999999999' overflowed range()
        for r in (lo, hi):
            if not 0 <= r < world:
                raise ConfigError(f"--trace-ranks: rank {r} is outside 0..{world - 1}")
        out.extend(range(lo, hi + 1))
    return sorted(set(out))


def written_ranks(ctx: TraceContext, selection: TraceRanks) -> dict[int, np.ndarray]:
    """Rank written -> the ranks its files stand for (see module doc)."""
    tl = ctx.result.engine.timeline
    world = ctx.world_size
    symmetric = tl.representative is not None and len(tl.ranks) < world
    if symmetric and (selection is None or selection == "all"):
        return ctx.classes(list(tl.ranks))
    if selection is None:
        chosen = list(range(min(world, DEFAULT_TRACE_RANKS)))
    elif selection == "all":
        chosen = list(range(world))
    else:
        chosen = list(selection)
    return {r: np.array([r]) for r in chosen}


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


def resolved_config_yaml(result: FinishedRun) -> str:
    """The run's config with its automatic choices filled in and explained (comments):
    loading it reruns the same simulation without choosing again."""
    from simulator.choices import Choice, resolved_yaml

    choices = [Choice(**c) for c in result.report.choices]
    return resolved_yaml(result.config.model_dump(mode="json"), result.plan.parameters, choices)


def write_outputs(
    result: FinishedRun,
    out_dir: str | Path,
    trace_ranks: TraceRanks = None,
    *,
    gzip: bool = True,
    chakra: bool = False,
    pictures: bool = True,
) -> list[Path]:
    """Write all output files (module doc); returns their paths."""
    out = make_out_dir(out_dir)
    ctx = TraceContext.from_result(result)
    stands_for = written_ranks(ctx, trace_ranks)
    ranks = list(stands_for)
    suffix = ".gz" if gzip else ""
    paths = [
        _write_json(out / "report.json", result.report.to_json()),
        _write_text(out / "config.resolved.yaml", resolved_config_yaml(result)),
        write_timeline_csv(out / "timeline.csv", (result.engine.timeline.rank(r) for r in ranks)),
        write_links_csv(out / "links.csv", result),
        _write_json(out / "rank_map.json", rank_map(ctx, stands_for)),
        write_chrome_trace(out / f"trace.json{suffix}", ctx, stands_for),
    ]
    paths += write_kineto_traces(out / "kineto", ctx, ranks, gzip=gzip)
    if chakra:
        from simulator.outputs.chakra import write_chakra_traces

        # ASTRA-sim replays every rank: a class's ranks differ in their groups and peers
        every = sorted({int(r) for members in stands_for.values() for r in members})
        paths += write_chakra_traces(out / "chakra", ctx, every)
    if pictures:
        from simulator.outputs.pictures import write_pictures

        paths += write_pictures(out, result, ranks)
    return paths


def rank_map(ctx: TraceContext, stands_for: dict[int, np.ndarray]) -> dict[str, object]:
    """Which ranks each written rank stands for (symmetric mode: its whole class)."""
    from simulator.outputs.versions import stamp

    return stamp(
        {
            "engine_mode": ctx.result.engine.mode,
            "world_size": ctx.world_size,
            "written": [
                {"rank": r, "stands_for": compact_ranks(members), "count": int(members.size)}
                for r, members in stands_for.items()
            ],
        }
    )


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


def write_links_csv(path: Path, result: FinishedRun) -> Path:
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


def chrome_trace_events(
    ctx: TraceContext, stands_for: dict[int, np.ndarray]
) -> Iterator[dict[str, object]]:
    """Perfetto events of the written ranks: kernels per stream and their `handle.wait()`
    arrows, then the collectives' flows."""
    flows = _FlowIndex()
    ids = count(1)
    for rank, members in stands_for.items():
        info = ctx.rank_info(rank)
        streams = stream_ids(info)
        label = f"rank {rank}" + (
            f" (stands for ranks {compact_ranks(members)})" if members.size > 1 else ""
        )
        yield {"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": label}}
        yield {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0,
               "args": {"sort_index": rank}}  # fmt: skip
        for s, tid in streams.items():
            yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid,
                   "args": {"name": f"stream {tid} {s}"}}  # fmt: skip
        tl = info.timeline
        for i in range(len(tl)):
            if tl.kind[i] == "wait":
                continue
            tid = streams[str(tl.stream[i])]
            ev = gpu_event(ctx, info, i, rank, tid, i + 1, i + 1)
            ev["args"]["device"] = rank % ctx.gpus_per_node  # type: ignore[index]
            yield ev
            if tl.kind[i] in COMM_KINDS:
                flows.add(info, i, rank, tid)
        yield from wait_flows(info, rank, streams, ids)
    yield from flows.events(ids)


class _FlowIndex:
    """Members of each collective (and each send/recv pair) among the written ranks."""

    def __init__(self) -> None:
        self.members: dict[tuple[object, ...], list[tuple[int, int, float, bool]]] = {}

    def add(self, info: RankInfo, i: int, rank: int, tid: int) -> None:
        tl = info.timeline
        peer = int(info.peer[i])
        seq = int(info.seq[i])
        if peer >= 0:
            src, dst = (rank, peer) if info.is_send[i] else (peer, rank)
            key: tuple[object, ...] = ("p2p", info.pg_name[i], src, dst, seq)
        else:
            key = ("coll", str(tl.group[i]), info.pg_name[i], seq)
        ts = float(tl.start_s[i]) * 1e6
        self.members.setdefault(key, []).append((rank, tid, ts, bool(info.is_send[i])))

    def events(self, ids: Iterator[int]) -> Iterator[dict[str, object]]:
        for key, members in self.members.items():
            if len(members) < 2:
                continue
            if key[0] == "p2p":
                sends = [m for m in members if m[3]]
                if not sends:
                    continue
                src = sends[0]
                at = max(m[2] for m in members)
                targets = [m for m in members if m is not src]
                name = f"send pg {key[1]} #{key[4]}"
            else:
                src = max(members, key=lambda m: m[2])  # the last to arrive releases the rest
                at = src[2]
                targets = [m for m in members if m is not src]
                name = f"{key[1]} pg {key[2]} #{key[3]}"
            for dst in targets:
                flow_id = next(ids)
                yield {"ph": "s", "cat": "collective", "name": name, "id": flow_id,
                       "pid": src[0], "tid": src[1], "ts": at}  # fmt: skip
                yield {"ph": "f", "bp": "e", "cat": "collective", "name": name, "id": flow_id,
                       "pid": dst[0], "tid": dst[1], "ts": at}  # fmt: skip


def write_chrome_trace(path: Path, ctx: TraceContext, stands_for: dict[int, np.ndarray]) -> Path:
    """The Perfetto trace of the written ranks (module doc), streamed to `path`."""
    from simulator.outputs.versions import stamp

    report = ctx.result.report
    header = stamp(
        {
            "schemaVersion": 1,
            "displayTimeUnit": "ms",
            "deviceProperties": [{"id": 0, "name": report.gpu}],
            "traceName": f"axsim {report.model} on {report.gpus} {report.gpu}",
        }
    )
    header["axsim_ranks"] = {str(r): compact_ranks(m) for r, m in stands_for.items()}
    header["world_size"] = ctx.world_size
    return write_trace_json(path, header, chrome_trace_events(ctx, stands_for))
