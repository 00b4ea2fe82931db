"""Whether a configuration fits in GPU memory, said with the model's uncertainty.

Why: the memory model's estimate is a band, not a number: the caching allocator's
fragmentation and the CUDA/NCCL runtime's share are known to within a few GB only. A
run that a published source reports as trained must not be called "does not fit" because
the model's upper end exceeds the GPU, so the verdict is three-valued:

- fits: the upper estimate (`total`) is within the GPU's memory;
- uncertain: only the lower one (`lower`: no fragmentation, the least runtime reserve) is;
- does-not-fit: even the lower estimate exceeds it.

`fits_in_memory` (the report contract) is false only for the last; `--strict-memory`
exits 3 only for it, and an uncertain run prints its margin and its biggest terms.
"""

from __future__ import annotations

from dataclasses import dataclass

from workloads.memory import lower_bound

NOT_CATEGORIES = ("total",)


@dataclass(frozen=True)
class MemoryVerdict:
    """The verdict, the margin (capacity - upper estimate; negative when over) and the
    largest categories, biggest first."""

    verdict: str
    margin_bytes: float
    lower_bytes: float
    top_terms: dict[str, float]


def memory_verdict(memory: dict[str, float], capacity: float, top: int = 3) -> MemoryVerdict:
    """Judge a memory breakdown (workloads.memory.MemoryBreakdown.as_dict) against a GPU."""
    total = float(memory.get("total", 0.0))
    lower = lower_bound(memory)
    if total <= capacity:
        verdict = "fits"
    elif lower <= capacity:
        verdict = "uncertain"
    else:
        verdict = "does-not-fit"
    terms = {k: float(v) for k, v in memory.items() if k not in NOT_CATEGORIES}
    biggest = dict(sorted(terms.items(), key=lambda kv: -kv[1])[:top])
    return MemoryVerdict(verdict, capacity - total, lower, biggest)


def describe(v: MemoryVerdict, capacity: float, gpu: str) -> str:
    """One line for stderr: what the run needs against the GPU, and why."""
    terms = ", ".join(f"{k} {b / 1e9:.1f}" for k, b in v.top_terms.items())
    need = capacity - v.margin_bytes
    if v.verdict == "does-not-fit":
        return (
            f"needs at least {v.lower_bytes / 1e9:.1f} GB per GPU (up to {need / 1e9:.1f}), "
            f"more than the {capacity / 1e9:.0f} GB of a {gpu}; biggest terms (GB): {terms}"
        )
    return (
        f"may not fit: needs {v.lower_bytes / 1e9:.1f}-{need / 1e9:.1f} GB per GPU of the "
        f"{capacity / 1e9:.0f} GB of a {gpu} (margin {v.margin_bytes / 1e9:+.1f} GB at the "
        f"upper end); biggest terms (GB): {terms}"
    )
