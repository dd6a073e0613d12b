"""What a session does with its server's messages: route each to a stream, rewrite its
ids, log it (a part of :class:`~proxy.core.session.Session`).

Routing (DESIGN.md §5), upstream → stream: a response goes to the stream of its request;
``notifications/progress`` to the stream of the request that carried its
``progressToken``; any other server→client message to the stream of the only request in
flight if exactly one is (or, over HTTP, to the stream of the request whose response
carried it), else to the standalone stream (0). Ids are rewritten at the boundary
(:mod:`proxy.core.idmap`).

Every message for the client is appended to its stream's log *before* a command to send
it is returned, so what reaches the wire is always a prefix of what is stored
(DESIGN.md §3).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from proxy.core import jsonrpc, legacy_tasks, seed
from proxy.core.delivery import Delivery
from proxy.core.eventid import format_event_id
from proxy.core.events import Command, LogNote
from proxy.core.idmap import IdMap
from proxy.core.jsonrpc import Kind, Message
from proxy.core.lifetime import Lifetime
from proxy.core.schedule import Schedule
from proxy.core.session_state import STANDALONE, SessionSettings, StreamSlot, StreamTable
from proxy.core.stream import Mark
from proxy.core.tool_policy import FILTERED_LISTS, View

# (Enum members read as module constants: through the class, 3.11's ``EnumType.__getattr__``
# hook makes each read cost ~25 times a global's, and these are read per event.)
_NOTIFICATION = Kind.NOTIFICATION
_REQUEST = Kind.REQUEST
_RESPONSE = Kind.RESPONSE
_UNMARKED = Mark.NONE


class UpstreamSide:
    """The upstream side of :class:`~proxy.core.session.Session`, which sets up these
    attributes and implements the methods declared below."""

    epoch: str
    settings: SessionSettings
    offers_tasks: bool
    delivery: Delivery
    lifetime: Lifetime
    schedule: Schedule
    _ids: IdMap
    _streams: StreamTable
    _now: float
    # While a run of messages is taken (:meth:`_on_upstream_run`): the streams they were
    # logged on, not yet flushed to their connections (None: flush each at once).
    _touched: dict[int, StreamSlot] | None = None

    if TYPE_CHECKING:  # the session's own, for the type checker

        @property
        def view(self) -> View: ...
        @property
        def protocol_version(self) -> str | None: ...
        @protocol_version.setter
        def protocol_version(self, version: str | None) -> None: ...
        def finish_request(self, upstream_id: int, out: list[Command]) -> None: ...

    def _on_upstream_run(self, msgs: Sequence[Message], out: list[Command]) -> None:
        """A turn's messages (:class:`~proxy.core.events.UpstreamMessages`), each taken as
        :meth:`_on_upstream` takes it, except that the streams they are logged on are
        flushed to their connections once, after the last: one run of events per
        connection, not one command each. A response (it may complete its stream, close or
        end the session) has everything before it flushed first and is flushed at once;
        a stream whose next event would push an unsent one out of its log is flushed
        first (a connection never misses an event it would have been sent)."""
        touched: dict[int, StreamSlot] = {}
        lifetime, schedule = self.lifetime, self.schedule
        self._touched = touched
        try:
            for msg in msgs:
                if lifetime.forgotten:
                    break
                kind = msg.kind
                if kind is _RESPONSE:
                    self._touched = None
                    self._flush_touched(touched, out)
                    schedule.moved = True
                    self._upstream_response(msg, out)
                    self._touched = touched
                    continue
                if kind is _REQUEST:
                    schedule.moved = True
                self._on_upstream(msg, None, out)
        finally:
            self._touched = None
        self._flush_touched(touched, out)

    def _flush_touched(self, touched: dict[int, StreamSlot], out: list[Command]) -> None:
        """Hand each stream of ``touched`` still in the session to its connection."""
        streams, now = self._streams, self._now
        for number, stream in touched.items():
            if streams.get(number) is stream:
                self.delivery.flush(stream, now, out)
        touched.clear()

    def _on_upstream(self, msg: Message, origin: int | None, out: list[Command]) -> None:
        kind, raw = msg.kind, msg.raw
        if kind is _NOTIFICATION and raw["method"] == "notifications/progress":
            params = raw.get("params")
            token = params.get("progressToken") if type(params) is dict else None
            number = self._ids.stream_of_progress(token)
            if number is None:
                number = self._route_unrelated(origin)
            # (a notification has no id: at most an error mark, when it has those keys)
            mark = seed.poll_mark(raw) if "error" in raw or "result" in raw else _UNMARKED
            self._append_bytes(number, msg.encoded(), mark, out)
        elif kind is _RESPONSE:
            self._upstream_response(msg, out)
        elif kind is _REQUEST:
            downstream_id = self._ids.add_server_request(msg.id)
            self.append(self._route_unrelated(origin), jsonrpc.with_id(msg, downstream_id), out)
        elif msg.method == "notifications/cancelled":
            # The server gave up one of its own requests: rewrite to our downstream id.
            server_id = msg.params.get("requestId")
            downstream = self._ids.cancel_server_request(server_id)
            if downstream is None:
                out.append(LogNote("upstream_cancel_unmatched", {"request_id": server_id}))
                return
            rewritten = jsonrpc.with_param(msg, "requestId", downstream)
            self.append(self._route_unrelated(origin), rewritten, out)
        elif msg.method == "notifications/resources/updated" and not self.view.shows_update(
            msg.params
        ):
            return  # a resource this client may not see (docs/tools.md)
        else:
            payload, mark = msg.encoded(), seed.poll_mark(msg.raw)
            self._append_bytes(self._route_unrelated(origin), payload, mark, out)

    def _upstream_response(self, msg: Message, out: list[Command]) -> None:
        rid = msg.id
        pending = self._ids.pending(rid)
        if pending is None:
            out.append(LogNote("upstream_response_unmatched", {"upstream_id": rid}))
            return
        if pending.method == "initialize" and not msg.is_error:
            result = msg.raw.get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self.protocol_version = version
            if self.offers_tasks:  # the proxy offers them unless the server does itself
                msg, self.offers_tasks = legacy_tasks.offer_tasks(msg)
        elif pending.method in FILTERED_LISTS and not msg.is_error:
            view = self.view
            if not view.inert:
                result = view.answer(pending.method, msg.raw.get("result"))
                msg = jsonrpc.classify({**msg.raw, "result": result})
            if self.offers_tasks and pending.method == "tools/list":
                msg = legacy_tasks.tools_may_be_tasks(msg)
        self.append(pending.stream, jsonrpc.with_id(msg, pending.client_id), out)
        self.finish_request(rid, out)
        if pending.method == "initialize" and msg.is_error:
            # No session was established: do not keep a server process for it.
            self.lifetime.close("initialize failed", self._now, out)

    def _route_unrelated(self, origin: int | None = None) -> int:
        """Rule 3: what came on a request's HTTP response goes to its stream; rule 4:
        else the only request in flight's stream, else the standalone stream."""
        if origin is not None:
            pending = self._ids.pending(origin)
            if pending is not None and pending.stream in self._streams:
                return pending.stream
        number = self._ids.only_stream_in_flight()
        return STANDALONE if number is None else number

    # ------------------------------------------------------------------ logging
    def append(self, number: int, obj: dict[str, Any], out: list[Command]) -> None:
        self._append_bytes(number, jsonrpc.encode(obj), seed.poll_mark(obj), out)

    def _append_bytes(self, number: int, payload: bytes, mark: Mark, out: list[Command]) -> None:
        """Log one message (``mark``: what a poll reports of it, from its parsed form)."""
        stream = self._streams[number]
        touched = self._touched
        if touched is None:
            if stream.stream_id is not None:
                payload = self.stamped(stream, payload)
            stream.log.append(payload, mark)
            self.delivery.flush(stream, self._now, out)
            return
        if stream.stream_id is not None:
            payload = self.stamped(stream, payload)
        log = stream.log
        if stream.conn is not None and not log.fits(len(payload)):
            self.delivery.flush(stream, self._now, out)  # before it drops what is unsent
        log.append(payload, mark)
        touched[number] = stream

    def stamped(self, stream: StreamSlot, payload: bytes) -> bytes:
        """With ``streams.event_id_in_meta``: the id the payload gets, in its ``_meta``."""
        if stream.stream_id is None or not self.settings.event_id_in_meta:
            return payload
        next_id = format_event_id(self.epoch, stream.number, stream.log.last_seq + 1)
        return seed.with_event_id(payload, next_id)
