"""The overlap estimate prices a receive in the direction its bytes move, from the peer
to the receiving rank (simulator/engine/core.py `_comm_estimator`): on a machine whose
two directions differ, a send and its matching receive take the same estimated time."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.cost.model import CostModel, RooflineKernels
from simulator.engine.compiled import RECV, SEND, CommInfo
from simulator.engine.core import Engine
from simulator.network.params import NetworkParams
from simulator.network.pricing import CollectivePricer
from tests.engine_helpers import FLOPS, ShortestPathRouter, graph_of
from topologies.types import (
    DeviceKind,
    DeviceTable,
    LinkKind,
    LinkTable,
    Topology,
    device_kind_code,
    link_kind_code,
)
from workloads.ops import CollectiveKind, RecvOp, SendOp

FAST, SLOW = 100e9, 10e9  # B/s: GPU 0 -> 1, GPU 1 -> 0
NBYTES = 1e9


def _two_gpus_one_way_fast() -> Topology:
    return Topology(
        name="one-way-fast",
        devices=DeviceTable(
            kind=np.array([device_kind_code(DeviceKind.GPU)] * 2, dtype=np.int8),
            node=np.array([0, 1], dtype=np.int32),
            local_index=np.array([0, 0], dtype=np.int32),
            group=np.full(2, -1, dtype=np.int32),
        ),
        links=LinkTable(
            src=np.array([0, 1], dtype=np.int64),
            dst=np.array([1, 0], dtype=np.int64),
            kind=np.full(2, link_kind_code(LinkKind.NIC), dtype=np.int8),
            bandwidth_Bps=np.array([FAST, SLOW]),
            latency_s=np.zeros(2),
        ),
        gpus=np.arange(2, dtype=np.int64),
        gpus_per_node=1,
        router=ShortestPathRouter(),
        metadata={"package_size": 1},
    )


def test_a_receive_is_priced_from_its_peer() -> None:
    topology = _two_gpus_one_way_fast()
    graph = graph_of(
        {
            0: [SendOp("send", "pp", 1, NBYTES, "t", "p2p:pp")],
            1: [RecvOp("recv", "pp", 0, NBYTES, "t", "p2p:pp")],
        },
        {"pp": [[0, 1]]},
        2,
    )
    pricer = CollectivePricer(topology, NetworkParams.ideal(), "ring")
    engine = Engine(graph, topology, CostModel(RooflineKernels(FLOPS), pricer, "contention"))
    send = CommInfo("pp", 0, CollectiveKind.SEND_RECV, NBYTES, peer=1)
    recv = CommInfo("pp", 0, CollectiveKind.SEND_RECV, NBYTES, peer=0)
    sent = engine._comm_estimator(0)(send, SEND)
    received = engine._comm_estimator(1)(recv, RECV)
    assert sent == pytest.approx(NBYTES / FAST, rel=0.05)
    assert received == sent  # not the 10x slower way back
