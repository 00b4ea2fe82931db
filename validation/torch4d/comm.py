"""Collectives of the 4D Linear layer and the overlap book-keeping (OAR, ORS, OAG).

This mirrors axonn 0.2.0 (intra_layer/communication.py and overlap_communication.py) call
for call, so that traces of our implementation and of axonn show the same collectives in
the same order: a synchronous weight all-gather is `dist.all_gather` into a list followed
by `torch.cat`; a prefetched one (OAG) is `all_gather_into_tensor`; the reduce-scatter of
dW is `reduce_scatter_tensor`; Z collectives are skipped when Gz = 1 (as axonn does).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch
import torch.distributed as dist

from validation.torch4d.config import Overlap

# torch >= 2.12 renamed the *_tensor collectives to *_single; both lower to the same
# c10d ops (_allgather_base_, _reduce_scatter_base_).
_all_gather_into = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_into = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class ShardedLayer(Protocol):
    """What CommState needs of a layer: its flat weight shard and its Z group."""

    weight: torch.nn.Parameter
    depth_group: dist.ProcessGroup
    depth_size: int


class CommState:
    """Pending handles, deferred gradients and the OAG prefetch cache of one model.

    One step is `begin_step(layers)`, forward and backward, then `end_backward()`, like
    axonn's `optimize_communication` context.
    """

    def __init__(self, overlap: Overlap) -> None:
        self.overlap = overlap
        self.handles: list[Any] = []
        self.pending: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        self.cache: dict[int, tuple[torch.Tensor, Any]] = {}
        self.iterator: Iterator[None] | None = None

    # --- OAG: prefetch the next layer's weights, in module order -------------------
    def begin_step(self, layers: Iterable[ShardedLayer]) -> None:
        """Start a step; with OAG, issue the all-gather of the first layer's weights."""
        if self.overlap.oag:
            self.iterator = self._prefetch(list(layers))
            self._advance()

    def _prefetch(self, layers: list[ShardedLayer]) -> Iterator[None]:
        for layer in layers:
            weight = layer.weight
            if id(weight) not in self.cache:
                if layer.depth_size == 1:
                    self.cache[id(weight)] = (weight, None)
                else:
                    out = weight.new_empty(weight.shape[0] * layer.depth_size)
                    handle = _all_gather_into(
                        out, weight.detach(), group=layer.depth_group, async_op=True
                    )
                    self.cache[id(weight)] = (out, handle)
            yield

    def _advance(self) -> None:
        if self.iterator is not None:
            next(self.iterator, None)

    @contextmanager
    def scope(self, layers: Iterable[ShardedLayer]) -> Iterator[None]:
        """Restart prefetching over `layers` (a checkpointed block's forward/recompute),
        as axonn's overlap_all_gathers_for_checkpointed_forward."""
        if self.iterator is None:
            yield
            return
        outer = self.iterator
        self.iterator = self._prefetch(list(layers))
        self._advance()
        try:
            yield
        finally:
            self.iterator = outer

    # --- the weight all-gather over Z ----------------------------------------------
    @torch.no_grad()
    def gather_weight(self, layer: ShardedLayer, weight: torch.Tensor) -> torch.Tensor:
        """The layer's W-block, gathered over Z (prefetched if OAG issued it)."""
        if layer.depth_size == 1:
            return weight
        cached = self.cache.pop(id(weight), None)
        if cached is not None:
            out, handle = cached
            self._advance()
            if handle is not None:
                handle.wait()
            return out
        pieces = [torch.empty_like(weight) for _ in range(layer.depth_size)]
        pieces[dist.get_rank(layer.depth_group)] = weight
        dist.all_gather(pieces, weight.contiguous(), group=layer.depth_group)
        return torch.cat(pieces)

    # --- ORS: reduce-scatter of dW over Z, waited once after the whole backward ------
    @torch.no_grad()
    def reduce_scatter(
        self, layer: ShardedLayer, grad: torch.Tensor, async_op: bool
    ) -> torch.Tensor:
        """dW summed over Z, this rank's 1/Gz flat shard (asynchronous if `async_op`)."""
        if layer.depth_size == 1:
            return grad
        out = grad.new_empty(grad.shape[0] // layer.depth_size)
        handle = _reduce_scatter_into(out, grad, group=layer.depth_group, async_op=async_op)
        if async_op:
            self.handles.append(handle)
        return out

    def accumulate_later(self, param: torch.nn.Parameter, grad: torch.Tensor) -> None:
        """Defer `grad` (an ORS reduce-scatter output) until end_backward."""
        self.pending.append((param, grad))

    @torch.no_grad()
    def end_backward(self) -> None:
        """Wait for every pending collective, then add the deferred dW into `.grad`."""
        for handle in self.handles:
            handle.wait()
        self.handles = []
        for param, grad in self.pending:
            if param.grad is None:
                param.grad = grad.to(param.dtype)
            else:
                param.grad.add_(grad.to(param.dtype))
        self.pending = []
        self.cache.clear()
        self.iterator = None
