"""Dragonfly routing by arithmetic on the layout of `topologies.dragonfly.build.build_dragonfly`.

From the endpoint switch s (group a) to the endpoint switch t (group b):

- same switch: no switch hop;
- minimal paths: inside a group the direct local link; between groups one global cable:
  local (if needed), global, local (if needed) -- at most 3 switch-to-switch hops;
- `minimal`: one minimal path, chosen by a hash of the unordered endpoint pair (so a->b
  and b->a use the same cable); `ecmp`: all of them, weighted by cable multiplicity;
- `valiant`: `valiant_paths` paths with equal weights, each through a hash-chosen
  intermediate group c != a, b (a -> c -> b, up to 5 switch hops), or, inside a group,
  through an intermediate switch of the group (2 local hops);
- `adaptive`: Slingshot's queue-depth adaptive routing (UGAL-like). The network model
  chooses each flow bundle's split between the minimal (ecmp) and the Valiant paths by
  the load it sees (simulator/network/adaptive.py), asking for both through `variant`;
  `paths` itself returns the unloaded prior, a fixed mix: `adaptive_minimal_weight`
  (default 0.5) spread like ecmp over the minimal paths, the rest evenly over the
  `valiant_paths` Valiant paths (what `axsim topology` shows).

Without an intermediate group (fewer than 3 groups) or switch (fewer than 3 switches per
group), Valiant falls back to ecmp. Choices depend only on the unordered endpoint pair,
so a route and its reverse have the same hop count and bottleneck.

Speed: routes are assembled from a flat local-link table, per group pair cable lists and
a per switch pair cache of the minimal paths; one hash per route. `paths_batch` does the
same arithmetic on numpy arrays (uint64 hashes that wrap exactly like the masked Python
ones) for many endpoint pairs at once; it must agree with `paths` pair by pair.
"""

from __future__ import annotations

import copy

import numpy as np

from topologies.batch_routing import PaddedPaths, merge_duplicates, u64
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


