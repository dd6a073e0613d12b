"""proxy/downstream/fast_call.py: once the session was fed, a fast POST whose answer is a
stream writes it itself (its head and events, each batch only once the store has it, the
call going on when the client goes); a fenced session's answer is the empty ``200``
aiohttp's path gives, handed off. In process, with a fake runner, store and connection."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from typing import Any

from aiohttp import web

from proxy.client_conn import ClientConn, CloseMarker
from proxy.config import Config
from proxy.core import jsonrpc
from proxy.core.events import ConnId
from proxy.core.sse import encode_event
from proxy.downstream.conn_response import ConnResponder
from proxy.downstream.fast_call import FastCall
from proxy.downstream.handoff import Handoff
from proxy.metrics import Metrics
from proxy.store.fencing import Fence

SESSION = "s" * 32
BODY = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"flood"}}'
PRIMING = encode_event(None, event_id="e.1.0")
NOTICE = encode_event(b'{"jsonrpc":"2.0","method":"notifications/progress"}', event_id="e.1.1")
LATER = encode_event(b'{"jsonrpc":"2.0","method":"notifications/progress"}', event_id="e.1.2")
ANSWER = encode_event(b'{"jsonrpc":"2.0","id":1,"result":{}}', event_id="e.1.3")
DEADLINE = 10.0  # every wait below ends on a condition long before


class Transport:
    """What the call writes, as the client would read it."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.closing = False

    def write(self, data: bytes) -> None:
        assert not self.closing, "written after the connection closed"
        self.data += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True


class Wire:
    def __init__(self) -> None:
        self.said: list[str] = []

    async def drained(self) -> None:
        return None

    def streaming(self) -> None:
        self.said.append("streaming")

    def idle(self) -> None:
        self.said.append("idle")


class Store:
    """The persister as :meth:`ClientConn.stored` asks it: a batch lands when told."""

    def __init__(self) -> None:
        self.committed = 0
        self.fence = Fence("test")  # (a conn is fenced once its token goes stale)
        self._changed = asyncio.Event()
        self.at_once = False  # land_now commits the batch asked for (a store on the loop)
        self.when: list[tuple[int, Callable[[bool], None]]] = []  # Persister.when_landed

    def landed(self, ticket: int, lane: str = "") -> bool:
        return self.committed >= ticket

    def land_now(self, ticket: int, lane: str = "") -> bool:
        if self.at_once:
            self.land(ticket)
        return self.landed(ticket)

    async def wait(self, ticket: int, *, hurry: bool = False, lane: str = "") -> None:
        while not self.landed(ticket):
            await self._changed.wait()

    def when_landed(self, ticket: int, lane: str, then: Callable[[bool], None]) -> None:
        assert not self.landed(ticket)
        self.when.append((ticket, then))

    def land(self, ticket: int) -> None:
        self.committed = ticket
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        pending, self.when = self.when, []
        for entry in pending:  # (as Persister._wake: at once, in the landing's turn)
            if self.landed(entry[0]):
                entry[1](True)
            else:
                self.when.append(entry)

    def close(self) -> None:
        pending, self.when = self.when, []
        for _, then in pending:
            then(False)


class Runner:
    """A session that queues what ``answer`` puts on the connection when fed."""

    session_id = SESSION

    def __init__(self, store: Store, answer: Callable[[ClientConn], None]) -> None:
        self.store = store
        self.answer = answer
        self.conn: ClientConn | None = None
        self.gone: list[ClientConn] = []

    def open_conn(self, framing: str = "sse") -> ClientConn:
        self.conn = ClientConn(ConnId(1), framing, gate=self.store)  # type: ignore[arg-type]
        return self.conn

    def feed(self, event: object) -> None:
        assert self.conn is not None
        self.conn.outcome = "sse"
        self.answer(self.conn)

    def conn_gone(self, conn: ClientConn) -> None:
        self.gone.append(conn)


def queue(conn: ClientConn, ticket: int, *items: bytes | CloseMarker) -> None:
    """What the core queues, noted for store batch ``ticket``."""
    conn.ticket = ticket
    for item in items:
        conn.queue.put_nowait(item)


class Endpoint:
    def __init__(self) -> None:
        self.metrics = Metrics()
        self.responder = ConnResponder(Config(), self.metrics)


