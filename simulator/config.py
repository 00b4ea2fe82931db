"""The experiment configuration: one frozen pydantic model loaded from YAML.

Sections: cluster (machine and what-if overrides), model (a preset plus field overrides),
parallel (the strategy and its parameters, chosen by the `strategy` discriminator),
training (batch, microbatching, checkpointing) and engine (mode, network fidelity,
collective algorithms, calibration).

Dotted overrides (`--set section.field=value`) are applied to the raw mapping *before*
validation, so an override is checked exactly like the YAML it replaces. Values are parsed
as YAML scalars (`true`, `1.5`, `[1, 2]`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from copy import deepcopy
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from simulator.errors import ConfigError, SimulatorError
from topologies.catalogue import machine_preset
from topologies.errors import TopologyError
from topologies.hardware import gpu_catalogue
from topologies.limits import BANDWIDTH_SCALE_RANGE, MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS
from topologies.machines import MAX_GPUS
from topologies.user_input.files import read_user_text
from topologies.user_input.model import UserModel, first_error_line
from topologies.yaml_loader import load_user_yaml, yaml_error_line
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec, model_preset, with_overrides
from workloads.strategies import ParallelConfig, parallel_degrees


class Straggler(UserModel):
    """One slow GPU: its compute kernels take `slowdown` times longer (below 1: faster)."""

    rank: int = Field(ge=0)
    # 100x faster to 10,000x slower: beyond that the value is a typo, not a what-if
    slowdown: float = Field(ge=0.01, le=1e4)


class NodeGpus(UserModel):
    """Nodes whose GPUs are of another type than the machine's (a mixed machine): nodes
    `first_node` .. `first_node + nodes - 1` carry `gpu`. Their compute (kernel model,
    launch gaps, interference) and memory are that GPU's; the links stay the machine's
    (a node of another wiring is a custom topology file)."""

    first_node: int = Field(ge=0, le=MAX_GPUS)
    nodes: int = Field(gt=0, le=MAX_GPUS)
    gpu: str

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        v = v.strip().lower()
        if v not in gpu_catalogue():
            raise ValueError(f"unknown GPU '{v}' (known: {', '.join(sorted(gpu_catalogue()))})")
        return v


# Bounds of the bandwidth what-ifs (topologies/limits.py: shared with the topology
# builders, the CLI flags and custom topology files).
class ClusterConfig(UserModel):
    """The machine: a preset (or a custom topology file) at a size, plus what-if overrides."""

    machine: str = "perlmutter"
    nodes: int | None = Field(default=None, gt=0, le=MAX_GPUS)
    gpus: int | None = Field(default=None, gt=0, le=MAX_GPUS)
    gpu: str | None = None
    topology_file: str | None = None
    nic_bandwidth_GBps: float | None = Field(
        default=None, ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS
    )
    nics_per_node: int | None = Field(default=None, gt=0)
    intra_node_bandwidth_scale: float = Field(
        default=1.0, ge=BANDWIDTH_SCALE_RANGE[0], le=BANDWIDTH_SCALE_RANGE[1]
    )
    fabric_link_bandwidth_GBps: float | None = Field(
        default=None, ge=MIN_BANDWIDTH_GBPS, le=MAX_BANDWIDTH_GBPS
    )
    routing: Literal["minimal", "valiant", "adaptive", "ecmp"] | None = None
    gpudirect_rdma: bool = Field(
        default=True,
        description=(
            "Whether the collective library moves network data GPU <-> NIC directly "
            "(GPUDirect RDMA, what a well-configured job gets). false: staged through host "
            "memory, every network byte crossing each end's GPU <-> CPU link, as RCCL runs "
            "on Frontier without NCCL_NET_GDR_LEVEL=PHB (topologies/host_staging.py)."
        ),
    )
    stragglers: tuple[Straggler, ...] = ()
    node_gpus: tuple[NodeGpus, ...] = ()

    @field_validator("machine")
    @classmethod
    def _known_machine(cls, v: str) -> str:
        v = v.strip().lower()
        if v != "custom":
            try:
                machine_preset(v)
            except TopologyError as e:
                raise ValueError(str(e)) from None
        return v

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str | None) -> str | None:
        if v is None:
            return v
        v = v.strip().lower()
        if v not in gpu_catalogue():
            raise ValueError(f"unknown GPU '{v}' (known: {', '.join(sorted(gpu_catalogue()))})")
        return v

    @model_validator(mode="after")
    def _size(self) -> ClusterConfig:
        if self.machine == "custom":
            if not self.topology_file:
                raise ValueError("machine 'custom' needs cluster.topology_file")
            if not self.gpudirect_rdma:
                raise ValueError(
                    "cluster.gpudirect_rdma: false is for machine presets (a custom topology "
                    "file states its own GPU-NIC paths)"
                )
            return self
        per_node = machine_preset(self.machine).gpus_per_node
        if self.nodes is None and self.gpus is None:
            raise ValueError("give cluster.nodes or cluster.gpus")
        if self.gpus is not None and self.gpus % per_node:
            raise ValueError(
                f"cluster.gpus={self.gpus} is not a multiple of {per_node} GPUs per {self.machine} node"
            )
        if self.nodes is not None and self.gpus is not None and self.nodes * per_node != self.gpus:
            raise ValueError(f"cluster.nodes={self.nodes} and cluster.gpus={self.gpus} disagree")
        check_node_gpus(self.node_gpus, self.num_nodes)
        return self

    @property
    def gpus_per_node(self) -> int:
        return machine_preset(self.machine).gpus_per_node if self.machine != "custom" else 0

    @property
    def num_gpus(self) -> int | None:
        """GPU count, or None for custom topologies (known only once the file is read)."""
        if self.machine == "custom":
            return self.gpus
        if self.gpus is not None:
            return self.gpus
        assert self.nodes is not None
        return self.nodes * self.gpus_per_node

    @property
    def num_nodes(self) -> int | None:
        n = self.num_gpus
        return None if n is None or self.machine == "custom" else n // self.gpus_per_node

    @property
    def gpu_type(self) -> str:
        if self.gpu:
            return self.gpu
        return machine_preset(self.machine).gpu if self.machine != "custom" else "h100"


def check_node_gpus(runs: Sequence[NodeGpus], nodes: int | None) -> None:
    """ValueError naming the entry when `cluster.node_gpus` runs overlap or (with a node
    count known) go past the last node."""
    taken: list[tuple[int, int, int]] = []
    for i, run in enumerate(runs):
        end = run.first_node + run.nodes
        if nodes is not None and end > nodes:
            raise ValueError(
                f"node_gpus.{i}: nodes {run.first_node}..{end - 1} go past the "
                f"machine's {nodes} nodes (0..{nodes - 1})"
            )
        for j, a, b in taken:
            if run.first_node < b and a < end:
                raise ValueError(
                    f"node_gpus.{i}: nodes {run.first_node}..{end - 1} overlap "
                    f"node_gpus.{j} (nodes {a}..{b - 1})"
                )
        taken.append((i, run.first_node, end))


class ModelConfig(UserModel):
    """A transformer: a preset name plus optional field overrides."""

    name: str = "gpt-80b"
    # upper bounds far beyond any real model (GPT-640B: 192 layers, hidden 16,384): they
    # stop a typo from building a program that exhausts memory
    layers: int | None = Field(default=None, gt=0, le=4096)
    hidden: int | None = Field(default=None, gt=0, le=2**20)
    heads: int | None = Field(default=None, gt=0, le=2**14)
    kv_heads: int | None = Field(default=None, gt=0, le=2**14)
    ffn_hidden: int | None = Field(default=None, gt=0, le=2**22)
    gated_mlp: bool | None = None
    seq_len: int | None = Field(default=None, gt=0, le=2**24)
    vocab: int | None = Field(default=None, gt=0, le=2**24)
    dtype: Literal["bf16", "fp16", "fp32", "fp8"] | None = Field(
        default=None,
        description="fp8: Transformer Engine's FP8 training (delayed scaling) on GPUs with "
        "FP8 tensor cores: the block's linear GEMMs in FP8, everything else bf16 "
        "(hybrid strategies only)",
    )
    fp8_recipe: Literal["delayed", "current"] | None = Field(
        default=None,
        description="with dtype fp8: Transformer Engine's DelayedScaling (amax histories "
        "reduced once per pass; Megatron's default) or Float8CurrentScaling (each tensor's "
        "amax taken right before its cast)",
    )
    norm: Literal["layernorm", "rmsnorm"] | None = None
    position: Literal["learned", "rope", "alibi"] | None = None
    bias: bool | None = None
    tied_embeddings: bool | None = None
    dropout: bool | None = None
    parallel_block: bool | None = Field(
        default=None,
        description="attention and MLP in parallel from the block input (GPT-J, GPT-NeoX, Falcon)",
    )
    shared_norm: bool | None = Field(
        default=None, description="parallel block: one norm feeds both branches (GPT-J, Falcon-7B)"
    )
    attention_bias: bool | None = Field(
        default=None, description="biases on QKV and attention-out (default: model.bias)"
    )
    norm_bias: bool | None = Field(default=None, description="LayerNorm bias (MPT: false)")
    output_bias: bool | None = Field(default=None, description="output-layer bias (GPT-J)")
    embedding_norm: bool | None = Field(
        default=None, description="LayerNorm on the word embedding (BLOOM)"
    )

    @model_validator(mode="after")
    def _resolvable(self) -> ModelConfig:
        try:
            self.spec()
        except WorkloadError as e:
            raise ValueError(str(e)) from None
        return self

    def spec(self) -> TransformerSpec:
        base = model_preset(self.name)
        fields = self.model_dump(exclude={"name"})
        return with_overrides(base, **fields)


class TrainingConfig(UserModel):
    """Batch and memory-saving choices of the training run. Mixed precision as in every
    paper modelled: bf16 weights and gradients, fp32 master weights and optimizer state."""

    # 2^36 tokens: 4,096x the AxoNN paper's batch (a bound against typos, see ModelConfig)
    batch_tokens: int = Field(default=2**24, gt=0, le=2**36)
    microbatch_sequences: int | None = Field(default=None, gt=0, le=2**24)
    activation_checkpointing: bool = True
    optimizer: Literal["adam", "sgd"] = "adam"
    flash_attention: bool = Field(
        default=True,
        description="Fused flash attention; false = Megatron's unfused path (QK^T, softmax, "
        "dropout and PV kernels over the full s x s scores, which are also stored).",
    )
    attention_kernel: Literal["fa2", "fa1"] = Field(
        default="fa2",
        description="Which fused attention the software calls: fa2 (FlashAttention-2 class: "
        "flash-attn >= 2, PyTorch SDPA's flash backend, cuDNN / Transformer Engine fused "
        "attention) or fa1 (flash-attn 1.x and its Triton port, e.g. llm-foundry's "
        "attn_impl: triton), which runs at half the rate (FlashAttention-2 paper).",
    )
    cross_entropy: Literal["eager", "fused", "vocab-parallel"] | None = Field(
        default=None,
        description="The loss kernel, which sets the logits' memory: eager (PyTorch "
        "F.cross_entropy on fp32 logits: 14 bytes per logit at its peak), fused (a fused "
        "kernel writing the gradient in place into the bf16 logits, e.g. flash-attn's or "
        "llm-foundry's fused_crossentropy: 2), vocab-parallel (Megatron's in-place fp32 "
        "softmax: 6). None: the strategy's framework (Megatron and DeepSpeed: "
        "vocab-parallel; others: eager).",
    )
    train_metrics: int = Field(
        default=0,
        ge=0,
        description="Training metrics the framework updates on every microbatch's logits, "
        "each an eager PyTorch cross-entropy forward (the logits cast to fp32 under "
        "autocast, log_softmax): MosaicML Composer (0.14-0.17) runs "
        "Trainer._eval_train_metrics after every microbatch's backward, and llm-foundry's "
        "MPT declares two (LanguageCrossEntropy, LanguagePerplexity): 2. 0: none.",
    )


class EngineConfig(UserModel):
    """How the simulation is run and priced."""

    mode: Literal["auto", "full", "symmetric"] = "auto"
    network: Literal["alpha-beta", "contention"] = "contention"
    collective_algorithm: Literal[
        "auto", "ring", "tree", "recursive-halving-doubling", "direct", "hierarchical"
    ] = "auto"
    calibration: str | None = None
    collective_library: str | None = Field(
        default=None,
        description="The collective library build the network follows (default: the machine "
        "preset's, e.g. 'RCCL 2.18.6'): the algorithms it enables and the measured regimes "
        "it shows (machines.yaml collectives.regimes).",
    )
    steady_state: bool = True
    virtual_microbatches: bool = Field(
        default=True,
        description="With steady_state: emit the first, one middle and the last microbatch and "
        "count the middle one for all identical ones (proven exact by the engine, else "
        "expanded). False keeps every microbatch in the timeline (used for --out traces).",
    )
    compute_slowdown_under_overlap: float | None = Field(default=None, ge=1.0)

    @field_validator("calibration")
    @classmethod
    def _named_file(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("an empty path (give the calibration file, or leave it out)")
        return v

    @field_validator("collective_library")
    @classmethod
    def _named_library(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("an empty name (give a library build, e.g. 'RCCL 2.18.6')")
        return v


class ExperimentConfig(UserModel):
    """Everything that defines one simulated training iteration."""

    cluster: ClusterConfig
    model: ModelConfig = ModelConfig()
    parallel: Annotated[ParallelConfig, Field(discriminator="strategy")]
    training: TrainingConfig = TrainingConfig()
    engine: EngineConfig = EngineConfig()

    @model_validator(mode="after")
    def _cross_checks(self) -> ExperimentConfig:
        gpus = self.cluster.num_gpus
        spec = self.model.spec()
        if self.training.batch_tokens % spec.seq_len:
            raise ValueError(
                f"training.batch_tokens={self.training.batch_tokens} is not a multiple of model.seq_len={spec.seq_len}"
            )
        if gpus is not None:
            try:
                parallel_degrees(self.parallel, gpus)
            except WorkloadError as e:
                raise ValueError(str(e)) from None
        seen: set[int] = set()
        for s in self.cluster.stragglers:
            if gpus is not None and s.rank >= gpus:
                raise ValueError(f"cluster.stragglers: rank {s.rank} >= {gpus} GPUs")
            if s.rank in seen:
                raise ValueError(f"cluster.stragglers: rank {s.rank} is listed twice")
            seen.add(s.rank)
        if self.cluster.topology_file and self.cluster.machine != "custom":
            raise ValueError(
                f"cluster.topology_file: read only with machine: custom "
                f"(machine is {self.cluster.machine})"
            )
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json", exclude_none=True), sort_keys=False)


# ------------------------------------------------------------------ loading
def default_config_mapping() -> dict[str, Any]:
    """The embedded default: GPT-80B on 1,024 Perlmutter GPUs, the paper's setup."""
    text = resources.files("simulator").joinpath("data/default.yaml").read_text()
    return dict(yaml.safe_load(text))


