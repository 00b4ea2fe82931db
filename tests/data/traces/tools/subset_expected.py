"""Copy the rows of shared/traces/derived/*.csv that the fixtures here can reproduce.

Usage: python subset_expected.py SHARED_TRACES_DIR   (writes ../expected/*.csv)

Each output row gains a first column `fixture` (path below tests/data/traces); GEMM rows
lose their `kernels` column. Collective
rows of a trimmed fixture are kept only if a kernel with the row's `ts_us` survived the
trim; GEMM rows (which have no timestamp) are copied only for untrimmed fixtures and for
the single-step tracelens fixtures, whose trim removed no GPU or cpu_op events.
"""

from __future__ import annotations

import csv
import gzip
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TRIMMED = {
    "hta/negative_queue_length_values_check__rank0__step550.json.gz": "hta/negative_queue_length_values_check__rank0.json.gz",
    "hta/trace_diff__test__test__step1009.json.gz": "hta/trace_diff__test__test.json.gz",
    "hta/trace_diff__control__control__step1009.json.gz": "hta/trace_diff__control__control.json.gz",
    "hta/df_index_resolver__df_index_resolver__step2.json.gz": "hta/df_index_resolver__df_index_resolver.json.gz",
}
STEP_ONLY = {
    "tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005__step6.json.gz": "tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
    "tracelens/mi300x__Qwen_Qwen1.5-0.5B-Chat__1016005__step6.json.gz": "tracelens/mi300x__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
}


def _kernel_ts(path: Path) -> set[float]:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return {round(float(e["ts"]), 3) for e in events if e.get("cat") == "kernel"}


def main(shared: Path) -> None:
    fixtures = {
        str(p.relative_to(HERE)): str(p.relative_to(HERE))
        for d in ("hta", "param")
        for p in (HERE / d).glob("*.json.gz")
    }
    for trimmed in (*TRIMMED, *STEP_ONLY):
        fixtures.pop(trimmed, None)
    with open(shared / "derived/collective_kernels.csv", encoding="utf-8") as fh:
        colls = list(csv.DictReader(fh))
    with open(shared / "derived/gemm_ops.csv", encoding="utf-8") as fh:
        gemms = list(csv.DictReader(fh))
    out_c, out_g = [], []
    for fixture, source in {**fixtures, **TRIMMED, **STEP_ONLY}.items():
        keep = _kernel_ts(HERE / fixture) if fixture in TRIMMED else None
        out_c += [
            {"fixture": fixture, **r}
            for r in colls
            if r["file"] == source and (keep is None or round(float(r["ts_us"]), 3) in keep)
        ]
        if fixture not in TRIMMED:
            # The `kernels` column (truncated kernel names) is left out to keep the file small.
            out_g += [
                {"fixture": fixture, **{k: v for k, v in r.items() if k != "kernels"}}
                for r in gemms
                if r["file"] == source
            ]
    for name, rows in (("collective_kernels.csv", out_c), ("gemm_ops.csv", out_g)):
        with open(HERE / "expected" / name, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        print(name, len(rows))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
