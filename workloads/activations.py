"""Activation memory of one transformer block, term by term (Korthikanti et al. 2022).

Korthikanti, Casper, Lym, McAfee, Andersch, Shoeybi, Catanzaro, "Reducing Activation
Recomputation in Large Transformer Models" (MLSys 2023, arXiv 2205.05198), Section 4 and
Table 2, count the bytes a GPT block keeps for its backward, for s tokens per sequence, b
sequences, hidden h, a heads, tensor parallelism t:

| configuration | bytes per layer |
|---|---|
| no parallelism | sbh (34 + 5as/h) |
| tensor parallel | sbh (10 + 24/t + 5as/(ht)) |
| tensor + sequence parallel | sbh (34/t + 5as/(ht)) |
| tensor parallel + selective recompute | sbh (10 + 24/t) |
| tensor + sequence parallel + selective recompute | sbh (34/t) |
| full recompute | sbh (2) |

The 34 is, in 16-bit: the two LayerNorm inputs (2 + 2), the QKV input (2), Q and K (4),
V (2), the attention-out input (2), the attention dropout mask (1), the MLP-up input
(2), the GeLU input (8), the MLP-down input (8) and the MLP dropout mask (1); 5as/h is
the softmax output (2), its dropout mask (1) and the dropout output (2) of every head's
s x s scores. Tensor parallelism splits everything between the column- and the
row-parallel linears (24 of the 34 and the scores); sequence parallelism splits the rest;
selective recompute drops the scores and recomputes them in backward.

FP8 training (Transformer Engine, workloads/fp8.py) keeps the four linears' inputs in
FP8 (1 byte: the quantised tensor its wgrad GEMM reads; sequence parallelism keeps the
local rows and re-gathers them), everything else as in bf16.

A parallel block (GPT-J, GPT-NeoX, Falcon) feeds both branches from the block input:
the MLP norm's input is the attention norm's (stored once), and with one shared norm the
MLP-up input is the QKV input too.

`block_activation_terms` keeps that accounting but reads the widths from the
architecture, so the same terms give GQA (K and V at kv_dim), SwiGLU (the activation's
input is 2 x ffn wide, the MLP-down input ffn), no dropout (no masks, no dropout
output) and flash attention, whose own rule is: no s x s scores at all (they are
recomputed tile by tile in backward), the fp32 log-sum-exp per query and head instead
(4 bytes, dropped by selective recompute, which re-runs the kernel), no dropout mask
(the RNG state regenerates it). Context parallelism splits every token-indexed term by
cp (each GPU keeps its own chunk of the sequence, K and V included: Megatron-Core stores
the local KV and re-exchanges it in backward).
"""

from __future__ import annotations

from dataclasses import dataclass

LSE_BYTES = 4  # flash attention's log-sum-exp is fp32 (one per query token and head)
FP8_BYTES = 1  # FP8 training: Transformer Engine saves the linears' quantised inputs
MASK_BYTES = 1  # dropout masks are uint8/bool (Korthikanti et al. 2022, Section 4.1)


@dataclass(frozen=True)
class ActivationShape:
    """What sizes one GPU's share of a block's activations, for one microbatch.

    tokens: the microbatch's tokens on this GPU before the sequence-parallel split
    (b x s / cp); seq_len: the full sequence s (each query attends to up to s keys).
    """

    tokens: int
    seq_len: int
    hidden: int
    heads: int
    kv_dim: int
    mlp_up: int  # input width of the activation function (2 x ffn for SwiGLU)
    ffn: int  # input width of the MLP-down linear
    tp: int = 1
    sequence_parallel: bool = False
    flash_attention: bool = True
    dropout: bool = True
    dtype_bytes: int = 2
    parallel_block: bool = False  # both branches read the block input
    shared_norm: bool = False  # ... through one norm
    fp8_linear_inputs: bool = False  # FP8 training: the linears keep FP8 inputs for wgrad


def block_activation_terms(shape: ActivationShape, recompute: str) -> dict[str, float]:
    """Bytes one block keeps for its backward, per GPU and microbatch, by term.

    recompute: 'none', 'selective' (no attention scores or log-sum-exp) or 'full' (only
    the block's input, which the recompute starts from)."""
    a = shape
    db, t, tok = a.dtype_bytes, a.tp, float(a.tokens)
    rest = t if a.sequence_parallel else 1  # the part tensor parallelism leaves whole
    if recompute == "full":
        return {"block_input": db * tok * a.hidden / rest}
    lb = FP8_BYTES if a.fp8_linear_inputs else db  # what a linear keeps of its input
    terms = {
        "norm1_input": db * tok * a.hidden / rest,
        "qkv_input": lb * tok * a.hidden / rest,
        "query_key": db * tok * (a.hidden + a.kv_dim) / t,
        "value": db * tok * a.kv_dim / t,
        "attn_out_input": lb * tok * a.hidden / t,
        "norm2_input": db * tok * a.hidden / rest,
        "mlp_up_input": lb * tok * a.hidden / rest,
        "activation_input": db * tok * a.mlp_up / t,
        "mlp_down_input": lb * tok * a.ffn / t,
    }
    if a.parallel_block:
        del terms["norm2_input"]  # the block input, kept once as norm1_input
        if a.shared_norm:
            del terms["mlp_up_input"]  # the shared norm's output, kept as qkv_input
    if a.dropout:
        terms["attn_dropout_mask"] = MASK_BYTES * tok * a.hidden / rest
        terms["mlp_dropout_mask"] = MASK_BYTES * tok * a.hidden / rest
    if recompute != "selective":
        terms.update(attention_score_terms(a))
    return terms


def attention_score_terms(shape: ActivationShape) -> dict[str, float]:
    """What the attention kernel itself keeps (selective recompute drops exactly this):
    the s x s scores of the unfused path, or flash attention's log-sum-exp."""
    a = shape
    heads = a.heads / a.tp
    if a.flash_attention:
        return {"softmax_lse": LSE_BYTES * a.tokens * heads}
    scores = float(a.tokens) * a.seq_len * heads  # every query of every local head
    out = {"softmax_output": a.dtype_bytes * scores}
    if a.dropout:
        out["softmax_dropout_mask"] = MASK_BYTES * scores
        out["softmax_dropout_output"] = a.dtype_bytes * scores
    return out


def block_activation_bytes(shape: ActivationShape, recompute: str) -> float:
    """The sum of `block_activation_terms`."""
    return sum(block_activation_terms(shape, recompute).values())


def recompute_working_bytes(shape: ActivationShape, recompute: str) -> float:
    """Transient bytes of one block while its backward runs, beyond what is stored:
    under full recompute the block's whole activations are rebuilt; under selective
    recompute the attention scores (or the log-sum-exp) of the block in backward."""
    if recompute == "full":
        return block_activation_bytes(shape, "none")
    if recompute == "selective":
        return sum(attention_score_terms(shape).values())
    return 0.0
