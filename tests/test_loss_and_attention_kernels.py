"""The software's own kernels: the cross entropy each framework runs (workloads/loss.py)
and the generation of fused attention it calls (training.attention_kernel)."""

from __future__ import annotations

import pytest

from simulator.config import load_config
from simulator.cost.kernels import KernelModel
from simulator.errors import ConfigError, CostModelError
from tests.strategy_helpers import hybrid
from workloads.axonn.implementation import PRESETS
from workloads.hybrid.params import MegatronParallel, ShardedParallel
from workloads.loss import LOSS, loss_bytes_per_elem
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp

SPEC = TransformerSpec(name="l", layers=2, hidden=64, heads=8, seq_len=64, vocab=512)


# ------------------------------------------------------------------ the loss
def test_bytes_per_logit_element_closed_forms() -> None:
    """Megatron's unfused loss at bf16: .float() 6, max 4, subtract 8, exp 8, sum 4,
    divide 8; backward multiply 8 and the cast back 6 = 52. Eager F.cross_entropy on
    .float() logits: 6 + 8 forward, 4 + 12 + 6 backward = 36. A fused xentropy reads the
    logits forward and reads and writes them backward: 6."""
    assert loss_bytes_per_elem("vocab-parallel", 2) == 52
    assert loss_bytes_per_elem("eager", 2) == 36
    assert loss_bytes_per_elem("fused", 2) == 6
    assert set(LOSS) == {"vocab-parallel", "eager", "fused"}


def _loss_ops(params, gpus: int, cross_entropy: str | None, tp: int = 1):  # type: ignore[no-untyped-def]
    setup, g = hybrid(params, gpus, tp=tp, spec=SPEC, cross_entropy=cross_entropy)
    ops = g.programs[0].ops
    kernels = [op for op in ops if isinstance(op, ComputeOp) and op.name.startswith("loss.")]
    reduces = [op for op in ops if isinstance(op, CollectiveOp) and op.name.startswith("loss.")]
    return setup, kernels, reduces


def test_megatron_runs_its_unfused_loss_with_three_tp_reductions() -> None:
    """Megatron's default: the six forward and two backward kernels over this GPU's
    vocabulary slice, with the max, predicted-logit and exp-sum all-reduces (4 bytes per
    token each) where the code issues them."""
    tp = 2
    setup, kernels, reduces = _loss_ops(MegatronParallel(tp=tp), tp, None, tp=tp)
    assert setup.cross_entropy == "vocab-parallel"
    fwd = [op.name for op in kernels if op.name.endswith(".fwd")]
    assert fwd == [f"loss.{k}.fwd" for k in ("float", "max", "sub_max", "exp", "sum", "div")]
    tokens = SPEC.seq_len  # one sequence per microbatch
    elems = tokens * SPEC.vocab // tp
    assert sum(op.bytes for op in kernels) == pytest.approx(52 * elems)
    assert [op.bytes for op in reduces] == [4.0 * tokens] * 3
    assert all(op.kind is CollectiveKind.ALL_REDUCE and op.kind for op in reduces)


@pytest.mark.parametrize(("impl", "per_elem"), [("eager", 36), ("fused", 6)])
def test_fsdp_runs_the_configured_loss(impl: str, per_elem: int) -> None:
    params = ShardedParallel(strategy="fsdp")
    _, kernels, reduces = _loss_ops(params, 2, impl)
    assert sum(op.bytes for op in kernels) == pytest.approx(per_elem * SPEC.seq_len * SPEC.vocab)
    assert not reduces  # no vocabulary split


def test_axonn_presets_run_their_code_s_loss() -> None:
    """Megatron-AxoNN calls Megatron's vocab_parallel_cross_entropy; LitGPT and a user's
    script with the PyPI release PyTorch's."""
    assert PRESETS["sc24"].cross_entropy == "vocab-parallel"
    assert PRESETS["litgpt"].cross_entropy == "eager"
    assert PRESETS["axonn-0.2"].cross_entropy == "eager"


