"""A ProgramBuilder that can also place work on named side streams.

Why: some runtimes run work beside the compute stream that the plain builder cannot
express. Pipeline point-to-point transfers use one stream per direction (Megatron posts
a stage's send and receive together, so one cannot queue behind the other), and ZeRO++'s
quantised gradient reduction runs its (de)quantisation kernels and all-to-alls as one
chain on a reduction stream, overlapping the backward.
"""

from __future__ import annotations

from workloads.builder import ProgramBuilder, comm_stream
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, RecvOp, SendOp


class StreamBuilder(ProgramBuilder):
    """ProgramBuilder plus side-stream compute/collectives and per-stream send/recv."""

    def side_compute(
        self,
        name: str,
        kind: ComputeKind,
        flops: float,
        nbytes: float,
        stream: str,
        deps: tuple[int, ...] = (),
    ) -> int:
        """A kernel on `stream` (after its previous op and `deps`); the compute stream
        does not wait for it."""
        return self._kernel(name, kind, flops, nbytes, stream, deps)

    def side_collective(
        self,
        name: str,
        kind: CollectiveKind,
        group: str,
        nbytes: float,
        stream: str,
        deps: tuple[int, ...] = (),
        sms: int | None = None,
    ) -> int:
        """A collective on `stream` instead of its group's communicator stream (`sms`:
        the SMs its kernels hold where the software fixes them, CollectiveOp.sms)."""
        idx = len(self.ops)
        self.ops.append(
            CollectiveOp(
                name,
                kind,
                group,
                float(nbytes),
                name,
                stream,
                tuple(sorted(set(deps))),
                0,
                None,
                self.phase,
                sms=sms,
            )
        )
        return idx

    def send_on(
        self, name: str, group: str, peer: int, nbytes: float, tag: str, stream: str
    ) -> int:
        """Send after the compute issued so far, on `stream` (one per direction)."""
        idx = len(self.ops)
        self.ops.append(
            SendOp(
                name, group, peer, float(nbytes), tag, comm_stream(stream), self._deps(), self.phase
            )
        )
        return idx

    def recv_on(
        self, name: str, group: str, peer: int, nbytes: float, tag: str, stream: str
    ) -> int:
        """Receive on `stream`, posted after the compute issued so far."""
        idx = len(self.ops)
        self.ops.append(
            RecvOp(
                name, group, peer, float(nbytes), tag, comm_stream(stream), self._deps(), self.phase
            )
        )
        return idx

    def last_compute(self) -> tuple[int, ...]:
        """The last op issued on the compute stream (as a dependency tuple)."""
        return () if self._last_compute is None else (self._last_compute,)
