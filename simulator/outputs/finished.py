"""A finished simulation as the output writers read it.

Why: the writers of `--out` (files.py, trace_context.py and the trace exporters behind
them) read a run's config, topology, plan, engine result and report. The composition
root's `simulator.api.Result` holds exactly these, but api/ imports outputs/ (the report),
so outputs/ names what it reads here and `Result` satisfies it structurally: outputs/
imports nothing of api.py, nor of plan.py (which imports the report's `StagePlan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from simulator.config import ExperimentConfig
    from simulator.engine.core import EngineResult
    from simulator.outputs.report import Report
    from topologies.types import Topology
    from workloads.graph import OpGraph


class FinishedPlan(Protocol):
    """The workload a run simulated (simulator.plan.WorkloadPlan satisfies it)."""

    @property
    def graph(self) -> OpGraph:
        """Every rank's program and the process groups."""
        ...

    @property
    def parameters(self) -> dict[str, object]:
        """The strategy parameters used (a chosen grid, microbatch size...)."""
        ...


class FinishedRun(Protocol):
    """A finished simulation (simulator.api.Result satisfies it)."""

    @property
    def config(self) -> ExperimentConfig: ...

    @property
    def topology(self) -> Topology: ...

    @property
    def plan(self) -> FinishedPlan: ...

    @property
    def engine(self) -> EngineResult: ...

    @property
    def report(self) -> Report: ...