def read_yaml_file(
    path: str | Path, what: str = "config file", error: type[SimulatorError] = ConfigError
) -> Any:
    """Parse a YAML file; `error` names the file when it is missing or not valid YAML."""
    p = Path(path)
    try:
        found, folder = p.exists(), p.is_dir()
    except OSError as e:  # a name the file system cannot even look up (too long, ...)
        raise error(f"{str(p)[:80]}: cannot read the {what} ({e.strerror})") from None
    if not found:
        raise error(f"{p}: {what} not found")
    if folder:
        raise error(f"{p}: is a folder, not a {what}")
    try:
        return load_user_yaml(read_user_text(p))
    except OSError as e:
        raise error(f"{p}: cannot read the {what} ({e.strerror})") from None
    except UnicodeDecodeError:
        raise error(f"{p}: not a text file (not UTF-8)") from None
    except yaml.YAMLError as e:
        raise error(f"{p}: not valid YAML ({yaml_error_line(e)})") from None


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file into a mapping; ConfigError names the file on failure."""
    data = read_yaml_file(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{Path(path)}: top level must be a mapping of sections")
    return data


def parse_override(item: str) -> tuple[list[str], Any]:
    """Split `a.b.c=value` into (['a','b','c'], parsed value)."""
    if "=" not in item:
        raise ConfigError(f"--set {item!r}: expected section.field=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if len(parts) < 2:
        raise ConfigError(
            f"--set {item!r}: the key must name a section and a field, e.g. engine.mode"
        )
    try:
        value = load_user_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        if raw.strip()[:1] in "[{":  # meant as a list or mapping: say why it is not one
            raise ConfigError(f"--set {item!r}: not valid YAML ({yaml_error_line(exc)})") from None
        value = raw
    return parts, value


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply dotted overrides to a raw config mapping (a deep copy is returned).

    As in a sweep, a `parallel.strategy` that changes the strategy resets the parallel
    section first (the old strategy's fields would not validate under the new one), and
    a GPU count replaces a node count (and the other way round) unless both are given.
    """
    out = deepcopy(dict(data))
    parsed = [(item, *parse_override(item)) for item in overrides]
    keys = {".".join(parts) for _, parts, _ in parsed}
    parsed.sort(key=lambda p: ".".join(p[1]) != "parallel.strategy")  # stable
    for item, parts, value in parsed:
        dotted = ".".join(parts)
        if dotted == "parallel.strategy":
            section = out.get("parallel")
            current = section.get("strategy", "axonn") if isinstance(section, dict) else None
            if current != value:
                out["parallel"] = {}
        elif dotted in ("cluster.gpus", "cluster.nodes") and isinstance(out.get("cluster"), dict):
            other = "cluster.nodes" if dotted == "cluster.gpus" else "cluster.gpus"
            if other not in keys:
                out["cluster"].pop(other.split(".")[1], None)
        cur: dict[str, Any] = out
        for p in parts[:-1]:
            nxt = cur.get(p)
            if nxt is None:
                nxt = {}
                cur[p] = nxt
            if not isinstance(nxt, dict):
                raise ConfigError(f"--set {item!r}: '{p}' is not a section")
            cur = nxt
        cur[parts[-1]] = value
    return out


