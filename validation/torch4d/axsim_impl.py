"""Both 4D implementations behind one small interface: ours ('axsim') and axonn 0.2.0.

A `DistModel` is a GPT block stack plus the three things a training step needs around it:
the overlap context of forward+backward, the gradient synchronisation after backward, and
clean-up (communicators). `train.py` runs either one the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from validation.torch4d.comm import CommState
from validation.torch4d.config import Grid, ModelDims, Overlap
from validation.torch4d.linear import Linear4D
from validation.torch4d.mesh import build_mesh
from validation.torch4d.model import GPTBlock, GPTStack, LayerNormX


@dataclass
class DistModel:
    """A sharded GPT stack and the hooks of its training step."""

    impl: str
    model: GPTStack
    step_context: Callable[[], AbstractContextManager[Any]]
    sync_gradients: Callable[[], None]
    cleanup: Callable[[], None] = field(default=lambda: None)


def sync_grouped(
    model: torch.nn.Module, weights: set[int], biases: set[int], data: Any, depth: Any
) -> None:
    """axonn's sync_gradients order: per tensor, all weights all-reduced over data, then
    all biases over data and depth, then the other parameters. LayerNorm parameters
    (axonn's "others") go over data and depth, as in its expert mode: they are sharded
    over X and replicated over Y here, so the whole-world all-reduce of its non-expert
    mode would be wrong. Collectives are issued on groups of size 1 too, as axonn does."""
    params = [p for p in model.parameters() if p.grad is not None]
    with torch.no_grad():
        for p in params:
            if id(p) in weights:
                dist.all_reduce(p.grad, group=data)
        for p in params:
            if id(p) in biases:
                dist.all_reduce(p.grad, group=data)
                dist.all_reduce(p.grad, group=depth)
        for p in params:
            if id(p) not in weights and id(p) not in biases:
                dist.all_reduce(p.grad, group=data)
                dist.all_reduce(p.grad, group=depth)


def build_axsim(
    dims: ModelDims,
    grid: Grid,
    overlap: Overlap,
    checkpoint: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> DistModel:
    """Our implementation (linear.py, comm.py) on new process groups of `grid`."""
    mesh = build_mesh(grid)
    state = CommState(overlap)

    def linear(k: int, n: int, transposed: bool) -> torch.nn.Module:
        return Linear4D(k, n, mesh, state, transpose=transposed, device=device, dtype=dtype)

    def norm() -> torch.nn.Module:
        return LayerNormX(dims.hidden, mesh.group("X"), mesh.size("X"), device=device, dtype=dtype)

    blocks = [
        GPTBlock(dims, dims.heads // mesh.size("Y"), linear, norm, i) for i in range(dims.layers)
    ]
    model = GPTStack(blocks, checkpoint, scope=lambda b: state.scope(b.linears()))  # type: ignore[arg-type]
    weights = {id(lin.weight) for lin in model.linears()}
    biases = {id(lin.bias) for lin in model.linears() if lin.bias is not None}

    @contextmanager
    def step_context() -> Iterator[None]:
        state.begin_step(model.linears())  # type: ignore[arg-type]
        try:
            yield
        finally:
            state.end_backward()

    def sync() -> None:
        sync_grouped(model, weights, biases, mesh.group("data"), mesh.group("Z"))

    return DistModel("axsim", model, step_context, sync, mesh.destroy)


def load_local(model: torch.nn.Module, local: dict[str, torch.Tensor]) -> None:
    """Copy a rank's shards (see shard.local_state) into a model's parameters."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.copy_(local[name].reshape(param.shape))
