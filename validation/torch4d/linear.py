"""The 4D tensor-parallel Linear layer (AxoNN's algorithm, expert mode).

Layout, as in axonn's code (intra_layer/fully_connected.py): for a normal layer the
weight (out × in) is split in-features over X and out-features over Y; a transposed layer
swaps X and Y. The (out/G_out × in/G_in) block is flattened and 1/Gz of it is stored.
Input activations hold (tokens/(Gz·Gdata)) × (in/G_in); outputs (tokens/(Gz·Gdata)) ×
(out/G_out), replicated over the in-features group.

Per call (reference axonn-4d.md, steps table):
  fwd  1 all-gather W over Z (prefetched if OAG)  2 GEMM  3 all-reduce O over the
       in-features group (X for a normal layer), blocking;
  bwd  4 all-gather W over Z again  5 dI GEMM  6 all-reduce dI over the out-features group
       (Y; async if OAR)  7 dW GEMM  8 reduce-scatter dW over Z (async if ORS, waited after
       the whole backward); the all-reduce of 6 is waited after 8 is issued.
Note the table's block shapes use the paper's naming (I: k/Gy); the code, and so this
module, contract over X in the forward, i.e. the input is split k/Gx for a normal layer.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from validation.torch4d.comm import CommState
from validation.torch4d.mesh import Mesh


class _Linear4D(torch.autograd.Function):
    """O = I·Wᵀ with the 4D collectives; `layer` carries groups and the CommState."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, layer: Linear4D) -> torch.Tensor:
        full = layer.state.gather_weight(layer, weight).reshape(layer.local_shape)
        ctx.save_for_backward(x, weight)
        ctx.layer = layer
        out = x.matmul(full.t())
        dist.all_reduce(out, group=layer.fwd_group)
        return out

    @staticmethod
    def backward(
        ctx: Any, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        x, weight = ctx.saved_tensors
        layer: Linear4D = ctx.layer
        state = layer.state
        oar, ors = state.overlap.oar, state.overlap.ors
        full = state.gather_weight(layer, weight).reshape(layer.local_shape)
        grad_x = grad_w = None
        if layer.bwd_size > 1 or not ors:
            handle = None
            if ctx.needs_input_grad[0]:
                grad_x = grad_out.matmul(full)
                handle = dist.all_reduce(grad_x, group=layer.bwd_group, async_op=oar)
            if ctx.needs_input_grad[1]:
                grad_w = _weight_grad(grad_out, x)
                grad_w = state.reduce_scatter(layer, grad_w, async_op=ors)
            if handle is not None and oar:
                handle.wait()
            if ors and grad_w is not None:
                state.accumulate_later(layer.weight, grad_w)
                grad_w = None
            return grad_x, grad_w, None
        # Gbwd = 1 with ORS: axonn computes dW first (its reduce-scatter then overlaps dI)
        if ctx.needs_input_grad[1]:
            grad_w = state.reduce_scatter(layer, _weight_grad(grad_out, x), async_op=True)
            state.accumulate_later(layer.weight, grad_w)
            grad_w = None
        if ctx.needs_input_grad[0]:
            grad_x = grad_out.matmul(full)
        return grad_x, None, None


def _weight_grad(grad_out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dW = dOᵀ·I over all local tokens, flattened like the stored shard."""
    return grad_out.reshape(-1, grad_out.shape[-1]).t().mm(x.reshape(-1, x.shape[-1])).reshape(-1)


class Linear4D(torch.nn.Module):
    """A Linear layer of the 4D algorithm; `transpose` swaps the roles of X and Y."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        mesh: Mesh,
        state: CommState,
        *,
        transpose: bool = False,
        bias: bool = True,
        device: torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        in_kind, out_kind = ("Y", "X") if transpose else ("X", "Y")
        self.in_features, self.out_features, self.transpose = in_features, out_features, transpose
        self.fwd_group = mesh.group(in_kind)  # contraction over in-features: sum partial O
        self.bwd_group = mesh.group(out_kind)  # dI sums over the out-features split
        self.depth_group = mesh.group("Z")
        self.bwd_size = mesh.size(out_kind)
        self.depth_size = mesh.size("Z")
        self.local_shape = (out_features // mesh.size(out_kind), in_features // mesh.size(in_kind))
        self.state = state
        numel = self.local_shape[0] * self.local_shape[1] // self.depth_size
        self.weight = torch.nn.Parameter(torch.empty(numel, device=device, dtype=dtype))
        self.bias = (
            torch.nn.Parameter(torch.zeros(self.local_shape[0], device=device, dtype=dtype))
            if bias
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # 2-D GEMM operands, as axonn (the traces' Input Dims then match)
        out = _Linear4D.apply(x.reshape(-1, x.shape[-1]), self.weight, self)
        out = out.reshape(*x.shape[:-1], out.shape[-1])
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in={self.in_features}, out={self.out_features}, transpose={self.transpose}, local={self.local_shape}"
