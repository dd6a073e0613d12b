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

Their wire form (JSON objects) is :mod:`proxy.forwarding_wire`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.forwarding_fields import RequestId
from proxy.forwarding_seat import StandaloneRelease, StandaloneStopped, StandaloneTakeover, WsSocket


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
