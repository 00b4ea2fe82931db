"""Memory that matches what ran: the three-valued verdict, the GPUs' measured capacity,
the loss kernel's logits and --strict-memory's exit code."""

from __future__ import annotations

import pytest

from simulator.cli import main
from simulator.outputs.memory_verdict import describe, memory_verdict
from tests.strategy_helpers import SPEC, hybrid
from topologies.hardware import gpu_spec
from workloads.hybrid.memory import hybrid_memory
from workloads.hybrid.params import MegatronParallel, ShardedParallel
from workloads.memory import (
    RUNTIME_RESERVE_LOW_BYTES,
    MemoryBreakdown,
    logit_bytes_per_elem,
    lower_bound,
)


def test_the_verdict_is_a_band() -> None:
    m = MemoryBreakdown(10e9, 10e9, 10e9, 1e9, 40e9, 1e9, 2e9)
    d = m.as_dict()
    assert lower_bound(d) == pytest.approx(
        m.total - m.fragmentation - (2e9 - RUNTIME_RESERVE_LOW_BYTES)
    )
    assert m.lower == pytest.approx(lower_bound(d))
    assert memory_verdict(d, m.total).verdict == "fits"
    assert memory_verdict(d, (m.total + m.lower) / 2).verdict == "uncertain"
    v = memory_verdict(d, m.lower - 1)
    assert v.verdict == "does-not-fit" and v.margin_bytes < 0
    assert list(v.top_terms) == ["activations", "weights", "gradients"]
    assert "at least" in describe(v, m.lower - 1, "a100-80gb")
    assert "may not fit" in describe(memory_verdict(d, (m.total + m.lower) / 2), 1, "x")


def test_capacity_is_the_devices_measured_memory() -> None:
    """totalGlobalMem from the traces' deviceProperties (shared/traces), not 10^9 x GB."""
    assert gpu_spec("a100-80gb").memory_bytes == 84_990_623_744
    assert gpu_spec("h100").memory_bytes == 85_018_279_936
    assert gpu_spec("h200").memory_bytes == 141e9  # no measurement: the data sheet's GB


def test_logits_follow_the_loss_kernel() -> None:
    assert [logit_bytes_per_elem(k, 2) for k in ("eager", "fused", "vocab-parallel")] == [14, 2, 6]
    meg, _ = hybrid(MegatronParallel(tp=1), 4)
    fsdp, _ = hybrid(ShardedParallel(strategy="fsdp"), 4)
    tokens_vocab = 32 * SPEC.vocab
    assert hybrid_memory(SPEC, meg).logits == 6 * tokens_vocab
    assert hybrid_memory(SPEC, fsdp).logits == 14 * tokens_vocab


def _strict(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(args) or 0
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def test_strict_memory_exits_3_only_when_certainly_over(capsys: pytest.CaptureFixture[str]) -> None:
    base = [
        "simulate", "--machine", "dgx-a100", "--gpus", "8", "--model", "gpt-5b", "--strategy",
        "fsdp", "--seq-len", "2048", "--set", "training.activation_checkpointing=false",
        "--no-progress", "--strict-memory",
    ]  # fmt: skip
    code, err = _strict(
        [*base, "--batch-tokens", "65536", "--set", "training.microbatch_sequences=4"], capsys
    )
    assert code == 0 and "may not fit" not in err
    code, err = _strict(
        [*base, "--batch-tokens", "262144", "--set", "training.microbatch_sequences=16"], capsys
    )
    assert code == 3 and "needs at least" in err and "biggest terms" in err
