"""The call machine of a pooled upstream session: exact commands for each event.

Mirrors ``proxy/core/calltable.py`` and ``proxy/core/call.py``: id and progress-token
rewriting, routing of the server's messages (DESIGN.md §5), questions becoming input
requests (MRTR), answers, refusals, cancel, fail, and a lost session.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import jsonrpc
from proxy.core.call import (
    KEY_HINT,
    MAX_NOTES,
    TERMINAL,
    TRANSITIONS,
    Call,
    CallEvent,
    CallStatus,
    IllegalCallTransition,
    advance,
)
from proxy.core.calltable import (
    AnswerInput,
    AskServer,
    AwaitAnswer,
    BeginCall,
    Broadcast,
    CallChanged,
    CallReleased,
    CallTable,
    CancelCall,
    FailCall,
    Idle,
    OwnAnswer,
    RejectInput,
    ServerMessage,
    SessionLost,
    TableCommand,
)
from proxy.core.era import ModernRequest
from tests.core.playbook import note, ok, progress, req, up

ASKS = {"elicitation": {}, "sampling": {}, "roots": {}}


def client(
    capabilities: dict[str, Any] | None = None,
    token: Any = None,
    log_level: str | None = None,
) -> ModernRequest:
    return ModernRequest(
        version="2026-07-28",
        capabilities=capabilities or {},
        client_info=None,
        log_level=log_level,
        progress_token=token,
    )


def elicit(rid: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {"message": "name?", "requestedSchema": {}}
    if meta is not None:
        params["_meta"] = meta
    return req(rid, "elicitation/create", params)


class Book:
    """One table on a fake session: feed it events, read the commands."""

    def __init__(self, *, tied: bool = False) -> None:
        self.table = CallTable(tied_by_stream=tied)

    def begin(
        self, method: str = "tools/call", who: ModernRequest | None = None, **params: Any
    ) -> tuple[Call, list[TableCommand]]:
        call = Call(method, params or {"name": "slow"}, who or client(), None)
        return call, self.table.handle(BeginCall(call, params or {"name": "slow"}))

    def server(self, obj: dict[str, Any], origin: int | None = None) -> list[TableCommand]:
        return self.table.handle(ServerMessage(jsonrpc.classify(obj), origin))


# ------------------------------------------------------------------ the status table
def test_every_status_has_its_moves_and_the_ends_have_none() -> None:
    assert set(TRANSITIONS) == set(CallStatus)
    assert {CallStatus.COMPLETED, CallStatus.FAILED, CallStatus.CANCELLED} == TERMINAL
    assert advance(CallStatus.WORKING, CallEvent.ASK) is CallStatus.INPUT_REQUIRED
    assert advance(CallStatus.INPUT_REQUIRED, CallEvent.ANSWERED) is CallStatus.WORKING
    for end in TERMINAL:
        for event in CallEvent:
            with pytest.raises(IllegalCallTransition):
                advance(end, event)
    with pytest.raises(IllegalCallTransition):
        advance(CallStatus.WORKING, CallEvent.ANSWERED)


def test_task_records_share_the_terminal_set() -> None:
    from proxy.core.taskrecord import TERMINAL as RECORD_TERMINAL

    assert {status.value for status in TERMINAL} == RECORD_TERMINAL


# ------------------------------------------------------------------ ids and tokens
def test_a_call_goes_out_with_the_tables_own_id() -> None:
    book = Book()
    first, out = book.begin(name="a")
    assert out == [up(req(1, "tools/call", {"name": "a"}))]
    second, out = book.begin(name="b")
    assert out == [up(req(2, "tools/call", {"name": "b"}))]
    assert (first.upstream_id, second.upstream_id) == (1, 2)
    assert len(book.table) == 2


def test_a_progress_token_is_rewritten_to_the_upstream_id_and_back() -> None:
    book = Book()
    call, out = book.begin(
        who=client(token="client-tok"), name="slow", _meta={"progressToken": "client-tok"}
    )
    assert out == [up(req(1, "tools/call", {"name": "slow", "_meta": {"progressToken": 1}}))]
    assert book.server(progress(1, 5)) == [CallChanged(call)]
    assert call.take_notes() == [progress("client-tok", 5)]


def test_progress_is_dropped_when_the_client_gave_no_token() -> None:
    book = Book()
    call, out = book.begin(name="slow")
    assert out == [up(req(1, "tools/call", {"name": "slow"}))]
    assert book.server(progress(1, 5)) == []
    assert call.take_notes() == []


def test_a_progress_token_true_is_not_call_one() -> None:
    """``True == 1`` in Python: a server's ``progressToken: true`` must not reach call 1
    (the pool matched it with ``isinstance(token, int)``; the IdMap's guard refuses it).
    Responses never get here with such an id: the JSON-RPC classifier refuses them."""
    book = Book()
    call, _ = book.begin(who=client(token="t"), name="slow", _meta={"progressToken": "t"})
    assert call.upstream_id == 1
    assert book.server(progress(True, 1)) == []
    assert call.take_notes() == []
    assert book.server(progress(1, 2)) == [CallChanged(call)]
    assert call.take_notes() == [progress("t", 2)]


# ------------------------------------------------------------------ answers
def test_the_answer_completes_and_releases_the_call() -> None:
    book = Book()
    call, _ = book.begin()
    assert book.server(ok(1, {"content": []})) == [CallChanged(call), CallReleased(call), Idle()]
    assert call.outcome == ok(1, {"content": []})
    assert len(book.table) == 0
    assert book.server(ok(1, {"late": True})) == []  # released: a second answer is nothing


def test_an_error_answer_fails_the_call() -> None:
    book = Book()
    call, _ = book.begin()
    error = {"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "bad"}}
    assert book.server(error) == [CallChanged(call), CallReleased(call), Idle()]
    assert call.status is CallStatus.FAILED and call.outcome == error


def test_idle_only_once_the_last_call_is_released() -> None:
    book = Book()
    first, _ = book.begin(name="a")
    second, _ = book.begin(name="b")
    assert book.server(ok(1)) == [CallChanged(first), CallReleased(first)]
    assert book.server(ok(2)) == [CallChanged(second), CallReleased(second), Idle()]


# ------------------------------------------------------------------ the server's requests
def test_ping_is_answered_and_unknown_methods_refused() -> None:
    book = Book()
    assert book.server(req("s1", "ping")) == [up(ok("s1"))]
    refused = {
        "jsonrpc": "2.0",
        "id": "s2",
        "error": {"code": -32601, "message": "Method not found: x/y"},
    }
    assert book.server(req("s2", "x/y")) == [up(refused)]


def test_a_question_of_the_only_call_becomes_an_input_request() -> None:
    book = Book()
    call, _ = book.begin(who=client(ASKS))
    assert call.exclusive
    assert book.server(elicit("s1")) == [CallChanged(call)]
    assert call.status is CallStatus.INPUT_REQUIRED
    assert call.input_requests() == {
        "elicitation-1": {"method": "elicitation/create", "params": elicit("s1")["params"]}
    }


def test_a_named_key_is_used_once_and_the_hint_stripped() -> None:
    book = Book()
    call, _ = book.begin(who=client(ASKS))
    book.server(elicit("s1", {KEY_HINT: "user_name"}))
    book.server(elicit("s2", {KEY_HINT: "user_name", "other": 1}))
    requests = call.input_requests()
    assert list(requests) == ["user_name", "elicitation-1"]
    assert "_meta" not in requests["user_name"]["params"]
    assert requests["elicitation-1"]["params"]["_meta"] == {"other": 1}


def test_a_question_the_client_cannot_answer_is_refused_upstream() -> None:
    book = Book()
    call, _ = book.begin(who=client({"sampling": {}}))
    refused = {
        "jsonrpc": "2.0",
        "id": "s1",
        "error": {"code": -32601, "message": "the client does not support elicitation/create"},
    }
    assert book.server(elicit("s1")) == [up(refused)]
    assert call.refused == {"elicitation": {}} and call.status is CallStatus.WORKING


def test_a_question_nobody_can_own_is_refused() -> None:
    book = Book()
    book.begin("tools/list")
    book.begin("prompts/list")
    refused = {
        "jsonrpc": "2.0",
        "id": "s1",
        "error": {
            "code": -32603,
            "message": "mcp-resume-proxy: no single request in flight that this belongs to",
        },
    }
    assert book.server(elicit("s1")) == [up(refused)]


def test_of_several_calls_the_only_one_that_may_ask_owns_the_question() -> None:
    book = Book()
    book.begin("tools/list")
    call, _ = book.begin(who=client(ASKS))
    assert book.server(elicit("s1")) == [CallChanged(call)]


def test_over_streamable_http_the_stream_names_the_owner() -> None:
    book = Book(tied=True)
    first, _ = book.begin(who=client(ASKS))
    second, _ = book.begin(who=client(ASKS))
    assert book.server(elicit("s1"), origin=2) == [CallChanged(second)]
    refused = book.server(elicit("s2"))  # on the GET stream: nobody's
    assert refused[0] == up(
        {
            "jsonrpc": "2.0",
            "id": "s2",
            "error": {
                "code": -32603,
                "message": "mcp-resume-proxy: no single request in flight that this belongs to",
            },
        }
    )
    assert first.pending == {}


def test_a_question_after_the_answer_is_refused() -> None:
    book = Book()
    call, _ = book.begin(who=client(ASKS))
    assert call.respond(jsonrpc.classify(ok(1)))
    changed, out = call.ask(jsonrpc.classify(elicit("s9")))
    assert not changed
    assert out == [
        {
            "jsonrpc": "2.0",
            "id": "s9",
            "error": {"code": -32000, "message": "the request was already answered"},
        }
    ]


# ------------------------------------------------------------------ notifications
def test_log_messages_follow_the_requests_level() -> None:
    book = Book()
    call, _ = book.begin(who=client(log_level="warning"))
    info = note("notifications/message", {"level": "info", "data": "x"})
    error = note("notifications/message", {"level": "error", "data": "y"})
    assert book.server(info) == []
    assert book.server(error) == [CallChanged(call)]
    assert call.take_notes() == [error]


def test_notes_are_capped_for_a_client_that_does_not_read() -> None:
    book = Book()
    call, _ = book.begin(who=client(token="t"), name="slow", _meta={"progressToken": "t"})
    for n in range(MAX_NOTES + 5):
        book.server(progress(1, n))
    assert len(call.notes) == MAX_NOTES


def test_a_task_carries_no_notes() -> None:
    book = Book()
    call, _ = book.begin(who=client(token="t"), name="slow", _meta={"progressToken": "t"})
    call.task_id = "task-1"
    assert book.server(progress(1, 1)) == []


def test_list_changed_is_broadcast() -> None:
    book = Book()
    changed = note("notifications/tools/list_changed")
    out = book.server(changed)
    assert len(out) == 1 and isinstance(out[0], Broadcast) and out[0].msg.raw == changed


# ------------------------------------------------------------------ the client's moves
def test_answers_go_to_the_server_and_the_call_works_again() -> None:
    book = Book()
    call, _ = book.begin(who=client(ASKS))
    book.server(elicit("s1"))
    book.server(elicit("s2"))
    out = book.table.handle(AnswerInput(call, {"elicitation-1": {"action": "accept"}, "nope": {}}))
    assert out == [up(ok("s1", {"action": "accept"})), CallChanged(call)]
    assert call.status is CallStatus.INPUT_REQUIRED
    out = book.table.handle(AnswerInput(call, {"elicitation-2": "not an object"}))
    bad = {
        "jsonrpc": "2.0",
        "id": "s2",
        "error": {"code": -32602, "message": "the client's answer is not an object"},
    }
    assert out == [up(bad), CallChanged(call)]
    assert call.status is CallStatus.WORKING


def test_a_refused_question_tells_the_server() -> None:
    book = Book()
    call, _ = book.begin(who=client(ASKS))
    book.server(elicit("s1"))
    error = {"code": -1, "message": "no"}
    out = book.table.handle(RejectInput(call, "elicitation-1", error))
    assert out == [up({"jsonrpc": "2.0", "id": "s1", "error": error}), CallChanged(call)]
    assert call.status is CallStatus.WORKING
    assert book.table.handle(RejectInput(call, "elicitation-1", error)) == []


def test_cancel_answers_the_servers_questions_and_stops_the_request() -> None:
    book = Book()
    call, _ = book.begin(who=client(ASKS))
    book.server(elicit("s1"))
    out = book.table.handle(CancelCall(call, "gone"))
    assert out == [
        up(
            {
                "jsonrpc": "2.0",
                "id": "s1",
                "error": {"code": -32800, "message": "request cancelled"},
            }
        ),
        up(note("notifications/cancelled", {"requestId": 1, "reason": "gone"})),
        CallChanged(call),
        CallReleased(call),
        Idle(),
    ]
    assert call.status is CallStatus.CANCELLED and call.status_message == "gone"
    assert book.server(ok(1)) == []  # its late answer is nobody's
    assert book.table.handle(CancelCall(call, "again")) == []


def test_fail_stops_the_request_and_keeps_the_error() -> None:
    book = Book()
    call, _ = book.begin()
    error = {"code": -32000, "message": "shutting down", "data": {"reason": "proxy_shutdown"}}
    out = book.table.handle(FailCall(call, error))
    assert out == [
        up(note("notifications/cancelled", {"requestId": 1, "reason": "shutting down"})),
        CallChanged(call),
        CallReleased(call),
        Idle(),
    ]
    assert call.outcome == {"jsonrpc": "2.0", "id": None, "error": error}


def test_a_call_not_on_a_session_moves_without_messages() -> None:
    call = Call("tools/call", {}, client(ASKS), None)
    assert call.answer({"k": {}}) == (False, [])
    assert call.cancel("no session") == (True, [])
    assert call.status is CallStatus.CANCELLED


# ------------------------------------------------------------------ a lost session
def test_a_lost_session_fails_every_call_and_refuses_new_ones() -> None:
    book = Book()
    first, _ = book.begin(name="a")
    out = book.table.handle(SessionLost("exited"))
    assert out == [CallChanged(first), CallReleased(first)]
    assert first.outcome == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32000,
            "message": "the MCP server session ended: exited",
            "data": {"reason": "upstream_closed"},
        },
    }
    late, out = book.begin(name="b")
    assert out == [CallChanged(late)] and late.status is CallStatus.FAILED
    assert book.table.handle(SessionLost("again")) == []


# ------------------------------------------------------------------ the proxy's own requests
def test_own_requests_share_the_id_space_and_are_answered_to_the_proxy() -> None:
    book = Book()
    out = book.table.handle(AskServer("tools/list", {}))
    assert out == [AwaitAnswer(1), up(req(1, "tools/list", {}))]
    call, out = book.begin(who=client(ASKS))
    assert out == [up(req(2, "tools/call", {"name": "slow"}))]
    # Rule 4 counts calls, not the proxy's own requests: the question is the call's.
    assert book.server(elicit("s1")) == [CallChanged(call)]
    answered = book.server(ok(1, {"tools": []}))
    assert len(answered) == 1 and isinstance(answered[0], OwnAnswer)
    assert answered[0].request_id == 1 and answered[0].msg.raw == ok(1, {"tools": []})
