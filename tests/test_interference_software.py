"""Interference as the software launches its kernels (simulator/cost/interference.py):
Hopper's persistent GEMMs beside a collective, GEMMs launched with an SM margin beside
Transformer Engine's userbuffers kernels (one mechanism, no double count), NCCL's
channel rules for rings and point-to-point transfers (closed forms and oracles)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.cost.interference import (
    Footprint,
    InterferenceModel,
    copy_engine_hbm_bytes,
    gemm_launch,
    library_for,
    persistent_rounds,
)
from simulator.cost.kernels import KernelModel
from tests.strategy_helpers import hybrid
from topologies.hardware import gpu_spec
from workloads.hybrid.params import MegatronParallel
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import CollectiveOp, ComputeKind, ComputeOp

NCCL_RING = Footprint(24, 0.0)


def _model(gpu: str) -> InterferenceModel:
    km = KernelModel(gpu)
    return InterferenceModel.for_gpu(
        gpu_spec(gpu), None, km.hbm_Bps, km.efficiency_on, km.gemm_tiles
    )


def _gemm(m: int, n: int, k: int, margin: int = 0) -> ComputeOp:
    return ComputeOp(
        "g", ComputeKind.GEMM, 2.0 * m * n * k, 2.0 * (m * k + k * n + m * n),
        shape=(m, n, k), sm_margin=margin,
    )  # fmt: skip


# ------------------------------------------------------------------ persistent GEMMs
def test_persistent_rounds_closed_form() -> None:
    """G = min(tiles, SMs) CTAs, one per SM: with fewer SMs free, ceil(G / free) rounds."""
    assert persistent_rounds(1920, 132, 132) == 1.0
    assert persistent_rounds(1920, 132, 108) == 2.0  # 132 CTAs on 108 SMs
    assert persistent_rounds(120, 132, 108) == 2.0  # 120 tiles: 120 CTAs, still > 108
    assert persistent_rounds(100, 132, 108) == 1.0  # fits beside the collective
    assert persistent_rounds(1920, 132, 40) == 4.0


@given(st.integers(1, 10_000), st.integers(1, 132))
def test_persistent_rounds_never_below_one_and_monotone(tiles: int, free: int) -> None:
    r = persistent_rounds(tiles, 132, free)
    assert r >= 1.0
    assert persistent_rounds(tiles, 132, max(free - 1, 1)) >= r


def test_hopper_launches_persistent_gemms_ampere_tiles() -> None:
    """The TraceLens H100 trace's cuBLAS sm90 GEMMs launch numSms CTAs; the HTA A100
    traces' grids are tile counts (data/interference.yaml gemm_launch)."""
    assert gemm_launch("h100") == "persistent"
    assert gemm_launch("a100-80gb") == "tiles"
    assert gemm_launch("mi300x") == "tiles"


def test_a_large_gemm_beside_nccl_doubles_on_h100_only() -> None:
    """pytorch/pytorch#143988: FSDP's matmuls took 2x as long beside a NCCL kernel on
    H100 (persistent, 132 CTAs); an A100 GEMM of many tile waves loses the SM share."""
    g = _gemm(8192, 8192, 8192)
    assert _model("h100").stretch(g, [NCCL_RING]) == pytest.approx(2.0)
    assert _model("a100-80gb").stretch(g, [NCCL_RING]) == pytest.approx(108 / 84, rel=0.03)


# ------------------------------------------------------------------ SM margins
@pytest.mark.parametrize("gpu", ["h100", "a100-80gb"])
def test_a_margin_gemm_loses_nothing_to_blocks_within_its_margin(gpu: str) -> None:
    """A GEMM launched with TE's set_sm_margin already runs on N - 16 SMs (priced by the
    kernel model, simulator/cost/sm_share.py): a 16-SM userbuffers kernel beside it
    takes nothing more (no double count)."""
    m = _model(gpu)
    assert m.stretch(_gemm(8192, 8192, 8192, margin=16), [Footprint(16, 0.0)]) == 1.0
    assert m.stretch(_gemm(8192, 8192, 8192, margin=16), [Footprint(8, 0.0)]) == 1.0


