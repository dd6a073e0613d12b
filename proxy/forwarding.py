"""What one replica asks of another, and what it is told back (:mod:`proxy.replicas`).

A client request for a session (or a task) held by another replica is sent to that
replica's inbox as one of these requests, and comes back as one of these replies:

- :class:`ForwardedPost` (``post``): the holder feeds the body to the session, and
  replies :class:`StreamOpened` (``sse``) or :class:`NoStream` (``accepted``);
- :class:`ForwardedGet` (``get``): it opens the standalone stream, :class:`StreamOpened`;
  from a ``/ws`` socket, which it names, the socket takes the stream over
  (:mod:`proxy.forwarding_seat`: :class:`StandaloneTakeover`, answered
  :class:`StandaloneStopped`, and :class:`StandaloneRelease`, answered :class:`Acked`);
- :class:`ForwardedDelete` (``delete``): it ends the session, :class:`Deleted` (``deleted``);
- :class:`ForwardedAck` (``ack``): the client has every event up to an id,
  :class:`Acked` (``acked``), a reply nobody waits for;
- :class:`TaskUpdate` (``task_update``) answers a task's input requests and
  :class:`TaskCancel` (``task_cancel``) cancels it: :class:`TaskActed` (``done``), or
  :class:`UnknownTask` (``unknown_task``) when no task of that id runs there;
- :class:`ForwardedRetry` (``retry``): a 2026-07-28 MRTR retry whose ``requestState``
  names the holder (:mod:`proxy.core.reqstate`); the holder continues its parked call and
  replies :class:`Answered` (``answered``: the notes it streamed, then the answer, and the
  HTTP status), which the asker writes to its client as if it had served the call; an
  asker that says so (``ahead``) gets the notes as the call streams them, each part a
  :class:`NotesAhead` (``notes``) on its inbox before the reply, which then carries only
  what was not sent ahead;
  :class:`RetryCancel` (``retry_cancel``): that client closed its response, so the call
  is cancelled, as a local one would be (:class:`Acked`, a reply nobody waits for).

Any request may instead be :class:`Refused` (``refused``: the HTTP status and the
JSON-RPC error response the asker writes to its client): no such session for that
principal at that server, a body the session refuses, or a request the holder cannot
read.

The session requests name the principal the request comes from (None when inbound
authentication is off) and the server whose path it came to: the holder serves them only
for that principal's session at that server (proxy/downstream/remote.py).

Wire form: a flat JSON object, the request's fields beside ``kind`` (a reply's beside
``outcome``). :mod:`proxy.replicas` adds its envelope (``id``, ``from``, ``reply_to``);
decoding ignores keys it does not know, so the envelope may ride along. Decoding anything
else (not an object, an unknown kind or outcome, a field missing or of the wrong type)
raises :class:`MalformedForward`, and nothing else does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from proxy.forwarding_fields import MalformedForward as MalformedForward  # (re-exported)
from proxy.forwarding_fields import RequestId as RequestId
from proxy.forwarding_fields import (
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
    WsSocket,
    decode_socket,
    encode_socket,
    optional_seq_field,
    seq_field,
)


# ---------------------------------------------------------------------- requests
@dataclass(frozen=True, slots=True)
class ForwardedPost:
    """A POST body for the holder's session; ``request_id`` is the id of a lone request
    (what a refusal answers), else None."""

    session: str
    server: str
    principal: str | None
    body: str
    last_event_id: str | None = None
    request_id: RequestId = None


@dataclass(frozen=True, slots=True)
class ForwardedGet:
    """A GET without ``Last-Event-ID``: the session's standalone stream; ``socket``: the
    ``/ws`` socket that asks for it (None: an HTTP GET)."""

    session: str
    server: str
    principal: str | None
    socket: WsSocket | None = None


@dataclass(frozen=True, slots=True)
class ForwardedDelete:
    """A DELETE: end the session."""

    session: str
    server: str
    principal: str | None


@dataclass(frozen=True, slots=True)
class ForwardedAck:
    """The client resumed elsewhere from ``last_event_id``: it has everything up to it."""

    session: str
    server: str
    principal: str | None
    last_event_id: str


@dataclass(frozen=True, slots=True)
class TaskUpdate:
    """``tasks/update`` for a task the holder runs: the client's input responses."""

    task: str
    responses: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TaskCancel:
    """``tasks/cancel`` for a task the holder runs."""

    task: str


