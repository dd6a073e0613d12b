"""The calls running on one pooled upstream session: id rewriting and routing, pure.

A pooled legacy session serves many modern requests at once, each a :class:`Call`. The
table numbers their upstream ids itself (:class:`~proxy.core.idmap.IdMap`, the same map a
legacy session uses: the server's ids and the clients' never mix) and routes what the
server sends to the call it belongs to (DESIGN.md §5):

1. a response by its id (a proxy-own request's answer goes back to the proxy);
2. ``notifications/progress`` by its token, which the proxy rewrote to the request's
   upstream id (two clients' tokens may collide on one session);
3. over Streamable HTTP, what came on a request's response stream to that request, and
   what came on the session's GET stream to none;
4. over stdio, HTTP+SSE and WebSocket, a server→client request or log message to the only
   request in flight, else to the only one that may ask (a list cannot have asked).

A server request nobody can be named the owner of is refused (the server gets an error);
``ping`` is answered; list-changed and resource-updated notifications are broadcast.

``CallTable.handle(event) -> list[Command]``: the adapter (:mod:`proxy.modern.pool`) sends,
signals and resolves as the commands say, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.core import jsonrpc
from proxy.core.call import ASKING, INPUT_METHODS, Call
from proxy.core.events import SendUpstream
from proxy.core.handshake import HandshakeStep
from proxy.core.idmap import IdMap
from proxy.core.jsonrpc import Kind, Message
from proxy.core.protocol import INTERNAL_ERROR, METHOD_NOT_FOUND

BROADCAST = frozenset(
    {
        "notifications/tools/list_changed",
        "notifications/prompts/list_changed",
        "notifications/resources/list_changed",
        "notifications/resources/updated",
    }
)
_OWN = 0  # the IdMap "stream" of the proxy's own requests; calls are numbered from 1
_NO_OWNER = "mcp-resume-proxy: no single request in flight that this belongs to"


# ---------------------------------------------------------------- events (adapter → table)
@dataclass(frozen=True, slots=True)
class BeginCall:
    """Send ``call``'s request with ``params`` (already stripped of the proxy's own)."""

    call: Call
    params: dict[str, Any]


@dataclass(frozen=True, slots=True)
class AskServer:
    """A request of the proxy's own (initialize, ping, tools/list, resources/subscribe);
    ``handshake`` marks the proxy's ``initialize`` for the transport."""

    method: str
    params: dict[str, Any]
    handshake: HandshakeStep | None = None


@dataclass(frozen=True, slots=True)
class ServerMessage:
    """One message from the server; ``origin``: the upstream id of the request whose
    HTTP response stream carried it, when the transport knows."""

    msg: Message
    origin: int | None = None


@dataclass(frozen=True, slots=True)
class AnswerInput:
    call: Call
    responses: Any


@dataclass(frozen=True, slots=True)
class RejectInput:
    call: Call
    key: str
    error: Any


@dataclass(frozen=True, slots=True)
class CancelCall:
    call: Call
    reason: str


@dataclass(frozen=True, slots=True)
class FailCall:
    call: Call
    error: dict[str, Any]


@dataclass(frozen=True, slots=True)
class SessionLost:
    """The upstream session ended: every call on it fails."""

    reason: str


TableEvent = (
    BeginCall
    | AskServer
    | ServerMessage
    | AnswerInput
    | RejectInput
    | CancelCall
    | FailCall
    | SessionLost
)


# ---------------------------------------------------------------- commands (table → adapter)
@dataclass(frozen=True, slots=True)
class CallChanged:
    """Wake whoever watches ``call``: its status, questions or notes changed."""

    call: Call


@dataclass(frozen=True, slots=True)
class CallReleased:
    """``call`` no longer runs on this session (answered, cancelled, failed)."""

    call: Call


@dataclass(frozen=True, slots=True)
class AwaitAnswer:
    """The proxy's own request went out with ``request_id``: expect its answer."""

    request_id: int


@dataclass(frozen=True, slots=True)
class OwnAnswer:
    """The answer to the proxy's own request ``request_id``."""

    request_id: int
    msg: Message


@dataclass(frozen=True, slots=True)
class Broadcast:
    """A notification for every listener, not for one call."""

    msg: Message


@dataclass(frozen=True, slots=True)
class Idle:
    """The last call on this session was released."""


TableCommand = (
    SendUpstream | CallChanged | CallReleased | AwaitAnswer | OwnAnswer | Broadcast | Idle
)


def _send(message: dict[str, Any]) -> SendUpstream:
    return SendUpstream(jsonrpc.encode(message))


