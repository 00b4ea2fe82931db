"""Context parallelism (Megatron-Core through Transformer Engine): groups, the KV ring and
its overlap with attention, the all-gather and all-to-all variants, work conservation,
memory, engine modes and bad input."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pytest

from tests.cli_helpers import one_line_error
from tests.strategy_helpers import collectives, hybrid, run
from workloads.activations import block_activation_bytes
from workloads.hybrid.memory import activation_shape, context_parallel_buffers, stage_memory
from workloads.hybrid.params import MegatronParallel
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind, ComputeOp

# a small GQA model: 4 layers, hidden 64, 8 heads, 4 key/value heads, sequence 64
SPEC = TransformerSpec(name="t", layers=4, hidden=64, heads=8, kv_heads=4, seq_len=64, vocab=128)
DB = 2


def _kv_bytes(cp: int, tp: int = 1) -> float:
    """This GPU's K and V for one one-sequence microbatch."""
    return DB * (SPEC.seq_len // cp) * 2 * SPEC.kv_dim / tp


def _cp(cp: int, gpus: int, comm: str = "p2p", sequences: int = 0, **kw: object):  # type: ignore[no-untyped-def]
    """A setup and graph with `cp`; one one-sequence microbatch per replica by default."""
    params = MegatronParallel(cp=cp, cp_comm=comm, recompute="none", **kw)  # type: ignore[arg-type]
    tp = int(kw.get("tp", 1) or 1)  # type: ignore[call-overload]
    pp = int(kw.get("pp", 1) or 1)  # type: ignore[call-overload]
    dp = gpus // (tp * pp * cp)
    seqs = sequences or dp * pp
    return hybrid(params, gpus, tp=tp, pp=pp, sequences=seqs, spec=SPEC, checkpointing=False)


def test_groups_follow_megatron_rank_order_tp_cp_dp_pp() -> None:
    setup, g = _cp(2, 16, tp=2, pp=2)
    assert (setup.tp, setup.cp, setup.dp, setup.pp, setup.world) == (2, 2, 2, 2, 16)
    assert g.groups["cp"].members[:2].tolist() == [[0, 2], [1, 3]]
    assert g.groups["dp"].members[0].tolist() == [0, 2, 4, 6]  # data x context parallel
    assert g.groups["pp"].members[0].tolist() == [0, 8]
    assert g.rank_class.tolist() == [0] * 8 + [1] * 8


def _layer0(g, prefix: str = "L0.attn") -> Counter:  # type: ignore[no-untyped-def]
    ops = collectives(g.programs[0], prefix)
    return Counter((op.kind, op.group, op.bytes, op.phase) for op in ops)


@pytest.mark.parametrize("cp", [2, 4])
def test_ring_passes_kv_cp_minus_one_times_and_kv_plus_dkv_back(cp: int) -> None:
    _, g = _cp(cp, cp)
    kv = _kv_bytes(cp)
    want = Counter({(K.RING_EXCHANGE, "cp", kv, "fwd"): cp - 1})
    want[(K.RING_EXCHANGE, "cp", kv, "bwd")] += 2  # step 0 sends KV, the last dKV
    if cp > 2:
        want[(K.RING_EXCHANGE, "cp", 2 * kv, "bwd")] += cp - 2  # KV and dKV together
    assert _layer0(g) == want
    attention = [op for op in g.programs[0].ops if isinstance(op, ComputeOp)
                 and op.kind is ComputeKind.ATTENTION and op.name.startswith("L0.")]  # fmt: skip
    assert len(attention) == 2 * cp  # one kernel per ring step, forward and backward


def test_all_gather_and_all_to_all_variants() -> None:
    cp = 4
    _, g = _cp(cp, cp, "all_gather")
    kv = _kv_bytes(cp)
    assert _layer0(g) == Counter(
        {
            (K.ALL_GATHER, "cp", cp * kv, "fwd"): 1,
            (K.ALL_GATHER, "cp", cp * kv, "bwd"): 1,  # KV gathered again in backward
            (K.REDUCE_SCATTER, "cp", cp * kv, "bwd"): 1,  # dK, dV back to their owners
        }
    )
    _, g = _cp(cp, cp, "a2a")
    tokens = SPEC.seq_len // cp
    qkv, out = DB * tokens * SPEC.qkv_out, DB * tokens * SPEC.hidden
    assert _layer0(g) == Counter(
        {
            (K.ALL_TO_ALL, "cp", qkv, "fwd"): 1,
            (K.ALL_TO_ALL, "cp", out, "fwd"): 1,
            (K.ALL_TO_ALL, "cp", out, "bwd"): 1,
            (K.ALL_TO_ALL, "cp", qkv, "bwd"): 1,
        }
    )


@pytest.mark.parametrize("comm", ["p2p", "all_gather", "a2a"])
def test_context_parallel_does_the_data_parallel_work(comm: str) -> None:
    """cp = 4 over one replica does per GPU the GEMM and attention FLOPs of 4 data-parallel
    replicas: the sequence split is load-balanced for causal attention."""
    _, with_cp = _cp(4, 4, comm, sequences=4)
    _, plain = hybrid(
        MegatronParallel(recompute="none"), 4, sequences=4, spec=SPEC, checkpointing=False
    )

    def flops(g, kind: ComputeKind) -> float:  # type: ignore[no-untyped-def]
        ops = g.programs[0].ops
        mult = {i: 1 for i in range(len(ops))}
        for seg in g.programs[0].segments:  # compressed microbatches stand for copies
            for i in range(seg.start, seg.stop):
                mult[i] = seg.repeat
        return sum(
            mult[i] * op.flops
            for i, op in enumerate(ops)
            if isinstance(op, ComputeOp) and op.kind is kind
        )

    for kind in (ComputeKind.GEMM, ComputeKind.ATTENTION):
        assert flops(with_cp, kind) == pytest.approx(flops(plain, kind), rel=1e-12)
    assert with_cp.groups["dp"].size == 4  # gradients reduced over the context-parallel GPUs


@dataclass(frozen=True)
class AttentionOnly:
    """Only attention kernels take time (1 TFLOP/s)."""

    def duration_s(self, op: ComputeOp) -> float:
        return op.flops / 1e12 if op.kind is ComputeKind.ATTENTION else 0.0


def _forward_ring(bandwidth: float, latency: float, cp: int = 4):  # type: ignore[no-untyped-def]
    _, g = _cp(cp, cp)
    res, _ = run(
        g, mode="full", network="alpha-beta", bandwidth=bandwidth, latency=latency,
        kernels=AttentionOnly(),
    )  # fmt: skip
    tl = res.timeline.rank(0)
    names = [str(n) for n in tl.name]

    def span(prefix: str) -> tuple[np.ndarray, np.ndarray]:
        idx = [i for i, n in enumerate(names) if n.startswith(prefix)][
            : cp if "fwd" in prefix else cp - 1
        ]
        return tl.start_s[idx], tl.end_s[idx]

    return span("L0.attn.fwd"), span("L0.attn.kv_cp.fwd")


@pytest.mark.parametrize("bandwidth,latency", [(1e30, 0.0), (1e6, 1e-3), (2e8, 1e-6)])
def test_ring_overlaps_each_exchange_with_the_step_before(bandwidth: float, latency: float) -> None:
    """Step i waits for exchange i-1 and for step i-1; the exchanges run back to back on
    the ring's stream. So the forward takes t_c + (cp-1) max(t_c, t_x): all compute when
    the network is fast, all transfers when it is slow."""
    cp = 4
    (cs, ce), (xs, xe) = _forward_ring(bandwidth, latency, cp)
    t_c, t_x = ce[0] - cs[0], xe[0] - xs[0]
    assert np.allclose(ce - cs, t_c) and np.allclose(xe - xs, t_x)
    assert xs[0] == pytest.approx(cs[0])  # the first exchange starts with step 0
    for i in range(1, cp):
        assert cs[i] == pytest.approx(max(ce[i - 1], xe[i - 1]))
    for i in range(1, cp - 1):
        assert xs[i] == pytest.approx(xe[i - 1])
    assert ce[-1] - cs[0] == pytest.approx(t_c + (cp - 1) * max(t_c, t_x))


def test_full_and_symmetric_modes_agree_with_context_parallelism() -> None:
    for comm in ("p2p", "all_gather"):
        _, g = _cp(2, 16, comm, tp=2, pp=2)
        full, _ = run(g, mode="full", gpus_per_node=4)
        sym, _ = run(g, mode="symmetric", gpus_per_node=4)
        assert sym.iteration_time_s == full.iteration_time_s


@pytest.mark.parametrize("comm", ["p2p", "all_gather", "a2a"])
def test_activation_memory_splits_by_cp_beside_the_attention_buffers(comm: str) -> None:
    s1, _ = _cp(1, 2)
    s2, _ = _cp(2, 2, comm)
    s1 = replace(s1, recompute="selective")
    s2 = replace(s2, recompute="selective")
    m1, m2 = stage_memory(SPEC, s1, 0), stage_memory(SPEC, s2, 0)
    buffers = context_parallel_buffers(activation_shape(SPEC, s2), s2)
    assert buffers > 0
    assert m2.activations - buffers == pytest.approx(m1.activations / 2, rel=1e-12)
    per_layer = block_activation_bytes(activation_shape(SPEC, s2), "selective")
    assert per_layer == pytest.approx(
        block_activation_bytes(activation_shape(SPEC, s1), "selective") / 2
    )


def _llama_cp(tmp_path, extra: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "cp.yaml"
    path.write_text(
        "cluster: {machine: dgx-h100, gpus: 16}\n"
        "model: {name: llama3-8b, layers: 2, seq_len: 4096}\n"
        f"parallel: {{strategy: megatron, tp: 2, cp: 4{extra}}}\n"
        "training: {batch_tokens: 8192}\n"
    )
    return str(path)


def test_cli_runs_a_context_parallel_llama(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from simulator.api import simulate
    from simulator.config import load_config

    report = simulate(load_config(_llama_cp(tmp_path, ""))).report
    assert report.grid["context"] == 4
    assert report.comm_total_by_group_s["cp"] > 0
    assert report.parameters["cp"] == 4


def test_bad_context_parallel_input_is_one_line(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    cfg = _llama_cp(tmp_path, "")
    cases = [
        (["--set", "training.flash_attention=false"], "fused attention"),
        (["--set", "model.seq_len=4100", "--set", "training.batch_tokens=8200"], "load-balanced"),
        (["--set", "parallel.cp=3"], "does not divide the 16 GPUs"),
        (["--set", "parallel.cp_comm=a2a", "--set", "parallel.cp=8", "--set", "parallel.tp=2",
          "--set", "cluster.gpus=16"], "key/value heads"),
        (["--set", "parallel.cp_comm=ring"], "cp_comm"),
        (["--set", "parallel.cp=0"], "parallel.cp"),
    ]  # fmt: skip
    for args, message in cases:
        err = one_line_error(["simulate", cfg, *args], capsys)
        assert message in err, err
