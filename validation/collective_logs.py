"""Measured collective timings from benchmark logs: nccl-tests / rccl-tests text and
CSVs shaped like shared/traces/pccl.

Both become `CollectiveSample`s: one collective of `nbytes` (nccl-tests' size: the full
buffer, i.e. the all-gather output and the reduce-scatter input) over `ranks` GPUs on
`nodes` whole-or-equal nodes of a machine, taking `time_s`.

- nccl-tests text (`all_gather_perf` etc., plain or with mpirun's `[1,0]<stdout>:`
  prefixes): the collective from the "Collective test starting" line or the file name,
  ranks and nodes from the "Rank r ... on HOST device" header lines, one sample per data
  row from the out-of-place time. A log cut without those lines still tells its rank
  count through busbw / algbw (nccl-tests' factor: 2(n-1)/n for all-reduce, (n-1)/n for
  all-gather, reduce-scatter and all-to-all); its node count must then be given, unless
  the ranks fit in one node of the machine.
- PCCL-shaped CSV (columns machine, collective, library, gpus, nodes, output_bytes,
  time_ms, source_file): the vendor-library rows (`library` nccl: RCCL on Frontier, NCCL
  on Perlmutter) by default. Its `output_bytes` is printed in MB of 10^6 bytes from a sweep
  of powers of two MiB (all-gather: the output; reduce-scatter: one rank's output), so the
  size is restored to the exact power of two.

`drop_unhealthy` removes points a healthy library cannot produce: a collective more than
twice as slow as a *larger* message of the same job (PCCL: the same log file; a
nccl-tests file is one job). It is what nccl-tests tables are cleaned with; the network
fit and `axsim validate` keep more: `exclusions` applies only documented rules, each
counted, and keeps RCCL's small-step stalls on Frontier (per-rank chunks of 64-256 KiB,
up to 100x slower), which the network model prices as the measured regime of that
library build (simulator/network/regimes.py). Its one rule, CONNECTION_SETUP: the
smallest size of a job's sweep at >= 128 ranks when it is more than twice as slow as a
larger message of the same job. In the PCCL logs that is the first collective every
job times (1 MiB): at 128-1,024 GCDs RCCL takes ~70-160 us per ring step there and
~4-35 us at the next size with the same per-rank chunk (2 KiB at 512 and 1,024 GCDs),
at every rank count from 128 on and in every run, so it is the job's first use of the
communicator's connections, not a property of the size; steady-state training never
pays it.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from topologies.user_files import read_user_bytes, read_user_text
from validation.calibrate_comm import CalibrationError
from workloads.ops import CollectiveKind

MiB = 1 << 20
PCCL_COLUMNS = {"machine", "collective", "library", "gpus", "nodes", "output_bytes", "time_ms"}
UNHEALTHY_FACTOR = 2.0
_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")
_RANK = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device")
_TEST = re.compile(r"Collective test starting:\s*(\w+?)_perf")
_NAMES = {
    "all_reduce": CollectiveKind.ALL_REDUCE,
    "all_gather": CollectiveKind.ALL_GATHER,
    "reduce_scatter": CollectiveKind.REDUCE_SCATTER,
    "alltoall": CollectiveKind.ALL_TO_ALL,
    "all_to_all": CollectiveKind.ALL_TO_ALL,
    "broadcast": CollectiveKind.BROADCAST,
    "reduce": CollectiveKind.REDUCE,
    "sendrecv": CollectiveKind.SEND_RECV,
}


@dataclass(frozen=True)
class CollectiveSample:
    """One measured collective."""

    machine: str
    kind: CollectiveKind
    ranks: int
    nodes: int
    nbytes: float
    time_s: float
    job: str  # the run it came from (file, or file:line for a log with several tests)
    library: str = "nccl"
    build: str = ""  # the library build / environment it was measured with ("": unknown)

    @property
    def per_node(self) -> int:
        return self.ranks // self.nodes


def is_pccl_csv(path: Path) -> bool:
    """A CSV with the PCCL columns (machine, collective, library, gpus, ...)."""
    try:
        with path.open(newline="") as fh:
            header = set(fh.readline().strip().split(","))
    except (OSError, UnicodeDecodeError):
        return False
    return header >= PCCL_COLUMNS


def is_nccl_tests(path: Path) -> bool:
    """A nccl-tests / rccl-tests log: a text whose table header names busbw."""
    try:
        text = read_user_bytes(path).decode(errors="replace")
    except OSError:
        return False
    return "busbw" in text


def read_pccl_csv(path: Path, libraries: Sequence[str] = ("nccl",)) -> list[CollectiveSample]:
    """Samples of a PCCL-shaped CSV (only `libraries` rows)."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CalibrationError(f"{path}: cannot read the CSV ({exc})") from None
    out = []
    for i, row in enumerate(rows, start=2):
        if row.get("library") not in libraries:
            continue
        try:
            kind = _NAMES[row["collective"]]
            ranks, nodes = int(row["gpus"]), int(row["nodes"])
            out_bytes, ms = float(row["output_bytes"]), float(row["time_ms"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{path}: line {i}: missing or bad field ({exc})") from None
        if not (ranks >= 1 and nodes >= 1 and ranks % nodes == 0):
            raise CalibrationError(f"{path}: line {i}: gpus {ranks} and nodes {nodes} disagree")
        if not (out_bytes > 0 and ms > 0 and math.isfinite(ms)):
            raise CalibrationError(f"{path}: line {i}: output_bytes and time_ms must be positive")
        source_file = row.get("source_file", "") or ""
        total = out_bytes * (ranks if kind is CollectiveKind.REDUCE_SCATTER else 1)
        nbytes = float(2 ** round(math.log2(total / 1.048576e6)) * MiB)  # MB of 1e6 -> 2^k MiB
        out.append(
            CollectiveSample(
                machine=row["machine"], kind=kind, ranks=ranks, nodes=nodes, nbytes=nbytes,
                time_s=ms * 1e-3, job=f"{path.name}:{source_file}",
                library=row["library"], build=pccl_build(row["machine"], source_file),
            )
        )  # fmt: skip
    if not out:
        raise CalibrationError(f"{path}: no rows of library {', '.join(libraries)}")
    return out


@cache
def _pccl_builds() -> dict[str, dict[str, str]]:
    """machine -> log folder (or file) -> build, from validation/published/data/pccl_builds.yaml."""
    from validation.published import load_yaml

    raw = load_yaml("pccl_builds")
    return {m: {k: str(v["build"]) for k, v in d.items()} for m, d in raw.items()}


def pccl_build(machine: str, source_file: str) -> str:
    """The library build a PCCL row was measured with, by the log folder it came from
    (validation/published/data/pccl_builds.yaml: read off the logs); "" where unknown."""
    builds = _pccl_builds().get(machine, {})
    parts = source_file.split("/")
    for key in (parts[-2] if len(parts) >= 2 else "", parts[-1]):
        if key in builds:
            return builds[key]
    return ""


def read_vidur_samples(path: Path, machine: str) -> list[CollectiveSample]:
    """Samples of a Vidur collective CSV on `machine`: per (workers, devices per node,
    size) the minimum over ranks of their medians (see calibrate_comm.read_vidur_csv)."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise CalibrationError(f"{path}: cannot read the CSV ({exc})") from None
    best: dict[tuple[str, int, int, int], float] = {}
    for i, row in enumerate(rows, start=2):
        try:
            name = row["collective"]
            workers, per_node = int(row["num_workers"]), int(row["devices_per_node"])
            size, ms = int(row["size"]), float(row[f"time_stats.{name}.median"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CalibrationError(f"{path}: line {i}: missing or bad field ({exc})") from None
        if size <= 0 or not ms > 0 or per_node < 1 or workers % min(per_node, workers):
            raise CalibrationError(f"{path}: line {i}: bad size, time or layout")
        key = (name, workers, per_node, size)
        best[key] = min(best.get(key, math.inf), ms * 1e-3)
    out = []
    for (name, workers, per_node, size), t in sorted(best.items()):
        kind = _NAMES.get(name)
        if kind is None:
            raise CalibrationError(f"{path}: unknown collective '{name}'")
        nodes = max(workers // per_node, 1)
        out.append(CollectiveSample(machine, kind, workers, nodes, float(size), t, str(path)))
    return out


def read_nccl_tests(
    path: Path,
    machine: str,
    ranks: int | None = None,
    nodes: int | None = None,
    kind: CollectiveKind | None = None,
) -> list[CollectiveSample]:
    """Samples of a nccl-tests log on `machine` (ranks / nodes / kind when the log lacks
    them); CalibrationError naming the file for anything missing or malformed."""
    try:
        text = read_user_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"{path}: cannot read ({exc})") from None
    lines = [_PREFIX.sub("", line) for line in text.splitlines()]
    hosts: dict[int, str] = {}
    rows: list[tuple[int, float]] = []
    ratios: list[float] = []
    found_kind = kind
    for n, line in enumerate(lines, start=1):
        if m := _RANK.search(line):
            hosts[int(m.group(1))] = m.group(2)
        elif (m := _TEST.search(line)) and found_kind is None:
            found_kind = _NAMES.get(m.group(1))
        elif line.strip() and not line.lstrip().startswith("#"):
            parsed = _data_row(line)
            if parsed is None:
                continue
            size, t, ratio = parsed
            if t <= 0 or not math.isfinite(t):
                raise CalibrationError(f"{path}: line {n}: time must be positive")
            rows.append((size, t))
            if ratio is not None:
                ratios.append(ratio)
    if not rows:
        raise CalibrationError(f"{path}: no data rows")
    if found_kind is None:
        found_kind = next((k for name, k in _NAMES.items() if path.name.startswith(name)), None)
    if found_kind is None:
        raise CalibrationError(f"{path}: cannot tell the collective (give --op)")
    p = ranks or len(hosts) or _ranks_from_busbw(found_kind, ratios)
    nn = nodes or (len(set(hosts.values())) if hosts else None)
    if nn is None and p is not None and p <= _gpus_per_node(machine):
        nn = 1
    if p is None or nn is None:
        raise CalibrationError(
            f"{path}: no 'Rank ... on HOST' header lines (give --log-ranks and --log-nodes)"
        )
    if p % nn:
        raise CalibrationError(f"{path}: {p} ranks do not spread evenly over {nn} nodes")
    return [
        CollectiveSample(machine, found_kind, p, nn, float(size), t, str(path))
        for size, t in rows
        if size > 0
    ]


def _data_row(line: str) -> tuple[int, float, float | None] | None:
    """(size, out-of-place time in s, busbw / algbw) of a table row, None for other lines
    (the ratio is None where algbw is too small to tell it)."""
    parts = line.split()
    if len(parts) < 8 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    try:
        t, alg, bus = float(parts[5]) * 1e-6, float(parts[6]), float(parts[7])
    except ValueError:
        return None
    return int(parts[0]), t, (bus / alg if alg >= 1.0 else None)


def _ranks_from_busbw(kind: CollectiveKind, ratios: list[float]) -> int | None:
    """The rank count nccl-tests' bus factor implies (median ratio over the rows)."""
    if not ratios:
        return None
    r = sorted(ratios)[len(ratios) // 2]
    if kind is CollectiveKind.ALL_REDUCE and r < 2:
        return round(2 / (2 - r))
    if (
        kind
        in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_TO_ALL)
        and r < 1
    ):
        return round(1 / (1 - r))
    return None


def _gpus_per_node(machine: str) -> int:
    from topologies.catalogue import machine_preset

    return machine_preset(machine).gpus_per_node


CONNECTION_SETUP = "connection-setup"
CONNECTION_SETUP_RANKS = 128
EXCLUSION_RULES = {
    CONNECTION_SETUP: (
        "the smallest size of a job's sweep at >= 128 ranks, more than 2x slower than a "
        "larger message of the same job (the job's first collective: connection setup)"
    ),
}


def exclusions(
    samples: Sequence[CollectiveSample], factor: float = UNHEALTHY_FACTOR
) -> tuple[list[CollectiveSample], dict[str, list[CollectiveSample]]]:
    """(kept, excluded by rule name): the documented rules of EXCLUSION_RULES, nothing
    else (see the module doc). Order is kept."""
    jobs: dict[tuple[str, CollectiveKind, int, str], list[CollectiveSample]] = defaultdict(list)
    for s in samples:
        jobs[(s.job, s.kind, s.ranks, s.machine)].append(s)
    out: dict[str, list[CollectiveSample]] = {CONNECTION_SETUP: []}
    flagged: set[int] = set()
    for group in jobs.values():
        if group[0].ranks < CONNECTION_SETUP_RANKS or len(group) < 2:
            continue
        first = min(group, key=lambda s: s.nbytes)
        larger = min(s.time_s for s in group if s.nbytes > first.nbytes)
        if first.time_s > factor * larger:
            flagged.add(id(first))
    kept: list[CollectiveSample] = []
    for s in samples:
        (out[CONNECTION_SETUP] if id(s) in flagged else kept).append(s)
    return kept, out


def drop_unhealthy(
    samples: Iterable[CollectiveSample], factor: float = UNHEALTHY_FACTOR
) -> tuple[list[CollectiveSample], list[CollectiveSample]]:
    """(kept, dropped): dropped are more than `factor` x slower than a larger message of
    the same job, collective and group (see module doc)."""
    jobs: dict[tuple[str, CollectiveKind, int, str], list[CollectiveSample]] = defaultdict(list)
    for s in samples:
        jobs[(s.job, s.kind, s.ranks, s.machine)].append(s)
    kept: list[CollectiveSample] = []
    dropped: list[CollectiveSample] = []
    for group in jobs.values():
        group.sort(key=lambda s: s.nbytes)
        fastest_after = math.inf
        flags = []
        for s in reversed(group):
            flags.append(s.time_s > factor * fastest_after)
            fastest_after = min(fastest_after, s.time_s)
        for s, bad in zip(reversed(group), flags, strict=True):
            (dropped if bad else kept).append(s)
    order = {id(s): i for i, s in enumerate(samples if isinstance(samples, list) else [])}
    if order:
        kept.sort(key=lambda s: order[id(s)])
        dropped.sort(key=lambda s: order[id(s)])
    return kept, dropped
