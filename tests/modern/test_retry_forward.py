"""The holder's side of a forwarded MRTR retry (proxy/modern/retry_forward.py), in
process: what the façade writes comes back as one Answered (its notes, then its answer,
with the status), or with a relay, each note sent ahead as it is written and the answer
after them; a note the relay could not send, and every one after it, comes with the
answer; what it refuses as a Refused with the request's id, and a body that is not one
request is refused without reaching the façade. (tests/test_replicas_paths.py runs the
whole path on two replicas.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

from proxy.core.era import invalid_params
from proxy.core.jsonrpc import Message, parse_body
from proxy.forwarding import Answered, Forwarded, ForwardedRetry, NotesAhead, Refused
from proxy.forwarding import Reply as ForwardReply
from proxy.modern.reply import Reply
from proxy.modern.retry_forward import forward_retry, retry_headers, serve_retry
from proxy.replicas import Relay, Replicas
from proxy.store.base import StoreError
from proxy.store.memory import MemoryStore

BODY = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t"}}'
HEADERS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": "t"}
NOTE, NOTE2, NOTE3 = (
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": n}}
    for n in (1, 2, 3)
)
ANSWER = {"jsonrpc": "2.0", "id": 7, "result": {"content": []}}


class Facade:
    def __init__(self, answer: dict[str, Any] | None = None, refuse: bool = False) -> None:
        self.answer, self.refuse = answer, refuse
        self.seen: list[tuple[Any, str | None, Mapping[str, str]]] = []

    async def post(
        self, msg: Message, principal: str | None, headers: Mapping[str, str], reply: Reply
    ) -> web.StreamResponse:
        self.seen.append((msg.id, principal, headers))
        if self.refuse:
            raise invalid_params("Invalid params: requestState failed verification")
        await reply.stream([NOTE])
        await reply.stream([])  # a keepalive: nothing to keep
        await reply.stream([NOTE2, NOTE3])
        assert self.answer is not None
        return await reply.finish(self.answer, status=200)


async def test_notes_and_answer_come_back_as_one_answered() -> None:
    facade = Facade(ANSWER)
    reply = await serve_retry(facade.post, ForwardedRetry("default", "alice", BODY, HEADERS))
    assert reply == Answered(200, [NOTE, NOTE2, NOTE3, ANSWER])
    assert facade.seen == [(7, "alice", HEADERS)]


async def test_with_a_relay_each_note_goes_ahead_as_it_is_written() -> None:
    relayed: list[NotesAhead] = []

    async def relay(notes: NotesAhead) -> None:
        relayed.append(notes)

    retry = ForwardedRetry("default", "alice", BODY, HEADERS, ahead=True)
    reply = await serve_retry(Facade(ANSWER).post, retry, relay)
    assert relayed == [NotesAhead(0, [NOTE]), NotesAhead(1, [NOTE2, NOTE3])]
    assert reply == Answered(200, [ANSWER], first=3)


async def test_notes_a_relay_could_not_send_come_with_the_answer() -> None:
    async def relay(notes: NotesAhead) -> None:
        if notes.seq > 0:
            raise StoreError("redis went away")

    retry = ForwardedRetry("default", "alice", BODY, HEADERS, ahead=True)
    reply = await serve_retry(Facade(ANSWER).post, retry, relay)
    assert reply == Answered(200, [NOTE2, NOTE3, ANSWER], first=1)


async def test_a_refusal_answers_the_request_by_its_id() -> None:
    reply = await serve_retry(Facade(refuse=True).post, ForwardedRetry("d", None, BODY, HEADERS))
    assert isinstance(reply, Refused) and reply.status == 400
    assert reply.error["id"] == 7 and reply.error["error"]["code"] == -32602


async def test_what_is_not_one_request_never_reaches_the_facade() -> None:
    facade = Facade()
    for body in ("not json", f"[{BODY},{BODY}]"):
        reply = await serve_retry(facade.post, ForwardedRetry("d", None, body, HEADERS))
        assert isinstance(reply, Refused) and 400 <= reply.status < 500, reply
    assert facade.seen == []


def test_the_mirrored_headers_are_keyed_as_the_checks_read_them() -> None:
    sent = CIMultiDict({"mcp-protocol-version": "2026-07-28", "MCP-METHOD": "x", "Other": "y"})
    assert retry_headers(sent) == {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "x"}


class ClientReply(Reply):
    """What the asker writes to its client, recorded."""

    def __init__(self) -> None:
        self.written: list[dict[str, Any]] = []

    @property
    def gone(self) -> bool:
        return False

    def due(self) -> float:
        return 3600.0

    async def stream(self, messages: list[dict[str, Any]]) -> None:
        self.written.extend(messages)

    async def finish(self, message: dict[str, Any], status: int = 200) -> web.StreamResponse:
        self.written.append(message)
        return web.Response(status=status)


async def test_the_asker_writes_each_note_once_in_order_whatever_comes_twice() -> None:
    """A part repeating notes already written (a relay retried), then a reply repeating
    one more: the client gets each once, then the answer."""

    async def holder(request: Forwarded, relay: Relay) -> ForwardReply:
        assert isinstance(request, ForwardedRetry) and request.ahead
        await relay(NotesAhead(0, [NOTE]))
        await relay(NotesAhead(0, [NOTE, NOTE2]))
        return Answered(200, [NOTE2, NOTE3, ANSWER], first=1)

    store = MemoryStore()
    await store.open()
    a = Replicas(store, "a", 30.0, 60.0, holder)
    b = Replicas(store, "b", 30.0, 60.0, holder)
    await a.start()
    await b.start()
    try:
        reply = ClientReply()
        (msg,), _ = parse_body(BODY.encode())
        await forward_retry(a, "default", "b", "call-1", msg, None, HEADERS, reply)
        assert reply.written == [NOTE, NOTE2, NOTE3, ANSWER]
    finally:
        await a.stop()
        await b.stop()
        await store.close()
