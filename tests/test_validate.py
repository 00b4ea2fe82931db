"""`axsim validate`: the case list covers every published number, the comparison table,
exit codes and bad input.

The end-to-end run uses `--reduced --only perlmutter-512-gpt-5b,bw-,nvswitch-,gemm-`:
every case except the three larger Perlmutter points and the overlap case (those
differ only in size), with the AxoNN search reduced to the analytical model's best grid.
Whether a case passes depends on model constants still being tuned, so the test checks
that the exit status agrees with the table, not which cases pass.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.cli import main
from tests.cli_helpers import assert_valid_output
from validation.cases.claim_ratios import claim_cases
from validation.cases.validate import Case, CaseResult, all_cases, run_validation, select_cases
from validation.published import axonn_bandwidths, axonn_frontier, axonn_perlmutter, load_yaml

SUBSET = "perlmutter-512-gpt-5b,bw-,nvswitch-,gemm-,pccl-perlmutter-predicted-median"


def test_every_published_number_is_a_case() -> None:
    names = [c.name for c in all_cases()]
    assert len(names) == len(set(names))
    expected = (
        len(axonn_perlmutter())
        + len(axonn_frontier())
        + len(load_yaml("axonn_frontier_overlap")["steps"])
        + 2 * 2 * 5  # Fig. 7 split: 2 configurations x (computation, communication) x 5 points
        + len(axonn_bandwidths())
        + 2 * len(load_yaml("nccl_nvswitch")["rows"])
        + 2  # Vidur GEMMs, A100 and H100
        + 1  # overlap
        + 2 * 2 * 2  # PCCL: Frontier and Perlmutter, fit and predicted, median and p90
        + 2  # PCCL's hierarchical ("hybrid") all-gather, Frontier and Perlmutter
        + 2  # Vidur's DGX H100 all-reduce curve: median and p90
        + len(claim_cases())  # the seed papers' claims
    )
    assert len(names) == expected
    for c in all_cases():
        assert c.source and c.cite and (c.published is None or c.published > 0)
    # Perlmutter 512 is the paper's own outlier: shown, never failed
    assert {c.tolerance_pct for c in select_cases("perlmutter")} == {10.0, None}
    assert select_cases("perlmutter-512")[0].tolerance_text == "info"
    assert {c.tolerance_pct for c in select_cases("frontier-32768")} == {12.0}
    split = select_cases("split-")
    assert {c.tolerance_pct for c in split} == {5.0, 25.0} and len(split) == 20
    # the two Fig. 7 rows litgpt's discrete choices were taken on (issue 30) are fits
    assert {c.name for c in split if c.role == "fit"} == {
        f"split-frontier-8192-{cfg}-{q}"
        for cfg in ("kernel-tuning", "coll-overlap")
        for q in ("compute", "comm")
    }
    # predictions are kept apart from the measurements constants were fitted on
    assert {c.role for c in select_cases("perlmutter")} == {"prediction"}
    assert {c.role for c in select_cases("frontier-")} == {"prediction"}
    assert len(select_cases("frontier-overlap-")) == 4
    roles = {c.name: c.role for c in select_cases("bw-")}
    assert roles["bw-perlmutter-inner1-own4"] == "fit"  # the NVLink efficiency's source
    assert roles["bw-frontier-inner1-own16"] == "prediction"  # Frontier: fitted on PCCL
    pccl = {c.name: c for c in select_cases("pccl-")}
    assert pccl["pccl-frontier-predicted-median"].role == "prediction"
    assert pccl["pccl-frontier-fit-p90"].role == "fit"
    assert all(c.bound for c in pccl.values())
    assert {c.published for c in pccl.values()} == {20.0, 50.0, 25.0}
    assert pccl["pccl-frontier-fit-p90"].tolerance_text == "<= 50%"
    # the hierarchical rows are predictions of the model fitted on the vendor rows only
    assert pccl["pccl-perlmutter-hybrid-median"].role == "prediction"
    assert pccl["pccl-perlmutter-hybrid-median"].published == 25.0


def test_error_and_status() -> None:
    case = Case("x", "q", "u", 100.0, 10.0, "c", "s", lambda r: [], lambda r: (0.0, ""))
    assert CaseResult(case, 109.0, "").status == "ok"
    assert CaseResult(case, 89.0, "").error_pct == pytest.approx(-11.0)
    assert CaseResult(case, 89.0, "").status == "outside"
    assert CaseResult(case, None, "boom").status == "failed"
    info = Case("y", "q", "u", 53.0, None, "c", "s", lambda r: [], lambda r: (0.0, ""))
    assert CaseResult(info, 1.0, "").status == "info"
    absolute = Case("a", "q", "", 0.94, None, "c", "s", lambda r: [], lambda r: (0.0, ""))
    absolute = replace(absolute, tolerance_abs=0.05)
    assert CaseResult(absolute, 0.985, "").status == "ok"
    assert CaseResult(absolute, 0.995, "").status == "outside"
    bound = Case("b", "q", "x", 8.0, None, "c", "s", lambda r: [], lambda r: (0.0, ""), at_least=4)
    assert [CaseResult(bound, v, "").status for v in (4.0, 3.9)] == ["ok", "outside"]
    assert bound.tolerance_text == ">= 4" and absolute.tolerance_text == "±0.05"
    missing = Case("m", "q", "", None, None, "c", "s", lambda r: [], lambda r: (None, ""))
    assert CaseResult(missing, None, "no crossover").status == "info"
    assert CaseResult(missing, None, "boom", failed=True).status == "failed"


def test_validate_runs(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["validate", "--reduced", "--only", SUBSET, "--json", "--jobs", "2"])
    out = json.loads(capsys.readouterr().out)
    assert_valid_output("validate", out)
    cases = out["cases"]
    assert len(cases) == len(select_cases(SUBSET))
    for c in cases:
        assert c["status"] in ("ok", "outside", "info"), c  # nothing failed to simulate
        assert c["simulated"] > 0 and c["source"]
        if c["bound"]:  # an error statistic: ok when at most the bound
            assert c["error_pct"] is None
            assert (c["status"] == "ok") == (c["simulated"] <= c["published"])
        else:
            assert c["error_pct"] == pytest.approx(100 * (c["simulated"] / c["published"] - 1))
    assert rc == (1 if any(c["status"] == "outside" for c in cases) else 0)
    perl = next(c for c in cases if c["name"] == "perlmutter-512-gpt-5b")
    assert "grid" in perl["detail"] and perl["tolerance_pct"] is None  # the paper's outlier
    assert perl["role"] == "prediction"


def test_table_output_and_unknown_case(capsys: pytest.CaptureFixture[str]) -> None:
    main(["validate", "--only", "gemm-h100", "--jobs", "1"])
    text = capsys.readouterr().out
    assert "gemm-h100" in text and "published" in text and "Vidur" in text
    assert main(["validate", "--only", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("axsim: error: --only: no case 'nope'") and "\n" not in err


def test_claim_cases_run_end_to_end_on_their_stand_ins() -> None:
    """The claim cases' whole path (tasks, shared simulations, ratios, verdicts) on the
    claim files' small stand-in setups; the full setups run in `axsim validate`."""
    cases = claim_cases(stand_in=True)
    assert [c.name for c in cases] == [c.name for c in select_cases("zeropp-,optimus-,fernandez-")]
    assert {c.role for c in cases} == {"prediction"}
    results, _ = run_validation(cases, jobs=1)
    by = {r.case.name: r for r in results}
    for r in results:
        assert r.status != "failed", r.detail
    assert by["zeropp-frontier-ratio"].simulated > 0
    assert "hierarchical" in by["zeropp-frontier-ratio"].detail
    assert 0 < by["zeropp-frontier-scaling"].simulated <= 1.2
    assert by["optimus-frontera-speedup"].simulated > 0
    # Optimus partitions activations in 2D: it fits more than Megatron at tp = q^2
    assert by["optimus-frontera-max-batch"].simulated > 1
    assert by["fernandez-crossover"].status == "info"
    assert by["fernandez-crossover"].case.tolerance_text == "info"
