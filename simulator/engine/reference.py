"""The raw simpy event rate of this machine: the reference the engine's rate is compared to.

A bare loop (100 processes yielding timeouts) measures how many events per second simpy
itself processes here; `axsim bench` reports every case's event rate as a ratio to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import simpy


def raw_simpy_rate(events: int = 400_000, clock: Callable[[], float] = time.perf_counter) -> float:
    """Events per second of a bare simpy loop, timed by `clock` (wall time by default;
    `time.process_time` gives events per CPU-second, for benches that report CPU time)."""
    env = simpy.Environment()
    per = max(events // 100, 1)

    def proc(env: simpy.Environment):
        for _ in range(per):
            yield env.timeout(1)

    for _ in range(100):
        env.process(proc(env))
    t0 = clock()
    env.run()
    return (per * 100) / (clock() - t0)
