"""Shared machinery of batch routing: padded path matrices, exact merging, 64-bit hashes.

Structural routers route a batch of pairs by filling a padded matrix (pair x path x link,
-1 where a path has no link there) with numpy arithmetic, then compacting it into a
`RouteBatch`. The padded form is what lets heads, fabric paths and tails be glued with one
concatenation; compaction drops the -1 entries in order, so a path whose optional hop is
absent (a switch that is already the right one) comes out exactly as the scalar router's
tuple without that hop.

Exactness is the contract (the scalar routers are the reference): duplicate paths are
merged by the same rule as `topologies.fabric.merge_paths` (first-seen order, weights
summed left to right), zero weights are dropped afterwards, and the splitmix-style hashes
are computed in wrapping uint64 arithmetic, which is Python's `& (2**64 - 1)` bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from topologies.types import RouteBatch

CHUNK_PAIRS = 1 << 13
"""Pairs routed per chunk: bounds the padded matrices (~10 MB) whatever the batch size."""

MASK64 = (1 << 64) - 1


@dataclass(frozen=True, slots=True)
class PaddedPaths:
    """Up to P paths of up to L links per pair; -1 is "no link", `valid` marks real paths."""

    links: np.ndarray  # (n, P, L) int64
    weight: np.ndarray  # (n, P) float64, meaningful where valid
    valid: np.ndarray  # (n, P) bool

    @classmethod
    def empty(cls, n: int, paths: int, length: int) -> PaddedPaths:
        """n pairs with no path yet."""
        return cls(
            links=np.full((n, paths, length), -1, dtype=np.int64),
            weight=np.zeros((n, paths), dtype=np.float64),
            valid=np.zeros((n, paths), dtype=bool),
        )

    def put(self, rows: np.ndarray, other: PaddedPaths) -> None:
        """Write `other`'s pairs into rows `rows` (it may have fewer paths / links)."""
        _, p, length = other.links.shape
        self.links[rows, :p, :length] = other.links
        self.weight[rows, :p] = other.weight
        self.valid[rows, :p] = other.valid


def compact(padded: PaddedPaths) -> RouteBatch:
    """The valid paths without their -1 entries, as a RouteBatch (pair order kept)."""
    present = padded.links >= 0
    present &= padded.valid[:, :, None]
    return RouteBatch(
        links=padded.links[present],
        path_len=_count_last(present)[padded.valid],
        path_weight=padded.weight[padded.valid],
        paths_per_route=_count_last(padded.valid),
    )


def _count_last(mask: np.ndarray) -> np.ndarray:
    """True entries along the last axis (int64), column by column: the last axis is a
    handful of path slots or links, where numpy's reduction over a short inner axis costs
    twice these few whole-array additions."""
    out = mask[..., 0].astype(np.int64) if mask.shape[-1] else np.zeros(mask.shape[:-1], np.int64)
    for c in range(1, mask.shape[-1]):
        out += mask[..., c]
    return out


def merge_duplicates(padded: PaddedPaths) -> PaddedPaths:
    """`merge_paths` then dropping weights <= 0, row by row, on padded paths.

    A later copy of a path is invalidated and its weight added to the first copy, in path
    order (the float sums are the scalar ones, operation for operation). Paths compare as
    the scalar tuples do, i.e. ignoring their -1 entries. Candidates are found by a
    fingerprint and then checked link by link, so a fingerprint collision costs time, never
    exactness; duplicates are rare, so this is nearly a fingerprint comparison.
    """
    links, valid = padded.links, padded.valid
    fp = _fingerprint(links)
    p = links.shape[1]
    earlier = np.tril(np.ones((p, p), dtype=bool), -1)  # [j, i]: i < j
    cand = (fp[:, :, None] == fp[:, None, :]) & earlier[None]
    cand &= valid[:, :, None] & valid[:, None, :]
    row, j, i = np.nonzero(cand)
    if row.shape[0]:
        same = (_left_aligned(links[row, j]) == _left_aligned(links[row, i])).all(axis=1)
        row, j, i = row[same], j[same], i[same]
    dup = np.zeros(valid.shape, dtype=bool)
    dup[row, j] = True
    total = np.where(valid, padded.weight, 0.0)
    first = ~dup[row, i]  # add each copy to the first one only
    row, j, i = row[first], j[first], i[first]
    order = np.argsort(j, kind="stable")  # copies in path order: left-to-right sums
    row, j, i = row[order], j[order], i[order]
    for k in np.unique(j).tolist():
        at = j == k  # one (row, i) per (row, k): no repeated index within a step
        total[row[at], i[at]] += padded.weight[row[at], k]
    keep = valid & ~dup & (total > 0)
    return PaddedPaths(links, np.where(keep, total, 0.0), keep)


