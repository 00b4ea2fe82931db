"""Memory models of the hybrid strategies against hand computations, and max batch."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.strategy_helpers import SPEC, hybrid
from workloads.hybrid.memory import hybrid_memory, max_batch_sequences, stage_memory
from workloads.hybrid.params import MegatronParallel, ShardedParallel

# SPEC: 4 layers, hidden 64, 8 heads, sequence 32, vocabulary 128
H, S, V, L = 64, 32, 128, 4


def test_megatron_ddp_memory_by_hand() -> None:
    setup, _ = hybrid(MegatronParallel(tp=2), 4, tp=2)
    # per GPU with tp=2: QKV 64x96 + 96, attn-out 32x64 + 64 (row: full bias),
    # MLP-up 64x128 + 128, MLP-down 128x64 + 64, LayerNorms 4x64
    block = 64 * 96 + 96 + 32 * 64 + 64 + 64 * 128 + 128 + 128 * 64 + 64 + 4 * 64
    params = L * block + (V // 2) * H + S * H + 2 * H  # + word/position embedding, final LN
    mem = hybrid_memory(SPEC, setup)
    assert mem.weights == 2 * params
    assert mem.gradients == 4 * params  # Megatron's fp32 main gradients
    assert mem.optimizer == 12 * params
    # activations (Korthikanti et al. 2022 terms, flash attention, dropout, full recompute)
    tokens, db = 32, 2
    stored = L * db * tokens * H  # every block's input
    edges = tokens * H + 2 * db * tokens * H  # embedding dropout mask; final norm, logits inputs
    one_block = (
        4 * db * tokens * H  # both norm inputs, QKV and MLP-up inputs (replicated over tp)
        + db * tokens * (H + H) // 2  # Q and K, split over tp
        + db * tokens * H // 2  # V
        + db * tokens * H // 2  # attention-out input
        + db * tokens * 256 // 2  # GeLU input (4h)
        + db * tokens * 256 // 2  # MLP-down input
        + 2 * tokens * H  # two dropout masks, 1 byte
        + 4 * tokens * 8 // 2  # fp32 log-sum-exp per local head
    )
    assert mem.activations == pytest.approx(stored + edges + one_block)  # + block in backward
    # Megatron's vocab-parallel cross entropy: bf16 logits + one fp32 buffer (softmax and
    # its gradient in place)
    assert mem.logits == tokens * (V // 2) * (2 + 4)


def test_distributed_optimizer_shards_the_optimizer_only() -> None:
    ddp, _ = hybrid(MegatronParallel(tp=1), 4)
    dist, _ = hybrid(MegatronParallel(tp=1, distributed_optimizer=True), 4)
    a, b = hybrid_memory(SPEC, ddp), hybrid_memory(SPEC, dist)
    assert b.optimizer == pytest.approx(a.optimizer / 4)
    assert (b.weights, b.gradients) == (a.weights, a.gradients)


def test_fsdp_memory_by_hand() -> None:
    """FSDP1 FULL_SHARD, bf16 compute, reduce in bf16, BACKWARD_PRE (the defaults)."""
    setup, _ = hybrid(ShardedParallel(strategy="fsdp", shard=4), 4)
    unit = 64 * 192 + 192 + 64 * 64 + 64 + 64 * 256 + 256 + 256 * 64 + 64 + 4 * 64
    root = V * H + S * H + 2 * H
    held = (L * unit + root) / 4
    mem = hybrid_memory(SPEC, setup)
    assert mem.weights == pytest.approx(4 * held)  # the fp32 sharded flat parameters
    assert mem.optimizer == pytest.approx(8 * held)  # Adam's moments (the master is the shard)
    # the fp32 sharded gradient + the unit's bf16 gradient, the previous unit's reduce
    # input in flight, and the root's gradient held through the backward
    assert mem.gradients == pytest.approx(4 * held + 2 * unit + 2 * unit + 2 * root)
    # the root (not resharded after forward), the unit computing, the one gathered and the
    # one whose free event the GPU has not passed (BACKWARD_PRE gathers a unit ahead)
    assert mem.gathered_weights == pytest.approx(2 * (root + 3 * unit))
    eager = hybrid_memory(SPEC, setup).logits
    assert eager == 32 * V * (2 + 12)  # torch's F.cross_entropy on fp32 logits


def test_pipeline_stages_hold_their_in_flight_microbatches() -> None:
    setup, _ = hybrid(
        MegatronParallel(tp=1, pp=2, recompute="full"), 2, pp=2, sequences=4, checkpointing=True
    )
    first, last = stage_memory(SPEC, setup, 0), stage_memory(SPEC, setup, 1)
    stored = (L // 2) * 2 * 32 * H  # block inputs of a stage's 2 layers, one microbatch
    embedding_mask, head_inputs = 32 * H, 2 * 2 * 32 * H
    # 2 microbatches in flight on the first stage, 1 on the last
    expected = 2 * (stored + embedding_mask) - (stored + head_inputs)
    assert first.activations - last.activations == pytest.approx(expected)


def test_max_batch_is_the_largest_that_fits() -> None:
    setup, _ = hybrid(MegatronParallel(tp=2), 8, tp=2)
    cap = 2.5e9
    best = max_batch_sequences(SPEC, setup, cap)
    per_replica = best // setup.dp
    assert per_replica >= 1
    at = replace(setup, microbatch_sequences=per_replica, microbatches=1)
    over = replace(setup, microbatch_sequences=per_replica + 1, microbatches=1)
    assert hybrid_memory(SPEC, at).total <= cap < hybrid_memory(SPEC, over).total
    assert max_batch_sequences(SPEC, setup, 1e6) == 0


def test_in_flight_closed_form_equals_replaying_the_schedule() -> None:
    """The memory model's closed form (no schedule built: a 2^30-token batch has
    millions of microbatches) agrees with replaying 1F1B and interleaved schedules."""
    from workloads.hybrid.schedule import in_flight, schedule

    for p in range(1, 7):
        for v in (1, 2, 3):
            for m in range(1, 14):
                if v > 1 and m % p:
                    continue
                for stage in range(p):
                    live = peak = 0
                    for ps in schedule(p, m, v, stage):
                        live += 1 if ps.kind == "F" else -1
                        peak = max(peak, live)
                    assert in_flight(p, m, v, stage) == peak, (p, m, v, stage)
