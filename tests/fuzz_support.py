"""Support for the generated bad-input suite (tests/test_fuzz_bad_input.py).

`run_cli` runs one `axsim` command in this process and classifies what happened: exit 2
with exactly one `axsim: error:` line, or a result (exit 0, or a command's documented
verdict code); anything else fails the test, and an exception escaping `main` is the
traceback a user would have seen. Outcomes are counted per family; with
AXSIM_FUZZ_REPORT=FILE the counts are written there as JSON at the end of the run.

Profiles (AXSIM_FUZZ_PROFILE): `default` runs a bounded subset in the default test run
(about a hundred cases); `nightly` runs 10,100 cases. Both are derandomized: the same
cases every run.
"""

from __future__ import annotations

import io
import json
import math
import os
import time
from collections import Counter
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings

from simulator.cli import main

PROFILE = os.environ.get("AXSIM_FUZZ_PROFILE", "default")
# cases per family: default (bounded, in every test run) and nightly (>= 10,000 in all)
EXAMPLES = {
    "default": {
        "config-set": 24,
        "config-file": 8,
        "flags": 30,
        "sweep-spec": 8,
        "topology": 12,
        "calibration": 8,
        "trace": 10,
        "journal": 8,
        "names": 6,
    },
    "nightly": {
        "config-set": 3000,
        "config-file": 1000,
        "flags": 3000,
        "sweep-spec": 800,
        "topology": 1000,
        "calibration": 500,
        "trace": 500,
        "journal": 300,
        "names": 300,
    },
}
if PROFILE not in EXAMPLES:
    raise ValueError(f"AXSIM_FUZZ_PROFILE={PROFILE!r}: use one of {', '.join(EXAMPLES)}")


def fuzz_settings(family: str) -> settings:
    """Hypothesis settings of one family under the current profile."""
    return settings(
        max_examples=EXAMPLES[PROFILE][family],
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@dataclass
class Tally:
    """Outcome counts per family, and the slowest case seen (for the nightly note)."""

    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    slowest: dict[str, tuple[float, str]] = field(default_factory=dict)

    written_at: float = 0.0

    def add(self, family: str, outcome: str, seconds: float, what: str) -> None:
        self.counts[(family, outcome)] += 1
        if seconds > self.slowest.get(family, (0.0, ""))[0]:
            self.slowest[family] = (seconds, what[:300])
        # a long nightly run keeps its counts current, so a run stopped early still has them
        if time.monotonic() - self.written_at > 10:
            self.written_at = time.monotonic()
            write_report()

    def as_json(self) -> dict[str, Any]:
        families: dict[str, dict[str, int]] = {}
        for (family, outcome), n in sorted(self.counts.items()):
            families.setdefault(family, {})[outcome] = n
        return {
            "profile": PROFILE,
            "cases": sum(self.counts.values()),
            "tracebacks": sum(n for (_, o), n in self.counts.items() if o == "traceback"),
            "by_family": families,
            "slowest_case_s": {
                k: {"s": round(v[0], 2), "case": v[1]} for k, v in self.slowest.items()
            },
        }


TALLY = Tally()


def write_report() -> None:
    """Write the counts to AXSIM_FUZZ_REPORT (when set)."""
    path = os.environ.get("AXSIM_FUZZ_REPORT")
    if path and TALLY.counts:
        with open(path, "w") as fh:
            json.dump(TALLY.as_json(), fh, indent=1)


@dataclass
class Run:
    """One finished command: exit code and what it printed."""

    code: int
    out: str
    err: str


def run_cli(family: str, argv: list[str], verdicts: tuple[int, ...] = ()) -> Run:
    """Run `axsim argv` here; assert it is a one-line error (exit 2) or a result (exit 0,
    or one of the command's `verdicts`), never a traceback. Counts the outcome."""
    out, err = io.StringIO(), io.StringIO()
    t0 = time.perf_counter()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:  # click.Exit and --strict-memory's exit 3
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # the traceback a user would see: counted, then it fails the test
            TALLY.add(family, "traceback", time.perf_counter() - t0, " ".join(argv))
            write_report()
            raise
    seconds = time.perf_counter() - t0
    text = err.getvalue()
    assert "Traceback" not in text, (argv, text)
    if code == 2:
        lines = text.strip().splitlines()
        # one error line, last; other lines only axsim's own notices (e.g. a sweep's
        # damaged-journal warning, compare-strategies' "this can take minutes")
        assert lines and lines[-1].startswith("axsim: error:"), (argv, text)
        assert all(ln.startswith("axsim") and "error" not in ln for ln in lines[:-1]), text
        outcome = "exit 2 (one-line error)"
    else:
        assert code == 0 or code in verdicts, (argv, code, text[-3000:])
        outcome = "result" if code == 0 else f"verdict exit {code}"
    TALLY.add(family, outcome, seconds, " ".join(argv))
    return Run(int(code), out.getvalue(), text)


def finite_numbers(value: Any, where: str = "report") -> None:
    """Every number in a JSON value is finite (None allowed)."""
    if isinstance(value, dict):
        for k, v in value.items():
            finite_numbers(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            finite_numbers(v, f"{where}[{i}]")
    elif isinstance(value, float):
        assert math.isfinite(value), where


def physically_possible(report: dict[str, Any]) -> None:
    """A simulate report that could describe a real iteration."""
    finite_numbers(report)
    t = report["iteration_time_s"]
    eps = 1e-9 * max(t, 1.0)
    assert t > 0
    assert 0 <= report["compute_time_s"] <= t + eps
    assert 0 <= report["exposed_comm_time_s"] <= t + eps
    assert report["overlapped_comm_time_s"] >= 0
    assert all(v >= 0 for v in report["comm_time_by_group_s"].values())
    assert report["memory_per_gpu_bytes"] > 0
    assert report["percent_of_advertised_peak"] <= 100.0 + 1e-6
    if report["network_model"] == "contention":
        assert all(u["utilization"] <= 1.0 + 1e-6 for u in report["busiest_links"])
    for c in report["choices"]:
        assert c["what"] and c["value"] and c["reason"]
