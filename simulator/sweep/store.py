"""Sweep storage: the append-only journal (`rows.jsonl`) and the table built from it.

The journal is the source of truth: one JSON line per finished row, written with one
`write` on an O_APPEND descriptor and fsync'ed, so a kill loses at most the row being
written. A damaged journal (a torn last line, bytes that are not UTF-8, a line that is
not a row) never stops a sweep: the next read sets such lines aside in
`rows.damaged.jsonl`, says so, and keeps every good row. The table (CSV, or Parquet
when pyarrow is installed) is always rewritten whole, to a temporary file renamed over
the old one, so readers never see half a table.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.atomic import atomic_write_bytes
from simulator.sweep.spec import SweepError, SweepPoint

JOURNAL = "rows.jsonl"
LOCK = "rows.lock"  # held (flock) by the sweep writing the folder; the kernel frees it
DAMAGED = "rows.damaged.jsonl"  # journal lines that were not rows, kept for inspection
LEAD_COLUMNS = ("config_hash", "status", "error")
VOLATILE_COLUMNS = ("wall_time_s",)
FORMATS = ("csv", "parquet")


@contextmanager
def sweep_lock(out: Path) -> Iterator[None]:
    """Hold the folder's lock while a sweep reads and writes its journal: a second sweep
    on the same --out is refused (two sweeps both computed everything, and a
    `--retry-failed` rewriting the journal of a running sweep dropped 8 of its 20
    finished rows). An advisory flock, released by the kernel when the process ends, so a
    killed sweep leaves no stale lock."""
    path = out / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise SweepError(f"--out {out}: cannot create {LOCK} ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise SweepError(
            f"--out {out}: another sweep (pid {holder}) is writing this folder; wait for it "
            "to finish or choose another folder"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def flatten(report: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalars of a report, nested mappings flattened with dots; lists dropped."""
    out: dict[str, Any] = {}
    for k, v in report.items():
        name = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten(v, name + "."))
        elif v is None or isinstance(v, bool | int | float | str):
            out[name] = v
    return out


@dataclass(frozen=True)
class JournalRead:
    """The rows of a journal and the damaged lines set aside while reading it."""

    rows: list[dict[str, Any]]
    damaged: list[str]  # one description per quarantined line ("line 4: not UTF-8")
    quarantine: Path | None  # where the damaged lines' bytes went (None: none damaged)


def _parse_row(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    """A journal line as a row, or None and why it is not one."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8"
    try:
        row = json.loads(text)
    except RecursionError:
        return None, "JSON nested too deeply"
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg})"
    if not isinstance(row, dict):
        return None, f"a JSON {type(row).__name__}, not a row object"
    if not isinstance(row.get("config_hash"), str) or not isinstance(row.get("status"), str):
        return None, "a row without a text config_hash and status"
    return row, ""


def load_journal(path: Path, drop_failed: bool = False) -> JournalRead:
    """Rows already finished; a damaged journal never stops a sweep.

    Lines that are not a row (a torn last line from a kill mid-write, bytes that are not
    UTF-8, JSON that is not a row object or lacks its config_hash) are appended, bytes
    unchanged, to `rows.damaged.jsonl` beside the journal and named in `damaged`; the
    journal is rewritten atomically with the good rows only, so no good row is lost and
    the next run does not meet the same damage. With `drop_failed`, error rows are
    dropped too (recomputed), not quarantined.
    """
    if path.exists() and not path.is_file():
        raise SweepError(f"{path}: the sweep journal is not a file")
    if not path.is_file():
        return JournalRead([], [], None)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SweepError(f"{path}: cannot read the sweep journal ({exc.strerror})") from None
    rows: list[dict[str, Any]] = []
    damaged: list[str] = []
    bad: list[bytes] = []
    rewrite = False
    pieces = data.split(b"\n")
    for number, raw in enumerate(pieces, start=1):
        if not raw.strip():  # blank lines are dropped (the last piece ends the file)
            rewrite = rewrite or number < len(pieces) or bool(raw)
            continue
        row, problem = _parse_row(raw)
        if row is None:
            damaged.append(f"line {number}: {problem}")
            bad.append(raw)
            continue
        if drop_failed and row["status"] != "ok":
            rewrite = True
            continue
        rows.append(row)
    quarantine = None
    if bad:
        quarantine = path.with_name(DAMAGED)
        _append_bytes(quarantine, b"".join(line + b"\n" for line in bad))
    if bad or rewrite:
        _atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return JournalRead(rows, damaged, quarantine)


def read_journal(path: Path, drop_failed: bool = False) -> list[dict[str, Any]]:
    """The good rows of a journal (see load_journal, which also reports the damage)."""
    return load_journal(path, drop_failed).rows


def _append_bytes(path: Path, payload: bytes) -> None:
    try:
        with path.open("ab") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as exc:
        raise SweepError(
            f"{path}: cannot set damaged journal lines aside ({exc.strerror})"
        ) from None


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row in one write on an O_APPEND descriptor, then fsync."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(row) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise SweepError(f"{path}: cannot append to the sweep journal ({exc.strerror})") from None


def _atomic_write(path: Path, payload: bytes) -> None:
    """simulator/atomic.py's write (fsync'ed, a unique temporary name: two writers never
    share one), with the sweep's one-line error."""
    try:
        atomic_write_bytes(path, payload)
    except OSError as exc:
        raise SweepError(f"{path}: cannot write ({exc.strerror})") from None


def table_rows(
    spec_points: Sequence[SweepPoint], done: Mapping[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Finished rows in spec order (duplicate configs once)."""
    seen: set[str] = set()
    out = []
    for p in spec_points:
        if p.config_hash in done and p.config_hash not in seen:
            seen.add(p.config_hash)
            out.append(done[p.config_hash])
    return out


def write_table(rows: Sequence[Mapping[str, Any]], path: Path, fmt: str) -> None:
    """Write the table atomically (columns: union in first-seen order)."""
    cols: dict[str, None] = dict.fromkeys(LEAD_COLUMNS)
    for r in rows:
        cols.update(dict.fromkeys(r))
    names = list(cols)
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        columns = {c: _arrow_column([r.get(c) for r in rows], pa) for c in names}
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            pq.write_table(pa.table(columns), tmp)
            os.replace(tmp, path)
        except OSError as exc:
            raise SweepError(f"{path}: cannot write ({exc.strerror})") from None
        return
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=names, restval="", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    _atomic_write(path, buf.getvalue().encode())


def _arrow_column(values: list[Any], pa: Any) -> Any:
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} and float in kinds:
        values = [None if v is None else float(v) for v in values]
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values])
