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

    python bench/hostile_campaign.py --root /work/main --json before.json
    python bench/hostile_campaign.py --json after.json --only sweep

Not a test: the cases spawn processes and take minutes (about 2 s each).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
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


# ------------------------------------------------------------------ the cases
def _cases() -> list[Case]:
    vidur = HERE / "tests" / "data" / "vidur_network" / "h100_dgx__all_reduce.csv"
    c: list[Case] = []
    sim = ["simulate", *SMALL]
    # simulate: flags and --set values
    for name, extra in [
        ("gpus 0", ["--gpus", "0"]), ("gpus negative", ["--gpus", "-8"]),
        ("gpus 2^40", ["--gpus", str(2**40)]), ("gpus text", ["--gpus", "many"]),
        ("batch 0", ["--batch-tokens", "0"]), ("batch 2^70", ["--batch-tokens", str(2**70)]),
        ("seq 0", ["--seq-len", "0"]), ("grid text", ["--grid", "a,b,c,d"]),
        ("grid product", ["--grid", "1,1,1,3"]), ("grid zero", ["--grid", "0,1,1,16"]),
        ("overlap bad", ["--overlap", "oar,xyz"]), ("engine bad", ["--engine", "fast"]),
        ("strategy bad", ["--strategy", "magic"]), ("set no =", ["--set", "cluster.gpus"]),
        ("set unknown", ["--set", "cluster.warp=9"]), ("set nan", ["--set", "cluster.nic_bandwidth_GBps=.nan"]),
        ("set inf", ["--set", "cluster.nic_bandwidth_GBps=.inf"]), ("set 1:30", ["--set", "cluster.nic_bandwidth_GBps=1:30"]),
        ("set yes", ["--set", "cluster.gpus=yes"]), ("set list", ["--set", "cluster.gpus=[16]"]),
        ("set 1e300 scale", ["--set", "cluster.intra_node_bandwidth_scale=1e300"]),
        ("set nic 1e300", ["--set", "cluster.nic_bandwidth_GBps=1e300"]),
        ("set nic 5e-324", ["--set", "cluster.nic_bandwidth_GBps=5e-324"]),
        ("tp 1000", ["--strategy", "megatron", "--set", "parallel.tp=1000"]),
        ("pp 3", ["--strategy", "megatron", "--set", "parallel.pp=3"]),
        ("cp 0", ["--strategy", "megatron", "--set", "parallel.cp=0"]),
        ("vstages 2^30", ["--strategy", "megatron", "--set", "parallel.pp=2", "--set", "parallel.virtual_stages=1073741824"]),
        ("pp 512 x 4096 mb", ["--gpus", "512", "--set", "model.layers=512", "--strategy", "megatron", "--set", "parallel.pp=512", "--set", "parallel.tp=1", "--set", "training.microbatch_sequences=1", "--batch-tokens", str(4096 * 32)]),
        ("pp 8 x 512 vstages", ["--gpus", "8", "--set", "model.layers=4096", "--strategy", "megatron", "--set", "parallel.pp=8", "--set", "parallel.tp=1", "--set", "parallel.virtual_stages=512", "--set", "training.microbatch_sequences=1", "--batch-tokens", str(64 * 32)]),
        ("stragglers rank 10^9", ["--set", "cluster.stragglers=[{rank: 1000000000, slowdown: 2}]"]),
        ("calibration missing", ["--calibration", "nope.yaml"]),
        ("calibration dir", ["--calibration", "."]),
        ("trace-ranks w/o out", ["--trace-ranks", "0-3"]),
        ("chakra w/o out", ["--chakra"]),
    ]:  # fmt: skip
        c.append(Case(f"simulate {name}", [*sim, *extra]))
    for name, expect, extra in [
        ("ok json", "ok", ["--json"]),
        ("ok alpha-beta", "ok", ["--json", "--network", "alpha-beta"]),
        ("ok megatron", "ok", ["--json", "--strategy", "megatron"]),
        ("ok optimus", "ok", ["--json", "--strategy", "optimus"]),
        ("ok zeropp", "ok", ["--json", "--strategy", "zeropp"]),
        ("ok straggler", "ok", ["--json", "--set", "cluster.stragglers=[{rank: 3, slowdown: 3}]"]),
        ("leading zero gpus", "ok", ["--json", "--set", "cluster.gpus=016"]),
    ]:
        c.append(Case(f"simulate {name}", [*sim, *extra], expect=expect, check=physical_report))
    for name, setup in [
        ("config empty", _write("c.yaml", "")), ("config list", _write("c.yaml", "- 1\n- 2\n")),
        ("config dup keys", _write("c.yaml", "cluster: {gpus: 8}\ncluster: {gpus: 16}\n")),
        ("config deep", _write("c.yaml", "cluster: " + "[" * 3000 + "]" * 3000 + "\n")),
        ("config alias bomb", _write("c.yaml", _alias_bomb() + "cluster: {stragglers: *a9}\n")),
        ("config binary", _write("c.yaml", bytes(range(256)) * 4)),
        ("config fifo", _fifo("c.yaml")), ("config tab", _write("c.yaml", "cluster:\n\tgpus: 8\n")),
    ]:  # fmt: skip
        c.append(Case(f"simulate {name}", ["simulate", "c.yaml"], setup=setup))
    c.append(Case("simulate config /dev/zero", ["simulate", "/dev/zero"]))
    c.append(Case("simulate calibration /dev/zero", [*sim, "--calibration", "/dev/zero"]))
    c.append(
        Case(
            "simulate calibration fifo",
            [*sim, "--calibration", "cal.yaml"],
            setup=_fifo("cal.yaml"),
        )
    )
    # simulate --out
    need = ("report.json", "config.resolved.yaml", "timeline.csv", "trace.json.gz")
    c += [
        Case("simulate out ok", [*sim, "--out", "o", "--no-pictures"], "ok", check=out_folder("o", *need)),
        Case("simulate out is a file", [*sim, "--out", "o"], setup=_write("o", "x")),
        Case("simulate out holds kineto file", [*sim, "--out", "o"], setup=_write("o/kineto", "x")),
        Case("simulate out holds report.json dir", [*sim, "--out", "o"], setup=lambda d: (d / "o" / "report.json").mkdir(parents=True)),
        Case("simulate out under /proc", [*sim, "--out", "/proc/axsim-x/o"]),
        Case("simulate trace-ranks 10^20", [*sim, "--out", "o", "--trace-ranks", "0-99999999999999999999"]),
        Case("simulate trace-ranks negative", [*sim, "--out", "o", "--trace-ranks", "-3"]),
        Case("simulate trace-ranks garbage", [*sim, "--out", "o", "--trace-ranks", "a-b"]),
        Case("simulate stdout full", [*sim], stdout="full"),
        Case("simulate stdout closed", [*sim], stdout="closed"),
        Case("simulate custom 8 of 4 GPUs", ["simulate", "--machine", "custom", "--set", "cluster.topology_file=t.yaml", "--gpus", "8", "--model", "gpt-tiny"], setup=_custom("t.yaml")),
        Case("simulate custom markup name", ["simulate", "--machine", "custom", "--set", "cluster.topology_file=t.yaml", "--model", "gpt-tiny"], "ok", setup=_custom("t.yaml", name="[/]", rename_gpu0="g[/]\x1b[2J"), check=lambda r: "silent nonsense" if "\x1b" in r.out else None),
    ]  # fmt: skip
    # search, compare-strategies
    srch = [
        "search",
        "--machine",
        "dgx-h100",
        "--gpus",
        "16",
        "--model",
        "gpt-tiny",
        "--batch-tokens",
        "4096",
    ]
    for name, extra in [("top 0", ["--top", "0"]), ("top -1", ["--top", "-1"]), ("screen 0", ["--screen", "0"]),
                        ("screen 10^9", ["--screen", "1000000000"]), ("bandwidths bad", ["--bandwidths", "fast"]),
                        ("gpus 3", ["--gpus", "3"]), ("calibration garbage", ["--calibration", "c.yaml"])]:  # fmt: skip
        setup = _write("c.yaml", "gpus: [") if "calibration" in name else None
        either = "screen" in name  # 0: no static replay, 10^9: every grid; both meaningful
        expect, check = ("either", nonempty_stdout) if either else ("error", None)
        c.append(Case(f"search {name}", [*srch, *extra], expect, setup=setup, check=check))
    c.append(Case("search ok", [*srch, "--json"], "ok", check=nonempty_stdout))
    cs = [
        "compare-strategies",
        "--machine",
        "dgx-h100",
        "--gpus",
        "16",
        "--model",
        "gpt-tiny",
        "--batch-tokens",
        "4096",
    ]
    for name, extra in [("strategies empty", ["--strategies", ""]), ("strategies dup", ["--strategies", "fsdp,fsdp"]),
                        ("strategies unknown", ["--strategies", "fsdp,magic"]), ("max-candidates 0", ["--max-candidates", "0"]),
                        ("batch 0", ["--batch-tokens", "0"]), ("gpus 0", ["--gpus", "0"])]:  # fmt: skip
        c.append(Case(f"compare-strategies {name}", [*cs, *extra]))
    c.append(
        Case(
            "compare-strategies ok",
            [*cs, "--strategies", "fsdp,megatron", "--json"],
            "ok",
            check=nonempty_stdout,
        )
    )
    # collective
    coll = ["collective", "dgx-h100", "--nodes", "1", "--group", "8"]
    for name, extra in [
        ("bytes 0", ["--bytes", "0"]), ("bytes 0.4:1K", ["--bytes", "0.4:1K"]),
        ("bytes 400 digits", ["--bytes", "1:" + "9" * 400]), ("bytes text", ["--bytes", "lots"]),
        ("bytes reversed", ["--bytes", "1G:1K"]), ("factor 1", ["--factor", "1"]),
        ("factor nan", ["--factor", "nan"]), ("factor 1.0001", ["--bytes", "1:1G", "--factor", "1.0001"]),
        ("group 0", ["--group", "0"]), ("group 10^6", ["--group", "1000000"]),
        ("placement 0", ["--placement", "0"]), ("placement+per-node", ["--placement", "2", "--per-node", "4"]),
        ("nic 1e300", ["--nic-bandwidth", "1e300"]), ("nic 0", ["--nic-bandwidth", "0"]),
        ("nics 0", ["--nics-per-node", "0"]), ("nics 1000", ["--nics-per-node", "1000"]),
        ("op bad", ["--op", "all-shuffle"]), ("calibration missing", ["--calibration", "x.yaml"]),
    ]:  # fmt: skip
        c.append(Case(f"collective {name}", [*coll, *extra]))
    c += [
        Case("collective ok", [*coll, "--bytes", "1K:1G", "--json"], "ok", check=busbw_below(900)),
        Case("collective table beyond its data", [*coll, "--bytes", "64M:16G", "--json", "--calibration", "cal.yaml"], "ok",
             setup=_both(_copy(vidur, "v/h100_dgx__all_reduce.csv"), lambda d: _run_quiet(d, ["calibrate", "v", "-o", "cal.yaml"])),
             check=lambda r: busbw_below(450)(r) or grows(r)),
        Case("collective custom 1e300 link", ["collective", "custom", "--file", "t.yaml", "--group", "2"], setup=_custom("t.yaml", link0_bw=1e300)),
        Case("collective custom fifo", ["collective", "custom", "--file", "t.yaml", "--group", "2"], setup=_fifo("t.yaml")),
        Case("collective stdout full", [*coll, "--bytes", "1M"], stdout="full"),
    ]  # fmt: skip
    # topology, presets, schema
    topo = ["topology", "dgx-h100", "--nodes", "2"]
    for name, extra in [("nodes 0", ["--nodes", "0"]), ("nodes 10^9", ["--nodes", "1000000000"]),
                        ("scale 1e300", ["--intra-node-scale", "1e300"]), ("scale nan", ["--intra-node-scale", "nan"]),
                        ("scale 0", ["--intra-node-scale", "0"]), ("gpu bad", ["--gpu", "tpu"]),
                        ("fabric -1", ["--fabric-bandwidth", "-1"]), ("routing bad", ["--routing", "random"])]:  # fmt: skip
        c.append(Case(f"topology {name}", [*topo, *extra]))
    c += [
        Case("topology ok", [*topo, "--json"], "ok", check=nonempty_stdout),
        Case("topology custom markup", ["topology", "custom", "--file", "t.yaml"], "ok",
             setup=_custom("t.yaml", name="[/]", description="[bold]x\x1b[31m"), check=lambda r: "silent nonsense" if "\x1b" in r.out else None),
        Case("topology custom missing", ["topology", "custom", "--file", "nope.yaml"]),
        Case("topology custom dup devices", ["topology", "custom", "--file", "t.yaml"], setup=_write("t.yaml", "devices: [{name: a, kind: gpu}, {name: a, kind: gpu}]\nlinks: [{src: a, dst: a, kind: nvlink, bandwidth_GBps: 1}]\n")),
        Case("topology custom /dev/zero", ["topology", "custom", "--file", "/dev/zero"]),
        Case("topology stdout closed", [*topo], stdout="closed"),
        Case("presets ok", ["presets", "--json"], "ok", check=nonempty_stdout),
        Case("presets bogus kind", ["presets", "bogus-kind"]),
        Case("presets stdout full", ["presets"], stdout="full"),
        Case("presets stdout closed", ["presets"], stdout="closed"),
        Case("schema ok", ["schema"], "ok", check=nonempty_stdout),
        Case("schema report", ["schema", "--report"], "ok", check=nonempty_stdout),
        Case("schema two kinds", ["schema", "--report", "--sweep"], "either", check=nonempty_stdout),
        Case("schema stdout full", ["schema"], stdout="full"),
    ]  # fmt: skip
    # sweep
    sw = ["sweep", "s.yaml", "--out", "o", "--no-progress"]
    big_axis = "[" + ", ".join(str(i + 1) for i in range(100)) + "]"
    for name, setup, extra in [
        ("spec missing", None, []), ("alias bomb", _write("s.yaml", _inline_bomb()), []), ("aliased axes", _write("s.yaml", _aliased_axes()), []),
        ("10^6 points", _write("s.yaml", f"axes: {{cluster.nic_bandwidth_GBps: {big_axis}, cluster.fabric_link_bandwidth_GBps: {big_axis}, cluster.intra_node_bandwidth_scale: {big_axis}}}\n"), []),
        ("empty axes", _write("s.yaml", "axes: {}\n"), []), ("unknown key", _write("s.yaml", "axes: {cluster.warp: [1]}\n"), []),
        ("jobs 0", _write("s.yaml", SPEC), ["-j", "0"]), ("jobs 100000", _write("s.yaml", SPEC), ["-j", "100000"]),
        ("dask-local 0", _write("s.yaml", SPEC), ["--dask-local", "0"]),
        ("dask tls", _write("s.yaml", SPEC), ["--dask-scheduler", "tls://127.0.0.1:1"]),
        ("dask ucx", _write("s.yaml", SPEC), ["--dask-scheduler", "ucx://127.0.0.1:1"]),
        ("dask http", _write("s.yaml", SPEC), ["--dask-scheduler", "http://127.0.0.1:1"]),
        ("dask timeout 1e308", _write("s.yaml", SPEC), ["--dask-scheduler", "tcp://127.0.0.1:1", "--dask-timeout", "1e308"]),
        ("dask timeout nan", _write("s.yaml", SPEC), ["--dask-timeout", "nan"]),
        ("out is a file", _both(_write("s.yaml", SPEC), _write("o", "x")), []),
        ("spec fifo", _fifo("s.yaml"), []),
    ]:  # fmt: skip
        c.append(Case(f"sweep {name}", sw + extra, setup=setup))
    c.append(Case("sweep dask silent server", [*sw, "--dask-timeout", "2", "--dask-scheduler", "PORT"],
                  setup=_write("s.yaml", SPEC), background=_silent_server, limit_s=60))  # fmt: skip
    one_thirty = "axes: {cluster.nic_bandwidth_GBps: [1:30]}\n"
    c.append(Case("sweep value 1:30", sw, "either", setup=_write("s.yaml", SPEC.split("axes")[0] + one_thirty),
                  check=_not_read_as_90))  # fmt: skip
    c.append(
        Case(
            "sweep ok",
            sw,
            "ok",
            setup=_write("s.yaml", SPEC),
            check=lambda r: None if (r.cwd / "o" / "rows.csv").exists() else "lost output",
        )
    )
    c.append(
        Case(
            "sweep two at once",
            sw,
            "error",
            setup=_write("s.yaml", SLOW_SPEC),
            background=_running_sweep,
            limit_s=120,
        )
    )
    c.append(
        Case(
            "sweep retry-failed on running",
            [*sw, "--retry-failed"],
            "error",
            setup=_write("s.yaml", SLOW_SPEC),
            background=_running_sweep,
            limit_s=120,
        )
    )
    # bench
    c += [
        Case(
            "bench out under /proc", ["bench", "--only", "nothing-matches", "-o", "/proc/x/b.json"]
        ),
        Case(
            "bench only nothing", ["bench", "--only", "nothing-matches", "-o", "b.json"], "either"
        ),
        Case("bench out is a dir", ["bench", "--only", "nothing-matches", "-o", "."]),
    ]
    # calibrate
    cal = ["calibrate", "t", "-o", "cal.yaml"]
    for name, setup, extra in [
        ("no input", None, []), ("fifo", _fifo("t"), []), ("ns as us", _synth_run("t", _ns), []),
        ("overlapping kernels", _synth_run("t", _overlap), []), ("10^12 messages", _synth_run("t", _huge_msgs), []),
        ("wrong gpu", _synth_run("t"), ["--gpu", "mi250x-gcd"]), ("unknown gpu", _synth_run("t"), ["--gpu", "tpu"]),
        ("tolerance nan", _synth_run("t"), ["--tolerance", "nan"]), ("tolerance 2", _synth_run("t"), ["--tolerance", "2"]),
        ("min-bytes bad", _synth_run("t"), ["--min-bytes", "lots"]), ("fit-ranks bad", _synth_run("t"), ["--fit-ranks", "a,b"]),
        ("truncated gzip", _write("t/rank0.json.gz", gzip.compress(b'{"traceEvents": [' * 10)[:40]), []),
        ("gzip of whitespace", _write("t/rank0.json.gz", gzip.compress(b'{"traceEvents": [' + b" " * (64 << 20) + b"]}")), []),
        ("out is input", _copy(vidur, "t/h100_m.csv"), ["-o", "t/h100_m.csv"]),
    ]:  # fmt: skip
        chk = unchanged("t/h100_m.csv", vidur.read_bytes()) if name == "out is input" else None
        args = ["calibrate", "t", *extra] if extra[:1] == ["-o"] else [*cal, *extra]
        c.append(Case(f"calibrate {name}", args, setup=setup, check=chk))
    c.append(Case("calibrate /dev/zero", ["calibrate", "/dev/zero", "-o", "cal.yaml"]))
    c.append(Case("calibrate hard link to input", ["calibrate", "t", "-o", "link.csv"],
                  setup=_both(_copy(vidur, "t/h100_m.csv"), lambda d: os.link(d / "t" / "h100_m.csv", d / "link.csv")),
                  check=unchanged("t/h100_m.csv", vidur.read_bytes())))  # fmt: skip
    c.append(
        Case(
            "calibrate ok",
            [*cal],
            "ok",
            setup=_synth_run("t"),
            check=lambda r: None if (r.cwd / "cal.yaml").exists() else "lost output",
        )
    )
    # compare
    cmp_ = ["compare", "--traces", "t", "--machine", "dgx-h100"]
    for name, setup, extra in [
        ("traces missing", None, []), ("config missing", _synth_run("t"), ["--config", "nope.yaml"]),
        ("tolerance nan", _synth_run("t"), ["--tolerance", "nan"]), ("traces fifo", _fifo("t"), []),
        ("machine bad", _synth_run("t"), ["--machine", "moon"]),
    ]:  # fmt: skip
        c.append(Case(f"compare {name}", [*cmp_, *extra], setup=setup))
    # validate, figures, trace-torch
    c += [
        Case("validate only bogus", ["validate", "--only", "nothing-like-this"]),
        Case("validate jobs 0", ["validate", "-j", "0", "--list"], "either", check=nonempty_stdout),
        Case("validate jobs 100000", ["validate", "-j", "100000", "--reduced", "--only", "perlmutter-512-gpt-5b"], limit_s=60, dangerous=True),
        Case("validate list", ["validate", "--list"], "ok", check=nonempty_stdout),
        Case("figures only bogus", ["figures", "--only", "nothing-like-this"]),
        Case("figures jobs 100000", ["figures", "--reduced", "--only", "nccl-busbw", "-j", "100000"], limit_s=60, dangerous=True),
        Case("figures out is a file", ["figures", "--reduced", "--only", "nccl-busbw", "--out", "f"], setup=_write("f", "x")),
        Case("figures out foreign dir", ["figures", "--reduced", "--only", "nccl-busbw", "--out", "f"], setup=_write("f/mine.txt", "x")),
        Case("figures ok", ["figures", "--reduced", "--only", "nccl-busbw", "--out", "f", "-j", "1", "--no-progress"], "ok",
             check=lambda r: None if (r.cwd / "f" / "summary.json").exists() else "lost output"),
        Case("trace-torch grid bad", ["trace-torch", "--grid", "1,2", "--out", "r"]),
        Case("trace-torch world mismatch", ["trace-torch", "--grid", "1,1,1,2", "--world-size", "3", "--out", "r"]),
        Case("trace-torch out /proc", ["trace-torch", "--grid", "1,1,1,1", "--out", "/proc/x/r"]),
        Case("trace-torch model bad", ["trace-torch", "--grid", "1,1,1,1", "--model", "huge", "--out", "r"]),
        Case("trace-torch out foreign", ["trace-torch", "--grid", "1,1,1,1", "--out", "r"], setup=_write("r/mine.txt", "x")),
    ]  # fmt: skip
    c.append(
        Case(
            "simulate out of an earlier run",
            [*sim, "--out", "o", "--no-pictures"],
            setup=lambda d: _run_quiet(
                d, [*sim, "--set", "cluster.nic_bandwidth_GBps=5", "--out", "o", "--no-pictures"]
            ),
        )
    )
    for case in c:  # accepting these mixes runs, drops rows or overwrites an input
        if any(k in case.name for k in LOST_WHEN_ACCEPTED):
            case.accepted_is = "lost output"
    return c


