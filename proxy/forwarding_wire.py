"""The wire form of what replicas send each other (:mod:`proxy.forwarding`).

Each request or reply is a flat JSON object, the request's fields beside ``kind`` (a
reply's beside ``outcome``). :mod:`proxy.replicas` adds its envelope (``id``, ``from``,
``reply_to``); decoding ignores keys it does not know, so the envelope may ride along.
Decoding anything else (not an object, an unknown kind or outcome, a field missing or of
the wrong type) raises :class:`MalformedForward`, and nothing else does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, assert_never

from proxy.forwarding import (
    Acked,
    Answered,
    Deleted,
    Forwarded,
    ForwardedAck,
    ForwardedDelete,
    ForwardedGet,
    ForwardedPost,
    ForwardedRetry,
    NoStream,
    NotesAhead,
    Refused,
    Reply,
    RetryCancel,
    SessionRequest,
    StreamOpened,
    TaskActed,
    TaskCancel,
    TaskUpdate,
    UnknownTask,
)
from proxy.forwarding_fields import (
    MalformedForward,
    is_int,
    messages_field,
    object_of,
    optional_text_field,
    request_id_field,
    text_field,
)
from proxy.forwarding_seat import (
    StandaloneRelease,
    StandaloneStopped,
    StandaloneTakeover,
    decode_socket,
    encode_socket,
    optional_seq_field,
    seq_field,
)


# ---------------------------------------------------------------------- encoding
def encode_request(request: Forwarded) -> dict[str, Any]:
    """``request`` as the JSON object a replica's inbox carries."""
    match request:
        case ForwardedPost():
            return {
                "kind": "post",
                **_addressed(request),
                "body": request.body,
                "last_event_id": request.last_event_id,
                "request_id": request.request_id,
            }
        case ForwardedGet():
            return {"kind": "get", **_addressed(request), "socket": encode_socket(request.socket)}
        case ForwardedDelete():
            return {"kind": "delete", **_addressed(request)}
        case ForwardedAck():
            return {"kind": "ack", **_addressed(request), "last_event_id": request.last_event_id}
        case TaskUpdate():
            return {"kind": "task_update", "task": request.task, "responses": request.responses}
        case TaskCancel():
            return {"kind": "task_cancel", "task": request.task}
        case ForwardedRetry():
            return {
                "kind": "retry",
                "server": request.server,
                "principal": request.principal,
                "body": request.body,
                "headers": request.headers,
                "ahead": request.ahead,
            }
        case StandaloneTakeover():
            return {"kind": "standalone_takeover", "token": request.token}
        case StandaloneRelease():
            return {
                "kind": "standalone_release",
                **_addressed(request),
                "token": request.token,
                "upto": request.upto,
            }
        case RetryCancel():
            return {
                "kind": "retry_cancel",
                "server": request.server,
                "principal": request.principal,
                "call": request.call,
            }
        case _:
            assert_never(request)


def _addressed(request: SessionRequest) -> dict[str, Any]:
    return {"session": request.session, "server": request.server, "principal": request.principal}


def encode_reply(reply: Reply) -> dict[str, Any]:
    """``reply`` as the JSON object a replica's inbox carries."""
    match reply:
        case StreamOpened():
            return {
                "outcome": "sse",
                "stream": reply.stream,
                "after": reply.after,
                "priming": reply.priming,
                "retry_ms": reply.retry_ms,
            }
        case NoStream():
            return {"outcome": "accepted"}
        case Deleted():
            return {"outcome": "deleted"}
        case Acked():
            return {"outcome": "acked"}
        case UnknownTask():
            return {"outcome": "unknown_task"}
        case TaskActed():
            return {"outcome": "done"}
        case Refused():
            return {"outcome": "refused", "status": reply.status, "error": reply.error}
        case StandaloneStopped():
            return {"outcome": "standalone_stopped", "upto": reply.upto}
        case Answered():
            return {
                "outcome": "answered",
                "status": reply.status,
                "messages": reply.messages,
                "first": reply.first,
            }
        case _:
            assert_never(reply)


def encode_notes(notes: NotesAhead) -> dict[str, Any]:
    """``notes`` as the JSON object a replica's inbox carries."""
    return {"outcome": "notes", "seq": notes.seq, "messages": notes.messages}


