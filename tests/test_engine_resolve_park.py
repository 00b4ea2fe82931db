"""A collective's completion parks a participant's stream on its next op's unfinished
dependency at once (`Engine._blocked`) instead of queueing the stream for `_advance`,
which would only park it there.

Why a test of its own: in full mode about half of the engine's stream advances were such
no-ops (a communication stream whose next collective waits for compute not done yet).
The shortcut must not change the order in which anything else happens: the run with it
equals, bit for bit, the run where every participant goes through `_advance`.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engine.core import Engine, EngineResult
from tests.engine_helpers import run
from tests.test_engine_full_unroll import WORLD, _graph, _topology


def _never_blocked(r: object, s: int, pos: int) -> bool:
    return False  # the unoptimised path: every participant's stream is advanced


def _run_counting(monkeypatch: pytest.MonkeyPatch, shortcut: bool, **kw: object):
    calls = [0]
    advance = Engine._advance

    def counted(self: Engine, r: object, s: int) -> None:
        calls[0] += 1
        advance(self, r, s)  # type: ignore[arg-type]

    with monkeypatch.context() as m:
        m.setattr(Engine, "_advance", counted)
        if not shortcut:
            m.setattr(Engine, "_blocked", staticmethod(_never_blocked))
        res = run(**kw)  # type: ignore[arg-type]
    return res, calls[0]


def _identical(a: EngineResult, b: EngineResult) -> None:
    assert a.iteration_time_s == b.iteration_time_s
    assert a.ops_processed == b.ops_processed and a.skipped_segments == b.skipped_segments
    assert a.simpy_events == b.simpy_events
    for r in a.timeline.ranks:
        x, y = a.timeline.rank(r), b.timeline.rank(r)
        np.testing.assert_array_equal(x.start_s, y.start_s)
        np.testing.assert_array_equal(x.end_s, y.end_s)
        np.testing.assert_array_equal(x.sync_start_s, y.sync_start_s)
    np.testing.assert_array_equal(a.link_bytes, b.link_bytes)


@pytest.mark.parametrize("mode", ["full", "symmetric"])
@pytest.mark.parametrize("network", ["alpha-beta", "contention"])
@pytest.mark.parametrize("steady_state", [True, False])
def test_parking_at_completion_equals_advancing(
    monkeypatch: pytest.MonkeyPatch, mode: str, network: str, steady_state: bool
) -> None:
    kw = {
        "graph": _graph(),
        "topology": _topology("islands"),
        "network": network,
        "mode": mode,
        "steady_state": steady_state,
    }
    fast, fast_calls = _run_counting(monkeypatch, True, **kw)
    slow, slow_calls = _run_counting(monkeypatch, False, **kw)
    _identical(fast, slow)
    if mode == "full":  # the shortcut was taken (symmetric: the one rank is the watcher)
        assert fast_calls < slow_calls


def test_parking_with_a_straggler_equals_advancing(monkeypatch: pytest.MonkeyPatch) -> None:
    kw = {
        "graph": _graph(classes=False),
        "topology": _topology("switched"),
        "network": "contention",
        "mode": "full",
        "stragglers": {5: 1.5},
    }
    fast, _ = _run_counting(monkeypatch, True, **kw)
    slow, _ = _run_counting(monkeypatch, False, **kw)
    _identical(fast, slow)
    assert fast.timeline.ranks == tuple(range(WORLD))
