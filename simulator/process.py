"""The axsim process and its children: signals, standard output, worker pools.

Why each piece:

- `signals_as_exceptions`: SIGTERM (and SIGHUP) kill a Python process without running
  its `finally` blocks, so a terminated run left staged outputs half-written and worker
  processes orphaned. In the CLI they raise `Terminated` in the main thread instead, and
  every cleanup runs as for Ctrl-C.
- `GuardedStdout`: a closed standard output (`axsim ... >&-`) made every print a silent
  no-op (exit 0, no output), and a full device (`> /dev/full`) raised OSError from deep
  inside a renderer (a traceback) or only at interpreter exit. Writes go through a guard
  that raises `StdoutError`, which the CLI turns into one line.
- `worker_pool`: a process pool whose workers die with their parent (Linux's parent-death
  signal, set in each worker), whose size is capped (`check_jobs`), and whose broken
  state (a worker killed by the OOM killer or a signal) is one clear error, not
  BrokenProcessPool's traceback.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from simulator.errors import ConfigError, SimulatorError

if TYPE_CHECKING:  # the pool's modules load when a pool is made, not with the CLI
    from concurrent.futures import ProcessPoolExecutor


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread so that cleanups run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def signals_as_exceptions() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP raise `Terminated` (main thread only, and only
    where nobody installed a handler of their own)."""
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is signal.SIG_DFL:
                previous[sig] = signal.signal(sig, _raise_terminated)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class StdoutError(Exception):
    """Writing to standard output failed (closed, broken pipe, full device)."""

    def __init__(self, code: int, strerror: str) -> None:
        super().__init__(code, strerror)
        self.errno = code
        self.strerror = strerror


class GuardedStdout(io.TextIOBase):
    """`sys.stdout` while the CLI runs: writes and flushes of the real stream, with any
    failure (or a stream that is closed: `sys.stdout` is None) raised as StdoutError."""

    def __init__(self) -> None:
        self._inner: Any = None
        self._saved: Any = None

    def __enter__(self) -> GuardedStdout:
        self._saved = self._inner = sys.stdout
        sys.stdout = self
        return self

    def __exit__(self, *exc: object) -> None:
        if sys.stdout is self:
            sys.stdout = self._saved

    def _stream(self) -> Any:
        if self._inner is None:
            raise StdoutError(errno.EBADF, "it is closed")
        return self._inner

    def write(self, text: str) -> int:
        stream = self._stream()
        try:
            return int(stream.write(text) or 0)
        except OSError as e:
            raise StdoutError(e.errno or errno.EIO, e.strerror or str(e)) from None

    def flush(self) -> None:
        if self._inner is None:
            return
        try:
            self._inner.flush()
        except OSError as e:
            raise StdoutError(e.errno or errno.EIO, e.strerror or str(e)) from None

    def silence(self) -> None:
        """After a failure: send what is still buffered (and any later output) nowhere,
        so interpreter exit does not fail on it again."""
        with contextlib.suppress(Exception):
            fd = self._saved.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, fd)
            os.close(null)
        self._inner = None

    def isatty(self) -> bool:
        return self._inner is not None and bool(self._inner.isatty())

    def fileno(self) -> int:
        return int(self._stream().fileno())

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._inner, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self._inner, "errors", None)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream(), name)


# ---------------------------------------------------------------------- worker pools
# Simulations are CPU-bound: more local workers than this per CPU only costs memory (each
# is a Python process with the simulator loaded, ~100 MB). `figures -j 100000` started
# over 3,000 processes in two minutes before this bound.
MAX_JOBS_PER_CPU = 8


def check_jobs(jobs: int | None, flag: str = "--jobs") -> int:
    """A worker count: None -> the CPUs; below 1 or above MAX_JOBS_PER_CPU x the CPUs of
    this machine -> ConfigError naming `flag`."""
    cpus = os.cpu_count() or 1
    if jobs is None:
        return cpus
    if jobs < 1:
        raise ConfigError(f"{flag} must be positive, got {jobs}")
    if jobs > MAX_JOBS_PER_CPU * cpus:
        raise ConfigError(
            f"{flag} {jobs}: more than {MAX_JOBS_PER_CPU}x the {cpus} CPUs of this machine "
            "(each worker is a process)"
        )
    return jobs


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """Ask the kernel to SIGTERM this process when its parent exits (Linux), and exit now
    if the parent is already gone. Runs first in every worker of `worker_pool`."""
    # a forked worker inherits the CLI's handlers: SIGTERM raising Terminated inside a task
    # was caught as the task's exception and the worker outlived its parent
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # a worker's SIGINT is its parent's business (Ctrl-C reaches the whole group)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


class WorkerDied(SimulatorError):
    """A worker process of a pool ended without a result (killed, out of memory)."""


@contextlib.contextmanager
def worker_pool(jobs: int, what: str) -> Iterator[ProcessPoolExecutor]:
    """A process pool of `jobs` workers that die with this process; on any exit the pool
    is shut down without waiting for queued work, and its workers are terminated, so an
    error, Ctrl-C or SIGTERM leaves no process behind. A worker that dies mid-task is one
    WorkerDied error naming `what`."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    pool = ProcessPoolExecutor(
        max_workers=jobs, initializer=die_with_parent, initargs=(os.getpid(),)
    )
    ok = False
    try:
        yield pool
        ok = True
    except BrokenProcessPool:
        raise WorkerDied(
            f"a worker process of {what} ended without a result (killed, or out of memory); "
            "the finished results are kept"
        ) from None
    finally:
        if not ok:
            for proc in list(getattr(pool, "_processes", {}).values()):
                with contextlib.suppress(Exception):
                    proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)
