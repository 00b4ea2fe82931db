"""The registry of parallel strategies: their parameter models and degree checks.

Each strategy contributes a pydantic parameter model (discriminated by `strategy`) and a
workload builder. `ParallelConfig` is the union the experiment config validates against.
"""

from __future__ import annotations

from workloads.axonn.params import AxonnParallel
from workloads.errors import WorkloadError

ParallelConfig = AxonnParallel

STRATEGY_NAMES: tuple[str, ...] = ("axonn",)


def parallel_degrees(params: ParallelConfig, gpus: int) -> dict[str, int]:
    """Check the strategy's degrees against the GPU count; return them by name."""
    if isinstance(params, AxonnParallel):
        if params.grid is None:
            return {"pipeline": params.pipeline}
        g = params.grid
        total = g.size * params.pipeline
        if total != gpus:
            raise WorkloadError(
                f"parallel.grid: X*Y*Z*data*pipeline = {g.x}*{g.y}*{g.z}*{g.data}*{params.pipeline} = {total} "
                f"does not equal the {gpus} GPUs of the cluster"
            )
        return {"x": g.x, "y": g.y, "z": g.z, "data": g.data, "pipeline": params.pipeline}
    raise WorkloadError(f"unknown strategy {params!r}")
