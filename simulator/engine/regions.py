"""Repeated regions of a program: runs of identical consecutive segments.

A program marks repeated bodies as `Segment`s (a microbatch, a 1F1B steady pair, a block
of interleaved pairs); a segment with `repeat` r stands for r copies run back to back. A
*region* is a maximal run of adjacent segments with one key whose compiled bodies are
identical: same ops, same durations and host issue costs, and dependencies that follow the
copy. The engine unrolls a region's copies lazily (simulator/engine/unroll.py) and may
skip the copies in the middle when it proves the run periodic
(simulator/engine/periodic.py).

What "dependencies follow the copy" means, for each dependency of a body op:
- inside the copy: the same offset in every copy;
- before the copy, at most one copy back ("prev"): copy k depends on copy k-1's op at
  that offset (copy 0 on the op before the region that the text names);
- before the region and the same for every copy ("const").
Ops after the region may depend only on its last copy. A region whose text breaks these
rules is no region; a repeated segment (repeat > 1) that forms none is an error, since it
cannot be unrolled into the program it stands for.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.engine.compiled import CompiledProgram
from simulator.errors import EngineError
from workloads.graph import Program, Segment

INSIDE, PREV, CONST = 0, 1, 2


@dataclass(frozen=True)
class Region:
    """Copies of one body: text [start, start + length) is copy 0; the text holds
    `text_copies` copies in [start, stop) standing for `copies` real ones.

    `rules[x]` gives, for each dependency of body op x, (kind, value): INSIDE -> offset in
    the copy; PREV -> (text index of copy 0's dependency, offset in the previous copy);
    CONST -> text index."""

    start: int
    length: int
    stop: int
    copies: int
    rules: tuple[tuple[tuple[int, int, int], ...], ...]

    @property
    def last(self) -> int:
        """Text index of the last text copy."""
        return self.stop - self.length


def _classify(d0: int, start: int, length: int) -> tuple[int, int, int]:
    """The rule of a body dependency d0 when the text shows nothing else."""
    if d0 >= start:
        return (INSIDE, d0 - start, 0)
    if d0 >= start - length:
        return (PREV, d0, d0 - start + length)
    return (CONST, d0, 0)


def _rules(
    cp: CompiledProgram, start: int, length: int, others: list[int]
) -> tuple[tuple[tuple[int, int, int], ...], ...] | None:
    """Dependency rules of the body at `start`, checked against the text copies at
    `others` (their starts); None if a copy does not follow them."""
    out = []
    for x in range(length):
        body = cp.deps[start + x]
        rule = []
        for d0 in body:
            if d0 >= start:
                if any(d0 - start + s not in cp.deps[s + x] for s in others):
                    return None
                rule.append((INSIDE, d0 - start, 0))
                continue
            kinds = set()
            for s in others:
                deps = cp.deps[s + x]
                if d0 + (s - start) in deps:
                    kinds.add(PREV)
                elif d0 in deps:
                    kinds.add(CONST)
                else:
                    return None
            if kinds == {CONST}:
                rule.append((CONST, d0, 0))
            elif not kinds or kinds == {PREV}:
                if d0 < start - length:
                    if kinds:
                        return None  # reaches more than one copy back
                    rule.append((CONST, d0, 0))
                else:
                    rule.append((PREV, d0, d0 - start + length))
            else:
                return None
        out.append(tuple(rule))
    for s in others:  # every copy has exactly the body's number of dependencies
        for x in range(length):
            if len(cp.deps[s + x]) != len(cp.deps[start + x]):
                return None
    return tuple(out)


def _runs(program: Program, cp: CompiledProgram) -> list[list[Segment]]:
    """Maximal runs of adjacent identical segments with one key: ops alike but for their
    dependencies (`CompiledProgram.sig`: fields, hence kind, stream, host cost and
    collective) with the same durations (the overlap stretch is per op)."""
    segs = sorted(program.segments, key=lambda s: s.start)
    runs: list[list[Segment]] = []
    sig, dur = cp.sig, cp.dur_ps
    for seg in segs:
        if seg.stop <= seg.start:
            continue
        if runs:
            run = runs[-1]
            head, prev = run[0], run[-1]
            if (
                seg.key == prev.key
                and seg.start == prev.stop
                and seg.stop - seg.start == head.stop - head.start
                and sig[seg.start : seg.stop] == sig[head.start : head.stop]
                and dur[seg.start : seg.stop] == dur[head.start : head.stop]
            ):
                run.append(seg)
                continue
        runs.append([seg])
    return runs


def _suffix_ok(cp: CompiledProgram, region: Region) -> bool:
    """Ops after the region depend on its last text copy only (or before it)."""
    n = cp.num_ops
    for i in range(region.stop, n):
        for d in cp.deps[i]:
            if region.start <= d < region.last:
                return False
    return True


def find_regions(program: Program, cp: CompiledProgram) -> list[Region]:
    """The program's regions in text order (runs standing for at least two copies)."""
    if any(d >= i for i in range(cp.num_ops) for d in cp.deps[i]):
        _require_no_repeat(program, "it has forward dependencies")
        return []
    out: list[Region] = []
    for run in _runs(program, cp):
        region = _region(cp, run)
        if region is None:
            if any(seg.repeat > 1 for seg in run):
                raise EngineError(
                    f"program '{program.name}': the repeated segment at op {run[0].start} "
                    "cannot be unrolled (its copies' dependencies do not follow the copy)"
                )
            continue
        out.append(region)
    return out


def _region(cp: CompiledProgram, run: list[Segment]) -> Region | None:
    """The region of a run, leaving out leading copies that differ in their dependencies
    (the first microbatch of a program depends on nothing before it)."""
    for drop in range(len(run)):
        if drop and run[drop - 1].repeat > 1:
            return None  # a repeated segment cannot be left out
        segs = run[drop:]
        copies = sum(seg.repeat for seg in segs)
        if copies < 2:
            return None
        first = segs[0]
        length = first.stop - first.start
        rules = _rules(cp, first.start, length, [seg.start for seg in segs[1:]])
        if rules is None:
            continue
        region = Region(first.start, length, segs[-1].stop, copies, rules)
        if _suffix_ok(cp, region):
            return region
    return None


def _require_no_repeat(program: Program, why: str) -> None:
    if program.compressed:
        raise EngineError(f"program '{program.name}' has repeated segments but {why}")