LOST_WHEN_ACCEPTED = ("out holds", "out of an earlier run", "two at once", "retry-failed on",
                      "out is input", "hard link to input", "out foreign")  # fmt: skip


def _run_quiet(cwd: Path, args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "simulator", *args], cwd=cwd, env=_env(ROOT),
                   capture_output=True, timeout=300)  # fmt: skip


def _running_sweep(cwd: Path) -> Callable[[], None]:
    """A sweep already writing the folder `o` (its first row due in seconds)."""
    proc = subprocess.Popen([sys.executable, "-m", "simulator", "sweep", "s.yaml", "--out", "o",
                             "--no-progress"], cwd=cwd, env=_env(ROOT),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not (cwd / "o").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(2.0)

    def stop() -> None:
        proc.kill()
        proc.wait()

    return stop


# ------------------------------------------------------------------ running
ROOT = HERE
MEMORY_LIMIT = 6 << 30


def _env(root: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(root)
    env.pop("COLUMNS", None)
    return env


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
                                env=_env(ROOT), stdout=out_target, stderr=subprocess.PIPE,
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
    global ROOT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE, help="The axsim checkout to run.")
    ap.add_argument("--only", default=None, help="Run cases whose name contains this.")
    ap.add_argument("--json", type=Path, default=None, help="Write every outcome here.")
    ap.add_argument(
        "--skip-dangerous",
        action="store_true",
        help="Skip cases that fork thousands of processes on a tree without the -j cap "
        "(counted as runaways: the issue measured them).",
    )
    args = ap.parse_args()
    ROOT = args.root.resolve()
    cases = [c for c in _cases() if args.only is None or args.only in c.name]
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
    summary = {"root": str(ROOT), "cases": len(cases), "counts": {k: counts[k] for k in CLASSES}}
    print(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps({**summary, "outcomes": rows}, indent=1))


if __name__ == "__main__":
    main()
