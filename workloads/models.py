"""Transformer model specs (GPT-style, Llama-style and their variants), GEMM shapes, FLOPs.

GPT-style (Megatron's GPT): LayerNorm, GeLU MLP, learned positions, biases, tied
embeddings, dropout. Llama-style (Touvron et al. 2023; Dubey et al. 2024): RMSNorm,
SwiGLU MLP, grouped-query attention, rotary positions, no biases, an untied output
layer, no dropout. Parameters are counted per architecture, so Llama 3 405B counts
405.85B (126 blocks of 3.19B, two 128,256 x 16,384 embeddings).

Variants of the public models that use them (workloads/data/models.yaml):
- positions: learned, rotary, or ALiBi (Press et al. 2022: a per-head linear bias added
  to the attention scores inside the attention kernel; no parameters, no extra kernel);
- the parallel attention + MLP block (GPT-J, GPT-NeoX, Falcon): both read the same
  block input, x + attn(ln1(x)) + mlp(ln2(x)), with one norm shared by both
  (`shared_norm`: GPT-J, Falcon-7B) or two (GPT-NeoX-20B, whose two norms are untied
  "due to a bug", Falcon-40B's new decoder architecture);
- multi-query and grouped-query attention (`kv_heads`: 1 for Falcon-7B);
- biases per part: GPT-J has none on the attention projections but keeps the MLP's
  (`attention_bias`), and a bias on its output layer (`output_bias`); MPT's LayerNorms
  have no bias (`norm_bias`); BLOOM normalises the word embedding (`embedding_norm`);
- tied or untied input and output embeddings.

The FLOPs formula is Narayanan et al. (2021), the one the AxoNN paper reports against:
96·T·l·h²·(1 + s/(6h) + V/(16·l·h)) for a GPT with activation recomputation, T tokens per
batch. `model_flops_per_iteration` generalises it (gated MLPs, grouped-query attention,
no recompute) and reduces to it exactly for the GPT presets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache
from importlib import resources

import yaml

from workloads.errors import WorkloadError

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 2}
"""Bytes per element of the weights, activations and gradients a run keeps. `fp8` is
Transformer Engine's FP8 training: the block's linear GEMMs run in FP8 (workloads/fp8.py)
while parameters, activations, gradients and communication stay bf16."""
FP8_ELEMENT_BYTES = 1
FP8_RECIPES = ("delayed", "current")
NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope", "alibi")


@dataclass(frozen=True, slots=True)
class TransformerSpec:
    """Shape of a decoder-only transformer."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int = 2048
    vocab: int = 51200
    ffn_hidden: int | None = None  # default 4·hidden
    gated_mlp: bool = False  # SwiGLU: up projection to 2·ffn_hidden
    kv_heads: int | None = None  # grouped-query attention; default = heads
    dtype: str = "bf16"
    # architecture family (GPT-style defaults; the Llama presets set the other values):
    norm: str = "layernorm"  # 'layernorm' (weight and bias) or 'rmsnorm' (weight only)
    position: str = "learned"  # 'learned' (seq_len x hidden parameters), 'rope' or 'alibi'
    bias: bool = True  # biases on the linear layers
    tied_embeddings: bool = True  # the output layer reuses the word embedding
    dropout: bool = True  # hidden and attention dropout (their 1-byte masks are stored)
    parallel_block: bool = False  # x + attn(ln1(x)) + mlp(ln2(x)) (GPT-J, GPT-NeoX, Falcon)
    shared_norm: bool = False  # parallel block: one norm feeds attention and MLP
    attention_bias: bool | None = None  # biases of QKV and attention-out (None: `bias`)
    norm_bias: bool = True  # LayerNorm's bias (MPT's LayerNorms have none)
    output_bias: bool = False  # a bias on the output layer (GPT-J's lm_head)
    embedding_norm: bool = False  # a LayerNorm on the word embedding (BLOOM)
    fp8_recipe: str = "delayed"  # fp8: TE's DelayedScaling or Float8CurrentScaling ('current')

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "seq_len", "vocab"):
            if getattr(self, f) <= 0:
                raise WorkloadError(f"model.{f} must be positive, got {getattr(self, f)}")
        if self.hidden % self.heads:
            raise WorkloadError(
                f"model.hidden ({self.hidden}) must be divisible by model.heads ({self.heads})"
            )
        if self.kv_heads is not None and (self.kv_heads <= 0 or self.heads % self.kv_heads):
            raise WorkloadError(
                f"model.kv_heads ({self.kv_heads}) must divide model.heads ({self.heads})"
            )
        for f, allowed in (("norm", NORMS), ("position", POSITIONS)):
            if getattr(self, f) not in allowed:
                raise WorkloadError(
                    f"model.{f} '{getattr(self, f)}' unknown (use one of {', '.join(allowed)})"
                )
        if self.dtype not in DTYPE_BYTES:
            raise WorkloadError(
                f"model.dtype '{self.dtype}' unknown (use one of {', '.join(DTYPE_BYTES)})"
            )
        if self.fp8_recipe not in FP8_RECIPES:
            raise WorkloadError(
                f"model.fp8_recipe '{self.fp8_recipe}' unknown (use one of {', '.join(FP8_RECIPES)})"
            )
        if self.shared_norm and not self.parallel_block:
            raise WorkloadError(
                "model.shared_norm needs model.parallel_block (a sequential block's second "
                "norm reads the attention's output, so it cannot be shared)"
            )

    @property
    def ffn(self) -> int:
        return self.ffn_hidden if self.ffn_hidden is not None else 4 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        return (self.kv_heads or self.heads) * self.head_dim

    @property
    def qkv_out(self) -> int:
        """Output width of the fused QKV projection."""
        return self.hidden + 2 * self.kv_dim

    @property
    def mlp_up_out(self) -> int:
        return 2 * self.ffn if self.gated_mlp else self.ffn

    @property
    def dtype_bytes(self) -> int:
        """Bytes per stored element (weights, activations, gradients, communication)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def fp8(self) -> bool:
        """FP8 training (Transformer Engine): the block's linear GEMMs take FP8 inputs."""
        return self.dtype == "fp8"

    @property
    def has_attention_bias(self) -> bool:
        return self.bias if self.attention_bias is None else self.attention_bias

    @property
    def block_norms(self) -> int:
        """Normalisations per block: two, or one shared by a parallel block's branches."""
        return 1 if self.shared_norm else 2

    def linear_shapes(self) -> list[tuple[str, int, int]]:
        """The linear layers of one block as (name, in_features k, out_features n), in
        module order. AxoNN transposes every other one (attn_out and mlp_down)."""
        return [
            ("qkv", self.hidden, self.qkv_out),
            ("attn_out", self.hidden, self.hidden),
            ("mlp_up", self.hidden, self.mlp_up_out),
            ("mlp_down", self.ffn, self.hidden),
        ]

    @property
    def norm_params(self) -> int:
        """Parameters of one normalisation: LayerNorm's weight and bias (MPT: weight
        only), RMSNorm's weight."""
        with_bias = self.norm == "layernorm" and self.norm_bias
        return (2 if with_bias else 1) * self.hidden

    def linear_has_bias(self, name: str) -> bool:
        """Whether block linear `name` (qkv, attn_out, mlp_up, mlp_down) has a bias."""
        return self.has_attention_bias if name in ("qkv", "attn_out") else self.bias

    @property
    def bias_params_per_layer(self) -> int:
        """Biases of a block's four linear layers (0 without biases)."""
        return sum(n for name, _, n in self.linear_shapes() if self.linear_has_bias(name))

    @property
    def params_per_layer(self) -> int:
        linear = sum(k * n for _, k, n in self.linear_shapes())
        return linear + self.bias_params_per_layer + self.block_norms * self.norm_params

    @property
    def position_params(self) -> int:
        """The learned position embedding (none with rotary embeddings)."""
        return self.seq_len * self.hidden if self.position == "learned" else 0

    @property
    def embedding_params(self) -> int:
        """Word embedding, learned positions and BLOOM's embedding LayerNorm."""
        norm = self.norm_params if self.embedding_norm else 0
        return self.vocab * self.hidden + self.position_params + norm

    @property
    def output_params(self) -> int:
        """The output layer's own weight (none when tied to the word embedding) and its
        bias (GPT-J's, also when tied)."""
        weight = 0 if self.tied_embeddings else self.vocab * self.hidden
        return weight + (self.vocab if self.output_bias else 0)

    @property
    def num_params(self) -> int:
        """All parameters: blocks, embeddings, the final norm and an untied output layer."""
        return (
            self.layers * self.params_per_layer
            + self.embedding_params
            + self.norm_params
            + self.output_params
        )


