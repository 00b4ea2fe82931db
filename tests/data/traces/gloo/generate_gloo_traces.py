"""Generate the gloo CPU fixtures: a 4-process gloo job profiled with torch.profiler.

Usage: python generate_gloo_traces.py OUT_DIR [WORLD_SIZE=4]   (needs torch, CPU build)

Each rank trains a Linear(64, 64) with SGD for 4 steps (profiler schedule: warmup 1,
active 2, so ProfilerStep#1 and #2 are recorded) and per step issues: all_reduce of the
two gradients, all_gather_into_tensor (1,024 floats per rank), reduce_scatter_tensor (256
floats out), broadcast (1,024 floats), all_to_all_single (512 floats per peer), and, on
ranks 0 and 1 only, an all_reduce of 2,048 floats on a second process group {0, 1}.
Traces are written as OUT_DIR/rank<r>.json.gz (gzip, mtime 0).
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.profiler import ProfilerActivity, profile, schedule


def _step(
    model: torch.nn.Module, opt: torch.optim.Optimizer, rank: int, world: int, sub: object
) -> None:
    loss = model(torch.randn(32, 64)).sum()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    opt.step()
    opt.zero_grad()
    shard = torch.ones(1024)
    dist.all_gather_into_tensor(torch.empty(1024 * world), shard)
    dist.reduce_scatter_tensor(torch.empty(256), torch.ones(256 * world))
    dist.broadcast(shard, src=0)
    dist.all_to_all_single(torch.empty(512 * world), torch.ones(512 * world))
    if sub is not None and rank in (0, 1):
        dist.all_reduce(torch.ones(2048), group=sub)


def _run(rank: int, world: int, out: str) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sub = dist.new_group([0, 1]) if world > 2 else None
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    plain = os.path.join(out, f"rank{rank}.json")
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=2, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(plain),
    ) as prof:
        for _ in range(4):
            _step(model, opt, rank, world, sub)
            prof.step()
    dist.destroy_process_group()
    with (
        open(plain, "rb") as src,
        gzip.GzipFile(plain + ".gz", "wb", compresslevel=9, mtime=0) as dst,
    ):
        shutil.copyfileobj(src, dst)
    os.remove(plain)


if __name__ == "__main__":
    world_size = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    mp.spawn(_run, args=(world_size, sys.argv[1]), nprocs=world_size)
