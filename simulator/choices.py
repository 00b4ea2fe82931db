"""Automatic choices of a run, each with a one-line reason.

Why: a run that picks its grid, microbatch, collective algorithms or engine mode by
itself must say what it picked and why, or a user cannot tell a surprising result from a
surprising choice ("why did the default pick grid 1x1x1024x1?"). Plan builders record
their choices (`WorkloadPlan.choices`); `simulate()` adds the engine mode and the
collective tuner's picks; the report lists them all and `config.resolved.yaml` writes the
chosen values into the config (so it reruns the same simulation without choosing again)
with the reasons as comments.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from simulator.units import format_bytes, format_seconds


@dataclass(frozen=True)
class Choice:
    """One automatic choice: what was chosen (`what`), the value and a one-line reason."""

    what: str
    value: str
    reason: str

    def line(self) -> str:
        """`what value: reason`, as the report and config.resolved.yaml print it."""
        return f"{self.what} {self.value}: {self.reason}"

    def as_dict(self) -> dict[str, str]:
        return {"what": self.what, "value": self.value, "reason": self.reason}


def memory_reason(needed_bytes: float, capacity_bytes: float) -> str:
    """'31.2 of 40 GB per GPU' (GB = 10^9 bytes, as the report prints memory)."""
    return f"{needed_bytes / 1e9:.1f} of {capacity_bytes / 1e9:.0f} GB per GPU"


def algorithm_choices(
    decisions: Mapping[Hashable, tuple[str, Mapping[str, float]]],
    group_aliases: Mapping[str, str],
    group_sizes: Mapping[str, int],
) -> list[Choice]:
    """One choice per (group, collective kind) from the tuner's decisions.

    `decisions` maps the pricer's choice keys ((group, 'all'), kind, root, bytes, tuner)
    to (chosen algorithm, estimated seconds per candidate). A group whose sizes chose
    different algorithms says which sizes chose which; the reason quotes the estimates at
    its largest message, where the choice matters most. Groups of one GPU move nothing
    and are left out.
    """
    by_group: dict[tuple[str, str], list[tuple[float, str, Mapping[str, float]]]]
    by_group = defaultdict(list)
    for key, (best, estimates) in decisions.items():
        if not isinstance(key, tuple) or len(key) < 4 or not isinstance(key[0], tuple):
            continue
        group = str(key[0][0])
        if group_sizes.get(group, 2) < 2:
            continue
        kind = getattr(key[1], "value", str(key[1]))
        by_group[(group, kind)].append((float(key[3]), best, estimates))
    out = []
    for (group, kind), rows in sorted(by_group.items()):
        rows.sort(key=lambda r: r[0])
        size, best, estimates = rows[-1]
        alias = group_aliases.get(group, group)
        name = group if alias == group else f"{group} ({alias})"
        ranked = sorted(estimates.items(), key=lambda kv: kv[1])
        quoted = ", ".join(f"{a} {format_seconds(t)}" for a, t in ranked[:3])
        reason = (
            f"the tuner's fastest estimate over all the group's instances at "
            f"{format_bytes(size)} ({quoted})"
            if len(ranked) > 1
            else f"the only algorithm for {kind} on this group"
        )
        out.append(Choice(f"algorithm {name} {kind}", _by_size(rows), reason))
    return out


def _by_size(rows: list[tuple[float, str, Mapping[str, float]]]) -> str:
    """'ring' when every size chose it, else 'tree 4 KiB-1 MiB, ring 2 MiB-64 MiB'."""
    spans: dict[str, list[float]] = {}
    for size, best, _ in rows:
        spans.setdefault(best, []).append(size)
    if len(spans) == 1:
        return next(iter(spans))
    parts = []
    for algo, sizes in spans.items():
        lo, hi = format_bytes(min(sizes)), format_bytes(max(sizes))
        parts.append(f"{algo} {lo}" if lo == hi else f"{algo} {lo}-{hi}")
    return ", ".join(parts)


def resolved_mapping(
    config_json: Mapping[str, Any], parameters: Mapping[str, Any]
) -> dict[str, Any]:
    """The config with the run's chosen values filled in: AxoNN's grid and weight cache,
    the hybrid and Optimus degrees a strategy left open, and the microbatch size."""
    data = {k: dict(v) if isinstance(v, Mapping) else v for k, v in config_json.items()}
    par = dict(data.get("parallel") or {})
    strategy = par.get("strategy", "axonn")
    if strategy == "axonn" and isinstance(parameters.get("grid"), Mapping):
        par["grid"] = dict(parameters["grid"])
    # the weight cache the grid search chose with the grid (left open: the implementation's own)
    searched = strategy == "axonn" and par.get("weight_lifetime") is None
    if searched and parameters.get("weight_lifetime") == "cache":
        par["weight_lifetime"] = "cache"
        par["cached_layers"] = parameters.get("cached_layers")
    for field in ("tp", "pp", "shard", "q"):
        if field in par and par[field] is None and parameters.get(field) is not None:
            par[field] = parameters[field]
    data["parallel"] = par
    mbs = parameters.get("microbatch_sequences")
    training = dict(data.get("training") or {})
    if training.get("microbatch_sequences") is None and isinstance(mbs, int):
        training["microbatch_sequences"] = mbs
    data["training"] = training
    return data


def resolved_yaml(
    config_json: Mapping[str, Any], parameters: Mapping[str, Any], choices: Iterable[Choice]
) -> str:
    """config.resolved.yaml: the automatic choices as comments, then the config with the
    chosen values filled in (loading it reruns the same simulation)."""
    lines = [f"#   {c.line()}" for c in choices]
    head = ["# axsim chose (automatic choices, each with its reason):", *lines] if lines else []
    data = resolved_mapping(config_json, parameters)
    clean = {k: _drop_none(v) for k, v in data.items()}
    body = yaml.safe_dump(clean, sort_keys=False)
    return "\n".join([*head, body]) if head else body


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    return value
