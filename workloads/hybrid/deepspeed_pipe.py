"""DeepSpeed's PipelineEngine: its TrainSchedule and blocking point-to-point transfers.

Where it differs from Megatron's 1F1B (deepspeed/runtime/pipe/schedule.py TrainSchedule,
engine.py, p2p.py, commit 38327e0): every stage runs 2 (m + p - 1) lock-step steps; at
step t stage s runs the forward of microbatch (t - s) / 2 when t and s have the same
parity, else the backward of microbatch (t + s + 1 - 2p) / 2 (when that microbatch
exists). A step first moves tensors, then computes: a forward step sends the input
gradient of the previous step's backward to stage s - 1 (SendGrad) and receives its own
input (RecvActivation); a backward step receives its output gradient (RecvGrad) and
sends the previous step's forward output to stage s + 1 (SendActivation). Sends and
receives are blocking (`p2p.send` / `p2p.recv` wait for the transfer), so a send of
step t meets its receive in the neighbour's step t. The gradients are reduced and the
optimizer runs after the last step (ReduceTiedGrads, ReduceGrads, OptimizerStep), not
overlapped with the backward.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    """One TrainSchedule step of a stage: what it transfers and computes.

    send_grad / recv_act / recv_grad / send_act: the microbatch moved (-1: none);
    kind: 'F', 'B' or '' (an idle step); mb: its microbatch."""

    kind: str
    mb: int
    send_grad: int = -1
    recv_act: int = -1
    recv_grad: int = -1
    send_act: int = -1


def _step_work(t: int, p: int, stage: int) -> tuple[bool, int]:
    """(is forward, microbatch) of step t on `stage` (the microbatch may not exist)."""
    if t % 2 == stage % 2:
        return True, (t - stage) // 2
    return False, (t + stage + 1 - 2 * p) // 2


def train_schedule(p: int, m: int, stage: int) -> list[Step]:
    """The TrainSchedule steps of `stage` for p stages and m microbatches."""
    out: list[Step] = []
    prev = -1
    first, last = stage == 0, stage == p - 1
    for t in range(2 * (m + p - 1)):
        forward, mb = _step_work(t, p, stage)
        valid = 0 <= mb < m
        prev_valid = 0 <= prev < m
        if forward:
            step = Step(
                "F" if valid else "",
                mb,
                send_grad=prev if prev_valid and not first else -1,
                recv_act=mb if valid and not first else -1,
            )
        else:
            step = Step(
                "B" if valid else "",
                mb,
                recv_grad=mb if valid and not last else -1,
                send_act=prev if prev_valid and not last else -1,
            )
        out.append(step)
        prev = mb
    return out