class CallTable:
    """The calls in flight on one pooled upstream session."""

    def __init__(self, *, tied_by_stream: bool) -> None:
        # Streamable HTTP says which request a server message belongs to (the response
        # stream it came on); on stdio, HTTP+SSE and WebSocket only the timing can.
        self.tied_by_stream = tied_by_stream
        self._ids = IdMap()
        self._calls: dict[int, Call] = {}  # IdMap stream number → call
        self._numbers = 1
        self.lost: str | None = None

    def __len__(self) -> int:
        """How many calls run here."""
        return len(self._calls)

    @property
    def asking(self) -> int:
        """Calls in flight that may make the server ask the client something."""
        return sum(1 for call in self._calls.values() if call.exclusive)

    def calls(self) -> list[Call]:
        return list(self._calls.values())

    def handle(self, event: TableEvent) -> list[TableCommand]:
        if type(event) is ServerMessage:  # by far the most frequent: no match, no wrapper
            return self.from_server(event.msg, event.origin)
        out: list[TableCommand] = []
        match event:
            case BeginCall(call, params):
                self._begin(call, params, out)
            case AskServer(method, params, handshake):
                request_id = self._ids.add_client_request(None, method, _OWN, None)
                out.append(AwaitAnswer(request_id))
                request = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
                out.append(SendUpstream(jsonrpc.encode(request), handshake))
            case AnswerInput(call, responses):
                self._apply(call, *call.answer(responses), out)
            case RejectInput(call, key, error):
                self._apply(call, *call.reject(key, error), out)
            case CancelCall(call, reason):
                self._apply(call, *call.cancel(reason), out)
            case FailCall(call, error):
                self._apply(call, *call.fail(error), out)
            case SessionLost(reason):
                self._lose(reason, out)
        return out

    # ------------------------------------------------------------------ calls
    def _begin(self, call: Call, params: dict[str, Any], out: list[TableCommand]) -> None:
        if self.lost is not None:
            if call.lose(f"the MCP server session ended: {self.lost}"):
                out.append(CallChanged(call))
            return
        number = self._numbers
        self._numbers += 1
        upstream_id = self._ids.add_client_request(None, call.method, number, None)
        call.upstream_id = upstream_id
        self._calls[number] = call
        if call.client.progress_token is not None:
            meta = dict(params.get("_meta") or {})
            meta["progressToken"] = self._ids.own_progress_token(upstream_id)
            params = {**params, "_meta": meta}
        request = {"jsonrpc": "2.0", "id": upstream_id, "method": call.method, "params": params}
        out.append(_send(request))

    def _apply(
        self, call: Call, changed: bool, messages: list[dict[str, Any]], out: list[TableCommand]
    ) -> None:
        """Carry out one of ``call``'s moves: its messages to the server, then the wake-up."""
        if self.lost is None:
            out.extend(_send(message) for message in messages)
        if changed:
            out.append(CallChanged(call))
        if call.done:
            self._release(call, out)

    def _release(self, call: Call, out: list[TableCommand]) -> None:
        upstream_id = call.upstream_id
        if upstream_id is None or self._ids.pending(upstream_id) is None:
            return
        number = self._ids.finish(upstream_id).stream
        if self._calls.pop(number, None) is None:
            return
        out.append(CallReleased(call))
        if not self._calls:
            out.append(Idle())

    def _lose(self, reason: str, out: list[TableCommand]) -> None:
        if self.lost is not None:
            return
        self.lost = reason
        for call in list(self._calls.values()):
            if call.lose(f"the MCP server session ended: {reason}"):
                out.append(CallChanged(call))
            out.append(CallReleased(call))
        self._calls.clear()

    # ------------------------------------------------------------------ from the server
    def from_server(self, msg: Message, origin: int | None = None) -> list[TableCommand]:
        """``handle(ServerMessage(msg, origin))``, without the wrapper (the hot path)."""
        raw = msg.raw
        if raw.get("method") == "notifications/progress" and msg.kind is Kind.NOTIFICATION:
            params = raw.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            number = self._ids.stream_of_progress(token)
            call = self._calls.get(number) if number is not None else None
            return [CallChanged(call)] if call is not None and call.notify(msg) else []
        out: list[TableCommand] = []
        self._from_server(msg, origin, out)
        return out

    def _from_server(self, msg: Message, origin: int | None, out: list[TableCommand]) -> None:
        if msg.kind is Kind.RESPONSE:
            pending = self._ids.pending(msg.id)  # plain ints only: ``true`` is not call 1
            if pending is None:
                return
            if pending.stream == _OWN:
                self._ids.finish(msg.id)
                out.append(OwnAnswer(msg.id, msg))
                return
            call = self._calls.get(pending.stream)
            if call is not None and call.respond(msg):
                out.append(CallChanged(call))
                self._release(call, out)
            return
        method = msg.method or ""
        if msg.kind is Kind.REQUEST:
            self._server_request(msg, method, origin, out)
            return
        if method in BROADCAST:
            out.append(Broadcast(msg))
            return
        call = self._owner(origin)  # (progress was routed by its token in from_server)
        if call is not None and call.notify(msg):
            out.append(CallChanged(call))

    def _server_request(
        self, msg: Message, method: str, origin: int | None, out: list[TableCommand]
    ) -> None:
        if method == "ping":
            out.append(_send(jsonrpc.ok_response(msg.id, {})))
            return
        if method not in INPUT_METHODS:
            message = f"Method not found: {method}"
            out.append(_send(jsonrpc.error_response(msg.id, METHOD_NOT_FOUND, message)))
            return
        call = self._owner(origin)
        if call is None:
            out.append(_send(jsonrpc.error_response(msg.id, INTERNAL_ERROR, _NO_OWNER)))
            return
        changed, messages = call.ask(msg)
        out.extend(_send(message) for message in messages)
        if changed:
            out.append(CallChanged(call))

    def _owner(self, origin: int | None) -> Call | None:
        """Rules 3 and 4 for a server message that names no request of its own."""
        if origin is not None:  # rule 3: it came on that request's response stream
            pending = self._ids.pending(origin)
            return None if pending is None else self._calls.get(pending.stream)
        if self.tied_by_stream:
            return None  # over Streamable HTTP, what is a call's came on its stream
        if len(self._calls) == 1:  # rule 4 (the proxy's own requests never ask)
            return next(iter(self._calls.values()))
        asking = [call for call in self._calls.values() if call.method in ASKING]
        return asking[0] if len(asking) == 1 else None  # a list cannot have asked
