"""The resolved setup of a TP x PP x DP hybrid and its per-GPU layer layouts.

One generator serves Megatron-LM, ZeRO-3/FSDP/HSDP, ZeRO++ (flat and hierarchical),
FSDP+TP and FSDP+PP: they are all the same three axes (Megatron tensor parallelism,
pipeline stages, data parallelism) with a different treatment of the data axis:
`ddp` (bucketed gradient all-reduce), `distopt` (Megatron's distributed optimizer:
reduce-scatter gradients, all-gather parameters) or `sharded` (ZeRO-3/FSDP: parameters
gathered before use, gradients reduce-scattered). Each strategy's pydantic parameters
are translated into a `HybridSetup` (workloads/hybrid/configure.py).

Rank order, fastest first: tensor parallel, context parallel, shard, replicate, pipeline
stage (Megatron's "tp-cp-dp-pp" order, with the data axis split into shard x replicate
for HSDP).

Pipeline stages may be uneven (`stage_layers`: Llama 3 405B puts 7 of its 126 layers on
the first and the last of 16 stages, 8 on the others, so that the embedding and the loss
count as a layer each; Dubey et al. 2024, Section 3.3.2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from workloads.errors import WorkloadError
from workloads.hybrid.frameworks import DeepSpeedRuntime, FsdpRuntime
from workloads.models import TransformerSpec
from workloads.transformer import BlockShape

DataMode = Literal["ddp", "distopt", "sharded", "deepspeed"]
Level = Literal["pair", "node", "global"]
Recompute = Literal["none", "full", "selective"]
CpComm = Literal["p2p", "all_gather", "a2a"]


@dataclass(frozen=True)
class ShardingSetup:
    """How a sharded data axis gathers weights and reduces gradients.

    granularity: 'block' gathers one flat unit per transformer block (FSDP); 'linear'
    gathers each linear weight on use, small parameters staying replicated (DeepSpeed
    ZeRO-3 with its persistence threshold). forward_level / backward_level: the partition
    the forward / backward (and recompute) all-gathers read from ('global' = the whole
    shard group; 'node' = ZeRO++'s hpZ secondary partition; 'pair' = a GCD pair).
    gradient_level: the finest level of the hierarchical gradient reduction ('global' =
    one reduce-scatter over the shard group; 'node' = inside the node, then across nodes;
    'pair' = inside the GCD pair, across the node's pairs, across nodes).
    qwz / qgz: int8 forward weights / int4 gradients (ZeRO++).
    fsdp: PyTorch FSDP's runtime as configured (None: the idealised ZeRO-3/FSDP of the
    papers: every gather issued after the compute before it, one unit prefetched).
    """

    granularity: Literal["block", "linear", "model"] = "block"
    forward_prefetch: bool = True
    backward_prefetch: bool = True
    reshard_after_forward: bool = True
    sync_every_microbatch: bool = True
    forward_level: Level = "global"
    backward_level: Level = "global"
    gradient_level: Level = "global"
    qwz: bool = False
    qgz: bool = False
    fsdp: FsdpRuntime | None = None


TE_COMM_SMS = 16
"""num_sm of Transformer Engine's userbuffers pipeline and bulk methods (module/base.py
initialize_ub get_default_config: 16 unless the method is ring_exchange, whose copy-
engine transfers take 1 and no margin)."""
TE_PIPELINE_SPLITS = 4
"""num_splits of TE's pipeline method (get_default_config: 4; ring_exchange: tp)."""


@dataclass(frozen=True)
class TpOverlapSetup:
    """Userbuffers' settings for tensor-parallel overlap (workloads/hybrid/tp_overlap.py),
    TE's defaults unless configured: the row-parallel forward's reduce-scatter method
    ('pipeline', or 'ring_exchange': TE's split_overlap_rs_p2p), the SMs of the pipeline
    and bulk kernels, whether their GEMMs leave those SMs free (set_sm_margin; the ring
    reduce-scatter then leaves its 1), and the pipeline's chunks."""

    comm_sms: int = TE_COMM_SMS
    pipeline_splits: int = TE_PIPELINE_SPLITS
    rs_method: Literal["pipeline", "ring_exchange"] = "pipeline"
    sm_margin: bool = True

    @property
    def margin(self) -> int:
        """SMs the pipeline and bulk GEMMs leave to their communication kernels."""
        return self.comm_sms if self.sm_margin else 0

    @property
    def ring_rs_margin(self) -> int:
        """SMs a ring-exchange reduce-scatter's GEMMs leave (its num_sm is 1)."""
        return 1 if self.sm_margin else 0


