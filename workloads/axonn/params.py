"""Parameters of AxoNN's 4D strategy (validated pydantic model, part of the config)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from topologies.user_input.model import UserModel

OverlapFlag = Literal["oar", "ors", "oag"]
Implementation = Literal["sc24", "litgpt", "axonn-0.2"]
WeightLifetime = Literal["regather", "keep", "cache"]


class Grid(UserModel):
    """The 4D grid: X = G_intra_c (column, innermost), Y = G_intra_r (row), Z = G_intra_d
    (depth), data = G_data. Ranks are ordered X fastest, then Y, Z, pipeline, data."""

    x: int = Field(default=1, ge=1)
    y: int = Field(default=1, ge=1)
    z: int = Field(default=1, ge=1)
    data: int = Field(default=1, ge=1)

    @property
    def tensor(self) -> int:
        return self.x * self.y * self.z

    @property
    def size(self) -> int:
        return self.tensor * self.data

    def as_tuple(self) -> tuple[int, int, int, int]:
        return (self.x, self.y, self.z, self.data)

    @classmethod
    def parse(cls, text: str) -> Grid:
        """Parse 'X,Y,Z,DATA' (e.g. '4,2,8,16')."""
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"grid '{text}' must be four positive integers X,Y,Z,DATA")
        x, y, z, d = (int(p) for p in parts)
        return cls(x=x, y=y, z=z, data=d)

    def __str__(self) -> str:
        return f"{self.x}x{self.y}x{self.z}x{self.data}"


class AxonnParallel(UserModel):
    """AxoNN's hybrid 4D algorithm: a Gx x Gy x Gz tensor grid times G_data replicas.

    overlap: which of AxoNN's overlap optimisations are on: 'oar' (backward all-reduce of
    dI hidden behind the dW GEMM), 'ors' (Z reduce-scatter of dW waited once after the
    backward), 'oag' (prefetch of the next layer's Z all-gather).

    implementation: the code version being simulated (workloads/axonn/implementation.py
    names each one's sources): 'sc24' (Megatron-AxoNN with axonn before commit c5ef65d,
    the code of the SC'24 paper's Perlmutter runs: the default), 'litgpt' (LitGPT with
    axonn's Lightning strategy before c5ef65d, the paper's Frontier runs) or 'axonn-0.2'
    (the PyPI release).

    weight_lifetime: how long a layer's Z-gathered weight lives: 'regather' (dropped after
    use, gathered again in backward: axonn 0.2.0), 'keep' (saved for the layer's own
    backward: the SC'24 code) or 'cache' (kept for the whole iteration: Megatron-AxoNN's
    `--num-layers-for-caching-weights-in-depth-tensor-parallel-all-gather`, the first
    `cached_layers` blocks, all when unset; the other blocks keep the implementation's
    lifetime). Unset: the implementation's own.
    """

    strategy: Literal["axonn"] = "axonn"
    grid: Grid | None = None
    pipeline: int = Field(
        default=1,
        ge=1,
        le=1,
        description="AxoNN's G_inter (inter-layer pipeline). axsim models AxoNN's 4D tensor "
        "grid only, so 1 is the one value; for pipelines use megatron or fsdp-pp.",
    )
    overlap: tuple[OverlapFlag, ...] = ("oar", "ors", "oag")
    implementation: Implementation = "sc24"
    weight_lifetime: WeightLifetime | None = None
    cached_layers: int | None = Field(default=None, ge=0, le=4096)
    expert_mode: bool = True
    transpose_alternate: bool = True

    @field_validator("pipeline", mode="before")
    @classmethod
    def _no_pipeline(cls, v: object) -> object:
        if isinstance(v, int) and not isinstance(v, bool) and v > 1:
            raise ValueError(
                f"{v} pipeline stages: axsim models AxoNN's 4D tensor grid without its "
                "pipeline (G_inter = 1); for pipelines use the megatron or fsdp-pp strategy"
            )
        return v

    @model_validator(mode="after")
    def _unique_flags(self) -> AxonnParallel:
        if len(set(self.overlap)) != len(self.overlap):
            raise ValueError("parallel.overlap lists a flag twice")
        if self.cached_layers is not None and self.weight_lifetime != "cache":
            raise ValueError("parallel.cached_layers needs parallel.weight_lifetime: cache")
        return self
