"""A small driver for core sessions: feed events at a fake time, collect commands.

Tests state the exact commands an event produces, in order (mitmproxy's ``Playbook``)::

    assert pb.upstream(ok(2)) == [sse(c, "ep0ch.2.2", ok(7)), CloseClient(c), WakeAt(1120.0)]

:func:`sse`, :func:`prime` and :func:`up` build the expected :class:`SendToClient` and
:class:`SendUpstream` commands; a JSON payload is compared parsed (key order does not
matter, types do: ``1`` is not ``1.0``, ``True`` or ``"1"``). Every other command is
written as itself (``CloseClient(c)``, ``WakeAt(t)``, ``LogNote(...)``). The filters
(:func:`upstream_sent`, :func:`payloads`) are for reading ids in setup steps: an
assertion made through them cannot see a command it filters out.

At the end, the calls and log lines the session tests share: :func:`call` and
:func:`resumed` for any session, and for one that speaks the seed's stream protocol (D2)
:func:`seeded`, :func:`seeded_call`, :func:`local` and what their commands carry.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

from proxy.core import jsonrpc
from proxy.core.events import (
    ClientGet,
    ClientPost,
    CloseClient,
    Command,
    ConnId,
    Event,
    LogNote,
    SendEvents,
    SendToClient,
    SendUpstream,
    StartSse,
    Tick,
    UpstreamMessage,
)
from proxy.core.session import Session, SessionSettings
from proxy.core.tokens import resume_token_for


def req(rid: Any, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def note(method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return msg


def ok(rid: Any, result: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "result": result or {}}


def progress(token: Any, n: int) -> dict[str, Any]:
    return note("notifications/progress", {"progressToken": token, "progress": n})


@dataclass
class Playbook:
    """Drives one :class:`Session` with a fake clock; remembers every command."""

    settings: SessionSettings = field(default_factory=SessionSettings)
    now: float = 1000.0
    version: str = "2025-11-25"
    session: Session = field(init=False)
    log: list[Command] = field(default_factory=list)
    _conn: int = 0

    def __post_init__(self) -> None:
        self.session = Session("sid", "ep0ch", self.settings, self.now)

    def conn(self) -> ConnId:
        self._conn += 1
        return ConnId(self._conn)

    def feed(self, event: Event) -> list[Command]:
        """The commands ``event`` gives, a run of events (:class:`SendEvents`) read as
        one :class:`SendToClient` per event (the same on the wire)."""
        out = each_event(self.session.handle(event, self.now))
        self.log.extend(out)
        return out

    def post(self, conn: ConnId, *messages: dict[str, Any]) -> list[Command]:
        msgs = [jsonrpc.classify(m) for m in messages]
        return self.feed(ClientPost(conn, msgs, batch=len(msgs) > 1))

    def get(self, conn: ConnId, last_event_id: str | None = None) -> list[Command]:
        return self.feed(ClientGet(conn, last_event_id))

    def upstream(self, obj: dict[str, Any], origin: int | None = None) -> list[Command]:
        return self.feed(UpstreamMessage(jsonrpc.classify(obj), origin))

    def tick(self, advance: float = 0.0) -> list[Command]:
        self.now += advance
        return self.feed(Tick())

    def initialize(self, capabilities: dict[str, Any] | None = None) -> list[Command]:
        """Run the initialize exchange so the session knows its protocol version."""
        c = self.conn()
        params = {"protocolVersion": self.version, "capabilities": capabilities or {}}
        out = self.post(c, req(0, "initialize", params))
        up = upstream_sent(out)[0]
        self.upstream(ok(up["id"], {"protocolVersion": self.version, "capabilities": {}}))
        self.post(self.conn(), note("notifications/initialized"))
        return out


def each_event(commands: list[Command]) -> list[Command]:
    """``commands`` with every :class:`SendEvents` as its events, one :class:`SendToClient`
    each, in place."""
    return [e for c in commands for e in (c.each() if isinstance(c, SendEvents) else (c,))]


def same_json(a: Any, b: Any) -> bool:
    """JSON values equal in value and type (dict key order aside)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@dataclass(frozen=True, eq=False)
class Sse:
    """Expects ``SendToClient(conn, event_id, <msg as JSON>)``: one logged message."""

    conn: ConnId
    event_id: str
    msg: dict[str, Any]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, SendToClient)
            and (other.conn, other.event_id, other.retry_ms) == (self.conn, self.event_id, None)
            and other.payload is not None
            and same_json(json.loads(other.payload), self.msg)
        )

    def __repr__(self) -> str:
        return f"sse({self.conn}, {self.event_id!r}, {self.msg!r})"


@dataclass(frozen=True, eq=False)
class Up:
    """Expects ``SendUpstream(<msg as JSON>)``."""

    msg: dict[str, Any]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SendUpstream) and same_json(json.loads(other.payload), self.msg)

    def __repr__(self) -> str:
        return f"up({self.msg!r})"


def sse(conn: ConnId, event_id: str, msg: dict[str, Any]) -> Sse:
    """The event ``event_id`` carrying ``msg``, sent on ``conn``."""
    return Sse(conn, event_id, msg)


def prime(conn: ConnId, event_id: str, retry_ms: int = 1000) -> SendToClient:
    """A priming event (an id, no data; 2025-11-25) with its ``retry:``."""
    return SendToClient(conn, event_id, None, retry_ms)


def up(msg: dict[str, Any]) -> Up:
    """``msg`` forwarded to the upstream server."""
    return Up(msg)


