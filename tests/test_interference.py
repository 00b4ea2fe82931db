"""Interference from its mechanism (simulator/cost/interference.py): the launch rules,
the stretch of a kernel beside resident collectives, HIP's queue assignment, and the
engine's static overlap replay with them (closed forms and properties)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.config import load_config
from simulator.cost.interference import (
    Footprint,
    InterferenceModel,
    StreamSetup,
    launched_channels,
    library_for,
    queue_assignment,
    received_bytes,
    serialised_streams,
)
from simulator.cost.kernels import KernelModel
from simulator.engine.compiled import (
    COLL,
    COMPUTE,
    WAIT,
    CommInfo,
    estimate_loaded_overlap,
    estimate_overlap,
)
from topologies.hardware import gpu_spec
from workloads.graph import Program
from workloads.ops import CollectiveKind as K
from workloads.ops import CollectiveOp, ComputeKind, ComputeOp, WaitOp

MI250X = gpu_spec("mi250x-gcd")


def _model(gpu: str = "mi250x-gcd", machine: str | None = "frontier") -> InterferenceModel:
    km = KernelModel(gpu)
    return InterferenceModel.for_gpu(gpu_spec(gpu), machine, km.hbm_Bps, km.efficiency_on)


# ------------------------------------------------------------------ launch rules
def test_channels_follow_nccls_threshold_rule() -> None:
    """NCCL drops a channel while nBytes < channels x threads x threshold (enqueue.cc)."""
    rccl = library_for("amd", "frontier")
    assert rccl.name == "rccl" and rccl.ring_channels == {"intra_node": 16, "inter_node": 16}
    assert launched_channels(rccl, 16, "Simple", 1e9) == 16  # a large buffer: all
    # Simple: 256 threads x 64 B per channel; 100 KB keeps floor(100e3 / 16384) = 6
    assert launched_channels(rccl, 16, "Simple", 100e3) == 6
    assert launched_channels(rccl, 16, "Simple", 1.0) == 1
    nccl = library_for("nvidia", None)
    assert nccl.name == "nccl" and nccl.max_threads["Simple"] == 512
    assert library_for("nvidia", "perlmutter").ring_channels["inter_node"] == 8


def test_received_bytes_are_the_bus_bytes() -> None:
    assert received_bytes(K.ALL_REDUCE, 100.0, 4) == pytest.approx(150.0)
    assert received_bytes(K.ALL_GATHER, 100.0, 4) == pytest.approx(75.0)
    assert received_bytes(K.ALL_GATHER, 100.0, 1) == 0.0


# ------------------------------------------------------------------ stretch
def test_large_gemm_loses_the_resident_blocks_share() -> None:
    """A GEMM of many full waves runs on the CUs the collective leaves: N / (N - C)."""
    m = _model()
    fp = m.footprint(K.ALL_GATHER, 2**30, 64, "inter_node", "Simple", 0.1)
    assert fp.blocks == 16
    gemm = ComputeOp("g", ComputeKind.GEMM, 2.0 * 2**42, 0.0, shape=(16384, 16384, 16384))
    assert m.stretch(gemm, [fp]) == pytest.approx(110 / 94, rel=0.02)
    # a small GEMM whose tiles fit on the CUs left is hardly slowed at all
    small = ComputeOp("s", ComputeKind.GEMM, 2.0 * 256**3, 0.0, shape=(256, 256, 256))
    assert m.stretch(small, [fp]) == pytest.approx(1.0)


def test_memory_bound_kernel_loses_the_hbm_share() -> None:
    """An element-wise kernel beside a collective's data path: 1 / (1 - HBM share)."""
    m = _model()
    fp = Footprint(16, 0.25 * m.hbm_Bps)
    op = ComputeOp("e", ComputeKind.ELEMENTWISE, 0.0, 1e9)
    assert m.stretch(op, [fp]) == pytest.approx(1 / 0.75)
    assert m.stretch(op, []) == 1.0


def test_a_gemm_at_its_memory_bound_loses_the_hbm_share_too() -> None:
    """Roofline: a GEMM already streaming at the HBM rate alone (a skinny one) cannot
    stream faster than what the collective leaves; a compute-bound one keeps its SMs'
    stretch."""
    m = _model()
    fp = Footprint(0, 0.5 * m.hbm_Bps)
    skinny = ComputeOp("s", ComputeKind.GEMM, 2.0 * 64 * 8192 * 8192, 2.0 * 8192 * 8192)
    alone = skinny.bytes / m.hbm_Bps  # its memory time is all of its time alone
    assert m.stretch(skinny, [fp], alone) == pytest.approx(2.0)
    assert m.stretch(skinny, [fp], 10 * alone) == 1.0  # far from its memory bound


@settings(max_examples=40, deadline=None)
@given(
    blocks=st.lists(st.integers(0, 200), max_size=4),
    hbm=st.floats(0.0, 1e13),
    m=st.integers(1, 20000),
    n=st.integers(1, 20000),
    k=st.integers(1, 20000),
)
def test_stretch_never_speeds_up_and_grows_with_load(
    blocks: list[int], hbm: float, m: int, n: int, k: int
) -> None:
    model = _model()
    gemm = ComputeOp("g", ComputeKind.GEMM, 2.0 * m * n * k, 0.0, shape=(m, n, k))
    fps = [Footprint(b, hbm) for b in blocks]
    s = model.stretch(gemm, fps, 1e-3)
    assert s >= 1.0
    assert model.stretch(gemm, [*fps, Footprint(8, hbm)], 1e-3) >= s - 1e-12
    elt = ComputeOp("e", ComputeKind.ELEMENTWISE, 0.0, 1e6)
    assert model.stretch(elt, fps) >= 1.0


