"""AxoNN microbatch bodies copied from an earlier body emitted from the same writer state
(workloads/axonn/program.py, workloads/body_templates.py) equal emitted ones, op by op,
with their segments, across the setups that change what a microbatch emits."""

from __future__ import annotations

from dataclasses import replace

import pytest

import workloads.axonn.program as program
from workloads.axonn.implementation import PRESETS, WeightPolicy
from workloads.axonn.params import Grid
from workloads.axonn.program import AxonnSetup, build_axonn_program
from workloads.graph import Program
from workloads.models import model_preset

SPEC = model_preset("gpt-tiny")
BASE = AxonnSetup(grid=Grid(x=2, y=2, z=2, data=1), microbatch_sequences=1, microbatches=5)
SETUPS = {
    "default": BASE,
    **{f"impl-{name}": replace(BASE, implementation=name) for name in sorted(PRESETS)},
    "no-overlap": replace(BASE, oar=False, ors=False, oag=False),
    "cached-blocks": replace(BASE, policy=WeightPolicy("keep", 1)),
    "regather": replace(BASE, policy=WeightPolicy("regather", 0)),
    "non-expert": replace(BASE, expert_mode=False),
    "no-checkpointing": replace(BASE, checkpointing=False),
    "uncompressed": replace(BASE, compress_microbatches=False),
    "three": replace(BASE, microbatches=3),
}


def _build(setup: AxonnSetup, monkeypatch: pytest.MonkeyPatch) -> tuple[Program, int]:
    copies: list[object] = []
    copy = program.copy_body
    monkeypatch.setattr(program, "copy_body", lambda b, t: (copies.append(t), copy(b, t)))
    return build_axonn_program(SPEC, setup), len(copies)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_copied_microbatches_equal_emitted_ones(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    setup = SETUPS[name]
    fast, copies = _build(setup, monkeypatch)
    # compressed: first, middle, last (the last a copy of the middle); uncompressed: every
    # body after the second is a copy
    assert copies == (setup.microbatches - 2 if not setup.compress_microbatches else 1)
    monkeypatch.setattr(program, "USE_TEMPLATES", False)
    slow, none = _build(setup, monkeypatch)
    assert none == 0
    assert fast.ops == slow.ops
    assert fast.segments == slow.segments


def test_open_handles_between_microbatches_forbid_copies() -> None:
    """A writer state that names ops (an open prefetch or reduce-scatter handle) has no
    key: a body emitted from it is never copied nor copied from."""
    w = program._Writer(SPEC, BASE)
    assert w.state_key() is not None
    w.prefetched["L0.qkv"] = 3
    assert w.state_key() is None
    w.prefetched.clear()
    w.rs_handles.append(3)
    assert w.state_key() is None
