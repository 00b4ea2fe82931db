"""Dragonfly routing by arithmetic on the layout of `topologies.dragonfly.build_dragonfly`.

From the endpoint switch s (group a) to the endpoint switch t (group b):

- same switch: no switch hop;
- minimal paths: inside a group the direct local link; between groups one global cable:
  local (if needed), global, local (if needed) -- at most 3 switch-to-switch hops;
- `minimal`: one minimal path, chosen by a hash of the unordered endpoint pair (so a->b
  and b->a use the same cable); `ecmp`: all of them, weighted by cable multiplicity;
- `valiant`: `valiant_paths` paths with equal weights, each through a hash-chosen
  intermediate group c != a, b (a -> c -> b, up to 5 switch hops), or, inside a group,
  through an intermediate switch of the group (2 local hops);
- `adaptive`: a fixed mix standing for Slingshot's queue-depth adaptive routing under
  load: `adaptive_minimal_weight` (default 0.5) spread like ecmp over the minimal paths,
  the rest spread evenly over the `valiant_paths` Valiant paths.

Without an intermediate group (fewer than 3 groups) or switch (fewer than 3 switches per
group), Valiant falls back to ecmp. Choices depend only on the unordered endpoint pair,
so a route and its reverse have the same hop count and bottleneck.

Speed: routes are assembled from a flat local-link table, per group pair cable lists and
a per switch pair cache of the minimal paths; one hash per route.
"""

from __future__ import annotations

import numpy as np

from topologies.fabric import FabricRoute, merge_paths
from topologies.types import Path

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_CACHE_LIMIT = 1 << 18


def _pair_key(lo: int, hi: int) -> int:
    """Hash of an unordered endpoint pair (lo < hi), splitmix64-style."""
    x = ((lo * _GOLDEN) ^ (hi * 0xC2B2AE3D27D4EB4F)) & _MASK
    x = ((x ^ (x >> 31)) * 0xBF58476D1CE4E5B9) & _MASK
    return x ^ (x >> 29)


