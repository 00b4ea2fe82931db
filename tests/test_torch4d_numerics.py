"""The 4D implementations (ours and axonn 0.2.0 with its CPU shim) match a single-process
reference: loss of every step and every assembled parameter gradient."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from validation.torch4d.config import Grid, Overlap  # noqa: E402
from validation.torch4d.numerics import TEST_DIMS, Case, CaseResult, run_numerics  # noqa: E402
from validation.torch4d.shard import assemble, shard_of  # noqa: E402

pytestmark = pytest.mark.torch

ALL = Overlap(True, True, True)
AXONN_LINEAR = "axonn.intra_layer.fully_connected.Linear"


def _impls() -> list[str]:
    try:
        import axonn.intra_layer  # noqa: F401
    except ImportError:
        return ["axsim"]
    return ["axsim", "axonn"]


def _check(results: list[CaseResult], expected: int) -> None:
    assert len(results) == expected
    bad = [
        f"{r.case}: loss {r.loss_err:.1e} grad {r.grad_err:.1e} ({r.worst_param})"
        for r in results
        if not r.ok
    ]
    assert not bad, "\n".join(bad)
    for r in results:
        assert (
            r.linear_class == AXONN_LINEAR
            if r.case.startswith("axonn")
            else r.linear_class.endswith("Linear4D")
        )


def test_shards_assemble_back() -> None:
    grid = Grid(2, 2, 2, 1)
    for name, shape in [
        ("blocks.0.qkv.weight", (96, 32)),
        ("blocks.0.mlp_down.weight", (32, 128)),
        ("blocks.1.attn_out.bias", (32,)),
        ("blocks.1.ln2.weight", (32,)),
    ]:
        full = torch.randn(shape)
        shards = {r: shard_of(name, full, grid, grid.coords(r)) for r in range(grid.world_size)}
        again, replica_err = assemble(name, full.shape, shards, grid)
        assert torch.equal(again, full) and replica_err == 0.0


def test_two_ranks_every_axis_every_flag() -> None:
    grids = [Grid(2, 1, 1, 1), Grid(1, 2, 1, 1), Grid(1, 1, 2, 1), Grid(1, 1, 1, 2)]
    flags = [Overlap(), Overlap(oar=True), Overlap(ors=True), Overlap(oag=True), ALL]
    combos = [(ov, False) for ov in flags] + [(ALL, True)]
    cases = [
        Case(g, impl, ov, checkpoint=ck) for g in grids for impl in _impls() for ov, ck in combos
    ]
    _check(run_numerics(cases), len(cases))


def test_four_ranks_two_axes() -> None:
    grids = [Grid(2, 2, 1, 1), Grid(2, 1, 2, 1), Grid(1, 2, 2, 1), Grid(2, 1, 1, 2)]
    combos = [(Overlap(), False), (ALL, True)]
    cases = [
        Case(g, impl, ov, checkpoint=ck) for g in grids for impl in _impls() for ov, ck in combos
    ]
    cases += [Case(Grid(2, 2, 1, 1), impl, Overlap(oar=True, ors=True)) for impl in _impls()]
    cases.append(Case(Grid(2, 1, 2, 1), "axsim", Overlap(oag=True), optimizer="adam", steps=3))
    _check(run_numerics(cases), len(cases))


def test_eight_ranks_three_axes() -> None:
    cases = [Case(Grid(2, 2, 2, 1), impl, ALL) for impl in _impls()]
    _check(run_numerics(cases), len(cases))


def test_mixed_world_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="world sizes"):
        run_numerics([Case(Grid(2, 1, 1, 1)), Case(Grid(2, 2, 1, 1))])


def test_test_dims_fit_every_small_grid() -> None:
    from validation.torch4d.config import check_fits

    for g in [Grid(2, 2, 2, 2), Grid(4, 1, 1, 1), Grid(1, 4, 1, 1), Grid(1, 1, 4, 1)]:
        check_fits(TEST_DIMS, g)
