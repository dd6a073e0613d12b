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
from proxy.core.jsonrpc import Message
from proxy.forwarding import Answered, ForwardedRetry, NotesAhead, Refused
from proxy.modern.reply import Reply
from proxy.modern.retry_forward import retry_headers, serve_retry
from proxy.store.base import StoreError

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
