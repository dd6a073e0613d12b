"""proxy.core.admission: the decisions /mcp and /ws make before a POST reaches a session."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core import jsonrpc
from proxy.core.admission import (
    PostAdmission,
    admit_post,
    check_initialize,
    check_upstream_reading,
    initialize_of,
)
from proxy.core.errors import BadRequest, Overloaded, SessionNotFound
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