def _pair_key_array(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """`_pair_key` elementwise (uint64 in and out)."""
    x = (lo * u64(_GOLDEN)) ^ (hi * u64(0xC2B2AE3D27D4EB4F))
    x = (x ^ (x >> np.uint64(31))) * u64(0xBF58476D1CE4E5B9)
    return x ^ (x >> np.uint64(29))


def _draw_array(key: np.ndarray, k: int) -> np.ndarray:
    """`_draw` elementwise (uint64)."""
    x = (key + u64((k + 1) * _GOLDEN)) * u64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _mod(x: np.ndarray, *moduli: int) -> np.ndarray:
    """x % m1 % m2 ... of uint64 values, as int64 (the results are small)."""
    for m in moduli:
        x = x % np.uint64(m)
    return x.astype(np.int64)


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
        self._switch_of = np.asarray(endpoint_switch, dtype=np.int64)
        table = local_table(s)
        ids = link_base + np.arange(groups, dtype=np.int64)[:, None, None] * (s * (s - 1)) + table
        ids[:, table < 0] = -1
        self._loc = ids.reshape(-1)
        self.loc: list[int] = ids.reshape(
            -1
        ).tolist()  # (a * S + i) * S + j -> link id, -1 if i == j
        self.global_base = link_base + groups * s * (s - 1)
        counts = [len(range(i, self.h, s)) for i in range(self.hc)]
        self.ecmp_weights = tuple(c / self.h for c in counts)
        self._cables: dict[int, tuple[tuple[int, int, int], ...]] = {}
        self._minimal: dict[int, tuple[Path, ...]] = {}

    def variant(self, policy: str) -> DragonflyPaths:
        """The same fabric routed by another policy (caches shared: they do not depend
        on the policy)."""
        if policy == self.policy:
            return self
        out = copy.copy(self)
        out.policy = policy
        return out

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

    # ------------------------------------------------------------------ batch
    @property
    def batch_shape(self) -> tuple[int, int]:
        """(most paths per pair, most links per path) that `paths_batch` can return."""
        if self.policy == "minimal":
            return 1, 3
        if self.policy == "ecmp":
            return self.hc, 3
        if self.policy == "valiant":
            return max(self.valiant, self.hc), 5
        return self.hc + self.valiant, 5

    def paths_batch(self, src_endpoint: np.ndarray, dst_endpoint: np.ndarray) -> PaddedPaths:
        """`paths` for arrays of endpoint pairs, as padded matrices (same order, weights)."""
        s, t = self._switch_of[src_endpoint], self._switch_of[dst_endpoint]
        n, S = int(s.shape[0]), self.S
        lo = np.minimum(src_endpoint, dst_endpoint).astype(np.uint64)
        hi = np.maximum(src_endpoint, dst_endpoint).astype(np.uint64)
        key = _pair_key_array(lo, hi)
        a, b = s // S, t // S
        parts: list[tuple[np.ndarray, PaddedPaths]] = []
        intra = np.flatnonzero((a == b) & (s != t))
        if intra.shape[0]:
            parts.append((intra, self._intra_batch(s[intra], t[intra], key[intra])))
        inter = np.flatnonzero(a != b)
        if inter.shape[0]:
            forward = src_endpoint[inter] < dst_endpoint[inter]
            parts.append((inter, self._inter_batch(s[inter], t[inter], key[inter], forward)))
        if len(parts) == 1 and parts[0][0].shape[0] == n:
            return parts[0][1]
        p = max([1] + [x.links.shape[1] for _, x in parts])
        length = max([0] + [x.links.shape[2] for _, x in parts])
        out = PaddedPaths.empty(n, p, length)
        same = s == t  # the empty path
        out.valid[same, 0] = True
        out.weight[same, 0] = 1.0
        for rows, part in parts:
            out.put(rows, part)
        return out

    def _cable_batch(
        self, a: np.ndarray, b: np.ndarray, i: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`cables(a, b)[i]` elementwise: (local switch in a, global switch in b, link id)."""
        S, h, G = self.S, self.h, self.G
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        pair = lo * G - lo * (lo + 1) // 2 + (hi - lo - 1)
        link = self.global_base + 2 * (pair * self.hc + i)
        u_lo, u_hi = ((hi - 1) * h + i) % S, (lo * h + i) % S
        up = a == lo
        return (
            np.where(up, u_lo, u_hi),
            np.where(up, hi * S + u_hi, lo * S + u_lo),
            np.where(up, link, link + 1),
        )

    def _minimal_batch(self, s: np.ndarray, t: np.ndarray, i: np.ndarray) -> np.ndarray:
        """Minimal path over global cable i, (n, 3) with -1 for a local hop not needed."""
        S, loc = self.S, self._loc
        u, v, link = self._cable_batch(s // S, t // S, i)
        return np.stack([loc[s * S + u], link, loc[v * S + t % S]], axis=1)

    def _intra_batch(self, s: np.ndarray, t: np.ndarray, key: np.ndarray) -> PaddedPaths:
        """`_intra_group` elementwise (switches of one group, s != t)."""
        S, loc, n = self.S, self._loc, int(s.shape[0])
        tl = t % S
        direct = loc[s * S + tl][:, None, None]
        if self.policy in ("minimal", "ecmp") or S < 3:
            return PaddedPaths(direct, np.ones((n, 1)), np.ones((n, 1), dtype=bool))
        base, sl = s - s % S, s % S
        lo, hi = np.minimum(sl, tl), np.maximum(sl, tl)
        via = np.empty((n, self.valiant, 2), dtype=np.int64)
        for k in range(self.valiant):
            m = _mod(_draw_array(key, k), S - 2)
            m += m >= lo
            m += m >= hi
            via[:, k, 0] = loc[s * S + m]
            via[:, k, 1] = loc[(base + m) * S + tl]
        return self._mix_batch(direct, (1.0,), via)

    def _inter_batch(
        self, s: np.ndarray, t: np.ndarray, key: np.ndarray, forward: np.ndarray
    ) -> PaddedPaths:
        """The inter-group branch of `paths` elementwise (switches of different groups)."""
        n = int(s.shape[0])
        policy = "ecmp" if self.G < 3 and self.policy != "minimal" else self.policy
        if policy == "minimal":
            path = self._minimal_batch(s, t, _mod(key, self.h, self.hc))
            return PaddedPaths(path[:, None, :], np.ones((n, 1)), np.ones((n, 1), dtype=bool))
        minimal = np.stack(
            [self._minimal_batch(s, t, np.full(n, i, dtype=np.int64)) for i in range(self.hc)],
            axis=1,
        )
        if policy == "ecmp":
            weight = np.broadcast_to(np.asarray(self.ecmp_weights), (n, self.hc))
            return PaddedPaths(minimal, weight, np.ones((n, self.hc), dtype=bool))
        return self._mix_batch(minimal, self.ecmp_weights, self._valiant_batch(s, t, key, forward))

    def _valiant_batch(
        self, s: np.ndarray, t: np.ndarray, key: np.ndarray, forward: np.ndarray
    ) -> np.ndarray:
        """`_valiant` elementwise: (n, valiant_paths, 5), -1 for local hops not needed."""
        S, loc, h, hc = self.S, self._loc, self.h, self.hc
        a, b = s // S, t // S
        lo, hi = np.minimum(a, b), np.maximum(a, b)
        row, tl = s * S, t % S
        out = np.empty((s.shape[0], self.valiant, 5), dtype=np.int64)
        for k in range(self.valiant):
            r = _draw_array(key, k)
            c = _mod(r, self.G - 2)
            c += c >= lo
            c += c >= hi
            i_lo, i_hi = _mod(r >> np.uint64(20), h, hc), _mod(r >> np.uint64(40), h, hc)
            u1, v1, g1 = self._cable_batch(a, c, np.where(forward, i_lo, i_hi))
            u2, v2, g2 = self._cable_batch(c, b, np.where(forward, i_hi, i_lo))
            out[:, k] = np.stack(
                [loc[row + u1], g1, loc[v1 * S + u2], g2, loc[v2 * S + tl]], axis=1
            )
        return out

    def _mix_batch(
        self, minimal: np.ndarray, minimal_weights: tuple[float, ...], valiant: np.ndarray
    ) -> PaddedPaths:
        """`_mix` on padded paths: (n, P, L) minimal, (n, V, L') Valiant."""
        n, v = valiant.shape[0], valiant.shape[1]
        share = 1.0 / v
        if self.policy == "valiant":
            links, weights = valiant, [share] * v
        else:
            w = self.w_min
            width = max(minimal.shape[2], valiant.shape[2])
            links = np.concatenate([_widen(minimal, width), _widen(valiant, width)], axis=1)
            weights = [w * x for x in minimal_weights] + [(1.0 - w) * share] * v
        p = links.shape[1]
        padded = PaddedPaths(
            links,
            np.broadcast_to(np.asarray(weights, dtype=np.float64), (n, p)),
            np.ones((n, p), dtype=bool),
        )
        return merge_duplicates(padded)


def _widen(links: np.ndarray, width: int) -> np.ndarray:
    """Padded paths with -1 columns appended up to `width` links."""
    extra = width - links.shape[2]
    if extra <= 0:
        return links
    pad = np.full((*links.shape[:2], extra), -1, dtype=links.dtype)
    return np.concatenate([links, pad], axis=2)