def validate_config(data: Mapping[str, Any], source: str = "config") -> ExperimentConfig:
    """Validate a raw mapping; ConfigError gives the first problem as `field: message`."""
    try:
        return ExperimentConfig.model_validate(dict(data))
    except ValidationError as e:
        raise ConfigError(format_validation_error(e, source)) from None


def format_validation_error(e: ValidationError, source: str = "config") -> str:
    """`SOURCE: dotted.field: message` (the strategy tag of `parallel` is not a field)."""
    return first_error_line(e, source, skip=_UNION_TAGS)


from workloads.strategies import STRATEGY_NAMES  # noqa: E402

_UNION_TAGS: set[str] = set(STRATEGY_NAMES)


def load_config(
    path: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> ExperimentConfig:
    """Load a config file (or the embedded default) and apply `--set` overrides."""
    data = default_config_mapping() if path is None else read_yaml_mapping(path)
    data = apply_overrides(data, overrides)
    if path is None:
        data = _size_custom_default(data, overrides)
    return validate_config(data, source=str(path) if path else "config")


def _size_custom_default(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """The embedded default switched to a custom topology keeps no GPU count of its own.

    The default's 1,024 GPUs belong to its Perlmutter; a custom topology file says how many
    GPUs it has, so only a count the user gave (`cluster.gpus` / `cluster.nodes`) is kept.
    """
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and cluster.get("machine") == "custom":
        given = {
            key
            for key in ("gpus", "nodes")
            if any(o.startswith(f"cluster.{key}=") for o in overrides)
        }
        for key in ("gpus", "nodes"):
            if key not in given:
                cluster.pop(key, None)
    return data


def config_json_schema() -> dict[str, Any]:
    """JSON Schema of ExperimentConfig, for editors."""
    return ExperimentConfig.model_json_schema()