def layer_forward_flops(spec: TransformerSpec, tokens: float) -> float:
    """Forward FLOPs of one transformer block for `tokens` tokens (matmuls + attention)."""
    linear = 2.0 * tokens * sum(k * n for _, k, n in spec.linear_shapes())
    attention = 4.0 * tokens * spec.seq_len * spec.hidden  # QK^T and PV, full (not causal-halved)
    return linear + attention


def model_flops_per_iteration(
    spec: TransformerSpec, tokens: float, recompute: bool = True
) -> float:
    """FLOPs of one iteration over `tokens` tokens (Narayanan et al. 2021).

    With recompute: 4 passes of every block (fwd, recompute, 2 for backward); without: 3.
    The logits layer is counted 3 times (no recompute). For the GPT presets this equals
    96·T·l·h²·(1 + s/(6h) + V/(16·l·h)).
    """
    passes = 4.0 if recompute else 3.0
    blocks = passes * spec.layers * layer_forward_flops(spec, tokens)
    logits = 6.0 * tokens * spec.hidden * spec.vocab
    return blocks + logits


def published_gpt_flops(layers: int, hidden: int, seq_len: int, vocab: int, tokens: float) -> float:
    """The paper's closed form, for tests: 96·T·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    h = float(hidden)
    return (
        96.0 * tokens * layers * h * h * (1.0 + seq_len / (6.0 * h) + vocab / (16.0 * layers * h))
    )


@cache
def model_presets() -> dict[str, TransformerSpec]:
    text = resources.files("workloads").joinpath("data/models.yaml").read_text()
    raw = yaml.safe_load(text)
    return {name: TransformerSpec(name=name, **fields) for name, fields in raw.items()}


def model_preset(name: str) -> TransformerSpec:
    """A preset by name (case-insensitive, e.g. 'GPT-80B')."""
    presets = model_presets()
    key = name.strip().lower()
    if key not in presets:
        raise WorkloadError(f"unknown model '{name}' (known: {', '.join(presets)})")
    return presets[key]


def with_overrides(spec: TransformerSpec, **fields: object) -> TransformerSpec:
    """A copy of a spec with some fields replaced (validated)."""
    clean = {k: v for k, v in fields.items() if v is not None}
    return replace(spec, **clean)  # type: ignore[arg-type]
