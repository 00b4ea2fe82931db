"""The OpGraph of one torch4d training step, op for op (validation/torch4d).

Why a separate program: the CPU closed loop (calibrate on one grid, predict another) only
means something if the simulator replays exactly what the traced run did. torch4d is not
AxoNN's production stack: a GPT block stack without embedding or logits, LayerNorm split
over X with its row statistics all-reduced over X in forward *and* backward, heads over Y,
collectives issued even on groups of size 1, per-tensor gradient all-reduces in axonn's
order, a loss on random targets and the data generated inside the profiled step. This
module mirrors validation/torch4d (model.py, linear.py, comm.py, axsim_impl.py, train.py)
call for call, with the same overlap logic (OAR, ORS, OAG with its prefetch iterator and
checkpoint scopes) and reentrant checkpointing (the forward recomputed, collectives
included, right before each block's backward).

Granularity: one compute op per GEMM, per attention call and per group of element-wise
ATen ops that touch the same tensors (a LayerNorm's statistics, its normalisation, a bias
add, a residual add...), with bytes counted as passes over those tensors. Views and
reshapes are free. Group kinds are AxoNN's ("x", "y", "z", "data"), members in rank order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import ConfigError
from topologies.user_files import read_user_text
from topologies.yaml_loader import NestingError, load_user_json
from validation.torch4d.config import Grid, ModelDims, Overlap, RunSpec
from workloads.axonn.grid import axonn_groups
from workloads.axonn.layers import LinearLayout, linear_layout
from workloads.axonn.params import Grid as AxGrid
from workloads.builder import ProgramBuilder
from workloads.graph import OpGraph, Program
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C
from workloads.transformer import (
    ATTENTION_BACKWARD_FACTOR,
    CAUSAL_ATTENTION_FRACTION,
    optimizer_step,
)

DTYPE_BYTES = {"float32": 4, "float64": 8, "bfloat16": 2}
LINEARS = ("qkv", "attn_out", "mlp_up", "mlp_down")
TORCH4D_GROUPS = {"X": "x", "Y": "y", "Z": "z", "data": "data"}
"""torch4d's group kinds (run.json, axsim_<kind> in traces) -> the simulator's."""


class _Step:
    """Writes one rank's step; mirrors torch4d's CommState (prefetch cache and handles)."""

    def __init__(self, spec: RunSpec) -> None:
        g, d = spec.grid, spec.dims
        self.spec, self.dims, self.ov = spec, d, spec.overlap
        self.grid = AxGrid(x=g.x, y=g.y, z=g.z, data=g.data)
        self.db = DTYPE_BYTES[spec.dtype]
        self.rows = d.batch // (g.z * g.data)
        self.M = self.rows * d.seq_len
        self.res = self.M * (d.hidden // g.x)  # residual stream elements on this rank
        self.heads = d.heads // g.y
        self.layouts = [linear_layout(n, k, o, t, self.grid) for n, k, o, t in d.linear_shapes()]
        self.b = ProgramBuilder("torch4d")
        self.cache: dict[str, int | None] = {}
        self.iterator: Iterator[None] | None = None
        self.rs_handles: list[int] = []

    # ------------------------------------------------------------ primitives
    def ew(self, name: str, elems: float, passes: float) -> None:
        """Element-wise ATen ops reading/writing `passes` tensors of `elems` elements."""
        self.b.compute(name, C.ELEMENTWISE, elems, passes * elems * self.db, dtype_bytes=self.db)

    def all_reduce(self, name: str, group: str, elems: float, blocking: bool = True) -> int:
        return self.b.collective(name, K.ALL_REDUCE, group, elems * self.db, blocking=blocking)

    # ------------------------------------------------- CommState (Z and OAG)
    def _prefetch(self, layers: list[tuple[LinearLayout, str]]) -> Iterator[None]:
        for lay, tag in layers:
            if tag not in self.cache:
                self.cache[tag] = (
                    None if lay.gz == 1 else self._gather(lay, f"{tag}.ag_z", blocking=False)
                )
            yield

    def _advance(self) -> None:
        if self.iterator is not None:
            next(self.iterator, None)

    def _gather(self, lay: LinearLayout, name: str, blocking: bool) -> int:
        return self.b.collective(
            name, K.ALL_GATHER, "z", lay.gathered_elems * self.db, blocking=blocking
        )

    def gather_weight(self, lay: LinearLayout, tag: str, suffix: str = "") -> None:
        """The W-block over Z: the prefetched all-gather, else a blocking one."""
        if lay.gz == 1:
            return
        if tag in self.cache:
            handle = self.cache.pop(tag)
            self._advance()
            if handle is not None:
                self.b.wait(handle)
            return
        self._gather(lay, f"{tag}{suffix}.ag_z", blocking=True)

    def reduce_scatter(self, lay: LinearLayout, tag: str, async_op: bool) -> None:
        if lay.gz == 1:
            return
        h = self.b.collective(
            f"{tag}.rs_z",
            K.REDUCE_SCATTER,
            "z",
            lay.gathered_elems * self.db,
            blocking=not async_op,
        )
        if async_op:
            self.rs_handles.append(h)

    def block_scope_begin(self, layer: int) -> Iterator[None] | None:
        """CommState.scope: restart the prefetch over one block's linears (checkpointing)."""
        if self.iterator is None or not self.spec.checkpoint:
            return None
        outer = self.iterator
        self.iterator = self._prefetch(self.tags(layer))
        self._advance()
        return outer

    def tags(self, layer: int) -> list[tuple[LinearLayout, str]]:
        return [(lay, f"L{layer}.{name}") for lay, name in zip(self.layouts, LINEARS, strict=True)]

    # ---------------------------------------------------------------- layers
    def linear_forward(self, lay: LinearLayout, tag: str) -> None:
        self.gather_weight(lay, tag)
        self.b.gemm(f"{tag}.fwd", self.M, lay.n_local, lay.k_local, self.db)
        self.all_reduce(f"{tag}.ar_{lay.group_k}.fwd", lay.group_k, self.M * lay.n_local)
        self.ew(f"{tag}.bias.fwd", self.M * lay.n_local, 2)

    def linear_backward(self, lay: LinearLayout, tag: str) -> None:
        b, ov, out_elems = self.b, self.ov, self.M * lay.n_local
        self.ew(f"{tag}.bias.bwd", out_elems, 1)  # bias gradient: a sum over tokens
        self.gather_weight(lay, tag, ".bwd")
        if lay.g_n > 1 or not ov.ors:
            b.gemm(f"{tag}.dI", self.M, lay.k_local, lay.n_local, self.db)
            h = self.all_reduce(
                f"{tag}.ar_{lay.group_n}.bwd",
                lay.group_n,
                self.M * lay.k_local,
                blocking=not ov.oar,
            )
            b.gemm(f"{tag}.dW", lay.n_local, lay.k_local, self.M, self.db)
            self.reduce_scatter(lay, tag, ov.ors)
            if ov.oar:
                b.wait(h)
            return
        b.gemm(f"{tag}.dW", lay.n_local, lay.k_local, self.M, self.db)  # dW first (axonn)
        self.reduce_scatter(lay, tag, True)
        b.gemm(f"{tag}.dI", self.M, lay.k_local, lay.n_local, self.db)

    def layernorm_forward(self, name: str) -> None:
        if self.grid.x == 1:
            self.ew(f"{name}.fwd", self.res, 2)  # F.layer_norm
            return
        self.ew(f"{name}.stats.fwd", self.res, 4)
        self.all_reduce(f"{name}.ar_x.fwd", "x", 2 * self.M)
        self.ew(f"{name}.norm.fwd", self.res, 8)

    def layernorm_backward(self, name: str) -> None:
        if self.grid.x == 1:
            self.ew(f"{name}.bwd", self.res, 5)
            return
        self.ew(f"{name}.stats.bwd", self.res, 7)
        self.all_reduce(f"{name}.ar_x.bwd", "x", 2 * self.M)
        self.ew(f"{name}.dx.bwd", self.res, 9)
        self.ew(f"{name}.params.bwd", self.res, 5)

    def attention(self, layer: int, backward: bool) -> None:
        d = self.dims
        fwd = 4.0 * self.M * d.seq_len * self.heads * d.head_dim * CAUSAL_ATTENTION_FRACTION
        width = self.heads * d.head_dim
        shape = (self.M, d.seq_len, self.heads, d.head_dim)
        flops = ATTENTION_BACKWARD_FACTOR * fwd if backward else fwd
        nbytes = (7 if backward else 4) * self.M * width * self.db
        self.b.compute(
            f"L{layer}.attn.{'bwd' if backward else 'fwd'}", C.ATTENTION, flops, nbytes, shape,
            dtype_bytes=self.db,
        )  # fmt: skip
        self.ew(f"L{layer}.attn_reshape.{'bwd' if backward else 'fwd'}", self.M * width, 2)

    # ---------------------------------------------------------------- blocks
    def block_forward(self, layer: int) -> None:
        outer = self.block_scope_begin(layer)
        (qkv, qt), (out, ot), (up, ut), (down, dt) = self.tags(layer)
        self.layernorm_forward(f"L{layer}.ln1")
        self.linear_forward(qkv, qt)
        self.attention(layer, backward=False)
        self.linear_forward(out, ot)
        self.ew(f"L{layer}.residual1.fwd", self.res, 3)
        self.layernorm_forward(f"L{layer}.ln2")
        self.linear_forward(up, ut)
        self.ew(f"L{layer}.gelu.fwd", self.M * up.n_local, 2)
        self.linear_forward(down, dt)
        self.ew(f"L{layer}.residual2.fwd", self.res, 3)
        if outer is not None:
            self.iterator = outer

    def block_backward(self, layer: int) -> None:
        if self.spec.checkpoint:
            self.b.phase = "recompute"
            self.block_forward(layer)
            self.b.phase = "bwd"
        (qkv, qt), (out, ot), (up, ut), (down, dt) = self.tags(layer)
        self.linear_backward(down, dt)
        self.ew(f"L{layer}.gelu.bwd", self.M * up.n_local, 3)
        self.linear_backward(up, ut)
        self.layernorm_backward(f"L{layer}.ln2")
        self.ew(f"L{layer}.residual1.bwd", self.res, 3)
        self.linear_backward(out, ot)
        self.attention(layer, backward=True)
        self.linear_backward(qkv, qt)
        self.layernorm_backward(f"L{layer}.ln1")
        self.ew(f"L{layer}.residual0.bwd", self.res, 3)

    # ------------------------------------------------------------------ step
    def step(self) -> Program:
        d, b = self.dims, self.b
        b.phase = "data"
        full = self.rows * d.seq_len * d.hidden
        self.ew("data.randn", 2 * full, 1)
        self.ew("data.shard", 2 * self.res, 2)
        b.phase = "fwd"
        if self.ov.oag:
            self.iterator = self._prefetch([t for i in range(d.layers) for t in self.tags(i)])
            self._advance()
        for layer in range(d.layers):
            self.block_forward(layer)
        self.ew("loss.fwd", self.res, 6)
        b.phase = "bwd"
        self.ew("loss.bwd", self.res, 6)
        for layer in reversed(range(d.layers)):
            self.block_backward(layer)
        b.wait_all(self.rs_handles, "wait:rs_z")
        self.cache.clear()
        self.iterator = None
        self.grad_sync()
        b.phase = "optimizer"
        optimizer_step(b, self.local_params(), self.spec.optimizer, master_weights=False)
        return b.build()

    def grad_sync(self) -> None:
        """axonn's sync_gradients order: weights over data; biases, then LayerNorm
        parameters, over data then Z; per tensor, on groups of size 1 too."""
        self.b.phase = "grad-sync"
        layers = range(self.dims.layers)
        for i in layers:
            for lay, name in zip(self.layouts, LINEARS, strict=True):
                self.all_reduce(f"L{i}.{name}.weight.ar_data", "data", lay.shard_elems)
        for i in layers:
            for lay, name in zip(self.layouts, LINEARS, strict=True):
                self.all_reduce(f"L{i}.{name}.bias.ar_data", "data", lay.n_local)
                self.all_reduce(f"L{i}.{name}.bias.ar_z", "z", lay.n_local)
        width = self.dims.hidden // self.grid.x
        for i in layers:
            for p in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"):
                self.all_reduce(f"L{i}.{p}.ar_data", "data", width)
                self.all_reduce(f"L{i}.{p}.ar_z", "z", width)

    def local_params(self) -> float:
        """Parameters this rank holds (weight shards, biases, LayerNorm slices)."""
        per_layer = sum(lay.shard_elems + lay.n_local for lay in self.layouts)
        return self.dims.layers * (per_layer + 4 * self.dims.hidden // self.grid.x)


def build_torch4d_program(spec: RunSpec) -> Program:
    """The per-rank Program of one torch4d step (every rank runs the same one)."""
    return _Step(spec).step()


def build_torch4d_graph(spec: RunSpec) -> OpGraph:
    """The OpGraph of one torch4d training step on `spec.grid`."""
    program = build_torch4d_program(spec)
    g = spec.grid
    world = g.world_size
    groups = axonn_groups(AxGrid(x=g.x, y=g.y, z=g.z, data=g.data))
    graph = OpGraph(
        world_size=world,
        programs=(program,),
        rank_program=np.zeros(world, dtype=np.int64),
        groups=groups,
        rank_class=np.zeros(world, dtype=np.int64),
        name=f"torch4d-{spec.dims.name}-{g}",
        metadata={
            "strategy": "torch4d",
            "grid": dict(zip(("x", "y", "z", "data"), g.as_tuple(), strict=True)),
        },
    )
    graph.validate()
    return graph


def run_spec_from_json(run: dict[str, Any], source: str = "run.json") -> RunSpec:
    """The RunSpec recorded in a torch4d run.json (`config`); ConfigError names the field."""
    cfg = run.get("config")
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: field 'config' is missing (not a torch4d run.json)")
    try:
        dims = {k: v for k, v in cfg["dims"].items() if k not in ("ffn", "params")}
        return RunSpec(
            grid=Grid(**cfg["grid"]),
            dims=ModelDims(**dims),
            overlap=Overlap(**cfg.get("overlap", {})),
            impl=cfg.get("impl", "axsim"),
            steps=int(cfg.get("steps", 1)),
            warmup=int(cfg.get("warmup", 0)),
            timing_steps=int(cfg.get("timing_steps", 0)),
            checkpoint=bool(cfg.get("checkpoint", False)),
            optimizer=cfg.get("optimizer", "adam"),
            dtype=cfg.get("dtype", "float32"),
            seed=int(cfg.get("seed", 0)),
        )
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{source}: field 'config' is malformed ({exc})") from None


def load_run_json(path: str | Path) -> dict[str, Any]:
    """Read a torch4d run.json; ConfigError naming the file when it cannot be used."""
    p = Path(path)
    try:
        data = load_user_json(read_user_text(p))
    except NestingError as exc:
        raise ConfigError(f"{p}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{p}: not a text file (not UTF-8)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{p}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict) or not str(data.get("format", "")).startswith(
        "axsim-torch4d-run"
    ):
        raise ConfigError(f"{p}: not a torch4d run.json (no 'format: axsim-torch4d-run/...')")
    return data
