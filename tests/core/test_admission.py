"""proxy.core.admission: the decisions /mcp and /ws make before a POST reaches a session."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import jsonrpc
from proxy.core.admission import (
    PostAdmission,
    admit_post,
    check_draining,
    check_initialize,
    check_modern_draining,
    check_upstream_reading,
    initialize_of,
)
from proxy.core.errors import BadRequest, Draining, Overloaded, SessionNotFound
from proxy.core.jsonrpc import Message
from tests.core.playbook import Playbook, note, ok, req


def msgs(*objs: dict[str, Any]) -> list[Message]:
    return [jsonrpc.classify(o) for o in objs]


def test_initialize_is_found_among_requests_only() -> None:
    init = msgs(req(1, "initialize", {}))
    assert initialize_of(init) == init[0]
    assert initialize_of(msgs(note("initialize"), ok(3))) is None
    assert initialize_of(msgs(req(1, "ping"))) is None


def test_a_post_without_initialize_goes_to_its_session() -> None:
    admission = admit_post(msgs(req(1, "tools/list")), False, initialized=True, accepting=False)
    assert admission == PostAdmission(None)
    assert not admission.opens_session


def test_a_lone_initialize_opens_a_session() -> None:
    init = msgs(req(0, "initialize", {}))
    admission = admit_post(init, False, initialized=False, accepting=True)
    assert admission.initialize == init[0]
    assert admission.opens_session


@pytest.mark.parametrize(
    ("messages", "batch"),
    [
        (msgs(req(0, "initialize", {})), True),  # a batch of one is still a batch
        (msgs(req(0, "initialize", {}), req(1, "ping")), True),
        (msgs(req(0, "initialize", {}), note("notifications/initialized")), False),
    ],
)
def test_initialize_must_come_alone(messages: list[Message], batch: bool) -> None:
    with pytest.raises(BadRequest, match="initialize must not be part of a batch"):
        admit_post(messages, batch, initialized=False, accepting=True)


def test_initialize_comes_once() -> None:
    with pytest.raises(BadRequest, match="already initialized"):
        admit_post(msgs(req(0, "initialize", {})), False, initialized=True, accepting=True)


def test_the_shape_is_checked_before_shutdown() -> None:
    """A malformed initialize is a 400 even while shutting down (the order both edges had)."""
    with pytest.raises(BadRequest):
        admit_post(msgs(req(0, "initialize", {})), True, initialized=False, accepting=False)


def test_no_new_session_while_shutting_down() -> None:
    with pytest.raises(SessionNotFound, match="shutting down"):
        admit_post(msgs(req(0, "initialize", {})), False, initialized=False, accepting=False)


def test_check_initialize_without_initialize_says_none() -> None:
    assert check_initialize(msgs(req(1, "ping"), req(2, "ping")), True, initialized=True) is None


def test_a_server_that_does_not_read_refuses_posts() -> None:
    check_upstream_reading(100, 100)  # at the limit: still accepted
    with pytest.raises(Overloaded) as refused:
        check_upstream_reading(101, 100)
    assert refused.value.reason == "upstream_busy"
    assert refused.value.http_status == 503


def test_the_session_applies_the_same_rule() -> None:
    """The core session refuses a second initialize with the edges' words, leaving no trace."""
    pb = Playbook()
    pb.initialize()
    with pytest.raises(BadRequest, match="already initialized"):
        pb.post(pb.conn(), req(1, "initialize", {}))


# ---------------------------------------------------------------------- draining
def _refused_while_draining(
    messages: list[Message], batch: bool = False, *, initialized: bool = True
) -> Draining:
    with pytest.raises(Draining) as refused:
        admit_post(messages, batch, initialized=initialized, accepting=True, draining=True)
    return refused.value


def test_a_draining_replica_refuses_new_sessions_with_503_and_retry_after() -> None:
    init = msgs(req(0, "initialize", {}))
    refused = _refused_while_draining(init, initialized=False)
    assert (refused.http_status, refused.jsonrpc_code) == (503, -32000)
    assert refused.retry_after >= 1
    assert refused.to_jsonrpc(0)["error"]["data"] == {"reason": "proxy_draining"}
    # Not draining: the same initialize opens its session.
    assert admit_post(init, False, initialized=False, accepting=True, draining=False).initialize


@pytest.mark.parametrize("method", ["tools/call", "tools/list", "resources/read", "prompts/get"])
def test_a_draining_replica_refuses_new_calls(method: str) -> None:
    _refused_while_draining(msgs(req(1, method, {})))


def test_a_batch_with_one_new_call_is_refused_whole() -> None:
    _refused_while_draining(msgs(ok(7), req(1, "tools/call", {})), batch=True)


@pytest.mark.parametrize(
    "message",
    [
        ok(7),  # the answer to a server's question: it finishes a call in flight
        {"jsonrpc": "2.0", "id": 8, "error": {"code": -1, "message": "declined"}},
        note("notifications/cancelled", {"requestId": 1}),
        note("notifications/initialized"),
        req(2, "stream/poll", {"streamId": "s", "resumeToken": "t"}),
        req(3, "stream/resume", {"streamId": "s", "resumeToken": "t"}),
        req(4, "tasks/get", {"taskId": "x"}),
        req(5, "tasks/result", {"taskId": "x"}),
        req(6, "tasks/list", {}),
        req(7, "tasks/cancel", {"taskId": "x"}),
        req(8, "ping"),
    ],
)
def test_what_finishes_work_in_flight_passes_a_drain(message: dict[str, Any]) -> None:
    admission = admit_post(msgs(message), False, initialized=True, accepting=True, draining=True)
    assert not admission.opens_session
    check_draining(msgs(message), draining=True)


def test_nothing_is_refused_when_not_draining() -> None:
    check_draining(msgs(req(1, "tools/call", {}), req(0, "initialize", {})), draining=False)


def test_shutting_down_comes_before_draining() -> None:
    """Once the proxy stops accepting, an initialize gets the 404 of shutdown, as before."""
    with pytest.raises(SessionNotFound):
        admit_post(
            msgs(req(0, "initialize", {})), False, initialized=False, accepting=False, draining=True
        )


@pytest.mark.parametrize(
    ("method", "params", "refused"),
    [
        ("server/discover", {}, True),  # a modern client's first request
        ("tools/call", {"name": "slow"}, True),  # a new call
        ("tools/list", {}, True),
        ("subscriptions/listen", {}, True),  # a new listen stream
        ("tools/call", {"name": "ask", "requestState": "s"}, False),  # an MRTR retry
        ("tasks/get", {"taskId": "x"}, False),
        ("tasks/update", {"taskId": "x", "inputResponses": {}}, False),
        ("tasks/cancel", {"taskId": "x"}, False),
        ("no/such/method", {}, False),  # answered -32601 as ever
    ],
)
def test_modern_requests_while_draining(method: str, params: dict[str, Any], refused: bool) -> None:
    check_modern_draining(method, params, tasks_enabled=True, draining=False)
    if refused:
        with pytest.raises(Draining):
            check_modern_draining(method, params, tasks_enabled=True, draining=True)
    else:
        check_modern_draining(method, params, tasks_enabled=True, draining=True)
