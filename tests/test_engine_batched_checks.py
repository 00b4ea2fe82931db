"""Checks of components solved at one instant and due at one time share one simpy event
(`ContentionNetwork._reprice`), run in the order the components were solved.

Why a test of its own: in full mode every instance of a collective starts at one instant
and, alike, finishes at one time, so one event per component was most of the run's simpy
events. The shared event must run exactly what the separate events ran: the run equals,
bit for bit, one with an event per check (the reference below, as before), and the
periodic prover, which reads the queued checks one by one, skips the same copies.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

import simulator.engine.core as core
from simulator.engine.core import EngineResult
from simulator.engine.network import ContentionNetwork, build_network
from tests.engine_helpers import run
from tests.test_engine_full_unroll import _graph, _topology


class _EventPerCheck(ContentionNetwork):
    """The unbatched reference: one simpy event per component's check."""

    def _reprice(self) -> None:
        self.reprice_pending = False
        dirty, self.dirty = self.dirty, {}
        for comp in dirty.values():
            dt_ps = self._solve_component(comp)
            if dt_ps >= 0:
                v = comp.version
                self._after(dt_ps, partial(self._check, comp, v), tag=("check", comp, v))


def _reference_network(model, env, pricer, stats):  # type: ignore[no-untyped-def]
    if model == "contention":
        return _EventPerCheck(env, pricer, stats)
    return build_network(model, env, pricer, stats)


@pytest.mark.parametrize("topology", ["switched", "islands", "mesh"])
@pytest.mark.parametrize("mode", ["full", "symmetric"])
@pytest.mark.parametrize("steady_state", [True, False])
def test_shared_check_events_equal_one_per_check(
    monkeypatch: pytest.MonkeyPatch, topology: str, mode: str, steady_state: bool
) -> None:
    kw = {
        "graph": _graph(),
        "topology": _topology(topology),
        "network": "contention",
        "mode": mode,
        "steady_state": steady_state,
    }
    batched: EngineResult = run(**kw)  # type: ignore[arg-type]
    with monkeypatch.context() as m:
        m.setattr(core, "build_network", _reference_network)
        ref: EngineResult = run(**kw)  # type: ignore[arg-type]
    assert batched.iteration_time_s == ref.iteration_time_s
    assert batched.ops_processed == ref.ops_processed
    assert batched.skipped_segments == ref.skipped_segments
    assert batched.network_stats.reprices == ref.network_stats.reprices
    for r in batched.timeline.ranks:
        x, y = batched.timeline.rank(r), ref.timeline.rank(r)
        np.testing.assert_array_equal(x.start_s, y.start_s)
        np.testing.assert_array_equal(x.end_s, y.end_s)
        np.testing.assert_array_equal(x.sync_start_s, y.sync_start_s)
    np.testing.assert_array_equal(batched.link_bytes, ref.link_bytes)
    assert batched.simpy_events <= ref.simpy_events
    if mode == "full" and topology == "mesh":  # disjoint instances finish together
        assert batched.simpy_events < ref.simpy_events
