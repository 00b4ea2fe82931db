"""The cases of bench/hostile_campaign.py: what a hostile user types at every command.

Each case says what it must do (`expect`: a one-line refusal, a sound result, or either)
and how to judge a result (`check`); fixtures build the files it needs in a scratch folder
(FIFOs, damaged traces, alias bombs, custom topologies with markup in their names) and
`background` starts what must run beside it (a silent TCP server, a sweep on the folder).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]
SMALL = ["--machine", "dgx-h100", "--gpus", "16", "--model", "gpt-tiny", "--batch-tokens", "4096"]
CLASSES = ("ok", "traceback", "runaway", "silent nonsense", "lost output")


@dataclass
class Case:
    """One command a hostile user types, what it must do and how to judge what it did.

    `expect`: "error" (bad input: exit 2 with one line), "ok" (exit 0 and `check` holds)
    or "either" (exit 0 whose result passes `check`, or one error line). `setup` prepares
    files in the scratch folder; `check(run)` returns a class name or None (fine);
    `stdout` is "pipe", "full" (/dev/full) or "closed".
    """

    name: str
    args: list[str]
    expect: str = "error"
    setup: Callable[[Path], None] | None = None
    check: Callable[[Run], str | None] | None = None
    stdout: str = "pipe"
    limit_s: float = 90.0
    verdicts: tuple[int, ...] = ()
    background: Callable[[Path], Callable[[], None]] | None = None
    dangerous: bool = False  # on an unfixed tree it forks thousands of processes
    # the class of a wrong acceptance: "silent nonsense" (a wrong value taken), or "lost
    # output" (files of another run mixed in, an input overwritten, rows dropped)
    accepted_is: str = "silent nonsense"


@dataclass
class Run:
    """One finished case: exit code, output, the scratch folder and the wall time."""

    code: int | None
    out: str
    err: str
    cwd: Path
    wall_s: float
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------ fixtures
def _write(rel: str, text: str | bytes) -> Callable[[Path], None]:
    def setup(cwd: Path) -> None:
        path = cwd / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())

    return setup


def _both(*steps: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(cwd: Path) -> None:
        for s in steps:
            s(cwd)

    return setup


def _fifo(rel: str) -> Callable[[Path], None]:
    return lambda cwd: os.mkfifo(cwd / rel)


def _synth_run(
    rel: str, damage: Callable[[dict[str, Any]], None] | None = None
) -> Callable[[Path], None]:
    def setup(cwd: Path) -> None:
        sys.path.insert(0, str(HERE))
        from tests import calibrate_synth

        calibrate_synth.write_run(cwd / rel)
        if damage:
            for f in (cwd / rel).glob("rank*.json"):
                doc = json.loads(f.read_text())
                damage(doc)
                f.write_text(json.dumps(doc))

    return setup


def _ns(doc: dict[str, Any]) -> None:
    for e in doc["traceEvents"]:
        for k in ("ts", "dur"):
            if isinstance(e.get(k), int | float):
                e[k] *= 1000


def _overlap(doc: dict[str, Any]) -> None:
    ks = [e for e in doc["traceEvents"] if e.get("cat") == "kernel"]
    ks[0]["dur"], ks[1]["dur"] = max(ks[0]["dur"], 100.0), max(ks[1]["dur"], 100.0)
    ks[1]["ts"], ks[1]["tid"] = ks[0]["ts"], ks[0]["tid"]


def _huge_msgs(doc: dict[str, Any]) -> None:
    for e in doc["traceEvents"]:
        for k in ("In msg nelems", "Out msg nelems"):
            if k in e.get("args", {}):
                e["args"][k] = int(e["args"][k]) * 10**12


def _copy(src: Path, rel: str) -> Callable[[Path], None]:
    def setup(cwd: Path) -> None:
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src, cwd / rel)

    return setup


def _custom(rel: str, **change: Any) -> Callable[[Path], None]:
    import yaml

    tree = yaml.safe_load((HERE / "tests" / "data" / "custom_topology.yaml").read_text())
    for k, v in change.items():
        if k == "link0_bw":
            tree["links"][0]["bandwidth_GBps"] = v
        elif k == "rename_gpu0":
            old = tree["devices"][0]["name"]
            tree["devices"][0]["name"] = v
            for link in tree["links"]:
                for end in ("src", "dst"):
                    link[end] = v if link[end] == old else link[end]
        else:
            tree[k] = v
    return _write(rel, yaml.safe_dump(tree, allow_unicode=True))


def _alias_bomb() -> str:
    text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    for i in range(1, 10):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n"
    return text


def _inline_bomb() -> str:
    """One axis whose ten values are anchors nesting ten times each: the last stands for
    10^10 values, and every one passes the spec's shape check."""
    values = ["&a0 [" + ", ".join(["oar"] * 10) + "]"]
    for i in range(1, 10):
        values.append(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "axes:\n  parallel.overlap: [" + ", ".join(values) + "]\n"


def _aliased_axes() -> str:
    """Six axes of ten values written once: 10^6 points in 300 bytes."""
    keys = ["cluster.nic_bandwidth_GBps", "cluster.fabric_link_bandwidth_GBps",
            "cluster.intra_node_bandwidth_scale", "training.batch_tokens", "model.seq_len",
            "model.layers"]  # fmt: skip
    text = f"axes:\n  {keys[0]}: &v [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"
    return text + "".join(f"  {k}: *v\n" for k in keys[1:])


SPEC = (
    "set: {cluster.machine: dgx-h100, cluster.gpus: 16, model.name: gpt-tiny, "
    "training.batch_tokens: 4096}\naxes: {cluster.nic_bandwidth_GBps: [12.5, 25]}\n"
)
SLOW_SPEC = (
    "set: {cluster.machine: dgx-h100, cluster.gpus: 16, model.name: gpt-5b, "
    "training.batch_tokens: 131072}\naxes: {cluster.nic_bandwidth_GBps: [3, 4, 5, 6, 7, 8]}\n"
)


def _silent_server(cwd: Path) -> Callable[[], None]:
    """A TCP server that accepts and never speaks; its port in cwd/port."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    (cwd / "port").write_text(str(s.getsockname()[1]))
    kept: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        s.settimeout(0.2)
        while not stop.is_set():
            try:
                kept.append(s.accept()[0])
            except OSError:
                continue

    threading.Thread(target=serve, daemon=True).start()

    def close() -> None:
        stop.set()
        for c in kept:
            c.close()
        s.close()

    return close


# ------------------------------------------------------------------ checks
def _finite(x: Any) -> bool:
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite(v) for v in x)
    return not isinstance(x, float) or (x == x and abs(x) != float("inf"))


def physical_report(run: Run) -> str | None:
    """A simulate --json report that could describe a real iteration."""
    try:
        r = json.loads(run.out)
    except ValueError:
        return "lost output"
    t = r["iteration_time_s"]
    bad = not _finite(r) or not t > 0 or r["compute_time_s"] > t * (1 + 1e-9)
    bad |= r["percent_of_advertised_peak"] > 100 + 1e-6
    bad |= any(u["utilization"] > 1 + 1e-6 for u in r.get("busiest_links", []))
    return "silent nonsense" if bad else None


def nonempty_stdout(run: Run) -> str | None:
    return None if run.out.strip() else "lost output"


def out_folder(rel: str, *needed: str) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        folder = run.cwd / rel
        if not all((folder / n).exists() for n in needed):
            return "lost output"
        leftovers = [p.name for p in folder.iterdir() if p.name.startswith("old-")]
        return "lost output" if leftovers else None

    return check


def busbw_below(limit_GBps: float) -> Callable[[Run], str | None]:
    def check(run: Run) -> str | None:
        try:
            rows = json.loads(run.out)
        except ValueError:
            return "lost output"
        return "silent nonsense" if any(r["busbw_GBps"] > limit_GBps for r in rows) else None

    return check


def _not_read_as_90(run: Run) -> str | None:
    """A sweep may refuse `1:30` per point (an error row); a row run at 90 GB/s is wrong."""
    journal = run.cwd / "o" / "rows.jsonl"
    lines = journal.read_text().splitlines() if journal.exists() else []
    ran = any(json.loads(line).get("status") == "ok" for line in lines)
    return "silent nonsense" if ran else None


def unchanged(rel: str, content: bytes) -> Callable[[Run], str | None]:
    return lambda run: None if (run.cwd / rel).read_bytes() == content else "lost output"


def grows(run: Run) -> str | None:
    """A collective sweep's time grows with size (no flat table beyond its data)."""
    rows = json.loads(run.out)
    times = [r["time_s"] for r in rows]
    return "silent nonsense" if times[-1] <= times[0] * 1.5 else None


ROOT = HERE  # the checkout the cases run (bench/hostile_campaign.py --root sets it)


def env() -> dict[str, str]:
    """The environment of a case: the checkout first on the path, no forced width."""
    out = dict(os.environ)
    out["PYTHONPATH"] = str(ROOT)
    out.pop("COLUMNS", None)
    return out


def _run_quiet(cwd: Path, args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "simulator", *args], cwd=cwd, env=env(),
                   capture_output=True, timeout=300)  # fmt: skip


def _running_sweep(cwd: Path) -> Callable[[], None]:
    """A sweep already writing the folder `o` (its first row due in seconds)."""
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", "s.yaml", "--out", "o",
                             "--no-progress"], cwd=cwd, env=env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (cwd / "o").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)

    def stop() -> None:
        proc.kill()
        proc.wait()

    return stop
