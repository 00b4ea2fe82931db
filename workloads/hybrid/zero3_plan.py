"""DeepSpeed ZeRO-3's parameter fetch plan: which all-gathers its coordinator issues.

A replay of PartitionedParameterCoordinator (deepspeed/runtime/zero/
partitioned_param_coordinator.py, commit 38327e0) over one forward and backward of the
modules a rank runs, once the trace is complete (steady state):

- `fetch_sub_module`: the module's parameters that are not available and not in flight
  are all-gathered now (one coalesced call); then its in-flight parameters are waited
  for; then, from the queue of parameter uses in trace order, parameters are prefetched
  until `min(max_live - available, prefetch_bucket_size)` elements are on their way
  (at least one: the loop adds before it compares), skipping those available, in one
  coalesced call.
- `release_sub_module`: a parameter is released unless it is persistent (at most
  `param_persistence_threshold` elements: never partitioned away), is used again within
  `max_reuse_distance` elements of the trace ahead, or has been prefetched for a later
  use.

With activation checkpointing the recompute's forward hooks fetch again; the reuse
distance then keeps a recomputed block's parameters for its backward (the default 1e9
elements spans a block), so a checkpointed parameter is gathered twice per step, not
three times. Persistent parameters are all-gathered once after the optimizer step, one
collective per parameter (`_post_step` -> `_allgather_params_coalesced`).

The plan is a pure function so that the memory model reads the same peak of gathered
elements the program emits.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Param:
    """A parameter: its name, elements, whether it is persistent and whether it is 1-D
    (a bias or norm: qgZ reduce-scatters those instead of quantising them)."""

    name: str
    numel: float
    persistent: bool
    vector: bool = False


@dataclass(frozen=True)
class Use:
    """One module use in the trace: the module and whether it runs in backward."""

    module: str
    backward: bool


@dataclass
class StepPlan:
    """What the coordinator does at one trace step: the parameters it all-gathers now
    (and waits for), the earlier all-gathers it waits for, the prefetch it issues, and
    the parameters it releases after the module ran."""

    fetch: tuple[Param, ...] = ()
    wait_for: tuple[int, ...] = ()  # indices of earlier gathers (this plan's numbering)
    prefetch: tuple[Param, ...] = ()
    release: tuple[Param, ...] = ()
    gather_index: int = -1  # the index given to `fetch`'s gather (-1: none)
    prefetch_index: int = -1


@dataclass
class Zero3Plan:
    """The plan of one step (forward + backward) and the peak of gathered elements."""

    steps: list[StepPlan] = field(default_factory=list)
    peak_available: float = 0.0
    gathers: int = 0


def _reuse_kept(
    params: tuple[Param, ...],
    trace: list[Use],
    modules: dict[str, tuple[Param, ...]],
    start: int,
    limit: float,
) -> set[str]:
    """Names among `params` used again within `limit` elements of trace[start:]."""
    kept: set[str] = set()
    names = {p.name for p in params}
    traversed = 0.0
    for use in trace[start:]:
        if traversed >= limit:
            break
        for p in modules[use.module]:
            if p.name in names:
                kept.add(p.name)
            traversed += p.numel
    return kept


def plan_zero3(
    modules: dict[str, tuple[Param, ...]],
    trace: list[Use],
    prefetch_bucket: float,
    max_live: float,
    max_reuse_distance: float,
) -> Zero3Plan:
    """Replay the coordinator over `trace` (module uses in order; `modules` maps a module
    to its parameters)."""
    plan = Zero3Plan()
    available: set[str] = set()
    inflight: dict[str, int] = {}  # param -> gather index
    n_available = 0.0
    queue = deque((i, p) for i, use in enumerate(trace) for p in modules[use.module])
    fetched_for: dict[str, int] = {}  # param -> the latest step it was fetched for
    for step, use in enumerate(trace):
        sp = StepPlan()
        params = modules[use.module]
        # 1. fetch what is neither available nor in flight
        need = tuple(
            p
            for p in params
            if not p.persistent and p.name not in available and p.name not in inflight
        )
        if need:
            sp.fetch, sp.gather_index = need, plan.gathers
            for p in need:
                inflight[p.name] = plan.gathers
            plan.gathers += 1
            n_available += sum(p.numel for p in need)
        # 2. wait for this module's in-flight parameters
        waits = sorted({inflight[p.name] for p in params if p.name in inflight})
        sp.wait_for = tuple(w for w in waits if w != sp.gather_index)
        for p in params:
            if p.name in inflight:
                del inflight[p.name]
                available.add(p.name)
        plan.peak_available = max(plan.peak_available, n_available)
        # 3. pop this step's own uses off the queue, then prefetch ahead
        while queue and queue[0][0] <= step:
            _, p = queue.popleft()
            fetched_for[p.name] = max(fetched_for.get(p.name, -1), step)
        budget = min(max_live - n_available, prefetch_bucket)
        pre: list[Param] = []
        numel = 0.0
        if prefetch_bucket > 0:
            while queue and numel < budget:
                at, p = queue.popleft()
                fetched_for[p.name] = max(fetched_for.get(p.name, -1), at)
                if p.persistent or p.name in available or p.name in inflight or p in pre:
                    continue
                pre.append(p)
                numel += p.numel
        if pre:
            sp.prefetch, sp.prefetch_index = tuple(pre), plan.gathers
            for p in pre:
                inflight[p.name] = plan.gathers
            plan.gathers += 1
            n_available += numel
            plan.peak_available = max(plan.peak_available, n_available)
        # 4. release after the module ran
        candidates = tuple(p for p in params if not p.persistent and p.name in available)
        kept = _reuse_kept(candidates, trace, modules, step + 1, max_reuse_distance)
        # DeepSpeed compares with the step counter already advanced past this module
        rel = tuple(
            p for p in candidates if p.name not in kept and fetched_for.get(p.name, -1) <= step + 1
        )
        for p in rel:
            available.discard(p.name)
            n_available -= p.numel
        sp.release = rel
        plan.steps.append(sp)
    return plan
