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
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from simulator.errors import ConfigError, SimulatorError
from topologies.catalogue import machine_preset
from topologies.errors import TopologyError
from topologies.hardware import gpu_catalogue
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec, model_preset, with_overrides
from workloads.strategies import ParallelConfig, parallel_degrees

Frozen = ConfigDict(frozen=True, extra="forbid")


class Straggler(BaseModel):
    """One slow GPU: its compute kernels take `slowdown` times longer."""

    model_config = Frozen
    rank: int = Field(ge=0)
    slowdown: float = Field(gt=0)


class ClusterConfig(BaseModel):
    """The machine: a preset (or a custom topology file) at a size, plus what-if overrides."""

    model_config = Frozen
    machine: str = "perlmutter"
    nodes: int | None = Field(default=None, gt=0)
    gpus: int | None = Field(default=None, gt=0)
    gpu: str | None = None
    topology_file: str | None = None
    nic_bandwidth_GBps: float | None = Field(default=None, gt=0)
    nics_per_node: int | None = Field(default=None, gt=0)
    intra_node_bandwidth_scale: float = Field(default=1.0, gt=0)
    fabric_link_bandwidth_GBps: float | None = Field(default=None, gt=0)
    routing: Literal["minimal", "valiant", "adaptive", "ecmp"] | None = None
    stragglers: tuple[Straggler, ...] = ()

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


class ModelConfig(BaseModel):
    """A transformer: a preset name plus optional field overrides."""

    model_config = Frozen
    name: str = "gpt-80b"
    layers: int | None = Field(default=None, gt=0)
    hidden: int | None = Field(default=None, gt=0)
    heads: int | None = Field(default=None, gt=0)
    kv_heads: int | None = Field(default=None, gt=0)
    ffn_hidden: int | None = Field(default=None, gt=0)
    gated_mlp: bool | None = None
    seq_len: int | None = Field(default=None, gt=0)
    vocab: int | None = Field(default=None, gt=0)
    dtype: Literal["bf16", "fp16", "fp32"] | None = None

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


class TrainingConfig(BaseModel):
    """Batch and memory-saving choices of the training run."""

    model_config = Frozen
    batch_tokens: int = Field(default=2**24, gt=0)
    microbatch_sequences: int | None = Field(default=None, gt=0)
    activation_checkpointing: bool = True
    optimizer: Literal["adam", "sgd"] = "adam"
    flash_attention: bool = Field(
        default=True,
        description="Fused flash attention; false = Megatron's unfused path (QK^T, softmax, "
        "dropout and PV kernels over the full s x s scores, which are also stored).",
    )
    master_weights_fp32: bool = True


class EngineConfig(BaseModel):
    """How the simulation is run and priced."""

    model_config = Frozen
    mode: Literal["auto", "full", "symmetric"] = "auto"
    network: Literal["alpha-beta", "contention"] = "contention"
    collective_algorithm: Literal[
        "auto", "ring", "tree", "recursive-halving-doubling", "direct", "hierarchical"
    ] = "auto"
    calibration: str | None = None
    steady_state: bool = True
    virtual_microbatches: bool = Field(
        default=True,
        description="With steady_state: emit the first, one middle and the last microbatch and "
        "count the middle one for all identical ones (proven exact by the engine, else "
        "expanded). False keeps every microbatch in the timeline (used for --out traces).",
    )
    compute_slowdown_under_overlap: float | None = Field(default=None, ge=1.0)


class ExperimentConfig(BaseModel):
    """Everything that defines one simulated training iteration."""

    model_config = Frozen
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
        for s in self.cluster.stragglers:
            if gpus is not None and s.rank >= gpus:
                raise ValueError(f"cluster.stragglers: rank {s.rank} >= {gpus} GPUs")
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
    if not p.is_file():
        raise error(f"{p}: {what} not found")
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise error(f"{p}: not valid YAML ({str(e).splitlines()[0]})") from None


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
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply dotted overrides to a raw config mapping (a deep copy is returned)."""
    out = deepcopy(dict(data))
    for item in overrides:
        parts, value = parse_override(item)
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
    errors = e.errors()
    first = errors[0]
    loc = ".".join(str(x) for x in first["loc"] if not (isinstance(x, str) and x in _UNION_TAGS))
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    where = f"{loc}: " if loc else ""
    return f"{source}: {where}{msg}{more}"


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
        data = size_custom_default(data, overrides)
    return validate_config(data, source=str(path) if path else "config")


def size_custom_default(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
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