def _fingerprint(links: np.ndarray) -> np.ndarray:
    """A wrapping uint64 hash of each path's present links in order (-1 entries skipped)."""
    h = np.zeros(links.shape[:2], dtype=np.uint64)
    mult = np.uint64(0x9E3779B97F4A7C15)
    for c in range(links.shape[2]):
        col = links[:, :, c]
        h = np.where(col >= 0, h * mult + col.astype(np.uint64) + np.uint64(1), h)
    return h


def _left_aligned(links: np.ndarray) -> np.ndarray:
    """Each path's links moved to its front, -1 entries to its end (order kept)."""
    order = np.argsort(links < 0, axis=-1, kind="stable")
    return np.take_along_axis(links, order, axis=-1)


def in_chunks(
    n: int,
    route: Callable[[slice], RouteBatch],
    bound: tuple[int, int],
    chunk: int = CHUNK_PAIRS,
) -> RouteBatch:
    """`route` applied to consecutive slices of n pairs, results concatenated.

    `bound` is (most paths per pair, most links per path). Chunks are copied into buffers
    of that size as they come and then freed, so the peak is about one result plus one
    chunk, not two results: the untouched end of a buffer is never paged in. A chunk
    beyond the bound (a router breaking its promise) grows the buffers instead of failing.
    """
    if n <= chunk:
        return route(slice(0, n))
    most_paths = n * bound[0]
    links = np.empty(most_paths * bound[1], dtype=np.int64)
    path_len = np.empty(most_paths, dtype=np.int64)
    path_weight = np.empty(most_paths, dtype=np.float64)
    per_route = np.empty(n, dtype=np.int64)
    n_links = n_paths = 0
    for start in range(0, n, chunk):
        part = route(slice(start, min(start + chunk, n)))
        end_links, end_paths = n_links + part.links.shape[0], n_paths + part.path_len.shape[0]
        if end_links > links.shape[0] or end_paths > path_len.shape[0]:
            links = _grown(links, end_links)
            path_len, path_weight = _grown(path_len, end_paths), _grown(path_weight, end_paths)
        links[n_links:end_links] = part.links
        path_len[n_paths:end_paths] = part.path_len
        path_weight[n_paths:end_paths] = part.path_weight
        per_route[start : start + part.paths_per_route.shape[0]] = part.paths_per_route
        n_links, n_paths = end_links, end_paths
    return RouteBatch(links[:n_links], path_len[:n_paths], path_weight[:n_paths], per_route)


def _grown(a: np.ndarray, size: int) -> np.ndarray:
    """`a` copied into a buffer of at least `size` entries (twice as large, at least)."""
    if size <= a.shape[0]:
        return a
    out = np.empty(max(size, 2 * a.shape[0]), dtype=a.dtype)
    out[: a.shape[0]] = a
    return out


def u64(value: int) -> np.uint64:
    """A Python integer reduced mod 2**64, as a numpy uint64 constant."""
    return np.uint64(value & MASK64)


def mix64_array(*values: np.ndarray) -> np.ndarray:
    """`topologies.paths.mix64` elementwise over non-negative integer arrays (uint64)."""
    h = np.full(np.shape(values[0]), 0x9E3779B97F4A7C15, dtype=np.uint64)
    c1, c2 = u64(0xBF58476D1CE4E5B9), u64(0x94D049BB133111EB)
    for v in values:
        h = (h ^ np.asarray(v).astype(np.uint64)) * c1
        h ^= h >> np.uint64(31)
        h = h * c2
        h ^= h >> np.uint64(29)
    return h
