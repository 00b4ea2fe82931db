"""Atomic file writes: a file appears whole, or the old one stays.

Why: a file written in place and interrupted (Ctrl-C, SIGTERM, a full disk) is left
truncated, and a reader cannot tell it from a complete one. Each file is written to a
temporary name in its own folder (same file system, so the rename is atomic), flushed and
fsync'ed, then renamed over the target. A root module: output folders
(simulator/outputs/staging.py), calibration files (simulator/cost/calibration.py) and
`axsim bench` results all write through it, and cost/ must not import outputs/.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def current_umask() -> int:
    """The process's umask (read by setting and restoring it)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write `data` to `path` through a temporary file renamed over it (see module doc);
    OSError (with the file's name) on failure, the old file untouched."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would become the file's mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def atomic_write_text(path: str | Path, text: str) -> Path:
    """`atomic_write_bytes` of UTF-8 text."""
    return atomic_write_bytes(path, text.encode("utf-8"))
