"""What every upstream transport offers the runtime, and the parts they share.

One :class:`Upstream` per client session (DESIGN.md §2), made from an
:class:`UpstreamContext` (its one constructor argument). The runtime calls ``start``,
``send``, ``pause``/``resume`` and ``stop``; the transport calls back ``on_message(msg,
origin)`` for each server message (or ``on_messages`` with a turn's, when given) and
``on_closed(reason)`` once, when the upstream session is over for good (the client
session then ends: in-flight requests get errors from the core).

Contract for network transports (HTTP, legacy SSE, WebSocket):

- ``send`` never blocks and never raises: it queues, in order. Payloads are JSON-RPC
  messages whose ids the core has already rewritten (requests carry int ids).
- A request that cannot be delivered, or whose answer is lost with its connection, gets
  a JSON-RPC error response synthesized by the transport (:meth:`InFlight.fail`), logged
  once with the session prefix. Nothing waits forever.
- A lost connection is re-established with :class:`~proxy.backoff.Backoff`; while a transport is
  failing it reports so to the shared :class:`UpstreamHealth` (``/healthz`` shows it).
- ``stop`` ends every task and connection the transport owns and returns once they
  are gone; it also says goodbye where the protocol has a way (HTTP ``DELETE``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import structlog

from proxy.backoff import Backoff
from proxy.config_upstream import UpstreamConfig
from proxy.core import jsonrpc
from proxy.core.errors import ProxyError, error_message
from proxy.core.handshake import HandshakeStep
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import SERVER_ERROR

log = structlog.get_logger("proxy.upstream")

OnMessage = Callable[[Message, "int | None"], None]
"""``on_message(msg, origin)``: origin is the upstream request id whose response carried
``msg`` (DESIGN §5 rule 3), or None."""
OnMessages = Callable[[Sequence[Message]], None]
"""``on_messages(msgs)``: messages read in one turn of the event loop, in order, with no
origin; the same as ``on_message(msg, None)`` for each, the core's work shared."""
OnClosed = Callable[[str], None]


class Upstream(Protocol):
    """One upstream MCP session, seen from the runtime."""

    def __init__(self, context: UpstreamContext) -> None: ...

    @property
    def pending_bytes(self) -> int:
        """Queued for the server, not yet taken by it (503 upstream_busy)."""
        ...

    @property
    def pid(self) -> int | None: ...

    def describe(self) -> str:
        """For logs: a command line or a URL (never credentials)."""
        ...

    async def start(self) -> None:
        """Connect or spawn; raise ``ProxyError`` (502) if that cannot be done now."""
        ...

    def send(self, payload: bytes, handshake: HandshakeStep | None = None) -> None:
        """Queue one message; ``handshake`` marks the client's own ``initialize`` and
        ``notifications/initialized`` (a transport replays them on a new session)."""
        ...

    def pause(self) -> None:
        """Stop reading from the server (overflow: block); best effort for networks."""
        ...

    def resume(self) -> None: ...

    async def stop(self) -> None: ...


@runtime_checkable
class Listening(Protocol):
    """An upstream that opens its stream of server-initiated messages only once the client
    listens (Streamable HTTP, ``upstream.standalone_stream: on_client_get``)."""

    def listen_standalone(self) -> None:
        """The client opened a GET (or a /ws socket): listen from now on."""
        ...


class UpstreamHealth:
    """The process-wide view of the upstream's health, for ``/healthz``.

    Transports report successes and failures; the latest one wins. A failure is logged
    by the transport that saw it, not here.
    """

    def __init__(self) -> None:
        self.state = "ok"
        self.last_error: str | None = None
        self.failing_since: float | None = None
        self.restarts = 0  # stdio servers started again after exiting on their own
        self.crash_loop: str | None = None  # why, while crash_loop_until is ahead
        self.crash_loop_until = 0.0
        # A server that cannot be started is not tried again for every client at once.
        self._start_backoff = Backoff(first=0.5, cap=30.0)
        self.not_before = 0.0  # monotonic: no new start before this

    def ok(self) -> None:
        self.state = "ok"
        self.failing_since = None

    def started(self) -> None:
        """A server started and answered: starts are no longer held back."""
        self.ok()
        self._start_backoff.reset()
        self.not_before = 0.0

    def start_failed(self, error: str) -> None:
        self.failing(error)
        self.not_before = time.monotonic() + self._start_backoff.next_delay()

    def crash_looping(self, why: str, window: float) -> None:
        self.failing(why)
        self.crash_loop = why
        self.crash_loop_until = time.monotonic() + window

    def crash_loop_now(self) -> str | None:
        """Why the upstream counts as crash-looping right now (for ``/readyz``), or None."""
        if self.crash_loop is not None and time.monotonic() < self.crash_loop_until:
            return self.crash_loop
        return None

    def failing(self, error: str) -> None:
        if self.state != "failing":
            self.failing_since = time.time()
        self.state = "failing"
        self.last_error = error

    def as_dict(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "last_error": self.last_error,
            "failing_since": self.failing_since,
            "restarts": self.restarts,
            "crash_loop": self.crash_loop_now(),
        }


