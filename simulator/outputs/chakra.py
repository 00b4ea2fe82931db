"""Chakra execution traces (MLCommons Chakra ET) of a simulation, for ASTRA-sim users.

Why: ASTRA-sim and other Chakra consumers replay per-rank execution traces; exporting the
simulated program lets them cross-check axsim on the same workload. The program's op
vocabulary follows Chakra's (compute, collective, send, recv, dependencies), so this is
an adapter (docs/DESIGN.md).

Files (`axsim simulate --out DIR --chakra`), the layout ASTRA-sim reads:
- `chakra/et.<rank>.et`: Chakra's protobuf stream (`GlobalMetadata`, then one `Node`
  per op, each length-prefixed as Chakra's `protolib.encodeMessage` writes it);
- `chakra/comm_group.json`: the communicator-group file (`--comm-group-configuration`),
  process-group name -> member ranks, with the names the nodes' `pg_name` attribute uses
  (simulator/outputs/trace_names.py numbering, shared with the Kineto traces).

Nodes: compute ops are COMP_NODE (`num_ops` FLOPs, `tensor_size` bytes, the simulated
`duration_micros`), collectives COMM_COLL_NODE (`comm_type`, `comm_size` = the full
buffer as nccl-tests counts it, `pg_name`), sends and receives COMM_SEND/RECV_NODE
(`comm_src`, `comm_dst` global ranks, `comm_tag`, `comm_size`). `data_deps` are the
program's dependencies; `ctrl_deps` the previous op on the same stream. A `handle.wait()`
is not a node: the ops that follow it depend on the collective it waited for.
Needs the `chakra` extra (`pip install 'axsim[chakra]'`: mlc-chakra).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from simulator.errors import ConfigError
from simulator.outputs.trace_context import TraceContext
from workloads.ops import CollectiveKind, CollectiveOp, ComputeOp, RecvOp, SendOp, WaitOp

ET_VERSION = (
    "1.0.0"  # GlobalMetadata.version, as Chakra's own generator writes it (mlc-chakra 1.0.0,
)
# chakra/src/generator/generator.py)

_COMM_TYPE = {  # CollectiveCommType of et_def.proto
    CollectiveKind.ALL_REDUCE: "ALL_REDUCE",
    CollectiveKind.REDUCE: "REDUCE",
    CollectiveKind.ALL_GATHER: "ALL_GATHER",
    CollectiveKind.BROADCAST: "BROADCAST",
    CollectiveKind.ALL_TO_ALL: "ALL_TO_ALL",
    CollectiveKind.REDUCE_SCATTER: "REDUCE_SCATTER",
}


def chakra_schema() -> Any:
    try:
        from chakra.schema.protobuf import et_def_pb2
    except ImportError:
        raise ConfigError(
            "--chakra: Chakra is not installed (pip install 'axsim[chakra]')"
        ) from None
    return et_def_pb2


def write_chakra_traces(out_dir: Path, ctx: TraceContext, ranks: list[int]) -> list[Path]:
    """One `et.<rank>.et` per rank in `ranks` and `comm_group.json` (module doc)."""
    pb = chakra_schema()
    from chakra.src.third_party.utils.protolib import encodeMessage

    out_dir.mkdir(parents=True, exist_ok=True)
    groups = out_dir / "comm_group.json"
    groups.write_text(json.dumps(ctx.registry.all_groups()))
    paths = [groups]
    for rank in ranks:
        path = out_dir / f"et.{rank}.et"
        with path.open("wb") as f:
            meta = pb.GlobalMetadata(version=ET_VERSION)
            meta.attr.append(pb.AttributeProto(name="schema", string_val=f"axsim-{ET_VERSION}"))
            meta.attr.append(pb.AttributeProto(name="rank", int64_val=rank))
            encodeMessage(f, meta)
            for node in rank_nodes(pb, ctx, rank):
                encodeMessage(f, node)
        paths.append(path)
    return paths


def rank_nodes(pb: Any, ctx: TraceContext, rank: int) -> list[Any]:
    """The Chakra nodes of one rank's program (node id = op index)."""
    info = ctx.rank_info(rank)
    tl = info.timeline
    ops = ctx.result.plan.graph.program_of(rank).ops
    done_by: list[tuple[int, ...]] = []  # op i finished <=> these nodes finished
    last_on_stream: dict[str, int] = {}
    nodes = []
    for i, op in enumerate(ops):
        deps: set[int] = set()
        for d in op.deps:
            deps.update(done_by[d])
        prev = last_on_stream.get(op.stream)
        ctrl = set(done_by[prev]) if prev is not None else set()
        last_on_stream[op.stream] = i
        if isinstance(op, WaitOp):
            done_by.append(tuple(sorted(deps | ctrl | set(done_by[op.target]))))
            continue
        done_by.append((i,))
        node = pb.Node(id=i, name=op.name)
        node.data_deps.extend(sorted(deps))
        node.ctrl_deps.extend(sorted(ctrl - deps))
        node.start_time_micros = int(float(tl.start_s[i]) * 1e6)
        node.duration_micros = round(float(tl.end_s[i] - tl.start_s[i]) * 1e6)
        attr = node.attr
        attr.append(pb.AttributeProto(name="is_cpu_op", bool_val=False))
        attr.append(pb.AttributeProto(name="stream", string_val=op.stream))
        if isinstance(op, ComputeOp):
            node.type = pb.COMP_NODE
            attr.append(pb.AttributeProto(name="num_ops", int64_val=int(op.flops)))
            attr.append(pb.AttributeProto(name="tensor_size", uint64_val=int(op.bytes)))
            attr.append(pb.AttributeProto(name="op_type", string_val=str(op.kind)))
        elif isinstance(op, CollectiveOp):
            node.type = pb.COMM_COLL_NODE
            comm = _COMM_TYPE.get(op.kind)
            if comm is None:  # pragma: no cover - programs have no collective send-recv
                raise ConfigError(f"--chakra: no Chakra collective type for {op.kind}")
            attr.append(
                pb.AttributeProto(name="comm_type", int64_val=pb.CollectiveCommType.Value(comm))
            )
            attr.append(pb.AttributeProto(name="comm_size", int64_val=int(op.bytes)))
            attr.append(pb.AttributeProto(name="pg_name", string_val=info.pg_name[i]))
        elif isinstance(op, SendOp | RecvOp):
            send = isinstance(op, SendOp)
            node.type = pb.COMM_SEND_NODE if send else pb.COMM_RECV_NODE
            src, dst = (rank, int(info.peer[i])) if send else (int(info.peer[i]), rank)
            attr.append(pb.AttributeProto(name="comm_src", int32_val=src))
            attr.append(pb.AttributeProto(name="comm_dst", int32_val=dst))
            attr.append(pb.AttributeProto(name="comm_tag", int32_val=int(info.seq[i])))
            attr.append(pb.AttributeProto(name="comm_size", int64_val=int(op.bytes)))
            attr.append(pb.AttributeProto(name="pg_name", string_val=info.pg_name[i]))
        nodes.append(node)
    return nodes
