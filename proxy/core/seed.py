"""Message shapes of the seed's resumable-streams protocol (``streams-draft``, PR #899).

Pure helpers the session uses: building ``notifications/stream/create`` and
``notifications/stream/end``, reading ``stream/poll`` / ``stream/resume`` params, and
summarising what a client has not yet acknowledged for ``StreamPollResult``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from proxy.core import jsonrpc
from proxy.core.errors import ResumeError
from proxy.core.stream import Mark, Unacknowledged

# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_UNMARKED = Mark.NONE

CREATE = "notifications/stream/create"
END = "notifications/stream/end"
POLL = "stream/poll"
RESUME = "stream/resume"


@dataclass(frozen=True, slots=True)
class StreamRef:
    """What a ``stream/poll`` or ``stream/resume`` names."""

    stream_id: str
    token: Any
    last_event_id: str | None  # extension: the client's position, where no header carries it


def stream_id_for(epoch: str, number: int) -> str:
    return f"{epoch}.{number}"


def stream_number_of(epoch: str, stream_id: str) -> int | None:
    """The stream number a ``streamId`` of this session names, else None."""
    head, _, tail = stream_id.rpartition(".")
    if head != epoch or not (tail.isascii() and tail.isdigit()) or len(tail) > 16:
        return None
    return int(tail)


def read_ref(params: dict[str, Any]) -> StreamRef:
    stream_id = params.get("streamId")
    if not isinstance(stream_id, str):
        raise ResumeError('stream/* needs a string "streamId"', reason="unknown_stream")
    last = params.get("lastEventId")
    return StreamRef(stream_id, params.get("resumeToken"), last if isinstance(last, str) else None)


def create_notification(
    *,
    shape: str,
    stream_id: str,
    token: str,
    request_id: Any,
    interval_min: float,
    interval_max: float,
) -> dict[str, Any]:
    """``notifications/stream/create``: nested as in streams.mdx, or flat as in schema.ts."""
    fields = {
        "streamId": stream_id,
        "resumeToken": token,
        "requestId": request_id,
        "resumeInterval": {"min": _number(interval_min), "max": _number(interval_max)},
    }
    params = fields if shape == "flat" else {"stream": fields}
    return {"jsonrpc": "2.0", "method": CREATE, "params": params}


EVENT_ID_META = "io.github.mcp-resume-proxy/eventId"
"""``_meta`` key carrying a message's event id, for clients that opt in
(``streams.event_id_in_meta``): on transports without SSE ids it is how a client can name
what it received (``lastEventId``)."""


def with_event_id(payload: bytes, event_id: str) -> bytes:
    """``payload`` with its event id in ``params._meta`` / ``result._meta`` (errors: as is)."""
    msg = json.loads(payload)
    key = "params" if "method" in msg else "result"
    body = msg.get(key, {} if key == "params" else None)
    if not isinstance(body, dict):
        return payload
    meta = body.get("_meta")
    meta = dict(meta) if isinstance(meta, dict) else {}
    meta[EVENT_ID_META] = event_id
    msg[key] = {**body, "_meta": meta}
    return jsonrpc.encode(msg)


def end_notification(stream_id: str) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "method": END, "params": {"streamId": stream_id}}


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def poll_mark(msg: dict[str, Any]) -> Mark:
    """What a poll reports about one message: a request (``"method"`` and ``"id"``), an
    error (``"error"``, or a result with ``isError: true``). Classified once, as it is
    logged (:meth:`~proxy.core.stream.StreamLog.append`), never parsed again."""
    mark = _UNMARKED
    if "method" in msg and "id" in msg:
        mark |= Mark.REQUEST
    result = msg.get("result")
    if "error" in msg or (isinstance(result, dict) and result.get("isError") is True):
        mark |= Mark.ERROR
    return mark


def poll_result(stream_id: str, completed: bool, rest: Unacknowledged) -> dict[str, Any]:
    """``StreamPollResult`` over the messages the client has not acknowledged."""
    return {
        "streamId": stream_id,
        "status": "completed" if completed else "live",
        "pendingMessages": rest.messages > 0,
        "hasRequest": rest.requests > 0,
        "hasError": rest.errors > 0,
    }


def without_streams_capability(initialize: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """``initialize`` minus ``capabilities.streams`` (the legacy server does not know it)."""
    params = initialize.get("params")
    caps = params.get("capabilities") if isinstance(params, dict) else None
    if not isinstance(caps, dict) or "streams" not in caps:
        return initialize, False
    caps = {k: v for k, v in caps.items() if k != "streams"}
    return {**initialize, "params": {**params, "capabilities": caps}}, True  # type: ignore[dict-item]
