"""Which collective library (and version) a machine runs, and what that version enables.

NCCL and RCCL choose among algorithms their build supports and enables for the
communicator's shape, so the candidates the tuner weighs depend on the library version.
From the sources (NVIDIA/nccl and ROCm/rccl src/graph/tuning.cc, `ncclTopoTuneModel`):

- all-gather / reduce-scatter: Ring always; PAT from NCCL 2.23 (v2.23.4-1 tuning.cc,
  `ncclPatEnable`: only where every rank is on its own node, nNodes == nRanks, and the
  network is not offloaded to the device), Simple protocol only, bus bandwidth x 0.85,
  latency 8 us + log2(nNodes) x interLat / 3.5 + nRanks x 2.8 us. RCCL up to 2.21.5
  (ROCm 6.3) has no PAT. NVLS and CollNet need NVSwitch multicast or SHARP switches that
  none of the modelled fabrics has; neither library runs a hierarchical all-gather or
  reduce-scatter of its own (hierarchical variants are built by frameworks and PCCL from
  collectives on sub-communicators; `hierarchical` is there to run them explicitly).
- broadcast / reduce: Ring only (`if (coll == ncclFuncBroadcast && a != NCCL_ALGO_RING)
  continue;`), a pipelined chain.
- all-reduce: Ring and Tree (and NVLS / CollNet where present).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NAME = re.compile(r"^\s*(nccl|rccl|gloo)\b\s*(\d+(?:\.\d+)*)?", re.IGNORECASE)

PAT_SINCE = (2, 23)
"""First NCCL release with the PAT algorithm (NVIDIA/nccl v2.23.4-1 src/graph/tuning.cc)."""


@dataclass(frozen=True)
class Library:
    """A collective library build: its family and version ("NCCL 2.21.5" -> nccl, (2, 21, 5))."""

    family: str = "nccl"
    version: tuple[int, ...] = ()
    name: str = ""

    @classmethod
    def parse(cls, text: str) -> Library:
        """The library a free-text name stands for ("RCCL 2.18.6 (ROCm 6.1)"); a name
        without a known family is NCCL of unknown version (no version-gated algorithm)."""
        m = _NAME.match(text or "")
        if m is None:
            return cls("nccl", (), text or "")
        version = tuple(int(x) for x in m.group(2).split(".")) if m.group(2) else ()
        return cls(m.group(1).lower(), version, text)

    def at_least(self, version: tuple[int, ...]) -> bool:
        """Whether this build is `version` or newer (unknown versions are not)."""
        return bool(self.version) and self.version[: len(version)] >= version

    @property
    def has_pat(self) -> bool:
        """NCCL's PAT all-gather / reduce-scatter (NCCL >= 2.23; no RCCL release has it)."""
        return self.family == "nccl" and self.at_least(PAT_SINCE)


def pat_enabled(library: Library, nodes: int, ranks: int) -> bool:
    """NCCL's default PAT enable condition: the build has PAT and every rank of the
    communicator is on its own node (nNodes == nRanks) and the group spans nodes."""
    return library.has_pat and nodes == ranks and ranks > 1


def pat_latency_s(nodes: int, ranks: int, inter_step_s: float) -> float:
    """PAT's latency in NCCL's tuning model: 8 us base + log2(nodes) x interLat / 3.5 +
    2.8 us per rank (v2.23.4-1 tuning.cc)."""
    log_nodes = max(nodes, 1).bit_length() - 1
    return 8e-6 + log_nodes * inter_step_s / 3.5 + ranks * 2.8e-6


PAT_BANDWIDTH = 0.85
"""PAT's bus bandwidth relative to the ring's (`if (a == NCCL_ALGO_PAT) busBw *= .85;`)."""
