"""Megatron-style data-parallel gradient buckets (DDP and the distributed optimizer).

Parameters are assigned to buckets in backward order (the order their gradients become
ready), a bucket closing once it holds `bucket_elems` elements, as Megatron-core's DDP
does. In the last microbatch's backward, a bucket's collective is launched as soon as its
last unit's gradients are ready (`overlap_grad_reduce`), or all of them after the
backward otherwise; the optimizer waits for all of them.

- `ddp`: all-reduce of each bucket over the data-parallel group;
- `distopt`: reduce-scatter of each bucket, and after the optimizer step an all-gather of
  the updated bf16 parameters. With `overlap_param_gather` the all-gathers of the
  previous step run at the start of the iteration and each unit's first forward waits for
  its bucket (the steady state of an iteration loop).

Readiness is tracked per unit (a transformer block, the embedding, the head), not per
tensor: the collectives and their sizes are Megatron's; only the instant a bucket closes
inside a block is rounded to the block's end.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.builder import ProgramBuilder
from workloads.ops import CollectiveKind as K


@dataclass(frozen=True)
class Bucket:
    """Units (in backward order) whose gradients one collective carries."""

    units: tuple[str, ...]
    elems: int


def make_buckets(units: list[tuple[str, int]], bucket_elems: int) -> list[Bucket]:
    """Greedy buckets over (unit, elements) pairs given in backward order."""
    out: list[Bucket] = []
    names: list[str] = []
    total = 0
    for name, elems in units:
        names.append(name)
        total += elems
        if total >= bucket_elems:
            out.append(Bucket(tuple(names), total))
            names, total = [], 0
    if names:
        out.append(Bucket(tuple(names), total))
    return out


class GradBuckets:
    """The gradient buckets of one model chunk on one rank."""

    def __init__(
        self,
        b: ProgramBuilder,
        *,
        tag: str,
        units: list[tuple[str, int]],
        bucket_elems: int,
        distopt: bool,
        grad_bytes: int,
        param_bytes: int,
        overlap_grad: bool,
        overlap_param: bool,
    ):
        self.b = b
        self.tag = tag
        self.buckets = make_buckets(units, bucket_elems)
        self.distopt = distopt
        self.grad_bytes = grad_bytes
        self.param_bytes = param_bytes
        self.overlap_grad = overlap_grad
        self.overlap_param = overlap_param
        self._closing = {bk.units[-1]: i for i, bk in enumerate(self.buckets)}
        self._launched: set[int] = set()
        self._pending: list[int] = []
        self._param_wait: dict[str, int] = {}

    def _launch(self, i: int, blocking: bool) -> None:
        bk = self.buckets[i]
        kind = K.REDUCE_SCATTER if self.distopt else K.ALL_REDUCE
        op = "rs" if self.distopt else "ar"
        h = self.b.collective(
            f"{self.tag}.bucket{i}.{op}_dp",
            kind,
            "dp",
            bk.elems * self.grad_bytes,
            blocking=blocking,
        )
        self._launched.add(i)
        if not blocking:
            self._pending.append(h)

    def ready(self, unit: str) -> None:
        """`unit`'s gradients are final (last microbatch): launch its bucket if full."""
        i = self._closing.get(unit)
        if i is not None and self.overlap_grad:
            self._launch(i, blocking=False)

    def finish(self) -> None:
        """Launch what is left and wait for every bucket (before the optimizer)."""
        for i in range(len(self.buckets)):
            if i not in self._launched:
                self._launch(i, blocking=True)
        self.b.wait_all(self._pending, f"wait:{self.tag}.grads")

    def prefetch_params(self) -> None:
        """distopt + overlap_param_gather: the previous step's parameter all-gathers, in
        forward order, at the start of the iteration."""
        for i in reversed(range(len(self.buckets))):
            bk = self.buckets[i]
            h = self._param_gather(i, blocking=False)
            for unit in bk.units:
                self._param_wait[unit] = h

    def wait_params(self, unit: str) -> None:
        """First forward use of `unit`: wait for its bucket's parameter all-gather."""
        h = self._param_wait.pop(unit, None)
        if h is not None:
            self.b.wait(h, f"wait:{self.tag}.params")

    def gather_params(self) -> None:
        """distopt without overlap: all-gather the updated parameters after the step."""
        for i in range(len(self.buckets)):
            self._param_gather(i, blocking=True)

    def _param_gather(self, i: int, blocking: bool) -> int:
        return self.b.collective(
            f"{self.tag}.bucket{i}.ag_dp",
            K.ALL_GATHER,
            "dp",
            self.buckets[i].elems * self.param_bytes,
            blocking=blocking,
        )
