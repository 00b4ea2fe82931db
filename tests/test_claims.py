"""The seed papers' claim files (validation/claims.py): every setup value sourced, the
published numbers as the abstracts state them, the experiments' rules; and the strategy
features they use (Megatron's distributed saved activations, fp32 optimizer state)."""

from __future__ import annotations

from collections import Counter

import pytest
from pydantic import ValidationError

from tests.strategy_helpers import SPEC, collectives, hybrid
from validation.claims import (
    CLAIM_FILES,
    ClaimFile,
    Sourced,
    load_claim,
    optimus_batch,
    optimus_config,
    zeropp_config,
    zeropp_summary,
)
from workloads.errors import WorkloadError
from workloads.hybrid.memory import hybrid_memory
from workloads.hybrid.params import MegatronParallel
from workloads.memory import optimizer_bytes_per_param
from workloads.ops import CollectiveKind as K


@pytest.mark.parametrize("name", CLAIM_FILES)
def test_claim_files_load_and_every_value_has_one_origin(name: str) -> None:
    f = load_claim(name)
    assert f.cite and f.source and f.claims
    for key, v in f.setup.items():
        assert (v.source is None) != (v.assumption is None), key
    for n in f.claims.values():
        assert n.where and (n.published is not None or n.missing)


def test_published_numbers_are_the_abstracts() -> None:
    zp, op = load_claim("zeropp_frontier").claims, load_claim("optimus_frontera").claims
    assert (zp["tflops_ratio"].published, zp["scaling_efficiency"].published) == (1.71, 0.94)
    assert (op["training_speedup"].published, op["max_batch_ratio"].published) == (1.48, 8.0)
    assert zp["scaling_efficiency"].tolerance_abs == 0.05 and op["max_batch_ratio"].at_least == 4
    assert load_claim("fernandez_dgx_h100").claims["crossover_gpus"].published is None


def test_a_value_without_origin_or_with_both_is_rejected() -> None:
    with pytest.raises(ValidationError, match="exactly one of 'source' and 'assumption'"):
        Sourced(value=1)
    with pytest.raises(ValidationError, match="exactly one"):
        Sourced(value=1, source="a", assumption="b")
    raw = {"cite": "c", "source": "s", "claims": {}, "setup": {"x": {"value": 1}}}
    with pytest.raises(ValidationError):
        ClaimFile.model_validate(raw)


def test_zeropp_experiment_configs() -> None:
    cfg = zeropp_config(384, "zeropp-hier")
    assert cfg["cluster"] == {"machine": "frontier", "gpus": 384}
    assert cfg["training"]["batch_tokens"] == 384 * 4 * 2048  # 1,536 sequences
    assert cfg["parallel"]["backward_partition"] == "pair"
    assert zeropp_config(48, "zeropp")["parallel"]["strategy"] == "zeropp"
    assert zeropp_config(48, "zero3")["parallel"] == {"strategy": "deepspeed", "zero_stage": 3}
    # the library build: the setup's, or a sensitivity point's
    assert cfg["engine"]["collective_library"] == "RCCL (PCCL runs, 1 GCD per rank)"
    other = zeropp_config(384, "zeropp", library="RCCL 2.18.6")
    assert other["engine"]["collective_library"] == "RCCL 2.18.6"


def _point(g: int, s: str, tflops: float, program: str) -> dict:  # type: ignore[type-arg]
    return {"gcds": g, "strategy": s, "program": program, "report": {"tflops_per_gpu": tflops}}


