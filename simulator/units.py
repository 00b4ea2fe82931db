"""Parsing and formatting of human units at the CLI/YAML edge (SI inside)."""

from __future__ import annotations

import math
import re

from simulator.errors import ConfigError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB]?)\s*$")
_BINARY = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
# Largest message a size flag accepts: 1 TiB is over 5x the memory of the largest GPU in
# the catalogue (192 GB), so a larger "message" is a typo, not a what-if.
MAX_BYTES = 2**40


def parse_bytes(text: str, field: str = "--bytes") -> int:
    """'64M' -> 67108864 (binary prefixes, as nccl-tests reads -b/-e)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ConfigError(f"{field}: cannot read size '{text}' (examples: 1024, 64K, 256M, 1G)")
    value = float(m.group(1)) * _BINARY[m.group(2).lower()]
    if not value >= 1:  # '0.4' rounded to 0 bytes and divided by zero in a sweep
        raise ConfigError(f"{field}: size must be at least 1 byte, got '{text}'")
    if value > MAX_BYTES:  # also inf: a 400-digit size overflowed round()
        raise ConfigError(f"{field}: size '{text}' is above {format_bytes(MAX_BYTES)}")
    return round(value)


MAX_SWEEP_SIZES = 256  # a sweep is read by a person: more rows than that is a typo


def parse_size_sweep(text: str, factor: float = 2.0, field: str = "--bytes") -> list[int]:
    """'1G' -> [1G]; '8:1G' -> 8, 16, ... up to 1G (times `factor`)."""
    if ":" not in text:
        return [parse_bytes(text, field)]
    lo_s, hi_s = text.split(":", 1)
    lo, hi = parse_bytes(lo_s, field), parse_bytes(hi_s, field)
    if hi < lo:
        raise ConfigError(f"{field}: sweep end {hi_s} is below its start {lo_s}")
    if not factor > 1:  # also NaN
        raise ConfigError(f"--factor must be greater than 1, got {factor}")
    count = math.floor(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
    if count > MAX_SWEEP_SIZES:
        raise ConfigError(
            f"--factor {factor} gives {count:,} sizes from {lo_s} to {hi_s} "
            f"(at most {MAX_SWEEP_SIZES}); use a larger factor"
        )
    sizes = []
    v = float(lo)
    while v <= hi * (1 + 1e-12):
        sizes.append(round(v))
        v *= factor
    return sizes


def format_bytes(n: float) -> str:
    """67108864 -> '64 MiB'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.2f} {unit}"
    return f"{n:.0f} B"


def format_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.2f} µs"


def split_names(text: str, flag: str) -> list[str]:
    """A comma-separated list of names from a flag: no empty item, no name twice.

    Why strict: `--only ''` silently meaning "everything" starts a run of minutes, and
    `a,,b` or `a,a` is a typo, not a request."""
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        raise ConfigError(f"{flag}: give at least one name")
    if not all(items):
        raise ConfigError(f"{flag} {text!r}: an empty name between commas")
    seen: set[str] = set()
    for item in items:
        if item.lower() in seen:
            raise ConfigError(f"{flag}: '{item}' is given twice")
        seen.add(item.lower())
    return items
