"""Model variants: parameter counts against the public model cards, and what each
variant changes in the kernels, the communication and the activations.

Published totals: GPT-NeoX-20B, Black et al. 2022 (arXiv 2204.06745) Table 1; Pythia,
the Pythia README's model table (Biderman et al. 2023); BLOOM, the bigscience/bloom model
card; GPT-J, the EleutherAI/gpt-j-6b model card; MPT, the mosaicml/mpt-{7b,30b} cards
(rounded there)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.cli_helpers import one_line_error
from tests.strategy_helpers import collectives, hybrid
from workloads.activations import ActivationShape, block_activation_terms
from workloads.errors import WorkloadError
from workloads.hybrid.params import MegatronParallel
from workloads.models import TransformerSpec, model_flops_per_iteration, model_preset
from workloads.ops import ComputeOp
from workloads.strategies import check_model_support

EXACT = {
    "gpt-neox-20b": 20_554_567_680,
    "pythia-70m": 70_426_624,
    "pythia-160m": 162_322_944,
    "pythia-410m": 405_334_016,
    "pythia-1b": 1_011_781_632,
    "pythia-1.4b": 1_414_647_808,
    "pythia-2.8b": 2_775_208_960,
    "pythia-6.9b": 6_857_302_016,
    "pythia-12b": 11_846_072_320,
    "bloom-176b": 176_247_271_424,
}


@pytest.mark.parametrize("name", list(EXACT))
def test_counts_equal_the_published_totals(name: str) -> None:
    assert model_preset(name).num_params == EXACT[name]


def test_gpt_j_counts_its_modules() -> None:
    """28 blocks of one LayerNorm, four bias-free attention projections and a biased
    MLP; an untied lm_head with a bias. The card's 6,053,381,344 is 2,498,560 (0.04%)
    more than these modules hold (HF's GPTJForCausalLM has exactly them); the card does
    not say what else it counted."""
    h, ffn, v, layers = 4096, 16384, 50400, 28
    block = 2 * h + 4 * h * h + (h * ffn + ffn) + (ffn * h + h)
    want = layers * block + v * h + 2 * h + (v * h + v)
    spec = model_preset("gpt-j-6b")
    assert spec.num_params == want
    assert spec.num_params == pytest.approx(6_053_381_344, rel=5e-4)


@pytest.mark.parametrize(("name", "card"), [("mpt-7b", 6.7e9), ("mpt-30b", 29.95e9)])
def test_mpt_against_the_cards_rounding(name: str, card: float) -> None:
    """MPT: no biases on linears or LayerNorms, ALiBi, tied embeddings. The cards round
    (7B: 6.65B counted; 30B: 29.957B)."""
    spec = model_preset(name)
    h, layers, v = spec.hidden, spec.layers, spec.vocab
    assert spec.num_params == layers * (12 * h * h + 2 * h) + v * h + h
    assert spec.num_params == pytest.approx(card, rel=0.01 if name == "mpt-7b" else 5e-4)


def test_falcon_counts_multi_query_and_grouped_attention() -> None:
    """Falcon-7B: one K/V head (MQA) and one LayerNorm per parallel block; Falcon-40B: 8
    K/V heads (GQA) and two; no biases, tied embeddings."""
    seven, forty = model_preset("falcon-7b"), model_preset("falcon-40b")
    h, d = 4544, 64
    assert seven.qkv_out == h + 2 * d
    block7 = 2 * h + h * (h + 2 * d) + h * h + 2 * 4 * h * h
    assert seven.num_params == 32 * block7 + 65024 * h + 2 * h
    h, kv = 8192, 8 * 64
    block40 = 4 * h + h * (h + 2 * kv) + h * h + 2 * 4 * h * h
    assert forty.num_params == 60 * block40 + 65024 * h + 2 * h
    assert round(seven.num_params / 1e9, 1) == 6.9 and round(forty.num_params / 1e9) == 41


def test_flops_follow_the_attention_variant() -> None:
    """Multi-query attention shrinks the K and V projections; the attention FLOPs count
    every query head, as for full attention."""
    spec = model_preset("falcon-7b")
    tokens, h, s = 2048.0, 4544, 2048
    gemm = 2 * tokens * (h * (h + 128) + h * h + 2 * h * 4 * h)
    want = 3 * spec.layers * (gemm + 4 * tokens * s * h) + 6 * tokens * h * spec.vocab
    assert model_flops_per_iteration(spec, tokens, recompute=False) == pytest.approx(want)


SMALL = TransformerSpec(name="v", layers=2, hidden=64, heads=8, seq_len=32, vocab=128)


def _megatron(spec: TransformerSpec, sp: bool = True) -> list[ComputeOp | object]:
    _, g = hybrid(MegatronParallel(tp=2, sequence_parallel=sp), 2, tp=2, spec=spec)
    return list(g.programs[0].ops)


def test_parallel_block_reduces_both_branches_once() -> None:
    """GPT-NeoX's parallel residual: attention-out keeps its partial sums; one
    reduce-scatter after MLP-down (and one all-gather of the output gradient)."""
    par = replace(SMALL, parallel_block=True)
    for spec, per_block in ((SMALL, 2), (par, 1)):
        _, g = hybrid(MegatronParallel(tp=2, sequence_parallel=True), 2, tp=2, spec=spec)
        prog = g.programs[0]
        rs = [c for c in collectives(prog, "L0.") if c.name.endswith("rs_tp.fwd")]
        ag = [c for c in collectives(prog, "L0.") if c.name.endswith("ag_tp.bwd")]
        assert len({c.name for c in rs}) == per_block
        assert len({c.name for c in ag}) == per_block
    names = {op.name for op in _megatron(par)}
    assert "L0.attn_out.rs_tp.fwd" not in names and "L0.mlp_down.rs_tp.fwd" in names


def test_shared_norm_and_positions_change_the_kernels() -> None:
    shared = replace(SMALL, parallel_block=True, shared_norm=True, position="alibi")
    names = {getattr(op, "name", "") for op in _megatron(shared)}
    assert "L0.ln1.fwd" in names and "L0.ln2.fwd" not in names
    assert not any(".rope." in n for n in names)  # ALiBi: inside the attention kernel
    assert shared.position_params == 0
    rope = {getattr(op, "name", "") for op in _megatron(replace(SMALL, position="rope"))}
    assert "L0.rope.fwd" in rope


def test_biases_per_part() -> None:
    """GPT-J: no attention biases (no bias kernels in the attention range), the MLP's
    kept; the output bias adds a kernel per pass."""
    gptj = replace(SMALL, attention_bias=False, output_bias=True, tied_embeddings=False)
    names = {getattr(op, "name", "") for op in _megatron(gptj, sp=False)}
    assert "L0.qkv.bias.fwd" not in names and "L0.mlp_up.bias.fwd" in names
    assert {"logits.bias.fwd", "logits.bias.bwd"} <= names
    assert gptj.bias_params_per_layer == 4 * 64 + 64
    assert replace(SMALL, norm_bias=False).norm_params == 64
    bloom = replace(SMALL, embedding_norm=True)
    assert bloom.embedding_params == SMALL.embedding_params + 2 * 64
    assert "embedding_ln.fwd" in {getattr(op, "name", "") for op in _megatron(bloom)}


def test_parallel_block_activations() -> None:
    """Both branches read the block input: the MLP norm's input is not stored again, and
    with a shared norm neither is the MLP-up input (the QKV input)."""
    a = ActivationShape(tokens=2048, seq_len=2048, hidden=4096, heads=32, kv_dim=4096,
                        mlp_up=16384, ffn=16384)  # fmt: skip
    seq = block_activation_terms(a, "none")
    par = block_activation_terms(replace(a, parallel_block=True), "none")
    shared = block_activation_terms(replace(a, parallel_block=True, shared_norm=True), "none")
    assert set(seq) - set(par) == {"norm2_input"}
    assert set(seq) - set(shared) == {"norm2_input", "mlp_up_input"}
    assert sum(seq.values()) - sum(shared.values()) == 2 * 2 * 2048 * 4096


def test_shared_norm_needs_a_parallel_block() -> None:
    with pytest.raises(WorkloadError, match=r"model\.shared_norm"):
        replace(SMALL, shared_norm=True)


@pytest.mark.parametrize("strategy", ["axonn", "optimus"])
def test_generators_without_the_variants_refuse_them(strategy: str) -> None:
    with pytest.raises(WorkloadError, match=r"model\.parallel_block"):
        check_model_support(model_preset("gpt-neox-20b"), strategy)
    with pytest.raises(WorkloadError, match=r"model\.position"):
        check_model_support(model_preset("bloom-176b"), strategy)
    check_model_support(model_preset("llama3-8b"), strategy)  # Llama needs none of them


def test_cli_refuses_a_variant_axonn_cannot_run(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_line_error(
        ["simulate", "--machine", "dgx-h100", "--gpus", "8", "--model", "pythia-70m",
         "--batch-tokens", "16384"],
        capsys,
    )  # fmt: skip
    assert "model.parallel_block" in line and "axonn" in line
