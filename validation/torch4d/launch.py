"""Start a world of ranks: spawned processes on one host, or torchrun's environment.

`launch(fn, world_size)` calls `fn()` on every rank with torch.distributed initialised and
returns rank 0's result. Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR set) it runs in the
calling process with `env://`; otherwise it spawns `world_size` processes that rendezvous
through a file store. The backend is NCCL when CUDA is available, else gloo; on CPU each
rank gets an equal share of the host's cores as intra-op threads.
"""

from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from simulator.errors import ConfigError

R = TypeVar("R")
TIMEOUT = timedelta(seconds=180)


def under_torchrun() -> bool:
    """True when this process was started by torchrun (or another env:// launcher)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def backend() -> str:
    """NCCL on GPUs, gloo on CPU."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def device() -> torch.device:
    """This rank's device: its local GPU under NCCL, else the CPU."""
    if torch.cuda.is_available():
        return torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank() % torch.cuda.device_count()))
        )
    return torch.device("cpu")


def _threads(local_world: int) -> int:
    return max(1, (os.cpu_count() or 1) // max(1, local_world))


def _setup(rank: int, world_size: int, init_method: str, local_world: int) -> None:
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count())))
    else:
        torch.set_num_threads(_threads(local_world))
    dist.init_process_group(
        backend(), init_method=init_method, rank=rank, world_size=world_size, timeout=TIMEOUT
    )


def _entry(
    rank: int, world_size: int, init_method: str, result: str, fn: Callable[[], Any]
) -> None:
    _setup(rank, world_size, init_method, world_size)
    try:
        out = fn()
        if rank == 0:
            Path(result).write_bytes(pickle.dumps(out))
        dist.barrier()  # nobody closes its sockets while a peer still talks to it
    except BaseException:
        dist.destroy_process_group()
        raise
    # Done, results and traces on disk: leave without C++ teardown. Destroying gloo's and
    # the profiler's threads at exit sometimes aborts the process ("terminate called
    # without an active exception"), which would fail a run that has succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def launch(fn: Callable[[], R], world_size: int) -> R:
    """Run `fn` on `world_size` ranks; return rank 0's value (every rank's under torchrun)."""
    if dist.is_initialized():
        _check_world(dist.get_world_size(), world_size)
        return fn()
    if under_torchrun():
        _check_world(int(os.environ["WORLD_SIZE"]), world_size)
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
        _setup(int(os.environ["RANK"]), world_size, "env://", local_world)
        try:
            out = fn()
            dist.barrier()
            return out
        finally:
            dist.destroy_process_group()
    with tempfile.TemporaryDirectory(prefix="axsim-torch4d-") as tmp:
        store, result = Path(tmp) / "store", Path(tmp) / "result.pkl"
        mp.start_processes(
            _entry,
            args=(world_size, f"file://{store}", str(result), fn),
            nprocs=world_size,
            join=True,
            start_method="spawn",
        )
        return pickle.loads(result.read_bytes())


def _check_world(actual: int, wanted: int) -> None:
    if actual != wanted:
        raise ConfigError(f"the grid needs {wanted} ranks but the world has {actual}")
