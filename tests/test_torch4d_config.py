"""torch4d configuration: grid rank order, parsing and model checks (no torch needed)."""

from __future__ import annotations

import pytest

from simulator.errors import ConfigError
from validation.torch4d.config import (
    PRESETS,
    Grid,
    Overlap,
    RunSpec,
    check_fits,
    parse_grid,
    parse_overlap,
    resolve_model,
)


def test_rank_order_is_axonn_x_fastest() -> None:
    grid = Grid(2, 2, 2, 1)
    assert [grid.coords(r) for r in (0, 1, 2, 4, 7)] == [
        (0, 0, 0, 0),
        (1, 0, 0, 0),
        (0, 1, 0, 0),
        (0, 0, 1, 0),
        (1, 1, 1, 0),
    ]
    # the reference's example: X groups (0,1)(2,3)(4,5)(6,7); Y groups (0,2)(1,3)(4,6)(5,7)
    assert grid.group_ranks("X") == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert grid.group_ranks("Y") == [[0, 2], [1, 3], [4, 6], [5, 7]]
    assert grid.group_ranks("Z") == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_data_is_outermost() -> None:
    grid = Grid(2, 1, 1, 3)
    assert grid.group_ranks("data") == [[0, 2, 4], [1, 3, 5]]
    assert all(grid.rank_of(*grid.coords(r)) == r for r in range(grid.world_size))


@pytest.mark.parametrize("text", ["2,1,1", "a,1,1,1", "2,1,1,0", "1,1,1,-2", ""])
def test_bad_grids(text: str) -> None:
    with pytest.raises(ConfigError):
        parse_grid(text)


def test_overlap_parsing() -> None:
    assert parse_overlap("none") == Overlap()
    assert parse_overlap("all") == Overlap(True, True, True)
    assert parse_overlap("ORS, oag") == Overlap(False, True, True)
    assert str(parse_overlap("oar,oag")) == "oar,oag"
    with pytest.raises(ConfigError, match="unknown flag"):
        parse_overlap("oar,fast")


def test_models_presets_and_limits() -> None:
    assert resolve_model("tiny") == PRESETS["tiny"]
    assert resolve_model("small", layers=1, batch=4).layers == 1
    assert resolve_model("gpt-tiny").hidden == 64  # from workloads/data/models.yaml
    with pytest.raises(ConfigError, match="at most"):
        resolve_model("gpt-5b")
    with pytest.raises(ConfigError, match="unknown model"):
        resolve_model("gpt-7")
    with pytest.raises(ConfigError, match="not a plain GPT"):
        resolve_model("llama2-7b")


def test_grid_must_split_the_model() -> None:
    tiny = PRESETS["tiny"]  # 4 heads, batch 8
    check_fits(tiny, Grid(2, 2, 2, 1))
    with pytest.raises(ConfigError, match="heads"):
        check_fits(tiny, Grid(1, 8, 1, 1))
    with pytest.raises(ConfigError, match="batch"):
        check_fits(tiny, Grid(1, 1, 4, 4))
    with pytest.raises(ConfigError, match="impl"):
        RunSpec(Grid(), tiny, impl="megatron")


def test_run_spec_json_is_plain_data() -> None:
    spec = RunSpec(Grid(2, 1, 2, 1), PRESETS["tiny"], Overlap(oar=True), steps=2)
    data = spec.to_json()
    assert data["grid"] == {"x": 2, "y": 1, "z": 2, "data": 1}
    assert data["overlap"] == {"oar": True, "ors": False, "oag": False}
    assert data["dims"]["ffn"] == 256
