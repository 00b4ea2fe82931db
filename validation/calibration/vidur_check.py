"""Does axsim reproduce Vidur's collective benchmarks once calibrated on them?

`reproduce_vidur(csv, calibration, machine)` replays every configuration (workers,
devices per node) of a Vidur network CSV through `simulator.benchmarks.collectives.collective_sweep`
(the engine and the network model, with the calibration's tables) on the machine preset
the benchmark ran on: one group alone, `devices per node` GPUs on each of
workers/devices-per-node nodes (`--per-node`), every measured size (or every `every`-th).
Each row compares the simulated time with the measured one (the lower envelope the
calibrator fitted: min over ranks of the median).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from simulator.benchmarks.collectives import collective_sweep
from simulator.cost.calibration import Calibration
from topologies.catalogue import machine_preset
from topologies.machines import build_machine
from validation.calibration.collectives import read_vidur_csv


@dataclass(frozen=True)
class VidurRow:
    """One size of one configuration: measured vs simulated (seconds)."""

    workers: int
    per_node: int
    bytes: int
    measured_s: float
    simulated_s: float

    @property
    def error(self) -> float:
        return self.simulated_s / self.measured_s - 1.0


def _configs(path: Path) -> dict[int, set[int]]:
    """workers -> devices per node of the CSV's rows."""
    out: dict[int, set[int]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            out.setdefault(int(row["num_workers"]), set()).add(int(row["devices_per_node"]))
    return out


def reproduce_vidur(
    path: str | Path, calibration: Calibration, machine: str, every: int = 1
) -> list[VidurRow]:
    """Simulated vs measured for every configuration and size of one Vidur CSV."""
    p = Path(path)
    sweeps = {(s.key[2], s.key[3]): s for s in read_vidur_csv(p)}
    if machine_preset(machine).gpus_per_node < max(max(v) for v in _configs(p).values()):
        raise ValueError(f"{machine} nodes are smaller than the benchmark's ({p})")
    rows = []
    for workers, per_nodes in sorted(_configs(p).items()):
        for per_node in sorted(per_nodes):
            tier = "intra_node" if workers <= per_node else "inter_node"
            sweep = sweeps[(tier, workers)]
            kind = sweep.key[1]
            points = sweep.points("median")[::every]
            k = min(per_node, workers)
            topo = build_machine(machine, max(1, math.ceil(workers / k)))
            sims = collective_sweep(
                topo, kind, workers, 1, [int(pt.bytes) for pt in points], instances="one",
                calibration=calibration, per_node=k,
            )  # fmt: skip
            rows += [
                VidurRow(workers, k, int(pt.bytes), pt.time_s, sim.time_s)
                for pt, sim in zip(points, sims, strict=True)
            ]
    return rows
