"""Pipeline schedules: the order of forward and backward passes on each stage.

`one_f_one_b` is PipeDream-Flush / Megatron's non-interleaved schedule: stage s runs
min(p - s - 1, m) warm-up forwards, then alternates one forward and one backward, then
drains the remaining backwards. `interleaved` is Megatron's interleaved 1F1B with v model
chunks per rank (Narayanan et al. 2021, `forward_backward_pipelining_with_interleaving`):
microbatches advance in groups of p through the chunks, warm-up is
(p - s - 1)·2 + (v - 1)·p forwards (all of them when m = p), then 1F1B, then cool-down.

A schedule is a list of `Pass` per stage; the steady-state (forward, backward) pairs are
marked so generators can declare them as repeated segments. `steady_units` cuts the
steady phase into the units that repeat: one pair for 1F1B, p·v pairs for the
interleaved schedule (pair k + p·v runs the same chunks as pair k, microbatches p later).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.errors import WorkloadError


@dataclass(frozen=True)
class Pass:
    """One forward ('F') or backward ('B') of model chunk `chunk` on microbatch `mb`.
    `steady` marks the passes of the 1F1B phase (a forward and the backward after it)."""

    kind: str
    chunk: int
    mb: int
    steady: bool = False


def _fwd_id(k: int, p: int, v: int) -> tuple[int, int]:
    """(chunk, microbatch) of the k-th forward of a rank in the interleaved order."""
    group, within = divmod(k, p * v)
    return (within // p, group * p + within % p)


def _bwd_id(k: int, p: int, v: int) -> tuple[int, int]:
    chunk, mb = _fwd_id(k, p, v)
    return (v - 1 - chunk, mb)


def warmup_passes(p: int, m: int, v: int, stage: int) -> int:
    """Forwards `stage` runs before its first backward (the schedules' warm-up)."""
    if v == 1:
        return min(p - stage - 1, m)
    if m % p:
        raise WorkloadError(
            f"the interleaved schedule needs the microbatch count ({m}) divisible by the "
            f"pipeline size ({p})"
        )
    total = m * v
    return total if m == p else min((p - stage - 1) * 2 + (v - 1) * p, total)


def one_f_one_b(p: int, m: int, stage: int) -> list[Pass]:
    """The 1F1B order of `stage` for p stages and m microbatches."""
    warmup = warmup_passes(p, m, 1, stage)
    out = [Pass("F", 0, i) for i in range(warmup)]
    for i in range(m - warmup):
        out += [Pass("F", 0, warmup + i, True), Pass("B", 0, i, True)]
    out += [Pass("B", 0, i) for i in range(m - warmup, m)]
    return out


def interleaved(p: int, m: int, v: int, stage: int) -> list[Pass]:
    """Megatron's interleaved 1F1B order of `stage` (v chunks; m divisible by p)."""
    total = m * v
    warmup = warmup_passes(p, m, v, stage)
    out = [Pass("F", *_fwd_id(k, p, v)) for k in range(warmup)]
    for k in range(total - warmup):
        out.append(Pass("F", *_fwd_id(k + warmup, p, v), steady=True))
        out.append(Pass("B", *_bwd_id(k, p, v), steady=True))
    out += [Pass("B", *_bwd_id(k, p, v)) for k in range(total - warmup, total)]
    return out


def schedule(p: int, m: int, v: int, stage: int) -> list[Pass]:
    """The schedule of `stage`: 1F1B for v = 1, interleaved otherwise."""
    if v == 1:
        return one_f_one_b(p, m, stage)
    return interleaved(p, m, v, stage)


def steady_units(passes: list[Pass], p: int, v: int) -> list[tuple[int, int]]:
    """Pass index ranges [a, b) of the steady phase's repeating units, in order (the last
    one may be shorter)."""
    steady = [i for i, ps in enumerate(passes) if ps.steady]
    if not steady:
        return []
    first, stop = steady[0], steady[-1] + 1
    width = 2 * (p * v if v > 1 else 1)
    return [(a, min(a + width, stop)) for a in range(first, stop, width)]


def in_flight(p: int, m: int, v: int, stage: int) -> int:
    """Most chunk-microbatches whose activations `stage` holds at once (forwards done,
    backwards not yet), which sizes its activation memory.

    Closed form of replaying `schedule` (a test checks they agree): the warm-up forwards,
    plus the first steady forward before its backward. Why not replay: memory is asked
    for every candidate microbatch size, and a 2^30-token batch of short sequences has
    millions of microbatches per replica (a replay cost minutes and gigabytes).
    """
    total = m * v
    warmup = warmup_passes(p, m, v, stage)
    return warmup + 1 if total > warmup else total