@dataclass(frozen=True, slots=True)
class UpstreamContext:
    """What a transport is given for one client session: the upstream to talk to, the
    session it serves, where server messages go, and the process-wide health."""

    config: UpstreamConfig
    session_id: str = field(repr=False)  # a bearer secret: only :attr:`label` is logged
    on_message: OnMessage
    on_closed: OnClosed
    health: UpstreamHealth = field(default_factory=UpstreamHealth)
    # Given: a stdio server that exits on its own is started again for this session
    # (``upstream.restart``); called once per restart, before the new process starts.
    on_restarted: Callable[[str], None] | None = None
    # The configured server's name (its OAuth tokens, and errors that tell what to do).
    server: str = "default"
    # Given: a transport that reads many messages at once (stdio) hands each turn's over
    # here, in one call, instead of one ``on_message`` each.
    on_messages: OnMessages | None = None

    @property
    def label(self) -> str:
        """The session in logs and task names: a prefix, since session ids are secrets."""
        return self.session_id[:8]


def messages_of(
    data: bytes | str, skip: Callable[[bytes | str, ProxyError], None]
) -> list[Message]:
    """The JSON-RPC messages of one unit of server output (a stdio line, an SSE event's
    data, a text frame): one message, or a batch (2024-11-05 and 2025-03-26 allow them).

    What is not JSON-RPC is handed to ``skip`` and left out: the session goes on. A single
    message read as bytes keeps them as its wire form (:func:`jsonrpc.wire_of`).
    """
    try:
        obj = jsonrpc.decode(data)
    except ProxyError as exc:
        skip(data, exc)
        return []
    messages: list[Message] = []
    for item in obj if isinstance(obj, list) else [obj]:
        # Not a batch: data is this message, and its wire form.
        wire = jsonrpc.wire_of(data) if item is obj and isinstance(data, bytes) else None
        try:
            msg = jsonrpc.classify(item, wire)
        except ProxyError as exc:
            skip(data, exc)
            continue
        messages.append(msg)
    return messages


class InFlight:
    """The requests sent upstream and not yet answered, so that a transport can answer
    them with an error when their answer can no longer come."""

    def __init__(self, on_message: OnMessage, session: str) -> None:
        self._on_message = on_message
        self._session = session
        self.ids: dict[Any, str] = {}  # upstream request id -> method

    def sent(self, payload: bytes) -> Any:
        """Note a payload going upstream; return its request id if it is a request."""
        try:
            msg = jsonrpc.classify(jsonrpc.decode(payload))
        except Exception:  # the core only sends what it parsed: never expected
            return None
        if msg.kind is Kind.REQUEST:
            self.ids[msg.id] = msg.method or ""
            return msg.id
        return None

    def answered(self, msg: Message) -> None:
        if msg.kind is Kind.RESPONSE:
            self.ids.pop(msg.id, None)

    def fail(self, request_id: Any, why: str, data: Any = None) -> None:
        """Answer one request with an error (once): its answer can no longer come.
        ``data``: the error's (e.g. upstream_unauthorized's, proxy/upstream/oauth.py)."""
        method = self.ids.pop(request_id, None)
        if method is None:
            return
        log.warning("upstream_request_failed", session=self._session, method=method, error=why)
        # -32000, with no data.reason unless given, as this answer has always been written.
        error = error_message(request_id, SERVER_ERROR, why, data)
        self._on_message(jsonrpc.classify(error), None)

    def fail_all(self, why: str) -> None:
        for request_id in list(self.ids):
            self.fail(request_id, why)