def upstream_sent(commands: list[Command]) -> list[dict[str, Any]]:
    return [json.loads(c.payload) for c in commands if isinstance(c, SendUpstream)]


def client_sent(commands: list[Command], conn: ConnId | None = None) -> list[SendToClient]:
    return [c for c in commands if isinstance(c, SendToClient) and conn in (None, c.conn)]


def payloads(commands: list[Command], conn: ConnId | None = None) -> list[dict[str, Any]]:
    """The JSON messages (priming events left out) sent to ``conn``."""
    return [json.loads(c.payload) for c in client_sent(commands, conn) if c.payload is not None]


# Calls, as the session tests make them.


def slow(rid: Any, token: Any = "tok") -> dict[str, Any]:
    """A tools/call carrying a progress token (as sent, and as forwarded with ``rid``)."""
    return req(rid, "tools/call", {"name": "slow", "_meta": {"progressToken": token}})


def call(pb: Playbook, rid: Any = 7, token: Any = "tok") -> tuple[ConnId, int]:
    """Start a tools/call on a new connection; return (conn, upstream id)."""
    c = pb.conn()
    out = pb.post(c, slow(rid, token))
    return c, upstream_sent(out)[0]["id"]


def resumed(stream: int, after: int, replay: int, state: str = "live") -> LogNote:
    """The log line of a resume by GET + Last-Event-ID."""
    fields = {"stream": stream, "after": after, "replay": replay, "state": state}
    return LogNote("stream_resumed", fields)


# The seed's stream protocol (D2): a session whose client declared capabilities.streams.

SECRET = b"k" * 32
SETTINGS = SessionSettings(token_secret=SECRET, resume_interval_min=2, resume_interval_max=60)


def seeded(**changes: Any) -> Playbook:
    pb = Playbook(settings=dataclasses.replace(SETTINGS, **changes))
    out = pb.initialize({"streams": {}, "elicitation": {}})
    (forwarded,) = upstream_sent(out)
    assert forwarded["params"]["capabilities"] == {"elicitation": {}}, "streams stays here"
    assert pb.session.speaks_streams
    return pb


def seeded_call(pb: Playbook, rid: Any = 7) -> tuple[ConnId, int, dict[str, Any]]:
    """A tools/call; returns its connection, upstream id and the stream/create params."""
    c = pb.conn()
    out = pb.post(c, slow(rid))
    (create,) = [m for m in payloads(out, c) if m.get("method") == "notifications/stream/create"]
    return c, upstream_sent(out)[0]["id"], create["params"]["stream"]


def local(
    pb: Playbook, method: str, params: dict[str, Any], *, rid: Any = 99, lei: str | None = None
) -> tuple[ConnId, list[Command]]:
    c = pb.conn()
    out = pb.feed(ClientPost(c, [jsonrpc.classify(req(rid, method, params))], last_event_id=lei))
    assert not upstream_sent(out), "stream/* is never forwarded upstream"
    return c, out


def ref_of(number: int) -> dict[str, Any]:
    """What a stream/poll or stream/resume names stream ``number`` with."""
    stream_id = f"ep0ch.{number}"
    return {"streamId": stream_id, "resumeToken": resume_token_for(SECRET, "sid", stream_id)}


def create(number: int, request_id: Any, *, flat: bool = False) -> dict[str, Any]:
    """notifications/stream/create of stream ``number`` (resumeInterval as in SETTINGS)."""
    fields = {**ref_of(number), "requestId": request_id, "resumeInterval": {"min": 2, "max": 60}}
    return note("notifications/stream/create", fields if flat else {"stream": fields})


def end(number: int) -> dict[str, Any]:
    return note("notifications/stream/end", {"streamId": f"ep0ch.{number}"})


def polled(pending: bool, has_request: bool = False, status: str = "live") -> dict[str, Any]:
    """The answer to stream/poll request 99 about stream 2."""
    result = {
        "streamId": "ep0ch.2",
        "status": status,
        "pendingMessages": pending,
        "hasRequest": has_request,
        "hasError": False,
    }
    return ok(99, result)


def early(method: str, after_seconds: float = 0.0) -> LogNote:
    """Stream 2 resumed or polled sooner than resumeInterval.min after it was touched."""
    fields = {"stream": 2, "method": method, "after_seconds": after_seconds}
    return LogNote("resumed_early", fields)


def seeded_resumed(after: int) -> LogNote:
    """Stream 2 taken up by a stream/resume after position ``after``."""
    return LogNote("stream_resumed", {"stream": 2, "after": after})


def taken_up(conn: ConnId, after: int, attaches: int) -> list[Any]:
    """A stream/resume taking stream 2 up on ``conn`` after position ``after`` (its
    ``attaches``-th attachment), sooner than resumeInterval.min: what comes before the
    replay."""
    return [
        StartSse(conn),
        early("stream/resume"),
        seeded_resumed(after),
        prime(conn, f"ep0ch.2.{after}.{attaches}"),
    ]


def served(conn: ConnId, number: int, answer: dict[str, Any], *logged: LogNote) -> list[Any]:
    """A stream/* request answered on its own stream ``number``, which it opens (the
    ``logged`` lines noted), primes, carries ``answer`` on and closes."""
    return [
        StartSse(conn),
        *logged,
        prime(conn, f"ep0ch.{number}.0.1"),
        sse(conn, f"ep0ch.{number}.1", answer),
        CloseClient(conn),
    ]
