"""Bounds of the bandwidth and latency numbers a user may give (what-if flags, config
fields, custom topology links), shared by every reader so that a typo fails at once.

Why bounds at all: a bandwidth of 5e-324 GB/s made every collective infinitely long and a
custom link of 1e300 B/s (or an intra-node scale of 1e300) gave an infinite max-flow
capacity (networkx raised NetworkXUnbounded) and a pricing loop that never ended. The
bounds lie far outside any real machine, so no what-if a person means is refused.
"""

from __future__ import annotations

# 1 MB/s is slower than any network a training run has used (10 Mbit Ethernet moves
# 1.25 MB/s) and 10^6 GB/s is over 500x NVLink 5's 1.8 TB/s per GPU.
MIN_BANDWIDTH_GBPS = 1e-3
MAX_BANDWIDTH_GBPS = 1e6
# A scale of 10^-4..10^4 of the links inside a node spans the same range.
BANDWIDTH_SCALE_RANGE = (1e-4, 1e4)
# One hop of one second is 10^5 times a slow Ethernet switch's ~10 us: beyond it a
# latency is a unit mistake (seconds typed as microseconds), not a what-if.
MAX_LATENCY_US = 1e6