def test_zeropp_summary_ratio_efficiency_and_same_program() -> None:
    pts = [
        _point(48, "zero3", 50.0, "a"),
        _point(48, "zeropp", 60.0, "b"),
        _point(48, "zeropp-hier", 100.0, "c"),
        _point(384, "zero3", 40.0, "a"),
        _point(384, "zeropp", 50.0, "b"),
        _point(384, "zeropp-hier", 90.0, "b"),  # same program as zeropp here
    ]
    s = zeropp_summary(pts)
    assert s["ratio"] == pytest.approx(1.8)
    assert s["scaling_efficiency"] == pytest.approx(0.9)
    assert s["same_program_at"] == [384]
    assert s["zeropp_tflops"] == 50.0 and s["ratio_by_library"] == {}
    # sensitivity points (another library build) stay out of the claim's numbers
    extra = [
        {**_point(384, "zeropp", 10.0, "d"), "library": "x"},
        {**_point(384, "zeropp-hier", 80.0, "e"), "library": "x"},
    ]
    s = zeropp_summary(pts + extra)
    assert s["ratio"] == pytest.approx(1.8) and s["ratio_by_library"] == {"x": 8.0}


def test_an_upper_bound_claim_checks_the_simulated_value_from_above() -> None:
    from validation.case import CaseResult
    from validation.claim_cases import claim_cases

    case = next(c for c in claim_cases(stand_in=True) if c.name == "zeropp-frontier-tflops")
    assert case.bound and case.published == 73.5
    assert CaseResult(case, 70.0, "").status == "ok"
    assert CaseResult(case, 80.0, "").status == "outside"


def test_optimus_batch_rule() -> None:
    """The released 96 sequences if both fit, else the largest multiple of q = 8 both fit."""
    assert optimus_batch({"megatron": 200, "optimus": 400}) == 96
    assert optimus_batch({"megatron": 66, "optimus": 320}) == 64
    assert optimus_batch({"megatron": 7, "optimus": 320}) == 0
    cfg = optimus_config("megatron", 64)
    assert cfg["parallel"]["tp"] == 64 and cfg["parallel"]["distribute_saved_activations"]
    assert cfg["model"]["dtype"] == "fp32" and cfg["training"]["microbatch_sequences"] == 64


def test_megatron_distributed_saved_activations() -> None:
    """Megatron's --distribute-saved-activations: the saved block inputs are split over
    the tensor-parallel GPUs (memory / tp) and all-gathered before each recompute."""
    plain, g0 = hybrid(MegatronParallel(tp=4), 4, tp=4, mbs=2)
    dist, g1 = hybrid(MegatronParallel(tp=4, distribute_saved_activations=True), 4, tp=4, mbs=2)
    saved = SPEC.layers * 2 * SPEC.seq_len * SPEC.hidden * SPEC.dtype_bytes
    drop = hybrid_memory(SPEC, plain).activations - hybrid_memory(SPEC, dist).activations
    assert drop == pytest.approx(saved * (1 - 1 / 4))
    gathers = [op for op in collectives(g1.programs[0]) if "saved_input" in op.name]
    assert Counter((op.kind, op.group, op.phase) for op in gathers) == {
        (K.ALL_GATHER, "tp", "recompute"): SPEC.layers
    }
    assert not [op for op in collectives(g0.programs[0]) if "saved_input" in op.name]
    with pytest.raises(ValidationError, match="sequence_parallel"):
        MegatronParallel(distribute_saved_activations=True, sequence_parallel=True)
    with pytest.raises(WorkloadError, match="needs full recompute"):
        hybrid(
            MegatronParallel(tp=4, distribute_saved_activations=True),
            4,
            tp=4,
            checkpointing=False,
        )


def test_fp32_training_keeps_no_master_copy() -> None:
    assert optimizer_bytes_per_param("adam", 2) == 12.0  # ZeRO's K = 12
    assert optimizer_bytes_per_param("adam", 4) == 8.0
    assert optimizer_bytes_per_param("sgd", 2) == 4.0
    assert optimizer_bytes_per_param("sgd", 4) == 0.0


def test_a_malformed_claim_file_is_one_line_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import validation.claims as claims
    from simulator.errors import ConfigError

    bad = {"cite": "c", "source": "s", "claims": {}, "setup": {"gpus": {"value": 64}}}
    monkeypatch.setattr(claims, "load_yaml", lambda name: bad)
    with pytest.raises(ConfigError, match=r"^claims/broken\.yaml: setup\.gpus: .*exactly one"):
        claims.load_claim.__wrapped__("broken")