# ------------------------------------------------------------------ hardware queues
def test_eager_pool_puts_every_fourth_pool_stream_on_the_compute_queue() -> None:
    """Null stream first (queue 0), then PyTorch's 32 pool streams at once: stream k
    takes queue (k + 1) mod 4, the least used, first of equals (HIP getQueueFromPool)."""
    comms = [f"g{i}" for i in range(8)]
    compute, q = queue_assignment(comms, StreamSetup("eager", ()), 4, 2)
    assert compute == 0
    assert [q[c] for c in comms] == [(k + 1) % 4 for k in range(8)]


def test_lazy_pool_interleaves_the_librarys_streams() -> None:
    """Lazily created pool streams interleave with each communicator's two internal
    streams (created at ncclGroupEnd, after the pool stream): after the world group's
    three, the second communicator lands on the compute stream's queue."""
    _, q = queue_assignment(["z", "x", "y"], StreamSetup("lazy", ("world",)), 4, 2)
    assert q["world"] == 1 and q["z"] == 0
    pairs = [("comm:z", "z"), ("comm:x", "x"), ("comm:y", "y")]
    assert serialised_streams(pairs, "amd", StreamSetup("lazy", ("world",))) == {"comm:z"}
    assert serialised_streams(pairs, "nvidia", StreamSetup("lazy", ("world",))) == set()


# ------------------------------------------------------------------ static replay
def _program() -> tuple[Program, list[int], list[int], list[CommInfo | None]]:
    """compute A (1 s); a collective issued after A (1 s); compute B (2 s); wait."""
    ops = (
        ComputeOp("A", ComputeKind.GEMM, 1.0, 0.0),
        CollectiveOp("ag", K.ALL_GATHER, "z", 2**30, "t", "comm:z", deps=(0,)),
        ComputeOp("B", ComputeKind.GEMM, 1.0, 0.0, deps=(0,)),
        WaitOp("w", target=1, deps=(2,)),
    )
    prog = Program("p", ops)
    kinds = [COMPUTE, COLL, COMPUTE, WAIT]
    base = [10**12, 0, 2 * 10**12, 0]
    comms: list[CommInfo | None] = [None, CommInfo("z", 0, K.ALL_GATHER, 2**30), None, None]
    return prog, kinds, base, comms


def test_loaded_overlap_stretches_only_the_covered_part() -> None:
    prog, kinds, base, comms = _program()
    fp = Footprint(11, 0.0)

    def stretch(op: ComputeOp, fps: list[Footprint], alone: float) -> float:
        return 1.0 + 0.1 * sum(f.blocks for f in fps) / 11

    over, extra = estimate_loaded_overlap(
        prog, kinds, base, comms, lambda i, k: 1.0, lambda i, k: fp, stretch
    )
    assert over == [0.0, 0.0, 1.0, 0.0]  # B overlaps the collective's one second
    assert extra[2] == 10**11  # 1 s x (1.1 - 1)
    assert over == estimate_overlap(prog, kinds, base, comms, lambda i, k: 1.0)


def test_serialised_collective_overlaps_nothing() -> None:
    prog, kinds, base, comms = _program()
    over = estimate_overlap(prog, kinds, base, comms, lambda i, k: 1.0, frozenset({1}))
    assert over == [0.0, 0.0, 0.0, 0.0]


# ------------------------------------------------------------------ end to end
def _frontier(impl: str, mode: str = "symmetric"):  # type: ignore[no-untyped-def]
    from simulator.api import simulate

    cfg = load_config(
        None,
        [
            "cluster.machine=frontier",
            "cluster.gpus=16",
            "model.name=gpt-tiny",
            "training.batch_tokens=131072",
            "parallel.grid={x: 2, y: 2, z: 2, data: 2}",
            f"parallel.implementation={impl}",
            f"engine.mode={mode}",
        ],
    )
    return simulate(cfg)


def test_shared_queue_serialises_in_both_engine_modes() -> None:
    """The communicator on the compute stream's queue (litgpt's eager pool after the world
    group: the third one of its program, Y) ends every collective before the next compute
    kernel starts; full and symmetric runs agree."""
    full, sym = _frontier("litgpt", "full"), _frontier("litgpt", "symmetric")
    assert full.report.iteration_time_s == sym.report.iteration_time_s
    queue = [c for c in sym.report.choices if c["what"] == "hardware queue"]
    assert [q["value"] for q in queue] == ["comm:y"]
    tl = sym.engine.timeline.rank(0)
    y = tl.stream == "comm:y"
    comp = tl.stream == "compute"
    assert y.any()
    for a, b in zip(tl.start_s[y], tl.end_s[y], strict=True):  # no kernel beside a Y one
        assert not ((tl.start_s[comp] < b - 1e-12) & (tl.end_s[comp] > a + 1e-12)).any()


def test_the_mechanism_stretches_compute_where_collectives_overlap() -> None:
    res = _frontier("sc24")
    rows = res.report.compute_by_kind_s
    assert rows["interference"] > 0
    terms = res.report.kernel_terms
    assert terms["interference"]["mechanism"]["library"] == "rccl"  # type: ignore[index]