@dataclass(frozen=True, slots=True)
class ForwardedRetry:
    """A 2026-07-28 request (``body``: its JSON text) that retries a call parked on the
    holder, of ``principal`` at ``server``; ``headers``: the request's mirrored headers
    (``MCP-Protocol-Version``, ``Mcp-Method``, ``Mcp-Name``), checked again there."""

    server: str
    principal: str | None
    body: str
    headers: dict[str, str]
    ahead: bool = False  # the asker takes the call's notes as they come (NotesAhead)


@dataclass(frozen=True, slots=True)
class RetryCancel:
    """The client of a forwarded retry of call ``call`` (of ``principal`` at ``server``)
    closed its response before the answer."""

    server: str
    principal: str | None
    call: str


SessionRequest = ForwardedPost | ForwardedGet | ForwardedDelete | ForwardedAck | StandaloneRelease
TaskAction = TaskUpdate | TaskCancel
Forwarded = SessionRequest | TaskAction | ForwardedRetry | RetryCancel | StandaloneTakeover


# ---------------------------------------------------------------------- replies
@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The request opened stream ``stream`` ("<epoch>.<number>"); the asker serves its
    events after ``after`` from the shared log.

    ``priming``: the id of the priming event the holder opened the stream with (a
    2025-11-25+ session: transports §Resumability), None when it sent none; the asker
    writes that event first (with ``retry_ms``, the holder's ``retry:``), so its client
    holds an id to resume from on any replica before the first event comes. A reply of
    a replica from before this field has neither (decoded as None: no priming)."""

    stream: str
    after: int
    priming: str | None = None
    retry_ms: int | None = None


@dataclass(frozen=True, slots=True)
class NoStream:
    """Nothing to stream (notifications and responses only): 202."""


@dataclass(frozen=True, slots=True)
class Deleted:
    """The session ended."""


@dataclass(frozen=True, slots=True)
class Acked:
    """The acknowledgement reached the session."""


@dataclass(frozen=True, slots=True)
class UnknownTask:
    """No task of that id runs on the holder."""


@dataclass(frozen=True, slots=True)
class TaskActed:
    """The update or cancel reached the task's call."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The holder refused: ``status`` and ``error`` (a whole JSON-RPC error response)
    are what the asker answers its client."""

    status: int
    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Answered:
    """The holder served the request on its own: ``messages`` (JSON-RPC messages, the
    answer last, the notes it streamed before it) with HTTP status ``status``.

    ``first``: how many notes went ahead of it (:class:`NotesAhead`): ``messages`` are
    the call's messages from that index on. A reply of a replica from before this
    field has none (decoded as 0: every note comes with the answer)."""

    status: int
    messages: list[dict[str, Any]]
    first: int = 0


@dataclass(frozen=True, slots=True)
class NotesAhead:
    """A part of an :class:`Answered` sent before it, as the holder's call streams it
    (progress, log messages): the call's messages ``seq``, ``seq + 1``, … of a
    :class:`ForwardedRetry` that asked for them (``ahead``). Not a reply: the asker
    writes them to its client and goes on waiting for the reply, which comes after
    them on the same inbox."""

    seq: int
    messages: list[dict[str, Any]]


Reply = (
    StreamOpened
    | NoStream
    | Deleted
    | Acked
    | UnknownTask
    | TaskActed
    | Refused
    | Answered
    | StandaloneStopped
)
TaskReply = TaskActed | UnknownTask


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
