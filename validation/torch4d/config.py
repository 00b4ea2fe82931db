"""Configuration of a real 4D run: grid, model dimensions, overlap flags (no torch import).

Kept free of torch so the CLI can validate user input, and the simulator can read a
`run.json`, on machines without PyTorch. Every user mistake raises `ConfigError`, which the
CLI prints as one line (exit code 2).

Grid naming follows AxoNN: X = `G_intra_c` (innermost, column), Y = `G_intra_r` (row),
Z = `G_intra_d` (depth), then data. With t = rank mod (Gx·Gy·Gz): x = t mod Gx,
y = (t div Gx) mod Gy, z = t div (Gx·Gy), data = rank div (Gx·Gy·Gz).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Literal

from simulator.errors import ConfigError

Impl = Literal["axsim", "axonn"]
IMPLS: tuple[str, ...] = ("axsim", "axonn")

#: Largest block stack (parameters) that we agree to train on CPU: with Adam state, one
#: full copy per rank for seeded initialisation and up to 32 ranks, more would not fit.
MAX_CPU_PARAMS = 64_000_000
#: Largest activation (batch x seq x hidden elements) per run on CPU.
MAX_CPU_ACTIVATION = 64_000_000
#: More processes than this on one CPU host only measure the OS scheduler.
MAX_CPU_WORLD = 32


@dataclass(frozen=True, slots=True)
class Grid:
    """The 4D grid (Gx, Gy, Gz, Gdata); the product is the world size."""

    x: int = 1
    y: int = 1
    z: int = 1
    data: int = 1

    def __post_init__(self) -> None:
        for name in ("x", "y", "z", "data"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"grid.{name} must be a positive integer, got {value!r}")

    @property
    def tensor(self) -> int:
        """Gx·Gy·Gz: the GPUs of one tensor-parallel replica."""
        return self.x * self.y * self.z

    @property
    def world_size(self) -> int:
        """Gx·Gy·Gz·Gdata: the number of ranks."""
        return self.tensor * self.data

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """(x, y, z, data) of a global rank, in AxoNN's rank order (X fastest)."""
        t = rank % self.tensor
        return t % self.x, (t // self.x) % self.y, t // (self.x * self.y), rank // self.tensor

    def rank_of(self, x: int, y: int, z: int, data: int) -> int:
        """Inverse of `coords`."""
        return data * self.tensor + z * self.x * self.y + y * self.x + x

    def size(self, kind: str) -> int:
        """Size of a group kind: 'X', 'Y', 'Z' or 'data'."""
        return {"X": self.x, "Y": self.y, "Z": self.z, "data": self.data}[kind]

    def group_ranks(self, kind: str) -> list[list[int]]:
        """Every instance of one group kind ('X', 'Y', 'Z', 'data'), ranks ascending."""
        axes = ("X", "Y", "Z", "data")
        if kind not in axes:
            raise ConfigError(f"unknown group kind {kind!r} (use one of {', '.join(axes)})")
        groups: dict[tuple[int, ...], list[int]] = {}
        for rank in range(self.world_size):
            c = self.coords(rank)
            key = tuple(v for a, v in zip(axes, c, strict=True) if a != kind)
            groups.setdefault(key, []).append(rank)
        return list(groups.values())

    def as_tuple(self) -> tuple[int, int, int, int]:
        return self.x, self.y, self.z, self.data

    def __str__(self) -> str:
        return ",".join(str(v) for v in self.as_tuple())


def parse_grid(text: str) -> Grid:
    """Parse 'X,Y,Z,DATA' (four positive integers)."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 4:
        raise ConfigError(f"--grid must be X,Y,Z,DATA (four integers), got {text!r}")
    try:
        values = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"--grid must be X,Y,Z,DATA (four integers), got {text!r}") from None
    return Grid(*values)


@dataclass(frozen=True, slots=True)
class Overlap:
    """AxoNN's three overlap optimisations (paper §V-D): OAR, ORS and OAG."""

    oar: bool = False
    ors: bool = False
    oag: bool = False

    def flags(self) -> list[str]:
        return [name for name in ("oar", "ors", "oag") if getattr(self, name)]

    def __str__(self) -> str:
        return ",".join(self.flags()) or "none"


def parse_overlap(text: str) -> Overlap:
    """Parse 'oar,ors,oag' (any subset), 'all' or 'none'."""
    words = {w.strip().lower() for w in text.split(",") if w.strip()}
    if words in ({"none"}, set()):
        return Overlap()
    if words == {"all"}:
        return Overlap(True, True, True)
    unknown = words - {"oar", "ors", "oag"}
    if unknown:
        raise ConfigError(
            f"--overlap: unknown flag(s) {', '.join(sorted(unknown))} (use oar,ors,oag, all or none)"
        )
    return Overlap(oar="oar" in words, ors="ors" in words, oag="oag" in words)


@dataclass(frozen=True, slots=True)
class ModelDims:
    """A GPT block stack: pre-LayerNorm blocks with a 4x GeLU MLP (no embedding/logits)."""

    name: str
    layers: int
    hidden: int
    heads: int
    seq_len: int
    batch: int  # global batch, in sequences

    def __post_init__(self) -> None:
        for f in ("layers", "hidden", "heads", "seq_len", "batch"):
            if getattr(self, f) < 1:
                raise ConfigError(f"model {f} must be positive, got {getattr(self, f)}")
        if self.hidden % self.heads:
            raise ConfigError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")

    @property
    def ffn(self) -> int:
        return 4 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def params(self) -> int:
        """Parameters of the block stack (linear weights, biases, LayerNorms)."""
        h = self.hidden
        return self.layers * (12 * h * h + 13 * h)

    def linear_shapes(self) -> list[tuple[str, int, int, bool]]:
        """(name, in_features, out_features, transposed) of one block, in module order."""
        h = self.hidden
        return [
            ("qkv", h, 3 * h, False),
            ("attn_out", h, h, True),
            ("mlp_up", h, 4 * h, False),
            ("mlp_down", 4 * h, h, True),
        ]


#: Presets small enough for a 2-core CPU host.
PRESETS: dict[str, ModelDims] = {
    "tiny": ModelDims("tiny", layers=2, hidden=64, heads=4, seq_len=32, batch=8),
    "small": ModelDims("small", layers=4, hidden=256, heads=8, seq_len=128, batch=8),
}


def resolve_model(
    name: str,
    *,
    layers: int | None = None,
    hidden: int | None = None,
    heads: int | None = None,
    seq_len: int | None = None,
    batch: int | None = None,
) -> ModelDims:
    """A preset of this module, or a model of workloads/data/models.yaml, with overrides.

    Models from models.yaml must be plain GPTs (GeLU MLP of 4x, full multi-head attention)
    and small enough for CPU; anything else is refused with a ConfigError.
    """
    key = name.strip().lower()
    base = PRESETS[key] if key in PRESETS else _from_workloads(key)
    fields: dict[str, int | None] = {
        "layers": layers,
        "hidden": hidden,
        "heads": heads,
        "seq_len": seq_len,
        "batch": batch,
    }
    dims = replace(base, **{k: v for k, v in fields.items() if v is not None})  # type: ignore[arg-type]
    if dims.params > MAX_CPU_PARAMS:
        raise ConfigError(
            f"model '{name}' has {dims.params / 1e6:.0f}M block parameters; the CPU runner "
            f"accepts at most {MAX_CPU_PARAMS / 1e6:.0f}M (use tiny, small or smaller dims)"
        )
    if dims.batch * dims.seq_len * dims.hidden > MAX_CPU_ACTIVATION:
        raise ConfigError(
            f"batch x seq_len x hidden = {dims.batch * dims.seq_len * dims.hidden} is too "
            f"large for CPU (at most {MAX_CPU_ACTIVATION}); lower --batch-size or --seq-len"
        )
    return dims


def _from_workloads(key: str) -> ModelDims:
    from workloads.errors import WorkloadError
    from workloads.models import model_presets

    presets = model_presets()
    if key not in presets:
        known = ", ".join([*PRESETS, *presets])
        raise ConfigError(f"unknown model '{key}' (known: {known})")
    spec = presets[key]
    if spec.gated_mlp or (spec.kv_heads not in (None, spec.heads)) or spec.ffn != 4 * spec.hidden:
        raise ConfigError(
            f"model '{key}' is not a plain GPT (gated MLP or GQA); torch4d builds GPT blocks only"
        )
    try:
        return ModelDims(key, spec.layers, spec.hidden, spec.heads, spec.seq_len, batch=8)
    except WorkloadError as e:  # pragma: no cover - presets are validated upstream
        raise ConfigError(str(e)) from e


def check_fits(dims: ModelDims, grid: Grid) -> None:
    """Refuse a model/grid pair that the 4D layout cannot split evenly."""
    if dims.heads % grid.y:
        raise ConfigError(
            f"heads ({dims.heads}) must be divisible by Gy ({grid.y}): heads are split over Y"
        )
    if dims.hidden % grid.x:
        raise ConfigError(f"hidden ({dims.hidden}) must be divisible by Gx ({grid.x})")
    for name, k, n, transposed in dims.linear_shapes():
        gin, gout = (grid.y, grid.x) if transposed else (grid.x, grid.y)
        if k % gin or n % gout or ((k // gin) * (n // gout)) % grid.z:
            raise ConfigError(f"layer {name} ({k}x{n}) does not split over the grid {grid}")
    if dims.batch % (grid.z * grid.data):
        raise ConfigError(
            f"batch ({dims.batch}) must be divisible by Gz·Gdata ({grid.z * grid.data}): "
            "sequences are split over Z and data"
        )


@dataclass(frozen=True, slots=True)
class RunSpec:
    """Everything that defines a traced run; written verbatim into run.json."""

    grid: Grid
    dims: ModelDims
    overlap: Overlap = Overlap()
    impl: str = "axsim"
    steps: int = 3
    warmup: int = 1
    timing_steps: int = 3
    checkpoint: bool = False
    optimizer: str = "adam"
    dtype: str = "float32"
    seed: int = 1234

    def __post_init__(self) -> None:
        if self.impl not in IMPLS:
            raise ConfigError(f"--impl must be one of {', '.join(IMPLS)}, got {self.impl!r}")
        if self.steps < 1:
            raise ConfigError(f"--steps must be at least 1, got {self.steps}")
        if self.warmup < 0 or self.timing_steps < 0:
            raise ConfigError("warmup and timing steps must be non-negative")
        if self.optimizer not in ("adam", "sgd"):
            raise ConfigError(f"optimizer must be adam or sgd, got {self.optimizer!r}")
        if self.dtype not in ("float32", "float64", "bfloat16"):
            raise ConfigError(f"dtype must be float32, float64 or bfloat16, got {self.dtype!r}")
        check_fits(self.dims, self.grid)

    def to_json(self) -> dict[str, object]:
        """The spec as plain JSON data (run.json's `config`)."""
        out = asdict(self)
        out["grid"] = dict(zip(("x", "y", "z", "data"), self.grid.as_tuple(), strict=True))
        out["overlap"] = {"oar": self.overlap.oar, "ors": self.overlap.ors, "oag": self.overlap.oag}
        out["dims"]["ffn"] = self.dims.ffn
        out["dims"]["params"] = self.dims.params
        return out