def _draw(key: int, k: int) -> int:
    """The k-th pseudo-random 64-bit draw of a pair."""
    x = ((key + (k + 1) * _GOLDEN) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def local_table(s: int) -> np.ndarray:
    """table[i, j] = link offset of local i -> j inside a group (cable c: 2c and 2c + 1)."""
    table = np.full((s, s), -1, dtype=np.int64)
    iu, ju = np.triu_indices(s, 1)
    cables = np.arange(iu.shape[0], dtype=np.int64)
    table[iu, ju] = 2 * cables
    table[ju, iu] = 2 * cables + 1
    return table


class DragonflyPaths:
    """Switch-level routes of a dragonfly built by `build_dragonfly`."""

    def __init__(
        self,
        *,
        switches_per_group: int,
        groups: int,
        global_links_per_group_pair: int,
        routing: str,
        adaptive_minimal_weight: float,
        valiant_paths: int,
        endpoint_switch: np.ndarray,
        link_base: int,
    ) -> None:
        s = switches_per_group
        self.S, self.G, self.h = s, groups, global_links_per_group_pair
        self.hc = min(self.h, s)
        self.policy = routing
        self.w_min = adaptive_minimal_weight
        self.valiant = valiant_paths
        self.endpoint_switch = endpoint_switch.tolist()
        table = local_table(s)
        ids = link_base + np.arange(groups, dtype=np.int64)[:, None, None] * (s * (s - 1)) + table
        ids[:, table < 0] = -1
        self.loc: list[int] = ids.reshape(
            -1
        ).tolist()  # (a * S + i) * S + j -> link id, -1 if i == j
        self.global_base = link_base + groups * s * (s - 1)
        counts = [len(range(i, self.h, s)) for i in range(self.hc)]
        self.ecmp_weights = tuple(c / self.h for c in counts)
        self._cables: dict[int, tuple[tuple[int, int, int], ...]] = {}
        self._minimal: dict[int, tuple[Path, ...]] = {}

    def cables(self, a: int, b: int) -> tuple[tuple[int, int, int], ...]:
        """Global cables a -> b as (local switch in a, global switch in b, link id)."""
        key = a * self.G + b
        got = self._cables.get(key)
        if got is not None:
            return got
        s, h = self.S, self.h
        lo, hi = (a, b) if a < b else (b, a)
        pair = lo * self.G - lo * (lo + 1) // 2 + (hi - lo - 1)
        out: list[tuple[int, int, int]] = []
        for i in range(self.hc):
            link = self.global_base + 2 * (pair * self.hc + i)
            u_lo, u_hi = ((hi - 1) * h + i) % s, (lo * h + i) % s
            out.append((u_lo, hi * s + u_hi, link) if a == lo else (u_hi, lo * s + u_lo, link + 1))
        self._cables[key] = got = tuple(out)
        return got

    def minimal_paths(self, s: int, t: int) -> tuple[Path, ...]:
        """All minimal paths between switches of different groups, one per global cable."""
        key = s * self.G * self.S + t
        got = self._minimal.get(key)
        if got is not None:
            return got
        S, loc = self.S, self.loc
        row, tl = s * S, t % S
        out: list[Path] = []
        for u, v, link in self.cables(s // S, t // S):
            first, last = loc[row + u], loc[v * S + tl]
            if first >= 0 and last >= 0:
                out.append((first, link, last))
            else:
                out.append(tuple(x for x in (first, link, last) if x >= 0))
        if len(self._minimal) >= _CACHE_LIMIT:
            self._minimal.clear()
        self._minimal[key] = got = tuple(out)
        return got

    def _valiant(self, s: int, t: int, key: int, forward: bool) -> list[Path]:
        S, loc, h, hc, cables = self.S, self.loc, self.h, self.hc, self.cables
        a, b = s // S, t // S
        lo, hi = (a, b) if a < b else (b, a)
        row, tl = s * S, t % S
        out: list[Path] = []
        for k in range(self.valiant):
            r = _draw(key, k)
            c = r % (self.G - 2)
            c += c >= lo
            c += c >= hi
            i_lo, i_hi = (r >> 20) % h % hc, (r >> 40) % h % hc
            i1, i2 = (i_lo, i_hi) if forward else (i_hi, i_lo)
            u1, v1, g1 = cables(a, c)[i1]
            u2, v2, g2 = cables(c, b)[i2]
            first, mid, last = loc[row + u1], loc[v1 * S + u2], loc[v2 * S + tl]
            if first >= 0 and mid >= 0 and last >= 0:
                out.append((first, g1, mid, g2, last))
            else:
                out.append(tuple(x for x in (first, g1, mid, g2, last) if x >= 0))
        return out

    def _intra_group(self, s: int, t: int, key: int) -> FabricRoute:
        S, loc = self.S, self.loc
        direct = (loc[s * S + t % S],)
        if self.policy in ("minimal", "ecmp") or S < 3:
            return (direct,), (1.0,)
        base = s - s % S
        lo, hi = (s % S, t % S) if s < t else (t % S, s % S)
        via: list[Path] = []
        for k in range(self.valiant):
            m = _draw(key, k) % (S - 2)
            m += m >= lo
            m += m >= hi
            via.append((loc[s * S + m], loc[(base + m) * S + t % S]))
        return self._mix([direct], (1.0,), via)

    def _mix(
        self, minimal: list[Path], minimal_weights: tuple[float, ...], valiant: list[Path]
    ) -> FabricRoute:
        share = 1.0 / len(valiant)
        if self.policy == "valiant":
            paths, weights = valiant, [share] * len(valiant)
        else:
            w = self.w_min
            paths = minimal + valiant
            weights = [w * x for x in minimal_weights] + [(1.0 - w) * share] * len(valiant)
        if len(set(paths)) < len(paths) or 0.0 in weights:
            merged, merged_w = merge_paths(paths, weights)
            keep = [i for i, x in enumerate(merged_w) if x > 0]
            return tuple(merged[i] for i in keep), tuple(merged_w[i] for i in keep)
        return tuple(paths), tuple(weights)

    def paths(self, src_endpoint: int, dst_endpoint: int) -> FabricRoute:
        """Switch-to-switch paths between two endpoints under the configured policy."""
        s = self.endpoint_switch[src_endpoint]
        t = self.endpoint_switch[dst_endpoint]
        if s == t:
            return ((),), (1.0,)
        forward = src_endpoint < dst_endpoint
        key = (
            _pair_key(src_endpoint, dst_endpoint)
            if forward
            else _pair_key(dst_endpoint, src_endpoint)
        )
        if s // self.S == t // self.S:
            return self._intra_group(s, t, key)
        minimal = self.minimal_paths(s, t)
        policy = "ecmp" if self.G < 3 and self.policy != "minimal" else self.policy
        if policy == "minimal":
            return (minimal[key % self.h % self.hc],), (1.0,)
        if policy == "ecmp":
            return minimal, self.ecmp_weights
        return self._mix(list(minimal), self.ecmp_weights, self._valiant(s, t, key, forward))