@dataclass(frozen=True)
class HybridSetup:
    """Every choice the hybrid generator needs besides the model."""

    strategy: str
    tp: int = 1
    pp: int = 1
    dp: int = 1
    shard: int = 1
    cp: int = 1  # context parallel: GPUs splitting every sequence (Megatron-Core)
    cp_comm: CpComm = "p2p"
    stage_layers: tuple[int, ...] = ()  # transformer layers per pipeline rank; () = even
    sequence_parallel: bool = False
    distribute_saved_activations: bool = False  # Megatron: saved block inputs split over tp
    virtual_stages: int = 1
    microbatch_sequences: int = 1
    microbatches: int = 1
    recompute: Recompute = "full"
    data_mode: DataMode = "ddp"
    sharding: ShardingSetup = field(default_factory=ShardingSetup)
    bucket_elems: int = 40_000_000
    overlap_grad_reduce: bool = True
    overlap_param_gather: bool = True
    grad_reduce_bytes: int = 4
    optimizer: str = "adam"
    flash_attention: bool = True
    compress_microbatches: bool = True
    gpus_per_node: int = 8
    fp8: bool = False  # Transformer Engine FP8 linears (workloads/fp8.py): the amax group
    tp_overlap: TpOverlapSetup | None = None  # userbuffers TP overlap (tp_overlap.py)
    # DeepSpeed's runtime (strategy deepspeed; stage 3 also sets data_mode 'sharded')
    deepspeed: DeepSpeedRuntime | None = None
    cross_entropy: str = "eager"  # loss kernel: eager, fused or vocab-parallel
    train_metrics: int = 0  # Composer's per-microbatch training metrics (program.py)

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def grad_ranks(self) -> int:
        """GPUs holding the same weights: data parallel x context parallel (Megatron
        reduces gradients and shards the distributed optimizer over both)."""
        return self.dp * self.cp

    @property
    def replicate(self) -> int:
        return self.dp // self.shard

    @property
    def sharded(self) -> bool:
        return self.data_mode == "sharded"

    @property
    def fsdp(self) -> FsdpRuntime | None:
        """PyTorch FSDP's runtime when the data axis runs it."""
        return self.sharding.fsdp if self.sharded else None

    @property
    def chunks(self) -> int:
        return self.pp * self.virtual_stages


@dataclass(frozen=True)
class TpLinear:
    """A linear layer split Megatron-style over `tp` GPUs: column-parallel layers split
    the output features (n), row-parallel ones the input features (k)."""

    name: str
    k: int
    n: int
    column: bool
    tp: int
    bias: bool = True

    @property
    def k_local(self) -> int:
        return self.k if self.column else self.k // self.tp

    @property
    def n_local(self) -> int:
        return math.ceil(self.n / self.tp) if self.column else self.n

    @property
    def weight_elems(self) -> int:
        return self.k_local * self.n_local

    @property
    def bias_elems(self) -> int:
        return self.n_local if self.bias else 0


def block_linears(spec: TransformerSpec, tp: int) -> tuple[TpLinear, ...]:
    """QKV and MLP-up column-parallel, attention-out and MLP-down row-parallel."""
    return tuple(
        TpLinear(name, k, n, column=i % 2 == 0, tp=tp, bias=spec.linear_has_bias(name))
        for i, (name, k, n) in enumerate(spec.linear_shapes())
    )


def logits_linear(spec: TransformerSpec, tp: int) -> TpLinear:
    """The output projection h -> vocab, vocabulary-parallel (column, no bias)."""
    return TpLinear("logits", spec.hidden, spec.vocab, column=True, tp=tp, bias=False)


def check_tensor_parallel(spec: TransformerSpec, tp: int, field_name: str) -> None:
    """Raise WorkloadError (naming `field_name`) unless `tp` splits the model evenly."""
    kv = spec.kv_heads or spec.heads
    problems = [
        (spec.heads % tp, f"{spec.heads} attention heads"),
        (kv % tp, f"{kv} key/value heads"),
        (spec.ffn % tp, f"MLP width {spec.ffn}"),
    ]
    for bad, what in problems:
        if bad:
            raise WorkloadError(f"{field_name}={tp} does not divide the model's {what}")


