"""Whether a legacy POST's answer goes out as ``application/json`` instead of SSE.

2025-11-25 transports §Sending Messages to the Server, item 5: a POST that carries a
request is answered with ``Content-Type: text/event-stream`` or ``application/json``, the
server's choice, and the client MUST support both. The proxy streams (SSE, with a priming
event id so a cut call resumes), but one JSON-RPC message is one SSE event, and some
clients cap an event's size (the official Python SDK 2.x: 1 MiB by default, then "SSE
stream failed: Server-sent event exceeded the 1048576 byte limit"); a JSON body has no
such cap. So the HTTP layer holds a POST's response headers for a short window
(``sse.json_answer_window_ms``) and asks :func:`verdict` about what the connection was
given meanwhile:

- nothing yet but the priming event: :data:`WAIT`;
- a message that is not the lone answer (progress, a server request, the seed's stream
  notice), a close for another reason, or a small answer: :data:`SSE`, as before;
- the stream ended with exactly one message, the request's answer, of at least
  ``sse.json_answer_min_bytes``: that answer's bytes, sent as the JSON body.

The price: a JSON body cut in transfer cannot be resumed (it has no event id), and a cut
inside the window finds no event id to resume from. Pure: frames in, a verdict out.
"""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Sequence

_DATA = b"data: "


class Verdict(enum.Enum):
    WAIT = "wait"  # keep holding the headers
    SSE = "sse"  # open the SSE stream now and write what was held


WAIT = Verdict.WAIT
SSE = Verdict.SSE


@functools.lru_cache(maxsize=256)  # per POST, the same few Accept headers (bounded)
def prefers_json(accept: str | None) -> bool:
    """Whether ``Accept`` takes ``application/json`` at least as gladly as
    ``text/event-stream`` (RFC 9110 §12.5.1 quality values). MCP clients send both
    unweighted; a client that must read every answer as a stream says so with a lower
    ``q`` for JSON (the ``connect`` shim does: it resumes a cut answer)."""
    json_q = sse_q = 0.0
    for part in (accept or "").split(","):
        media, _, params = part.partition(";")
        media = media.strip().lower()
        q = _quality(params)
        if media in ("application/json", "application/*", "*/*"):
            json_q = max(json_q, q)
        if media in ("text/event-stream", "text/*", "*/*"):
            sse_q = max(sse_q, q)
    return json_q > 0 and json_q >= sse_q


def _quality(params: str) -> float:
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                return min(max(float(value.strip()), 0.0), 1.0)
            except ValueError:
                return 1.0
    return 1.0


def event_data(frame: bytes) -> bytes:
    """The ``data`` of one event as :func:`proxy.core.sse.encode_event` wrote it (one
    ``data`` line, compact JSON, or empty for a priming event)."""
    start = 0 if frame.startswith(_DATA) else frame.index(b"\n" + _DATA) + 1
    return frame[start + len(_DATA) : -2]


def is_priming(frame: bytes) -> bool:
    return frame.endswith(b"\n" + _DATA + b"\n\n") or frame == _DATA + b"\n\n"


def is_answer(payload: bytes) -> bool:
    """A JSON-RPC response or error (not a request or notification)."""
    try:
        message = json.loads(payload)
    except ValueError:
        return False
    return (
        isinstance(message, dict)
        and "method" not in message
        and ("result" in message or "error" in message)
    )


def verdict(frames: Sequence[bytes], ended: bool, *, min_bytes: int) -> Verdict | bytes:
    """What to do with a held POST response, given the SSE ``frames`` queued for it so
    far and whether its stream has ``ended`` (the core closed it as complete, with no
    ``retry``: not a poll close). ``bytes``: send them as the ``application/json`` body."""
    messages = [frame for frame in frames if not is_priming(frame)]
    if not ended:
        return SSE if messages else WAIT
    if len(messages) != 1:
        return SSE
    payload = event_data(messages[0])
    # The size first: a small answer is never parsed again, a large one once.
    if len(payload) >= min_bytes and is_answer(payload):
        return payload
    return SSE
