"""Body templates: a generator emits a repeated body once and copies it after.

Why: emitting a body (a pipeline pass, an AxoNN microbatch) walks the whole block
emitter (shapes, kernels, collectives) per op; a copy only moves dependencies. A copy is
exact when (a) the body's ops depend on nothing before it but the compute stream's last
op at its start (`ProgramBuilder._last_compute`, which a body's first op names), checked
when the template is recorded, and (b) the generator carries no state from body to body
that changes what a body emits, which each caller guarantees by the key it files the
template under (workloads/hybrid/templates.py, workloads/axonn/program.py). The callers'
tests build programs with and without templates and compare them op by op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from operator import attrgetter

from workloads.builder import ProgramBuilder
from workloads.ops import Op, WaitOp

_OUTSIDE = -1  # a dependency on the compute stream's last op before the body


_OpTemplate = tuple[Op, Callable[..., Op], tuple[object, ...], int, tuple[int, ...], int, int]
"""One op of a template (a plain tuple: built per op, so as cheap as can be): the op,
its class, its constructor arguments, where its deps are among them and the deps
relative to the body start (or _OUTSIDE), where a wait's target is (-1: not a wait) and
the target likewise."""


@dataclass(frozen=True)
class BodyTemplate:
    """The ops of one emitted body, relative to its start, and the builder state after
    it (the compute stream's last op, the phase)."""

    ops: tuple[_OpTemplate, ...]
    last_compute: int | None  # relative to the body start; _OUTSIDE: unchanged
    phase: str


# per op class: a getter of its constructor arguments, where deps and a wait's target are
_LAYOUT: dict[type, tuple[attrgetter[tuple[object, ...]], int, int]] = {}


def record_body(
    b: ProgramBuilder,
    start: int,
    before: int | None,
    stop: int | None = None,
    after: tuple[int | None, str] | None = None,
) -> BodyTemplate | None:
    """The template of the body b.ops[start:stop] (default: to the end), emitted with
    `before` as the compute stream's last op and leaving `after` (the compute stream's
    last op and the phase; default: the builder's now), or None when an op depends on
    anything before the body other than `before`."""
    last_compute, phase = (b._last_compute, b.phase) if after is None else after

    def rel(d: int) -> int | None:
        if d >= start:
            return d - start
        return _OUTSIDE if d == before else None

    ops: list[_OpTemplate] = []
    for op in b.ops[start:stop]:
        t = type(op)
        got = _LAYOUT.get(t)
        if got is None:
            names = tuple(f.name for f in fields(t))
            got = _LAYOUT[t] = (
                attrgetter(*names),
                names.index("deps"),
                names.index("target") if issubclass(t, WaitOp) else -1,
            )
        values, deps_at, target_at = got
        deps = tuple(rel(d) for d in op.deps)
        target = 0
        if isinstance(op, WaitOp):
            r = rel(op.target)
            if r is None:
                return None
            target = r
        if None in deps:
            return None
        ops.append((op, t, values(op), deps_at, deps, target_at, target))  # type: ignore[arg-type]
    lc = last_compute
    last = _OUTSIDE if lc == before else (None if lc is None else lc - start)
    return BodyTemplate(tuple(ops), last, phase)


def copy_body(b: ProgramBuilder, t: BodyTemplate) -> None:
    """Append a copy of template `t` at the builder's end, as emitting it would."""
    start = len(b.ops)
    lc = b._last_compute
    out = b.ops
    for op, make, args, deps_at, deps, target_at, target in t.ops:
        if not deps and target_at < 0:
            out.append(op)  # ops are immutable: the same object serves every copy
            continue
        new = list(args)
        if deps:
            new[deps_at] = tuple(lc if d == _OUTSIDE else start + d for d in deps)
        if target_at >= 0:
            new[target_at] = lc if target == _OUTSIDE else start + target
        out.append(make(*new))
    if t.last_compute != _OUTSIDE:
        b._last_compute = None if t.last_compute is None else start + t.last_compute
    b.phase = t.phase
