"""Incremental Server-Sent Events encoder and decoder (WHATWG HTML §9.2.6).

The decoder is fed bytes in any chunking and yields the same events whether fed whole
or byte by byte. It follows the spec's field rules: a ``data`` field may repeat (joined
with ``\\n``), ``id`` persists across events (the "last event ID buffer") and is ignored
if it contains NUL, ``retry`` must be ASCII digits, lines starting with ``:`` are
comments, and an event cut off before its blank line is never dispatched.

A line that is not UTF-8 or is longer than the limit breaks the stream. The events
completed before that line are still handed out (the feed that meets it returns them), so a
stream that turns bad delivers, and lets its reader store, everything before the bad line;
the error is kept in :attr:`SSEDecoder.error` and raised by every later feed. A caller that
waits for more bytes checks ``error`` first, not to wait on a stream that is already dead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from proxy.core.errors import ProtocolError

LIVENESS_SECONDS = 1.0
"""How often a response that waits with nothing to write checks that its client is still
there: a client that hung up is noticed without waiting for a write to fail."""


_LINE_END = re.compile(rb"\r\n|\r|\n")


class SSEDecodeError(ProtocolError):
    """The byte stream is not valid UTF-8, or a line exceeds the size limit."""

    reason = "sse_decode_error"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event. ``id`` is the last-event-id buffer at dispatch time."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None


def encode_event(
    data: bytes | None, *, event_id: str | None = None, retry_ms: int | None = None
) -> bytes:
    """Encode one event. ``data`` must not contain a newline (compact JSON never does).

    ``data=None`` writes an empty ``data`` field: the 2025-11-25 priming event.
    """
    if retry_ms is None and event_id is not None:  # (every event but a priming one)
        return b"id: " + event_id.encode() + b"\ndata: " + (data or b"") + b"\n\n"
    parts: list[bytes] = []
    if event_id is not None:
        parts.append(b"id: " + event_id.encode() + b"\n")
    if retry_ms is not None:
        parts.append(b"retry: %d\n" % retry_ms)
    parts.append(b"data: " + (data or b"") + b"\n\n")
    return b"".join(parts)


def encode_retry(retry_ms: int) -> bytes:
    """A block with only ``retry:``; sent before a server-initiated close (SEP-1699)."""
    return b"retry: %d\n\n" % retry_ms


def encode_comment(text: str = "") -> bytes:
    """A comment line: keeps proxies and load balancers from cutting an idle stream."""
    return b": " + text.encode() + b"\n\n"


class SSEDecoder:
    """Feed bytes with :meth:`feed`; it returns the events completed by those bytes, up
    to a bad line (then :attr:`error` is set and every later :meth:`feed` raises it)."""

    def __init__(self, max_line_bytes: int = 64 * 1024 * 1024) -> None:
        """``max_line_bytes``: a longer line breaks the stream; the default is that of
        ``upstream.max_line_bytes``, so a 20 MB tool result passes (the shim reads with it)."""
        self._buffer = bytearray()
        self._max_line = max_line_bytes
        self._data: list[str] = []
        self._event = ""
        self._retry: int | None = None
        self._saw_field = False
        self._first_line = True
        self._pending_cr = False
        self._scanned = 0  # the buffer's first bytes hold no line end: not searched again
        self.last_event_id: str | None = None
        self.error: SSEDecodeError | None = None
        """Why the stream cannot be read on: set by the feed that met the bad line."""

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """The events completed by ``chunk``, in order. Where ``chunk`` holds a bad line,
        the events completed before it (and only those): :attr:`error` then says why, and
        the bytes after it are dropped. Raises :class:`SSEDecodeError` once ``error`` is
        set (at the feed after the one that met the bad line)."""
        if self.error is not None:
            raise SSEDecodeError(self.error.message)
        events: list[SSEEvent] = []
        buf = self._buffer
        if self._pending_cr and chunk[:1] == b"\n":
            # "\r\n" split across chunks: the "\r" already ended the line.
            chunk = chunk[1:]
        self._pending_cr = False
        buf += chunk
        start = 0
        n = len(buf)
        # Over the limit only if the buffer is: then the lines before the first long one
        # are read, as if it had come in parts (the result never depends on the chunking).
        long_at = self._long_line_at(buf) if n > self._max_line else -1
        if long_at != -1:
            n = long_at
        try:  # (around the loop, not each line: a try costs nothing until it catches)
            while start < n:
                # A long line (a multi-MB event) arrives in many chunks: search only the
                # new bytes, so reading it costs its length, not its length times its chunks.
                at = max(start, self._scanned)
                cr = buf.find(b"\r", at)
                lf = buf.find(b"\n", at)
                if cr == -1 and lf == -1:
                    break
                if cr == -1 or (lf != -1 and lf < cr):
                    end, nxt = lf, lf + 1
                elif cr == n - 1:
                    # A lone trailing "\r" ends the line; a following "\n" must be skipped.
                    end, nxt = cr, cr + 1
                    self._pending_cr = True
                else:
                    end = cr
                    nxt = cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
                line = bytes(buf[start:end])
                start = nxt
                event = self._line(line)
                if event is not None:
                    events.append(event)
        except SSEDecodeError as exc:  # a line that is not UTF-8
            return self._broken(events, exc)
        if long_at != -1:
            return self._broken(
                events, SSEDecodeError(f"SSE line longer than {self._max_line} bytes")
            )
        del buf[:start]
        self._scanned = len(buf)  # what is left holds no line end
        return events

    def _long_line_at(self, buf: bytearray) -> int:
        """Where the first line of ``buf`` longer than the limit starts, cut off or not
        (-1: none); lines end as in :meth:`feed`, at CR, LF or CRLF."""
        start = 0
        for found in _LINE_END.finditer(buf):
            if found.start() - start > self._max_line:
                return start
            start = found.end()
        return start if len(buf) - start > self._max_line else -1

    def _broken(self, events: list[SSEEvent], error: SSEDecodeError) -> list[SSEEvent]:
        """``events`` (those completed before the bad line); no more from this stream."""
        self.error = error
        self._buffer = bytearray()  # the bad line may be long: not kept
        self._data, self._scanned, self._pending_cr = [], 0, False
        return events

    def _line(self, raw: bytes) -> SSEEvent | None:
        if self._first_line:
            self._first_line = False
            if raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SSEDecodeError(f"SSE stream is not UTF-8: {exc}") from None
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._saw_field = True
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self.last_event_id = value or None
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        return None

    def _dispatch(self) -> SSEEvent | None:
        saw_data, data, event, retry = self._saw_field, self._data, self._event, self._retry
        self._data, self._event, self._retry, self._saw_field = [], "", None, False
        if not saw_data:
            # WHATWG: an event with an empty data buffer is not dispatched. We still
            # report a lone retry so callers can honour it.
            if retry is not None:
                return SSEEvent(data="", event="", id=self.last_event_id, retry=retry)
            return None
        return SSEEvent(
            data="\n".join(data), event=event or "message", id=self.last_event_id, retry=retry
        )
