"""The registry of parallel strategies: their parameter models and degree checks.

Each strategy contributes a pydantic parameter model (discriminated by `strategy`) and a
workload builder. `ParallelConfig` is the union the experiment config validates against.

| strategy | parameters | generator |
|---|---|---|
| axonn | workloads/axonn/params.py | workloads/axonn/ (4D hybrid) |
| megatron | workloads/hybrid/params.py | workloads/hybrid/ (TP x PP x DP) |
| zero3, fsdp, hsdp | workloads/hybrid/params.py | workloads/hybrid/ (sharded data axis) |
| zeropp, zeropp-hier | workloads/hybrid/params.py | workloads/hybrid/ (ZeRO++ levels) |
| deepspeed | workloads/hybrid/deepspeed_params.py | workloads/hybrid/ (ZeRO 0-3, pipeline engine) |
| fsdp-tp, fsdp-pp | workloads/hybrid/params.py | workloads/hybrid/ |
| optimus | workloads/optimus/params.py | workloads/optimus/ (SUMMA 2D) |

Process groups and their report aliases (the report's x / y / z / data contract; pipeline
send/recv time is reported under its own key 'pp'):

| strategy | groups -> report |
|---|---|
| axonn | x, y, z, data (and world) as named |
| megatron | tp -> x, dp -> data, embed -> data, amax (FP8) -> data, pp -> pp, cp -> cp |
| zero3, fsdp, hsdp | shard -> z, replicate -> data, dp -> data |
| zeropp, zeropp-hier | shard, zpair, zpair_x, znode, znode_x, zinter -> z; dp -> data |
| deepspeed | tp -> x, dp -> data (stage 3: shard and dp -> z), pp -> pp, embed -> data |
| fsdp-tp | tp -> x, shard -> z, replicate -> data, dp -> data |
| fsdp-pp | shard -> z, replicate -> data, dp -> data, embed -> data, pp -> pp |
| optimus | row -> x, col -> y, dp -> data |
"""

from __future__ import annotations

from workloads.axonn.params import AxonnParallel
from workloads.errors import WorkloadError
from workloads.hybrid.params import (
    DeepSpeedParallel,
    FsdpPpParallel,
    FsdpTpParallel,
    MegatronParallel,
    ShardedParallel,
    ZeroppHierParallel,
    ZeroppParallel,
)
from workloads.models import TransformerSpec
from workloads.optimus.params import OptimusParallel

ParallelConfig = (
    AxonnParallel
    | MegatronParallel
    | ShardedParallel
    | DeepSpeedParallel
    | ZeroppParallel
    | ZeroppHierParallel
    | FsdpTpParallel
    | FsdpPpParallel
    | OptimusParallel
)

STRATEGY_NAMES: tuple[str, ...] = (
    "axonn",
    "megatron",
    "zero3",
    "fsdp",
    "hsdp",
    "deepspeed",
    "zeropp",
    "zeropp-hier",
    "fsdp-tp",
    "fsdp-pp",
    "optimus",
)


def _axonn_degrees(params: AxonnParallel, gpus: int) -> dict[str, int]:
    if params.grid is None:
        return {"pipeline": params.pipeline}
    g = params.grid
    total = g.size * params.pipeline
    if total != gpus:
        raise WorkloadError(
            f"parallel.grid: X*Y*Z*data*pipeline = {g.x}*{g.y}*{g.z}*{g.data}*{params.pipeline} = {total} "
            f"does not equal the {gpus} GPUs of the cluster"
        )
    return {"x": g.x, "y": g.y, "z": g.z, "data": g.data, "pipeline": params.pipeline}


def _optimus_degrees(params: OptimusParallel, gpus: int) -> dict[str, int]:
    if params.q is None:
        if params.data is not None and gpus % params.data:
            raise WorkloadError(f"parallel.data={params.data} does not divide the {gpus} GPUs")
        return {}
    q2 = params.q * params.q
    data = params.data if params.data is not None else gpus // q2
    if q2 * data != gpus:
        raise WorkloadError(
            f"parallel.q: q^2 x data = {q2} x {data} does not equal the {gpus} GPUs"
        )
    return {"q": params.q, "data": data}


def _hybrid_degrees(params: ParallelConfig, gpus: int) -> dict[str, int]:
    tp = getattr(params, "tp", None) or 1
    pp = getattr(params, "pp", None) or 1
    cp = 1
    if isinstance(params, MegatronParallel):
        pp, cp = params.pipeline_size or 1, params.cp
    if isinstance(params, DeepSpeedParallel):
        pp = params.pipeline_size or 1
    if gpus % (tp * pp * cp):
        what = (
            f"tp*pp*cp = {tp}*{pp}*{cp} = {tp * pp * cp}"
            if cp > 1
            else f"tp*pp = {tp}*{pp} = {tp * pp}"
        )
        raise WorkloadError(f"parallel: {what} does not divide the {gpus} GPUs")
    out = {"tp": tp, "pp": pp, "dp": gpus // (tp * pp * cp)}
    if cp > 1:
        out["cp"] = cp
    shard = getattr(params, "shard", None)
    if shard is not None and out["dp"] % shard:
        raise WorkloadError(
            f"parallel.shard={shard} does not divide the {out['dp']} data-parallel GPUs"
        )
    return out


def parallel_degrees(params: ParallelConfig, gpus: int) -> dict[str, int]:
    """Check the strategy's degrees against the GPU count; return them by name."""
    if isinstance(params, AxonnParallel):
        return _axonn_degrees(params, gpus)
    if isinstance(params, OptimusParallel):
        return _optimus_degrees(params, gpus)
    if params.strategy in STRATEGY_NAMES:
        return _hybrid_degrees(params, gpus)
    raise WorkloadError(f"unknown strategy {params!r}")


HYBRID_ONLY_MODEL_FIELDS: tuple[tuple[str, str], ...] = (
    ("dtype", "fp8 (Transformer Engine's FP8 linears)"),
    ("parallel_block", "the parallel attention + MLP block"),
    ("position", "ALiBi positions"),
    ("attention_bias", "attention biases that differ from the MLP's"),
    ("norm_bias", "LayerNorms without a bias"),
    ("output_bias", "an output-layer bias"),
    ("embedding_norm", "an embedding LayerNorm"),
)
"""Model features only the hybrid generator (workloads/hybrid: megatron, the ZeRO/FSDP
family) emits; AxoNN's and Optimus' generators replay their released code, which has
none of them."""


def _uses(spec: TransformerSpec, field: str) -> bool:
    checks = {
        "dtype": spec.fp8,
        "parallel_block": spec.parallel_block,
        "position": spec.position == "alibi",
        "attention_bias": spec.has_attention_bias != spec.bias,
        "norm_bias": not spec.norm_bias,
        "output_bias": spec.output_bias,
        "embedding_norm": spec.embedding_norm,
    }
    return checks[field]


def check_model_support(spec: TransformerSpec, strategy: str) -> None:
    """Raise WorkloadError (naming the model field) when `strategy`'s generator does not
    implement a feature the model uses."""
    if strategy not in ("axonn", "optimus"):
        return
    for field, what in HYBRID_ONLY_MODEL_FIELDS:
        if _uses(spec, field):
            raise WorkloadError(
                f"model.{field}: the {strategy} generator does not implement {what}; "
                "use megatron or another hybrid strategy (zero3, fsdp, fsdp-tp, ...)"
            )