class Call:
    """A fast call over the fakes, started; ``done`` says how it ended."""

    def __init__(
        self,
        answer: Callable[[ClientConn], None],
        wire: Wire | None = None,
        store: Store | None = None,
    ) -> None:
        self.store = Store() if store is None else store
        self.runner = Runner(self.store, answer)
        self.transport = Transport()
        self.handoffs: dict[object, Handoff] = {}
        self.done: list[bool] = []
        self.finished = asyncio.Event()
        messages, _ = jsonrpc.parse_body(BODY)
        self.call = FastCall(
            self.handoffs,
            Endpoint(),
            self.transport,  # type: ignore[arg-type]
            contextvars.copy_context(),
            self.runner,  # type: ignore[arg-type]
            messages,
            None,
            "tools/call",
        )
        self.call.start(self._done, wire)

    def _done(self, answered: bool) -> None:
        self.done.append(answered)
        self.finished.set()

    @property
    def conn(self) -> ClientConn:
        assert self.runner.conn is not None
        return self.runner.conn

    async def ended(self) -> None:
        async with asyncio.timeout(DEADLINE):
            await self.finished.wait()


async def turns(n: int = 5) -> None:
    """Let the loop run the call's callbacks and task steps (no time passes)."""
    for _ in range(n):
        await asyncio.sleep(0)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def head_and_body(raw: bytes) -> tuple[bytes, bytes]:
    head, _, body = bytes(raw).partition(b"\r\n\r\n")
    return head, body


