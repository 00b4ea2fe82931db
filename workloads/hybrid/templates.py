"""Pass templates: a pipeline stage emits each distinct pass once and copies it after.

Why: a stage's text holds hundreds of passes (warm-up, the steady units' p·v pairs,
cool-down) but only a few distinct ones: one per (direction, model chunk). Emitting a
pass walks the whole block emitter (shapes, kernels, collectives) per op; a copy only
moves dependencies. The copy is exact when the pass's ops depend on nothing before it
but the compute stream's last op at its start (`_last_compute`, which every first op
of a pass names) and the emitter carries no state from pass to pass that changes what a
pass emits. The first holds by construction and is checked when a template is
recorded; the second is why templates are only used without sharding (its gathers,
prefetches and resident units), without context-parallel attention, and on passes
other than the last microbatch's (whose backward reduces the gradients); Megatron's
bucket state (parameter waits, launched reductions) is part of the template's key.
Recording and copying are workloads/body_templates.py's.
tests/test_pipeline_compression.py builds programs with and without templates and
compares them op by op.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.body_templates import BodyTemplate, copy_body, record_body

if TYPE_CHECKING:
    from workloads.hybrid.program import StageEmitter
    from workloads.hybrid.schedule import Pass

USE_TEMPLATES = True  # off: every pass emitted (what the tests compare templates with)


class PassTemplates:
    """Records each distinct pass of one stage emitter and copies it on repeat."""

    def __init__(self, e: StageEmitter):
        self.e = e
        # sharded gathers/prefetches and context-parallel exchanges carry state across
        # passes that no key here captures: emit every pass there
        self.enabled = USE_TEMPLATES and e.sharder is None and e.cp_attention is None
        self.templates: dict[tuple[object, ...], BodyTemplate | None] = {}

    def _key(self, ps: Pass) -> tuple[object, ...] | None:
        e = self.e
        if not self.enabled or ps.mb == e.last_index:
            return None
        buckets = tuple(
            (len(bk._param_wait), len(bk._launched), len(bk._pending)) for bk in e.buckets.values()
        )
        # FP8: the first microbatch's forward casts the weights, later ones reuse them
        first_fp8 = e.setup.fp8 and ps.mb == 0
        return (ps.kind, ps.chunk, e.b._last_compute is None, buckets, first_fp8)

    def emit(self, ps: Pass) -> None:
        """Emit pass `ps` (a copy of its template when one is recorded)."""
        e = self.e
        key = self._key(ps)
        got = self.templates.get(key) if key is not None else None
        if got is not None:
            self._copy(got)
            e._enter(ps)
            return
        start = len(e.b.ops)
        before = e.b._last_compute
        if ps.kind == "F":
            e.forward_pass(ps)
        else:
            e.backward_pass(ps)
        if key is not None and key not in self.templates:
            self.templates[key] = record_body(e.b, start, before)

    def _copy(self, t: BodyTemplate) -> None:
        copy_body(self.e.b, t)
