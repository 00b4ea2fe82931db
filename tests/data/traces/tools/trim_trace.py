"""Make a small trace fixture from a large Kineto trace: keep one ProfilerStep.

Usage: python trim_trace.py SRC DST STEP [--drop CAT ...] [--drop-key KEY ...]

Kept: every top-level key except those named by --drop-key; all metadata events ("M");
CPU ranges (cpu_op, user_annotation), runtime/driver calls and flows whose timestamp falls
inside the CPU range of `ProfilerStep#STEP`; the GPU activities (kernel, memcpy, memset)
launched by a kept runtime/driver call (joined on `correlation`); gpu_user_annotation
events of that step; the `Trace` span. Events of the categories named by --drop (e.g.
cpu_instant_event, python_function) are dropped. Kept events are written unchanged, in
their original order, gzip-compressed (mtime 0) when DST ends in .gz.
"""

from __future__ import annotations

import argparse
import gzip
import json
from typing import Any

CPU_SIDE = {
    "cpu_op",
    "user_annotation",
    "cuda_runtime",
    "cuda_driver",
    "python_function",
    "cpu_instant_event",
}
GPU_SIDE = {"kernel", "gpu_memcpy", "gpu_memset"}


def _load(path: str) -> dict[str, Any]:
    with open(path, "rb") as fh:
        head = fh.read(2)
    opener = gzip.open if head == b"\x1f\x8b" else open
    with opener(path, "rt", encoding="utf-8") as fh:  # type: ignore[operator]
        return json.load(fh)


def trim(src: str, dst: str, step: int, drop: set[str], drop_keys: set[str]) -> dict[str, int]:
    trace = _load(src)
    events = trace["traceEvents"]
    name = f"ProfilerStep#{step}"
    win = next(
        e
        for e in events
        if e.get("name") == name and e.get("cat") in ("user_annotation", "cpu_op", "Operator")
    )
    lo, hi = win["ts"], win["ts"] + win["dur"]
    kept_corr = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver")
        and lo <= e["ts"] <= hi
        and "correlation" in e.get("args", {})
    }
    out = []
    for e in events:
        cat = e.get("cat")
        if cat in drop:
            continue
        if e.get("ph") == "M" or cat == "Trace":
            out.append(e)
        elif cat in CPU_SIDE or e.get("ph") in ("s", "f", "i"):
            if lo <= e.get("ts", lo - 1) <= hi:
                out.append(e)
        elif cat in GPU_SIDE:
            if e.get("args", {}).get("correlation") in kept_corr:
                out.append(e)
        elif cat == "gpu_user_annotation" and e.get("name") == name:
            out.append(e)
    result = {k: v for k, v in trace.items() if k not in drop_keys}
    result["traceEvents"] = out
    text = json.dumps(result, separators=(",", ":"))
    if dst.endswith(".gz"):
        with gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as fh:
            fh.write(text.encode())
    else:
        with open(dst, "w", encoding="utf-8") as fh:
            fh.write(text)
    return {"events_in": len(events), "events_out": len(out)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("step", type=int)
    ap.add_argument("--drop", nargs="*", default=[])
    ap.add_argument("--drop-key", nargs="*", default=[])
    a = ap.parse_args()
    print(trim(a.src, a.dst, a.step, set(a.drop), set(a.drop_key)))


if __name__ == "__main__":
    main()
