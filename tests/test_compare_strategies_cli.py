"""`axsim compare-strategies` (JSON contract, table, notes) and bad strategy input through
`simulator.cli.main` (one `axsim: error:` line naming the field, exit code 2)."""

from __future__ import annotations

import json

import pytest

from simulator.cli import main
from simulator.trials.strategies import compare_strategies
from tests.test_simulate_cli import CONTRACT

BASE = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]


def test_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare-strategies", *BASE, "--strategies", "fsdp,megatron,optimus", "--json"]
    assert main([*args, "--max-candidates", "2"]) == 0
    out = json.loads(capsys.readouterr().out)  # exactly one JSON document
    assert [e["strategy"] for e in out] == ["fsdp", "megatron", "optimus"]
    for e in out:
        assert set(e) >= CONTRACT | {"config", "max_batch_sequences", "speedup_vs_first"}
        assert e["config"]["strategy"] == e["strategy"]
        assert e["config"]["microbatch_sequences"] >= 1
        assert e["max_batch_sequences"] > 0 and e["fits_in_memory"] is True
        assert e["engine_mode"] == "symmetric"
        assert e["speedup_vs_first"] == pytest.approx(
            out[0]["iteration_time_s"] / e["iteration_time_s"]
        )
    assert out[0]["speedup_vs_first"] == 1.0
    assert out[2]["grid"]["x"] == out[2]["grid"]["y"] == out[2]["config"]["q"]


def test_table_and_skipped_strategies(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["compare-strategies", *BASE[:4], "--model", "gpt-tiny", "--batch-tokens", "2048"]
    assert main([*args, "--strategies", "zero3,hsdp", "--gpus", "8"]) == 0
    text = capsys.readouterr().out
    assert "zero3" in text and "skipped" in text and "hsdp" in text


def test_python_api_returns_the_best_simulated() -> None:
    outs = compare_strategies(
        "dgx-h100", 16, "gpt-tiny", ["megatron"], batch_tokens=4096, max_candidates=3
    )
    (o,) = outs
    assert o.report is not None and 1 <= len(o.tried) <= 3
    assert o.report.iteration_time_s == min(t for _, t in o.tried)


SIM = ["simulate", "--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny"]


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--strategy", "megatronx"], "--strategy: unknown strategy 'megatronx'"),
        (
            ["--strategy", "megatron", "--set", "parallel.tp=3", "--gpus", "24"],
            "parallel.tp=3 does not divide the model's 4 attention heads",
        ),
        (["--strategy", "megatron", "--set", "parallel.pp=3", "--gpus", "24"], "parallel.pp=3"),
        (["--strategy", "optimus", "--set", "parallel.q=3"], "parallel.q: q^2 x data"),
        (["--strategy", "fsdp", "--set", "parallel.shard=3"], "parallel.shard=3"),
        (["--strategy", "zero3", "--set", "parallel.tp=2"], "parallel.tp: unknown field"),
        (["--strategy", "megatron", "--set", "parallel.recompute=some"], "parallel.recompute"),
        (["--strategy", "fsdp-pp", "--set", "parallel.pp=1"], "parallel.pp must be at least 2"),
    ],
)
def test_bad_strategy_input_is_one_line_exit_2(
    args: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SIM, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("axsim: error:")
    assert needle in err


def test_unknown_strategy_in_compare(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare-strategies", *BASE, "--strategies", "fsdp,nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error: --strategies: unknown strategy 'nope'")


def test_a_batch_that_does_not_divide_runs_the_nearest_one_every_strategy_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """24 GPUs (3 DGX nodes): FSDP needs a multiple of 24 sequences; 100 is not one, so the
    comparison runs 96 (4 below; 120 is 20 above) and says so (the old code skipped)."""
    args = ["compare-strategies", "--machine", "dgx-h100", "--gpus", "24", "--model", "gpt-tiny"]
    args += ["--batch-tokens", str(100 * 32), "--strategies", "fsdp,zero3", "--json"]
    assert main([*args, "--max-candidates", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    for e in out:
        assert "skipped" not in e
        assert e["batch_tokens"] == 96 * 32
        assert "using the nearest batch every strategy accepts, 96 sequences" in e["batch_note"]


def test_identical_programs_are_reported_once(capsys: pytest.CaptureFixture[str]) -> None:
    """A hierarchical ZeRO++ assignment equal to ZeRO++ is the same program: the table
    says so instead of showing its number twice."""
    from simulator.trials.strategies import mark_same_programs

    outs = compare_strategies(
        "dgx-h100", 16, "gpt-tiny", ["zeropp", "zero3"], batch_tokens=512, max_candidates=1
    )
    assert outs[0].program_key is not None and outs[0].program_key != outs[1].program_key
    outs[1].program_key = outs[0].program_key  # as zeropp-hier (global, node, node) would be
    mark_same_programs(outs)
    assert outs[1].same_program_as == "zeropp"
    from simulator.commands.compare_strategies import render_outcomes
    from simulator.trials.strategies import outcomes_json

    entry = outcomes_json(outs)[1]
    assert entry["same_program_as"] == "zeropp" and "iteration_time_s" not in entry
    render_outcomes(outs, "t")
    assert "same program as zeropp" in capsys.readouterr().out


def test_nearest_common_batch_property() -> None:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from simulator.search.batches import accepts, nearest_common_batch

    divs = [1, 2, 3, 4, 6, 8, 12, 16, 24, 48]

    @settings(max_examples=200, deadline=None)
    @given(
        st.integers(1, 500),
        st.lists(st.sets(st.sampled_from(divs), min_size=1, max_size=4), min_size=1, max_size=4),
    )
    def check(requested: int, sets: list[set[int]]) -> None:
        n = nearest_common_batch(requested, sets)
        assert n is not None and all(accepts(n, s) for s in sets)
        closer = [
            m for m in range(1, 2 * requested + 50) if abs(m - requested) < abs(n - requested)
        ]
        assert not any(all(accepts(m, s) for s in sets) for m in closer)

    check()
