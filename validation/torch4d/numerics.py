"""Check a 4D run against the single-process reference: loss and every gradient.

For each case, every rank trains `steps` steps from the seeded weights on the same data
as the reference; after the first backward rank 0 gathers every rank's gradient shards,
assembles the full gradients (shard.assemble, which also measures how far replicas of a
slice disagree) and compares them with the reference model's; the global loss of every
step is compared too (later steps check that the sharded optimizer updates agree).
Errors are relative to the largest magnitude of the reference tensor.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from validation.torch4d.config import Grid, ModelDims, Overlap, check_fits
from validation.torch4d.launch import device as rank_device
from validation.torch4d.launch import launch
from validation.torch4d.model import build_reference, reference_state
from validation.torch4d.shard import assemble
from validation.torch4d.train import (
    DTYPES,
    build,
    compute_gradients,
    full_batch,
    global_loss,
    local_batch,
    make_optimizer,
)

#: Small enough for 8 ranks on 2 cores, and splittable by every grid of up to 2x2x2x2.
TEST_DIMS = ModelDims("test", layers=2, hidden=32, heads=4, seq_len=8, batch=4)


@dataclass(frozen=True)
class Case:
    """One numerics check."""

    grid: Grid
    impl: str = "axsim"
    overlap: Overlap = field(default_factory=Overlap)
    checkpoint: bool = False
    dims: ModelDims = TEST_DIMS
    steps: int = 2
    optimizer: str = "sgd"
    dtype: str = "float32"
    seed: int = 7

    def __str__(self) -> str:
        ckpt = "+ckpt" if self.checkpoint else ""
        return f"{self.impl} grid={self.grid} overlap={self.overlap}{ckpt}"


@dataclass
class CaseResult:
    """Outcome of one case (errors are relative; `ok` compares them with `tolerance`)."""

    case: str
    losses: list[float]
    reference_losses: list[float]
    loss_err: float
    grad_err: float
    worst_param: str
    replica_err: float
    tolerance: float
    grad_errs: dict[str, float] = field(default_factory=dict)
    linear_class: str = ""  # proves which implementation ran

    @property
    def ok(self) -> bool:
        return max(self.loss_err, self.grad_err, self.replica_err) <= self.tolerance


class _PlainSGD:
    """p -= lr·grad. Numerics need no more, and unlike torch.optim (whose first use
    imports torch._dynamo, ~1.5 s of CPU per process) it keeps 8-rank checks fast."""

    def __init__(self, params: list[torch.nn.Parameter], lr: float = 0.1) -> None:
        self.params, self.lr = params, lr

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            if p.grad is not None:
                p.sub_(self.lr * p.grad)


def _optimizer(name: str, params: list[torch.nn.Parameter]) -> Any:
    return _PlainSGD(params) if name == "sgd" else make_optimizer(name, params)


def _rel(a: torch.Tensor, ref: torch.Tensor) -> float:
    return float(
        (a.double() - ref.double()).abs().max() / ref.double().abs().max().clamp_min(1e-12)
    )


def _reference(case: Case) -> tuple[list[float], dict[str, torch.Tensor]]:
    dtype = DTYPES[case.dtype]
    model = build_reference(case.dims, dtype, case.checkpoint)
    model.load_state_dict(reference_state(case.dims, case.seed, dtype))
    opt = _optimizer(case.optimizer, list(model.parameters()))
    losses, grads = [], {}
    for step in range(case.steps):
        x, target = full_batch(case.dims, case.grid, step, case.seed, dtype)
        for p in model.parameters():
            p.grad = None
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        if step == 0:
            grads = {
                n: p.grad.detach().clone()
                for n, p in model.named_parameters()
                if p.grad is not None
            }
        opt.step()
        losses.append(float(loss))
    return losses, grads


def check_case(case: Case) -> CaseResult | None:
    """Run one case on the current world; rank 0 returns the result, others None."""
    check_fits(case.dims, case.grid)
    rank, dtype, dev = dist.get_rank(), DTYPES[case.dtype], rank_device()
    dm = build(
        case.impl, case.dims, case.grid, case.overlap, case.checkpoint, dev, dtype, case.seed
    )
    layer = type(dm.model.linears()[0])
    try:
        opt = _optimizer(case.optimizer, list(dm.model.parameters()))
        numel = case.dims.batch * case.dims.seq_len * case.dims.hidden
        losses: list[float] = []
        shards: list[Any] | None = None
        for step in range(case.steps):
            x, target = local_batch(case.dims, case.grid, rank, step, case.seed, dev, dtype)
            local = compute_gradients(dm, x, target, numel)
            if step == 0:
                mine = {
                    n: p.grad.detach().cpu()
                    for n, p in dm.model.named_parameters()
                    if p.grad is not None
                }
                shards = [None] * dist.get_world_size() if rank == 0 else None
                dist.gather_object(mine, shards, dst=0)
            opt.step()
            losses.append(global_loss(local, case.grid))
    finally:
        dm.cleanup()
    if rank != 0:
        return None
    result = _compare(case, losses, shards or [])
    result.linear_class = f"{layer.__module__}.{layer.__qualname__}"
    return result


def _compare(case: Case, losses: list[float], shards: list[dict[str, torch.Tensor]]) -> CaseResult:
    ref_losses, ref_grads = _reference(case)
    errs, replica = {}, 0.0
    for name, ref in ref_grads.items():
        pieces = {r: s[name] for r, s in enumerate(shards) if name in s}
        if len(pieces) != len(shards):
            errs[name] = float("inf")  # a rank produced no gradient for this parameter
            continue
        full, rep = assemble(name, ref.shape, pieces, case.grid)
        errs[name] = _rel(full, ref)
        replica = max(replica, rep / float(ref.abs().max().clamp_min(1e-12)))
    worst = max(errs, key=lambda n: errs[n])
    loss_err = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses, strict=True))
    tol = 1e-9 if case.dtype == "float64" else 1e-4
    return CaseResult(
        str(case), losses, ref_losses, loss_err, errs[worst], worst, replica, tol, errs
    )


def _run_cases(cases: list[Case]) -> list[CaseResult]:
    results = [check_case(c) for c in cases]
    return [r for r in results if r is not None]


def run_numerics(cases: list[Case]) -> list[CaseResult]:
    """Check every case; all cases must have the same world size (one launch for all)."""
    sizes = {c.grid.world_size for c in cases}
    if len(sizes) != 1:
        raise ValueError(f"cases mix world sizes {sorted(sizes)}; run one world size at a time")
    return launch(functools.partial(_run_cases, cases), sizes.pop())
