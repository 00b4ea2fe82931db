"""A GPT block stack, written once for the 4D layout and for a single-process reference.

Layout of activations on a rank (x, y, z, d): the residual stream holds the rank's
batch shard (sequences split over Z·Gdata) and hidden/Gx features, replicated over Y.
The linear layers alternate normal / transposed (QKV, attention-out, MLP-up, MLP-down), so
QKV and MLP-up outputs are split over Y (replicated over X), and attention-out and MLP-down
bring the stream back to the X split. Attention heads are split over Y (the QKV output
features are ordered head-major, (heads, 3, head_dim), so a contiguous Y slice holds whole
heads) and computed redundantly across X; whole sequences stay on one rank, so causal
attention needs no communication. LayerNorm sees hidden/Gx features and all-reduces its
two row statistics over X (forward and backward).

With Gx = Gy = Gz = Gdata = 1, `nn.Linear` and `nn.LayerNorm` the same classes build the
reference model, so both run the very same arithmetic outside the collectives.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.profiler import record_function
from torch.utils.checkpoint import checkpoint

from validation.torch4d.config import ModelDims

LinearFactory = Callable[[int, int, bool], torch.nn.Module]
NormFactory = Callable[[], torch.nn.Module]


class _LayerNormX(torch.autograd.Function):
    """LayerNorm over features split across a group: row sums all-reduced in fwd and bwd."""

    @staticmethod
    def forward(
        ctx: Any, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, norm: LayerNormX
    ) -> torch.Tensor:
        stats = torch.stack([x.sum(-1), (x * x).sum(-1)])
        dist.all_reduce(stats, group=norm.group)
        mean = stats[0] / norm.hidden
        rstd = torch.rsqrt(stats[1] / norm.hidden - mean * mean + norm.eps)
        xhat = (x - mean.unsqueeze(-1)) * rstd.unsqueeze(-1)
        ctx.save_for_backward(xhat, rstd, weight)
        ctx.norm = norm
        return xhat * weight + bias

    @staticmethod
    def backward(
        ctx: Any, dy: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, None]:
        xhat, rstd, weight = ctx.saved_tensors
        norm: LayerNormX = ctx.norm
        g = dy * weight
        stats = torch.stack([g.sum(-1), (g * xhat).sum(-1)])
        dist.all_reduce(stats, group=norm.group)
        dx = rstd.unsqueeze(-1) * (
            g
            - (stats[0] / norm.hidden).unsqueeze(-1)
            - xhat * (stats[1] / norm.hidden).unsqueeze(-1)
        )
        width = xhat.shape[-1]
        dw = (dy * xhat).reshape(-1, width).sum(0)
        db = dy.reshape(-1, width).sum(0)
        return dx, dw, db, None


class LayerNormX(torch.nn.Module):
    """LayerNorm of `hidden` features of which this rank holds hidden/size (split over X)."""

    def __init__(
        self, hidden: int, group: Any, size: int, eps: float = 1e-5, **factory: Any
    ) -> None:
        super().__init__()
        self.hidden, self.group, self.size, self.eps = hidden, group, size, eps
        self.weight = torch.nn.Parameter(torch.ones(hidden // size, **factory))
        self.bias = torch.nn.Parameter(torch.zeros(hidden // size, **factory))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.size == 1:
            return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)
        return _LayerNormX.apply(x, self.weight, self.bias, self)


class GPTBlock(torch.nn.Module):
    """Pre-LN GPT block: x + Attn(LN(x)), then x + MLP(LN(x)) with a 4x GeLU MLP."""

    def __init__(
        self,
        dims: ModelDims,
        heads_local: int,
        linear: LinearFactory,
        norm: NormFactory,
        index: int,
    ) -> None:
        super().__init__()
        h = dims.hidden
        self.index, self.heads_local, self.head_dim = index, heads_local, dims.head_dim
        self.ln1 = norm()
        self.qkv = linear(h, 3 * h, False)
        self.attn_out = linear(h, h, True)
        self.ln2 = norm()
        self.mlp_up = linear(h, 4 * h, False)
        self.mlp_down = linear(4 * h, h, True)

    def linears(self) -> list[torch.nn.Module]:
        return [self.qkv, self.attn_out, self.mlp_up, self.mlp_down]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tag = f"4d:block{self.index}"
        with record_function(f"{tag}.attention"):
            qkv = self.qkv(self.ln1(x))
            b, s, _ = qkv.shape
            q, k, v = (
                qkv.view(b, s, self.heads_local, 3, self.head_dim).permute(3, 0, 2, 1, 4).unbind(0)
            )
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_out(a.transpose(1, 2).reshape(b, s, self.heads_local * self.head_dim))
        with record_function(f"{tag}.mlp"):
            return x + self.mlp_down(F.gelu(self.mlp_up(self.ln2(x))))


class GPTStack(torch.nn.Module):
    """The blocks in order; optional activation checkpointing per block.

    With checkpointing, `scope(block)` wraps each block's forward and its recompute: the
    4D models use it to restart the OAG prefetch over the block's layers, as AxoNN's
    integrations do (overlap_all_gathers_for_checkpointed_forward).
    """

    def __init__(
        self,
        blocks: list[GPTBlock],
        checkpoint_blocks: bool = False,
        scope: Callable[[GPTBlock], AbstractContextManager[Any]] | None = None,
    ) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(blocks)
        self.checkpoint_blocks = checkpoint_blocks
        self.scope = scope

    def _run(self, block: GPTBlock, x: torch.Tensor) -> torch.Tensor:
        scoped = self.checkpoint_blocks and self.scope is not None
        with self.scope(block) if scoped else nullcontext():  # type: ignore[misc]
            return block(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.checkpoint_blocks and not x.requires_grad:
            # reentrant checkpointing needs an input that requires grad; in a full GPT the
            # embedding output would
            x = x.detach().requires_grad_(True)
        for block in cast(list[GPTBlock], list(self.blocks)):
            if self.checkpoint_blocks:
                # reentrant, as Megatron-AxoNN: the recompute repeats every forward step
                # (including the all-reduces), and the backward sees the real Parameters,
                # which axonn's deferred (ORS) gradient accumulation relies on
                x = checkpoint(self._run, block, x, use_reentrant=True)
            else:
                x = self._run(block, x)
        return x

    def linears(self) -> list[torch.nn.Module]:
        return [lin for block in self.blocks for lin in block.linears()]  # type: ignore[operator]


def build_reference(
    dims: ModelDims, dtype: torch.dtype = torch.float32, checkpoint_blocks: bool = False
) -> GPTStack:
    """The single-process model (plain nn.Linear / nn.LayerNorm)."""

    def linear(k: int, n: int, _transposed: bool) -> torch.nn.Module:
        return torch.nn.Linear(k, n, dtype=dtype)

    def norm() -> torch.nn.Module:
        return torch.nn.LayerNorm(dims.hidden, dtype=dtype)

    blocks = [GPTBlock(dims, dims.heads, linear, norm, i) for i in range(dims.layers)]
    return GPTStack(blocks, checkpoint_blocks)


def reference_state(
    dims: ModelDims, seed: int, dtype: torch.dtype = torch.float32
) -> dict[str, torch.Tensor]:
    """Seeded full parameters, shared by the reference and every rank (which shard them).

    Biases and LayerNorm affine parameters are random too, so their gradients are checked
    on non-trivial values.
    """
    gen = torch.Generator().manual_seed(seed)
    state: dict[str, torch.Tensor] = {}
    for i in range(dims.layers):
        for ln in ("ln1", "ln2"):
            state[f"blocks.{i}.{ln}.weight"] = 1.0 + 0.1 * torch.randn(dims.hidden, generator=gen)
            state[f"blocks.{i}.{ln}.bias"] = 0.1 * torch.randn(dims.hidden, generator=gen)
        for name, k, n, _ in dims.linear_shapes():
            state[f"blocks.{i}.{name}.weight"] = torch.randn(n, k, generator=gen) / k**0.5
            state[f"blocks.{i}.{name}.bias"] = 0.1 * torch.randn(n, generator=gen)
    return {k: v.to(dtype) for k, v in state.items()}


def mse_loss_local(out: torch.Tensor, target: torch.Tensor, global_numel: int) -> torch.Tensor:
    """This rank's share of the global mean squared error (sum over ranks = the loss)."""
    return ((out - target) ** 2).sum() / global_numel
