"""Ending a session: proxy shutdown answers every request in flight; DELETE says who ended it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.core.events import (
    ClientDelete,
    ClientDetached,
    CloseClient,
    ForgetSession,
    ProxyShutdown,
    SendToClient,
    StopUpstream,
    UpstreamClosed,
)
from proxy.core.jsonrpc import encode, error_response
from proxy.core.protocol import SERVER_ERROR
from proxy.core.stream import StreamLog
from tests.core.playbook import Playbook, payloads, req, upstream_sent

SHUTDOWN_DATA = {"reason": "proxy_shutdown"}


def shutdown_error(rid: Any) -> dict[str, Any]:
    return error_response(rid, SERVER_ERROR, "the proxy is shutting down", SHUTDOWN_DATA)


def call(pb: Playbook, rid: Any) -> tuple[Any, int]:
    c = pb.conn()
    out = pb.post(c, req(rid, "tools/call", {"name": "slow"}))
    return c, upstream_sent(out)[0]["id"]


def test_shutdown_answers_an_attached_request_before_its_stream_ends() -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb, 7)
    out = pb.feed(ProxyShutdown())
    assert out == [
        SendToClient(c, "ep0ch.2.1", encode(shutdown_error(7))),
        CloseClient(c),
        StopUpstream("proxy shutting down"),
        ForgetSession("proxy shutting down"),
    ]
    assert pb.session.forgotten and pb.session.buffered_bytes == 0


def test_shutdown_answers_every_request_of_every_stream_and_closes_the_standalone() -> None:
    pb = Playbook(version="2025-03-26")
    pb.initialize()
    g = pb.conn()
    pb.get(g)
    c = pb.conn()
    pb.post(c, req(1, "tools/call", {"name": "a"}), req("two", "tools/call", {"name": "b"}))
    d, _ = call(pb, 3)
    out = pb.feed(ProxyShutdown())
    assert payloads(out, c) == [shutdown_error(1), shutdown_error("two")]
    assert payloads(out, d) == [shutdown_error(3)]
    closes = [x for x in out if isinstance(x, CloseClient)]
    assert sorted(x.conn for x in closes) == sorted([c, d, g])
    for conn in (c, d):  # each connection's answer is queued before its end
        sent = [i for i, x in enumerate(out) if isinstance(x, SendToClient) and x.conn == conn]
        assert max(sent) < out.index(CloseClient(conn))
    assert out[-1] == ForgetSession("proxy shutting down")


def test_shutdown_logs_the_answer_of_a_detached_request(monkeypatch: pytest.MonkeyPatch) -> None:
    pb = Playbook()
    pb.initialize()
    c, _ = call(pb, 7)
    pb.feed(ClientDetached(c))
    appended: list[bytes] = []
    real_append = StreamLog.append

    def recording_append(log: StreamLog, payload: bytes, *args: Any, **kwargs: Any) -> int:
        appended.append(payload)
        return real_append(log, payload, *args, **kwargs)

    monkeypatch.setattr(StreamLog, "append", recording_append)
    out = pb.feed(ProxyShutdown())
    assert [json.loads(p) for p in appended] == [shutdown_error(7)]
    assert not [x for x in out if isinstance(x, SendToClient)], "nobody to send it to"
    assert out[-2:] == [StopUpstream("proxy shutting down"), ForgetSession("proxy shutting down")]


def test_shutdown_after_the_upstream_exited_only_forgets() -> None:
    pb = Playbook()
    pb.initialize()
    pb.feed(UpstreamClosed("exit 1"))
    out = pb.feed(ProxyShutdown())
    assert out == [ForgetSession("proxy shutting down")]


def test_delete_is_logged_as_the_clients_and_other_ends_by_their_reason() -> None:
    pb = Playbook()
    pb.initialize()
    assert pb.feed(ClientDelete())[-1] == ForgetSession("deleted by client")
    other = Playbook()
    other.initialize()
    assert other.feed(ClientDelete("initialize refused"))[-1] == ForgetSession("initialize refused")
