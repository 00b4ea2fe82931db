"""Sweep storage: the append-only journal (`rows.jsonl`) and the table built from it.

The journal is the source of truth: one JSON line per finished row, written with one
`write` on an O_APPEND descriptor and fsync'ed, so a kill loses at most the row being
written (a torn last line is dropped on the next read). The table (CSV, or Parquet
when pyarrow is installed) is always rewritten whole, to a temporary file renamed over
the old one, so readers never see half a table.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from simulator.sweep.spec import SweepPoint

JOURNAL = "rows.jsonl"
LEAD_COLUMNS = ("config_hash", "status", "error")
VOLATILE_COLUMNS = ("wall_time_s",)
FORMATS = ("csv", "parquet")


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


def read_journal(path: Path, drop_failed: bool = False) -> list[dict[str, Any]]:
    """Rows already finished. A torn last line (a kill mid-write) or, with
    `drop_failed`, error rows are removed and the journal rewritten atomically."""
    if not path.is_file():
        return []
    rows, bad = [], False
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad = True
            continue
        if drop_failed and row.get("status") != "ok":
            bad = True
            continue
        rows.append(row)
    if bad:
        _atomic_write(path, "".join(json.dumps(r) + "\n" for r in rows).encode())
    return rows


def append_row(path: Path, row: Mapping[str, Any]) -> None:
    """Append one row in one write on an O_APPEND descriptor, then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(row) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(payload)
    os.replace(tmp, path)


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
        pq.write_table(pa.table(columns), tmp)
        os.replace(tmp, path)
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
