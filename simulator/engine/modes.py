"""Engine modes: which ranks are simulated and how collectives rendezvous.

`full`: every rank is simulated; a collective on one group instance waits for all of its
members and activates that one instance in the network.

`symmetric`: one representative per rank class is simulated. A class's members are
interchangeable, so when the representative reaches a collective every member of every
instance with the same class signature has reached it too: the collective waits for the
representatives of the classes in the signature and activates all those instances at once
(that is how one collective is priced over all of its concurrent group instances).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from simulator.errors import EngineError
from topologies.rows import unique_rows
from workloads.graph import OpGraph
from workloads.ops import RecvOp, SendOp

MODES = ("auto", "full", "symmetric")


@dataclass(frozen=True, eq=False)
class GroupView:
    """Rendezvous data of one group kind under a mode."""

    key_of_rank: np.ndarray  # per rank: rendezvous key component (-1 if not a member)
    expected: np.ndarray  # per key component: arrivals to wait for
    rows: tuple[np.ndarray, ...]  # per key component: instance rows to activate
    members: np.ndarray  # the group kind's member table
    position_of: np.ndarray  # per rank: position in its instance


@dataclass(frozen=True, eq=False)
class RankView:
    """The simulated ranks of a run and how every rank maps onto them."""

    mode: str
    reps: np.ndarray
    representative: np.ndarray
    groups: dict[str, GroupView]
    reason: str = ""  # why this mode (what `auto` saw, or that it was configured)
    refined: bool = False  # symmetric on classes colour refinement found (refine.py)


def full_view(graph: OpGraph) -> RankView:
    """Every rank simulated; one rendezvous per group instance."""
    views: dict[str, GroupView] = {}
    for name, kind in graph.groups.items():
        n = kind.num_instances
        views[name] = GroupView(
            key_of_rank=kind.instance_of,
            expected=np.full(n, kind.size, dtype=np.int64),
            rows=tuple(np.array([i], dtype=np.int64) for i in range(n)),
            members=kind.members,
            position_of=kind.position_of,
        )
    ranks = np.arange(graph.world_size, dtype=np.int64)
    return RankView("full", ranks, ranks.copy(), views)


def symmetric_problem(graph: OpGraph) -> str | None:
    """Why symmetric mode is not valid for this graph, or None if it is."""
    rc = graph.rank_class
    if rc is None:
        return "the workload declares no rank classes"
    p2p_groups = {
        op.group: op.peer for p in graph.programs for op in p.ops if isinstance(op, SendOp | RecvOp)
    }
    if (rc == rc[0]).all() and not p2p_groups:
        return None  # one class and no send/recv: every group instance looks alike
    for name, kind in graph.groups.items():
        cls = rc[kind.members]
        first, sig_id = unique_rows(cls)
        sig_rows = cls[first]
        both = np.stack([cls.ravel(), np.repeat(sig_id, kind.size)], axis=1)
        pairs = both[unique_rows(both)[0]]
        classes, counts = np.unique(pairs[:, 0], return_counts=True)
        if (counts > 1).any():
            c = int(classes[np.argmax(counts > 1)])
            return f"rank class {c} sits in '{name}' groups of different class make-up"
        if name in p2p_groups:
            for c in np.unique(cls):
                positions = np.unique(np.nonzero(cls == c)[1])
                if positions.size > 1:
                    return f"rank class {int(c)} occupies several positions of '{name}' groups used for send/recv"
            for row in sig_rows:
                if len(set(row.tolist())) != row.size:
                    return f"send/recv inside one rank class of group '{name}' cannot be represented symmetrically"
    return None


def symmetric_view(graph: OpGraph, checked: bool = False) -> RankView:
    """One representative (the lowest rank) per class; `checked`: the caller has found
    no `symmetric_problem` already (the check sorts every group's instances)."""
    problem = None if checked else symmetric_problem(graph)
    if problem is not None:
        raise EngineError(f"symmetric mode is not valid here: {problem}")
    rc = graph.rank_class
    assert rc is not None
    _classes, first = np.unique(rc, return_index=True)
    reps = np.sort(first.astype(np.int64))
    rep_of_class = {int(rc[r]): int(r) for r in reps}
    representative = np.array([rep_of_class[int(c)] for c in rc], dtype=np.int64)
    views: dict[str, GroupView] = {}
    single = bool((rc == rc[0]).all())
    for name, kind in graph.groups.items():
        cls = rc[kind.members]
        if single:  # one signature: skip the row-wise unique over every instance
            sig_rows, sig_id = cls[:1], np.zeros(cls.shape[0], dtype=np.int64)
        else:
            first, sig_id = unique_rows(cls)
            sig_rows = cls[first]
        key_of_rank = np.full(graph.world_size, -1, dtype=np.int64)
        inst = kind.instance_of
        member = inst >= 0
        key_of_rank[member] = sig_id[inst[member]]
        expected = np.array([len(set(row.tolist())) for row in sig_rows], dtype=np.int64)
        rows = tuple(np.flatnonzero(sig_id == s).astype(np.int64) for s in range(sig_rows.shape[0]))
        views[name] = GroupView(key_of_rank, expected, rows, kind.members, kind.position_of)
    return RankView("symmetric", reps, representative, views)


MAX_CLASS_SHARE = 0.5
"""`auto` takes a refined view only when its classes are at most this share of the ranks.
Why: a view with a class for nearly every rank simulates nearly every rank anyway, and
then the full mode, the literal oracle, costs about as much; at half the ranks the
refined view already halves the simulated ranks and aggregates the network's work."""


def choose_view(
    graph: OpGraph,
    mode: str,
    differences: str = "",
    refine: Callable[[], np.ndarray] | None = None,
) -> tuple[RankView, OpGraph]:
    """The RankView for a mode and the graph whose classes it uses; `auto` picks the
    symmetric mode when it is valid (the view's `reason` says why, for the report's list
    of automatic choices).

    `differences` names what makes some ranks differ (stragglers, GPU types; "" when
    none). Then, or when the workload's classes are not valid for the symmetric mode,
    the symmetric mode runs on the classes `refine()` gives (simulator/engine/refine.py)
    if they are valid, and `auto` takes them when they collapse the ranks enough
    (`MAX_CLASS_SHARE`).
    """
    if mode not in MODES:
        raise EngineError(f"unknown engine mode '{mode}' (use {', '.join(MODES)})")
    if mode == "full":
        return replace(full_view(graph), reason="engine.mode=full, as configured"), graph
    problem = "some ranks differ" if differences else symmetric_problem(graph)
    if problem is None:
        view = symmetric_view(graph, checked=True)
        if mode == "symmetric":
            return replace(view, reason="engine.mode=symmetric, as configured"), graph
        return replace(
            view,
            reason=f"auto: the {graph.world_size:,} ranks form {view.reps.size:,} class"
            f"{'es' if view.reps.size > 1 else ''} of interchangeable ranks, one simulated per class",
        ), graph
    why = differences or problem
    refined = None if refine is None else replace(graph, rank_class=refine())
    rproblem = "no refinement was given" if refined is None else symmetric_problem(refined)
    if refined is None or rproblem is not None:
        if mode == "symmetric":
            raise EngineError(f"symmetric mode is not valid here: {why}; refined: {rproblem}")
        return replace(
            full_view(graph), reason=f"auto: symmetric is not valid ({why}; refined: {rproblem})"
        ), graph
    view = symmetric_view(refined, checked=True)
    k, n = view.reps.size, graph.world_size
    told = (
        f"{why}: colour refinement over every group kind splits the {n:,} ranks into "
        f"{k:,} class{'es' if k > 1 else ''} of interchangeable ranks, one simulated per class"
    )
    view = replace(view, refined=True)
    if mode == "symmetric":
        return replace(view, reason=f"engine.mode=symmetric, as configured ({told})"), refined
    if k > MAX_CLASS_SHARE * n:
        return replace(
            full_view(graph),
            reason=f"auto: {told}, more than {MAX_CLASS_SHARE:.0%} of the ranks: every rank simulated",
        ), graph
    return replace(view, reason=f"auto: {told}"), refined
