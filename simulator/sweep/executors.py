"""Sweep executors: in-process, local processes, dask.distributed.

Every executor runs `run_point` on raw config mappings (plain picklable dicts) and yields
(point, outcome) as points finish; `run_point` never raises, so one bad point cannot stop
a sweep. Dask is an optional dependency, imported only when a Dask executor is asked for.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from typing import Any

from simulator.config import validate_config
from simulator.process import worker_pool
from simulator.sweep.spec import SweepError, SweepPoint
from simulator.sweep.store import flatten


def run_point(data: dict[str, Any]) -> tuple[str, Any]:
    """Simulate one raw config mapping: ('ok', flat report) or ('error', message).
    Runs in workers; never raises for a failed point."""
    try:
        from simulator.api import simulate

        report = simulate(validate_config(data)).report.to_json()
        return "ok", flatten(report)
    except Exception as e:  # a failed point is a row with its error
        text = f"{type(e).__name__}: {e}".splitlines()[0] if str(e) else type(e).__name__
        return "error", text[:500]


Outcomes = Iterator[tuple[SweepPoint, tuple[str, Any]]]


def run_inline(todo: Sequence[SweepPoint]) -> Outcomes:
    for p in todo:
        yield p, run_point(p.data)


def run_processes(todo: Sequence[SweepPoint], jobs: int) -> Outcomes:
    """Points on local worker processes (simulator/process.py `worker_pool`: they die
    with the sweep; a killed worker is one error line, the rows finished so far kept)."""
    with worker_pool(max(1, min(jobs, len(todo))), "the sweep") as pool:
        pending: dict[Future[tuple[str, Any]], SweepPoint] = {
            pool.submit(run_point, p.data): p for p in todo
        }
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                yield pending.pop(f), f.result()


def dask_client(
    scheduler: str | None,
    local_workers: int | None,
    processes: bool = True,
    timeout_s: float = 10.0,
) -> tuple[Any, Any]:
    """(client, cluster): a Client connected to `scheduler` (cluster None), or on a new
    LocalCluster of `local_workers` single-threaded workers."""
    try:
        import logging

        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError(
            "dask is not installed (in the axsim checkout: pip install -e '.[dask]')"
        ) from None
    if scheduler:
        return _connect(Client, scheduler, timeout_s), None
    import dask

    with dask.config.set({"distributed.worker.multiprocessing-method": "forkserver"}):
        if processes:
            _quiet_forkserver()
        with _ctrl_c_deferred() as pressed:
            cluster = LocalCluster(
                n_workers=local_workers,
                threads_per_worker=1,
                processes=processes,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
    if pressed:  # once the cluster is whole, so that it closes cleanly
        cluster.close()
        raise KeyboardInterrupt
    return Client(cluster), cluster


@contextmanager
def _ctrl_c_deferred() -> Iterator[list[int]]:
    """Note a Ctrl-C pressed inside the block instead of raising it there (the caller
    raises it after). Why: a KeyboardInterrupt inside LocalCluster() left a half-built
    cluster whose atexit close failed with a traceback, and its workers logging lost
    heartbeats; the workers start in a second or two, so the wait is short."""
    pressed: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield pressed
        return

    def note(signum: int, frame: object) -> None:
        pressed.append(signum)

    old = signal.signal(signal.SIGINT, note)
    try:
        yield pressed
    finally:
        signal.signal(signal.SIGINT, old)


def _quiet_forkserver() -> None:
    """Start the forkserver that forks the LocalCluster's workers with Ctrl-C blocked.

    Why: the workers were spawned processes in the terminal's process group; a Ctrl-C while
    they started reached every one of them, each printing a KeyboardInterrupt traceback
    from the middle of its imports, and left a half-built cluster whose atexit close
    printed another (125 lines for 2 workers, measured). A signal blocked in the thread
    that forks stays blocked across fork and exec, and the forkserver's children inherit
    its mask: so the server and the workers never see Ctrl-C (the sweep closes them when
    it stops). This thread gets a Ctrl-C pressed meanwhile as soon as the server is
    started (the signal stays pending, then is delivered here when unblocked).
    The mask is set here, in the thread that forks the server; distributed's own threads,
    which fork under `spawn`, begin with an empty mask (measured: SigBlk 0 in /proc)."""
    from multiprocessing import forkserver, resource_tracker

    from distributed.utils import get_mp_context

    get_mp_context()  # distributed's preload list for the server (it imports them once)
    # started first: its own start unblocks SIGINT in this thread (bpo-33613's mask)
    resource_tracker.ensure_running()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


# The schemes a scheduler address may have: axsim takes no TLS or UCX settings, so
# tls:// and ucx:// failed inside distributed (TypeError tracebacks).
DASK_SCHEMES = ("tcp",)


def _connect(client_cls: Any, scheduler: str, timeout_s: float) -> Any:
    """A Client on `scheduler`, or SweepError in one line within about `timeout_s`.

    Why a thread with a deadline: distributed's own timeout covers the TCP connect, not
    the handshake after it, so an address that accepts and stays silent (a stuck process,
    an HTTP server) hung the sweep forever. The thread is a daemon: one that never
    returns is abandoned with the process."""
    scheme = scheduler.split("://", 1)[0] if "://" in scheduler else "tcp"
    if scheme not in DASK_SCHEMES:
        raise SweepError(
            f"--dask-scheduler {scheduler}: give tcp://HOST:PORT (axsim has no settings for "
            f"'{scheme}://')"
        )
    outcome: dict[str, Any] = {}

    def connect() -> None:
        try:
            outcome["client"] = client_cls(scheduler, timeout=f"{timeout_s}s")
        except Exception as e:  # any failure of distributed is this one line
            outcome["error"] = e

    worker = threading.Thread(target=connect, name="axsim-dask-connect", daemon=True)
    worker.start()
    worker.join(timeout_s + DASK_HANDSHAKE_GRACE_S)
    if "client" in outcome:
        return outcome["client"]
    error = outcome.get("error")
    if error is None:
        raise SweepError(
            f"--dask-scheduler {scheduler}: nothing answered as a Dask scheduler within "
            f"{timeout_s:g} s (--dask-timeout); is it a scheduler's address?"
        )
    msg = str(error).splitlines()[0] if str(error) else type(error).__name__
    raise SweepError(f"--dask-scheduler {scheduler}: cannot reach it ({msg})")


# Seconds beyond --dask-timeout for distributed's own timeout to report first (its message
# names what failed); the deadline itself bounds only a handshake that never ends.
DASK_HANDSHAKE_GRACE_S = 2.0


def run_dask(todo: Sequence[SweepPoint], client: Any, cluster: Any = None) -> Outcomes:
    """Submit every point to the Dask client; close the client (and its LocalCluster)."""
    from distributed import as_completed

    try:
        futures = {
            client.submit(run_point, p.data, key=f"axsim-sweep-{p.config_hash}", pure=False): p
            for p in todo
        }
        for f in as_completed(list(futures)):
            yield futures[f], f.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
