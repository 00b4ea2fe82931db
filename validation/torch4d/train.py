"""One training step of a 4D model, its data, and model construction for either impl.

Data: each of the Gz·Gdata batch shards (AxoNN's DistributedSampler order: shard =
data_rank·Gz + z) is generated from its own seed, so a rank makes only its own sequences
and the reference concatenates all shards. Inputs and targets are random activations
(the stack has no embedding); the loss is the global mean squared error.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from validation.torch4d.axsim_impl import DistModel, build_axsim, load_local
from validation.torch4d.config import Grid, ModelDims, Overlap
from validation.torch4d.model import mse_loss_local, reference_state
from validation.torch4d.shard import local_state

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def batch_shard(
    dims: ModelDims,
    grid: Grid,
    shard: int,
    step: int,
    seed: int,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Input and target of one batch shard: (batch/(Gz·Gdata), seq, hidden), all features."""
    rows = dims.batch // (grid.z * grid.data)
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step * 7_919 + shard)
    x = torch.randn(rows, dims.seq_len, dims.hidden, generator=gen)
    target = torch.randn(rows, dims.seq_len, dims.hidden, generator=gen)
    return x.to(dtype), target.to(dtype)


def local_batch(
    dims: ModelDims,
    grid: Grid,
    rank: int,
    step: int,
    seed: int,
    device: torch.device,
    dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The calling rank's slice: its batch shard, hidden split over X."""
    x_, _, z, d = grid.coords(rank)
    x, target = batch_shard(dims, grid, d * grid.z + z, step, seed, dtype)
    return (
        x.chunk(grid.x, -1)[x_].contiguous().to(device),
        target.chunk(grid.x, -1)[x_].contiguous().to(device),
    )


def full_batch(
    dims: ModelDims, grid: Grid, step: int, seed: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """The whole global batch, for the single-process reference."""
    shards = [batch_shard(dims, grid, s, step, seed, dtype) for s in range(grid.z * grid.data)]
    return torch.cat([s[0] for s in shards]), torch.cat([s[1] for s in shards])


def build(
    impl: str,
    dims: ModelDims,
    grid: Grid,
    overlap: Overlap,
    checkpoint: bool,
    device: torch.device,
    dtype: torch.dtype,
    seed: int,
) -> DistModel:
    """A 4D model of either implementation, initialised with the seeded reference weights."""
    full = reference_state(dims, seed, dtype)
    local = local_state(full, grid, dist.get_rank())
    if impl == "axonn":
        from validation.torch4d.axonn_impl import build_axonn, load_axonn

        dm = build_axonn(dims, grid, overlap, checkpoint, device, dtype)
        load_axonn(dm.model, full, local)
    else:
        dm = build_axsim(dims, grid, overlap, checkpoint, device, dtype)
        load_local(dm.model, local)
    return dm


def make_optimizer(name: str, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """Adam or SGD on the local (sharded) parameters; both are element-wise, so sharding
    changes nothing numerically."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=0.1)
    return torch.optim.Adam(params, lr=1e-3)


def compute_gradients(
    dm: DistModel, x: torch.Tensor, target: torch.Tensor, global_numel: int
) -> torch.Tensor:
    """Forward, backward (inside the overlap context) and gradient sync; returns this
    rank's share of the loss (detached)."""
    for p in dm.model.parameters():
        p.grad = None
    with dm.step_context():
        out = dm.model(x)
        loss = mse_loss_local(out, target, global_numel)
        loss.backward()
    dm.sync_gradients()
    return loss.detach()


def global_loss(local: torch.Tensor, grid: Grid) -> float:
    """Sum the loss shares over the world; Y replicas hold the same share."""
    total = local.clone()
    dist.all_reduce(total)
    return float(total) / grid.y