# ---------------------------------------------------------------------- decoding
def decode_request(wire: object) -> Forwarded:
    """The request ``wire`` encodes; :class:`MalformedForward` if it encodes none."""
    fields = object_of(wire)
    kind = fields.get("kind")
    if kind == "post":
        return ForwardedPost(
            *_address(fields),
            body=text_field(fields, "body"),
            last_event_id=optional_text_field(fields, "last_event_id"),
            request_id=request_id_field(fields),
        )
    if kind == "get":
        return ForwardedGet(*_address(fields), decode_socket(fields))
    if kind == "standalone_takeover":
        return StandaloneTakeover(text_field(fields, "token"))
    if kind == "standalone_release":
        token, upto = text_field(fields, "token"), seq_field(fields, "upto")
        return StandaloneRelease(*_address(fields), token, upto)
    if kind == "delete":
        return ForwardedDelete(*_address(fields))
    if kind == "ack":
        return ForwardedAck(*_address(fields), last_event_id=text_field(fields, "last_event_id"))
    if kind == "task_update":
        responses = fields.get("responses")
        if not isinstance(responses, dict):
            raise MalformedForward("task_update: responses must be an object")
        return TaskUpdate(text_field(fields, "task"), responses)
    if kind == "task_cancel":
        return TaskCancel(text_field(fields, "task"))
    if kind == "retry":
        headers = fields.get("headers")
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise MalformedForward("retry: headers must be an object of strings")
        server, principal = text_field(fields, "server"), optional_text_field(fields, "principal")
        ahead = fields.get("ahead", False)  # absent: an asker from before NotesAhead
        if not isinstance(ahead, bool):
            raise MalformedForward("retry: ahead must be a boolean")
        return ForwardedRetry(server, principal, text_field(fields, "body"), headers, ahead)
    if kind == "retry_cancel":
        server, principal = text_field(fields, "server"), optional_text_field(fields, "principal")
        return RetryCancel(server, principal, text_field(fields, "call"))
    raise MalformedForward(f"unknown kind of forwarded request: {kind!r}")


def decode_reply(wire: object) -> Reply:
    """The reply ``wire`` encodes; :class:`MalformedForward` if it encodes none."""
    fields = object_of(wire)
    outcome = fields.get("outcome")
    if outcome == "sse":
        after = fields.get("after")
        if not is_int(after) or after < 0:
            raise MalformedForward("sse: after must be an integer, at least 0")
        stream = text_field(fields, "stream")
        priming, retry_ms = fields.get("priming"), fields.get("retry_ms")
        if priming is not None and not (
            isinstance(priming, str) and priming.startswith(stream + ".")
        ):
            raise MalformedForward("sse: priming must be an event id of the stream, or null")
        if retry_ms is not None and not (is_int(retry_ms) and retry_ms >= 0):
            raise MalformedForward("sse: retry_ms must be an integer, at least 0, or null")
        return StreamOpened(stream, after, priming, retry_ms)
    simple: dict[object, Reply] = {
        "accepted": NoStream(),
        "deleted": Deleted(),
        "acked": Acked(),
        "unknown_task": UnknownTask(),
        "done": TaskActed(),
    }
    if isinstance(outcome, str) and outcome in simple:
        return simple[outcome]
    if outcome == "refused":
        status, error = fields.get("status"), fields.get("error")
        if not is_int(status) or not 400 <= status <= 599:
            raise MalformedForward("refused: status must be an HTTP error status")
        if not isinstance(error, dict):
            raise MalformedForward("refused: error must be an object")
        return Refused(status, error)
    if outcome == "standalone_stopped":
        return StandaloneStopped(optional_seq_field(fields, "upto"))
    if outcome == "answered":
        status, first = fields.get("status"), fields.get("first", 0)
        if not is_int(status) or not 200 <= status <= 599:
            raise MalformedForward("answered: status must be an HTTP status")
        if not is_int(first) or first < 0:
            raise MalformedForward("answered: first must be an integer, at least 0")
        return Answered(status, messages_field(fields, "answered"), first)
    raise MalformedForward(f"unknown outcome of a forwarded request: {outcome!r}")


def decode_notes(wire: object) -> NotesAhead:
    """The notes ``wire`` encodes; :class:`MalformedForward` if it encodes none."""
    fields = object_of(wire)
    if fields.get("outcome") != "notes":
        raise MalformedForward(f"not notes: {fields.get('outcome')!r}")
    seq = fields.get("seq")
    if not is_int(seq) or seq < 0:
        raise MalformedForward("notes: seq must be an integer, at least 0")
    return NotesAhead(seq, messages_field(fields, "notes"))


def _address(fields: Mapping[str, Any]) -> tuple[str, str, str | None]:
    session, server = text_field(fields, "session"), text_field(fields, "server")
    return session, server, optional_text_field(fields, "principal")
