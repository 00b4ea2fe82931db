"""A hostile user's campaign against every `axsim` command, classified (issue 33).

Each case runs `python -m simulator ARGS` in its own process (in a scratch folder, under a
wall-clock limit and an address-space limit) against the checkout given by `--root`, so
the same cases classify an old and a new tree alike:

- traceback: a Python traceback on stderr, or an exit that is neither 0, 2 (one error
  line) nor a documented verdict;
- runaway: the wall-clock limit hit, or the address-space limit (MemoryError, a kill);
- silent nonsense: exit 0 where the input is impossible or wrong (the case says it must be
  refused), or a result that is not physically possible;
- lost output: an output that is incomplete, mixed with an earlier run's, or missing
  although the run said it succeeded; an input overwritten;
- ok: one error line and exit 2 for bad input, a sound result for good input.

    python bench/hostile_campaign.py --root ../axsim-base --json before.json
    python bench/hostile_campaign.py --json after.json --only sweep

Not a test: the cases spawn processes and take minutes (about 2 s each). The cases
themselves are bench/hostile_table.py (fixtures and checks: bench/hostile_cases.py).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import hostile_cases as hc
from hostile_cases import CLASSES, Case, Run
from hostile_table import cases as all_cases

# ------------------------------------------------------------------ running
MEMORY_LIMIT = 6 << 30


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    os.setsid()


def run_case(case: Case) -> tuple[str, Run]:
    """Run one case in a fresh scratch folder; (class, run)."""
    with tempfile.TemporaryDirectory(prefix="axsim-hostile-") as tmp:
        cwd = Path(tmp)
        if case.setup:
            case.setup(cwd)
        stop = case.background(cwd) if case.background else None
        args = [a.replace("PORT", f"tcp://127.0.0.1:{(cwd / 'port').read_text()}") if a == "PORT" else a
                for a in case.args]  # fmt: skip
        out_target: Any = subprocess.PIPE
        fh = None
        if case.stdout == "full":
            fh = open("/dev/full", "w")  # noqa: SIM115
            out_target = fh
        pre = _limits
        if case.stdout == "closed":
            out_target = subprocess.DEVNULL

            def pre() -> None:
                _limits()
                os.close(1)

        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, "-m", "simulator", *args], cwd=cwd,
                                env=hc.env(), stdout=out_target, stderr=subprocess.PIPE,
                                text=True, preexec_fn=pre)  # fmt: skip
        try:
            out, err = proc.communicate(timeout=case.limit_s)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            code = None
        finally:
            if fh:
                fh.close()
            if stop:
                stop()
        run = Run(code, out or "", err or "", cwd, time.monotonic() - t0)
        return classify(case, run), run


def classify(case: Case, run: Run) -> str:
    """The outcome's class (module doc)."""
    err = run.err
    if run.code is None or "MemoryError" in err or (run.code is not None and run.code < 0):
        return "runaway"
    if "Traceback" in err or "Exception ignored" in err:
        return "traceback"
    lines = [ln for ln in err.strip().splitlines() if ln]
    one_line = (
        bool(lines)
        and lines[-1].startswith("axsim: error:")
        and all(ln.startswith("axsim") for ln in lines)
    )
    if run.code == 2 and one_line:
        if case.expect == "ok" and case.stdout == "pipe":
            return "lost output"  # a sound command refused: the user gets nothing
        if case.check and case.expect == "error":
            return case.check(run) or "ok"  # e.g. the refused write left the input whole
        return "ok"
    if run.code == 0 or run.code in case.verdicts:
        if case.stdout in ("full", "closed"):
            return "lost output"  # said nothing wrong, printed nothing
        if case.expect == "error":
            return case.accepted_is
        return (case.check(run) if case.check else None) or "ok"
    if run.code == 141 and case.stdout != "pipe":
        return "ok"
    return "traceback" if not one_line else "ok"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=hc.HERE, help="The axsim checkout to run.")
    ap.add_argument("--only", default=None, help="Run cases whose name contains this.")
    ap.add_argument("--json", type=Path, default=None, help="Write every outcome here.")
    ap.add_argument(
        "--skip-dangerous",
        action="store_true",
        help="Skip cases that fork thousands of processes on a tree without the -j cap "
        "(counted as runaways: the issue measured them).",
    )
    args = ap.parse_args()
    hc.ROOT = args.root.resolve()
    cases = [c for c in all_cases() if args.only is None or args.only in c.name]
    counts: Counter[str] = Counter()
    rows = []
    for i, case in enumerate(cases, 1):
        if case.dangerous and args.skip_dangerous:
            counts["runaway"] += 1
            print(f"[{i:3d}/{len(cases)}] runaway (skipped: forks without bound) {case.name}")
            rows.append({"case": case.name, "class": "runaway", "skipped": True})
            continue
        cls, run = run_case(case)
        counts[cls] += 1
        last = (run.err.strip().splitlines() or [""])[-1][:160]
        print(f"[{i:3d}/{len(cases)}] {cls:16s} {run.wall_s:6.1f}s {case.name}: {last}", flush=True)
        rows.append({"case": case.name, "class": cls, "code": run.code, "wall_s": round(run.wall_s, 2),
                     "stderr_tail": run.err[-600:]})  # fmt: skip
    summary = {"root": str(hc.ROOT), "cases": len(cases), "counts": {k: counts[k] for k in CLASSES}}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({**summary, "outcomes": rows}, indent=1))


if __name__ == "__main__":
    main()
