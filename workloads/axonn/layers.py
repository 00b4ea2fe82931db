"""Per-GPU shapes of AxoNN's tensor-parallel linear layers and the block's other ops.

For a linear layer O = I x W with k input and n output features, on a grid Gx x Gy x Gz
(see grid.py for the X/Y naming): a normal layer splits k over X and n over Y; a
transposed layer splits k over Y and n over X. M is the number of tokens a GPU processes
per microbatch (its batch slice is split over Z and data).

| step | op | group | bytes (S, full buffer) |
|---|---|---|---|
| 1 | all-gather W over Z | z | k·n/(G_k·G_n) · dtype (output) |
| 2 | GEMM (M x k/G_k) · (k/G_k x n/G_n) | - | - |
| 3 | all-reduce partial O | G_k group (x normal, y transposed) | M·n/G_n · dtype |
| 4 | all-gather W over Z again (unless weights are cached) | z | as 1 |
| 5 | GEMM dI = dO · Wᵀ | - | - |
| 6 | all-reduce dI | G_n group (y normal, x transposed) | M·k/G_k · dtype |
| 7 | GEMM dW = Iᵀ · dO | - | - |
| 8 | reduce-scatter dW over Z | z | k·n/(G_k·G_n) · dtype (input) |
| 9 | all-reduce dW shard over data (after backward) | data | k·n/(G_k·G_n·Gz) · dtype |

In the reference's (paper's) naming the forward all-reduce is over "y" with m·n/(Gz·Gx)
elements and the backward one over "x" with m·k/(Gz·Gy); axsim follows the code, where the
forward group is X, so the same formulas read with x and y exchanged: step 3 is
M·n/G_n = m·n/(Gz·Gy) per GPU and step 6 is m·k/(Gz·Gx) (m = tokens of the data replica).
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.axonn.params import Grid
from workloads.errors import WorkloadError
from workloads.models import TransformerSpec


@dataclass(frozen=True)
class LinearLayout:
    """One linear layer's split on the grid."""

    name: str
    k: int
    n: int
    transposed: bool
    g_k: int  # GPUs splitting k
    g_n: int  # GPUs splitting n
    group_k: str  # forward all-reduce group (splits k)
    group_n: str  # backward all-reduce group (splits n)
    gz: int

    @property
    def k_local(self) -> int:
        return self.k // self.g_k

    @property
    def n_local(self) -> int:
        return self.n // self.g_n

    @property
    def gathered_elems(self) -> int:
        """Elements of the weight block after the Z all-gather (k/G_k x n/G_n)."""
        return self.k_local * self.n_local

    @property
    def shard_elems(self) -> float:
        """Elements each GPU stores (the block flattened over Z, FSDP-style)."""
        return self.gathered_elems / self.gz


def linear_layout(name: str, k: int, n: int, transposed: bool, grid: Grid) -> LinearLayout:
    """Split a k x n weight on the grid; raises WorkloadError if it does not divide."""
    g_k, g_n = (grid.y, grid.x) if transposed else (grid.x, grid.y)
    group_k, group_n = ("y", "x") if transposed else ("x", "y")
    if k % g_k:
        raise WorkloadError(
            f"parallel.grid: layer '{name}' has {k} input features, not divisible by {group_k.upper()}={g_k}"
        )
    if n % g_n:
        raise WorkloadError(
            f"parallel.grid: layer '{name}' has {n} output features, not divisible by {group_n.upper()}={g_n}"
        )
    return LinearLayout(name, k, n, transposed, g_k, g_n, group_k, group_n, grid.z)


def block_layouts(
    spec: TransformerSpec, grid: Grid, transpose_alternate: bool = True
) -> list[LinearLayout]:
    """The four linear layers of a block: QKV normal, attention-out transposed, MLP up
    normal, MLP down transposed (all normal if `transpose_alternate` is off)."""
    out = []
    for i, (name, k, n) in enumerate(spec.linear_shapes()):
        out.append(linear_layout(name, k, n, transpose_alternate and i % 2 == 1, grid))
    if spec.heads % (grid.y if transpose_alternate else grid.x):
        raise WorkloadError(
            f"parallel.grid: {spec.heads} attention heads are not divisible by the QKV output split"
        )
    return out


def padded_vocab(vocab: int, split: int) -> int:
    """The vocabulary rounded up to a multiple of the GPUs that split it.

    Why: implementations pad the embedding rather than reject a split that does not
    divide it (Megatron-LM pads to a multiple of 128 x its tensor-parallel size); the
    padded rows are computed and communicated like real ones. axsim pads only as far as
    the split needs, so a vocabulary the split divides is unchanged (51,200 over Y=3 is
    51,201, not Megatron's 51,456: a 0.5% difference in one layer).
    """
    return -(-vocab // split) * split


def logits_layout(spec: TransformerSpec, grid: Grid) -> LinearLayout:
    """The output projection h -> vocab (tied with the input embedding), a normal layer;
    its output features (the vocabulary, split over Y) padded to a multiple of Y."""
    return linear_layout("logits", spec.hidden, padded_vocab(spec.vocab, grid.y), False, grid)
