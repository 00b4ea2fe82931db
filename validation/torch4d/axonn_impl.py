"""The same GPT stack built from the real axonn 0.2.0 package, and its CPU shim.

axonn 0.2.0 assumes CUDA and NCCL. On CPU with gloo these run-time patches (never edits
of site-packages) make it work; each is applied only while an axonn model lives:

1. `torch.cuda.set_device` -> no-op (communication_handle calls it; init passes
   gpus_per_node=1 so it does not ask torch.cuda.device_count()).
2. `torch.distributed.new_group(..., backend="nccl")` -> the backend argument is dropped,
   so groups inherit the default (gloo) backend.
3. `fully_connected.initialize_params(..., init_device="cuda")` -> init on CPU.
4. `torch.cuda.current_device()` -> "cpu" (the reduce-scatter output buffer of
   intra_layer/communication.py is allocated on it).
5. `overlap_communication.clear_handles` (a CUDA synchronize at context exit) -> wait on
   every registered handle; otherwise ORS gradients are read before gloo has written them.
6. `torch.distributed.all_gather_into_tensor` -> 0-d inputs reshaped to (1,) and the input
   detached (OAG gathers a leaf Parameter that requires grad).
numpy, which axonn imports without declaring, is a dependency of axsim already.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any
from unittest import mock

import torch
import torch.distributed as dist

from validation.torch4d.axsim_impl import DistModel
from validation.torch4d.config import Grid, ModelDims, Overlap
from validation.torch4d.model import GPTBlock, GPTStack, LayerNormX


def axonn_version() -> str | None:
    """The installed axonn version, or None."""
    try:
        return importlib.metadata.version("axonn")
    except importlib.metadata.PackageNotFoundError:
        return None


@contextmanager
def cpu_shim() -> Iterator[None]:
    """Patch torch and axonn so axonn 0.2.0 runs on CPU with gloo (see module doc)."""
    import axonn.intra_layer.fully_connected as fc
    import axonn.intra_layer.overlap_communication as oc

    real_new_group = dist.new_group
    real_all_gather_into = dist.all_gather_into_tensor
    real_init_params = fc.initialize_params

    def new_group(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("backend", None)
        return real_new_group(*args, **kwargs)

    def all_gather_into_tensor(
        out: torch.Tensor, inp: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Any:
        inp = inp.detach()
        if inp.dim() == 0:
            inp = inp.reshape(1)
        return real_all_gather_into(out, inp, *args, **kwargs)

    def initialize_params(*args: Any, **kwargs: Any) -> torch.Tensor:
        kwargs["init_device"] = "cpu"
        return real_init_params(*args, **kwargs)

    def clear_handles() -> None:
        for handle in oc.handles:
            handle.wait()
        oc.handles = []

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch.cuda, "set_device", lambda *_a, **_k: None))
        stack.enter_context(mock.patch.object(torch.cuda, "current_device", lambda: "cpu"))
        stack.enter_context(mock.patch.object(dist, "new_group", new_group))
        stack.enter_context(
            mock.patch.object(dist, "all_gather_into_tensor", all_gather_into_tensor)
        )
        stack.enter_context(mock.patch.object(fc, "initialize_params", initialize_params))
        stack.enter_context(mock.patch.object(oc, "clear_handles", clear_handles))
        yield


class _Linears(torch.nn.Module):
    """Holds the axonn Linear layers only, for axonn's sync_gradients."""

    def __init__(self, layers: list[torch.nn.Module]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)


def build_axonn(
    dims: ModelDims,
    grid: Grid,
    overlap: Overlap,
    checkpoint: bool,
    device: torch.device,
    dtype: torch.dtype,
) -> DistModel:
    """GPT stack of axonn.intra_layer.Linear (expert mode; transpose=True for attention-out
    and MLP-down) on axonn's own process groups; our LayerNormX on axonn's X group."""
    stack = ExitStack()
    if device.type == "cpu":
        stack.enter_context(cpu_shim())
    try:
        return _build(dims, grid, overlap, checkpoint, device, dtype, stack)
    except BaseException:
        stack.close()
        raise


def _build(
    dims: ModelDims,
    grid: Grid,
    overlap: Overlap,
    checkpoint: bool,
    device: torch.device,
    dtype: torch.dtype,
    stack: ExitStack,
) -> DistModel:
    from axonn import axonn as ax
    from axonn.intra_layer import (
        Linear,
        optimize_communication,
        overlap_all_gathers_for_checkpointed_forward,
        sync_gradients,
    )

    ax.init(
        G_inter=1,
        G_data=grid.data,
        G_intra_r=grid.y,
        G_intra_c=grid.x,
        G_intra_d=grid.z,
        gpus_per_node=1 if device.type == "cpu" else None,
    )
    handle = ax.comm_handle
    x_group = handle.inner_intra_layer_parallel_group

    def linear(k: int, n: int, transposed: bool) -> torch.nn.Module:
        return Linear(k, n, transpose=transposed, expert_mode=True).to(device=device, dtype=dtype)

    def norm() -> torch.nn.Module:
        return LayerNormX(dims.hidden, x_group, grid.x, device=device, dtype=dtype)

    blocks = [GPTBlock(dims, dims.heads // grid.y, linear, norm, i) for i in range(dims.layers)]
    model = GPTStack(blocks, checkpoint, scope=overlap_all_gathers_for_checkpointed_forward)
    linears = _Linears(model.linears())
    in_linears = {id(p) for p in linears.parameters()}

    def step_context() -> Any:
        return optimize_communication(
            overlap_all_reduce=overlap.oar,
            overlap_reduce_scatter=overlap.ors,
            overlap_all_gather=overlap.oag,
            model_object_for_overlapping_allgathers=model if overlap.oag else None,
        )

    def sync() -> None:
        sync_gradients(linears, expert_mode=False)
        with torch.no_grad():
            for p in model.parameters():
                if id(p) not in in_linears and p.grad is not None:
                    dist.all_reduce(p.grad, group=handle.data_parallel_group)
                    dist.all_reduce(p.grad, group=handle.depth_intra_layer_parallel_group)

    def cleanup() -> None:
        _destroy_groups(handle)
        stack.close()

    return DistModel("axonn", model, step_context, sync, cleanup)


def _destroy_groups(handle: Any) -> None:
    """Release the communicators axonn created (several runs share one world)."""
    groups = {id(g): g for g in vars(handle).values() if isinstance(g, dist.ProcessGroup)}
    for group in groups.values():
        dist.destroy_process_group(group)


def load_axonn(
    model: torch.nn.Module, full_state: dict[str, torch.Tensor], local: dict[str, torch.Tensor]
) -> None:
    """Load full weight matrices into axonn's Linear layers (axonn shards them itself,
    which checks that its layout is ours) and shards into the LayerNorms."""
    state = {}
    for name in full_state:
        layer = name.split(".")[-2]
        state[name] = local[name] if layer in ("ln1", "ln2") else full_state[name]
    model.load_state_dict(state, strict=True)
