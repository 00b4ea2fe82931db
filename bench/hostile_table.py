"""The table of bench/hostile_campaign.py: every case, command by command.

Fixtures, checks and the case type are bench/hostile_cases.py.
"""

from __future__ import annotations

import gzip
import os

from hostile_cases import (
    HERE,
    SLOW_SPEC,
    SMALL,
    SPEC,
    Case,
    _alias_bomb,
    _aliased_axes,
    _both,
    _copy,
    _custom,
    _fifo,
    _huge_msgs,
    _inline_bomb,
    _not_read_as_90,
    _ns,
    _overlap,
    _run_quiet,
    _running_sweep,
    _silent_server,
    _synth_run,
    _write,
    busbw_below,
    grows,
    nonempty_stdout,
    out_folder,
    physical_report,
    unchanged,
)


def cases() -> list[Case]:
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
