"""axsim's FSDP memory model against PyTorch FSDP's own accounting of a small GPT on CPU.

tests/data/fsdp_cpu_reference.json was written by `python -m validation.references.fsdp_memory`
(torch 2.13 CPU, a fake 4-rank process group, FullyShardedDataParallel with one unit per
block, MixedPrecision bf16): FSDP's flat parameters, gradients and Adam state, and the
peak of unsharded units it held during one step. The CPU runs synchronously, so it holds
exactly one unit fewer than a GPU run whose gathers run a unit ahead of the compute.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.strategy_helpers import hybrid
from validation.references.fsdp_memory import RefConfig, RefModel, measure
from workloads.hybrid.framework_memory import fsdp_states
from workloads.hybrid.params import ShardedParallel
from workloads.hybrid.setup import block_params, stage_param_counts
from workloads.models import TransformerSpec

DATA = Path(__file__).parent / "data" / "fsdp_cpu_reference.json"
ROWS = json.loads(DATA.read_text())
M = RefModel()
SPEC = TransformerSpec(
    name="ref", layers=M.layers, hidden=M.hidden, heads=M.heads, seq_len=M.seq_len, vocab=M.vocab
)


def _setup(cfg: dict):  # type: ignore[no-untyped-def]
    params = ShardedParallel(
        strategy="fsdp",
        sharding_strategy=cfg["sharding_strategy"],
        reduce_dtype=cfg["reduce_dtype"],
        backward_prefetch=cfg["backward_prefetch"],
        forward_prefetch=cfg["forward_prefetch"],
    )
    setup, _ = hybrid(
        params, cfg["world"], spec=SPEC, sequences=cfg["world"] * M.batch, mbs=M.batch
    )
    return setup


@pytest.mark.parametrize("row", ROWS, ids=lambda r: "-".join(map(str, r["config"].values())))
def test_fsdp_states_equal_torch_fsdp_accounting(row: dict) -> None:
    setup = _setup(row["config"])
    counts = stage_param_counts(SPEC, setup, 0)
    # FSDP's units are axsim's: the root (embeddings, final norm) and one per block
    assert row["units"] == [counts["embedding"] + counts["head"]] + [block_params(SPEC, 1)] * 4
    st = fsdp_states(SPEC, setup, setup.fsdp)
    n = row["config"]["world"]
    held = counts["total"] / n
    assert st.weights == row["sharded_params_bytes"]  # fp32 _local_shard
    assert st.optimizer == row["optimizer_state_bytes"]  # Adam's exp_avg, exp_avg_sq
    assert 4 * held == row["sharded_grads_bytes"]  # the fp32 sharded gradient
    unit = 2 * block_params(SPEC, 1)
    if row["config"]["sharding_strategy"] == "SHARD_GRAD_OP":
        assert st.gathered_weights == row["peak_unsharded_params_bytes"]  # everything
    else:  # the GPU holds one more unit: the one whose free event it has not passed
        assert st.gathered_weights == row["peak_unsharded_params_bytes"] + unit
    # the gradient buffers bound FSDP's unsharded gradient from above (a GPU also holds
    # the previous unit's reduce-scatter input and the compute-dtype gradient during the cast)
    assert st.gradients - 4 * held >= row["peak_unsharded_grads_bytes"]


@pytest.mark.slow
def test_reference_fixture_is_what_torch_measures_now() -> None:
    """Re-measure the default configuration live (about 10 s: torch, one process)."""
    got = measure(M, RefConfig())
    want = ROWS[0]
    for key in (
        "units",
        "sharded_params_bytes",
        "optimizer_state_bytes",
        "peak_unsharded_params_bytes",
    ):
        assert got[key] == want[key], key
