"""proxy/core/handshake.py, and the marks the session puts on the client's own handshake
as it forwards it (``SendUpstream.handshake``), so that no transport sniffs bytes."""

from __future__ import annotations

import json

import pytest

from proxy.core.errors import UpstreamStartFailed
from proxy.core.events import SendUpstream
from proxy.core.handshake import (
    HandshakeStep,
    client_params,
    initialize_result,
    initialized_notification,
    proxy_params,
)
from proxy.core.jsonrpc import classify
from tests.core.playbook import Playbook, note, ok, req


def marks(commands: list[object]) -> list[tuple[str | None, HandshakeStep | None]]:
    return [
        (json.loads(c.payload).get("method"), c.handshake)
        for c in commands
        if isinstance(c, SendUpstream)
    ]


def test_the_session_marks_the_clients_initialize_and_initialized_only() -> None:
    pb = Playbook()
    params = {"protocolVersion": "2025-11-25", "capabilities": {}}
    out = pb.post(pb.conn(), req("i", "initialize", params))
    assert marks(out) == [("initialize", HandshakeStep.INITIALIZE)]
    pb.upstream(ok(1, {"protocolVersion": "2025-11-25", "capabilities": {}}))
    out = pb.post(pb.conn(), note("notifications/initialized"))
    assert marks(out) == [("notifications/initialized", HandshakeStep.INITIALIZED)]
    out = pb.post(pb.conn(), req(2, "tools/list"))
    out += pb.post(pb.conn(), note("notifications/roots/list_changed"))
    assert marks(out) == [("tools/list", None), ("notifications/roots/list_changed", None)]


def test_a_request_that_merely_mentions_initialize_is_not_marked() -> None:
    pb = Playbook()
    pb.initialize()
    out = pb.post(pb.conn(), req(5, "tools/call", {"name": "initialize", "arguments": {}}))
    assert marks(out) == [("tools/call", None)]


def test_proxy_params() -> None:
    assert proxy_params("1.2.3") == {
        "protocolVersion": "2025-11-25",
        "capabilities": {"elicitation": {"form": {}, "url": {}}, "sampling": {}, "roots": {}},
        "clientInfo": {"name": "mcp-resume-proxy", "version": "1.2.3"},
    }


def test_client_params() -> None:
    assert client_params(req(1, "initialize", {"protocolVersion": "x"})) == {"protocolVersion": "x"}
    assert client_params(req(1, "initialize")) == {}


def test_initialize_result() -> None:
    answer = classify(ok(1, {"protocolVersion": "2025-11-25", "capabilities": {}}))
    assert initialize_result(answer) == {"protocolVersion": "2025-11-25", "capabilities": {}}
    refused = classify({"jsonrpc": "2.0", "id": 1, "error": {"code": -32602, "message": "no"}})
    with pytest.raises(UpstreamStartFailed) as caught:
        initialize_result(refused)
    assert caught.value.message == (
        "the MCP server refused initialize: {'code': -32602, 'message': 'no'}"
    )
    with pytest.raises(UpstreamStartFailed, match="refused initialize: None"):
        initialize_result(classify({"jsonrpc": "2.0", "id": 1, "result": 3}))


def test_an_upstream_that_refuses_the_proxy_is_named_by_the_proxys_own_message() -> None:
    # The answer the HTTP upstream writes for a 401 it cannot cure (proxy/upstream/oauth.py):
    # readiness reports its message as it is, not a dict's repr.
    error = {
        "code": -32000,
        "message": "upstream 'x' refuses the proxy: …; run `mcp-resume-proxy login x`",
        "data": {"reason": "upstream_unauthorized", "server": "x", "action": "run login"},
    }
    refused = classify({"jsonrpc": "2.0", "id": 1, "error": error})
    with pytest.raises(UpstreamStartFailed) as caught:
        initialize_result(refused)
    assert caught.value.message == error["message"]


def test_initialized_notification() -> None:
    assert initialized_notification() == {
        "jsonrpc": "2.0",
        "method": "notifications/initialized",
    }