# ------------------------------------------------------------------ attention
def _attention(phase: str) -> ComputeOp:
    flops = 4.0 * 8 * 4096 * 4096 * 128 * 32  # large: compute-bound
    return ComputeOp("a", ComputeKind.ATTENTION, flops, 1e6, shape=(4096, 4096, 32, 128),
                     phase=phase)  # fmt: skip


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100"])
def test_first_generation_flash_attention_runs_at_half_the_rate(gpu: str) -> None:
    """FlashAttention-2: "around 2x speedup compared to FlashAttention" (Dao 2023)."""
    fa2, fa1 = KernelModel(gpu), KernelModel(gpu, attention_kernel="fa1")
    for phase in ("fwd", "bwd"):
        fixed = fa2.gemm_fixed_s
        t2 = fa2.kernel_time_s(_attention(phase)) - fixed
        t1 = fa1.kernel_time_s(_attention(phase)) - fixed
        assert t1 / t2 == pytest.approx(2.0, rel=1e-9)


def test_attention_kernel_option_and_its_errors() -> None:
    cfg = load_config(None, ["training.attention_kernel=fa1"])
    assert cfg.training.attention_kernel == "fa1"
    with pytest.raises(ConfigError, match="attention_kernel"):
        load_config(None, ["training.attention_kernel=fa3"])
    with pytest.raises(CostModelError, match="attention kernel"):
        KernelModel("h100", attention_kernel="fa3")


# ------------------------------------------------------- Composer's train metrics
def _metric_ops(train_metrics: int):  # type: ignore[no-untyped-def]
    from workloads.hybrid.configure import Degrees, build_setup
    from workloads.hybrid.workload import build_hybrid_workload
    from workloads.run import ClusterShape, TrainingSetup

    gpus, microbatches = 2, 3
    training = TrainingSetup(
        gpus * microbatches * SPEC.seq_len,
        cross_entropy="fused",
        compress_microbatches=False,
        train_metrics=train_metrics,
    )
    setup = build_setup(
        SPEC,
        ShardedParallel(strategy="fsdp"),
        training,
        ClusterShape(gpus, 8, 80e9),
        Degrees(1, 1, None),
        1,
    )
    graph = build_hybrid_workload(SPEC, setup)
    graph.validate()
    return graph.programs[0].ops


def test_composer_train_metrics_are_two_eager_loss_forwards_per_microbatch() -> None:
    """Composer runs LanguageCrossEntropy and LanguagePerplexity (each an eager
    CrossEntropyLoss under autocast: the fp32 cast, 6 bytes, and log_softmax, 8 bytes per
    logit) after every microbatch's backward, once FSDP's post-backward is waited for:
    2 x 14 = 28 bytes per logit element per microbatch; none without the option."""
    ops = _metric_ops(2)
    names = [op.name for op in ops]
    metric = [op for op in ops if isinstance(op, ComputeOp) and op.name.startswith("train_metric")]
    elems = SPEC.seq_len * SPEC.vocab  # one sequence per microbatch, tied head, no TP
    assert len(metric) == 3 * 4
    assert sum(op.bytes for op in metric) == pytest.approx(3 * 28 * elems)
    assert {op.kind for op in metric} == {ComputeKind.ELEMENTWISE}
    # each microbatch's metrics follow its backward's final wait and precede the next forward
    firsts = [i for i, n in enumerate(names) if n == "train_metric0.loss.float.fwd"]
    waits = [i for i, n in enumerate(names) if n == "wait:fsdp.post_backward"]
    assert len(firsts) == 3
    assert all(any(w < f for w in waits) for f in firsts)
    assert not any(op.name.startswith("train_metric") for op in _metric_ops(0))


def test_train_metrics_option_rejects_a_negative_count() -> None:
    cfg = load_config(None, ["training.train_metrics=2"])
    assert cfg.training.train_metrics == 2
    with pytest.raises(ConfigError, match="train_metrics"):
        load_config(None, ["training.train_metrics=-1"])
