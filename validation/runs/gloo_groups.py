"""Which process group each gloo worker thread serves, when the parser could not tell.

Why: gloo on CPU records a collective's real duration on one of its process group's
worker threads, with no group name. The parser anchors a thread only when one of its
collectives has a group size that a single one of the rank's groups has; torch4d's X and
Y groups both have two members and its Z and data groups often one, so their threads stay
anonymous ("gloo:tid<N>"), and calibration and comparison need the members.

Evidence, per thread (all its collectives):
- a *signature*: the (kind, bytes) of the collectives each group issues per step, when the
  program of the run is known (torch4d's run.json): a thread scores +1 per collective
  whose signature its candidate group has and -1 per one it lacks;
- a group size inferred from a c10d op's dims (all-gather/reduce-scatter): +1 if the
  candidate group has that size, -1 otherwise;
- creation order: ProcessGroupGloo starts `THREADS_PER_GROUP` worker threads per group
  when the group is created, groups are created in pg_config order and thread ids grow, so
  threads sorted by id map to the rank's groups in pg_config order (non-decreasing); a
  group that gets a thread count other than THREADS_PER_GROUP costs a small penalty.
The assignment maximising the total score under the order constraint is found by dynamic
programming. Limits: a thread-id wrap-around (pid_max) breaks the order; a group with no
collective at all is invisible, which the order constraint tolerates.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from validation.trace.comm import ProcessGroup
from validation.trace.model import ParsedTrace

THREADS_PER_GROUP = 2
COUNT_PENALTY = 0.5
Signature = Mapping[str, Counter[tuple[str, int]]]
"""Per group description (pg_desc): how often each (kind, bytes) occurs in one step."""


@dataclass(frozen=True)
class ThreadEvidence:
    """The collectives seen on one worker thread: (kind, bytes) and inferred group sizes."""

    tid: int
    kinds_bytes: tuple[tuple[str, int], ...]
    sizes: tuple[int, ...]


def _tid(stream: str) -> int | None:
    if stream.startswith("gloo:tid"):
        tail = stream.removeprefix("gloo:tid")
        return int(tail) if tail.isdigit() else None
    return None


def thread_evidence(trace: ParsedTrace) -> list[ThreadEvidence]:
    """Anonymous gloo worker threads of one rank with their collectives, by thread id."""
    tl = trace.timeline
    by_tid: dict[int, list[tuple[str, int, int]]] = {}
    for c in trace.collectives:
        tid = _tid(str(tl.stream[c.index]))
        if tid is None:
            continue
        inferred = c.group_size if c.group_size_source == "inferred_from_c10d_dims" else 0
        by_tid.setdefault(tid, []).append((c.kind, int(c.bytes), inferred))
    return [
        ThreadEvidence(tid, tuple((k, b) for k, b, _ in rows), tuple(s for _, _, s in rows if s))
        for tid, rows in sorted(by_tid.items())
    ]


def _score(ev: ThreadEvidence, pg: ProcessGroup, signature: Signature | None) -> float:
    score = float(sum(1 if s == pg.size else -1 for s in ev.sizes))
    if signature is not None:
        sig = signature.get(pg.desc, Counter())
        score += sum(1 if kb in sig else -1 for kb in ev.kinds_bytes)
    return score


def assign_threads(
    threads: Sequence[ThreadEvidence],
    groups: Sequence[ProcessGroup],
    signature: Signature | None = None,
) -> dict[int, ProcessGroup]:
    """Thread id -> group: the best-scoring assignment that keeps creation order."""
    n, m = len(threads), len(groups)
    if n == 0 or m == 0:
        return {}
    score = [[_score(t, g, signature) for g in groups] for t in threads]
    neg = float("-inf")
    # best[i][g][c]: threads 0..i assigned, thread i on group g, c threads on g so far
    cap = max(n, THREADS_PER_GROUP) + 1
    best = [[[neg] * cap for _ in range(m)] for _ in range(n)]
    back: dict[tuple[int, int, int], tuple[int, int]] = {}
    for g in range(m):
        best[0][g][1] = score[0][g]
    for i in range(1, n):
        for g in range(m):
            for c in range(1, cap):
                prev = best[i - 1][g][c - 1] if c > 1 else neg
                arg = (g, c - 1)
                if c == 1:
                    for g0 in range(g):
                        for c0 in range(1, cap):
                            v = best[i - 1][g0][c0] - COUNT_PENALTY * abs(c0 - THREADS_PER_GROUP)
                            if v > prev:
                                prev, arg = v, (g0, c0)
                if prev > neg:
                    best[i][g][c] = prev + score[i][g]
                    back[(i, g, c)] = arg
    final = max(
        ((best[n - 1][g][c] - COUNT_PENALTY * abs(c - THREADS_PER_GROUP), g, c)
         for g in range(m) for c in range(1, cap) if best[n - 1][g][c] > neg),
    )  # fmt: skip
    _, g, c = final
    out: dict[int, ProcessGroup] = {}
    for i in range(n - 1, -1, -1):
        out[threads[i].tid] = groups[g]
        if i:
            g, c = back[(i, g, c)]
    return out


def member_groups(trace: ParsedTrace) -> list[ProcessGroup]:
    """This rank's process groups, in pg_config (creation) order."""
    rank = trace.info.rank
    return [pg for pg in trace.info.process_groups if not pg.ranks or rank in pg.ranks]


def resolve_threads(
    trace: ParsedTrace, signature: Signature | None = None
) -> dict[str, ProcessGroup]:
    """Timeline stream label ("gloo:tid<N>") -> process group, for anonymous gloo threads."""
    threads = thread_evidence(trace)
    chosen = assign_threads(threads, member_groups(trace), signature)
    return {f"gloo:tid{tid}": pg for tid, pg in chosen.items()}
