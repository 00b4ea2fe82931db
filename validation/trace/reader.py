"""Streaming reader for PyTorch profiler (Kineto) Chrome-trace JSON, plain or gzipped.

A trace of a large job is gigabytes of JSON, so the reader never holds the file: it
decodes the top-level object incrementally from a chunked text buffer and yields the
`traceEvents` one at a time. Top-level keys other than `traceEvents` (deviceProperties,
distributedInfo, baseTimeNanoseconds, ...) may come before or after the event list; they
are collected into `TraceStream.metadata`, which is complete once iteration has finished.

Compression is detected from the gzip magic bytes, not from the file extension. Every
failure (corrupt or truncated gzip, truncated or malformed JSON, a top level that is not a
Kineto trace object) raises `TraceError` naming the file, at the latest when iteration
reaches the end: a truncated file never ends quietly after its first half.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from topologies.user_files import check_regular
from validation.errors import TraceError

GZIP_MAGIC = b"\x1f\x8b"
CHUNK_CHARS = 1 << 20
# Bounds (the reader streams, so they bound time and memory, not what fits): a trace of
# one rank is tens to hundreds of MB of JSON (../shared/traces: at most 8.4 MB; HTA loads
# a whole rank's trace into memory), so 8 GiB of text is far beyond a real one; a gzip
# bomb of a few MB decompresses to that and stops there instead of reading for hours.
MAX_TRACE_FILE_BYTES = 8 << 30
MAX_TRACE_CHARS = 8 << 30
# One event is a few hundred bytes; a single JSON value of 256 MiB (one string that never
# ends, say) is damage, and holding it would need gigabytes in the decoder.
MAX_VALUE_CHARS = 256 << 20
_WS = re.compile(r"[ \t\n\r]*")
_SEP = re.compile(r"[ \t\n\r]*([,\]])[ \t\n\r]*")
_DECODER = json.JSONDecoder()


def is_gzip(path: str | Path) -> bool:
    """True when the file starts with the gzip magic bytes (whatever its name)."""
    with open(path, "rb") as fh:
        return fh.read(2) == GZIP_MAGIC


def open_text(path: str | Path) -> TextIO:
    """Open a trace file as UTF-8 text, decompressing on the fly when it is gzipped; a
    file that is not a regular file (a FIFO would block, /dev/zero never ends) or is
    larger than MAX_TRACE_FILE_BYTES is refused."""
    try:
        check_regular(path, MAX_TRACE_FILE_BYTES)
        if is_gzip(path):
            return io.TextIOWrapper(gzip.GzipFile(path, "rb"), encoding="utf-8-sig")
        return open(path, encoding="utf-8-sig")
    except OSError as exc:
        raise TraceError(f"{path}: cannot open trace ({exc.strerror or exc})") from exc


class TraceStream:
    """Iterate over the `traceEvents` of one trace file without loading the file.

    Usage: `stream = TraceStream(path); for event in stream: ...; stream.metadata`.
    Each event is the decoded JSON object (a dict). `metadata` holds every other
    top-level key; it is only complete after the iteration has run to its end.
    """

    def __init__(self, path: str | Path, chunk_chars: int = CHUNK_CHARS) -> None:
        self.path = Path(path)
        self.metadata: dict[str, Any] = {}
        self.n_events = 0
        self._chunk = chunk_chars
        self._fh: TextIO | None = None
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._has_events = False
        self._chars_read = 0

    # -- buffer management -------------------------------------------------------------
    def _fail(self, problem: str) -> TraceError:
        return TraceError(f"{self.path}: {problem}")

    def _read_more(self, at_least: int = 0) -> bool:
        """Append text to the buffer (dropping what was consumed). False at end of file."""
        if self._eof or self._fh is None:
            return False
        if self._pos:
            self._buf = self._buf[self._pos :]
            self._pos = 0
        try:
            text = self._fh.read(max(self._chunk, at_least))
        except EOFError as exc:
            raise self._fail("truncated gzip stream (compressed data ends early)") from exc
        except (gzip.BadGzipFile, zlib.error, OSError) as exc:
            raise self._fail(f"corrupt gzip data ({exc})") from exc
        except UnicodeDecodeError as exc:
            raise self._fail(f"not UTF-8 text ({exc.reason})") from exc
        if not text:
            self._eof = True
            return False
        self._chars_read += len(text)
        if self._chars_read > MAX_TRACE_CHARS:
            raise self._fail(
                f"more than {MAX_TRACE_CHARS >> 30} GiB of text (decompressed): not a trace "
                "of one rank, or a gzip bomb"
            )
        if len(self._buf) - self._pos > MAX_VALUE_CHARS:
            raise self._fail(f"one JSON value is larger than {MAX_VALUE_CHARS >> 20} MiB")
        self._buf += text
        return True

    def _skip_ws(self) -> None:
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or not self._read_more():
                return

    def _peek(self) -> str:
        self._skip_ws()
        return self._buf[self._pos] if self._pos < len(self._buf) else ""

    def _expect(self, chars: str, where: str) -> str:
        ch = self._peek()
        if not ch:
            raise self._fail(f"truncated JSON (file ends {where})")
        if ch not in chars:
            raise self._fail(f"malformed JSON at {where}: expected {chars!r}, found {ch!r}")
        self._pos += 1
        return ch

    def _value(self, where: str) -> Any:
        """Decode one JSON value at the cursor, reading more text until it is complete."""
        self._skip_ws()
        extra = self._chunk
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except RecursionError:
                raise self._fail(f"JSON in {where} nested too deeply") from None
            except json.JSONDecodeError as exc:
                # Incomplete (not malformed) when the error sits at the buffer's end.
                near_end = exc.pos >= len(self._buf) - 16 or exc.msg.startswith("Unterminated")
                if near_end and self._read_more(extra):
                    extra *= 2
                    continue
                if self._eof:
                    raise self._fail(f"truncated or malformed JSON in {where} ({exc.msg})") from exc
                raise self._fail(f"malformed JSON in {where} ({exc.msg})") from exc
            # A number ending exactly at the buffer end may continue in the next chunk.
            if end >= len(self._buf) and not self._eof and self._read_more(extra):
                continue
            self._pos = end
            return value

    # -- the top-level object ----------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        self._fh = open_text(self.path)
        try:
            yield from self._top_level()
        finally:
            self._fh.close()
            self._buf = ""

    def _top_level(self) -> Iterator[dict[str, Any]]:
        first = self._peek()
        if first != "{":
            what = "an empty file" if not first else f"JSON starting with {first!r}"
            raise self._fail(f"not a Kineto trace: expected a JSON object, found {what}")
        self._pos += 1
        if self._peek() == "}":
            self._pos += 1
        else:
            while True:
                key = self._value("a top-level key")
                if not isinstance(key, str):
                    raise self._fail("malformed JSON: top-level key is not a string")
                self._expect(":", f"top-level key {key!r}")
                if key == "traceEvents":
                    yield from self._events()
                else:
                    self.metadata[key] = self._value(f"top-level key {key!r}")
                if self._expect(",}", "the top-level object") == "}":
                    break
        if self._peek():
            raise self._fail("malformed JSON: data after the top-level object")
        if not self._has_events:
            raise self._fail("not a Kineto trace: no 'traceEvents' list")

    def _events(self) -> Iterator[dict[str, Any]]:
        self._expect("[", "'traceEvents' (expected a list)")
        self._has_events = True
        if self._peek() == "]":
            self._pos += 1
            return
        while True:
            try:  # fast path: a complete event right at the cursor
                event, end = _DECODER.raw_decode(self._buf, self._pos)
                if end >= len(self._buf):
                    raise ValueError("the value may continue in the next chunk")
                self._pos = end
            except (ValueError, RecursionError):  # _value says what is wrong, if anything
                event = self._value(f"traceEvents[{self.n_events}]")
            if not isinstance(event, dict):
                raise self._fail(f"traceEvents[{self.n_events}] is not a JSON object")
            self.n_events += 1
            yield event
            sep = _SEP.match(self._buf, self._pos)  # fast path: separator within the buffer
            if sep and sep.end() < len(self._buf):
                if sep.group(1) == "]":
                    self._pos = sep.start(1) + 1
                    return
                self._pos = sep.end()
            elif self._expect(",]", "the traceEvents list") == "]":
                return


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the trace events of `path` one at a time (see `TraceStream`)."""
    return iter(TraceStream(path))
