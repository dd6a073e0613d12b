"""The messages replicas send each other (proxy/forwarding.py, their wire form in
proxy/forwarding_wire.py): every kind survives the trip through JSON, and anything else is
refused with the one documented error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.forwarding import (
    Acked,
    Answered,
    Deleted,
    Forwarded,
    ForwardedAck,
    ForwardedDelete,
    ForwardedGet,
    ForwardedPost,
    ForwardedRetry,
    NoStream,
    NotesAhead,
    Refused,
    Reply,
    RetryCancel,
    StreamOpened,
    TaskActed,
    TaskCancel,
    TaskUpdate,
    UnknownTask,
)
from proxy.forwarding_fields import MalformedForward
from proxy.forwarding_seat import StandaloneRelease, StandaloneStopped, StandaloneTakeover, WsSocket
from proxy.forwarding_wire import (
    decode_notes,
    decode_reply,
    decode_request,
    encode_notes,
    encode_reply,
    encode_request,
)

REQUESTS: list[Forwarded] = [
    ForwardedPost("s1", "default", "alice", '{"jsonrpc":"2.0","id":1,"method":"ping"}', "e.0.3", 1),
    ForwardedPost("s1", "default", None, "[]"),
    ForwardedPost("s1", "other", "", "{}", None, "req-7"),
    ForwardedGet("s1", "default", "alice"),
    ForwardedGet("s1", "default", None, WsSocket("replica-b", "tok")),
    ForwardedDelete("s1", "default", None),
    ForwardedAck("s1", "default", "bob", "e.1.9"),
    TaskUpdate("t" * 32, {"q1": {"action": "accept"}}),
    TaskCancel("t" * 32),
    ForwardedRetry("default", "alice", '{"jsonrpc":"2.0","id":2}', {"Mcp-Method": "tools/call"}),
    ForwardedRetry("other", None, "{}", {}),
    ForwardedRetry("other", None, "{}", {}, ahead=True),
    RetryCancel("default", "alice", "c" * 16),
    StandaloneTakeover("tok"),
    StandaloneRelease("s1", "default", "alice", "tok", 7),
]

REPLIES: list[Reply] = [
    StreamOpened("e.1", 0),
    StreamOpened("e.4", 17),
    StreamOpened("e.2", 0, "e.2.0.1", 1000),
    StreamOpened("e.0", 5, "e.0.5.3"),
    NoStream(),
    Deleted(),
    Acked(),
    UnknownTask(),
    TaskActed(),
    Refused(404, {"jsonrpc": "2.0", "id": 3, "error": {"code": -32001, "message": "gone"}}),
    Answered(200, [{"jsonrpc": "2.0", "id": 3, "result": {}}]),
    Answered(503, [{"jsonrpc": "2.0", "method": "n"}, {"jsonrpc": "2.0", "id": 3, "error": {}}]),
    Answered(200, [{"jsonrpc": "2.0", "id": 3, "result": {}}], first=4),
    StandaloneStopped(12),
    StandaloneStopped(None),
]
NOTE = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}


def _through_json(obj: dict[str, Any]) -> object:
    """What the other replica reads: the store carries JSON."""
    return json.loads(json.dumps(obj))


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda r: type(r).__name__)
def test_every_request_survives_the_trip(request_: Forwarded) -> None:
    assert decode_request(_through_json(encode_request(request_))) == request_


@pytest.mark.parametrize("reply", REPLIES, ids=lambda r: type(r).__name__)
def test_every_reply_survives_the_trip(reply: Reply) -> None:
    assert decode_reply(_through_json(encode_reply(reply))) == reply


def test_the_wire_keeps_the_kinds_and_outcomes_it_had() -> None:
    """The shape on the wire: one ``kind`` per request, one ``outcome`` per reply."""
    assert [encode_request(r)["kind"] for r in REQUESTS] == [
        "post", "post", "post", "get", "get", "delete", "ack", "task_update", "task_cancel",
        "retry", "retry", "retry", "retry_cancel", "standalone_takeover", "standalone_release",
    ]  # fmt: skip
    assert [encode_reply(r)["outcome"] for r in REPLIES] == [
        "sse", "sse", "sse", "sse", "accepted", "deleted", "acked", "unknown_task", "done",
        "refused", "answered", "answered", "answered", "standalone_stopped",
        "standalone_stopped",
    ]  # fmt: skip
    assert encode_request(REQUESTS[0]) == {
        "kind": "post",
        "session": "s1",
        "server": "default",
        "principal": "alice",
        "body": '{"jsonrpc":"2.0","id":1,"method":"ping"}',
        "last_event_id": "e.0.3",
        "request_id": 1,
    }


def test_the_envelope_rides_along() -> None:
    """proxy.replicas adds ``id`` and ``from`` (``reply_to`` on replies); decoding ignores them."""
    wire = {**encode_request(REQUESTS[3]), "id": 12, "from": "replica-b"}
    assert decode_request(wire) == REQUESTS[3]
    assert decode_reply({**encode_reply(Acked()), "reply_to": 12}) == Acked()


def test_notes_ahead_survive_the_trip_and_are_no_reply() -> None:
    notes = NotesAhead(3, [NOTE, NOTE])
    wire = {**encode_notes(notes), "reply_to": 5}
    assert decode_notes(_through_json(wire)) == notes
    with pytest.raises(MalformedForward):
        decode_reply(wire)
    for bad in (
        {"outcome": "notes", "seq": -1, "messages": [NOTE]},
        {"outcome": "notes", "seq": True, "messages": [NOTE]},
        {"outcome": "notes", "seq": 0, "messages": []},
        {"outcome": "answered", "status": 200, "messages": [NOTE]},
    ):
        with pytest.raises(MalformedForward):
            decode_notes(bad)


def test_a_get_from_a_replica_from_before_sockets_reads_as_an_http_get() -> None:
    wire = {"kind": "get", "session": "s", "server": "d", "principal": None}
    assert decode_request(wire) == ForwardedGet("s", "d", None, None)


def test_what_a_replica_from_before_notes_ahead_sends_reads_as_without_them() -> None:
    """A rolling deploy: an asker that sends no ``ahead``, a holder no ``first``."""
    retry = encode_request(ForwardedRetry("d", None, "{}", {}))
    del retry["ahead"]
    assert decode_request(retry) == ForwardedRetry("d", None, "{}", {}, ahead=False)
    answered = {"outcome": "answered", "status": 200, "messages": [NOTE]}
    assert decode_reply(answered) == Answered(200, [NOTE], first=0)


def test_a_stream_opened_by_a_replica_from_before_priming_reads_as_unprimed() -> None:
    """A rolling deploy: a holder that sends no ``priming`` (nor ``retry_ms``)."""
    wire = {"outcome": "sse", "stream": "e.3", "after": 2}
    assert decode_reply(wire) == StreamOpened("e.3", 2, None, None)


@pytest.mark.parametrize(
    "wire",
    [
        None,
        [],
        "post",
        {},
        {"kind": "shout"},
        {"kind": "get", "session": "s", "server": "default"},  # principal may be null, not absent
        {"kind": "get", "session": 1, "server": "default", "principal": None},
        {"kind": "post", "session": "s", "server": "d", "principal": None},  # no body
        {"kind": "post", "session": "s", "server": "d", "principal": None, "body": "{}",
         "request_id": True},  # a boolean is no JSON-RPC id
        {"kind": "ack", "session": "s", "server": "d", "principal": None},  # no event id
        {"kind": "task_update", "task": "t", "responses": []},
        {"kind": "task_cancel"},
        {"kind": "retry", "server": "d", "principal": None, "body": "{}"},  # no headers
        {"kind": "retry", "server": "d", "principal": None, "body": "{}", "headers": {"a": 1}},
        {"kind": "retry", "server": "d", "body": "{}", "headers": {}},  # principal absent
        {"kind": "retry", "server": "d", "principal": None, "body": "{}", "headers": {},
         "ahead": 1},
        {"kind": "get", "session": "s", "server": "d", "principal": None, "socket": "b"},
        {"kind": "get", "session": "s", "server": "d", "principal": None,
         "socket": {"replica": "b"}},
        {"kind": "standalone_takeover"},
        {"kind": "standalone_release", "session": "s", "server": "d", "principal": None,
         "token": "t"},  # how far
        {"kind": "standalone_release", "session": "s", "server": "d", "principal": None,
         "token": "t", "upto": -1},
        {"kind": "retry_cancel", "server": "d", "principal": None},  # which call
        {"kind": "retry_cancel", "server": "d", "call": "c"},  # principal absent
    ],
)  # fmt: skip
def test_malformed_requests_are_refused(wire: object) -> None:
    with pytest.raises(MalformedForward):
        decode_request(wire)


@pytest.mark.parametrize(
    "wire",
    [
        None,
        {},
        {"outcome": "maybe"},
        {"outcome": "sse", "stream": "e.1"},
        {"outcome": "sse", "stream": "e.1", "after": -1},
        {"outcome": "sse", "stream": "e.1", "after": True},
        {"outcome": "sse", "stream": "e.1", "after": 0, "priming": "e.2.0.1"},  # another's
        {"outcome": "sse", "stream": "e.1", "after": 0, "priming": 7},
        {"outcome": "sse", "stream": "e.1", "after": 0, "retry_ms": -1},
        {"outcome": "sse", "stream": "e.1", "after": 0, "retry_ms": "1000"},
        {"outcome": "refused", "status": 200, "error": {}},
        {"outcome": "refused", "status": 404, "error": "gone"},
        {"status": 404, "error": {}},  # a refusal says so
        {"outcome": "answered", "status": 200, "messages": []},  # no answer in it
        {"outcome": "answered", "status": 200, "messages": ["x"]},
        {"outcome": "answered", "status": 100, "messages": [{}]},
        {"outcome": "answered", "status": True, "messages": [{}]},
        {"outcome": "answered", "status": 200, "messages": [{}], "first": -1},
        {"outcome": "standalone_stopped"},  # null if none, never absent
        {"outcome": "standalone_stopped", "upto": "3"},
        {"outcome": "answered", "status": 200, "messages": [{}], "first": "2"},
    ],
)
def test_malformed_replies_are_refused(wire: object) -> None:
    with pytest.raises(MalformedForward):
        decode_reply(wire)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
FIELDS = [
    "session", "server", "principal", "body", "last_event_id", "request_id", "task",
    "responses", "stream", "after", "status", "error", "priming", "retry_ms", "headers",
    "messages", "call", "ahead", "first", "seq", "socket", "token", "upto",
]  # fmt: skip
KINDS = [
    "post", "get", "delete", "ack", "task_update", "task_cancel", "retry", "retry_cancel",
    "standalone_takeover", "standalone_release",
]  # fmt: skip
OUTCOMES = [
    "sse", "accepted", "deleted", "acked", "unknown_task", "done", "refused", "answered",
    "standalone_stopped",
]  # fmt: skip


def _near_misses(key: str, names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with a real kind (or outcome) and any of the real field names, of any
    JSON value: garbage that gets past the first check."""
    return st.builds(
        lambda name, fields: {**fields, key: name},
        st.sampled_from(names),
        st.dictionaries(st.sampled_from(FIELDS), JSON),
    )


@settings(deadline=None)  # a loaded machine is no failure
@given(JSON | _near_misses("kind", KINDS))
def test_any_garbage_decodes_as_a_request_or_raises_malformed(wire: object) -> None:
    try:
        request = decode_request(wire)
    except MalformedForward:
        return
    assert decode_request(_through_json(encode_request(request))) == request


@settings(deadline=None)
@given(JSON | _near_misses("outcome", OUTCOMES))
def test_any_garbage_decodes_as_a_reply_or_raises_malformed(wire: object) -> None:
    try:
        reply = decode_reply(wire)
    except MalformedForward:
        return
    assert decode_reply(_through_json(encode_reply(reply))) == reply
