"""Atomic outputs: a folder or file appears complete, or not at all.

Why: `--out` folders were written file by file into place, so a run killed by Ctrl-C,
SIGTERM or a full disk left a complete-looking report.json beside truncated or missing
traces, and a rerun into the folder of an earlier run mixed its files with the new ones.

- `staged_folder(path, command)` yields a fresh staging folder beside `path` (same file
  system, so renaming is atomic); when the block ends normally the folder is marked as
  axsim's (MARKER) and renamed to `path`; when it raises (an error, Ctrl-C, SIGTERM,
  ENOSPC) the staging folder is removed and `path` is untouched: a reader finds the
  previous result or nothing, never a mix. A process killed outright (SIGKILL) leaves
  only a hidden `.NAME.axsim-partial-PID-*` folder, removed by the next run.
- An existing `path` is checked before any work (`check_out_folder`): an empty folder is
  used; a folder another axsim run wrote (it holds MARKER) is replaced as a whole only
  with `overwrite` (the commands' `--overwrite`); anything else is refused, so axsim
  never deletes files it did not write.
- Every file, the marker among them, is written through simulator/atomic.py (one file
  renamed into place; a root module, so cost/ writes calibration files the same way
  without importing outputs/).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from simulator.atomic import atomic_write_text, current_umask
from simulator.errors import ConfigError

MARKER = ".axsim-output.json"
"""The file that marks a folder as a complete axsim output (command and version)."""

_PARTIAL = ".axsim-partial-"
_OLD = ".axsim-old-"


def _mkdtemp(prefix: str, parent: Path) -> Path:
    """A temporary folder with the permissions a plain mkdir gives (mkdtemp's are 0700,
    and the staging folder becomes the user's output)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    folder.chmod(0o777 & ~current_umask())
    return folder


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _remove_stale(target: Path) -> None:
    """Remove staging / old folders of `target` left by processes that no longer run."""
    pattern = re.compile(
        re.escape(f".{target.name}") + f"(?:{re.escape(_PARTIAL)}|{re.escape(_OLD)})" + r"(\d+)-"
    )
    try:
        siblings = list(target.parent.iterdir())
    except OSError:
        return
    for p in siblings:
        m = pattern.match(p.name)
        if m and p.is_dir() and not p.is_symlink() and not _pid_alive(int(m.group(1))):
            shutil.rmtree(p, ignore_errors=True)


def _marker(folder: Path) -> dict[str, object] | None:
    try:
        data = json.loads((folder / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_out_folder(path: str | Path, *, flag: str = "--out", overwrite: bool = False) -> Path:
    """The output folder `path` as it will be written, checked before any work: its parent
    can be created and written, and `path` is absent, an empty folder, or (with
    `overwrite`) the output of an earlier axsim run. ConfigError naming `flag` else."""
    out = Path(path)
    try:
        exists, is_dir = out.exists(), out.is_dir()
    except OSError as exc:  # a name the file system cannot look up
        raise ConfigError(f"{flag} {str(path)[:200]}: {exc.strerror or exc}") from None
    if exists and not is_dir:
        raise ConfigError(f"{flag} {path}: exists and is not a folder")
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"{flag} {path}: {parent} is not a folder") from None
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    try:  # the staging folder is made there: try it now (os.access trusts root on /proc)
        os.rmdir(tempfile.mkdtemp(prefix=f".{out.name}{_PARTIAL}probe-", dir=parent))
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot create the folder ({exc.strerror})") from None
    if is_dir:
        try:
            names = sorted(p.name for p in out.iterdir())
        except OSError as exc:
            raise ConfigError(f"{flag} {path}: cannot read the folder ({exc.strerror})") from None
        if names and _marker(out) is None:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            raise ConfigError(
                f"{flag} {path}: the folder holds files axsim did not write ({shown}); "
                "choose an empty or new folder"
            )
        if names and not overwrite:
            raise ConfigError(
                f"{flag} {path}: holds the output of an earlier axsim run; add --overwrite "
                "to replace it, or choose a new folder"
            )
    return out


def _commit(stage: Path, target: Path) -> None:
    """Put the complete `stage` where `target` is (replacing an earlier output whole)."""
    old: Path | None = None
    if target.is_dir():
        try:
            target.rmdir()  # empty: nothing to keep aside
        except OSError:
            old = _mkdtemp(f".{target.name}{_OLD}{os.getpid()}-", target.parent)
            os.rename(target, old / "previous")
    os.rename(stage, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def staged_folder(
    path: str | Path, command: str, *, flag: str = "--out", overwrite: bool = False
) -> Iterator[Path]:
    """A staging folder whose contents become `path` when the block ends normally (see
    the module doc); an OSError while writing (a full disk) is a ConfigError naming
    `flag`, and nothing is left behind."""
    target = check_out_folder(path, flag=flag, overwrite=overwrite).absolute()
    _remove_stale(target)
    stage = target.parent / "not-yet"
    try:
        try:
            stage = _mkdtemp(f".{target.name}{_PARTIAL}{os.getpid()}-", target.parent)
            yield stage
            from simulator.outputs.versions import stamp

            atomic_write_text(stage / MARKER, json.dumps(stamp({"command": command})) + "\n")
            check_out_folder(path, flag=flag, overwrite=overwrite)  # changed meanwhile?
            _commit(stage, target)
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            raise ConfigError(
                f"{flag} {path}: cannot write the outputs{where}: {exc.strerror or exc}; "
                "nothing was written"
            ) from None
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