def block_params(spec: TransformerSpec, tp: int) -> int:
    """Parameters of one block per GPU: split linears, their biases, the two norms."""
    return sum(lay.weight_elems for lay in block_linears(spec, tp)) + block_small_params(spec, tp)


def block_small_params(spec: TransformerSpec, tp: int) -> int:
    """Biases and norm parameters of one block per GPU."""
    biases = sum(lay.bias_elems for lay in block_linears(spec, tp))
    return biases + spec.block_norms * spec.norm_params


def block_shape(
    spec: TransformerSpec,
    tp: int,
    sequence_parallel: bool,
    tokens: int,
    flash_attention: bool = True,
) -> BlockShape:
    """Per-GPU kernel sizes of a block for `tokens` tokens per microbatch."""
    lin = block_linears(spec, tp)
    return BlockShape(
        res_tokens=tokens // tp if sequence_parallel else tokens,
        res_width=spec.hidden,
        attn_tokens=tokens,
        heads=spec.heads // tp,
        head_dim=spec.head_dim,
        qkv_width=lin[0].n_local,
        act_tokens=tokens,
        act_width=lin[2].n_local,
        seq_len=spec.seq_len,
        gated=spec.gated_mlp,
        flash_attention=flash_attention,
        rope=spec.position == "rope",
    )


@dataclass(frozen=True)
class Chunk:
    """The layers [start, stop) one pipeline rank runs as one model chunk."""

    index: int
    start: int
    stop: int
    first: bool  # holds the embedding
    last: bool  # holds the final LayerNorm, logits and loss


def stage_layer_counts(spec: TransformerSpec, setup: HybridSetup) -> tuple[int, ...]:
    """Transformer layers of every pipeline rank (`stage_layers`, or an even split)."""
    if setup.stage_layers:
        return setup.stage_layers
    return (spec.layers // setup.pp,) * setup.pp


def stage_chunks(spec: TransformerSpec, setup: HybridSetup, stage: int) -> tuple[Chunk, ...]:
    """Model chunks of pipeline rank `stage` (interleaved: chunk c of rank s is virtual
    stage c*pp + s; a rank's layers split evenly over its v chunks, and layers follow
    the virtual-stage order, as Megatron-Core's layer offsets do)."""
    counts = stage_layer_counts(spec, setup)
    v, p = setup.virtual_stages, setup.pp
    sizes = [counts[vs % p] // v for vs in range(v * p)]  # per virtual stage
    out = []
    for c in range(v):
        vs = c * p + stage
        start = sum(sizes[:vs])
        out.append(Chunk(c, start, start + sizes[vs], first=vs == 0, last=vs == v * p - 1))
    return tuple(out)


def stage_param_counts(spec: TransformerSpec, setup: HybridSetup, stage: int) -> dict[str, int]:
    """Parameters per GPU on a pipeline rank: 'blocks', 'embedding' (word + learned
    position + an embedding norm), 'head' (final norm, plus the output weight when it is
    untied or not on the embedding's stage, and a vocabulary-parallel output bias) and
    'small' (biases, norms, position embedding: what stays replicated under per-linear
    ZeRO-3)."""
    t = setup.tp
    chunks = stage_chunks(spec, setup, stage)
    layers = sum(c.stop - c.start for c in chunks)
    lg = logits_linear(spec, t)
    vocab_local = lg.weight_elems
    first = any(c.first for c in chunks)
    last = any(c.last for c in chunks)
    emb_norm = spec.norm_params if spec.embedding_norm else 0
    embedding = vocab_local + spec.position_params + emb_norm if first else 0
    own_output = last and (not first or not spec.tied_embeddings)
    out_bias = lg.n_local if spec.output_bias else 0
    head = (spec.norm_params + out_bias if last else 0) + (vocab_local if own_output else 0)
    small = layers * block_small_params(spec, t)
    small += spec.position_params + emb_norm if first else 0
    small += spec.norm_params + out_bias if last else 0
    return {
        "blocks": layers * block_params(spec, t),
        "embedding": embedding,
        "head": head,
        "small": small,
        "total": layers * block_params(spec, t) + embedding + head,
    }