async def test_a_stream_is_written_here_each_batch_once_stored() -> None:
    wire = Wire()
    call = Call(lambda conn: queue(conn, 1, PRIMING, NOTICE), wire)
    await turns()
    assert not call.transport.data  # batch 1 is not in the store yet: nothing on the wire
    call.store.land(1)
    await turns()
    head, body = head_and_body(call.transport.data)
    assert head.startswith(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
    assert f"Mcp-Session-Id: {SESSION}".encode() in head
    assert body == chunk(PRIMING + NOTICE)  # the held events, as one chunk
    queue(call.conn, 2, LATER, ANSWER, CloseMarker(None))
    await turns()
    assert body == head_and_body(call.transport.data)[1]  # batch 2 not stored yet
    call.store.land(2)
    await call.ended()
    assert head_and_body(call.transport.data)[1] == body + chunk(LATER + ANSWER) + b"0\r\n\r\n"
    assert call.done == [True] and not call.handoffs  # answered here, not by aiohttp
    assert call.runner.gone == [call.conn] and not call.transport.closing
    assert wire.said == ["streaming", "idle"]  # aiohttp's idle timer: off, then from the end


async def test_a_client_gone_mid_stream_leaves_the_call_running() -> None:
    call = Call(lambda conn: queue(conn, 0, PRIMING, NOTICE), Wire())
    await turns()
    assert call.transport.data.endswith(chunk(PRIMING + NOTICE))
    written = len(call.transport.data)
    call.transport.close()
    call.call.lost()  # (the guard's connection_lost)
    await call.ended()
    assert call.done == [True] and call.runner.gone == [call.conn]
    assert len(call.transport.data) == written
    # The session goes on queueing for the connection until it hears it is gone; what it
    # logged meanwhile a GET with Last-Event-ID resumes (tests/downstream/test_fast_post.py).
    assert not call.conn.closed


async def test_a_stream_fenced_before_its_batch_landed_ends_empty() -> None:
    call = Call(lambda conn: queue(conn, 1, PRIMING, NOTICE), Wire())
    await turns()
    call.conn.fence()  # another replica took the session: batch 1 is never written
    call.store.land(1)
    await call.ended()
    head, body = head_and_body(call.transport.data)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and body == b"0\r\n\r\n"
    assert call.done == [True] and call.runner.gone == [call.conn]


async def test_without_a_wire_a_stream_is_handed_off() -> None:
    call = Call(lambda conn: queue(conn, 0, PRIMING, NOTICE))
    await call.ended()
    assert call.done == [False] and list(call.handoffs) == [call.transport]
    assert not call.transport.data and not call.runner.gone  # aiohttp's handler goes on


async def test_a_fenced_answer_is_handed_off_as_an_empty_200() -> None:
    # The whole answer waits for its batch; the session is lost meanwhile: nothing of it
    # is written, and aiohttp's handler of the request answers 200 with no body, as
    # ConnResponder.respond does for a connection gone before anything was written.
    call = Call(lambda conn: queue(conn, 1, PRIMING, ANSWER, CloseMarker(None)), Wire())
    await turns()
    assert not call.done and not call.transport.data
    call.conn.fence()
    call.store.land(1)
    await call.ended()
    assert call.done == [False] and not call.transport.data
    assert call.runner.gone == [call.conn]  # forgotten once, by the fast call
    handoff = call.handoffs.pop(call.transport)
    request: Any = object()  # (the finish of a fenced call reads nothing of it)
    response = await handoff.finish(request)
    assert isinstance(response, web.Response)
    assert response.status == 200 and response.body is None
    assert response.headers["Mcp-Session-Id"] == SESSION
    handoff.abandon()  # (its handoff holds no connection of the session's any more)
    assert call.runner.gone == [call.conn]


async def test_an_answer_already_fenced_is_handed_off_as_an_empty_200() -> None:
    def fenced(conn: ClientConn) -> None:
        queue(conn, 0, PRIMING, ANSWER, CloseMarker(None))
        assert conn.gate is not None
        conn.gate.fence.lost("lease_lapsed")  # (lost before the hold took the answer)

    call = Call(fenced, Wire())
    await call.ended()
    assert call.done == [False] and not call.transport.data
    response = await call.handoffs[call.transport].finish(object())  # type: ignore[arg-type]
    assert response.status == 200 and isinstance(response, web.Response)
    assert response.body is None


async def test_a_whole_answer_whose_batch_lands_at_once_is_written_in_its_own_turn() -> None:
    # A store that commits on the loop (SQLite, synchronous normal): the persister commits
    # the batch the answer waits for when asked (Persister.land_now), and the answer is
    # written there, not by a task a loop turn later.
    store = Store()
    store.at_once = True
    call = Call(lambda conn: queue(conn, 1, PRIMING, ANSWER, CloseMarker(None)), Wire(), store)
    assert store.committed == 1  # (no loop turn has run)
    assert call.done == [True] and not call.handoffs
    head, body = head_and_body(call.transport.data)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and ANSWER in body
    assert call.runner.gone == [call.conn]


async def test_an_answer_whose_commit_at_once_was_refused_is_not_written() -> None:
    # The commit land_now makes is refused (another replica holds the stream): the
    # persister's fencing fences the session's connections before the batch counts as
    # landed, so the answer is handed off as an empty 200, as after a wait.
    conns: list[ClientConn] = []

    class Refusing(Store):
        def land_now(self, ticket: int, lane: str = "") -> bool:
            conns[0].fence()  # (Fence.lost -> SessionRunner.lose, inside the commit)
            self.land(ticket)
            return True

    def answer(conn: ClientConn) -> None:
        conns.append(conn)
        queue(conn, 1, PRIMING, ANSWER, CloseMarker(None))

    call = Call(answer, Wire(), Refusing())
    await call.ended()
    assert call.done == [False] and not call.transport.data
    assert call.runner.gone == [call.conn] and list(call.handoffs) == [call.transport]


async def test_a_whole_answer_is_written_in_the_turn_its_batch_lands() -> None:
    # A store that commits off the loop (Redis): the answer waits for its batch by a
    # callback (Persister.when_landed), and is written when the batch lands, in that
    # callback, not by a task woken a loop turn later.
    call = Call(lambda conn: queue(conn, 1, PRIMING, ANSWER, CloseMarker(None)), Wire())
    await turns()
    assert not call.done and not call.transport.data  # not in the store: not on the wire
    assert [ticket for ticket, _ in call.store.when] == [1]
    call.store.land(1)
    assert call.done == [True] and not call.handoffs  # (no loop turn has run)
    head, body = head_and_body(call.transport.data)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and ANSWER in body
    assert call.runner.gone == [call.conn] and not call.store.when


async def test_an_answer_whose_commit_is_refused_is_not_written() -> None:
    # The commit holding the answer is refused (another replica took the stream): the
    # persister's fencing fences the session's connections before the batch counts as
    # landed; the callback then writes nothing and hands the call off as an empty 200,
    # as the task that awaited the store did.
    call = Call(lambda conn: queue(conn, 1, PRIMING, ANSWER, CloseMarker(None)), Wire())
    await turns()
    assert not call.transport.data
    call.conn.fence()  # (Fence.lost -> SessionRunner.lose, before the landing lets go)
    call.store.land(1)
    assert call.done == [False] and not call.transport.data
    assert call.runner.gone == [call.conn] and list(call.handoffs) == [call.transport]
    response = await call.handoffs[call.transport].finish(object())  # type: ignore[arg-type]
    assert isinstance(response, web.Response) and response.status == 200


async def test_an_answer_never_stored_is_not_written_when_the_store_closes() -> None:
    # The store never took the batch (it failed until the proxy stopped): closing the
    # persister calls the callback with False; nothing is written, the call ends.
    call = Call(lambda conn: queue(conn, 1, PRIMING, ANSWER, CloseMarker(None)), Wire())
    await turns()
    call.store.close()
    assert call.done == [True] and not call.transport.data and not call.handoffs
    assert call.runner.gone == [call.conn]
