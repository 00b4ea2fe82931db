"""Reading a user's input file with bounds: a regular file, at most a size limit.

Why: every reader used `Path.read_text()`, which reads until the end of the file. Given
`/dev/zero` it never ends (and fills memory), given a FIFO nobody writes to it blocks
forever in `open`, and a multi-gigabyte file named by mistake as a config is read whole
before the parser says no. Here a file is opened without blocking, must be a regular
file (checked on the open descriptor, so it cannot change in between), and is read up to
`limit` bytes; beyond that the reader stops and says so.

The errors are `InputFileError`, an OSError whose `strerror` says what is wrong, so the
readers' existing `except OSError as e: ... ({e.strerror})` handlers print it in their own
one-line shape, naming the file. Lives in topologies/, the base of the import order,
beside the YAML loader, since every package reads user files.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

# The largest user file (config, sweep spec, calibration, custom topology, benchmark CSV
# or log) read whole: 256 MiB is over 30x the largest file of the measurements this
# project holds (../shared/traces: 8.4 MB) and takes the pure-Python YAML parser about a
# minute already (~5 MB/s), so anything larger is a wrong file, not a bigger input.
MAX_USER_FILE_BYTES = 256 << 20


class InputFileError(OSError):
    """A user file that is not a regular file, or is larger than the reader's limit."""


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO or pipe"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def check_regular(path: str | Path, limit: int = MAX_USER_FILE_BYTES) -> int:
    """The size of `path`, a regular file of at most `limit` bytes; InputFileError else
    (never blocks: a FIFO is refused from its metadata, not opened)."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise InputFileError(errno.EFBIG, _too_large(st.st_size, limit))
    return st.st_size


def _too_large(size: int | None, limit: int) -> str:
    got = f"{size / 2**20:,.1f} MiB" if size is not None else "more"
    return f"{got} is larger than the {limit / 2**20:,.0f} MiB an input file may have"


def read_user_bytes(path: str | Path, limit: int = MAX_USER_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (see the module doc)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(errno.EINVAL, f"{_kind(st.st_mode)}, not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)  # a file in /proc reports size 0: read, then judge
    finally:
        os.close(fd)
    if len(data) > limit:
        raise InputFileError(errno.EFBIG, _too_large(None, limit))
    return data


def read_user_text(path: str | Path, limit: int = MAX_USER_FILE_BYTES) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes (UnicodeDecodeError when
    it is not UTF-8, as `Path.read_text` raises)."""
    return read_user_bytes(path, limit).decode("utf-8")
