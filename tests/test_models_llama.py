"""Llama-style presets: parameters against the published sizes, counted per architecture
(RMSNorm, SwiGLU, grouped-query attention, rotary positions, no biases, untied output),
FLOPs per the architecture, and the Megatron path's per-GPU parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.strategy_helpers import collectives, hybrid
from workloads.errors import WorkloadError
from workloads.hybrid.params import MegatronParallel, ShardedParallel
from workloads.hybrid.setup import stage_param_counts
from workloads.models import model_flops_per_iteration, model_preset

# Published parameter counts: the safetensors totals of the Hugging Face checkpoints
# (meta-llama/Llama-2-{7b,13b,70b}-hf, meta-llama/Llama-3.1-{8B,70B,405B}); the 405B is the
# "405B" of Dubey et al. 2024 (126 layers, dimension 16,384, FFN 53,248, 128 heads, 8 KV).
PUBLISHED = {
    "llama2-7b": 6_738_415_616,
    "llama2-13b": 13_015_864_320,
    "llama2-70b": 68_976_648_192,
    "llama3-8b": 8_030_261_248,
    "llama3-70b": 70_553_706_496,
    "llama3-405b": 405_853_388_800,
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_parameter_counts_match_the_published_sizes(name: str) -> None:
    assert model_preset(name).num_params == pytest.approx(PUBLISHED[name], rel=0.01)


def test_405b_counted_by_hand() -> None:
    h, ffn, kv, layers, vocab = 16384, 53248, 8 * 128, 126, 128256
    block = 2 * h * h + 2 * h * kv + 3 * h * ffn + 2 * h  # q, o; k, v; SwiGLU; two RMSNorms
    total = layers * block + 2 * vocab * h + h  # untied embedding and output, final RMSNorm
    spec = model_preset("llama3-405b")
    assert spec.num_params == total
    assert round(spec.num_params / 1e9, 1) == 405.9  # "405B"; 405.85B
    assert (spec.kv_heads, spec.vocab, spec.seq_len) == (8, 128256, 8192)


def test_gpt_presets_keep_their_count() -> None:
    """GPT-style: LayerNorm weight and bias, biases, learned positions, tied embeddings."""
    spec = model_preset("gpt-80b")
    h, layers = 12288, 42
    block = 12 * h * h + 13 * h  # linears + biases (4h, h, 4h... = 9h) + two LayerNorms (4h)
    assert spec.num_params == layers * block + 51200 * h + 2048 * h + 2 * h


def test_flops_per_the_architecture() -> None:
    """3 passes (no recompute) of every block's GEMMs and attention plus the logits:
    GQA shrinks K and V, SwiGLU has three MLP matrices."""
    spec = model_preset("llama3-8b")
    tokens = 8192.0
    h, kv, ffn, s = 4096, 1024, 14336, 8192
    gemm = 2 * tokens * (h * (h + 2 * kv) + h * h + h * 2 * ffn + ffn * h)
    attention = 4 * tokens * s * h
    want = 3 * spec.layers * (gemm + attention) + 6 * tokens * h * spec.vocab
    assert model_flops_per_iteration(spec, tokens, recompute=False) == pytest.approx(want)


def test_megatron_counts_llama_parameters_per_gpu() -> None:
    spec = replace(model_preset("llama3-8b"), layers=4, seq_len=256)
    setup, g = hybrid(MegatronParallel(tp=2, pp=2), 4, tp=2, pp=2, sequences=2, spec=spec)
    first, last = stage_param_counts(spec, setup, 0), stage_param_counts(spec, setup, 1)
    per_gpu = (spec.num_params - spec.vocab * spec.hidden * 2 - spec.hidden) // 2  # blocks
    norms = 4 * 2 * spec.hidden // 2  # RMSNorms stay whole on each tp rank (4 per 2 layers)
    assert first["blocks"] + last["blocks"] == per_gpu + norms
    vocab_local = spec.vocab * spec.hidden // 2
    assert first["embedding"] == vocab_local  # rotary: no position embedding
    assert last["head"] == vocab_local + spec.hidden  # untied output + final RMSNorm
    # untied: no embedding all-reduce between the first and last stage, no biases
    assert not [op for p in g.programs for op in collectives(p) if op.group == "embed"]
    assert not any(".bias" in op.name for p in g.programs for op in p.ops)
    # rotary embedding kernels on q and k, forward and backward
    names = {op.name for op in g.programs[0].ops}
    assert {"L0.rope.fwd", "L0.rope.bwd"} <= names


def test_untied_output_reduces_its_own_gradient_under_zero3() -> None:
    spec = replace(model_preset("llama3-8b"), layers=2, seq_len=128, vocab=1024, hidden=256,
                   heads=4, kv_heads=2, ffn_hidden=512)  # fmt: skip

    def reductions(tied: bool) -> list[str]:
        _, g = hybrid(
            ShardedParallel(strategy="zero3"), 4, sequences=4,
            spec=replace(spec, tied_embeddings=tied),
        )  # fmt: skip
        return sorted(op.name for op in collectives(g.programs[0]) if op.name.endswith("rs_shard")
                      and op.name.split(".")[0] in ("logits", "embedding"))  # fmt: skip

    # untied: the output layer and the embedding reduce their own gradients
    assert reductions(tied=False) == ["embedding.rs_shard", "logits.rs_shard"]
    assert reductions(tied=True) == ["logits.rs_shard"]  # one shared weight


@pytest.mark.parametrize(
    "field,value,message",
    [("norm", "batchnorm", "model.norm"), ("position", "sinusoidal", "model.position")],
)
def test_unknown_architecture_names_fail(field: str, value: str, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        replace(model_preset("llama3-8b"), **{field: value})