def test_blocks_beyond_the_margin_cost_what_they_take_from_it() -> None:
    """A NCCL ring (24 blocks) beside a 16-SM userbuffers kernel and a margin GEMM: the
    persistent grid of 116 CTAs has 132 - 40 = 92 SMs: two rounds; on A100 the waves
    re-quantise from 92 to 68 SMs."""
    big = _gemm(8192, 8192, 8192, margin=16)
    both = [Footprint(16, 0.0), NCCL_RING]
    assert _model("h100").stretch(big, both) == pytest.approx(2.0)
    assert _model("a100-80gb").stretch(big, both) == pytest.approx(92 / 68, rel=0.04)


def test_userbuffers_collectives_carry_their_sms() -> None:
    """Ring exchanges move data on the copy engines (0 SMs); pipeline and bulk kernels
    hold num_sm SMs (TE get_default_config: 16)."""
    spec = TransformerSpec(name="o", layers=2, hidden=64, heads=8, seq_len=64, vocab=128)
    params = MegatronParallel(tp=4, sequence_parallel=True, tp_comm_overlap=True)
    _, g = hybrid(params, 4, tp=4, spec=spec)
    ub = [op for op in g.programs[0].ops if isinstance(op, CollectiveOp) and ".ub_" in op.name]
    assert ub
    for op in ub:
        if op.kind is K.RING_EXCHANGE:
            assert op.sms == 0
        else:
            assert op.sms == 16
    nccl = [
        op for op in g.programs[0].ops if isinstance(op, CollectiveOp) and ".ub_" not in op.name
    ]
    assert all(op.sms is None for op in nccl)


def test_footprint_takes_the_software_s_sms() -> None:
    """A fixed SM count replaces NCCL's channel rule; a copy-engine transfer holds none
    and moves 2 HBM bytes per byte received (read on the sender, write on the receiver)."""
    m = _model("h100")
    nccl = m.footprint(K.REDUCE_SCATTER, 2**30, 8, "intra_node", "Simple", 0.01)
    ub = m.footprint(K.REDUCE_SCATTER, 2**30, 8, "intra_node", "Simple", 0.01, sms=16)
    ce = m.footprint(K.RING_EXCHANGE, 2**28, 8, "intra_node", "Simple", 0.01, sms=0)
    assert (nccl.blocks, ub.blocks, ce.blocks) == (24, 16, 0)
    assert ub.hbm_Bps == pytest.approx(nccl.hbm_Bps)
    assert ce.hbm_Bps == pytest.approx(copy_engine_hbm_bytes() * 2**28 / 0.01)
    assert m.stretch(_gemm(8192, 8192, 8192), [ce]) == 1.0  # the GEMM keeps every SM


# ------------------------------------------------------------------ NCCL's channels
def _nccl_ring_channels(links: int, link_GBps: float, speeds: list[float], dup_at: float) -> int:
    """Oracle of NCCL's rule for an 8-GPU NVSwitch node (src/graph/search.cc, connect.cc):
    the most channels of the fastest speed step the GPU's NVLink bandwidth carries,
    doubled when that speed reaches the duplication threshold, doubled again by
    ncclTopoPostset, at most MAXCHANNELS = 32."""
    total = links * link_GBps
    speed = next(s for s in speeds if s <= total)
    n = int(total // speed)
    if speed >= dup_at:
        n *= 2
    return min(32, 2 * n)


def test_ring_channels_follow_nccl_s_search() -> None:
    a100 = _nccl_ring_channels(12, 20.0, [40.0, 30.0, 20.0], 25.0)  # 2.18: SM80_NVLINK_BW 20
    h100 = _nccl_ring_channels(18, 20.6, [60.0, 50.0, 40.0], 50.0)  # 2.20: SM90 20.6
    lib = library_for("nvidia", None)
    assert a100 == h100 == lib.ring_channels["intra_node"] == 24


def test_p2p_kernels_hold_the_channels_per_peer() -> None:
    """A pipeline send to another node runs NCCL_NCHANNELS_PER_NET_PEER = 2 blocks."""
    m = _model("a100-80gb")
    inter = m.footprint(K.SEND_RECV, 2**28, 2, "inter_node", "Simple", 0.01)
    intra = m.footprint(K.SEND_RECV, 2**28, 2, "intra_node", "Simple", 0.01)
    assert (inter.blocks, intra.blocks) == (2, 24)
    # two SMs: at most one more tile wave of the 19 an 8192^3 GEMM runs on 108 SMs
    two = m.stretch(_gemm(8192, 8192, 8192), [inter])
    assert 1.0 <= two <= 20 / 19 + 1e-9 < m.stretch(_gemm(8192, 8192, 8192), [intra])
