"""What-if sweeps: simulate the cartesian product of config axes, one row per point.

A spec (YAML) names a base config and axes of dotted config keys:

    base: default                     # the embedded default, a path (relative to the
                                      # spec), or an inline config mapping
    set: {cluster.gpus: 64, model.name: gpt-5b}       # fixed overrides (optional)
    axes:
      cluster.nic_bandwidth_GBps: [12.5, 25, 50]
      parallel.overlap: [[], [oar, ors, oag]]
      cluster.stragglers: [1.0, 1.3]  # a number: rank 0 is that much slower
      "cluster.gpus,model.name": [[512, gpt-5b], [1024, gpt-10b]]   # linked keys

Each point is keyed by the hash of its resolved config (`config_hash`), so a sweep is
resumable: finished rows are appended to `rows.jsonl` one line per row, in one write,
fsync'ed, the moment they finish; a restart skips the hashes already there, and a killed
sweep loses no finished row. The table (`rows.csv` or `rows.parquet`) is rebuilt
atomically from that journal, in spec order, so it never depends on completion order.

Rows hold the axis values (lists as compact JSON), the hash, `status` (ok / error) and
`error` (a failed point is a row, never a crash) and every scalar of the simulate `--json`
report, nested dicts flattened with dots (`comm_time_by_group_s.x`). `wall_time_s` is the
only column that differs between runs of the same point (VOLATILE_COLUMNS).

Executors: in-process (`jobs=1`), local processes (concurrent.futures), or
dask.distributed (an existing scheduler or a LocalCluster; an optional dependency,
imported only when asked for). All give the same rows.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.outputs.files import make_out_dir
from simulator.process import MAX_JOBS_PER_CPU
from simulator.sweep.executors import dask_client, run_dask, run_inline, run_point, run_processes
from simulator.sweep.spec import (
    Axis,
    SweepError,
    SweepPoint,
    SweepSpec,
    check_key,
    config_hash,
    load_spec,
    make_row,
    parse_spec,
    points,
    set_value,
    with_overrides,
)
from simulator.sweep.store import (
    FORMATS,
    JOURNAL,
    VOLATILE_COLUMNS,
    append_row,
    load_journal,
    read_journal,
    sweep_lock,
    table_rows,
    write_table,
)

__all__ = [
    "FORMATS",
    "JOURNAL",
    "VOLATILE_COLUMNS",
    "Axis",
    "SweepError",
    "SweepOutcome",
    "SweepPoint",
    "SweepSpec",
    "check_key",
    "config_hash",
    "load_journal",
    "load_spec",
    "parse_spec",
    "points",
    "read_journal",
    "run_point",
    "run_sweep",
    "set_value",
    "with_overrides",
]

TABLE_REFRESH_S = 2.0
Progress = Callable[[int, int, dict[str, Any] | None], None]
"""progress(rows done, rows in the sweep, the row just finished or None at start)."""


@dataclass(frozen=True)
class SweepOutcome:
    """What a run did: counts, output paths and wall time."""

    points: int
    distinct: int
    already_done: int
    ran: int
    failed: int
    journal: Path
    table: Path
    wall_time_s: float
    damaged: tuple[str, ...] = ()  # journal lines set aside (store.load_journal)
    quarantine: Path | None = None


class _Recorder:
    """Journals finished rows, reports progress and refreshes the table now and then."""

    def __init__(
        self,
        pts: list[SweepPoint],
        done: dict[str, dict[str, Any]],
        table: Path,
        fmt: str,
        journal: Path,
        total: int,
        progress: Progress | None,
    ) -> None:
        self.pts, self.done, self.table, self.fmt = pts, done, table, fmt
        self.journal, self.total, self.progress = journal, total, progress
        self.count, self.failed = len(done), 0
        self.written = time.monotonic()

    def finish(self, point: SweepPoint, status: str, payload: Any) -> None:
        row = make_row(point, status, payload)
        append_row(self.journal, row)
        self.done[point.config_hash] = row
        self.count += 1
        self.failed += status != "ok"
        if self.progress:
            self.progress(self.count, self.total, row)
        if time.monotonic() - self.written > TABLE_REFRESH_S:
            self.write_table()

    def write_table(self) -> None:
        write_table(table_rows(self.pts, self.done), self.table, self.fmt)
        self.written = time.monotonic()


def _check_options(jobs: int, fmt: str, dask_scheduler: str | None, dask_local: int | None) -> None:
    if fmt not in FORMATS:
        raise SweepError(f"--format must be one of {', '.join(FORMATS)}, got '{fmt}'")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise SweepError("--format parquet needs pyarrow: pip install pyarrow") from None
    if jobs < 1 or (dask_local is not None and dask_local < 1):
        raise SweepError("--jobs and --dask-local must be positive")
    cpus = os.cpu_count() or 1
    for flag, n in (("--jobs", jobs), ("--dask-local", dask_local)):
        if n is not None and n > MAX_JOBS_PER_CPU * cpus:
            raise SweepError(
                f"{flag} {n}: more than {MAX_JOBS_PER_CPU}x the {cpus} CPUs of this machine "
                "(each worker is a process); use --dask-scheduler to spread over machines"
            )
    if dask_scheduler and dask_local:
        raise SweepError("give --dask-scheduler or --dask-local, not both")
    if (dask_scheduler or dask_local) and jobs != 1:
        raise SweepError(
            f"--jobs {jobs} starts local processes, but dask runs the points here "
            "(--dask-local/--dask-scheduler): give one of them"
        )


def run_sweep(
    spec: SweepSpec,
    out_dir: str | Path,
    *,
    jobs: int = 1,
    fmt: str = "csv",
    dask_scheduler: str | None = None,
    dask_local: int | None = None,
    dask_processes: bool = True,
    dask_timeout_s: float = 10.0,
    retry_failed: bool = False,
    progress: Progress | None = None,
) -> SweepOutcome:
    """Run every point of `spec` whose config hash is not yet in `out_dir`'s journal.

    Points that do not validate become error rows without being dispatched. The table is
    rebuilt every few seconds while running and once at the end (also after a failure or
    Ctrl-C), always from the journal.
    """
    _check_options(jobs, fmt, dask_scheduler, dask_local)
    t0 = time.perf_counter()
    out = make_out_dir(out_dir)  # a ConfigError naming --out, like every other command
    with sweep_lock(out):
        return _run_locked(
            spec, out, t0, jobs, fmt, dask_scheduler, dask_local, dask_processes,
            dask_timeout_s, retry_failed, progress,
        )  # fmt: skip


def _run_locked(
    spec: SweepSpec,
    out: Path,
    t0: float,
    jobs: int,
    fmt: str,
    dask_scheduler: str | None,
    dask_local: int | None,
    dask_processes: bool,
    dask_timeout_s: float,
    retry_failed: bool,
    progress: Progress | None,
) -> SweepOutcome:
    journal, table = out / JOURNAL, out / f"rows.{fmt}"
    pts = points(spec)
    previous = load_journal(journal, drop_failed=retry_failed)
    done = {r["config_hash"]: r for r in previous.rows}
    first: dict[str, SweepPoint] = {}
    for p in pts:
        first.setdefault(p.config_hash, p)
    todo = [p for h, p in first.items() if h not in done]
    done = {h: r for h, r in done.items() if h in first}  # rows of other specs stay journalled
    rec = _Recorder(pts, done, table, fmt, journal, len(first), progress)
    if progress:
        progress(rec.count, rec.total, None)
    try:
        for p in todo:
            if p.error:
                rec.finish(p, "error", p.error)
        runnable = [p for p in todo if not p.error]
        if runnable:
            if dask_scheduler or dask_local:
                client, cluster = dask_client(
                    dask_scheduler, dask_local, dask_processes, dask_timeout_s
                )
                outcomes = run_dask(runnable, client, cluster)
            elif jobs > 1 and len(runnable) > 1:
                outcomes = run_processes(runnable, jobs)
            else:
                outcomes = run_inline(runnable)
            for p, (status, payload) in outcomes:
                rec.finish(p, status, payload)
    finally:
        rec.write_table()
    return SweepOutcome(
        points=len(pts),
        distinct=len(first),
        already_done=len(first) - len(todo),
        ran=len(todo),
        failed=rec.failed,
        journal=journal,
        table=table,
        wall_time_s=time.perf_counter() - t0,
        damaged=tuple(previous.damaged),
        quarantine=previous.quarantine,
    )
